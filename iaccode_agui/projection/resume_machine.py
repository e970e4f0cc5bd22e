"""Resuming an interrupted run: the rules that check the answers, and the machine that walks a resume.

How a resume walks through ``ResumeMachine`` (each step is a phase of ``projection.resume_phases``; the
shell in ``runs.resume_driver`` executes the command the machine asks for and reports what the upstream answered
with ``observe``):

1. *Check*: with no task or nothing pending there is nothing to resume.  A replay of answers already
   applied is ``RESUME_ALREADY_APPLIED``, answers to expired interrupts ``EXECUTION_EXPIRED``, anything
   else ``EXECUTION_LOST``.
2. *Restore*: an iac-code session must be live again before anything reaches its task (``RestoreSession``).
3. *Snapshot*: ``FetchTask`` must show the interrupted run's own task and context; its input projection
   says what the task waits for.
4. *Recover*: an answer sent before a crash but never seen accepted is committed now (``RecordAnswer``)
   when the snapshot proves the runtime consumed it (``projection.inflight``), and the text of the turn
   it started is shown; when the snapshot cannot tell, it is resent and a refusal decides.  A terminal
   task ends the resume unless the client replays exactly those answers.
5. *Catch up*: a pipeline run first recovers the events it missed (``RecoverPipeline``).
6. *Plan*: every answer is checked before anything is sent (``plan_resume``), so a refused resume leaves
   every interrupt pending; inputs the client never saw are announced again instead (discovery).
7. *Deliver*: answer by answer in pending order: ``RecordInFlight``, then ``SendAnswer`` (streamed or
   sideband) or, for a cancelled question, ``CancelTask``.  Each answer is committed when the runtime
   accepts it (the first frame of its stream), so a lost answer stays retryable and a replayed one never
   runs a tool twice.
8. *Follow*: when no boundary was seen, the task is followed to its next one (catch-up, ``FetchTask``,
   ``Subscribe``, a last ``FetchTask``) and given up (``CancelTask``, ``A2A_UNAVAILABLE``) when none comes.

``Emit`` carries projector outputs; the shell applies them (effects durable before events visible).
The machine and the rules do no I/O, so tests drive them with lists of dicts.
"""
from typing import Any, Callable, Dict, List, Optional, Tuple

from iaccode_agui import errors
from iaccode_agui.a2a import dialect
from iaccode_agui.errors import AguiError
from iaccode_agui.projection import answers as encode
from iaccode_agui.projection.answers import UpstreamAnswer
from iaccode_agui.projection.inflight import judge_in_flight
from iaccode_agui.projection.resume_commands import (CancelTask, Command, Delivery, Emit, FetchTask, Finished,
                                                     RecordAnswer, RecordInFlight, RecordInterrupts, RecoverPipeline,
                                                     ReleaseExecution, RestoreSession, ResumeFacts, SendAnswer,
                                                     Subscribe, Upstream)
from iaccode_agui.projection.resume_phases import Phase, check_move
from iaccode_agui.projection.resume_plan import ResumePlan, plan_resume, resume_digest
from iaccode_agui.projection.effects import Output, Pending
from iaccode_agui.projection.projector import ProtocolViolation, RunProjector
from iaccode_agui.projection.states import TaskState

SNAPSHOT_HISTORY = 100        # history entries of the resume's task snapshot, as the reference reads it
RECOVERY_HISTORY = 10000      # ... when answers in flight are judged by the turn's text, which needs all of it


Result = Any     # what the shell observed: a document, an ``Upstream``/``Delivery`` member, a bool, or None


class ResumeMachine:
    """One resume as a sequence of commands; see the module docstring for the walk.

    ``next_command()`` returns what to do next; the shell executes it and hands the result to
    ``observe``.  During a streamed ``SendAnswer`` the shell reports the runtime's acceptance through
    ``accepted`` (or ``commit_lost`` when the acceptance could not be recorded).
    """

    def __init__(self, projector: RunProjector, facts: ResumeFacts, *, generic: bool, pipeline_mode: bool) -> None:
        self.projector = projector
        self.facts = facts
        self.generic = generic
        self.pipeline_mode = pipeline_mode
        self.phase = Phase.CHECK
        self.applied: Dict[str, str] = dict(facts.applied)
        self.recovered: List[str] = []
        self.maybe_applied: Dict[str, str] = {}     # sent before a crash; the snapshot cannot tell
        self._result: Result = None
        self._then: Callable[[], Command] = self._finished
        self._cancelled = False
        self._task_state = TaskState.UNSEEN
        self._discovered: List[Tuple[Dict[str, Any], bool]] = []
        self._newly: List[Tuple[Dict[str, Any], bool]] = []
        self._to_recover: List[Tuple[str, str]] = []
        self._turn_text = ""                         # text of the turn a recovered answer started
        self._recovering: Optional[Tuple[str, str]] = None
        self._refusal: Optional[AguiError] = None
        self._proposed: Pending = {}
        self._values: Dict[str, Dict[str, Any]] = {}
        self._entries: Dict[str, Dict[str, Any]] = {}
        self._answers: List[UpstreamAnswer] = []
        self._index = 0
        self._final: Callable[[], List[Output]] = list

    # ---- driving ------------------------------------------------------------------------------
    def next_command(self) -> Command:
        if self.projector.done or self.phase is Phase.ENDED:
            self.phase = Phase.ENDED
            return Finished()
        handler = _HANDLERS[self.phase]
        result, self._result = self._result, None
        return handler(self, result)

    def observe(self, result: Result) -> None:
        self._result = result

    def note_cancelled(self) -> None:
        """The cancel extension ended the execution: no further answer may reach its task."""
        self._cancelled = True

    def answer_digest(self, interrupt_id: str) -> str:
        return resume_digest(self._entries[interrupt_id])

    def accepted(self, interrupt_id: str) -> List[Output]:
        """The runtime took this answer and it is recorded: it is applied, and the session may show."""
        value, entry = self._values[interrupt_id], self._entries[interrupt_id]
        self.projector.mark_applied(interrupt_id)
        outputs: List[Output] = list(self.projector.accept())
        text = encode.answer_text_for_tool_result(value, entry)
        tool_use_id = value.get("toolUseId")
        if text is not None and isinstance(tool_use_id, str) and tool_use_id:
            outputs.extend(self.projector.add_tool_result(tool_use_id, text))
        return outputs

    def commit_lost(self) -> List[Output]:
        """An accepted answer could not be recorded: nothing of this execution may stay answerable."""
        self.projector.drop_pending()
        return self.projector.abort("STATE_PERSISTENCE_FAILED", errors.MSG_COMMIT_FAILED)

    # ---- moves ------------------------------------------------------------------------------------
    def _go(self, phase: Phase) -> None:
        check_move(self.phase, phase)
        self.phase = phase

    def _ask(self, phase: Phase, command: Command) -> Command:
        self._go(phase)
        return command

    def _emit(self, outputs: List[Output], then: Callable[[], Command]) -> Command:
        self._go(Phase.EMITTING)
        self._then = then
        return Emit(outputs)

    def _fail(self, code: str, message: str, params: Optional[Dict[str, Any]] = None) -> Command:
        return self._emit(self.projector.fail(code, message, params), self._finished)

    def _finished(self) -> Command:
        self.phase = Phase.ENDED
        return Finished()

    def _replays_applied(self) -> bool:
        entries = self.facts.entries
        return bool(entries) and all(self.applied.get(entry.get("interruptId")) == resume_digest(entry)
                                     for entry in entries)

    # ---- 1-3: check, restore, snapshot -------------------------------------------------------------
    def _on_check(self, _: Result) -> Command:
        facts = self.facts
        if not facts.task_id or not self.projector.pending:
            if self._replays_applied():
                return self._fail("RESUME_ALREADY_APPLIED", errors.MSG_RESUME_ALREADY_APPLIED)
            ids = [entry.get("interruptId") for entry in facts.entries]
            if ids and all(i in facts.expired_ids for i in ids):
                return self._fail("EXECUTION_EXPIRED", errors.MSG_EXECUTION_EXPIRED)
            pending = bool(self.projector.pending)
            return self._fail("EXECUTION_LOST", errors.MSG_TASK_UNAVAILABLE if pending else errors.MSG_NOTHING_PENDING)
        if facts.session_id and not self.generic:
            return self._ask(Phase.RESTORING, RestoreSession(facts.cwd, facts.session_id, facts.task_id))
        return self._ask(Phase.FETCHING, FetchTask(facts.task_id, self._snapshot_history()))

    def _on_restored(self, result: Result) -> Command:
        if result is Upstream.OK:
            return self._ask(Phase.FETCHING, FetchTask(self._task_id, self._snapshot_history()))
        if result is Upstream.BACKUP_NOT_READY:
            return self._fail("SESSION_BACKUP_NOT_READY", errors.MSG_SESSION_BACKUP_NOT_READY)
        if result is Upstream.SESSION_LOST:
            return self._settle_lost()
        return self._fail("A2A_UNAVAILABLE", errors.MSG_A2A_UNAVAILABLE)

    def _snapshot_history(self) -> int:
        """History entries to read: all of them when an answer in flight is judged by the task's text."""
        return RECOVERY_HISTORY if self.projector.in_flight() else SNAPSHOT_HISTORY

    @property
    def _task_id(self) -> str:
        assert self.facts.task_id is not None
        return self.facts.task_id

    def _on_snapshot(self, result: Result) -> Command:
        if result is Upstream.TASK_NOT_FOUND:
            return self._settle_lost()
        if result is Upstream.REFUSED:
            return self._fail("EXECUTION_LOST", errors.MSG_TASK_UNAVAILABLE)
        if not isinstance(result, dict):
            return self._fail("A2A_UNAVAILABLE", errors.MSG_A2A_UNAVAILABLE)
        try:
            kind, task = dialect.unwrap(result)
            if kind != "task" or dialect.frame_task_id(kind, task) != self._task_id:
                raise ProtocolViolation("snapshot of another task")
            identity = self.projector.check_identity(result)
        except ProtocolViolation:
            return self._fail("A2A_PROTOCOL_ERROR", errors.MSG_A2A_PROTOCOL_ERROR)
        try:
            self._discovered = self.projector.snapshot_inputs(result)
        except ProtocolViolation:
            failed = identity + self.projector.fail("A2A_PROTOCOL_ERROR", errors.MSG_A2A_PROTOCOL_ERROR)
            return self._emit(failed, self._finished)
        self._task_state = TaskState.of((task.get("status") or {}).get("state"))
        self._plan_recovery(result)
        return self._emit(identity, self._recover_next)

    # ---- 4-5: recover answers in flight, terminal tasks, pipeline catch-up --------------------------
    def _plan_recovery(self, snapshot: Dict[str, Any]) -> None:
        """Answers sent but never seen accepted: committed on positive evidence only (``inflight``)."""
        verdict = judge_in_flight(snapshot, self.projector.in_flight(), self.projector.ctx.text_digests,
                                  generic=self.generic)
        self._to_recover.extend(verdict.consumed)
        self.maybe_applied.update(verdict.maybe_applied)
        self._turn_text = verdict.turn_text

    def _recover_next(self) -> Command:
        if self._to_recover:
            self._recovering = self._to_recover.pop(0)
            return self._ask(Phase.RECOVERING, RecordAnswer(*self._recovering))
        if self._task_state.terminal:
            return self._terminal_task()
        if self.pipeline_mode:
            return self._ask(Phase.CATCHING_UP, RecoverPipeline(self._task_id, self.facts.pipeline_cursor))
        return self._plan()

    def _on_recovered(self, result: Result) -> Command:
        assert self._recovering is not None
        interrupt_id, digest = self._recovering
        if not result:
            return self._fail("STATE_PERSISTENCE_FAILED", errors.MSG_STATE_PERSISTENCE_FAILED)
        self._applied_now(interrupt_id, digest)
        self.recovered.append(interrupt_id)
        return self._recover_next()

    def _applied_now(self, interrupt_id: str, digest: str) -> None:
        self.projector.mark_applied(interrupt_id)
        self.applied[interrupt_id] = digest

    def _terminal_task(self) -> Command:
        if self.recovered and self._replays_applied():
            return self._continue_recovered()      # reports how the task ended
        self._final = self._execution_lost
        return self._ask(Phase.RELEASING, ReleaseExecution())

    def _continue_recovered(self) -> Command:
        """The client retries the very answer the runtime took before the crash: continue from there.

        The stream that would have shown the turn the answer started went with the crash; what of it the
        task keeps is shown here, since nobody else will.
        """
        outputs = list(self.projector.accept())
        if self._turn_text:
            spans = self.projector.spans
            outputs.extend(spans.text(spans.plain_source(), self._turn_text))
        return self._emit(outputs, self._follow)

    def _settle_lost(self) -> Command:
        """The runtime said it no longer has the session or the task: nothing pending can be answered.

        Only a definite answer settles the thread (a transport failure never does): the pending interrupts
        end with the execution, so the next request on the thread is a new turn (which the runtime then
        answers for what it is) instead of ``RESUME_REQUIRED`` for an interrupt nobody can answer.
        """
        self._final = self._conversation_lost
        return self._ask(Phase.RELEASING, ReleaseExecution())

    def _conversation_lost(self) -> List[Output]:
        self.projector.drop_pending()
        return self.projector.fail("CONVERSATION_LOST", errors.MSG_CONVERSATION_LOST)

    def _execution_lost(self) -> List[Output]:
        self.projector.drop_pending()
        return self.projector.fail("EXECUTION_LOST", errors.MSG_TASK_UNAVAILABLE)

    def _on_released(self, _: Result) -> Command:
        return self._emit(self._final(), self._finished)

    def _on_caught_up(self, result: Result) -> Command:
        if isinstance(result, dict):
            return self._emit(self.projector.recover_pipeline(result), self._plan)
        return self._plan()

    # ---- 6: plan ----------------------------------------------------------------------------------
    def _plan(self) -> Command:
        pending = self.projector.pending
        self._newly = [(value, sideband) for value, sideband in self._discovered if value["inputId"] not in pending]
        self._values = {key: dict(item.value) for key, item in pending.items()}
        for value, _ in self._newly:
            self._values[value["inputId"]] = value
        try:
            plan = plan_resume(self._values, self.facts.entries, self.applied.get,
                               newly_discovered=[value["inputId"] for value, _ in self._newly])
        except AguiError as exc:
            self._refusal = exc
            if self._newly:
                self._proposed = self.projector.with_discovered(self._newly)
                return self._ask(Phase.RECORDING_DISCOVERED,
                                 RecordInterrupts(self._proposed, tuple(sorted(self.projector.ctx.text_digests))))
            return self._refused()
        for interrupt_id in plan.stale:
            self.projector.mark_applied(interrupt_id)
        if plan.discovery:
            return self._emit(self.projector.interrupt(self._newly), self._finished)
        self._prepare(plan)
        return self._deliver_next()

    def _on_discovered_recorded(self, result: Result) -> Command:
        if result:
            self.projector.adopt_pending(self._proposed)
        return self._refused()

    def _refused(self) -> Command:
        exc = self._refusal
        assert exc is not None
        if self.recovered and exc.code == "RESUME_ALREADY_APPLIED" and self._replays_applied():
            return self._continue_recovered()
        return self._fail(exc.code, exc.message, exc.params)

    def _prepare(self, plan: ResumePlan) -> None:
        sideband_ids = {key for key, item in self.projector.pending.items() if item.sideband}
        sideband_ids.update(value["inputId"] for value, sideband in self._newly if sideband)
        self._answers = encode.answers_for(self._values, plan.to_apply, run_id=self.facts.run_id,
                                           task_id=self._task_id, sideband_ids=sideband_ids)
        self._entries = dict(plan.to_apply)
        self.projector.expect_answers(answer.interrupt_id for answer in self._answers)

    # ---- 7: deliver -------------------------------------------------------------------------------
    @property
    def _answer(self) -> UpstreamAnswer:
        return self._answers[self._index]

    def _deliver_next(self) -> Command:
        if self._index >= len(self._answers):
            return self._follow()
        if self._cancelled:
            # The execution was cancelled between two answers: nothing more goes to its task.
            return self._emit(self.projector.abort("CANCELLED", errors.MSG_CANCELLED), self._finished)
        interrupt_id = self._answer.interrupt_id
        self.projector.sending_answer(interrupt_id)
        return self._ask(Phase.RECORDING_IN_FLIGHT, RecordInFlight(interrupt_id, self.answer_digest(interrupt_id)))

    def _on_in_flight_recorded(self, result: Result) -> Command:
        if not result:
            return self._fail("STATE_PERSISTENCE_FAILED", errors.MSG_STATE_PERSISTENCE_FAILED)
        answer = self._answer
        self.projector.note_in_flight(answer.interrupt_id, self.answer_digest(answer.interrupt_id))
        if answer.mode == encode.MODE_CANCEL:
            return self._ask(Phase.CANCELLING, CancelTask(self._task_id))
        message = dialect.build_message(answer.message_id, answer.parts, self.projector.ctx.context_id,
                                        self.facts.metadata, self._task_id)
        return self._ask(Phase.SENDING, SendAnswer(answer, message))

    def _on_sent(self, result: Result) -> Command:
        if result is Delivery.OPEN:
            self._index += 1
            return self._deliver_next()
        if result is Delivery.REFUSED:
            interrupt_id = self._answer.interrupt_id
            prior = self.maybe_applied.get(interrupt_id)
            if prior is not None:
                # The runtime refuses an answer it already consumed before the crash.
                return self._ask(Phase.RECORDING_PRIOR, RecordAnswer(interrupt_id, prior))
            return self._ask(Phase.CLEARING_IN_FLIGHT, RecordInFlight(interrupt_id, None))
        if result is Delivery.NOT_ACCEPTED:
            return self._fail("A2A_UNAVAILABLE", errors.MSG_A2A_NOT_ACCEPTED)
        return self._finished()      # ENDED or FAILED: the run already published its end

    def _on_prior_recorded(self, result: Result) -> Command:
        if not result:
            return self._fail("STATE_PERSISTENCE_FAILED", errors.MSG_STATE_PERSISTENCE_FAILED)
        interrupt_id = self._answer.interrupt_id
        prior = self.maybe_applied[interrupt_id]
        self._applied_now(interrupt_id, prior)
        if prior != self.answer_digest(interrupt_id):
            return self._fail("RESUME_ALREADY_APPLIED", errors.MSG_RESUME_ALREADY_APPLIED)
        self._index += 1
        return self._emit(self.projector.accept(), self._deliver_next)

    def _on_in_flight_cleared(self, _: Result) -> Command:
        # The runtime refused this delivery: it was not applied, so a later snapshot must not count it.
        self.projector.note_in_flight(self._answer.interrupt_id, None)
        return self._fail("A2A_UNAVAILABLE", errors.MSG_A2A_REJECTED)

    def _on_cancelled(self, result: Result) -> Command:
        """A cancelled question/choice stops the task: CancelTask, record, clear pending, end CANCELLED."""
        if result in (Upstream.OK, Upstream.NOT_CANCELABLE):
            interrupt_id = self._answer.interrupt_id
            return self._ask(Phase.RECORDING_CANCELLED, RecordAnswer(interrupt_id, self.answer_digest(interrupt_id)))
        if result is Upstream.REFUSED:
            return self._fail("A2A_UNAVAILABLE", errors.MSG_A2A_REJECTED)
        return self._fail("A2A_UNAVAILABLE", errors.MSG_A2A_UNAVAILABLE)

    def _on_cancel_recorded(self, _: Result) -> Command:
        self.projector.mark_applied(self._answer.interrupt_id)
        self._final = lambda: self.projector.abort("CANCELLED", errors.MSG_CANCELLED)
        return self._ask(Phase.RELEASING, ReleaseExecution())

    # ---- 8: follow --------------------------------------------------------------------------------
    def _follow(self) -> Command:
        """No boundary seen yet: catch up (pipeline), look at the task, subscribe, look again, give up."""
        if self.pipeline_mode:
            return self._ask(Phase.FOLLOW_CATCH_UP, RecoverPipeline(self._task_id, self.projector.pipeline.sequence))
        return self._ask(Phase.FOLLOW_FETCH, FetchTask(self._task_id, 0))

    def _on_follow_caught_up(self, result: Result) -> Command:
        if isinstance(result, dict):
            return self._emit(self.projector.recover_pipeline(result), self._follow_fetch)
        return self._follow_fetch()

    def _follow_fetch(self) -> Command:
        return self._ask(Phase.FOLLOW_FETCH, FetchTask(self._task_id, 0))

    def _on_follow_snapshot(self, result: Result) -> Command:
        if not isinstance(result, dict):
            return self._subscribe()
        state = TaskState.of((dialect.unwrap(result)[1].get("status") or {}).get("state"))
        try:
            shows_inputs = bool(self.projector.snapshot_inputs(result))
        except ProtocolViolation:
            return self._fail("A2A_PROTOCOL_ERROR", errors.MSG_A2A_PROTOCOL_ERROR)
        if state.terminal or shows_inputs:
            return self._emit(self.projector.feed(result, with_text=False), self._subscribe)
        return self._subscribe()

    def _subscribe(self) -> Command:
        return self._ask(Phase.SUBSCRIBING, Subscribe(self._task_id))

    def _on_subscribed(self, _: Result) -> Command:
        return self._ask(Phase.REPAIRING, FetchTask(self._task_id, 0))

    def _on_repaired(self, result: Result) -> Command:
        if isinstance(result, dict):
            return self._emit(self.projector.feed(result, with_text=False), self._give_up)
        return self._give_up()

    def _give_up(self) -> Command:
        return self._ask(Phase.GIVING_UP, CancelTask(self._task_id, best_effort=True))

    def _on_given_up(self, _: Result) -> Command:
        return self._fail("A2A_UNAVAILABLE", errors.MSG_A2A_UNAVAILABLE)

    def _on_emitted(self, _: Result) -> Command:
        return self._then()


_HANDLERS: Dict[Phase, Callable[[ResumeMachine, Result], Command]] = {
    Phase.CHECK: ResumeMachine._on_check,
    Phase.RESTORING: ResumeMachine._on_restored,
    Phase.FETCHING: ResumeMachine._on_snapshot,
    Phase.RECOVERING: ResumeMachine._on_recovered,
    Phase.RELEASING: ResumeMachine._on_released,
    Phase.CATCHING_UP: ResumeMachine._on_caught_up,
    Phase.RECORDING_DISCOVERED: ResumeMachine._on_discovered_recorded,
    Phase.RECORDING_IN_FLIGHT: ResumeMachine._on_in_flight_recorded,
    Phase.SENDING: ResumeMachine._on_sent,
    Phase.RECORDING_PRIOR: ResumeMachine._on_prior_recorded,
    Phase.CLEARING_IN_FLIGHT: ResumeMachine._on_in_flight_cleared,
    Phase.CANCELLING: ResumeMachine._on_cancelled,
    Phase.RECORDING_CANCELLED: ResumeMachine._on_cancel_recorded,
    Phase.FOLLOW_CATCH_UP: ResumeMachine._on_follow_caught_up,
    Phase.FOLLOW_FETCH: ResumeMachine._on_follow_snapshot,
    Phase.SUBSCRIBING: ResumeMachine._on_subscribed,
    Phase.REPAIRING: ResumeMachine._on_repaired,
    Phase.GIVING_UP: ResumeMachine._on_given_up,
    Phase.EMITTING: ResumeMachine._on_emitted,
}

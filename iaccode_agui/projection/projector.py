"""The projection of one AG-UI run: A2A stream results in, AG-UI events and effects out.

``RunProjector`` is a pure state machine.  ``feed`` takes one A2A ``StreamResponse`` result and returns an
ordered list whose items are either AG-UI event dicts or *effects* (``BindTask``, ``BindSession``,
``CommitInterrupts``, ``EndRun``).  The shell applies each effect (persisting state) before it forwards
the events that follow it, which is how "durable before visible" is kept without the projection doing
any I/O.  Tests drive it with plain lists of dicts.

Every change of the projector's state goes through one of its methods; the shell reads its attributes
but never writes them, so the rules below are the only place a pending interrupt, an answer in flight
or the end of the run can be decided.  What an artifact or a tool report becomes needs none of that
state and lives in ``projection.content``.
"""
import dataclasses
import time
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Set, Tuple

from iaccode_agui import errors
from iaccode_agui.a2a import dialect
from iaccode_agui.projection import content
from iaccode_agui.projection import events as ev
from iaccode_agui.projection import interrupts
from iaccode_agui.projection.context import ConversationLost, ProtocolViolation, RunContext, SessionNotice
from iaccode_agui.projection.effects import (BindSession, BindTask, CommitInterrupts, EndRun, Output, Pending,
                                             PipelineProgress)
from iaccode_agui.projection.events import Event
from iaccode_agui.projection.pipeline import PipelineMapper
from iaccode_agui.projection.spans import SpanTracker
from iaccode_agui.projection.states import (BOUNDARY, FAILED, READ_ON_SPELLINGS, TERMINAL_STEP, Inputs, Outcome,
                                            Step, TaskState)
from iaccode_agui.projection.textdelta import delta_fields
from iaccode_agui.projection.textreplay import digests_of, new_suffix
from iaccode_agui.projection.usage import UsageLedger
from iaccode_agui.state.model import Execution, PendingInterrupt

Discovered = List[Tuple[Dict[str, Any], bool]]     # (sanitised input projection, sideband) pairs


def pipeline_mode(execution: Execution) -> bool:
    """Whether a resume catches up on pipeline events: only when its execution runs a pipeline.

    The mode matters on a resume only, and a resume continues the execution its thread already runs: the
    mode chosen when that execution started, or the pipeline progress it has shown (a runtime may choose
    the mode itself), decides, whatever ``runMode`` the resume request repeats.
    """
    return execution.run_mode == "pipeline" or bool(execution.pipeline_sequence or execution.pipeline_open_steps)


def message_scope(is_resume: bool, request_digest: str) -> str:
    """What sets a resumed run's text message ids apart (``RunContext.message_scope``).

    A resume continues the runtime's message of the interrupted turn, so without it its text would carry
    the id the interrupted run gave that message, and a client would append it there, above the result of
    the tool it follows.  The request's digest is what every run of an execution has of its own (a resume
    may even carry the run id of the run it continues) and what a run adopted from its log still knows.
    """
    return request_digest[:12] if is_resume else ""


class RunProjector:
    def __init__(self, ctx: RunContext, clock: Callable[[], float] = time.time) -> None:
        self.ctx = ctx
        self.clock = clock
        self.spans = SpanTracker(ctx.run_id, ctx.message_scope)
        self.usage = UsageLedger()
        self.task_id = ctx.task_id
        self.session_id = ctx.session_id
        self.pending: Pending = dict(ctx.pending)
        self.applied_ids: Set[str] = set(ctx.applied_ids)
        self.last_state = TaskState.UNSEEN
        self.done = False
        self.session_notice = SessionNotice.HELD if ctx.resume else SessionNotice.DUE
        self.session_confirmed = False        # the runtime has reported the thread's session in this run
        self._replay_checked: Set[str] = set()
        self._known_digests = set(ctx.text_digests)
        self.pipeline = PipelineMapper(self.spans, self.usage, thread_id=ctx.thread_id,
                                       sequence=ctx.pipeline_sequence, open_steps=ctx.pipeline_open_steps)
        self._pipeline_sessions_checked = 0
        self.answering: Set[str] = set()       # resume answers not yet sent: their inputs are expected
        self.delivering = False                # a resume is sending answers: a disconnect keeps them pending
        self.quick = True                      # text deltas of an open message skip the general path

    # ---- lifecycle ----------------------------------------------------------------------------
    def start(self) -> List[Output]:
        out: List[Output] = [ev.run_started(self.ctx.thread_id, self.ctx.run_id, self.ctx.parent_run_id)]
        out.extend(self.pipeline.reopen_steps())
        return out

    def recover_pipeline(self, state: Dict[str, Any]) -> List[Output]:
        """Catch up from ``/iac-code/pipeline/state`` (the single source of missed pipeline events)."""
        try:
            out: List[Output] = list(self.pipeline.recover(state))
            out.extend(self._pipeline_sessions())
        except ProtocolViolation as exc:
            return self.violation(exc)
        return out

    def _pipeline_sessions(self) -> List[Output]:
        out: List[Output] = []
        for session_id in self.pipeline.session_ids[self._pipeline_sessions_checked:]:
            self._pipeline_sessions_checked += 1
            bound = self._bind_session(session_id)
            out.extend(bound)
            if bound:
                out.extend(self._maybe_session())
        return out

    def _bind_session(self, session_id: str) -> List[Output]:
        """The iac-code session is pinned once per thread; a different one breaks the identity contract."""
        if self.session_id is None:
            self.session_id = session_id
            self.session_confirmed = True
            return [BindSession(session_id)]
        if session_id != self.session_id:
            # Only the first session a new turn reports can reveal a forgotten conversation; a change after
            # the runtime has confirmed the thread's session is a broken stream.
            if not self.ctx.resume and not self.session_confirmed:
                raise ConversationLost("the runtime answered with session %s instead of %s"
                                       % (session_id, self.session_id))
            raise ProtocolViolation("session id changed")
        self.session_confirmed = True
        return []

    def _progress(self) -> List[Output]:
        if not self.pipeline.changed:
            return []
        sequence, steps = self.pipeline.progress()
        return [PipelineProgress(sequence, tuple(steps))]

    # ---- the answers of a resume ------------------------------------------------------------------
    def accept(self) -> List[Output]:
        """The runtime accepted a resume answer: announce the session (the 'resume accepted' signal)."""
        if self.session_notice is SessionNotice.HELD:
            self.session_notice = SessionNotice.DUE
        return self._maybe_session()

    def mark_applied(self, interrupt_id: str) -> None:
        self.applied_ids.add(interrupt_id)
        self.pending.pop(interrupt_id, None)

    def expect_answers(self, interrupt_ids: Iterable[str]) -> None:
        """These answers are about to be sent one by one: until each is, its input is no boundary."""
        self.answering = set(interrupt_ids)
        self.delivering = True

    def sending_answer(self, interrupt_id: str) -> None:
        self.answering.discard(interrupt_id)

    def note_in_flight(self, interrupt_id: str, digest: Optional[str]) -> None:
        """An answer is on its way (``digest``) or was refused (None); mirrors the durable record."""
        known = self.pending.get(interrupt_id)
        if known is not None:
            self.pending[interrupt_id] = dataclasses.replace(known, answer_digest=digest)

    def in_flight(self) -> List[Tuple[str, str]]:
        """(interrupt id, digest) of every answer sent whose acceptance was never seen."""
        return [(key, item.answer_digest) for key, item in self.pending.items() if item.answer_digest]

    def with_discovered(self, newly: Discovered) -> Pending:
        """The pending map once inputs found in a snapshot are added (not adopted until persisted)."""
        pending = dict(self.pending)
        expires = interrupts.expires_at(self.clock(), self.ctx.interrupt_ttl)
        for value, sideband in newly:
            pending[value["inputId"]] = PendingInterrupt(value=value, sideband=bool(sideband), expires_at=expires)
        return pending

    def adopt_pending(self, pending: Pending) -> None:
        self.pending.update(pending)

    def drop_pending(self) -> None:
        """The execution ended: nothing it waited on may be announced or kept."""
        self.pending.clear()

    def release_buffers(self) -> None:
        """A finished run keeps its events for re-attach, but not the text it kept for digests."""
        self.spans.text_buffers.clear()

    def add_tool_result(self, tool_call_id: str, content: str) -> List[Output]:
        """Close the tool span an interrupted question left open, once, with the user's answer."""
        return list(self.spans.tool_result(tool_call_id, content))

    # ---- mapping ------------------------------------------------------------------------------
    def feed(self, result: Any, *, with_text: bool = True, history_text: bool = False) -> List[Output]:
        if self.done:
            return []
        if with_text and self.quick:
            event = self._text_delta(result)
            if event is not None:
                return [event]
        try:
            return self._feed(result, with_text, history_text)
        except ProtocolViolation as exc:
            return self.violation(exc)

    def violation(self, exc: ProtocolViolation) -> List[Output]:
        """End the run for a broken identity contract; a forgotten conversation gets its own code."""
        if isinstance(exc, ConversationLost):
            return self.fail("CONVERSATION_LOST", errors.MSG_CONVERSATION_LOST)
        return self.fail("A2A_PROTOCOL_ERROR", errors.MSG_A2A_PROTOCOL_ERROR)

    def check_identity(self, result: Any) -> List[Output]:
        """Bind/verify task, context and session from a snapshot without mapping its content.

        Raises ``ProtocolViolation`` so a resume can refuse to send anything to the wrong task.
        """
        kind, obj = dialect.unwrap(result)
        return self._identity(kind, obj, dialect.iac_code_metadata(obj))

    def snapshot_inputs(self, result: Any) -> Discovered:
        """Required inputs a task snapshot shows that this execution has not answered yet."""
        kind, obj = dialect.unwrap(result)
        return self._new_inputs(dialect.iac_code_metadata(obj))

    def _feed(self, result: Any, with_text: bool, history_text: bool) -> List[Output]:
        kind, obj = dialect.unwrap(result)
        iac = dialect.iac_code_metadata(obj)
        out = self._identity(kind, obj, iac)
        if kind == "statusUpdate" or kind == "task":
            out.extend(self._status(kind, obj, iac, with_text, history_text))
        elif kind == "artifactUpdate":
            out.extend(content.artifact_events(obj))
        elif kind == "message":
            out.extend(self._message(obj, with_text))
        return out

    def _text_delta(self, result: Any) -> Optional[Event]:
        """The one event of a frame that only continues the open message with more text, else None.

        Nearly every frame of a stream is such a delta, and the general path would spend dozens of calls
        on it to conclude what these checks conclude directly: a text delta's shape (``delta_fields``),
        the same task, context and (confirmed) session, no other ``iac_code`` metadata, a state that reads
        on, a message that is already open, no reasoning span open, no resume replay check pending.
        Anything else returns None and takes the general path; a test drives both paths over the same
        frames.
        """
        fields = delta_fields(result)
        if fields is None:
            return None
        task_id, context_id, iac, raw_state, text, source_id = fields
        if task_id != self.task_id or context_id != self.ctx.context_id \
                or (self.ctx.resume and source_id not in self._replay_checked):
            return None
        if iac and (iac.__class__ is not dict or len(iac) != 1 or not self.session_confirmed
                    or iac.get("iacCodeSessionId") != self.session_id):
            return None
        state = READ_ON_SPELLINGS.get(raw_state) if raw_state.__class__ is str else None
        event = self.spans.continue_text(source_id, text) if state is not None else None
        if event is not None:
            self.last_state = state
        return event

    def _message(self, obj: Dict[str, Any], with_text: bool) -> List[Output]:
        out: List[Output] = []
        if with_text:
            out.extend(self._text(obj.get("messageId"), dialect.message_text(obj)))
        if self.ctx.generic and dialect.is_agent_message(obj):
            self.last_state = TaskState.COMPLETED     # a message-only agent answers with one message
        return out

    def _status(self, kind: str, obj: Dict[str, Any], iac: Dict[str, Any], with_text: bool,
                history_text: bool) -> List[Output]:
        status = obj.get("status")
        if status.__class__ is not dict:
            status = {}
        out: List[Output] = []
        if iac:
            if "pipeline" in iac or "pipelineBatch" in iac:
                out.extend(self.pipeline.feed(iac))
                out.extend(self._pipeline_sessions())
            thinking = iac.get("thinking")
            if isinstance(thinking, dict) and thinking.get("type") == "raw_thinking" \
                    and isinstance(thinking.get("text"), str):
                out.extend(self.spans.reasoning(thinking["text"]))
        if with_text:
            out.extend(self._status_text(kind, obj, status, iac, history_text))
        if iac:
            tool = iac.get("tool")
            if isinstance(tool, dict):
                out.extend(content.tool_events(self.spans, tool))
            if "usage" in iac:
                self.usage.record(iac.get("usage"))
        state = TaskState.of(status.get("state"))
        if state is not TaskState.UNSEEN:
            self.last_state = state
        out.extend(self._boundary(state, iac, status))
        return out

    def _identity(self, kind: str, obj: Dict[str, Any], iac: Dict[str, Any]) -> List[Output]:
        out: List[Output] = []
        task_id = dialect.frame_task_id(kind, obj) if kind != "message" else obj.get("taskId")
        if isinstance(task_id, str) and task_id and task_id != self.task_id:
            out.extend(self._bind_task(task_id))
        context_id = obj.get("contextId")
        if isinstance(context_id, str) and context_id and context_id != self.ctx.context_id:
            raise ProtocolViolation("context id changed")
        session_id = iac.get("iacCodeSessionId")
        if isinstance(session_id, str) and session_id:
            out.extend(self._bind_session(session_id))
        if out:
            out.extend(self._maybe_session())
        return out

    def _bind_task(self, task_id: str) -> List[Output]:
        if self.task_id is None:
            self.task_id = task_id
            return [BindTask(task_id)]
        if task_id != self.task_id:
            raise ProtocolViolation("task id changed")
        return []

    def _maybe_session(self) -> List[Output]:
        if self.session_notice is not SessionNotice.DUE or not self.task_id or not self.session_id:
            return []
        self.session_notice = SessionNotice.SENT
        value = {"schemaVersion": 1, "threadId": self.ctx.thread_id, "aguiRunId": self.ctx.run_id,
                 "executionId": self.ctx.execution_id, "contextId": self.ctx.context_id, "taskId": self.task_id,
                 "rosInvocationId": self.ctx.ros_invocation_id, "sessionId": self.session_id}
        if self.ctx.workspace_created:
            value["workspaceCreated"] = True     # a mistyped cwd shows up here, not as a silent new directory
        return [ev.custom(ev.SESSION_EVENT, value)]

    def _status_text(self, kind: str, obj: Dict[str, Any], status: Dict[str, Any], iac: Dict[str, Any],
                     history_text: bool) -> List[Output]:
        message = status.get("message")
        text = dialect.message_text(message)
        message_id = message.get("messageId") if isinstance(message, dict) else None
        final = isinstance(iac.get("assistantFinal"), dict) and iac["assistantFinal"].get("complete") is True
        if final and self.spans.emitted_text:
            return []
        if not text and history_text and kind == "task" and not self.spans.emitted_text:
            return self._history_text(obj)
        return self._text(message_id, text)

    def _history_text(self, task: Dict[str, Any]) -> List[Output]:
        history = task.get("history")
        if not isinstance(history, list):
            return []
        trailing: List[Dict[str, Any]] = []
        for message in reversed(history):
            if not dialect.is_agent_message(message) or not isinstance(message, dict):
                break
            trailing.insert(0, message)
        out: List[Output] = []
        for message in trailing:
            out.extend(self._text(message.get("messageId"), dialect.message_text(message)))
        return out

    def _text(self, message_id: Any, text: str) -> List[Output]:
        if not text:
            return []
        source_id = message_id if isinstance(message_id, str) and message_id else self.spans.plain_source()
        if self.ctx.resume and source_id not in self._replay_checked:
            self._replay_checked.add(source_id)
            text = new_suffix(text, self._known_digests)
        return list(self.spans.text(source_id, text))

    # ---- boundaries ---------------------------------------------------------------------------
    def _new_inputs(self, iac: Dict[str, Any]) -> Discovered:
        if "input" not in iac and "pendingPermissions" not in iac:
            return []     # the common frame carries no required input
        found = []
        for value, sideband in interrupts.read_required_inputs(iac):
            input_id = value.get("inputId")
            if not isinstance(input_id, str) or input_id in self.applied_ids:
                continue
            request_task = value.get("requestTaskId")
            if isinstance(request_task, str) and self.task_id and request_task != self.task_id:
                raise ProtocolViolation("input for another task")
            context_id = value.get("contextId")
            if isinstance(context_id, str) and context_id != self.ctx.context_id:
                raise ProtocolViolation("input for another context")
            found.append((value, sideband))
        return found

    def _classify(self, state: TaskState, inputs: Discovered) -> Inputs:
        ids = [value["inputId"] for value, _ in inputs]
        if self.answering and state is TaskState.INPUT_REQUIRED and all(i in self.answering for i in ids):
            return Inputs.AWAITED      # the runtime waits for the next answer of this resume
        if any(i not in self.pending for i in ids):
            return Inputs.FRESH
        return Inputs.KNOWN if inputs else Inputs.NONE

    def _boundary(self, state: TaskState, iac: Dict[str, Any], status: Dict[str, Any]) -> List[Output]:
        if state in FAILED:
            return self.fail("A2A_EXECUTION_FAILED", errors.MSG_A2A_EXECUTION_FAILED)
        if state in TERMINAL_STEP:
            return self._take(TERMINAL_STEP[state], [], status)
        inputs = self._new_inputs(iac)
        if not inputs and not self.answering:
            kind = Inputs.NONE        # the common frame: no input at all, no answer outstanding
        else:
            kind = self._classify(state, inputs)
        step = BOUNDARY[(state, kind)]
        return [] if step is Step.READ_ON else self._take(step, inputs, status)

    def _take(self, step: Step, inputs: Discovered, status: Dict[str, Any]) -> List[Output]:
        if step is Step.INTERRUPT:
            return self.interrupt(inputs)
        if step is Step.SUCCEED:
            return self.succeed()
        if step is Step.CANCEL:
            return self.fail("CANCELLED", errors.MSG_CANCELLED)
        if step is Step.NO_INPUTS:
            return self._no_inputs(status)
        return []

    def _no_inputs(self, status: Dict[str, Any]) -> List[Output]:
        """input-required without a projection: a plain agent's question, a stale pipeline boundary, or done."""
        if self.ctx.generic:
            return self.interrupt([(self._generic_input(status), False)])
        if self.ctx.pipeline_mode and self.ctx.resume:
            # A pipeline never ends a turn in input-required: an empty (or already answered) one on a
            # resume is a stale boundary.  Keep reading; if the stream ends, the driver follows the task.
            return []
        return self.succeed()

    def _generic_input(self, status: Dict[str, Any]) -> Dict[str, Any]:
        value = interrupts.generic_input(self.task_id or self.ctx.run_id, dialect.message_text(status.get("message")))
        # A plain agent may ask again on the same task: every question needs its own interrupt id.
        base, n = value["inputId"], 1
        while value["inputId"] in self.applied_ids:
            n += 1
            value["inputId"] = "%s-%d" % (base, n)
        return value

    def end_of_stream(self) -> List[Output]:
        """The upstream stream closed: decide the outcome from the last state seen."""
        if self.done:
            return []
        if self.last_state.success:
            return self.succeed()
        if self.last_state is TaskState.CANCELED:
            return self.fail("CANCELLED", errors.MSG_CANCELLED)
        return self.fail("A2A_EXECUTION_FAILED", errors.MSG_A2A_EXECUTION_FAILED)

    def succeed(self) -> List[Output]:
        return self._terminal(EndRun(Outcome.SUCCESS),
                              ev.run_finished_success(self.ctx.thread_id, self.ctx.run_id, self.usage.summary()))

    def fail(self, code: str, message: str, params: Optional[Mapping[str, Any]] = None) -> List[Output]:
        if self.done:
            return []
        return self._terminal(EndRun(Outcome.ERROR, code), self._error_event(code, message, params))

    def abort(self, code: str, message: str, keep_pending: bool = False) -> List[Output]:
        """End the run with an error even after an interrupt was prepared but not announced."""
        if not keep_pending:
            self.pending.clear()
        return self._terminal(EndRun(Outcome.ERROR, code), self._error_event(code, message),
                              announce_session=False)

    def _error_event(self, code: str, message: str, params: Optional[Mapping[str, Any]] = None) -> Event:
        from iaccode_agui.i18n import translate
        text = errors.render(message, params or {}, lambda source: translate(source, self.ctx.language))
        return ev.run_error(self.ctx.thread_id, self.ctx.run_id, code, text, self.usage.summary())

    def _terminal(self, end: EndRun, event: Event, announce_session: bool = True) -> List[Output]:
        """Session event (once), balanced spans, persisted progress, the end effect, then the event."""
        out: List[Output] = list(self._maybe_session()) if announce_session else []
        out.extend(self.spans.close_all())
        self.done = True
        out.extend(self._progress())
        out.append(end)
        out.append(event)
        return out

    def interrupt(self, inputs: Discovered) -> List[Output]:
        """Persist every pending input, close the spans, then announce them all."""
        self._remember(inputs)
        built = []
        for item in self.pending.values():
            interrupt = interrupts.build_interrupt(item.value, item.expires_at, self.ctx.language)
            if interrupt is not None:
                built.append(interrupt)
        if not built:
            return self.succeed()
        texts = ["".join(parts) for parts in self.spans.text_buffers.values()]
        digests = tuple(sorted(self._known_digests | digests_of(texts)))
        out: List[Output] = list(self._progress())
        out.append(CommitInterrupts(dict(self.pending), digests))
        out.extend(self._maybe_session())
        out.extend(self.spans.close_all())
        self.done = True
        out.append(EndRun(Outcome.INTERRUPT))
        out.append(ev.run_finished_interrupt(self.ctx.thread_id, self.ctx.run_id, built, self.usage.summary()))
        return out

    def _remember(self, inputs: Discovered) -> None:
        """An input seen again keeps its expiry and sideband; a new answer to it has not been sent yet."""
        expires = interrupts.expires_at(self.clock(), self.ctx.interrupt_ttl)
        for value, sideband in inputs:
            known = self.pending.get(value["inputId"])
            self.pending[value["inputId"]] = PendingInterrupt(
                value=value, sideband=bool(sideband or (known is not None and known.sideband)),
                expires_at=known.expires_at if known is not None else expires)


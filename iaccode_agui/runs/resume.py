"""Driving a resume: check everything first, then deliver every answer and commit each on acceptance.

Nothing is sent upstream until the session is restored, the task snapshot matches the interrupted run,
and every answer is valid.  Each answer is committed (pending removed, digest recorded) only when the
runtime accepts it - the first valid frame of its stream - so a rejected or lost answer stays pending
and can be retried, and a replayed answer never runs a tool twice.
"""
import logging
from typing import Any, Dict, List, Optional, Tuple

from iaccode_agui import errors
from iaccode_agui.a2a import dialect
from iaccode_agui.a2a.client import A2AError, A2ARpcError, SessionBackupNotReady, SessionLost
from iaccode_agui.errors import AguiError
from iaccode_agui.inputs import RunRequest
from iaccode_agui.projection import interrupts
from iaccode_agui.projection import resume as rules
from iaccode_agui.projection.run import ProtocolViolation, RunContext
from iaccode_agui.runs.worker import RunWorker, StopRun
from iaccode_agui.state.model import ThreadState
from iaccode_agui.state.store import StateWriteFailed

log = logging.getLogger("iaccode_agui.runs")


class _NotAccepted(Exception):
    """The runtime did not take the answer; ``rejected`` when it said so (a JSON-RPC error)."""

    def __init__(self, message: str, rejected: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.rejected = rejected


def _fail(worker: RunWorker, code: str, message: str) -> None:
    worker.apply(worker.projector.fail(code, message))


def drive_resume(worker: RunWorker, req: RunRequest, ctx: RunContext, state: ThreadState) -> None:
    projector = worker.projector
    client = worker.client
    entries = list(req.resume or [])
    execution = state.execution
    applied = {item.interrupt_id: item.digest for item in state.applied_resume_digests
               if item.execution_id == execution.execution_id}

    # 1. Nothing to resume: a replay of applied answers, an expired interrupt, or a lost task.
    if not execution.task_id or not execution.pending:
        ids = [entry.get("interruptId") for entry in entries]
        if entries and all(applied.get(i) == rules.resume_digest(e) for i, e in zip(ids, entries)):
            return _fail(worker, "RESUME_ALREADY_APPLIED", errors.MSG_RESUME_ALREADY_APPLIED)
        if entries and all(i in execution.expired_interrupt_ids for i in ids):
            return _fail(worker, "EXECUTION_EXPIRED", errors.MSG_EXECUTION_EXPIRED)
        return _fail(worker, "EXECUTION_LOST", errors.MSG_TASK_UNAVAILABLE)
    task_id = execution.task_id

    # 2. The iac-code session must be live again before anything is sent to its task.
    if state.session_id and not ctx.generic:
        try:
            client.ensure_session_restored(state.cwd, state.session_id, task_id)
        except SessionBackupNotReady:
            return _fail(worker, "SESSION_BACKUP_NOT_READY", errors.MSG_SESSION_BACKUP_NOT_READY)
        except SessionLost:
            return _fail(worker, "EXECUTION_LOST", errors.MSG_SESSION_UNAVAILABLE)
        except A2AError as exc:
            log.warning("ensure-restored failed for task %s: %s", task_id, exc)
            return _fail(worker, "A2A_UNAVAILABLE", errors.MSG_A2A_UNAVAILABLE)

    # 3. The task snapshot must be the interrupted run's task and context.
    try:
        snapshot = client.get_task(task_id, history_length=100)
    except A2ARpcError as exc:
        log.warning("GetTask(%s) failed: %s", task_id, exc)
        return _fail(worker, "EXECUTION_LOST", errors.MSG_TASK_UNAVAILABLE)
    except A2AError as exc:
        log.warning("GetTask(%s) failed: %s", task_id, exc)
        return _fail(worker, "A2A_UNAVAILABLE", errors.MSG_A2A_UNAVAILABLE)
    try:
        kind, task = dialect.unwrap(snapshot)
        if kind != "task" or dialect.frame_task_id(kind, task) != task_id:
            raise ProtocolViolation("snapshot of another task")
        worker.apply(projector.check_identity(snapshot))
        discovered = projector.snapshot_inputs(snapshot)
    except ProtocolViolation:
        return _fail(worker, "A2A_PROTOCOL_ERROR", errors.MSG_A2A_PROTOCOL_ERROR)
    task_state = dialect.normalize_state((task.get("status") or {}).get("state"))

    # 3a. An answer sent before a crash: committed now when the task shows it was consumed; when the
    # snapshot cannot tell (waiting, but no input projection), it is resent and a rejection decides.
    in_flight = _recover_in_flight(worker, task_state, task, applied)
    if in_flight is None:
        return None
    recovered, maybe_applied = in_flight
    pipeline_mode = ctx.pipeline_mode
    if task_state in dialect.TERMINAL_STATES:
        if recovered and _replays_recovered(entries, applied):
            worker.apply(projector.accept())
            _follow(worker, task_id, pipeline_mode)      # reports how the task ended
            return None
        worker.recorder.release(terminal=True, clear_pending=True)
        projector.drop_pending()
        return _fail(worker, "EXECUTION_LOST", errors.MSG_TASK_UNAVAILABLE)

    # 3b. Pipeline catch-up: the state endpoint (from the persisted cursor) is the single source of missed
    # events; the snapshot's own pipeline suffix is never replayed.
    if pipeline_mode and _recover_pipeline(worker, task_id, execution.pipeline_sequence):
        return None

    # 4. Reconcile: inputs the snapshot shows that we did not know become pending too (never erased).
    newly = [(value, sideband) for value, sideband in discovered if value["inputId"] not in projector.pending]
    pending_values = {key: dict(item.value) for key, item in projector.pending.items()}
    for value, _ in newly:
        pending_values[value["inputId"]] = value
    try:
        plan = rules.plan_resume(pending_values, entries, applied.get,
                                 newly_discovered=[value["inputId"] for value, _ in newly])
    except AguiError as exc:
        if newly:
            _persist_discovered(worker, newly)
        if recovered and exc.code == "RESUME_ALREADY_APPLIED" and _replays_recovered(entries, applied):
            # The client retries the very answer the runtime took before the crash: continue from there.
            worker.apply(projector.accept())
            _follow(worker, task_id, pipeline_mode)
            return None
        return _fail(worker, exc.code, exc.message)
    if plan.discovery or plan.stale:
        for interrupt_id in plan.stale:
            projector.mark_applied(interrupt_id)
    if plan.discovery:
        worker.apply(projector.interrupt(newly))
        return None

    # 5. Deliver every answer, in pending order; commit each when the runtime accepts it.
    sideband_ids = {key for key, item in projector.pending.items() if item.sideband}
    sideband_ids.update(value["inputId"] for value, sideband in newly if sideband)
    answers = rules.answers_for(pending_values, plan.to_apply, run_id=req.run_id, task_id=task_id,
                                sideband_ids=sideband_ids)
    entries_by_id = dict(plan.to_apply)
    metadata = dialect.build_metadata(req.props, state.cwd, ctx.language)
    worker.keep_pending_on_disconnect = True
    projector.expect_answers(answer.interrupt_id for answer in answers)
    for answer in answers:
        if worker.cancelled_by_extension:
            # The execution was cancelled between two answers: nothing more goes to its task.
            worker.apply(projector.abort("CANCELLED", errors.MSG_CANCELLED))
            return None
        entry = entries_by_id[answer.interrupt_id]
        value = pending_values[answer.interrupt_id]
        projector.sending_answer(answer.interrupt_id)
        try:
            worker.recorder.mark_in_flight(answer.interrupt_id, rules.resume_digest(entry))
        except StateWriteFailed as exc:
            log.error("answer %s not sent: its in-flight record could not be saved: %s", answer.interrupt_id, exc)
            return _fail(worker, "STATE_PERSISTENCE_FAILED", errors.MSG_STATE_PERSISTENCE_FAILED)
        projector.note_in_flight(answer.interrupt_id, rules.resume_digest(entry))
        if answer.mode == rules.MODE_CANCEL:
            _cancel_answer(worker, task_id, answer.interrupt_id, entry)
            return None
        try:
            if answer.mode == rules.MODE_SIDEBAND:
                ended = _send_sideband(worker, answer, value, entry, task_id, ctx.context_id, metadata)
            else:
                ended = _send_streamed(worker, answer, value, entry, task_id, ctx.context_id, metadata)
        except _NotAccepted as exc:
            prior = maybe_applied.get(answer.interrupt_id)
            if exc.rejected and prior is not None:
                # The runtime refuses an answer it already consumed before the crash.
                if not _commit_prior(worker, answer.interrupt_id, prior, applied):
                    return None
                if prior != rules.resume_digest(entry):
                    return _fail(worker, "RESUME_ALREADY_APPLIED", errors.MSG_RESUME_ALREADY_APPLIED)
                worker.apply(projector.accept())
                continue
            if exc.rejected:
                _clear_in_flight(worker, answer.interrupt_id)
            return _fail(worker, "A2A_UNAVAILABLE", exc.message)
        except A2AError as exc:
            worker.fail_upstream(exc)
            return None
        if ended or projector.done:
            return None
    if not projector.done:
        _follow(worker, task_id, pipeline_mode)
    return None


def _recover_pipeline(worker: RunWorker, task_id: str, cursor: int) -> bool:
    """Catch up from ``/iac-code/pipeline/state``; True when that ended the run."""
    try:
        recovered = worker.client.get_pipeline_state(task_id, cursor)
    except A2AError as exc:
        log.warning("pipeline state of task %s unavailable: %s", task_id, exc)
        return False
    if recovered is not None:
        worker.apply(worker.projector.recover_pipeline(recovered))
    return worker.projector.done


def _recover_in_flight(worker: RunWorker, task_state: str, task: Dict[str, Any], applied: Dict[str, str]
                       ) -> Optional[Tuple[List[str], Dict[str, str]]]:
    """Pending interrupts whose answer was sent but never seen accepted (the adapter died in between).

    Committed as applied only on positive evidence: the task no longer waits, or it waits for inputs
    that do not include this one.  A waiting task without any input projection proves nothing (a
    restarted runtime, a generic agent): those answers are returned as "maybe applied" and resent.
    Returns (recovered ids, maybe-applied digests), or None when the run ended.
    """
    waiting = None
    if task_state == "input-required":
        projected = interrupts.read_required_inputs(dialect.iac_code_metadata(task))
        waiting = {value.get("inputId") for value, _ in projected} if projected else None
    recovered: List[str] = []
    maybe: Dict[str, str] = {}
    for interrupt_id, digest in worker.projector.in_flight():
        if task_state == "input-required" and (waiting is None or interrupt_id in waiting):
            if waiting is None:
                maybe[interrupt_id] = digest
            continue
        if not _commit_prior(worker, interrupt_id, digest, applied):
            return None
        recovered.append(interrupt_id)
    return recovered, maybe


def _commit_prior(worker: RunWorker, interrupt_id: str, digest: str, applied: Dict[str, str]) -> bool:
    try:
        worker.recorder.commit_answer(interrupt_id, digest)
    except StateWriteFailed as exc:
        log.error("could not record the answer %s the runtime already took: %s", interrupt_id, exc)
        _fail(worker, "STATE_PERSISTENCE_FAILED", errors.MSG_STATE_PERSISTENCE_FAILED)
        return False
    worker.projector.mark_applied(interrupt_id)
    applied[interrupt_id] = digest
    return True


def _clear_in_flight(worker: RunWorker, interrupt_id: str) -> None:
    """The runtime refused this delivery: it was not applied, so a later snapshot must not count it."""
    try:
        worker.recorder.mark_in_flight(interrupt_id, None)
    except StateWriteFailed as exc:
        log.warning("could not clear the in-flight record of %s: %s", interrupt_id, exc)
    worker.projector.note_in_flight(interrupt_id, None)


def _replays_recovered(entries: List[Dict[str, Any]], applied: Dict[str, str]) -> bool:
    return bool(entries) and all(applied.get(entry.get("interruptId")) == rules.resume_digest(entry)
                                 for entry in entries)


def _persist_discovered(worker: RunWorker, newly: List[Any]) -> None:
    pending = worker.projector.with_discovered(newly)
    try:
        worker.recorder.commit_interrupts(pending, worker.projector.ctx.text_digests)
        worker.projector.adopt_pending(pending)
    except StateWriteFailed as exc:
        log.warning("could not persist newly discovered interrupts: %s", exc)


def _commit(worker: RunWorker, interrupt_id: str, entry: Dict[str, Any], value: Dict[str, Any]) -> None:
    """Acceptance: the answer is durable as applied before anything it caused is shown."""
    try:
        worker.recorder.commit_answer(interrupt_id, rules.resume_digest(entry))
    except StateWriteFailed as exc:
        log.error("accepted answer %s could not be committed: %s", interrupt_id, exc)
        worker.projector.drop_pending()
        worker.cancel_task()
        worker.recorder.release(terminal=True, clear_pending=True)
        worker.apply(worker.projector.abort("STATE_PERSISTENCE_FAILED", errors.MSG_COMMIT_FAILED))
        raise StopRun()
    worker.projector.mark_applied(interrupt_id)
    if not worker.projector.pending:
        worker.keep_pending_on_disconnect = False
    outputs: List[Any] = list(worker.projector.accept())
    text = rules.answer_text_for_tool_result(value, entry)
    tool_use_id = value.get("toolUseId")
    if text is not None and isinstance(tool_use_id, str) and tool_use_id:
        outputs.extend(worker.projector.add_tool_result(tool_use_id, text))
    worker.apply(outputs)


def _send_streamed(worker: RunWorker, answer: rules.UpstreamAnswer, value: Dict[str, Any], entry: Dict[str, Any],
                   task_id: str, context_id: str, metadata: Dict[str, Any]) -> bool:
    message = dialect.build_message(answer.message_id, answer.parts, context_id, metadata, task_id)
    accepted = []

    def on_first() -> None:
        accepted.append(True)
        _commit(worker, answer.interrupt_id, entry, value)

    try:
        reason = worker.consume(lambda: worker.client.send_streaming_message(dialect.send_params(message)),
                                on_first=on_first, finish=False)
    except A2ARpcError as exc:
        if accepted:
            raise
        if dialect.rpc_error_is_backup_not_ready(exc.data):
            raise
        log.warning("the runtime rejected the answer to %s: %s", answer.interrupt_id, exc)
        raise _NotAccepted(errors.MSG_A2A_REJECTED, rejected=True)
    except A2AError:
        if accepted:
            raise
        raise _NotAccepted(errors.MSG_A2A_NOT_ACCEPTED)
    if not accepted and not worker.projector.done:
        raise _NotAccepted(errors.MSG_A2A_NOT_ACCEPTED)
    if reason is None:
        return True
    # The stream closed without ending the run: either the runtime now waits for the next answer of this
    # resume, or (after the last one) it is still working and the task must be followed.
    return False


def _send_sideband(worker: RunWorker, answer: rules.UpstreamAnswer, value: Dict[str, Any], entry: Dict[str, Any],
                   task_id: str, context_id: str, metadata: Dict[str, Any]) -> bool:
    message = dialect.build_message(answer.message_id, answer.parts, context_id, metadata, task_id)
    try:
        worker.client.send_message(dialect.send_params(message))
    except A2ARpcError as exc:
        if dialect.rpc_error_is_backup_not_ready(exc.data):
            raise
        raise _NotAccepted(errors.MSG_A2A_REJECTED, rejected=True)
    except A2AError:
        raise _NotAccepted(errors.MSG_A2A_NOT_ACCEPTED)
    _commit(worker, answer.interrupt_id, entry, value)
    return False


def _cancel_answer(worker: RunWorker, task_id: str, interrupt_id: str, entry: Dict[str, Any]) -> None:
    """A cancelled question/choice stops the task: CancelTask, clear pending, end as CANCELLED."""
    try:
        worker.client.cancel_task(task_id)
    except A2ARpcError as exc:
        if exc.code != -32002:
            return _fail(worker, "A2A_UNAVAILABLE", errors.MSG_A2A_REJECTED)
    except A2AError:
        return _fail(worker, "A2A_UNAVAILABLE", errors.MSG_A2A_UNAVAILABLE)
    try:
        worker.recorder.commit_answer(interrupt_id, rules.resume_digest(entry))
    except StateWriteFailed as exc:
        log.warning("cancelled answer %s could not be recorded: %s", interrupt_id, exc)
    worker.projector.mark_applied(interrupt_id)
    worker.recorder.release(terminal=True, clear_pending=True)
    worker.apply(worker.projector.abort("CANCELLED", errors.MSG_CANCELLED))
    return None


def _follow(worker: RunWorker, task_id: str, pipeline_mode: bool) -> None:
    """The answers went through but no boundary was seen yet: follow the task to its next boundary.

    In pipeline mode the events produced meanwhile (e.g. after a sideband answer) are recovered from the
    state endpoint first, so nothing between the answer and the next boundary is lost.
    """
    if pipeline_mode and _recover_pipeline(worker, task_id, worker.projector.pipeline.sequence):
        return
    snapshot: Optional[Dict[str, Any]] = None
    try:
        snapshot = worker.client.get_task(task_id, history_length=0)
    except A2AError as exc:
        log.info("GetTask before SubscribeToTask failed: %s", exc)
    if snapshot is not None:
        state = dialect.normalize_state((dialect.unwrap(snapshot)[1].get("status") or {}).get("state"))
        try:
            shows_inputs = bool(worker.projector.snapshot_inputs(snapshot))
        except ProtocolViolation:
            worker.apply(worker.projector.fail("A2A_PROTOCOL_ERROR", errors.MSG_A2A_PROTOCOL_ERROR))
            return
        if state in dialect.TERMINAL_STATES or shows_inputs:
            worker.apply(worker.projector.feed(snapshot, with_text=False))
            if worker.projector.done:
                return
    try:
        reason = worker.consume(lambda: worker.client.subscribe_to_task(task_id), finish=False,
                                snapshot_first=True)
    except A2AError as exc:
        reason = "error"
        log.info("SubscribeToTask(%s) failed: %s", task_id, exc)
    if worker.projector.done:
        return
    try:
        repaired = worker.client.get_task(task_id, history_length=0)
    except A2AError:
        repaired = None
    if repaired is not None:
        worker.apply(worker.projector.feed(repaired, with_text=False))
        if worker.projector.done:
            return
    log.warning("task %s reached no boundary after the resume (%s)", task_id, reason)
    worker.cancel_task()
    worker.apply(worker.projector.fail("A2A_UNAVAILABLE", errors.MSG_A2A_UNAVAILABLE))

"""Driving a resume: the commands of ``projection.resume_machine.ResumeMachine`` executed against the upstream.

The machine decides everything (what to check, what to send, when to commit); this loop only performs
each command through ``A2AClient`` and ``StateRecorder`` and reports what happened, so every rule of a
resume can be read, and tested, without a socket or a file.
"""
import logging
from typing import Any, Callable, Dict, Optional

from iaccode_agui import errors
from iaccode_agui.a2a import dialect
from iaccode_agui.a2a.client import A2AError, A2ARpcError, SessionBackupNotReady, SessionLost
from iaccode_agui.web.inputs import RunRequest
from iaccode_agui.projection import resume_commands as cmd
from iaccode_agui.projection.resume_machine import ResumeMachine
from iaccode_agui.projection.resume_commands import Delivery, Upstream
from iaccode_agui.projection.projector import ProtocolViolation, RunContext
from iaccode_agui.runs.worker import RunWorker, StopRun
from iaccode_agui.state.model import ThreadState
from iaccode_agui.state.store import StateWriteFailed

log = logging.getLogger("iaccode_agui.runs")

TASK_NOT_FOUND = -32001      # A2A TaskNotFoundError: the runtime does not know the task (restarted without it)
NOT_CANCELABLE = -32002      # A2A TaskNotCancelableError: the task already ended upstream


def drive_resume(worker: RunWorker, req: RunRequest, ctx: RunContext, state: ThreadState) -> None:
    execution = state.execution
    facts = cmd.ResumeFacts(
        entries=list(req.resume or []), task_id=execution.task_id, session_id=state.session_id, cwd=state.cwd,
        applied={item.interrupt_id: item.digest for item in state.applied_resume_digests
                 if item.execution_id == execution.execution_id},
        expired_ids=frozenset(execution.expired_interrupt_ids), run_id=req.run_id,
        metadata=dialect.build_metadata(req.props, state.cwd, ctx.language),
        pipeline_cursor=execution.pipeline_sequence)
    machine = ResumeMachine(worker.projector, facts, generic=ctx.generic, pipeline_mode=ctx.pipeline_mode)
    shell = _Shell(worker, machine)
    command = machine.next_command()
    while not isinstance(command, cmd.Finished):
        machine.observe(shell.execute(command))
        if worker.cancelled_by_extension:
            machine.note_cancelled()
        command = machine.next_command()


class _Shell:
    def __init__(self, worker: RunWorker, machine: ResumeMachine) -> None:
        self.worker = worker
        self.client = worker.client
        self.recorder = worker.recorder
        self.machine = machine
        self._run: Dict[type, Callable[[Any], Any]] = {
            cmd.RestoreSession: self._restore, cmd.FetchTask: self._fetch, cmd.RecoverPipeline: self._pipeline,
            cmd.SendAnswer: self._send, cmd.CancelTask: self._cancel, cmd.Subscribe: self._subscribe,
            cmd.RecordInFlight: self._in_flight, cmd.RecordAnswer: self._answer,
            cmd.RecordInterrupts: self._interrupts, cmd.ReleaseExecution: self._release, cmd.Emit: self._emit}

    def execute(self, command: Any) -> Any:
        return self._run[type(command)](command)

    # ---- upstream ---------------------------------------------------------------------------
    def _restore(self, command: cmd.RestoreSession) -> Upstream:
        try:
            self.client.ensure_session_restored(command.cwd, command.session_id, command.task_id)
        except SessionBackupNotReady:
            return Upstream.BACKUP_NOT_READY
        except SessionLost:
            return Upstream.SESSION_LOST
        except A2AError as exc:
            log.warning("ensure-restored failed for task %s: %s", command.task_id, exc)
            return Upstream.UNAVAILABLE
        return Upstream.OK

    def _fetch(self, command: cmd.FetchTask) -> Any:
        try:
            return self.client.get_task(command.task_id, history_length=command.history_length)
        except A2ARpcError as exc:
            log.warning("GetTask(%s) failed: %s", command.task_id, exc)
            return Upstream.TASK_NOT_FOUND if exc.code == TASK_NOT_FOUND else Upstream.REFUSED
        except A2AError as exc:
            log.warning("GetTask(%s) failed: %s", command.task_id, exc)
            return Upstream.UNAVAILABLE

    def _pipeline(self, command: cmd.RecoverPipeline) -> Optional[Dict[str, Any]]:
        try:
            return self.client.get_pipeline_state(command.task_id, command.cursor)
        except A2AError as exc:
            log.warning("pipeline state of task %s unavailable: %s", command.task_id, exc)
            return None

    def _cancel(self, command: cmd.CancelTask) -> Upstream:
        if command.best_effort:
            log.warning("task %s reached no boundary after the resume", command.task_id)
            self.worker.cancel_task()
            return Upstream.OK
        try:
            self.client.cancel_task(command.task_id)
        except A2ARpcError as exc:
            return Upstream.NOT_CANCELABLE if exc.code == NOT_CANCELABLE else Upstream.REFUSED
        except A2AError:
            return Upstream.UNAVAILABLE
        return Upstream.OK

    def _subscribe(self, command: cmd.Subscribe) -> None:
        projector = self.worker.projector
        try:
            # The first frame is the task snapshot: its text was already shown.
            self.worker.consume(lambda: self.client.subscribe_to_task(command.task_id),
                                first=lambda result: self.worker.apply(projector.feed(result, with_text=False)))
        except A2AError as exc:
            log.info("SubscribeToTask(%s) failed: %s", command.task_id, exc)

    def _send(self, command: cmd.SendAnswer) -> Delivery:
        try:
            return self._stream(command) if command.streamed else self._sideband(command)
        except A2AError as exc:
            self.worker.fail_upstream(exc)
            return Delivery.FAILED

    def _sideband(self, command: cmd.SendAnswer) -> Delivery:
        try:
            self.client.send_message(dialect.send_params(command.message))
        except A2ARpcError as exc:
            if dialect.rpc_error_is_backup_not_ready(exc.data):
                raise
            return Delivery.REFUSED
        except A2AError:
            return Delivery.NOT_ACCEPTED
        self._accept(command.answer.interrupt_id)
        return Delivery.OPEN

    def _stream(self, command: cmd.SendAnswer) -> Delivery:
        worker, projector = self.worker, self.worker.projector
        accepted = []

        def first(result: Any) -> None:
            try:
                identity = projector.check_identity(result)
            except ProtocolViolation:
                worker.apply(projector.fail("A2A_PROTOCOL_ERROR", errors.MSG_A2A_PROTOCOL_ERROR))
                return
            worker.apply(identity)
            accepted.append(True)
            self._accept(command.answer.interrupt_id)
            worker.apply(projector.feed(result))

        try:
            reason = worker.consume(lambda: self.client.send_streaming_message(dialect.send_params(command.message)),
                                    first=first)
        except A2ARpcError as exc:
            if accepted or dialect.rpc_error_is_backup_not_ready(exc.data):
                raise
            log.warning("the runtime rejected the answer to %s: %s", command.answer.interrupt_id, exc)
            return Delivery.REFUSED
        except A2AError:
            if accepted:
                raise
            return Delivery.NOT_ACCEPTED
        if not accepted and not projector.done:
            return Delivery.NOT_ACCEPTED
        return Delivery.ENDED if reason is None else Delivery.OPEN

    def _accept(self, interrupt_id: str) -> None:
        """Acceptance: the answer is durable as applied before anything it caused is shown."""
        try:
            self.recorder.commit_answer(interrupt_id, self.machine.answer_digest(interrupt_id))
        except StateWriteFailed as exc:
            log.error("accepted answer %s could not be committed: %s", interrupt_id, exc)
            lost = self.machine.commit_lost()
            self.worker.cancel_task()
            self.recorder.release(terminal=True, clear_pending=True)
            self.worker.apply(lost)
            raise StopRun()
        self.worker.apply(self.machine.accepted(interrupt_id))

    # ---- state ------------------------------------------------------------------------------
    def _in_flight(self, command: cmd.RecordInFlight) -> bool:
        return _written("in-flight record of answer %s" % command.interrupt_id,
                        lambda: self.recorder.mark_in_flight(command.interrupt_id, command.digest))

    def _answer(self, command: cmd.RecordAnswer) -> bool:
        return _written("the answer %s the runtime took" % command.interrupt_id,
                        lambda: self.recorder.commit_answer(command.interrupt_id, command.digest))

    def _interrupts(self, command: cmd.RecordInterrupts) -> bool:
        return _written("newly discovered interrupts",
                        lambda: self.recorder.commit_interrupts(command.pending, command.text_digests))

    def _release(self, command: cmd.ReleaseExecution) -> None:
        self.recorder.release(terminal=True, clear_pending=True)

    def _emit(self, command: cmd.Emit) -> None:
        self.worker.apply(command.outputs)


def _written(what: str, write: Callable[[], None]) -> bool:
    """Whether a state write went through; the machine decides what a failed one means."""
    try:
        write()
    except StateWriteFailed as exc:
        log.error("%s not saved: %s", what, exc)
        return False
    return True

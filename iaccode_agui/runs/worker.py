"""The run worker: one thread per run that drives the A2A calls and feeds the run's channel.

It applies the projection's effects (state writes) before publishing the events that follow them, fails
closed when a recovery-critical write fails, and owns the upstream stream so that a disconnect (from the
SSE side) can abort a blocked read and cancel the task.
"""
import logging
import threading
from typing import Any, Callable, List, Optional

from iaccode_agui import errors
from iaccode_agui.a2a import dialect
from iaccode_agui.a2a.client import A2AClient, A2AError, A2ARpcError, A2AStream, A2ATimeout, A2AUnavailable
from iaccode_agui.projection.events import SESSION_EVENT
from iaccode_agui.projection.effects import (BindSession, BindTask, CommitInterrupts, EndRun, PipelineProgress,
                                             is_event)
from iaccode_agui.projection.projector import RunProjector
from iaccode_agui.sse.channel import RunChannel
from iaccode_agui.runs.recorder import ExecutionEnded, StateRecorder
from iaccode_agui.state.store import StateWriteFailed

log = logging.getLogger("iaccode_agui.runs")


class StopRun(Exception):
    """The run already published its terminal event; unwind the driver."""


class RunWorker:
    def __init__(self, *, client: A2AClient, projector: RunProjector, channel: RunChannel,
                 recorder: StateRecorder, driver: Callable[["RunWorker"], None],
                 on_end: Callable[["RunWorker"], None], on_release: Callable[[], None] = lambda: None) -> None:
        self.client = client
        self.projector = projector
        self.channel = channel
        self.recorder = recorder
        self._driver = driver
        self._on_end = on_end
        self._on_release = on_release
        self._lock = threading.Lock()
        self._stream: Optional[A2AStream] = None
        self.cancel_requested = False
        self.cancelled_by_extension = False
        self.outcome: Optional[str] = None       # "success" | "interrupt" | "error"
        self.error_code: Optional[str] = None
        self._held_task: Optional[str] = None
        self._held_session: Optional[str] = None
        self.thread = threading.Thread(target=self._main, name="agui-run-%s" % projector.ctx.run_id, daemon=True)
        self._opened = False
        self._open_error: Optional[Exception] = None
        self._thread_started = False
        self._usage_noted = projector.usage.version

    # ---- control from other threads ------------------------------------------------------------
    def open(self) -> None:
        """Publish the run's opening events (``RUN_STARTED``) from the calling (request) thread.

        Called right after admission, so the client's first byte waits neither for the run's thread to be
        created nor for it to be scheduled.  A failure is not raised here, where nobody could end the run:
        the run's thread raises it and ends the run as for any other unexpected failure.
        """
        if self._opened:
            return
        self._opened = True
        try:
            self.apply(self.projector.start())
        except Exception as exc:
            self._open_error = exc

    def start(self) -> None:
        """Start the run's thread (once; later calls do nothing)."""
        with self._lock:
            if self._thread_started:
                return
            self._thread_started = True
        self.thread.start()

    def start_or_fail(self) -> None:
        """Start the thread of a run whose RUN_STARTED is already out; if no thread can be had (the process
        is at its thread limit), end the run here, in the caller's thread, as an unavailable runtime."""
        try:
            self.start()
        except RuntimeError as exc:
            log.error("no thread for run %s: %s", self.projector.ctx.run_id, exc)
            self._driver = _no_thread
            self._main()

    def note_cancelled(self) -> None:
        """The cancel extension ended this execution: send nothing more to its task."""
        self.cancelled_by_extension = True

    def release_resources(self) -> None:
        """Drop what a finished run no longer needs (the request with its images, the shown text)."""
        self._driver = lambda worker: None
        self.projector.release_buffers()

    def request_cancel(self) -> None:
        """The client is gone: stop reading and cancel the task (once its id is known)."""
        with self._lock:
            self.cancel_requested = True
            stream = self._stream
        if stream is not None and self.projector.task_id:
            stream.abort()

    @property
    def finished(self) -> bool:
        return self.outcome is not None

    # ---- the thread -------------------------------------------------------------------------
    def _main(self) -> None:
        try:
            self.open()
            if self._open_error is not None:
                raise self._open_error
            self._open_history()
            self._driver(self)
        except StopRun:
            pass
        except Exception:  # a bug or an unexpected failure must still end the run cleanly
            log.exception("run %s failed unexpectedly", self.projector.ctx.run_id)
            if not self.projector.done:
                self.cancel_task_if_unprotected()
                self.apply(self.projector.fail("A2A_UNAVAILABLE", errors.MSG_A2A_UNAVAILABLE))
        finally:
            if self.outcome is None:
                self.outcome = "error"
                self.recorder.release(terminal=not self.projector.pending)
            self._on_release()
            self.channel.close()
            self._on_end(self)

    def _open_history(self) -> None:
        """The ``MESSAGES_SNAPSHOT`` the run opens with (read here, off the request thread: the first byte
        does not wait for the stored conversation)."""
        history = self.recorder.history
        snapshot = history.opening() if history is not None else None
        if snapshot is not None:
            self.apply([snapshot])

    # ---- applying projection outputs ----------------------------------------------------------
    def apply(self, outputs: List[Any]) -> None:
        """Apply effects, then publish the events that follow them (durable before visible).

        Task and session bindings are held back until an event is about to be published (or another
        effect runs), so the two frames that reveal them cost one state write, not two.
        """
        publish = self.channel.publish
        for index, item in enumerate(outputs):
            flushing = False
            try:
                if item.__class__ is dict and self._held_task is None and self._held_session is None:
                    publish(item)    # the common output: an event, no binding waiting to be written
                    continue
                if isinstance(item, BindTask):
                    self._held_task = item.task_id
                    continue
                if isinstance(item, BindSession):
                    self._held_session = item.session_id
                    continue
                flushing = True
                self.flush_bindings()
                flushing = False
                if is_event(item):
                    self.channel.publish(item)
                    continue
                self.channel.flush()
                self._effect(item)
            except StateWriteFailed as exc:
                # A failed flush happened before ``item`` itself was handled: it still has to go out.
                rest = outputs[index:] if flushing else outputs[index + 1:]
                if isinstance(exc, ExecutionEnded):
                    self._end_cancelled(rest)
                else:
                    log.error("recovery-critical state write failed on thread %s: %s", self.recorder.thread_id, exc)
                    self._fail_closed(rest)
                raise StopRun()
        self._note_usage()

    def _note_usage(self) -> None:
        """Usage totals reach clients only at the run's end: the log keeps them for a take-over."""
        usage = self.projector.usage
        if usage.version != self._usage_noted and not self.projector.done:
            self._usage_noted = usage.version
            self.channel.note_usage(usage.summary())

    def flush_bindings(self) -> None:
        if self._held_task is None and self._held_session is None:
            return
        task_id, session_id = self._held_task, self._held_session
        self._held_task = self._held_session = None
        self.channel.flush()   # the events before a state write stay ahead of it in the log
        self.recorder.bind(task_id=task_id, session_id=session_id)

    def _effect(self, item: Any) -> None:
        if isinstance(item, CommitInterrupts):
            self.recorder.commit_interrupts(item.pending, item.text_digests)
        elif isinstance(item, PipelineProgress):
            self.recorder.update_pipeline(item.sequence, item.open_steps)
        elif isinstance(item, EndRun):
            self._end(item)

    def _end(self, end: EndRun) -> None:
        # Free the thread before the terminal event is visible, so a client that reacts to it at once
        # is not told THREAD_BUSY.
        self.outcome = end.outcome
        self.error_code = end.code
        if end.code == "CONVERSATION_LOST":
            log.warning("thread %s: the A2A runtime no longer has session %s (it answered a new turn with another "
                        "one); the thread cannot continue, the client must start a new thread",
                        self.projector.ctx.thread_id, self.projector.ctx.session_id)
        if end.code in ("A2A_PROTOCOL_ERROR", "CONVERSATION_LOST"):
            self.cancel_task_if_unprotected()   # nobody would observe the task any more
        self.recorder.release(terminal=end.outcome != "interrupt", interrupted=end.outcome == "interrupt")
        self._on_release()

    def _fail_closed(self, rest: List[Any]) -> None:
        """Nothing recoverable may be announced: cancel upstream, clear pending, end with an error."""
        self.cancel_task()
        self._finish_without_announcing(rest, "STATE_PERSISTENCE_FAILED", errors.MSG_STATE_PERSISTENCE_FAILED)

    def _end_cancelled(self, rest: List[Any]) -> None:
        """The execution was cancelled (or expired) while this run was still producing output."""
        self._finish_without_announcing(rest, "CANCELLED", errors.MSG_CANCELLED)

    def _finish_without_announcing(self, rest: List[Any], code: str, message: str) -> None:
        for item in rest:
            if is_event(item) and item["type"] not in ("RUN_FINISHED", "RUN_ERROR") and not (
                    item["type"] == "CUSTOM" and item.get("name") == SESSION_EVENT):
                self.channel.publish(item)
        self.projector.drop_pending()
        outputs = self.projector.abort(code, message)
        for item in outputs:
            if is_event(item):
                self.channel.publish(item)
            elif isinstance(item, PipelineProgress):
                try:
                    self.recorder.update_pipeline(item.sequence, item.open_steps)
                except StateWriteFailed as exc:
                    log.warning("pipeline cursor not saved after a failure: %s", exc)
            elif isinstance(item, EndRun):
                self.outcome = "error"
                self.error_code = item.code
                self.recorder.release(terminal=True, clear_pending=True)
                self._on_release()

    # ---- upstream ---------------------------------------------------------------------------
    def consume(self, open_stream: Callable[[], A2AStream],
                first: Optional[Callable[[Any], None]] = None) -> Optional[str]:
        """Read one upstream stream through the projection.

        Returns None when the run ended (terminal event published, or the client left), otherwise "eof"
        (the stream closed before a boundary) so the driver decides what follows.  ``first`` takes the
        first frame instead of the plain projection: the acceptance of an answer, or a subscription's
        snapshot whose text was already shown.
        """
        stream = open_stream()
        with self._lock:
            self._stream = stream
            abort_now = self.cancel_requested and bool(self.projector.task_id)
        if abort_now:
            stream.abort()
        handle_first = first
        stream.before_read = self.channel.flush
        try:
            with self.channel.batch():
                self._project(stream, handle_first)
        except A2AError as exc:
            if not self.cancel_requested:
                raise
            log.debug("upstream read ended after cancel: %s", exc)
        finally:
            with self._lock:
                self._stream = None
            stream.close()
        if self.projector.done:
            return None
        if self.cancel_requested:
            self.cancel_after_disconnect()
            return None
        return "eof"

    def _project(self, stream: A2AStream, handle_first: Optional[Callable[[Any], None]]) -> None:
        """Feed the stream's results to the projection until the run ends, a cancel, or the stream's end."""
        for result in stream:
            if handle_first is not None:
                handle_first(result)
                handle_first = None
            else:
                self.apply(self.projector.feed(result))
            if self.projector.done:
                return
            if self.cancel_requested and self.projector.task_id:
                stream.abort()
                return

    def cancel_after_disconnect(self) -> None:
        if self.projector.delivering and self.projector.pending:
            self.apply(self.projector.abort("CANCELLED", errors.MSG_CANCELLED, keep_pending=True))
            return
        self.cancel_task()
        self.apply(self.projector.abort("CANCELLED", errors.MSG_CANCELLED))

    def cancel_task_if_unprotected(self) -> None:
        """Cancel the task unless interrupts it left pending still need it (they resume into it)."""
        if not self.projector.pending:
            self.cancel_task()

    def cancel_task(self) -> None:
        """Best-effort CancelTask of the run's task: the run ends either way, so a failure is only logged."""
        task_id = self.projector.task_id
        if not task_id:
            return
        try:
            self.client.cancel_task(task_id)
        except A2AError as exc:
            log.info("best-effort CancelTask(%s) failed: %s", task_id, exc)

    def fail_upstream(self, exc: Exception) -> None:
        """Map an upstream failure to RUN_ERROR; an unaccepted run's task is cancelled best-effort."""
        if isinstance(exc, A2ARpcError) and dialect.rpc_error_is_backup_not_ready(exc.data):
            self.apply(self.projector.fail("SESSION_BACKUP_NOT_READY", errors.MSG_SESSION_BACKUP_NOT_READY))
            return
        message = errors.MSG_A2A_UNAVAILABLE
        if isinstance(exc, A2ATimeout):
            message = errors.MSG_A2A_IDLE_TIMEOUT
        self.cancel_task_if_unprotected()
        self.apply(self.projector.fail("A2A_UNAVAILABLE", message))


def _no_thread(worker: RunWorker) -> None:
    worker.fail_upstream(A2AUnavailable("no thread could be started for the run"))


def drive_new_turn(worker: RunWorker, message: dict) -> None:
    """A new user turn: one SendStreamingMessage whose stream is projected to its end."""
    try:
        if worker.consume(lambda: worker.client.send_streaming_message(dialect.send_params(message))) is not None:
            worker.apply(worker.projector.end_of_stream())
    except A2AError as exc:
        worker.fail_upstream(exc)

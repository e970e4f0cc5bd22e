"""State writes made while a run is in flight, each one short read-modify-write transaction.

Every write re-reads the thread file under its lock and checks that the execution it is about is still
the current one, so a cancel or a newer turn from another process is never overwritten.
Recovery-critical writes raise ``StateWriteFailed`` (the worker then fails closed); bookkeeping writes
at the end of a run are best-effort and only logged.
"""
import dataclasses
import logging
from typing import Any, Callable, Iterable, Mapping, Optional

from iaccode_agui.state.model import PendingInterrupt, ThreadState
from iaccode_agui.state.store import StateError, StateWriteFailed, ThreadStore

log = logging.getLogger("iaccode_agui.state")


class ExecutionEnded(StateWriteFailed):
    """The execution was ended meanwhile (cancel extension, expiry): nothing may be recorded for it."""


class StateRecorder:
    def __init__(self, store: ThreadStore, thread_id: str, execution_id: str, run_id: str) -> None:
        self.store = store
        self.thread_id = thread_id
        self.execution_id = execution_id
        self.run_id = run_id
        self.history: Any = None    # the run's part of the stored conversation (``runs.history_writer``), if kept

    def _update(self, change: Callable[[ThreadState], bool], require_current: bool = True) -> None:
        try:
            with self.store.transaction(self.thread_id) as txn:
                state = txn.state
                if state is None:
                    raise StateWriteFailed("the thread state disappeared")
                if require_current and state.execution.execution_id != self.execution_id:
                    raise StateWriteFailed("the execution is no longer current")
                if require_current and self.execution_id in state.terminal_execution_ids:
                    raise ExecutionEnded("the execution was ended meanwhile")
                # The transaction's state was just read from disk and is ours alone: change it in place.
                if change(state):
                    txn.save(state)
        except StateWriteFailed:
            raise
        except StateError as exc:
            raise StateWriteFailed(str(exc)) from exc

    def bind(self, task_id: Optional[str] = None, session_id: Optional[str] = None) -> None:
        """Persist the A2A task and/or iac-code session of the run (one write for both).

        Its journal sync stays ahead of the next event shown (the first text): after a crash the task is
        what a take-over follows or a later admission cancels, and the session is what the thread's next
        turn continues; a client that saw the run's text must never find a thread that lost either.
        """
        def change(state: ThreadState) -> bool:
            changed = False
            if task_id is not None and state.execution.task_id != task_id:
                state.execution.task_id = task_id
                changed = True
            if session_id is not None and state.session_id != session_id:
                state.session_id = session_id
                changed = True
            return changed
        self._update(change)

    def commit_interrupts(self, pending: Mapping[str, PendingInterrupt], digests: Iterable[str]) -> None:
        def change(state: ThreadState) -> bool:
            state.execution.pending = dict(pending)
            state.execution.text_snapshot_digests = sorted(set(digests))
            return True
        self._update(change)

    def mark_in_flight(self, interrupt_id: str, digest: Optional[str]) -> None:
        """Remember the answer about to be sent (None: forget it), so a crash before its acceptance is
        recognisable on the next resume."""
        def change(state: ThreadState) -> bool:
            pending = state.execution.pending.get(interrupt_id)
            if pending is None or pending.answer_digest == digest:
                return False
            state.execution.pending[interrupt_id] = dataclasses.replace(pending, answer_digest=digest)
            return True
        self._update(change)

    def commit_answer(self, interrupt_id: str, digest: str) -> None:
        """An answer was accepted upstream: drop it from pending and remember its digest."""
        def change(state: ThreadState) -> bool:
            state.execution.pending.pop(interrupt_id, None)
            state.record_applied(self.execution_id, interrupt_id, digest)
            return True
        self._update(change)
        if self.history is not None:
            self.history.note_answer(interrupt_id)

    def update_pipeline(self, sequence: int, open_steps: Iterable[str]) -> None:
        def change(state: ThreadState) -> bool:
            steps = sorted(set(open_steps))
            if state.execution.pipeline_sequence == sequence and state.execution.pipeline_open_steps == steps:
                return False
            state.execution.pipeline_sequence = max(0, int(sequence))
            state.execution.pipeline_open_steps = steps
            return True
        self._update(change)

    def abandon(self) -> None:
        """The run never started: drop its claim and its run id, so the same request can be sent again."""
        def change(state: ThreadState) -> bool:
            if state.active_run is None or state.active_run.run_id != self.run_id:
                return False
            state.active_run = None
            state.run_digests.pop(self.run_id, None)
            return True
        try:
            self._update(change, require_current=False)
        except StateWriteFailed as exc:
            log.warning("could not roll back run %s on thread %s: %s", self.run_id, self.thread_id, exc)

    def release(self, *, terminal: bool, clear_pending: bool = False, interrupted: bool = False) -> None:
        """End of the run (best-effort): free the thread and, unless interrupted, end the execution.

        ``interrupted``: the run ends in the execution's pending interrupts, so a resume may continue it.

        Written before the terminal event is visible (a client reacting at once must not be told
        THREAD_BUSY), so its journal sync is on the run's close, not on its first byte or first text.  It
        stays a synced write: the thread file is only ever replaced behind a journal record, which is what
        rebuilds a file that a power cut lost or tore.  The run's part of the stored conversation is saved
        first, while the run still holds its thread: the next run of the thread reads it complete.
        """
        if self.history is not None:
            self.history.save(interrupted=not terminal and not clear_pending)
        def change(state: ThreadState) -> bool:
            changed = False
            if state.active_run is not None and state.active_run.run_id == self.run_id:
                state.active_run = None
                changed = True
            current = state.execution.execution_id == self.execution_id
            if clear_pending and current and state.execution.pending:
                state.execution.pending.clear()
                changed = True
            if interrupted and current and state.execution.pending:
                changed = state.execution.note_interrupted(self.run_id, list(state.execution.pending)) or changed
            if terminal and (not current or not state.execution.pending) and \
                    self.execution_id not in state.terminal_execution_ids:
                state.mark_terminal(self.execution_id)
                changed = True
            return changed
        try:
            self._update(change, require_current=False)
        except StateWriteFailed as exc:
            log.warning("could not release run %s on thread %s: %s", self.run_id, self.thread_id, exc)

"""The cancel extension: end one execution on request, upstream first, then durably.

A cancel names the execution and the ROS invocation it belongs to, so a stale or foreign request can
never end someone else's run.  The task is cancelled upstream before the state says so: a crash in
between leaves an execution that a retry cancels again, never a task that runs on unseen.
"""
import logging
from typing import Callable, Optional

from iaccode_agui.a2a.client import A2AClient, A2AError, A2ARpcError
from iaccode_agui.errors import AguiError
from iaccode_agui.runs.worker import RunWorker
from iaccode_agui.state.model import ThreadState
from iaccode_agui.state.store import StateUnavailable, StateWriteFailed, ThreadStore

log = logging.getLogger("iaccode_agui.runs")

CANCELLED = "cancelled"
ALREADY_TERMINAL = "already_terminal"
NOT_CANCELABLE = -32002      # A2A TaskNotCancelableError: already terminal upstream; still end it here


def cancel_execution(store: ThreadStore, client: A2AClient, live_worker: Callable[[str], Optional[RunWorker]],
                     execution_id: str, thread_id: str, ros_invocation_id: str) -> str:
    """Cancel the execution; returns ``cancelled`` or ``already_terminal``, raises ``AguiError``."""
    state = _load(store, thread_id)
    known = _known_status(state, execution_id, ros_invocation_id)
    if known is not None:
        return known
    worker = live_worker(execution_id)
    if worker is not None:
        worker.note_cancelled()
    task_id = state.execution.task_id
    if task_id:
        _cancel_upstream(client, task_id)
    elif worker is None:
        return ALREADY_TERMINAL      # no task and no run: nothing is executing
    else:
        worker.request_cancel()
    _persist(store, thread_id, execution_id)
    return CANCELLED


def _load(store: ThreadStore, thread_id: str) -> ThreadState:
    try:
        state = store.load(thread_id)
    except StateUnavailable:
        raise AguiError("STATE_UNAVAILABLE")
    if state is None:
        raise AguiError("EXECUTION_NOT_FOUND")
    return state


def _known_status(state: ThreadState, execution_id: str, ros_invocation_id: str) -> Optional[str]:
    """``already_terminal`` for an execution that ended; an error unless it is the current one."""
    execution = state.execution
    if execution.execution_id != execution_id:
        if execution_id in state.terminal_execution_ids:
            return ALREADY_TERMINAL
        raise AguiError("EXECUTION_NOT_FOUND")
    if execution.ros_invocation_id != ros_invocation_id:
        raise AguiError("EXECUTION_NOT_FOUND")
    if execution_id in state.terminal_execution_ids:
        return ALREADY_TERMINAL
    return None


def _cancel_upstream(client: A2AClient, task_id: str) -> None:
    try:
        client.cancel_task(task_id)
    except A2ARpcError as exc:
        if exc.code != NOT_CANCELABLE:
            raise AguiError("A2A_UNAVAILABLE")
    except A2AError:
        raise AguiError("A2A_UNAVAILABLE")


def _persist(store: ThreadStore, thread_id: str, execution_id: str) -> None:
    try:
        with store.transaction(thread_id) as txn:
            current = txn.state
            if current is not None and current.execution.execution_id == execution_id:
                draft = current.copy()
                draft.execution.pending.clear()
                draft.mark_terminal(execution_id)
                txn.save(draft)
    except (StateUnavailable, StateWriteFailed) as exc:
        log.error("cancel of execution %s could not be persisted: %s", execution_id, exc)
        raise AguiError("STATE_UNAVAILABLE")

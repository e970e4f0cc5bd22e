"""Stop: end a run (or the execution its interrupt left pending) on the client's explicit request.

It goes through the same cancel path as the iac-code cancel extension, so the upstream task is
cancelled, pending interrupts are cleared durably and a live stream ends with ``RUN_CANCELLED`` —
also when another process of the deployment owns the stream: the cancel reaches the task upstream
and the owner's stream ends on the task's cancelled state, as it does for the cancel extension.
"""
from typing import Optional

from iaccode_agui.errors import AguiError
from iaccode_agui.runs.manager import RunManager
from iaccode_agui.state.model import ThreadState
from iaccode_agui.state.store import StateUnavailable


def stop_run(manager: RunManager, thread_id: str, run_id: str) -> None:
    """Return when the run is stopped or had already ended; ``RUN_NOT_FOUND`` when nothing is known of it.

    A run this process does not hold is looked up in the thread's durable state: while the state names
    it the active run, the current execution is that run's (whichever process owns it), so that one is
    cancelled.  So is the execution of a run that ended in the interrupts still pending, when no run came
    after it on the thread: those interrupts are that run's, as on the owner (a stop reaches any worker).
    Otherwise the run has ended and a stop succeeds without touching anything: which execution an older
    run belonged to is not recorded, and guessing could cancel a newer one.
    """
    run = manager.find_run(thread_id, run_id)
    if run is not None:
        _cancel(manager, run.execution_id, thread_id, run.ros_invocation_id)
        return
    state = _load(manager, thread_id)
    if state is None or run_id not in state.run_digests:
        raise AguiError("RUN_NOT_FOUND")
    if state.active_run is not None:
        ours = state.active_run.run_id == run_id
    else:
        ours = bool(state.execution.pending) and _newest_run(state) == run_id
    if ours:
        _cancel(manager, state.execution.execution_id, thread_id, state.execution.ros_invocation_id)


def _newest_run(state: ThreadState) -> Optional[str]:
    return max(state.run_times, key=state.run_times.__getitem__) if state.run_times else None


def _load(manager: RunManager, thread_id: str) -> Optional[ThreadState]:
    try:
        return manager.store.load(thread_id)
    except StateUnavailable:
        raise AguiError("STATE_UNAVAILABLE")


def _cancel(manager: RunManager, execution_id: str, thread_id: str, ros_invocation_id: str) -> None:
    try:
        manager.cancel(execution_id, thread_id, ros_invocation_id)
    except AguiError as exc:
        if exc.code != "EXECUTION_NOT_FOUND":
            raise
        # The thread moved on to a newer execution: this run's own one ended long ago.

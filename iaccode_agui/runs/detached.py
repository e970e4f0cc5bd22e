"""Stop by disconnect for runs kept without a client, when the run belongs to another process.

A run of ``/ag-ui/agent`` goes on when its client disconnects (it can be attached again), and many stock
clients stop a run only by dropping its stream: their next message on the thread is what says the run is
no longer wanted.  Within one process the manager sees whether the run has a client
(``RunManager._free_abandoned``); a run owned by another process on the state directory is judged from
what that process leaves on disk:

- the owner holds a shared ``flock`` on the run's ``.detached`` file while no client of its own is attached
  (``mark_detached``; taken when its client leaves, so a run that keeps its client never makes the file),
  and a client following the run through a third process holds one on its ``.watch`` file, so "no client
  anywhere" is "the first is held and the second is not";
- the run log's header says whether the run is kept without a client, and its writer's lock that the owner
  is alive (a dead owner's run is adopted first, as any orphan).

Then the run is cancelled as a stop that reaches another process cancels it (``RunManager.cancel``: one
``CancelTask``, the owner's stream ends with ``RUN_CANCELLED``) and the request waits for the thread.  A
client that attaches between the probe and the cancel reads the run's end.  The owner notices a dropped
connection within its disconnect poll; until then there is no mark and the request is told the thread is
busy, as it would be on the owner.
"""
import logging
import time
from typing import Any, Optional

from iaccode_agui.errors import AguiError
from iaccode_agui.runs.cancel import CANCELLED
from iaccode_agui.runs.liverun import LiveRun
from iaccode_agui.runlog.logfiles import DETACHED_SUFFIX, RunLogStore
from iaccode_agui.state.model import ThreadState
from iaccode_agui.state.store import StateError

log = logging.getLogger("iaccode_agui.runs")

YIELD_WAIT = 5.0        # how long a request waits for a run cancelled in another process to free the thread
YIELD_POLL = 0.05


def mark_detached(runlogs: RunLogStore, run: LiveRun, now: bool = False) -> None:
    """Have the run's channel hold the ``.detached`` mark while no client is attached (logs enabled only);
    ``now`` for a run that starts without one (adopted after its owner died)."""
    if runlogs.enabled:
        run.channel.use_marker(lambda: runlogs.watch(run.thread_id, run.run_id, DETACHED_SUFFIX), now)


def free_elsewhere(manager: Any, thread_id: str) -> bool:
    """Cancel the thread's run when another live process owns it, keeps it without a client and nobody is
    attached to it anywhere; True once the thread is free for the request."""
    state = _detached_elsewhere(manager, thread_id)
    if state is None:
        return False
    execution = state.execution
    log.info("thread %s: a new request cancels run %s of another process, to which no client is attached",
             thread_id, state.active_run.run_id if state.active_run else "?")
    try:
        status = manager.cancel(execution.execution_id, thread_id, execution.ros_invocation_id)["status"]
    except AguiError as exc:
        status = exc.code
    if status != CANCELLED:     # e.g. no task yet: nothing another process could cancel
        log.info("thread %s: the detached run was not cancelled: %s", thread_id, status)
        return False
    deadline = time.monotonic() + YIELD_WAIT
    while time.monotonic() < deadline:
        try:
            lease = manager.store.try_run_lease(thread_id)
        except StateError:
            return False
        if lease is not None:
            lease.release()
            return True
        time.sleep(YIELD_POLL)
    return False


def _detached_elsewhere(manager: Any, thread_id: str) -> Optional[ThreadState]:
    """The thread's state when its active run is another live process's, kept without a client, unattached."""
    runlogs = manager.runlogs
    if not runlogs.enabled:
        return None
    try:
        state = manager.store.load(thread_id)
    except StateError:
        return None
    active = state.active_run if state is not None else None
    if active is None or active.owner == manager.owner:
        return None
    reader = runlogs.open_reader(thread_id, active.run_id)
    if reader is None:
        return None
    try:
        header, alive = reader.header, reader.writer_alive()
    finally:
        reader.close()
    if not (alive and header.get("keepWithoutClient") and header.get("executionId") == state.execution.execution_id):
        return None
    if runlogs.watched(thread_id, active.run_id) or not runlogs.watched(thread_id, active.run_id, DETACHED_SUFFIX):
        return None
    return state

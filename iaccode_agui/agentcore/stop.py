"""Stop: end a run (or the execution its interrupt left pending) on the client's explicit request.

It goes through the same cancel path as the iac-code cancel extension, so the upstream task is
cancelled, pending interrupts are cleared durably and a live stream ends with ``RUN_CANCELLED``.
"""
from iaccode_agui.errors import AguiError
from iaccode_agui.runs.manager import RunManager


def stop_run(manager: RunManager, thread_id: str, run_id: str) -> None:
    """Return when the run is stopped or had already ended; ``RUN_NOT_FOUND`` when nothing is known of it.

    A run this process no longer holds in memory but the thread's state remembers has ended (its
    worker is gone with the process that ran it), so a stop of it succeeds without touching anything:
    which execution it belonged to is not recorded, and guessing could cancel a newer one.
    """
    run = manager.find_run(thread_id, run_id)
    if run is None:
        if manager.recorded_digest(thread_id, run_id) is None:
            raise AguiError("RUN_NOT_FOUND")
        return
    try:
        manager.cancel(run.execution_id, thread_id, run.ros_invocation_id)
    except AguiError as exc:
        if exc.code != "EXECUTION_NOT_FOUND":
            raise
        # The thread moved on to a newer execution: this run's own one ended long ago.

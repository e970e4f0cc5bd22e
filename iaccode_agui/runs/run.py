"""The one run type: what a request holds of the run it streams, whatever kind of run it is.

A run this process holds (admitted here, or adopted after its owner died; live, or finished and kept for
re-attach) is a ``runs.liverun.LiveRun``, until a finished one whose log holds every event is kept as its
small ``runs.finished.FinishedRun``; a run another process holds, followed from its log, is a
``runlog.follow.FollowedRun``.  The HTTP layer streams either the same way: it starts the run's thread after
the first write (a followed run has none), reads its outcome when the stream closes, and tells the run that
its client left, which decides whether the run goes on.
"""
from typing import Optional, Protocol, runtime_checkable


class Worker(Protocol):
    """What a stream reads of the run's worker: a ``runs.worker.RunWorker``, or a finished run's outcome."""

    outcome: Optional[str]
    error_code: Optional[str]

    @property
    def finished(self) -> bool:
        """The run has ended (its outcome is set)."""

    def start_or_fail(self) -> None:
        """Start the run's thread once the stream's first bytes are out."""

    def request_cancel(self) -> None:
        """Stop the run: its client is gone for good."""


@runtime_checkable
class Run(Protocol):
    thread_id: str
    run_id: str

    @property
    def worker(self) -> Optional[Worker]:
        """The run's worker in this process; None for a run followed from another process's log."""

    def client_closed(self, finished: bool) -> None:
        """The client's stream closed (``finished``: after the run's end); the run decides what follows."""

"""A finished run kept for re-attach as a small summary once its durable log holds every event.

A run that has just ended is a graph of about 130 objects: its worker and thread, projector, recorder,
channel, queues and their locks, some 12 KB in all.  The manager keeps the last finished runs so that a
client can re-attach and read the tail it missed, but once the run log holds every frame and no client is
attached, all a re-attach (``Last-Event-ID`` on ``POST /``, an ``/ag-ui/agent`` attach) or a stop needs is
the run's identity, its request digest, its outcome and where its log is.  The housekeeper swaps the
whole graph for this summary, so a kept run costs about 1 KB (tracemalloc) instead of the graph, which is
let go a tick after the run ended (the next collection frees it) instead of being held for 256 more runs.

A run without a complete log (no log, a log that reached its size cap, a log given up after an I/O
error) keeps its whole graph: its memory frames are the only copy of its events.
"""
import threading
from typing import Optional, Tuple, Union

from iaccode_agui.sse.channel import RunChannel
from iaccode_agui.runs.liverun import LiveRun


class EndedWorker:
    """What is left of a finished run's worker: its outcome, read when a re-attached stream closes."""

    __slots__ = ("outcome", "error_code")
    finished = True

    def __init__(self, outcome: Optional[str], error_code: Optional[str]) -> None:
        self.outcome = outcome
        self.error_code = error_code

    def start_or_fail(self) -> None:
        """A re-attached stream starts its run's thread after the first write; this run has none."""

    def request_cancel(self) -> None:
        """Nothing left to cancel: the run has ended."""


def _fresh(text: str) -> str:
    """A copy of ``text`` allocated now.

    The run's identifiers were allocated while its request was parsed, among thousands of short-lived
    objects; kept for minutes they would pin those objects' allocator pools (and the arenas around them)
    after everything else there is freed.  Copies made by the housekeeping tick sit next to each other.
    """
    return text.encode("utf-8", "surrogatepass").decode("utf-8", "surrogatepass")


class FinishedRun:
    """A finished run as the manager keeps it for re-attach and stop, without its object graph: a ``Run``
    (``runs.run``) whose worker is an ``EndedWorker`` and whose channel replays from the log."""

    __slots__ = ("thread_id", "run_id", "digest", "execution_id", "ros_invocation_id", "ended_at", "worker",
                 "channel", "takeover_gate", "metrics")
    keep_without_client = False
    adopted = False

    def __init__(self, run: LiveRun, channel: RunChannel, worker: EndedWorker) -> None:
        self.thread_id = _fresh(run.thread_id)
        self.run_id = _fresh(run.run_id)
        self.digest = _fresh(run.digest)
        self.execution_id = _fresh(run.execution_id)
        self.ros_invocation_id = _fresh(run.ros_invocation_id)
        self.ended_at = run.ended_at
        self.worker = worker
        self.channel = channel
        self.takeover_gate = threading.Lock()
        self.metrics = run.metrics

    @property
    def key(self) -> Tuple[str, str]:
        return self.thread_id, self.run_id

    def client_closed(self, finished: bool) -> None:
        self.metrics.inc("agui_streams_closed_total")

    def cancel_grace(self) -> None:
        """A re-attach cancels a reconnect grace; a finished run has none."""

    def followed_elsewhere(self) -> bool:
        return False


KeptRun = Union[LiveRun, FinishedRun]      # a finished run as ``runs.kept`` holds it


def summarise(run: "KeptRun") -> Optional[FinishedRun]:
    """The summary of a finished run, or None while it must keep its graph (see the module docstring).

    Also None while a client is attached (it reads the run's own channel; a second client must still be
    refused as before) and for a run already summarised.
    """
    if isinstance(run, FinishedRun):
        return None
    channel, worker = run.channel, run.worker
    if worker is None or not worker.finished or not channel.closed or not channel.log_complete \
            or channel.attached or channel.memory_bytes:
        return None
    return FinishedRun(run, channel.logged(), EndedWorker(worker.outcome, worker.error_code))

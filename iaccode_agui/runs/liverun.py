"""A run this process holds: its lease, channel and worker, and the timers that decide when a client is gone.

A closed connection does not end a run at once: a reconnect grace, a client attached through another
process, or an adopted run waiting for its first client each keep it going for a while.  These timers
are all about one run, so they live with it; the manager only admits, finds and ends runs.
"""
import threading
from typing import Any, Optional, Tuple

from iaccode_agui.config import Settings
from iaccode_agui.metrics import Metrics
from iaccode_agui.sse.channel import RunChannel
from iaccode_agui.runs.profile import DEFAULT as DEFAULT_PROFILE, RunProfile
from iaccode_agui.runlog.logfiles import RunLogStore
from iaccode_agui.runs.worker import RunWorker
from iaccode_agui.state.model import ThreadState
from iaccode_agui.state.store import RunLease

REMOTE_ATTACH_POLL = 0.5      # how often an owner without a client checks for one attached elsewhere


class LiveRun:
    """A run of this process, admitted or adopted, live or ended and kept for re-attach (``runs.run.Run``)."""

    def __init__(self, req: Any, state: ThreadState, lease: RunLease, channel: RunChannel, settings: Settings,
                 metrics: Metrics, runlogs: RunLogStore, profile: RunProfile = DEFAULT_PROFILE) -> None:
        """``req``: the ``RunRequest`` that admitted the run, or what an adoption rebuilt of it from the log."""
        self.settings = settings
        self.metrics = metrics
        self.runlogs = runlogs
        self.profile = profile
        self.thread_id = req.thread_id
        self.run_id = req.run_id
        self.digest = req.digest
        self.execution_id = state.execution.execution_id
        self.ros_invocation_id = state.execution.ros_invocation_id
        self.lease = lease
        self.channel = channel
        self.worker: Optional[RunWorker] = None
        self.ended_at: Optional[float] = None
        self._grace_timer: Optional[threading.Timer] = None
        self.keep_without_client = False    # followed to its end even with nobody attached
        self.adopted = False                # continued from its log after its owning process died
        # One re-attach at a time may wait for the old connection's loss; the others answer at once, so a
        # flood of re-attaches cannot hold a worker each for the whole take-over wait.
        self.takeover_gate = threading.Lock()

    @property
    def key(self) -> Tuple[str, str]:
        return self.thread_id, self.run_id

    def detached_wait(self) -> Optional[float]:
        """How long the run goes on once no client is attached: None for ever, 0 not at all.

        A run of ``POST /`` waits the reconnect grace; one kept without a client (``/ag-ui/agent``) the
        detached-run timeout, whose default 0 keeps it going to its end (a new message on its thread, or a
        stop, ends it sooner).
        """
        settings = self.settings
        if self.keep_without_client:
            return settings.detached_run_timeout or None
        return settings.reconnect_grace

    def client_closed(self, finished: bool) -> None:
        """The SSE response closed; cancel the run unless it ended or is safely interrupted."""
        self.metrics.inc("agui_streams_closed_total")
        worker = self.worker
        wait = self.detached_wait()
        if finished or worker is None or worker.finished or self.channel.attached or wait is None:
            return      # ended, another client already took the run over (re-attach), or kept regardless
        if self.followed_elsewhere():
            self._recheck_later()
            return
        if wait > 0:
            self._start_timer(wait)
            return
        self.channel.cancel_if_detached(worker.request_cancel)

    def cancel_grace(self) -> None:
        """A client re-attached (or a new grace period starts): an older timer must not cut it short."""
        timer, self._grace_timer = self._grace_timer, None
        if timer is not None:
            timer.cancel()

    def _start_timer(self, wait: float) -> None:
        timer = threading.Timer(wait, self._grace_expired)
        timer.daemon = True
        self.cancel_grace()
        self._grace_timer = timer
        timer.start()

    def _grace_expired(self) -> None:
        worker = self.worker
        if worker is not None and not worker.finished and not self.channel.attached:
            if self.followed_elsewhere():
                self._recheck_later()
                return
            # Decided under the channel's lock: a re-attach comes before it (and the run goes on) or after
            # it (and reads the run's end, RUN_CANCELLED), never in between.
            self.channel.cancel_if_detached(worker.request_cancel)

    def start_adoption_grace(self) -> None:
        """An adopted run waits that long for a client (attached here or elsewhere) before it is cancelled:
        the take-over grace, or longer when the run's own wait without a client is longer."""
        wait = self.detached_wait()
        if wait is not None:
            self._start_timer(max(self.settings.takeover_grace, wait))

    def followed_elsewhere(self) -> bool:
        """A client that re-attached through another process follows this run from its log."""
        return self.runlogs.enabled and self.runlogs.watched(self.thread_id, self.run_id)

    def _recheck_later(self) -> None:
        """While a client follows elsewhere nothing is cancelled; once it leaves, a disconnect counts."""
        timer = threading.Timer(REMOTE_ATTACH_POLL, self.client_closed, args=(False,))
        timer.daemon = True
        self.cancel_grace()
        self._grace_timer = timer
        timer.start()

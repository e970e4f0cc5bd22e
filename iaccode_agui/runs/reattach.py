"""Re-attaching a client to a run it lost: the run kept here, or followed from its log.

A client whose stream broke posts again with ``Last-Event-ID`` (or an AgentCore attach) and must get the
events after the last one it saw, whether the run still streams, has ended and is kept by this process,
or belongs to another process on the state directory (its log is followed).  A run id the thread never
admitted is not a re-attach at all (the caller admits it as a new run); one it admitted but nobody keeps
any more has ended for good.  These rules apply to the manager's runs; they decide nothing about admission.
"""
from typing import Optional, Tuple

from iaccode_agui.errors import AguiError
from iaccode_agui.metrics import Metrics
from iaccode_agui.runlog.follow import LogAttach
from iaccode_agui.sse.channel import Subscription
from iaccode_agui.runs.finished import KeptRun
from iaccode_agui.runs.run import Run
from iaccode_agui.runlog.logfiles import RunLogStore
from iaccode_agui.runs.registry import RunRegistry
from iaccode_agui.state.store import StateUnavailable, ThreadStore

REATTACH_TAKEOVER_WAIT = 2.0  # how long a re-attach waits for the server to notice the old connection's loss


class Reattach:
    def __init__(self, runs: RunRegistry, log_attach: LogAttach, runlogs: RunLogStore, store: ThreadStore,
                 metrics: Metrics) -> None:
        self.runs = runs
        self.log_attach = log_attach
        self.runlogs = runlogs
        self.store = store
        self.metrics = metrics

    def attach(self, thread_id: str, run_id: str, after_seq: int, digest: Optional[str],
               language: str) -> Optional[Tuple[Run, Subscription]]:
        """Re-attach a client to a run's events after ``after_seq``; None when the run was never admitted.

        ``digest`` (``Last-Event-ID`` on ``POST /``, which repeats the original body) must match the run's;
        an AgentCore attach sends a different body by design and passes None.
        """
        run = self.runs.find((thread_id, run_id))
        if run is not None and self.superseded(run):
            run = None
        if run is None:
            followed = self.log_attach.reattach(thread_id, run_id, digest, after_seq, language)
            if followed is not None:
                self.metrics.inc("agui_reattach_total")
                return followed
            known = self.recorded_digest(thread_id, run_id)
            if known is None:
                return None
            if digest is not None and known != digest:
                raise AguiError("RUN_ID_CONFLICT")
            raise AguiError("RUN_ALREADY_TERMINAL")
        if digest is not None and run.digest != digest:
            raise AguiError("RUN_ID_CONFLICT")
        sub = _attach_channel(run, after_seq)
        kept = self.runs.find((thread_id, run_id))
        if kept is not None and kept is not run:
            # The housekeeper swapped the run for its summary between the lookup and the attach: the
            # summary's channel is the one later clients see, so the attach moves there (one at a time).
            sub.detach()
            run, sub = kept, _attach_channel(kept, after_seq)
        run.cancel_grace()
        self.metrics.inc("agui_reattach_total")
        return run, sub

    def superseded(self, run: KeptRun) -> bool:
        """An ended run whose log now holds a continuation of it, admitted by another process: the run id
        names that continuation (its latest segment), which its log serves."""
        if run.worker is not None and not run.worker.finished:
            return False
        reader = self.runlogs.open_reader(run.thread_id, run.run_id)
        if reader is None:
            return False
        try:
            return reader.header.get("digest") != run.digest
        finally:
            reader.close()

    def recorded_digest(self, thread_id: str, run_id: str) -> Optional[str]:
        """The request digest the thread's durable state remembers for ``run_id`` (None: never admitted)."""
        try:
            state = self.store.load(thread_id)
        except StateUnavailable:
            raise AguiError("STATE_UNAVAILABLE")
        return None if state is None else state.run_digests.get(run_id)


def _attach_channel(run: KeptRun, after_seq: Optional[int]) -> Subscription:
    if run.takeover_gate.acquire(blocking=False):
        try:
            return run.channel.attach(after_seq, takeover_wait=REATTACH_TAKEOVER_WAIT)
        finally:
            run.takeover_gate.release()
    return run.channel.attach(after_seq)

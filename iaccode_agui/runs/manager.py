"""Live runs of this process: admission against the store, worker start-up, re-attach, cancel, drain.

The manager is the shell around the pure admission rules: it holds the per-thread transaction while it
probes the run lease and saves the claimed state, so two requests (or two processes) can never both
admit a run on one thread.  It also keeps each run for a while after the run ends (``runs.kept``) so
that a client can re-attach (``runs.reattach``) and read the tail it missed.  What decides, for one run,
that its client is gone (the reconnect and adoption graces) lives with the run, in ``runs.liverun``; the
runs themselves and their lock are ``runs.registry``'s, and a run is assembled in ``runs.assembly``.
"""
import logging
import os
import socket
import threading
import time
import uuid
from typing import Any, Callable, Dict, List, Optional, Tuple

from iaccode_agui import errors
from iaccode_agui.a2a import dialect
from iaccode_agui.a2a.agent_kind import UpstreamKind
from iaccode_agui.a2a.client import A2AClient, A2AError
from iaccode_agui.config import Settings
from iaccode_agui.errors import AguiError
from iaccode_agui.web.inputs import RunRequest
from iaccode_agui.metrics import Metrics
from iaccode_agui.projection.projector import RunContext, RunProjector
from iaccode_agui.runs import admission as admission_rules
from iaccode_agui.runs import detached
from iaccode_agui.runs.assembly import RunFactory
from iaccode_agui.runs.cancel import CANCELLED, cancel_execution
from iaccode_agui.runlog.follow import LogAttach
from iaccode_agui.sse.channel import Subscription
from iaccode_agui.runs.expiry import ExpiryScheduler
from iaccode_agui.runs.finished import KeptRun
from iaccode_agui.runs.history_writer import HEADER_FIELD as HISTORY_HEADER, RunHistory
from iaccode_agui.runs.housekeeping import Housekeeper
from iaccode_agui.runs.liverun import LiveRun
from iaccode_agui.runs.profile import DEFAULT as DEFAULT_PROFILE, ProfileRegistry, RunProfile
from iaccode_agui.runs.reattach import Reattach
from iaccode_agui.runs.recorder import StateRecorder
from iaccode_agui.sse.replay_budget import ReplayBudget
from iaccode_agui.runs.run import Run
from iaccode_agui.runs.registry import RunRegistry
from iaccode_agui.runs.takeover import Takeover
from iaccode_agui.runlog.logfiles import RunLogStore, RunLogWriter
from iaccode_agui.runs.worker import RunWorker, drive_new_turn
from iaccode_agui.state.history_store import HistoryStore
from iaccode_agui.state.model import ActiveRun, ThreadState
from iaccode_agui.state.peers import ProcessRegistry
from iaccode_agui.state.store import RunLease, StateUnavailable, ThreadStore

log = logging.getLogger("iaccode_agui.runs")

ABANDONED_RELEASE_WAIT = 1.0  # how long a new run waits for the release of a run whose client is gone
ADOPTED_YIELD_WAIT = 5.0      # how long a new request waits for an unfollowed adopted run to end


class RunManager:
    def __init__(self, settings: Settings, store: ThreadStore, client: A2AClient, metrics: Metrics,
                 clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.store = store
        self.client = client
        self.metrics = metrics
        self.clock = clock
        self.owner = "%s:%d:%s" % (socket.gethostname(), os.getpid(), uuid.uuid4().hex[:12])
        self.runs = RunRegistry()
        self.factory = RunFactory(self)
        self.draining = False
        self.kind = UpstreamKind(settings.upstream_kind, client)
        self.kind.start()
        self.expiry = ExpiryScheduler(store, client, clock)
        self.history = HistoryStore(store)      # each thread's stored conversation
        self.runlogs = RunLogStore(settings.state_dir, ttl=settings.run_log_ttl,
                                   max_bytes=int(settings.run_log_max_mb * 1024 * 1024))
        self.budget = ReplayBudget(int(settings.replay_memory_mb * 1024 * 1024))
        self.log_attach = LogAttach(self.runlogs, metrics, settings.queue_max_events)
        self.reattach = Reattach(self.runs, self.log_attach, self.runlogs, store, metrics)
        self.housekeeper = Housekeeper(self)
        self.housekeeper.start()
        self.registry = ProcessRegistry(settings.state_dir, self.owner, settings.a2a_url)
        self.registry.register()
        self.profiles = ProfileRegistry()     # route families register theirs, for runs adopted from logs
        self.takeover = Takeover(self)
        self.log_attach.adopt = self.takeover.adopt
        if self.runlogs.enabled:
            threading.Thread(target=self._adopt_orphans, name="agui-takeover-scan", daemon=True).start()

    # ---- queries ------------------------------------------------------------------------------
    def active_count(self) -> int:
        """Runs holding a capacity slot: claimed, not yet released (the terminal event frees the slot)."""
        return self.runs.active_count()

    def wait_idle(self, timeout: float) -> bool:
        return self.runs.wait_idle(timeout)

    def shutdown(self, drain_timeout: float, cancel_wait: float) -> None:
        """Refuse new runs, let active ones end within ``drain_timeout``, cancel the rest, stop the timer."""
        self.draining = True
        if not self.wait_idle(drain_timeout):
            log.warning("drain timeout: cancelling %d run(s)", self.active_count())
            self.cancel_all()
            self.wait_idle(cancel_wait)
        self.stop()

    def cancel_all(self) -> None:
        for run in self.runs.live_runs():
            if run.worker is not None:
                run.worker.request_cancel()

    def upstream_is_generic(self) -> bool:
        """A plain A2A 1.0 agent (not iac-code): settled once from its agent card, never waited for."""
        return self.kind.is_generic()

    # ---- start / attach -----------------------------------------------------------------------
    def _adopt_orphans(self) -> None:
        try:
            self.takeover.scan()
        except Exception:   # adoption is recovery; it must not take the server down
            log.exception("adopting orphaned runs failed")

    def is_live(self, thread_id: str, run_id: str) -> bool:
        return self.runs.live((thread_id, run_id)) is not None

    def _settle_orphan(self, thread_id: str, active: ActiveRun) -> None:
        """A new request on a thread whose run lost its owner: adopt the run, then let the request win.

        Adopting first keeps everything the runtime produced meanwhile (the log gets it, a re-attach still
        reads it).  A new request on the thread means its client moved on, so an adopted run nobody follows
        is cancelled then, exactly as a disconnect would cancel it; a run a client follows keeps the thread
        busy (``THREAD_BUSY``), as it would while its owner lived.  ``active`` is what the admission's own
        read found (``admission_rules.Unsettled``), so the common admission reads the state once.
        """
        if not self.is_live(thread_id, active.run_id):
            self.takeover.adopt(thread_id, active.run_id)   # waits for an adoption already under way
        run = self.runs.live((thread_id, active.run_id))
        if run is None or not run.adopted or run.channel.attached or run.followed_elsewhere() or run.worker is None \
                or not run.channel.cancel_if_detached(run.worker.request_cancel):
            return
        log.info("thread %s: a new request cancels adopted run %s, which no client follows", thread_id, run.run_id)
        self.runs.wait_released(run, ADOPTED_YIELD_WAIT)

    def start(self, req: RunRequest, language: str, last_event_id: Optional[int] = None,
              start_thread: bool = True, *, keep_without_client: bool = False,
              profile: RunProfile = DEFAULT_PROFILE) -> Tuple[Run, Subscription]:
        """Admit (or re-attach) the run; its ``RUN_STARTED`` is queued on the returned subscription.

        With ``start_thread=False`` the caller starts the run's thread itself (``run.worker.start()``), e.g.
        once the first bytes of the response are on their way.  ``keep_without_client`` follows the run to
        its end even when no client is attached (a disconnect does not cancel it).
        """
        if last_event_id is not None:
            attached = self.attach(req.thread_id, req.run_id, last_event_id, req.digest, language)
            if attached is not None:
                return attached
        if self.draining:
            raise AguiError("RUNTIME_DRAINING", headers={"Retry-After": "5"})
        if not self.runs.reserve(self.settings.max_active_runs):   # held until the run is registered
            raise AguiError("RUNTIME_CAPACITY_EXCEEDED", headers={"Retry-After": "1"})
        try:
            try:
                run, admitted = self._admit_freeing_abandoned(req, settle=self.runlogs.enabled)
            except admission_rules.Unsettled as found:
                self._settle_orphan(req.thread_id, found.active)
                run, admitted = self._admit_freeing_abandoned(req)
        finally:
            self.runs.unreserve()
        run.profile = profile           # set before the worker exists, so before any close can be seen
        try:
            run.keep_without_client = keep_without_client
            if keep_without_client:
                detached.mark_detached(self.runlogs, run)       # marked whenever its client leaves
            history = RunHistory.for_request(self.history, self.settings, req, language)
            header = dict(profile.header_fields(), language=language, keepWithoutClient=keep_without_client,
                          **{HISTORY_HEADER: history.header()})
            if admitted.first_seq:
                header["firstSeq"] = admitted.first_seq     # a continuation: the segment's first id
            run.channel.use_log(self._open_run_log(req, admitted.state, header))
            worker, sub = self._prepare(run, req, admitted, language, history)
            worker.open()            # RUN_STARTED is queued from this (the request's) thread
            if start_thread:
                worker.start()
        except BaseException:
            self._abandon(run)
            raise
        self.metrics.inc("agui_runs_started_total")
        return run, sub

    def _prepare(self, run: "LiveRun", req: RunRequest, admitted: admission_rules.Admission,
                 language: str, history: RunHistory) -> Tuple[RunWorker, Subscription]:
        ctx = self.factory.context(req, admitted.state, language)
        worker = self.factory.worker(run, RunProjector(ctx, clock=self.clock), history,
                                     self._driver(req, admitted, ctx), language)
        # Attached before the worker is visible: a run with a worker and no subscriber reads as abandoned
        # (``_free_abandoned``), and a second request on the thread would cancel this one meanwhile.
        sub = run.channel.attach()
        run.worker = worker
        return worker, sub

    def _abandon(self, run: "LiveRun") -> None:
        """The run was admitted but could not start: give back its claim, lease, slot and live entry."""
        log.error("run %s on thread %s could not start; its admission is rolled back", run.run_id, run.thread_id)
        StateRecorder(self.store, run.thread_id, run.execution_id, run.run_id).abandon()
        run.worker = None
        self.run_released(run)
        self.runs.forget(run)
        run.channel.close()

    def find_run(self, thread_id: str, run_id: str) -> Optional[KeptRun]:
        """The run, live or ended, while this process still keeps its record and events."""
        return self.runs.find((thread_id, run_id))

    def attach(self, thread_id: str, run_id: str, after_seq: int, digest: Optional[str] = None,
               language: str = "en") -> Optional[Tuple[Run, Subscription]]:
        """Re-attach a client to a run's events after ``after_seq`` (``runs.reattach``); None: never admitted."""
        return self.reattach.attach(thread_id, run_id, after_seq, digest, language)

    def _admit_freeing_abandoned(self, req: RunRequest, settle: bool = False
                                 ) -> Tuple[LiveRun, admission_rules.Admission]:
        try:
            return self._admit(req, settle)
        except AguiError as exc:
            if exc.code != "THREAD_BUSY" or not (self._free_abandoned(req.thread_id)
                                                 or detached.free_elsewhere(self, req.thread_id)):
                raise
        return self._admit(req)

    def _free_abandoned(self, thread_id: str) -> bool:
        """Cancel this thread's live run when no client is attached to it and wait briefly for the release.

        A client that drops a stream and posts again at once would otherwise get THREAD_BUSY until the old
        stream's next poll notices the lost connection; a client of ``/ag-ui/agent`` whose stop is to drop
        its stream (it never calls the stop route) would get it until the run ended.  Which runs yield is
        ``admission.DETACHED_RUN_YIELDS``: a run of ``POST /`` with a grace window waits for its re-attach.
        """
        runs = self.runs.active_on(thread_id)
        grace = self.settings.reconnect_grace
        abandoned = [run for run in runs if run.worker is not None and not run.worker.finished
                     and admission_rules.detached_run_yields(run.keep_without_client, grace)
                     and run.channel.client_gone() and not run.followed_elsewhere()
                     and run.channel.cancel_if_detached(run.worker.request_cancel)]
        if not abandoned:
            return False
        log.info("thread %s: a new request cancels run(s) %s, to which no client is attached", thread_id,
                 ", ".join(run.run_id for run in abandoned))
        deadline = time.monotonic() + ABANDONED_RELEASE_WAIT
        while time.monotonic() < deadline:
            if self.runs.released(abandoned):
                return True
            time.sleep(0.01)
        return False

    def _admit(self, req: RunRequest, settle: bool = False) -> Tuple[LiveRun, admission_rules.Admission]:
        lease: Optional[RunLease] = None
        try:
            with self.store.transaction(req.thread_id) as txn:
                if settle and txn.state is not None and txn.state.active_run is not None:
                    claimed = self.runs.live((req.thread_id, txn.state.active_run.run_id))
                    if claimed is None or claimed.adopted:   # else a live run of ours: settling would change nothing
                        raise admission_rules.Unsettled(txn.state.active_run)
                lease = self.store.try_run_lease(req.thread_id)
                self._check_runtime(txn.state)
                self.expiry.schedule_state(txn.state)
                admitted = admission_rules.admit(txn.state, req, owner=self.owner, now=self.clock(),
                                                 lease_free=lease is not None,
                                                 window=(self.settings.run_id_window,
                                                         self.settings.run_id_window_age,
                                                         self.settings.applied_window))
                admitted.state.runtime = self.settings.a2a_url
                for task_id in (admitted.orphan_task_id, admitted.expired_task_id):
                    # Before the save that forgets the task: a crash in between repeats the cancel
                    # on the next admission instead of losing it.
                    if task_id:
                        self._cancel_quietly(task_id, req.thread_id)
                # Synced (one journal fdatasync) before RUN_STARTED and before the upstream POST: it is what
                # makes the run id used for good and lets a restarted process find and settle the run.
                txn.save(admitted.state)
        except BaseException as exc:
            if lease is not None:
                lease.release()
            if isinstance(exc, (AguiError, admission_rules.Unsettled)):
                raise
            if isinstance(exc, StateUnavailable):
                raise AguiError("STATE_UNAVAILABLE")
            if isinstance(exc, Exception):
                log.error("admission failed on thread %s: %r", req.thread_id, exc)
                raise AguiError("STATE_UNAVAILABLE")
            raise
        if lease is None:   # cannot happen: admit() refuses a held lease; never run without one
            raise AguiError("THREAD_BUSY")
        return self.factory.register(req, admitted.state, lease, self.factory.channel(admitted.first_seq)), admitted

    def _check_runtime(self, state: Optional[ThreadState]) -> None:
        """Refuse a thread whose runtime another live process on this state directory still uses."""
        if state is not None and self.registry.conflicts_with(state.runtime):
            log.error("thread %s belongs to runtime %s, used by another live process; this one uses %s",
                      state.thread_id, state.runtime, self.settings.a2a_url)
            raise AguiError("RUNTIME_MISMATCH")

    def _open_run_log(self, req: RunRequest, state: ThreadState, extra: Dict[str, Any]) -> Optional[RunLogWriter]:
        if not self.runlogs.enabled:
            return None
        header = {"executionId": state.execution.execution_id, "rosInvocationId": state.execution.ros_invocation_id,
                  "digest": req.digest, "owner": self.owner, "runtime": self.settings.a2a_url}
        header.update(extra)
        try:
            return self.runlogs.create(req.thread_id, req.run_id, header)
        except OSError as exc:
            # The run still works; only replay beyond memory and following from elsewhere are unavailable.
            log.warning("run %s on thread %s has no event log: %s", req.run_id, req.thread_id, exc)
            self.metrics.inc("agui_run_log_failures_total")
            return None

    def finished_runs(self) -> List[KeptRun]:
        return self.runs.kept.snapshot()

    def live_runs(self) -> List[LiveRun]:
        return self.runs.live_runs()

    def stop(self) -> None:
        """Stop the background timers (an embedder closing the app, or the CLI exiting)."""
        self.housekeeper.stop()
        self.kind.stop()
        self.expiry.stop()
        self.registry.close()

    def _cancel_quietly(self, task_id: str, thread_id: str) -> None:
        log.warning("thread %s: cancelling task %s left behind by a dead run or expired interrupts",
                    thread_id, task_id)
        try:
            self.client.cancel_task(task_id)
        except A2AError as exc:
            log.info("best-effort cancel of task %s failed: %s", task_id, exc)

    def _driver(self, req: RunRequest, admitted: admission_rules.Admission, ctx: RunContext):
        if admitted.expired_resume:
            def drive_expired(worker: RunWorker) -> None:
                worker.apply(worker.projector.abort("EXECUTION_EXPIRED", errors.MSG_EXECUTION_EXPIRED))
            return drive_expired
        if req.is_resume:
            from iaccode_agui.runs.resume_driver import drive_resume

            def drive(worker: RunWorker) -> None:
                drive_resume(worker, req, ctx, admitted.state)
            return drive
        metadata = dialect.build_metadata(req.props, req.cwd, ctx.language)
        assert req.user_message is not None
        message = dialect.build_message(req.user_message.message_id, req.user_message.parts, ctx.context_id,
                                        metadata)

        def drive_new(worker: RunWorker) -> None:
            drive_new_turn(worker, message)
        return drive_new

    def run_released(self, run: LiveRun) -> None:
        """The run's outcome is durable: free its thread and its capacity slot before the end is shown."""
        run.lease.release()
        self.runs.release(run)

    def run_ended(self, run: LiveRun) -> None:
        """The run's worker ended: count it, let go of what it no longer needs, keep it for re-attach."""
        self.run_released(run)
        worker = run.worker
        if worker is None or worker.outcome == "interrupt" or worker.projector.pending:
            try:
                self.expiry.schedule_state(self.store.load(run.thread_id))
            except StateUnavailable:
                pass
        run.ended_at = time.monotonic()
        self.metrics.inc("agui_events_sent_total", run.channel.events_published)
        if worker is not None:
            self._count_end(worker)
            worker.release_resources()
        self.runs.end(run)

    def _count_end(self, worker: RunWorker) -> None:
        if worker.outcome == "error":
            code = worker.error_code or "UNKNOWN"
            self.metrics.inc("agui_runs_errored_total", code=code)
            if code in errors.UPSTREAM_CODES:
                self.metrics.inc("agui_upstream_errors_total", code=code)
        else:
            self.metrics.inc("agui_runs_finished_total", outcome=str(worker.outcome or "unknown"))

    # ---- cancel extension ---------------------------------------------------------------------
    def cancel(self, execution_id: str, thread_id: str, ros_invocation_id: str) -> Dict[str, str]:
        try:
            state = self.store.load(thread_id)
        except StateUnavailable:
            raise AguiError("STATE_UNAVAILABLE")
        self._check_runtime(state)
        status = cancel_execution(self.store, self.client, self._live_worker, execution_id, thread_id,
                                  ros_invocation_id)
        if status == CANCELLED:
            self.metrics.inc("agui_cancellations_total")
        return {"executionId": execution_id, "status": status}

    def _live_worker(self, execution_id: str) -> Optional[RunWorker]:
        live = self.runs.by_execution(execution_id)
        return live.worker if live is not None else None

"""Adopting a run whose owning process died while its A2A task goes on.

The owner holds the thread's run lease and its log's write lock; the kernel drops both when the process
dies, even on ``kill -9``.  A log whose writer is gone without its close record is an orphan.  Whoever
meets one first -- a re-attach, an observer, the start-up or the housekeeping timer of any process on the
state directory -- takes the lease, then the log's write lock, and continues the run: the projection is
rebuilt from what the log says was sent, the task is read back (``GetTask``, then ``SubscribeToTask``),
text streamed meanwhile is recovered from the task, and new events continue the log's ids.  Nothing is
ever sent to the task: no answer is delivered twice and no tool is run twice.

A run that cannot be continued still gets its end in the log: its terminal event when only that was
missing, the pending interrupts it had already made durable, or ``RUN_ERROR EXECUTION_LOST``.
"""
import dataclasses
import logging
import threading
from typing import Any, Dict, List, Optional, Tuple

from iaccode_agui import errors
from iaccode_agui.a2a import dialect
from iaccode_agui.a2a.client import A2AError, A2ARpcError
from iaccode_agui.i18n import translate
from iaccode_agui.projection import events as ev
from iaccode_agui.projection import interrupts
from iaccode_agui.projection.adopt import AdoptedProjector
from iaccode_agui.projection.inflight import judge_in_flight
from iaccode_agui.projection.projector import ProtocolViolation
from iaccode_agui.projection.states import TaskState
from iaccode_agui.runs import detached
from iaccode_agui.runlog import encoding as logformat
from iaccode_agui.sse.channel import encode_agui_event
from iaccode_agui.runs.history_writer import RunHistory
from iaccode_agui.runs.liverun import LiveRun
from iaccode_agui.runlog.encoding import Record
from iaccode_agui.runlog.logfiles import RunLogWriter
from iaccode_agui.runs.worker import RunWorker
from iaccode_agui.state.model import ThreadState
from iaccode_agui.state.store import RunLease, StateError, StateWriteFailed

log = logging.getLogger("iaccode_agui.runs")

ADOPT_HISTORY = 10000       # task history entries read back to recover text streamed meanwhile


@dataclasses.dataclass(frozen=True)
class AdoptedRequest:
    """What a live run needs to know about the request that started it, rebuilt from the log header."""
    thread_id: str
    run_id: str
    digest: str
    is_resume: bool
    run_mode: str
    parent_run_id: Optional[str] = None
    cwd_created: bool = False       # the dead owner's request did that, and announced it if it could


def _logged_usage(records: List[Record]) -> Any:
    """The last usage totals the log noted (None when the owner counted none)."""
    noted = [record.fields for record in records if record.kind == logformat.KIND_USAGE and record.fields]
    return noted[-1].get("usage") if noted else None


def first_seq(header: Dict[str, Any]) -> int:
    """The first id of the run segment a log holds: above 0 for a continuation (``runs.admission``)."""
    value = header.get("firstSeq", 0)
    return value if type(value) is int and value >= 0 else 0


def _logged_events(records: List[Record], first: int = 0) -> Tuple[List[Dict[str, Any]], int, bool, bool]:
    """The events a log holds, its last id (``first - 1`` before any), whether it has a terminal event and a
    close record."""
    logged: List[Dict[str, Any]] = []
    last_seq, terminal, closed = first - 1, False, False
    for record in records:
        if record.kind == logformat.KIND_CLOSE:
            closed = True
        elif record.kind == logformat.KIND_EVENT:
            logged.append(logformat.event_json(record.frame))
            last_seq = max(last_seq, record.seq)
            terminal = terminal or record.terminal
    return logged, last_seq, terminal, closed


class Takeover:
    def __init__(self, manager: Any) -> None:
        self.manager = manager
        self._lock = threading.Lock()

    def adopt(self, thread_id: str, run_id: str) -> bool:
        """Continue an orphaned run; True when its log goes on (adopted here or elsewhere, or ended)."""
        manager = self.manager
        if manager.draining:
            return False
        with self._lock:            # one adoption at a time in this process: a second caller sees it live
            if manager.is_live(thread_id, run_id):
                return True
            try:
                lease = manager.store.try_run_lease(thread_id)
            except StateError:
                return False
            if lease is None:
                return True          # the owner (or another adopter) holds the thread
            try:
                return self._adopt_with_lease(thread_id, run_id, lease)
            except Exception:
                log.exception("taking over run %s on thread %s failed", run_id, thread_id)
                lease.release()
                return False

    def scan(self) -> int:
        """Adopt every orphaned run whose log is kept (start-up and the housekeeping timer)."""
        adopted = 0
        for thread_id, run_id in self.manager.runlogs.orphans():
            if self.adopt(thread_id, run_id):
                adopted += 1
        return adopted

    def _adopt_with_lease(self, thread_id: str, run_id: str, lease: RunLease) -> bool:
        manager = self.manager
        reopened = manager.runlogs.reopen(thread_id, run_id)
        if reopened is None:
            lease.release()
            return manager.runlogs.open_reader(thread_id, run_id) is not None
        writer, header, records = reopened
        logged, last_seq, terminal, closed = _logged_events(records, first_seq(header))
        if closed or terminal:
            if closed:
                writer.release()
            else:
                writer.close({"outcome": "recovered", "events": last_seq + 1})
            lease.release()
            return True
        state = self._claim(thread_id, run_id, header)
        if state is None:
            self._end_from_state(writer, thread_id, run_id, header, logged, last_seq, _logged_usage(records))
            lease.release()
            return True
        manager.metrics.inc("agui_takeovers_total")
        log.warning("taking over run %s on thread %s after its owner died (%d events were sent)",
                    run_id, thread_id, last_seq + 1 - first_seq(header))
        self._start(state, header, logged, last_seq, writer, lease, _logged_usage(records))
        return True

    def _claim(self, thread_id: str, run_id: str, header: Dict[str, Any]) -> Optional[ThreadState]:
        """Make this process the run's owner in the thread state; None when the state says it ended."""
        with self.manager.store.transaction(thread_id) as txn:
            state = txn.state
            active = state.active_run if state is not None else None
            if state is None or active is None or active.run_id != run_id or \
                    state.execution.execution_id != header.get("executionId"):
                return None
            draft = state.copy()
            assert draft.active_run is not None
            draft.active_run.owner = self.manager.owner
            txn.save(draft)
            return draft

    def _end_from_state(self, writer: RunLogWriter, thread_id: str, run_id: str, header: Dict[str, Any],
                        logged: List[Dict[str, Any]], last_seq: int, usage: Any) -> None:
        """The run's outcome is durable but its terminal event never reached the log: write it now.

        The closing events carry the totals the dead owner noted and go through the run's own shaping, so
        a client that re-attaches sees the same end (an AgentCore client its usage event and its code names)
        as it would have seen from the owner.
        """
        state = self.manager.store.load(thread_id)
        language = header.get("language") or "en"
        projector = AdoptedProjector(_context_stub(thread_id, run_id, header, language), logged)
        projector.usage.restore(usage)
        totals = projector.usage.summary()
        closing: List[Dict[str, Any]] = list(projector.spans.close_all())
        pending = state.execution.pending if state is not None and \
            state.execution.execution_id == header.get("executionId") else {}
        built = [item for item in (interrupts.build_interrupt(p.value, p.expires_at, language)
                                   for p in pending.values()) if item is not None]
        if built:
            closing.append(ev.run_finished_interrupt(thread_id, run_id, built, totals))
        else:
            closing.append(ev.run_error(thread_id, run_id, "EXECUTION_LOST",
                                        translate(errors.MSG_EXECUTION_LOST, language), totals))
        shaper = self.manager.profiles.rebuild(header).shaper
        if shaper is not None:
            shape = shaper(language)
            closing = [shaped for event in closing for shaped in shape(event)]
        seq = last_seq
        for event in closing:
            seq += 1
            writer.append(seq, event["type"], encode_agui_event(event, seq))
        writer.close({"outcome": "recovered", "events": seq + 1})

    def _start(self, state: ThreadState, header: Dict[str, Any], logged: List[Dict[str, Any]], last_seq: int,
               writer: RunLogWriter, lease: RunLease, usage: Any) -> None:
        manager = self.manager
        active = state.active_run
        assert active is not None
        req = AdoptedRequest(thread_id=state.thread_id, run_id=active.run_id, digest=header.get("digest") or "",
                             is_resume=active.kind == "resume",
                             run_mode="pipeline" if state.execution.pipeline_sequence else "normal")
        language = header.get("language") or "en"
        factory = manager.factory
        channel = factory.channel(last_seq + 1, first_seq(header), writer)
        projector = AdoptedProjector(factory.context(req, state, language), logged, clock=manager.clock)
        projector.usage.restore(usage)        # counted by the dead owner: the run's totals include it
        # The conversation goes on from what the log holds; it is saved as the adopted run ends.
        history = RunHistory.adopted_from(manager.history, manager.settings, req.thread_id, header, logged)

        def prepare(run: LiveRun) -> None:
            run.profile = manager.profiles.rebuild(header)      # shaped as its owner shaped it
            run.worker = factory.worker(run, projector, history, drive_adopted, language)
            run.keep_without_client = bool(header.get("keepWithoutClient"))
            if run.keep_without_client:
                detached.mark_detached(manager.runlogs, run, now=True)     # it has no client yet
            run.adopted = True

        # Complete before it is visible: a new request must see an adopted run with its worker, not a
        # half-built one it would neither cancel nor wait for (and answer THREAD_BUSY).
        run = factory.register(req, state, lease, channel, prepare)
        run.worker.start()
        run.start_adoption_grace()


def _context_stub(thread_id: str, run_id: str, header: Dict[str, Any], language: str) -> Any:
    from iaccode_agui.projection.projector import RunContext
    return RunContext(thread_id=thread_id, run_id=run_id, execution_id=header.get("executionId") or "",
                      context_id=dialect.context_id_for(thread_id),
                      ros_invocation_id=header.get("rosInvocationId") or "", language=language)


def drive_adopted(worker: RunWorker) -> None:
    """Follow the adopted run's task to its next boundary; nothing is ever sent to it."""
    projector = worker.projector
    assert isinstance(projector, AdoptedProjector)
    task_id = projector.task_id
    if not task_id:
        # The owner died before the runtime named the task: nothing of it was announced, nothing to follow.
        worker.apply(projector.fail("EXECUTION_LOST", errors.MSG_EXECUTION_LOST))
        return
    if _from_snapshot(worker, task_id):
        return
    try:
        # The first frame is the task snapshot: its text counts only beyond what was shown (catch-up).
        reason = worker.consume(lambda: worker.client.subscribe_to_task(task_id),
                                first=lambda result: worker.apply(projector.feed(result, with_text=False)))
    except A2AError as exc:
        reason = "error: %s" % exc
    if projector.done:
        return
    if _from_snapshot(worker, task_id, boundary_only=False):
        return
    log.warning("adopted task %s reached no boundary (%s)", task_id, reason)
    worker.cancel_task_if_unprotected()     # nobody could observe it any more
    worker.apply(projector.fail("EXECUTION_LOST", errors.MSG_EXECUTION_LOST))


def _from_snapshot(worker: RunWorker, task_id: str, *, boundary_only: bool = True) -> bool:
    """Read the task back; True when the run ended from what it shows (a boundary, or a lost task)."""
    projector = worker.projector
    assert isinstance(projector, AdoptedProjector)
    try:
        snapshot = worker.client.get_task(task_id, history_length=ADOPT_HISTORY)
    except A2ARpcError as exc:
        log.info("adopted task %s is unknown to the runtime: %s", task_id, exc)
        worker.apply(projector.fail("EXECUTION_LOST", errors.MSG_EXECUTION_LOST))
        return True
    except A2AError as exc:
        worker.fail_upstream(exc)
        return True
    try:
        worker.apply(projector.check_identity(snapshot))
        shows_inputs = bool(projector.snapshot_inputs(snapshot))
    except ProtocolViolation:
        worker.apply(projector.fail("A2A_PROTOCOL_ERROR", errors.MSG_A2A_PROTOCOL_ERROR))
        return True
    _settle_in_flight(worker, snapshot)
    worker.apply(projector.catch_up(snapshot))
    state = TaskState.of((dialect.unwrap(snapshot)[1].get("status") or {}).get("state"))
    boundary = state.terminal or state is TaskState.INPUT_REQUIRED
    if boundary_only and not (boundary or shows_inputs):
        return False
    worker.apply(projector.continue_final(snapshot))
    worker.apply(projector.feed(snapshot, with_text=False))
    if not projector.done and boundary:
        worker.apply(projector.end_of_stream())
    return projector.done


def _settle_in_flight(worker: RunWorker, snapshot: Any) -> None:
    """Commit the answers the dead owner sent whose acceptance it never recorded, when the task shows them
    consumed; otherwise the finished turn would leave them pending and a retry would send them again."""
    projector = worker.projector
    assert isinstance(projector, AdoptedProjector)
    in_flight = projector.in_flight()
    if not in_flight:
        return
    verdict = judge_in_flight(snapshot, in_flight, projector.ctx.text_digests, generic=projector.ctx.generic)
    for interrupt_id, digest in verdict.consumed:
        try:
            worker.recorder.commit_answer(interrupt_id, digest)
        except StateWriteFailed as exc:
            log.error("answer %s the runtime consumed could not be committed: %s", interrupt_id, exc)
            continue
        log.info("answer %s was consumed before its owner died: committed by the adopter", interrupt_id)
        projector.mark_applied(interrupt_id)

"""Admission rules for a run on a thread (pure: state in, new state or an AguiError out).

The order is part of the contract (it decides which error a client sees when several apply): unknown
thread on resume, run id reuse, busy, binding, resume/pending checks, execution rotation, claim.
The shell (``runs.manager``) loads the state, probes the run lease and saves the result atomically.

A resume may carry the run id of the run whose end announced the interrupts it answers (CopilotKit's
``useInterrupt`` does): it is that run's continuation, admitted exactly like a resume with a fresh id, and
its events form a new segment of the run's SSE ids (``SEGMENT_SPAN``), so an attach or ``Last-Event-ID``
with that run id is never ambiguous.
"""
import dataclasses
import uuid
from typing import Callable, Optional, Tuple

from iaccode_agui import errors
from iaccode_agui.a2a.dialect import context_id_for
from iaccode_agui.config import DEFAULT_APPLIED_WINDOW, DEFAULT_RUN_ID_WINDOW, DEFAULT_RUN_ID_WINDOW_AGE
from iaccode_agui.errors import AguiError
from iaccode_agui.web.inputs import RunRequest
from iaccode_agui.state.model import ActiveRun, Execution, ThreadState


# The n-th continuation of a run publishes ids from n * SEGMENT_SPAN on (the run's first segment from 0), so
# every id of a run id names one event whichever segment it is in.  A segment holds fewer events than that
# (2**32), and MAX_CONTINUATIONS keeps every id below 2**53 and within Last-Event-ID's 15 digits.
SEGMENT_SPAN = 1 << 32
MAX_CONTINUATIONS = 1 << 17

# A run id the thread already knows: (the same request again?, a continuation of the interrupted run?) ->
# the refusal, or None when it is admitted (as the continuation).
RUN_ID_REUSE = {
    (True, True): "DUPLICATE_RUN_ID", (True, False): "DUPLICATE_RUN_ID",
    (False, True): None, (False, False): "RUN_ID_CONFLICT",
}


# A request on a thread whose live run no client is attached to (here or through another process): does that
# run yield, cancelled so that the request is admitted?  (kept without a client, as on /ag-ui/agent?,
# reconnect grace set?) -> yields.  A run with a client attached never yields: the thread is busy.
DETACHED_RUN_YIELDS = {
    (False, False): True,    # POST /: its disconnect cancels it anyway; the request only comes first
    (False, True): False,    # POST / with a reconnect grace: it waits for its client's re-attach
    (True, False): True,     # /ag-ui/agent: a new message is the stop of a client that never calls the stop route
    (True, True): True,
}


def detached_run_yields(keep_without_client: bool, reconnect_grace: float) -> bool:
    return DETACHED_RUN_YIELDS[(bool(keep_without_client), reconnect_grace > 0)]


@dataclasses.dataclass
class Admission:
    state: ThreadState                    # the state to save (already mutated copy)
    orphan_task_id: Optional[str] = None  # a task left running by a dead owner: cancel it best-effort
    expired_task_id: Optional[str] = None  # pending interrupts expired: cancel their task best-effort
    expired_resume: bool = False          # the resume answers interrupts that expired -> RUN_ERROR
    first_seq: int = 0                    # the run's first SSE id: above 0 for a continuation


class Unsettled(Exception):
    """The thread's claimed run may have lost its owner: the shell settles it, then admits again."""

    def __init__(self, active: ActiveRun):
        super().__init__(active.run_id)
        self.active = active


def new_execution(req: RunRequest, make_id: Callable[[], str]) -> Execution:
    return Execution(execution_id=make_id(), ros_invocation_id=req.ros_invocation_id, run_mode=req.run_mode)


def admit(previous: Optional[ThreadState], req: RunRequest, *, owner: str, now: float, lease_free: bool,
          make_id: Callable[[], str] = lambda: str(uuid.uuid4()),
          window: Tuple[int, float, int] = (DEFAULT_RUN_ID_WINDOW, DEFAULT_RUN_ID_WINDOW_AGE,
                                            DEFAULT_APPLIED_WINDOW)) -> Admission:
    """Decide whether ``req`` may run; returns the state to persist with the run claimed."""
    if previous is None:
        admission = Admission(state=_first_state(req, lease_free, make_id))
    else:
        admission = Admission(state=previous.copy())
        continues = _check_run_id(admission.state, req)
        _take_over_dead_run(admission, lease_free)
        if admission.state.cwd != req.cwd or admission.state.user_id != req.user_id:
            raise AguiError("THREAD_BINDING_CONFLICT")
        if req.is_resume:
            _admit_resume(admission, req, now)
        else:
            _admit_new_turn(admission, req, now, make_id)
        if continues:
            execution = admission.state.execution
            execution.continuations += 1
            admission.first_seq = execution.continuations * SEGMENT_SPAN
    _claim(admission.state, req, owner, now, window)
    return admission


def _first_state(req: RunRequest, lease_free: bool, make_id: Callable[[], str]) -> ThreadState:
    if req.is_resume:
        raise AguiError("EXECUTION_LOST", errors.MSG_EXECUTION_LOST)
    if not lease_free:
        raise AguiError("THREAD_BUSY")    # another process is creating this very thread
    return ThreadState(thread_id=req.thread_id, context_id=context_id_for(req.thread_id), cwd=req.cwd,
                       user_id=req.user_id, session_id=None,
                       execution=new_execution(req, make_id))


def _check_run_id(state: ThreadState, req: RunRequest) -> bool:
    """Refuse a run id used before, unless this resume continues the run it names; True for a continuation."""
    execution = state.execution
    continues = req.is_resume and req.run_id == execution.interrupted_run_id \
        and execution.continuations < MAX_CONTINUATIONS and _answers_what_it_left(execution, req)
    known_digest = state.run_digests.get(req.run_id)
    if known_digest is not None:
        refusal = RUN_ID_REUSE[(known_digest == req.digest, continues)]
        if refusal is not None:
            raise AguiError(refusal)
    return continues


def _answers_what_it_left(execution: Execution, req: RunRequest) -> bool:
    """A continuation answers interrupts that run announced (waiting, expired, or already answered).

    An answer to an earlier run's interrupt under that run id is another request reusing it: refused, so a
    stale answer can never take the run id over and replace the log that shows what is still waiting.  An
    answer it announced and that was applied since is a retry: admitted, and told it was applied.
    """
    waiting = set(execution.interrupted_ids) | set(execution.pending) | set(execution.expired_interrupt_ids)
    return bool(req.resume) and all(entry.get("interruptId") in waiting for entry in req.resume or ())


def _take_over_dead_run(admission: Admission, lease_free: bool) -> None:
    """Busy unless the lease is free; a claimed run nobody holds the lease of belongs to a dead owner."""
    if not lease_free:
        raise AguiError("THREAD_BUSY")
    state = admission.state
    if state.active_run is None:
        return
    # Its task may still be running upstream: cancel it unless interrupts keep the execution alive.
    execution = state.execution
    if not execution.pending:
        if execution.task_id:
            admission.orphan_task_id = execution.task_id
        state.mark_terminal(execution.execution_id)
    state.active_run = None


def _admit_resume(admission: Admission, req: RunRequest, now: float) -> None:
    state = admission.state
    execution = state.execution
    if execution.ros_invocation_id != req.ros_invocation_id:
        raise AguiError("EXECUTION_LOST", errors.MSG_RESUME_MISMATCH)
    if execution.expire_interrupts(now):
        admission.expired_resume = True
        admission.expired_task_id = execution.task_id
        state.mark_terminal(execution.execution_id)
    elif not execution.pending and req.resume and all(
            entry.get("interruptId") in execution.expired_interrupt_ids for entry in req.resume):
        admission.expired_resume = True


def _admit_new_turn(admission: Admission, req: RunRequest, now: float, make_id: Callable[[], str]) -> None:
    state = admission.state
    execution = state.execution
    if execution.expire_interrupts(now):
        admission.expired_task_id = execution.task_id
    if execution.pending:
        raise AguiError("RESUME_REQUIRED", errors.MSG_RESUME_NOT_BY_TOOL_MESSAGE if req.tool_answer else None)
    state.mark_terminal(execution.execution_id)
    state.execution = new_execution(req, make_id)


def _claim(state: ThreadState, req: RunRequest, owner: str, now: float, window: Tuple[int, float, int]) -> None:
    state.active_run = ActiveRun(run_id=req.run_id, owner=owner, started_at=now,
                                 kind="resume" if req.is_resume else "new")
    state.remember_run(req.run_id, req.digest, now, *window)

"""Admission rules for a run on a thread (pure: state in, new state or an AguiError out).

The order is part of the contract (it decides which error a client sees when several apply): unknown
thread on resume, run id reuse, busy, binding, resume/pending checks, execution rotation, claim.
The shell (``runs.manager``) loads the state, probes the run lease and saves the result atomically.
"""
import dataclasses
import uuid
from typing import Callable, List, Optional

from iaccode_agui import errors
from iaccode_agui.a2a.dialect import context_id_for
from iaccode_agui.errors import AguiError
from iaccode_agui.inputs import RunRequest
from iaccode_agui.state.model import ActiveRun, Execution, ThreadState


@dataclasses.dataclass
class Admission:
    state: ThreadState                  # the state to save (already mutated copy)
    previous: Optional[ThreadState]      # what was on disk (for rollback decisions)
    orphan_task_id: Optional[str] = None  # a task left running by a dead owner: cancel it best-effort
    expired_task_id: Optional[str] = None  # pending interrupts expired: cancel their task best-effort
    expired_resume: bool = False          # the resume answers interrupts that expired -> RUN_ERROR
    expired_ids: List[str] = dataclasses.field(default_factory=list)


def new_execution(ros_invocation_id: str, make_id: Callable[[], str]) -> Execution:
    return Execution(execution_id=make_id(), ros_invocation_id=ros_invocation_id)


def admit(previous: Optional[ThreadState], req: RunRequest, *, owner: str, now: float, lease_free: bool,
          make_id: Callable[[], str] = lambda: str(uuid.uuid4())) -> Admission:
    """Decide whether ``req`` may run; returns the state to persist with the run claimed."""
    if previous is None:
        if req.is_resume:
            raise AguiError("EXECUTION_LOST", errors.MSG_EXECUTION_LOST)
        if not lease_free:
            raise AguiError("THREAD_BUSY")    # another process is creating this very thread
        state = ThreadState(thread_id=req.thread_id, context_id=context_id_for(req.thread_id), cwd=req.cwd,
                            user_id=req.user_id, session_id=None,
                            execution=new_execution(req.ros_invocation_id, make_id))
        _claim(state, req, owner, now)
        return Admission(state=state, previous=None)

    state = previous.copy()
    admission = Admission(state=state, previous=previous)
    known_digest = state.run_digests.get(req.run_id)
    if known_digest is not None:
        raise AguiError("DUPLICATE_RUN_ID" if known_digest == req.digest else "RUN_ID_CONFLICT")
    if state.active_run is not None:
        if not lease_free:
            raise AguiError("THREAD_BUSY")
        # Nobody holds the run lease: the owner died mid-run.  Its task may still be running upstream.
        execution = state.execution
        if not execution.pending and execution.task_id:
            admission.orphan_task_id = execution.task_id
        if not execution.pending:
            state.mark_terminal(execution.execution_id)
        state.active_run = None
    elif not lease_free:
        raise AguiError("THREAD_BUSY")
    if state.cwd != req.cwd or state.user_id != req.user_id:
        raise AguiError("THREAD_BINDING_CONFLICT")

    execution = state.execution
    expired = sorted(key for key, pending in execution.pending.items() if pending.is_expired(now))
    if req.is_resume:
        if execution.ros_invocation_id != req.ros_invocation_id:
            raise AguiError("EXECUTION_LOST", errors.MSG_RESUME_MISMATCH)
        if expired:
            admission.expired_resume = True
            admission.expired_ids = expired
            admission.expired_task_id = execution.task_id
            execution.expired_interrupt_ids = sorted(set(execution.expired_interrupt_ids) | set(execution.pending))
            execution.pending.clear()
            state.mark_terminal(execution.execution_id)
        elif not execution.pending and req.resume and all(
                entry.get("interruptId") in execution.expired_interrupt_ids for entry in req.resume):
            admission.expired_resume = True
    else:
        if expired and len(expired) == len(execution.pending):
            admission.expired_ids = expired
            admission.expired_task_id = execution.task_id
            execution.pending.clear()
        if execution.pending:
            raise AguiError("RESUME_REQUIRED")
        state.mark_terminal(execution.execution_id)
        state.execution = new_execution(req.ros_invocation_id, make_id)
    _claim(state, req, owner, now)
    return admission


def _claim(state: ThreadState, req: RunRequest, owner: str, now: float) -> None:
    state.active_run = ActiveRun(run_id=req.run_id, owner=owner, started_at=now,
                                 kind="resume" if req.is_resume else "new")
    state.run_digests[req.run_id] = req.digest

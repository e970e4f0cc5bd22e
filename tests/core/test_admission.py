"""Admission rules (pure): state in, new state or a coded error out."""
import dataclasses

import pytest

from iaccode_agui.errors import MSG_RESUME_NOT_BY_TOOL_MESSAGE, MSG_RESUME_REQUIRED, AguiError
from iaccode_agui.web.inputs import RunRequest, UserMessage
from iaccode_agui.runs.admission import MAX_CONTINUATIONS, SEGMENT_SPAN, admit
from iaccode_agui.state.model import ActiveRun, Execution, PendingInterrupt, ThreadState

NOW = 1_800_000_000.0


def request(run="r2", digest="d" * 64, resume=None, cwd="/ws", user=None, ros="inv-1", thread="t"):
    props = {"schemaVersion": 1, "rosInvocationId": ros, "cwd": cwd}
    if user is not None:
        props["userId"] = user
    return RunRequest(thread_id=thread, run_id=run, parent_run_id=None, props=props, cwd=cwd,
                      user_message=None if resume else UserMessage("m", [{"text": "hi"}]), resume=resume,
                      digest=digest)


def state(pending=None, active=None, task="task-1", expired=()):
    execution = Execution(execution_id="exec-1", ros_invocation_id="inv-1", task_id=task,
                          pending=pending or {}, expired_interrupt_ids=list(expired))
    return ThreadState(thread_id="t", context_id="agui-c", cwd="/ws", user_id=None, session_id="s-1",
                       execution=execution, run_digests={"r1": "a" * 64}, active_run=active)


def pending(expires="2030-01-01T00:00:00.000Z"):
    return {"p-1": PendingInterrupt(value={"inputId": "p-1", "kind": "permission"}, expires_at=expires)}


def ids():
    counter = iter(range(100))
    return lambda: "exec-new-%d" % next(counter)


def code_of(call):
    with pytest.raises(AguiError) as info:
        call()
    return info.value.code, info.value.message


def test_new_thread_is_bound_and_claimed():
    result = admit(None, request(run="r1"), owner="me", now=NOW, lease_free=True, make_id=ids())
    saved = result.state
    assert saved.context_id.startswith("agui-") and saved.cwd == "/ws" and saved.user_id is None
    assert saved.active_run.run_id == "r1" and saved.active_run.owner == "me" and saved.active_run.kind == "new"
    assert saved.run_digests == {"r1": "d" * 64}
    assert code_of(lambda: admit(None, request(resume=[{"interruptId": "x"}]), owner="me", now=NOW,
                                 lease_free=True))[0] == "EXECUTION_LOST"


def test_run_id_reuse():
    assert code_of(lambda: admit(state(), request(run="r1", digest="a" * 64), owner="me", now=NOW,
                                 lease_free=True))[0] == "DUPLICATE_RUN_ID"
    assert code_of(lambda: admit(state(), request(run="r1"), owner="me", now=NOW,
                                 lease_free=True))[0] == "RUN_ID_CONFLICT"


def test_busy_when_the_lease_is_held():
    busy = state(active=ActiveRun("r1", "other", NOW))
    assert code_of(lambda: admit(busy, request(), owner="me", now=NOW, lease_free=False))[0] == "THREAD_BUSY"
    assert code_of(lambda: admit(state(), request(), owner="me", now=NOW, lease_free=False))[0] == "THREAD_BUSY"


def test_orphaned_run_is_recovered():
    orphan = state(active=ActiveRun("r1", "dead-process", NOW - 60))
    result = admit(orphan, request(), owner="me", now=NOW, lease_free=True, make_id=ids())
    assert result.orphan_task_id == "task-1"
    assert "exec-1" in result.state.terminal_execution_ids
    assert result.state.execution.execution_id == "exec-new-0" and result.state.active_run.owner == "me"
    # an orphan that had committed an interrupt keeps it: its task is not cancelled
    parked = state(pending=pending(), active=ActiveRun("r1", "dead", NOW - 60))
    assert code_of(lambda: admit(parked, request(), owner="me", now=NOW, lease_free=True))[0] == "RESUME_REQUIRED"


def test_binding_conflicts():
    assert code_of(lambda: admit(state(), request(cwd="/other"), owner="me", now=NOW,
                                 lease_free=True))[0] == "THREAD_BINDING_CONFLICT"
    assert code_of(lambda: admit(state(), request(user="u"), owner="me", now=NOW,
                                 lease_free=True))[0] == "THREAD_BINDING_CONFLICT"


def test_resume_rules():
    answer = [{"interruptId": "p-1", "status": "resolved", "payload": {"decision": "deny"}}]
    assert code_of(lambda: admit(state(pending=pending()), request(resume=answer, ros="other"), owner="me",
                                 now=NOW, lease_free=True)) == (
        "EXECUTION_LOST", "The resume request does not match the interrupted run.")
    result = admit(state(pending=pending()), request(resume=answer), owner="me", now=NOW, lease_free=True)
    assert result.state.execution.execution_id == "exec-1" and result.state.active_run.kind == "resume"
    assert not result.expired_resume
    assert code_of(lambda: admit(state(pending=pending()), request(), owner="me", now=NOW,
                                 lease_free=True))[0] == "RESUME_REQUIRED"


def test_new_turn_rotates_the_execution_but_keeps_context_and_session():
    result = admit(state(), request(ros="inv-2"), owner="me", now=NOW, lease_free=True, make_id=ids())
    saved = result.state
    assert saved.execution.execution_id == "exec-new-0" and saved.execution.task_id is None
    assert saved.execution.ros_invocation_id == "inv-2"
    assert saved.context_id == "agui-c" and saved.session_id == "s-1"
    assert "exec-1" in saved.terminal_execution_ids


def test_expired_interrupts():
    old = pending(expires="2020-01-01T00:00:00.000Z")
    answer = [{"interruptId": "p-1", "status": "resolved", "payload": {"decision": "deny"}}]
    result = admit(state(pending=old), request(resume=answer), owner="me", now=NOW, lease_free=True)
    assert result.expired_resume and result.expired_task_id == "task-1"
    assert result.state.execution.pending == {} and result.state.execution.expired_interrupt_ids == ["p-1"]
    later = admit(result.state, request(run="r3", resume=answer), owner="me", now=NOW, lease_free=True)
    assert later.expired_resume
    turn = admit(state(pending=old), request(), owner="me", now=NOW, lease_free=True, make_id=ids())
    assert turn.expired_task_id == "task-1" and turn.state.execution.pending == {}


def test_one_expired_interrupt_expires_the_execution_for_a_new_turn_too():
    # The same rule as the expiry timer and the resume path: a task cannot be resumed in part, so the
    # first expired interrupt ends every pending one and the thread is free for a new turn.
    two = dict(pending(expires="2020-01-01T00:00:00.000Z"))
    two["p-2"] = PendingInterrupt(value={"inputId": "p-2", "kind": "permission"}, expires_at="2030-01-01T00:00:00.000Z")
    turn = admit(state(pending=two), request(), owner="me", now=NOW, lease_free=True, make_id=ids())
    assert turn.expired_task_id == "task-1" and "exec-1" in turn.state.terminal_execution_ids
    assert turn.state.execution.execution_id == "exec-new-0" and turn.state.execution.pending == {}
    unexpired = dict(two)
    del unexpired["p-1"]
    assert code_of(lambda: admit(state(pending=unexpired), request(), owner="me", now=NOW,
                                 lease_free=True))[0] == "RESUME_REQUIRED"


# --- a resume carrying the interrupted run's id (its continuation) ----------------------------------------

def interrupted(run="r1", continuations=0, pend=True):
    saved = state(pending=pending() if pend else None)
    saved.execution.interrupted_run_id, saved.execution.continuations = run, continuations
    saved.execution.interrupted_ids = ["p-1"]
    return saved


ANSWER = [{"interruptId": "p-1", "status": "resolved", "payload": {"decision": "allow_once"}}]


@pytest.mark.parametrize("same_request,continues,expected", [
    (True, True, "DUPLICATE_RUN_ID"), (True, False, "DUPLICATE_RUN_ID"),
    (False, True, None), (False, False, "RUN_ID_CONFLICT")])
def test_the_run_id_reuse_table(same_request, continues, expected):
    saved = interrupted(run="r1" if continues else "r0")
    req = request(run="r1", digest="a" * 64 if same_request else "b" * 64, resume=ANSWER)
    if expected is None:
        assert admit(saved, req, owner="me", now=NOW, lease_free=True).first_seq == SEGMENT_SPAN
    else:
        assert code_of(lambda: admit(saved, req, owner="me", now=NOW, lease_free=True))[0] == expected


def test_a_continuation_is_admitted_like_a_fresh_resume_in_the_next_segment():
    fresh = admit(interrupted(), request(run="r9", resume=ANSWER), owner="me", now=NOW, lease_free=True)
    same = admit(interrupted(continuations=2), request(run="r1", resume=ANSWER), owner="me", now=NOW,
                 lease_free=True)
    assert fresh.first_seq == 0 and same.first_seq == 3 * SEGMENT_SPAN
    assert same.state.execution.continuations == 3 and fresh.state.execution.continuations == 0
    assert same.state.active_run.kind == fresh.state.active_run.kind == "resume"
    assert same.state.run_digests["r1"] == "d" * 64          # the run id now names the continuation's request
    assert same.state.execution.execution_id == fresh.state.execution.execution_id == "exec-1"


def test_what_is_never_a_continuation():
    # A new turn under the interrupted run's id, a resume under another known run id, a run id that has
    # used up its continuations (its ids would leave Last-Event-ID's range): refused as before.
    assert code_of(lambda: admit(interrupted(pend=False), request(run="r1", digest="b" * 64), owner="me",
                                 now=NOW, lease_free=True))[0] == "RUN_ID_CONFLICT"
    assert code_of(lambda: admit(interrupted(run="r0"), request(run="r1", resume=ANSWER), owner="me", now=NOW,
                                 lease_free=True))[0] == "RUN_ID_CONFLICT"
    assert code_of(lambda: admit(interrupted(continuations=MAX_CONTINUATIONS), request(run="r1", resume=ANSWER),
                                 owner="me", now=NOW, lease_free=True))[0] == "RUN_ID_CONFLICT"
    assert (MAX_CONTINUATIONS + 1) * SEGMENT_SPAN < min(10 ** 15, 2 ** 53)
    # A resume under the interrupted run's id that answers something the run did not leave waiting (an
    # earlier interrupt of a run that asked twice): another request reusing the run id, not its continuation.
    stale = [{"interruptId": "p-0", "status": "resolved", "payload": {"decision": "allow_once"}}]
    assert code_of(lambda: admit(interrupted(), request(run="r1", digest="b" * 64, resume=stale), owner="me",
                                 now=NOW, lease_free=True))[0] == "RUN_ID_CONFLICT"


def test_a_continuation_whose_run_id_left_the_window_is_still_one():
    saved = interrupted()
    saved.run_digests.clear()
    assert admit(saved, request(run="r1", resume=ANSWER), owner="me", now=NOW, lease_free=True).first_seq == \
        SEGMENT_SPAN


def test_a_tool_message_without_resume_is_told_to_send_resume():
    req = dataclasses.replace(request(run="r2"), tool_answer=True)
    assert code_of(lambda: admit(interrupted(), req, owner="me", now=NOW, lease_free=True)) == (
        "RESUME_REQUIRED", MSG_RESUME_NOT_BY_TOOL_MESSAGE)
    assert code_of(lambda: admit(interrupted(), request(run="r2"), owner="me", now=NOW, lease_free=True)) == (
        "RESUME_REQUIRED", MSG_RESUME_REQUIRED)

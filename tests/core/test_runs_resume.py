"""The resume driver (``runs.resume_driver``) through the real run core: what reaches the runtime, what is
committed, and how each resume ends."""
from typing import Dict, List

import pytest

from iaccode_agui.a2a.client import A2ARpcError
from iaccode_agui.errors import AguiError
from iaccode_agui.runs.recorder import StateRecorder
from iaccode_agui.state.store import StateWriteFailed
from tests.run_harness import (TASK, THREAD, allow, body, interrupt_ids, interrupted_permission, make_manager,
                               permission, question, run_events, status, task_frame)
from tests.run_harness import client, manager  # noqa: F401  (pytest fixtures)


def test_smoke_the_scripted_harness_reaches_an_interrupt_and_resumes(manager, client):
    interrupted_permission(manager, client, "perm-1")
    client.tasks.append(task_frame("input-required", iac={"input": permission("perm-1", "tool-perm-1")}))
    client.streams.append([status("working"), status("working", "Done."), status("input-required")])
    events = run_events(manager, body(manager, None, run="run-2", resume=allow("perm-1")))
    assert events[-1]["type"] == "RUN_FINISHED" and events[-1]["outcome"] == {"type": "success"}
    assert len(client.sent()) == 2


def test_generic_agent_second_question_on_the_same_task_is_answerable(tmp_path, client):
    manager = make_manager(tmp_path, client, upstream_kind="generic")
    try:
        client.streams.append([task_frame("submitted", session=False),
                               status("input-required", "What is your name?", session=False)])
        first = interrupt_ids(run_events(manager, body(manager, "ask", run="run-1")))
        client.tasks.append(task_frame("input-required", session=False))
        client.streams.append([status("working", "Thanks, Ada.", session=False),
                               status("input-required", "And how old are you?", session=False)])
        resumed = run_events(manager, body(manager, None, run="run-2", resume=[
            {"interruptId": first[0], "status": "resolved", "payload": {"freeText": "Ada"}}]))
        second = interrupt_ids(resumed)          # the agent's second question, announced as an interrupt
        client.streams.append([status("completed", "Ada is 42.", session=False)])
        answered = run_events(manager, body(manager, None, run="run-3", resume=[
            {"interruptId": second[0], "status": "resolved", "payload": {"freeText": "42"}}]))
        # The second question on the same task needs an id of its own, or its answer reads as a replay.
        assert answered[-1]["type"] == "RUN_FINISHED", answered[-1]
        assert [m["parts"] for m in client.sent()][-1] == [{"text": "42"}]
    finally:
        manager.stop()


def test_rejected_answer_is_not_recovered_as_applied_from_a_projectionless_snapshot(manager, client):
    interrupted_permission(manager, client, "perm-1")
    # Run 2: the runtime rejects the answer with a JSON-RPC error before any frame: nothing was accepted.
    client.tasks.append(task_frame("input-required", iac={"input": permission("perm-1", "tool-perm-1")}))
    client.streams.append([A2ARpcError(-32603, "internal error")])
    rejected = run_events(manager, body(manager, None, run="run-2", resume=allow("perm-1")))
    assert rejected[-1]["code"] == "A2A_UNAVAILABLE"
    assert list(manager.store.load(THREAD).execution.pending) == ["perm-1"]   # retryable, as documented
    # Run 3: the same answer again.  The runtime restarted meanwhile and its task summary has no projection
    # That must never erase a durable interrupt.
    client.tasks.clear()
    client.tasks.append(task_frame("input-required"))
    client.subscriptions.append([task_frame("input-required")])
    client.streams.append([status("working"), status("working", "Written."), status("input-required")])
    retried = run_events(manager, body(manager, None, run="run-3", resume=allow("perm-1")))
    # The refused answer was never applied: it is sent again (or stays pending), never committed unseen.
    delivered = [m for m in client.sent()[1:] if m["parts"][0].get("data", {}).get("inputId") == "perm-1"]
    assert len(delivered) == 2 or list(manager.store.load(THREAD).execution.pending) == ["perm-1"], (
        retried[-1], manager.store.load(THREAD).execution.pending)


def test_commit_failure_of_an_accepted_answer_clears_pending(manager, client, monkeypatch):
    interrupted_permission(manager, client, "perm-1")
    client.tasks.append(task_frame("input-required", iac={"input": permission("perm-1", "tool-perm-1")}))
    client.streams.append([status("working"), status("working", "Writing."), status("input-required")])
    real = StateRecorder.commit_answer
    failures = []

    def commit_once_fails(self, interrupt_id, digest):
        if not failures:
            failures.append(interrupt_id)
            raise StateWriteFailed("disk full")
        return real(self, interrupt_id, digest)

    monkeypatch.setattr(StateRecorder, "commit_answer", commit_once_fails)
    events = run_events(manager, body(manager, None, run="run-2", resume=allow("perm-1")))
    assert events[-1]["code"] == "STATE_PERSISTENCE_FAILED" and ("CancelTask", TASK) in client.calls
    # The task is cancelled upstream, so nothing may stay pending: the next turn is admitted at once.
    client.streams.append([task_frame("submitted"), status("input-required", "Hi again.")])
    try:
        after = run_events(manager, body(manager, "next turn", run="run-3", ros="inv-2"))
    except AguiError as exc:
        pytest.fail("a new turn after the fail-closed resume was refused: %s" % exc.code)
    assert after[-1]["type"] == "RUN_FINISHED"


def test_foreign_input_while_following_the_task_is_a_protocol_error(manager, client):
    interrupted_permission(manager, client, "perm-1")
    client.tasks.append(task_frame("input-required", iac={"input": permission("perm-1", "tool-perm-1")}))
    foreign = dict(permission("perm-2", "tool-perm-2"), requestTaskId="someone-elses-task")
    client.tasks.append(task_frame("input-required", iac={"input": foreign}))
    client.streams.append([status("working")])       # accepted, then the stream ends before a boundary
    events = run_events(manager, body(manager, None, run="run-2", resume=allow("perm-1")))
    # An input whose requestTaskId differs from the bound task breaks the identity contract.
    assert events[-1]["type"] == "RUN_ERROR" and events[-1]["code"] == "A2A_PROTOCOL_ERROR", events[-1]


def test_pipeline_answer_stream_ending_at_the_old_question_follows_the_task(manager, client):
    q1 = question("q-1", "tool-q-1", "Which region?")
    client.streams.append([task_frame("submitted"), status("working", "Planning."),
                           status("input-required", iac={"input": q1})])
    first = run_events(manager, body(manager, "sell me a stack", run="run-1", runMode="pipeline",
                                     pipelineName="selling"))
    assert interrupt_ids(first) == ["q-1"]
    client.tasks.append(task_frame("input-required", iac={"input": q1}))
    # The answer's stream is cut while the runtime still shows the (now answered) question...
    client.streams.append([status("working"), status("input-required", iac={"input": q1})])
    # ... the real next boundary only shows up when the task is followed.
    q2 = question("q-2", "tool-q-2", "Which instance type?")
    client.subscriptions.append([task_frame("working"), status("input-required", iac={"input": q2})])
    resumed = run_events(manager, body(manager, None, run="run-2", runMode="pipeline", pipelineName="selling",
                                       resume=[{"interruptId": "q-1", "status": "resolved",
                                                "payload": {"selectedId": "a"}}]))
    # The stale boundary is not the end: the task is followed and its next question announced.
    assert ("SubscribeToTask", TASK) in client.calls
    assert interrupt_ids(resumed) == ["q-2"]


def test_cancel_extension_stops_a_resume_between_two_answers(manager, client):
    interrupted_permission(manager, client, "perm-1", "perm-2")
    both = [permission("perm-1", "tool-perm-1"), permission("perm-2", "tool-perm-2")]
    client.tasks.append(task_frame("input-required", iac={"input": both}))
    cancelled: List[Dict[str, str]] = []
    execution_id = manager.store.load(THREAD).execution.execution_id

    def user_presses_stop() -> None:     # the cancel extension arrives while the first answer's stream ends
        cancelled.append(manager.cancel(execution_id, THREAD, "inv-1"))

    client.streams.append([status("working"), status("input-required", iac={"input": both[1]}), user_presses_stop])
    client.streams.append([status("canceled")])
    events = run_events(manager, body(manager, None, run="run-2", resume=allow("perm-1", "perm-2")))
    assert cancelled == [{"executionId": execution_id, "status": "cancelled"}]
    after_cancel = [m for m in client.sent() if m["parts"][0].get("data", {}).get("inputId") == "perm-2"]
    assert after_cancel == [], "perm-2 (allow_once) was sent after the execution was cancelled"
    assert events[-1]["type"] == "RUN_ERROR" and events[-1]["code"] == "CANCELLED"

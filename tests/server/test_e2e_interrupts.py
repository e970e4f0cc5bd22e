"""Interrupts, resume, idempotency, expiry and restart recovery, end to end on the scripted runtime."""
import json
import os
import time

import pytest

from iaccode_agui.runs.recorder import StateRecorder
from iaccode_agui.state.store import StateWriteFailed
from tests.agui_checker import types
from tests.harness import interrupt_of, read_sse_until, session_of, text_of, wait_for


def allow(interrupt_id, decision="allow_once"):
    return [{"interruptId": interrupt_id, "status": "resolved", "payload": {"decision": decision}}]


def test_permission_allow_once(adapter, demo, workspace):
    first = adapter.run(adapter.body("please write a file", thread="p1", run="r1"))
    interrupt = interrupt_of(first)
    assert interrupt["reason"] == "tool_call" and interrupt["toolCallId"]
    assert interrupt["expiresAt"].endswith("Z")
    assert interrupt["metadata"]["standardOptions"] == [{"id": "allow_once", "title": "Allow once"},
                                                        {"id": "deny", "title": "Deny"}]
    state = adapter.app.store.load("p1")
    assert list(state.execution.pending) == [interrupt["id"]] and state.active_run is None
    resumed = adapter.run(adapter.body(None, thread="p1", run="r2", resume=allow(interrupt["id"])))
    kinds = types(resumed)
    assert kinds[0] == "RUN_STARTED" and resumed[-1]["outcome"] == {"type": "success"}
    assert session_of(resumed)["executionId"] == session_of(first)["executionId"]
    assert any(e["type"] == "CUSTOM" and e["name"] == "iac-code.artifact.v1" for e in resumed)
    result = next(e for e in resumed if e["type"] == "TOOL_CALL_RESULT")
    assert result["toolCallId"] == interrupt["toolCallId"] and result["content"].startswith("Successfully wrote")
    assert os.path.exists(os.path.join(workspace, "hello.txt"))
    assert len(demo.runtime.tool_executions) == 1
    assert adapter.app.store.load("p1").execution.pending == {}
    # replaying the same answer never runs the tool again
    replay = adapter.run(adapter.body(None, thread="p1", run="r3", resume=allow(interrupt["id"])))
    assert replay[-1]["type"] == "RUN_ERROR" and replay[-1]["code"] == "RESUME_ALREADY_APPLIED"
    assert not any(e["type"] == "CUSTOM" and e["name"] == "iac-code.session.v1" for e in replay)
    assert len(demo.runtime.tool_executions) == 1


@pytest.mark.parametrize("entry", [{"status": "resolved", "payload": {"decision": "deny"}}, {"status": "cancelled"}])
def test_permission_deny_and_cancelled(adapter, demo, workspace, entry):
    interrupt = interrupt_of(adapter.run(adapter.body("write it", thread="d1")))
    resumed = adapter.run(adapter.body(None, thread="d1", resume=[dict(entry, interruptId=interrupt["id"])]))
    result = next(e for e in resumed if e["type"] == "TOOL_CALL_RESULT")
    assert "denied" in result["content"]
    assert resumed[-1]["outcome"] == {"type": "success"}
    assert demo.runtime.tool_executions == []
    assert not os.path.exists(os.path.join(workspace, "hello.txt"))


@pytest.mark.parametrize("payload,shown", [({"selectedId": "cn-beijing"}, "Beijing"),
                                           ({"freeText": "Shanghai please"}, "Shanghai please")])
def test_question_answers(adapter, payload, shown):
    first = adapter.run(adapter.body("a question please", thread="q1"))
    interrupt = interrupt_of(first)
    assert interrupt["reason"] == "input_required"
    assert "cn-hangzhou: Hangzhou" in interrupt["message"]
    resumed = adapter.run(adapter.body(None, thread="q1", resume=[
        {"interruptId": interrupt["id"], "status": "resolved", "payload": payload}]))
    assert "You chose: %s." % shown in text_of(resumed)
    results = [e for e in resumed if e["type"] == "TOOL_CALL_RESULT"]
    assert len(results) == 1 and results[0]["content"] == shown


def test_cancelled_question_cancels_the_task(adapter, demo):
    interrupt = interrupt_of(adapter.run(adapter.body("question", thread="qc", ros="i")))
    resumed = adapter.run(adapter.body(None, thread="qc", ros="i", resume=[
        {"interruptId": interrupt["id"], "status": "cancelled"}]))
    assert resumed[-1]["type"] == "RUN_ERROR" and resumed[-1]["code"] == "CANCELLED"
    task_id = adapter.app.store.load("qc").execution.task_id
    assert ("CancelTask", task_id) in demo.runtime.requests_log
    state = adapter.app.store.load("qc")
    assert state.execution.pending == {} and state.execution.execution_id in state.terminal_execution_ids
    assert adapter.run(adapter.body("next turn", thread="qc", ros="j"))[-1]["type"] == "RUN_FINISHED"


def test_resume_errors_keep_the_interrupt_retryable(adapter, demo):
    interrupt = interrupt_of(adapter.run(adapter.body("write", thread="e1", ros="inv")))
    iid = interrupt["id"]
    cases = [
        ([{"interruptId": "nope", "status": "resolved", "payload": {"decision": "deny"}}], "UNKNOWN_INTERRUPT"),
        ([{"interruptId": iid, "status": "resolved", "payload": {"decision": "yes please"}}], "RESUME_PAYLOAD_INVALID"),
        ([{"interruptId": iid, "status": "resolved"}], "RESUME_PAYLOAD_INVALID"),
        (allow(iid) + allow(iid), "INCOMPLETE_RESUME"),
    ]
    for resume, code in cases:
        events = adapter.run(adapter.body(None, thread="e1", ros="inv", resume=resume))
        assert events[-1]["type"] == "RUN_ERROR" and events[-1]["code"] == code, (resume, events[-1])
        assert not any(e.get("name") == "iac-code.session.v1" for e in events)
    assert list(adapter.app.store.load("e1").execution.pending) == [iid]
    assert demo.runtime.tool_executions == []
    blocked = adapter.post(adapter.body("new turn", thread="e1", ros="inv"))
    assert blocked.status_code == 409 and blocked.json()["error"]["code"] == "RESUME_REQUIRED"
    moved = adapter.post(adapter.body(None, thread="e1", ros="other", resume=allow(iid)))
    assert moved.status_code == 409 and moved.json()["error"] == {
        "code": "EXECUTION_LOST", "message": "The resume request does not match the interrupted run."}
    done = adapter.run(adapter.body(None, thread="e1", ros="inv", resume=allow(iid)))
    assert done[-1]["outcome"] == {"type": "success"} and len(demo.runtime.tool_executions) == 1


def test_admission_errors(adapter, workspace):
    body = adapter.body("hi", thread="a1", run="same")
    assert adapter.run(body)[-1]["type"] == "RUN_FINISHED"
    dup = adapter.post(body)
    assert dup.status_code == 409 and dup.json()["error"]["code"] == "DUPLICATE_RUN_ID"
    conflict = adapter.post(adapter.body("other text", thread="a1", run="same"))
    assert conflict.status_code == 409 and conflict.json()["error"]["code"] == "RUN_ID_CONFLICT"
    other_ws = os.path.join(workspace, "sub")
    moved = adapter.post(adapter.body("hi", thread="a1", cwd=other_ws))
    assert moved.status_code == 409 and moved.json()["error"]["code"] == "THREAD_BINDING_CONFLICT"
    other_user = adapter.post(adapter.body("hi", thread="a1", userId="mallory"))
    assert other_user.json()["error"]["code"] == "THREAD_BINDING_CONFLICT"
    lost = adapter.post(adapter.body(None, thread="never-seen", resume=allow("x")))
    assert lost.status_code == 409 and lost.json()["error"] == {
        "code": "EXECUTION_LOST", "message": "The execution to resume is no longer available."}
    # a rejected request never consumes its run id
    retry = adapter.run(adapter.body("hi", thread="a2", run="fresh"))
    assert retry[-1]["type"] == "RUN_FINISHED"


def test_two_interrupts_in_a_row(adapter, demo):
    first = interrupt_of(adapter.run(adapter.body("write twice", thread="w2")))
    second_run = adapter.run(adapter.body(None, thread="w2", resume=allow(first["id"])))
    second = interrupt_of(second_run)
    assert second["id"] != first["id"]
    assert any(e["type"] == "TOOL_CALL_RESULT" for e in second_run)
    final = adapter.run(adapter.body(None, thread="w2", resume=allow(second["id"])))
    assert final[-1]["outcome"] == {"type": "success"}
    assert len(demo.runtime.tool_executions) == 2


def test_interrupt_survives_adapter_restart(adapter_factory, tmp_path, demo):
    state_dir = str(tmp_path / "shared-state")
    first = adapter_factory(state_dir=state_dir)
    interrupt = interrupt_of(first.run(first.body("write", thread="rs", ros="inv")))
    first.stop()
    second = adapter_factory(state_dir=state_dir)
    resumed = second.run(second.body(None, thread="rs", ros="inv", resume=allow(interrupt["id"])))
    assert resumed[-1]["outcome"] == {"type": "success"}
    assert len(demo.runtime.tool_executions) == 1
    calls = [method for method, _ in demo.runtime.requests_log]
    assert calls.count("GetTask") == 1


@pytest.mark.slow
def test_expiry_on_access_and_by_timer(adapter_factory, demo):
    adapter = adapter_factory(interrupt_ttl=0.5)
    interrupt = interrupt_of(adapter.run(adapter.body("write", thread="x1", ros="inv")))
    time.sleep(0.7)
    expired = adapter.run(adapter.body(None, thread="x1", ros="inv", resume=allow(interrupt["id"])))
    assert expired[-1]["type"] == "RUN_ERROR" and expired[-1]["code"] == "EXECUTION_EXPIRED"
    assert expired[-1]["message"] == "The interrupted execution has expired."
    again = adapter.run(adapter.body(None, thread="x1", ros="inv", resume=allow(interrupt["id"])))
    assert again[-1]["code"] == "EXECUTION_EXPIRED"
    assert adapter.run(adapter.body("next", thread="x1", ros="inv2"))[-1]["type"] == "RUN_FINISHED"
    # the timer clears an abandoned interrupt without any request
    interrupt = interrupt_of(adapter.run(adapter.body("write", thread="x2", ros="inv")))
    assert wait_for(lambda: adapter.app.store.load("x2").execution.pending == {}, 5)
    state = adapter.app.store.load("x2")
    assert interrupt["id"] in state.execution.expired_interrupt_ids
    assert state.execution.execution_id in state.terminal_execution_ids


def test_ttl_zero_disables_expiry(adapter_factory):
    adapter = adapter_factory(interrupt_ttl=0)
    interrupt = interrupt_of(adapter.run(adapter.body("write", thread="z")))
    assert "expiresAt" not in interrupt


def test_disconnect_after_interrupt_never_cancels(adapter, demo):
    response = adapter.post(adapter.body("write", thread="dci"), stream=True)
    reader, events = read_sse_until(response, "RUN_FINISHED")
    reader.close()
    time.sleep(0.3)
    assert not any(method == "CancelTask" for method, _ in demo.runtime.requests_log)
    interrupt = interrupt_of(events)
    assert adapter.app.store.load("dci").execution.pending
    resumed = adapter.run(adapter.body(None, thread="dci", resume=allow(interrupt["id"])))
    assert resumed[-1]["outcome"] == {"type": "success"}


def test_two_adapters_on_one_state_dir_never_both_admit(adapter_factory, tmp_path):
    state_dir = str(tmp_path / "shared")
    one = adapter_factory(state_dir=state_dir)
    two = adapter_factory(state_dir=state_dir)
    response = one.post(one.body("slow", thread="shared-t"), stream=True)
    reader, _ = read_sse_until(response, "TEXT_MESSAGE_CONTENT")
    busy = two.post(two.body("hi", thread="shared-t"))
    assert busy.status_code == 409 and busy.json()["error"]["code"] == "THREAD_BUSY"
    reader.close()
    assert wait_for(lambda: one.app.manager.active_count() == 0, 5)
    assert two.run(two.body("hi", thread="shared-t"))[-1]["type"] == "RUN_FINISHED"


def test_corrupt_state_file_affects_only_its_thread(adapter):
    adapter.run(adapter.body("hi", thread="good"))
    adapter.run(adapter.body("hi", thread="bad"))
    with open(adapter.app.store.path_for("bad"), "w") as handle:
        handle.write("{not json")
    broken = adapter.post(adapter.body("again", thread="bad"))
    assert broken.status_code == 503 and broken.json()["error"]["code"] == "STATE_UNAVAILABLE"
    assert adapter.run(adapter.body("again", thread="good"))[-1]["type"] == "RUN_FINISHED"


def test_interrupt_write_failure_fails_closed(adapter, demo, monkeypatch):
    def broken(self, pending, digests):
        raise StateWriteFailed("disk full")
    monkeypatch.setattr(StateRecorder, "commit_interrupts", broken)
    events = adapter.run(adapter.body("write", thread="wf"))
    assert events[-1]["type"] == "RUN_ERROR" and events[-1]["code"] == "STATE_PERSISTENCE_FAILED"
    assert not any(e["type"] == "RUN_FINISHED" for e in events)
    task_id = adapter.app.store.load("wf").execution.task_id
    assert ("CancelTask", task_id) in demo.runtime.requests_log
    monkeypatch.undo()
    state = adapter.app.store.load("wf")
    assert state.execution.pending == {} and state.active_run is None
    assert adapter.run(adapter.body("next", thread="wf"))[-1]["type"] == "RUN_FINISHED"


def test_state_file_holds_no_secrets(adapter):
    secrets = {"llmApiKey": "sk-SECRET-1", "llmHeaders": {"X-Key": "HDR-SECRET-2"},
               "alibabaCloud": {"accessKeyId": "AKID", "accessKeySecret": "AK-SECRET-3",
                                "securityToken": "STS-SECRET-4", "regionId": "cn-hangzhou"}}
    interrupt_of(adapter.run(adapter.body("write", thread="sec", **secrets)))
    with open(adapter.app.store.path_for("sec"), encoding="utf-8") as handle:
        content = handle.read()
    json.loads(content)
    for secret in ("sk-SECRET-1", "HDR-SECRET-2", "AK-SECRET-3", "STS-SECRET-4"):
        assert secret not in content


def _answer_restore_with(demo, monkeypatch, status, body):
    def answer(environ, start_response):
        start_response(status, [("Content-Type", "application/json")])
        return [json.dumps(body).encode()]
    monkeypatch.setitem(demo.runtime._routes["/iac-code/session/ensure-restored"], "POST", answer)


def test_a_session_backup_not_ready_keeps_the_interrupt(adapter, demo, monkeypatch):
    interrupt = interrupt_of(adapter.run(adapter.body("write", thread="sr", ros="inv")))
    _answer_restore_with(demo, monkeypatch, "409 Conflict",
                         {"error": {"code": "SESSION_BACKUP_NOT_READY", "retryable": True}})
    events = adapter.run(adapter.body(None, thread="sr", ros="inv", resume=allow(interrupt["id"])))
    assert events[-1]["type"] == "RUN_ERROR" and events[-1]["code"] == "SESSION_BACKUP_NOT_READY"
    assert events[-1]["message"] == "The iac-code session backup is not ready yet. Retry after 3 seconds."
    assert not any(method == "GetTask" for method, _ in demo.runtime.requests_log)
    assert demo.runtime.tool_executions == []
    monkeypatch.undo()
    done = adapter.run(adapter.body(None, thread="sr", ros="inv", resume=allow(interrupt["id"])))
    assert done[-1]["outcome"] == {"type": "success"} and len(demo.runtime.tool_executions) == 1


def test_a_session_the_runtime_no_longer_has_settles_the_thread(adapter, demo, monkeypatch):
    """A 404 from ensure-restored is the runtime saying the session is gone: no dead end behind it."""
    interrupt = interrupt_of(adapter.run(adapter.body("write", thread="sr2", ros="inv")))
    _answer_restore_with(demo, monkeypatch, "404 Not Found", {"error": "A2A session not found"})
    events = adapter.run(adapter.body(None, thread="sr2", ros="inv", resume=allow(interrupt["id"])))
    assert events[-1]["type"] == "RUN_ERROR" and events[-1]["code"] == "CONVERSATION_LOST"
    assert not any(method == "GetTask" for method, _ in demo.runtime.requests_log)
    assert demo.runtime.tool_executions == []
    assert not adapter.app.store.load("sr2").execution.pending
    monkeypatch.undo()
    follow = adapter.post(adapter.body("a new turn", thread="sr2", ros="inv"))
    assert follow.status_code == 200, follow.text

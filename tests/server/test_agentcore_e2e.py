"""The AgentCore-compatible routes end to end: scripted runtime, real waitress, stock request bodies."""
import json
import time

import pytest
import requests

from iaccode_agui import errors
from tests.agentcore_helpers import SESSION, STOP, ac_body, ac_post, ac_stream, attach_body, error_of
from tests.agui_checker import check_sequence, parse_sse
from tests.harness import SSEReader, wait_for


@pytest.fixture
def ac(adapter_factory, workspace):
    return adapter_factory(default_cwd=workspace)


def _usage_before_finish(events):
    finished = events[-1]
    assert finished["type"] == "RUN_FINISHED"
    usage = events[-2]
    assert usage["type"] == "CUSTOM" and usage["name"] == "agentcore.usage", events[-2]
    return usage["value"], finished


def test_normal_turn_with_empty_forwarded_props(ac, workspace):
    events, _ = ac_stream(ac, ac_body("hello there", thread="s1", run="r1"))
    assert events[0] == {"type": "RUN_STARTED", "threadId": "s1", "runId": "r1", "protocolVersion": "1.0",
                         "timestamp": events[0]["timestamp"]}
    value, finished = _usage_before_finish(events)
    assert finished["outcome"] == {"type": "success"}
    # The same figures as RUN_FINISHED.usage, summed.
    assert value["models"] == finished["usage"]
    assert value["inputTokens"] == sum(entry["inputTokens"] for entry in finished["usage"]) > 0
    state = ac.app.store.load("s1")
    assert state.cwd == workspace and state.execution.ros_invocation_id.startswith("agui-thread-")
    # A second turn is a new run: its ids start at 0 again.
    second, _ = ac_stream(ac, ac_body("again", thread="s1", run="r2"))
    assert second[-1]["type"] == "RUN_FINISHED"


def test_history_roles_are_accepted_and_only_the_latest_user_message_is_sent(ac, demo):
    body = ac_body("second greeting", thread="s-hist")
    body["messages"] = [
        {"id": "sys", "role": "system", "content": "be brief"},
        {"id": "dev", "role": "developer", "content": "be nice"},
        {"id": "u0", "role": "user", "content": "earlier words"},
        {"id": "a0", "role": "assistant", "content": "ok", "toolCalls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"id": "t0", "role": "tool", "content": "done", "toolCallId": "c1"},
        {"id": "act", "role": "activity", "activityType": "x", "content": {}},
        {"id": "rs", "role": "reasoning", "content": "thinking"},
        {"id": "u1", "role": "user", "content": "second greeting"},
    ]
    events, _ = ac_stream(ac, body)
    text = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert "You said: second greeting" in text and "earlier words" not in text


def test_interrupt_and_resume_without_forwarded_props(ac, workspace):
    events, _ = ac_stream(ac, ac_body("write", thread="s-int"))
    _, finished = _usage_before_finish(events)
    interrupt = finished["outcome"]["interrupts"][0]
    resumed, _ = ac_stream(ac, ac_body(None, thread="s-int", resume=[
        {"interruptId": interrupt["id"], "status": "resolved", "payload": {"decision": "allow_once"}}]))
    assert resumed[-1]["type"] == "RUN_FINISHED" and resumed[-1]["outcome"] == {"type": "success"}
    with open(workspace + "/hello.txt") as handle:
        assert handle.read()


def test_post_root_takes_server_defaults_only_when_configured(adapter_factory, workspace):
    strict = adapter_factory()
    response = strict.post(ac_body("hi", thread="p1"))
    assert response.status_code == 400 and response.json()["error"]["code"] == "INVALID_INPUT"
    relaxed = adapter_factory(default_cwd=workspace, state_dir=str(workspace) + "-state")
    events = relaxed.run(ac_body("hi", thread="p2"))
    assert events[-1]["type"] == "RUN_FINISHED"
    assert not any(e.get("name") == "agentcore.usage" for e in events)   # POST / keeps its own shape


def test_stop_a_live_run(ac, demo):
    body = ac_body("slow", thread="s-stop", run="r-stop")
    reader = SSEReader(ac_post(ac, body, stream=True))
    reader.until("TEXT_MESSAGE_CONTENT")
    stop = ac_post(ac, {"threadId": "s-stop", "runId": "r-stop"}, path=STOP)
    assert stop.status_code == 204 and stop.content == b""
    assert stop.headers["X-AgentCore-Session-ID"] == "s-stop"
    events = reader.until("RUN_ERROR", limit=15)
    assert events[-1]["code"] == "RUN_CANCELLED" and events[-1]["message"] == "Run cancelled."
    check_sequence(events)
    reader.close()
    again = ac_post(ac, {"threadId": "s-stop", "runId": "r-stop"}, path=STOP)
    assert again.status_code == 204
    unknown = ac_post(ac, {"threadId": "s-stop", "runId": "nope"}, path=STOP)
    assert error_of(unknown)[:2] == (404, "RUN_NOT_FOUND")
    assert unknown.headers["X-AgentCore-Session-ID"] == "s-stop"


def test_stop_translates_the_cancel_message(ac):
    body = ac_body("slow", thread="s-stop-fr", run="r1")
    reader = SSEReader(ac_post(ac, body, headers={"Accept-Language": "fr"}, stream=True))
    reader.until("TEXT_MESSAGE_CONTENT")
    assert ac_post(ac, {"threadId": "s-stop-fr", "runId": "r1"}, path=STOP).status_code == 204
    events = reader.until("RUN_ERROR", limit=15)
    assert events[-1]["code"] == "RUN_CANCELLED" and events[-1]["message"] == "Exécution annulée."
    reader.close()


def test_stop_of_an_interrupted_run_cancels_its_execution(ac, demo):
    events, _ = ac_stream(ac, ac_body("write", thread="s-si", run="r-si"))
    interrupt = events[-1]["outcome"]["interrupts"][0]
    task_id = ac.app.store.load("s-si").execution.task_id
    assert ac_post(ac, {"threadId": "s-si", "runId": "r-si"}, path=STOP).status_code == 204
    assert ("CancelTask", task_id) in demo.runtime.requests_log
    state = ac.app.store.load("s-si")
    assert state.execution.pending == {} and state.execution.execution_id in state.terminal_execution_ids
    late = ac_post(ac, ac_body(None, thread="s-si", resume=[
        {"interruptId": interrupt["id"], "status": "resolved", "payload": {"decision": "allow_once"}}]))
    assert late.status_code == 200
    assert parse_sse(late.content)[0][-1]["type"] == "RUN_ERROR"
    # The thread is usable again for a new turn.
    assert ac_stream(ac, ac_body("hello", thread="s-si"))[0][-1]["type"] == "RUN_FINISHED"


@pytest.mark.slow
def test_disconnect_does_not_cancel_and_attach_continues(ac, demo):
    body = ac_body("slow", thread="s-att", run="r-att")
    reader = SSEReader(ac_post(ac, body, stream=True))
    seen = reader.until("TEXT_MESSAGE_CONTENT")
    # A second client cannot take the run while the first one is connected.
    busy = ac_post(ac, attach_body("s-att", "r-att", 0))
    assert error_of(busy)[:2] == (409, "RUN_ALREADY_ATTACHED")
    reader.close()
    last_seen = len(seen) - 1
    attached = ac_post(ac, attach_body("s-att", "r-att", last_seen), stream=True, timeout=60)
    assert attached.status_code == 200 and attached.headers["X-AgentCore-Session-ID"] == "s-att"
    rest, ids, _ = parse_sse(attached.content)
    assert ids[0] == last_seen + 1 and ids == list(range(last_seen + 1, last_seen + 1 + len(rest)))
    assert rest[-1]["type"] == "RUN_FINISHED", rest[-1]       # the run was never cancelled
    assert rest[-2]["name"] == "agentcore.usage"
    assert not any(call[0] == "CancelTask" for call in demo.runtime.requests_log)
    check_sequence(seen + rest)
    final_id = ids[-1]
    # Nothing after the terminal event: 409; one event short of it: the tail, terminal included.
    done = ac_post(ac, attach_body("s-att", "r-att", final_id))
    assert error_of(done)[:2] == (409, "RUN_ALREADY_TERMINAL")
    tail = ac_post(ac, attach_body("s-att", "r-att", final_id - 1))
    events, tail_ids, _ = parse_sse(tail.content)
    assert tail_ids == [final_id] and events[0]["type"] == "RUN_FINISHED"
    assert error_of(ac_post(ac, attach_body("s-att", "unknown", 0)))[:2] == (404, "RUN_NOT_FOUND")


def test_last_event_id_on_post_root_shares_the_terminal_rule(adapter_factory):
    adapter = adapter_factory()
    body = adapter.body("hi", thread="le")
    events, ids, _ = parse_sse(adapter.post(body).content)
    at_end = adapter.post(body, headers={"Last-Event-ID": str(ids[-1])})
    assert at_end.status_code == 409 and at_end.json()["error"]["code"] == "RUN_ALREADY_TERMINAL"
    before_end = adapter.post(body, headers={"Last-Event-ID": str(ids[-2])})
    assert parse_sse(before_end.content)[1] == [ids[-1]]


def test_run_id_reuse_busy_thread_and_capacity(adapter_factory, workspace):
    ac = adapter_factory(default_cwd=workspace, max_active_runs=1)
    body = ac_body("hi", thread="s-dup", run="r-dup")
    ac_stream(ac, body)
    assert error_of(ac_post(ac, body))[:2] == (409, "RUN_ALREADY_EXISTS")
    changed = dict(body, messages=[{"id": "x", "role": "user", "content": "other"}])
    assert error_of(ac_post(ac, changed))[:2] == (409, "RUN_ALREADY_EXISTS")
    reader = SSEReader(ac_post(ac, ac_body("slow", thread="s-busy", run="r-busy"), stream=True))
    reader.until("TEXT_MESSAGE_CONTENT")
    busy = ac_post(ac, ac_body("hi", thread="s-busy"))
    assert error_of(busy)[:2] in ((409, "SESSION_UNAVAILABLE"), (429, "RUNTIME_CAPACITY_EXCEEDED"))
    full = ac_post(ac, ac_body("hi", thread="s-other"))
    assert error_of(full)[:2] == (429, "RUNTIME_CAPACITY_EXCEEDED") and full.headers["Retry-After"]
    assert ac_post(ac, {"threadId": "s-busy", "runId": "r-busy"}, path=STOP).status_code == 204
    reader.until("RUN_ERROR", limit=15)
    reader.close()


def test_busy_thread_is_session_unavailable(ac):
    reader = SSEReader(ac_post(ac, ac_body("slow", thread="s-b2", run="r1"), stream=True))
    reader.until("TEXT_MESSAGE_CONTENT")
    assert error_of(ac_post(ac, ac_body("hi", thread="s-b2")))[:2] == (409, "SESSION_UNAVAILABLE")
    assert ac_post(ac, {"threadId": "s-b2", "runId": "r1"}, path=STOP).status_code == 204
    reader.until("RUN_ERROR", limit=15)
    reader.close()


def test_large_deltas_are_split_under_the_event_limit(adapter_factory, workspace):
    ac = adapter_factory(default_cwd=workspace, max_sse_event_bytes=4096)
    text = ("große Zeile \"quoted\"\n\u2028 " * 800)
    response = ac_post(ac, ac_body(text, thread="s-big"))
    frames = [frame for frame in response.content.split(b"\n\n") if frame]
    assert max(len(frame) + 2 for frame in frames) <= 4096
    events, ids, _ = parse_sse(response.content)
    assert ids == list(range(len(events)))
    check_sequence(events)
    shown = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert ("You said: " + text) in shown
    assert sum(1 for e in events if e["type"] == "TEXT_MESSAGE_CONTENT") > len(text.encode()) // 4096


def test_draining_answers_503(ac):
    ac.app.manager.draining = True
    response = ac_post(ac, ac_body("hi", thread="s-dr"))
    assert error_of(response)[:2] == (503, "RUNTIME_DRAINING")
    assert response.headers["X-AgentCore-Session-ID"] == "s-dr"
    ac.app.manager.draining = False


def test_runtime_not_ready(adapter_factory, workspace):
    from iaccode_agui.server.upstream import free_loopback_port
    ac = adapter_factory(default_cwd=workspace, upstream_url="http://127.0.0.1:%d/" % free_loopback_port(),
                         upstream_kind="iac-code")
    response = ac_post(ac, ac_body("hi", thread="s-nr"))
    assert error_of(response)[:2] == (503, "RUNTIME_NOT_READY") and response.headers["Retry-After"]


def test_capabilities_describe_the_live_settings(adapter_factory, workspace):
    ac = adapter_factory(default_cwd=workspace, max_sse_event_bytes=8192, auth_token="k")
    assert ac.session.get(ac.url + "capabilities").status_code == 401
    for path in ("capabilities", "ag-ui/agent/capabilities"):
        doc = ac.session.get(ac.url + path, headers={"x-api-key": "k"}).json()
        assert doc["transport"]["streaming"] is True and doc["transport"]["resumable"] is True
        assert doc["tools"]["clientProvided"] is False
        assert doc["humanInTheLoop"]["interrupts"] is True
        assert doc["multimodal"]["input"]["image"] is True and doc["multimodal"]["input"]["audio"] is False
        assert doc["custom"]["iacCode"]["limits"]["maxSseEventBytes"] == 8192
        assert doc["custom"]["iacCode"]["serverDefaults"] is True
        assert doc["identity"]["name"] == "iaccode_agui" and doc["identity"]["version"]
    bearer = ac.session.get(ac.url + "capabilities", headers={"Authorization": "Bearer k"})
    assert bearer.status_code == 200


def test_api_key_authenticates_runs_and_stops(adapter_factory, workspace):
    ac = adapter_factory(default_cwd=workspace, auth_token="secret")
    assert error_of(ac_post(ac, ac_body("hi", thread="s-auth")))[:2] == (401, "UNAUTHORIZED")
    assert error_of(ac_post(ac, ac_body("hi", thread="s-auth"), headers={"x-api-key": "wrong"}))[0] == 401
    events, _ = ac_stream_with(ac, ac_body("hi", thread="s-auth"), {"x-api-key": "secret"})
    assert events[-1]["type"] == "RUN_FINISHED"
    events, _ = ac_stream_with(ac, ac_body("hi", thread="s-auth"), {"Authorization": "Bearer secret"})
    assert events[-1]["type"] == "RUN_FINISHED"
    stop = ac_post(ac, {"threadId": "s-auth", "runId": "x"}, path=STOP, headers={"x-api-key": "secret"})
    assert error_of(stop)[:2] == (404, "RUN_NOT_FOUND")
    # POST / keeps the iac-code rule: bearer only.
    assert ac.post(ac_body("hi", thread="s-auth2"), headers={"x-api-key": "secret"}).status_code == 401


def ac_stream_with(adapter, body, headers):
    response = ac_post(adapter, body, headers=headers)
    assert response.status_code == 200, response.text
    events, ids, _ = parse_sse(response.content)
    assert ids == list(range(len(events)))
    return events, ids



def test_a_refused_key_on_the_agentcore_routes_names_x_api_key_at_the_http_layer_too(adapter_factory, workspace):
    """The server refuses a request whose head lacks credentials before reading its body; on the AgentCore
    routes that answer must say what those routes accept (the API key), as the application's own does."""
    adapter = adapter_factory(auth_token="tok", default_cwd=workspace)
    for path in ("ag-ui/agent", "ag-ui/agent/stop"):
        headers = {"Content-Type": "application/json", "x-api-key": "wrong", SESSION: "session-001"}
        response = requests.post(adapter.url + path, data=json.dumps(ac_body()), timeout=10, headers=headers)
        assert response.status_code == 401
        assert response.json()["error"] == {"code": "UNAUTHORIZED", "message": errors.MSG_UNAUTHORIZED_API_KEY}
    response = requests.post(adapter.url, data=json.dumps(ac_body()), timeout=10,
                             headers={"Content-Type": "application/json", "Authorization": "Bearer wrong"})
    assert response.json()["error"]["message"] == errors.MSG_UNAUTHORIZED



def test_a_stop_on_another_process_cancels_the_pending_execution_its_run_ended_in(adapter_factory, workspace,
                                                                                 tmp_path):
    """A stop lands on whichever process (gunicorn worker) the balancer picks: on a process other than the
    owner it must clear the interrupt the run ended in, as it does on the owner, not answer 204 and leave
    the interrupt answerable."""
    state_dir = str(tmp_path / "shared-state")
    owner = adapter_factory(default_cwd=workspace, state_dir=state_dir)
    other = adapter_factory(default_cwd=workspace, state_dir=state_dir)
    events, _ = ac_stream(owner, ac_body("please write a file", thread="stop-x", run="r-int"))
    assert events[-1]["outcome"]["type"] == "interrupt"
    assert owner.app.store.load("stop-x").execution.pending
    response = ac_post(other, {"threadId": "stop-x", "runId": "r-int"}, path=STOP)
    assert response.status_code == 204, response.text
    assert not owner.app.store.load("stop-x").execution.pending
    # A stop of an older run of the thread still changes nothing: its execution may be a newer run's now.
    ac_stream(owner, ac_body("hello", thread="stop-y", run="old"))
    ac_stream(owner, ac_body("please write a file", thread="stop-y", run="new"))
    assert ac_post(other, {"threadId": "stop-y", "runId": "old"}, path=STOP).status_code == 204
    assert owner.app.store.load("stop-y").execution.pending

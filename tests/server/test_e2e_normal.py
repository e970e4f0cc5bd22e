"""Normal runs end to end: real waitress adapter -> real HTTP scripted runtime."""
import json
import time

import pytest
import requests

from tests.agui_checker import check_stream, parse_sse, types
from tests.harness import read_sse_until, session_of, text_of, wait_for


def test_normal_run_streams_a_valid_run(adapter, demo):
    events = adapter.run(adapter.body("hello there"))
    kinds = types(events)
    assert kinds[0] == "RUN_STARTED" and kinds[-1] == "RUN_FINISHED"
    assert events[0]["protocolVersion"] == "1.0"
    assert "REASONING_MESSAGE_CONTENT" in kinds
    assert "You said: hello there" in text_of(events)
    assert events[-1]["outcome"] == {"type": "success"}
    assert events[-1]["usage"][0]["inputTokens"] > 0
    session = session_of(events)
    assert session["contextId"].startswith("agui-") and session["rosInvocationId"] == "inv-1"
    assert ("SendStreamingMessage", None) in demo.runtime.requests_log


def test_sse_framing_headers_and_ids(adapter):
    response = adapter.post(adapter.body("hi"))
    assert response.headers["Cache-Control"] == "no-cache"
    assert response.headers["X-Accel-Buffering"] == "no"
    raw = response.content
    assert b"\r" not in raw
    events, ids, _ = parse_sse(raw)
    assert ids == list(range(len(events)))
    for line in raw.split(b"\n"):
        if line.startswith(b"data: "):
            assert b"null" not in line or b'"null"' in line
            event = json.loads(line[6:])
            assert isinstance(event["timestamp"], int)


def test_second_turn_same_context_and_session_new_task(adapter):
    first = session_of(adapter.run(adapter.body("one", thread="t2", ros="inv-a")))
    second = session_of(adapter.run(adapter.body("two", thread="t2", ros="inv-b")))
    assert first["contextId"] == second["contextId"]
    assert first["sessionId"] == second["sessionId"]
    assert first["taskId"] != second["taskId"]
    assert first["executionId"] != second["executionId"]
    assert second["rosInvocationId"] == "inv-b"


def test_tool_progress_and_result(adapter):
    events = adapter.run(adapter.body("use a tool please"))
    kinds = types(events)
    assert kinds.count("TOOL_CALL_START") == 1 and "TOOL_CALL_RESULT" in kinds
    assert any(e["type"] == "CUSTOM" and e["name"] == "iac-code.tool-progress.v1" for e in events)


def test_failed_task_is_run_error(adapter):
    events = adapter.run(adapter.body("please fail"))
    assert events[-1]["type"] == "RUN_ERROR" and events[-1]["code"] == "A2A_EXECUTION_FAILED"
    assert events[-1]["message"] == "The A2A execution failed."


def test_run_error_message_is_translated(adapter):
    events = adapter.run(adapter.body("please fail", preferredLanguage="fr"))
    assert events[-1]["code"] == "A2A_EXECUTION_FAILED"
    assert events[-1]["message"] != "The A2A execution failed."


def test_firehose_all_deltas_arrive_in_order(adapter):
    events = adapter.run(adapter.body("firehose 3000"))
    deltas = [e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT"]
    numbers = [int(d.split("@")[0].lstrip("~")) for d in deltas if d.startswith("~")]
    assert numbers == list(range(len(numbers))) and len(numbers) == 3000


def test_busy_thread_and_release(adapter):
    response = adapter.post(adapter.body("slow please", thread="busy"), stream=True)
    try:
        _, events = read_sse_until(response, "TEXT_MESSAGE_CONTENT")
        second = adapter.post(adapter.body("again", thread="busy"))
        assert second.status_code == 409
        assert second.json() == {"error": {"code": "THREAD_BUSY",
                                           "message": "The AG-UI thread already has an active run."}}
    finally:
        response.close()
    # the disconnect cancels the slow run and frees the thread
    assert wait_for(lambda: adapter.app.manager.active_count() == 0, 5)
    events = adapter.run(adapter.body("after", thread="busy"))
    assert events[-1]["type"] == "RUN_FINISHED"


def test_disconnect_cancels_upstream_task_quickly(adapter, demo):
    response = adapter.post(adapter.body("slow please", thread="dc"), stream=True)
    _, events = read_sse_until(response, "TEXT_MESSAGE_CONTENT")
    task_id = session_of(events)["taskId"]
    started = time.monotonic()
    response.close()
    assert wait_for(lambda: ("CancelTask", task_id) in demo.runtime.requests_log, 5)
    assert time.monotonic() - started < 3
    assert wait_for(lambda: adapter.app.manager.active_count() == 0, 5)
    state = adapter.app.store.load("dc")
    assert state.active_run is None and state.execution.execution_id in state.terminal_execution_ids


@pytest.mark.slow
def test_heartbeat_comment_on_silence(adapter_factory):
    adapter = adapter_factory(heartbeat_interval=0.3)
    response = adapter.post(adapter.body("sleep 1"))
    events, _, heartbeats = parse_sse(response.content)
    assert heartbeats >= 2
    check_stream(response.content)
    assert events[-1]["type"] == "RUN_FINISHED"


def test_cancel_extension_ends_live_run(adapter):
    response = adapter.post(adapter.body("slow please", thread="c1", ros="inv-c"), stream=True)
    reader, events = read_sse_until(response, "TEXT_MESSAGE_CONTENT")
    execution_id = session_of(events)["executionId"]
    answer = adapter.cancel(execution_id, "c1", "inv-c")
    assert answer.status_code == 200 and answer.json() == {"executionId": execution_id, "status": "cancelled"}
    events = reader.until("RUN_ERROR")
    check_stream(reader.raw)
    response.close()
    assert events[-1]["type"] == "RUN_ERROR" and events[-1]["code"] == "CANCELLED"
    again = adapter.cancel(execution_id, "c1", "inv-c")
    assert again.json()["status"] == "already_terminal"
    wrong = adapter.cancel(execution_id, "c1", "other")
    assert wrong.status_code == 404 and wrong.json()["error"]["code"] == "EXECUTION_NOT_FOUND"
    assert adapter.cancel("nope", "c1", "inv-c").status_code == 404
    assert wait_for(lambda: adapter.app.manager.active_count() == 0, 5)
    assert adapter.run(adapter.body("next", thread="c1", ros="inv-d"))[-1]["type"] == "RUN_FINISHED"


def test_health_is_open_and_metrics_protected(adapter_factory):
    adapter = adapter_factory(auth_token="s3cret")
    health = requests.get(adapter.url + "health", timeout=5)
    assert health.status_code == 200
    assert health.json()["protocol"] == "ag-ui" and health.json()["executionKernel"] == "a2a-1.0"
    assert requests.get(adapter.url + "metrics", timeout=5).status_code == 401
    ok = requests.get(adapter.url + "metrics", headers={"Authorization": "bearer s3cret"}, timeout=5)
    assert ok.status_code == 200 and "agui_runs_started_total" in ok.text
    denied = adapter.post(adapter.body("hi"))
    assert denied.status_code == 401
    assert denied.json()["error"]["code"] == "UNAUTHORIZED"
    events = adapter.run(adapter.body("hi"), headers={"Authorization": "Bearer s3cret"})
    assert events[-1]["type"] == "RUN_FINISHED"

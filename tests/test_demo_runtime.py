"""The scripted A2A runtime, end to end over real HTTP with plain ``requests``.

These tests pin the wire shapes the adapter relies on (a2a-dialect.md part A), so a change in the demo that
would make adapter tests pass against something the real runtime never sends shows up here first.
"""
import json
import os
import time
import uuid
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pytest
import requests

from iaccode_agui.demo import SCENARIOS, DemoServer
from iaccode_agui.demo.tools import DENIAL_RESULT

TOKEN = "demo-secret"


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: Any) -> str:
    return str(tmp_path_factory.mktemp("ws"))


@pytest.fixture(scope="module")
def server(workspace: str) -> Iterator[DemoServer]:
    srv = DemoServer.start(token=TOKEN, ping_interval=0.2, slow_interval=0.05, allowed_cwds=[workspace])
    yield srv
    srv.stop()


# --- client helpers ------------------------------------------------------------------------------------------
def headers(version: Optional[str] = "1.0", token: Optional[str] = TOKEN) -> Dict[str, str]:
    result = {}
    if version is not None:
        result["A2A-Version"] = version
    if token is not None:
        result["Authorization"] = "Bearer " + token
    return result


def rpc(server: DemoServer, method: str, params: Dict[str, Any], stream: bool = False,
        **kwargs: Any) -> requests.Response:
    body = {"jsonrpc": "2.0", "id": str(uuid.uuid4()), "method": method, "params": params}
    return requests.post(server.url, json=body, headers=kwargs.pop("headers", headers()), stream=stream,
                         timeout=(5, kwargs.pop("read_timeout", 5)), **kwargs)


def message(text: str = "hello", task_id: Optional[str] = None, context_id: Optional[str] = "ctx-1",
            parts: Optional[List[Dict[str, Any]]] = None, **iac: Any) -> Dict[str, Any]:
    msg: Dict[str, Any] = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER",
                           "parts": parts if parts is not None else [{"text": text}],
                           "metadata": {"iac_code": dict({"preferredLanguage": "en", "run_mode": "normal"}, **iac)}}
    if context_id is not None:
        msg["contextId"] = context_id
    if task_id is not None:
        msg["taskId"] = task_id
    return {"message": msg, "configuration": {"acceptedOutputModes": ["text/plain"]}}


class Stream:
    """Incremental SSE reader on the raw chunked body; keeps the exact bytes for framing checks."""

    def __init__(self, response: requests.Response) -> None:
        self.response = response
        self.raw = b""
        self._buffer = b""
        self._chunks = response.iter_content(None)

    def next_block(self) -> Optional[bytes]:
        while b"\r\n\r\n" not in self._buffer:
            chunk = next(self._chunks, None)
            if chunk is None:
                return None
            self.raw += chunk
            self._buffer += chunk
        block, self._buffer = self._buffer.split(b"\r\n\r\n", 1)
        return block

    def next_event(self) -> Optional[Tuple[str, Any]]:
        """('data', obj) | ('error', obj) | ('ping', text) | ('garbage', text); None at the end."""
        block = self.next_block()
        if block is None:
            return None
        text = block.decode("utf-8")
        if text.startswith(":"):
            return "ping", text
        kind = "data"
        lines = text.split("\r\n")
        if lines[0] == "event: error":
            kind, lines = "error", lines[1:]
        payload = "\n".join(line[len("data: "):] for line in lines if line.startswith("data: "))
        try:
            return kind, json.loads(payload)
        except ValueError:
            return "garbage", payload

    def events(self) -> List[Tuple[str, Any]]:
        """Every event until the stream ends."""
        out = []
        event = self.next_event()
        while event is not None:
            out.append(event)
            event = self.next_event()
        return out

    def results(self) -> List[Dict[str, Any]]:
        """Every JSON-RPC result until the stream ends (pings skipped)."""
        return [payload["result"] for kind, payload in self.events() if kind == "data"]

    def next_result(self) -> Dict[str, Any]:
        while True:
            event = self.next_event()
            assert event is not None, "stream ended early"
            if event[0] == "data":
                return event[1]["result"]


def start(server: DemoServer, text: str, **kwargs: Any) -> Stream:
    response = rpc(server, "SendStreamingMessage", message(text, **kwargs), stream=True)
    assert response.status_code == 200
    assert response.headers["Content-Type"] == "text/event-stream; charset=utf-8"
    return Stream(response)


def turn(server: DemoServer, text: str, **kwargs: Any) -> List[Dict[str, Any]]:
    return start(server, text, **kwargs).results()


def iac(result: Dict[str, Any]) -> Dict[str, Any]:
    return result.get("statusUpdate", {}).get("metadata", {}).get("iac_code", {})


def state(result: Dict[str, Any]) -> str:
    return result["statusUpdate"]["status"]["state"]


def texts(results: List[Dict[str, Any]], suffix: str = "-message") -> List[str]:
    out = []
    for result in results:
        msg = result.get("statusUpdate", {}).get("status", {}).get("message")
        if msg and msg["messageId"].endswith(suffix):
            out.append("".join(p["text"] for p in msg["parts"]))
    return out


def tool_signals(results: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    return [iac(r)["tool"] for r in results if "tool" in iac(r)]


def answer_permission(server: DemoServer, task_id: str, pending: Dict[str, Any], choice: str,
                      **overrides: Any) -> requests.Response:
    data = {"schemaVersion": 1, "kind": "permission", "requestTaskId": task_id, "inputId": pending["inputId"],
            "toolUseId": pending["toolUseId"], "decision": choice}
    data.update(overrides)
    parts = [{"data": data, "mediaType": "application/json"}]
    return rpc(server, "SendStreamingMessage", message(task_id=task_id, parts=parts), stream=True)


def rpc_error(response: requests.Response) -> Dict[str, Any]:
    assert response.status_code == 200
    assert response.headers["Content-Type"].startswith("application/json")
    return response.json()["error"]


def wait_for(predicate: Any, timeout: float = 3.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


# --- a normal turn -------------------------------------------------------------------------------------------
def test_normal_turn_frames_in_order_and_wire_shape(server: DemoServer) -> None:
    stream = start(server, "Hello there", context_id="ctx-normal")
    assert stream.response.headers["Cache-Control"] == "no-store"
    results = stream.results()
    assert stream.raw.endswith(b"\r\n\r\n") and b"\n\n" not in stream.raw.replace(b"\r\n\r\n", b"")
    first = results[0]["task"]
    task_id = first["id"]
    assert first["contextId"] == "ctx-normal" and first["status"] == {"state": "TASK_STATE_SUBMITTED"}
    echoed = first["history"][0]
    assert echoed["role"] == "ROLE_USER" and echoed["taskId"] == task_id and echoed["parts"] == [{"text": "Hello there"}]
    assert [state(r) for r in results[1:3]] == ["TASK_STATE_SUBMITTED", "TASK_STATE_WORKING"]
    session = iac(results[1])["iacCodeSessionId"]
    assert all(r["statusUpdate"]["taskId"] == task_id for r in results[1:])
    thinking = [iac(r)["thinking"] for r in results if "thinking" in iac(r)]
    assert 2 <= len(thinking) <= 3 and all(t["type"] == "raw_thinking" for t in thinking)
    assert texts(results) == ["Hello! ", "I am the scripted runtime. ", "You said: Hello there"]
    deltas = [r["statusUpdate"]["status"]["message"] for r in results if texts([r])]
    assert {d["messageId"] for d in deltas} == {task_id + "-message"} and {d["role"] for d in deltas} == {"ROLE_AGENT"}
    usage = [iac(r)["usage"] for r in results if "usage" in iac(r)]
    assert usage == [{"inputTokens": 102.0, "outputTokens": 22.0, "totalTokens": 124.0, "cachedInputTokens": 0.0,
                      "model": "other", "provider": "openai"}]
    assert b'"inputTokens": 102.0' in stream.raw  # floats, like protobuf Struct
    final = results[-2]
    assert iac(final) == {"assistantFinal": {"complete": True}}
    assert texts([final], "-2") == ["Hello! I am the scripted runtime. You said: Hello there"]
    assert state(results[-1]) == "TASK_STATE_INPUT_REQUIRED" and iac(results[-1]) == {}
    # A second turn in the same context is a new task of the same iac-code session.
    again = turn(server, "again", context_id="ctx-normal")
    assert again[0]["task"]["id"] != task_id and iac(again[1])["iacCodeSessionId"] == session


def test_context_is_generated_when_absent_and_frames_echo_rpc_id(server: DemoServer) -> None:
    body = {"jsonrpc": "2.0", "id": 42, "method": "SendStreamingMessage", "params": message(context_id=None)}
    response = requests.post(server.url, json=body, headers=headers(), stream=True, timeout=5)
    stream = Stream(response)
    first = stream.next_event()
    assert first is not None and first[1]["id"] == 42 and first[1]["jsonrpc"] == "2.0"
    assert first[1]["result"]["task"]["contextId"]
    stream.results()


def test_follow_up_on_the_same_task_has_no_task_frame(server: DemoServer) -> None:
    first = turn(server, "hi")
    task_id = first[0]["task"]["id"]
    follow = turn(server, "more please", task_id=task_id)
    assert "task" not in follow[0] and state(follow[0]) == "TASK_STATE_WORKING"
    assert texts(follow)[-1] == "You said: more please"
    assert state(follow[-1]) == "TASK_STATE_INPUT_REQUIRED"


# --- permissions ---------------------------------------------------------------------------------------------
def test_write_permission_allow_runs_the_tool_once_and_writes_the_file(server: DemoServer, workspace: str) -> None:
    results = turn(server, "please WRITE a file", cwd=workspace)
    task_id = results[0]["task"]["id"]
    signals = tool_signals(results)
    assert [s["status"] for s in signals] == ["started", "input_delta", "input_delta", "input_complete"]
    complete = signals[-1]
    assert complete["toolInput"] == {"path": "hello.txt", "content": "hello from the scripted runtime\n"}
    assert complete["inputSummary"]["tool_name"] == "write_file"
    last = iac(results[-1])
    pending = last["input"]
    assert state(results[-1]) == "TASK_STATE_INPUT_REQUIRED"
    assert pending["inputId"].startswith("permission-") and len(pending["inputId"]) == len("permission-") + 32
    assert pending["toolUseId"] == complete["toolUseId"] and pending["toolUseId"].startswith("call_")
    assert pending["schemaVersion"] == 1.0 and pending["requestTaskId"] == task_id
    assert (pending["effect"], pending["target"], pending["isReadOnly"], pending["required"]) == \
        ("file_change", "hello.txt", False, True)
    assert pending["prompt"] == "Change a workspace file Allow once?" and pending["language"] == "en"
    assert [o["id"] for o in pending["options"]] == ["allow_once", "deny"]
    assert last["permission"] == {"pending": True, "toolName": "write_file", "autoApproved": False,
                                  "toolUseId": pending["toolUseId"]}
    snapshot = rpc(server, "GetTask", {"id": task_id, "historyLength": 100}).json()["result"]
    assert snapshot["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert snapshot["metadata"]["iac_code"]["input"]["inputId"] == pending["inputId"]
    assert snapshot["metadata"]["iac_code"]["executionControl"]["executionStatus"] == "input-required"

    answer = Stream(answer_permission(server, task_id, pending, "allow_once"))
    after = answer.results()
    assert "task" not in after[0]
    assert iac(after[0])["inputReceived"] == {"kind": "permission", "inputId": pending["inputId"],
                                              "toolUseId": pending["toolUseId"], "decision": "allow_once"}
    artifact = after[1]["artifactUpdate"]
    assert artifact["lastChunk"] is True and artifact["artifact"]["name"] == "hello.txt"
    assert artifact["artifact"]["metadata"]["byteSize"] == 32.0
    completed = tool_signals(after)[0]
    assert completed["status"] == "completed"
    assert completed["result"] == "Successfully wrote 1 lines to %s" % os.path.join(workspace, "hello.txt")
    assert completed["artifact"]["artifactId"] == artifact["artifact"]["artifactId"]
    assert texts(after) == ["Done: hello.txt was written."] and state(after[-1]) == "TASK_STATE_INPUT_REQUIRED"
    with open(os.path.join(workspace, "hello.txt")) as handle:
        assert handle.read() == "hello from the scripted runtime\n"
    # Replaying the same answer is stale: rejected before any stream, and the tool never runs twice.
    replay = answer_permission(server, task_id, pending, "allow_once")
    assert rpc_error(replay)["code"] == -32602
    assert [e for e in server.runtime.tool_executions if e[0] == task_id] == [(task_id, pending["toolUseId"])]
    assert "input" not in rpc(server, "GetTask", {"id": task_id}).json()["result"]["metadata"]["iac_code"]


def test_deny_reports_the_denial_and_executes_nothing(server: DemoServer) -> None:
    results = turn(server, "run bash please", preferredLanguage="zh-CN")
    task_id = results[0]["task"]["id"]
    pending = iac(results[-1])["input"]
    assert pending["effect"] == "local_execution" and pending["language"] == "zh"
    assert pending["target"] == "the current local workspace; command: echo hi"
    after = Stream(answer_permission(server, task_id, pending, "deny")).results()
    failed = tool_signals(after)[0]
    assert failed == {"status": "failed", "name": "bash", "toolUseId": pending["toolUseId"], "result": DENIAL_RESULT}
    assert texts(after) == ["Understood, I did not run the command."]
    assert not [e for e in server.runtime.tool_executions if e[0] == task_id]


def test_write_twice_parks_on_a_second_permission(server: DemoServer) -> None:
    results = turn(server, "write it twice")
    task_id = results[0]["task"]["id"]
    first = iac(results[-1])["input"]
    after = Stream(answer_permission(server, task_id, first, "allow_once")).results()
    second = iac(after[-1])["input"]
    assert second["target"] == "notes.txt" and second["inputId"] != first["inputId"]
    final = Stream(answer_permission(server, task_id, second, "allow_once")).results()
    assert texts(final) == ["Done: hello.txt and notes.txt were written."]
    assert len([e for e in server.runtime.tool_executions if e[0] == task_id]) == 2


@pytest.mark.parametrize("change", [
    {"extra": "x"},                        # a seventh key
    {"requestTaskId": "someone-else"},     # not this task
    {"inputId": "permission-" + "0" * 32},  # stale / unknown input
    {"decision": "allow_always"},
])
def test_invalid_permission_answers_are_rejected(server: DemoServer, change: Dict[str, Any]) -> None:
    results = turn(server, "write a file")
    task_id = results[0]["task"]["id"]
    pending = iac(results[-1])["input"]
    error = rpc_error(answer_permission(server, task_id, pending, "allow_once", **change))
    assert error["code"] == -32602 and error["message"] == "Invalid permission response"
    assert error["data"][0]["reason"] == "INVALID_PARAMS"
    two_parts = message(task_id=task_id, parts=[{"text": "yes"}, {"text": "really"}])
    assert rpc_error(rpc(server, "SendStreamingMessage", two_parts))["code"] == -32602
    # Still parked on the same permission.
    snapshot = rpc(server, "GetTask", {"id": task_id}).json()["result"]
    assert snapshot["metadata"]["iac_code"]["input"]["inputId"] == pending["inputId"]


# --- other scenarios -----------------------------------------------------------------------------------------
def test_question_text_answer_completes_the_tool(server: DemoServer) -> None:
    results = turn(server, "ask me a question")
    task_id = results[0]["task"]["id"]
    assert [s["status"] for s in tool_signals(results)][0] == "started"
    pending = iac(results[-1])["input"]
    assert pending["kind"] == "ask_user_question" and pending["inputId"] == "ask-" + pending["toolUseId"]
    assert pending["options"] == [{"id": "cn-hangzhou", "label": "Hangzhou"}, {"id": "cn-beijing", "label": "Beijing"}]
    assert pending["allowFreeText"] is True and pending["prompt"] == "Which region?"
    after = turn(server, "Hangzhou", task_id=task_id)
    assert iac(after[0])["inputReceived"]["inputId"] == pending["inputId"]
    completed = tool_signals(after)[0]
    assert completed == {"status": "completed", "name": "ask_user_question", "toolUseId": pending["toolUseId"],
                         "result": "Hangzhou"}
    assert texts(after) == ["You chose: Hangzhou."] and state(after[-1]) == "TASK_STATE_INPUT_REQUIRED"


def test_read_only_tool_reports_progress_without_asking(server: DemoServer) -> None:
    results = turn(server, "use a tool")
    signals = tool_signals(results)
    assert [s["status"] for s in signals] == ["started", "input_delta", "input_delta", "input_complete",
                                              "progress", "completed"]
    assert "toolInput" not in signals[3] and signals[3]["inputSummary"]["tool_name"] == "read_file"
    assert signals[4]["mcp"]["total"] == 2.0 and signals[4]["name"] == "read_file"
    assert "input" not in iac(results[-1]) and state(results[-1]) == "TASK_STATE_INPUT_REQUIRED"


def test_fail_and_retryable(server: DemoServer) -> None:
    failed = turn(server, "fail now")
    assert texts(failed) == ["Something went wrong."]
    assert state(failed[-1]) == "TASK_STATE_FAILED" and iac(failed[-1])["error"]["retryable"] is False
    assert failed[-1]["statusUpdate"]["status"]["message"]["parts"][0]["text"]
    error = rpc_error(rpc(server, "SendStreamingMessage", message(task_id=failed[0]["task"]["id"])))
    assert error["code"] == -32004
    retry = turn(server, "retryable please")
    assert state(retry[-1]) == "TASK_STATE_INPUT_REQUIRED" and iac(retry[-1])["error"]["retryable"] is True
    assert texts(retry, "-3") == ["A temporary error occurred. Please retry."]


def test_firehose_delivers_every_delta_with_a_timestamp(server: DemoServer) -> None:
    results = turn(server, "firehose 3000")
    deltas = texts(results)
    assert len(deltas) == 3000
    assert [int(d[1:].split("@")[0]) for d in deltas] == list(range(3000))
    stamps = [int(d.split("@")[1]) for d in deltas]
    assert stamps == sorted(stamps) and abs(stamps[-1] - time.time_ns()) < 60e9
    assert iac(results[-2]) == {"assistantFinal": {"complete": True}}


def test_cwd_outside_the_allowed_roots_fails_the_task(server: DemoServer) -> None:
    results = turn(server, "hello", cwd="/etc")
    assert state(results[-1]) == "TASK_STATE_FAILED"
    assert results[-1]["statusUpdate"]["status"]["message"]["parts"] == [{"text": "Invalid A2A workspace metadata."}]


# --- cancel, subscribe, disconnect ---------------------------------------------------------------------------
def test_cancel_ends_the_open_stream_promptly(server: DemoServer) -> None:
    stream = start(server, "go slow")
    task_id = stream.next_result()["task"]["id"]
    while not texts([stream.next_result()]):
        pass
    began = time.monotonic()
    cancelled = rpc(server, "CancelTask", {"id": task_id}).json()["result"]
    assert cancelled["status"]["state"] == "TASK_STATE_CANCELED"
    assert cancelled["status"]["message"]["messageId"] == task_id + "-5"
    assert cancelled["status"]["message"]["parts"] == [{"text": "Task canceled."}]
    rest = stream.results()
    assert state(rest[-1]) == "TASK_STATE_CANCELED" and time.monotonic() - began < 1.0
    assert rpc_error(rpc(server, "CancelTask", {"id": task_id}))["code"] == -32002
    assert rpc_error(rpc(server, "SendStreamingMessage", message(task_id=task_id)))["code"] == -32004


def test_get_task_history_is_the_agent_deltas_capped_by_history_length(server: DemoServer) -> None:
    results = turn(server, "hello history")
    task_id = results[0]["task"]["id"]
    full = rpc(server, "GetTask", {"id": task_id}).json()["result"]
    assert [m["parts"][0]["text"] for m in full["history"]] == texts(results)
    assert {m["messageId"] for m in full["history"]} == {task_id + "-message"}
    assert full["metadata"]["iac_code"]["iacCodeSessionId"] == iac(results[1])["iacCodeSessionId"]
    capped = rpc(server, "GetTask", {"id": task_id, "historyLength": 1}).json()["result"]
    assert [m["parts"][0]["text"] for m in capped["history"]] == ["You said: hello history"]
    assert "history" not in rpc(server, "GetTask", {"id": task_id, "historyLength": 0}).json()["result"]
    assert rpc_error(rpc(server, "GetTask", {"id": task_id, "historyLength": -1}))["code"] == -32602
    error = rpc_error(rpc(server, "GetTask", {"id": "no-such-task"}))
    assert error["code"] == -32001 and error["data"][0]["reason"] == "TASK_NOT_FOUND"


def test_subscribe_to_a_parked_task_pings_until_it_moves(server: DemoServer) -> None:
    results = turn(server, "write something")
    task_id = results[0]["task"]["id"]
    stream = Stream(rpc(server, "SubscribeToTask", {"id": task_id}, stream=True))
    snapshot = stream.next_result()["task"]
    assert snapshot["id"] == task_id and snapshot["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    pings = [stream.next_event() for _ in range(2)]
    assert all(p is not None and p[0] == "ping" and p[1].startswith(": ping - ") for p in pings)
    assert b": ping - " in stream.raw and stream.raw.endswith(b"\r\n\r\n")
    rpc(server, "CancelTask", {"id": task_id})
    rest = stream.results()
    assert state(rest[-1]) == "TASK_STATE_CANCELED"
    assert rpc_error(rpc(server, "SubscribeToTask", {"id": task_id}))["code"] == -32004


def test_subscriber_sees_the_live_events_of_an_answer(server: DemoServer) -> None:
    results = turn(server, "write something")
    task_id = results[0]["task"]["id"]
    stream = Stream(rpc(server, "SubscribeToTask", {"id": task_id}, stream=True))
    stream.next_result()
    answer_permission(server, task_id, iac(results[-1])["input"], "allow_once").close()
    seen = [stream.next_result()]
    while "artifactUpdate" in seen[-1] or state(seen[-1]) != "TASK_STATE_INPUT_REQUIRED":
        seen.append(stream.next_result())
    assert [next(iter(r)) for r in seen][:2] == ["statusUpdate", "artifactUpdate"]
    assert "inputReceived" in iac(seen[0]) and texts(seen) == ["Done: hello.txt was written."]
    stream.response.close()


def test_client_disconnect_stops_the_stream_not_the_task(server: DemoServer) -> None:
    stream = start(server, "slow again")
    task_id = stream.next_result()["task"]["id"]
    assert wait_for(lambda: server.runtime.open_streams >= 1)
    stream.response.close()
    assert wait_for(lambda: server.runtime.open_streams == 0, 2.0)
    assert rpc(server, "GetTask", {"id": task_id}).json()["result"]["status"]["state"] == "TASK_STATE_WORKING"
    rpc(server, "CancelTask", {"id": task_id})


def test_hang_sends_nothing_and_gives_up_when_the_client_leaves(server: DemoServer) -> None:
    before = server.runtime.active_turns
    response = rpc(server, "SendStreamingMessage", message("hang"), stream=True, read_timeout=0.6)
    assert response.status_code == 200  # headers arrive at once
    with pytest.raises(requests.exceptions.ConnectionError):
        next(response.iter_content(None))
    response.close()
    assert wait_for(lambda: server.runtime.active_turns <= before, 3.0)


def test_sleep_pings_then_replies(server: DemoServer) -> None:
    kinds = [kind for kind, _ in start(server, "sleep 0.5").events()]
    assert kinds.count("ping") >= 1 and kinds[-1] == "data"


# --- faults --------------------------------------------------------------------------------------------------
def test_garbage_frame_mid_stream(server: DemoServer) -> None:
    kinds = [kind for kind, _ in start(server, "garbage").events()]
    assert "garbage" in kinds and kinds[-1] == "data"


@pytest.mark.parametrize("text", ["truncate", "die"])
def test_abrupt_close_without_chunked_terminator(server: DemoServer, text: str) -> None:
    stream = start(server, text)
    task_id = stream.next_result()["task"]["id"]
    with pytest.raises((requests.exceptions.ChunkedEncodingError, requests.exceptions.ConnectionError)):
        stream.results()
    if text == "truncate":
        assert stream.raw.rstrip().endswith(b'"sta')
    assert wait_for(lambda: rpc(server, "GetTask", {"id": task_id}).json()["result"]["status"]["state"]
                    == "TASK_STATE_FAILED")


def test_rpc_error_frame_then_task_failed(server: DemoServer) -> None:
    stream = start(server, "rpcerror")
    task_id = stream.next_result()["task"]["id"]
    events = stream.events()
    assert events[-1][0] == "error" and events[-1][1]["error"]["code"] == -32603
    assert b"event: error\r\ndata: " in stream.raw
    assert rpc(server, "GetTask", {"id": task_id}).json()["result"]["status"]["state"] == "TASK_STATE_FAILED"


@pytest.mark.parametrize("text,field", [("wrongtask", "taskId"), ("wrongcontext", "contextId")])
def test_foreign_status_update(server: DemoServer, text: str, field: str) -> None:
    results = turn(server, text)
    first = results[0]["task"]
    own = first["id"] if field == "taskId" else first["contextId"]
    foreign = [r for r in results[1:] if r["statusUpdate"][field] != own]
    assert len(foreign) == 1 and state(results[-1]) == "TASK_STATE_INPUT_REQUIRED"


# --- protocol errors, auth, side endpoints -------------------------------------------------------------------
def test_auth_is_required_everywhere(server: DemoServer) -> None:
    for method, path in [("POST", ""), ("GET", "health"), ("GET", ".well-known/agent-card.json"),
                         ("GET", "iac-code/pipeline/state?taskId=x"),
                         ("POST", "iac-code/session/ensure-restored")]:
        for token in (None, "wrong"):
            response = requests.request(method, server.url + path, headers=headers(token=token), json={}, timeout=5)
            assert response.status_code == 401 and response.json() == {"error": "Unauthorized"}
    health = requests.get(server.url + "health", headers=headers(), timeout=5)
    assert health.json() == {"status": "healthy", "version": "demo", "mode": "normal"}


def test_agent_card_lists_jsonrpc_and_iac_code_extensions(server: DemoServer) -> None:
    card = requests.get(server.url + ".well-known/agent-card.json", headers=headers(), timeout=5).json()
    assert card["supportedInterfaces"][0] == {"url": server.url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
    uris = {e["uri"] for e in card["capabilities"]["extensions"]}
    assert uris == {"urn:iac-code:a2a:artifact-metadata:v1", "urn:iac-code:a2a:execution-control:v1",
                    "urn:iac-code:a2a:thinking-exposure:v1", "urn:iac-code:a2a:pipeline-events:v1"}
    assert "bearerAuth" in card["securitySchemes"]


def test_json_rpc_envelope_errors(server: DemoServer) -> None:
    missing = rpc_error(rpc(server, "GetTask", {"id": "x"}, headers=headers(version=None)))
    assert missing["code"] == -32009 and "'0.3'" in missing["message"]
    assert rpc_error(rpc(server, "GetTask", {"id": "x"}, headers=headers(version="2.0")))["code"] == -32009
    assert rpc_error(rpc(server, "message/send", {}))["code"] == -32601
    bad_json = requests.post(server.url, data=b"{nope", headers=headers(), timeout=5).json()
    assert bad_json["error"]["code"] == -32700 and bad_json["id"] is None
    for body in ([{"jsonrpc": "2.0", "id": 1, "method": "GetTask"}], {"jsonrpc": "1.0", "id": 1, "method": "GetTask"},
                 {"jsonrpc": "2.0", "id": True, "method": "GetTask"}, {"jsonrpc": "2.0", "id": 1}):
        error = requests.post(server.url, json=body, headers=headers(), timeout=5).json()["error"]
        assert error["code"] == -32600
    no_parts = message()
    no_parts["message"]["parts"] = []
    assert rpc_error(rpc(server, "SendStreamingMessage", no_parts))["code"] == -32602
    bad_mode = rpc_error(rpc(server, "SendStreamingMessage", message(run_mode="turbo")))
    assert bad_mode == {"code": -32602, "message": "Unsupported run mode.", "data": [
        {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "INVALID_PARAMS",
         "domain": "a2a-protocol.org", "metadata": {}}]}


def test_unknown_task_and_context_mismatch(server: DemoServer) -> None:
    assert rpc_error(rpc(server, "SendStreamingMessage", message(task_id="no-such-task")))["code"] == -32001
    assert rpc_error(rpc(server, "CancelTask", {"id": "no-such-task"}))["code"] == -32001
    task_id = turn(server, "hi", context_id="ctx-a")[0]["task"]["id"]
    error = rpc_error(rpc(server, "SendStreamingMessage", message(task_id=task_id, context_id="ctx-b")))
    assert error["code"] == -32602


def test_send_message_blocks_until_the_turn_parks(server: DemoServer) -> None:
    result = rpc(server, "SendMessage", message("hello blocking")).json()["result"]["task"]
    assert result["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert result["history"][-1]["parts"] == [{"text": "You said: hello blocking"}]


def test_ensure_restored_and_pipeline_state(server: DemoServer) -> None:
    results = turn(server, "hi", context_id="ctx-restore")
    task_id = results[0]["task"]["id"]
    session = iac(results[1])["iacCodeSessionId"]
    url = server.url + "iac-code/session/ensure-restored"
    ok = requests.post(url, json={"cwd": "/w", "sessionId": session, "taskId": task_id}, headers=headers(), timeout=5)
    assert ok.status_code == 200 and ok.json() == {"status": "current"}
    lost = requests.post(url, json={"cwd": "/w", "sessionId": "nope", "taskId": task_id}, headers=headers(), timeout=5)
    assert lost.status_code == 404
    state_url = server.url + "iac-code/pipeline/state"
    missing = requests.get(state_url, params={"taskId": task_id, "afterSequence": 0}, headers=headers(), timeout=5)
    assert missing.status_code == 404 and missing.json() == {"error": "A2A pipeline state not found"}


def test_requests_log_records_json_rpc_calls(server: DemoServer) -> None:
    results = turn(server, "hi")
    task_id = results[0]["task"]["id"]
    rpc(server, "GetTask", {"id": task_id})
    log = server.runtime.requests_log
    assert ("GetTask", task_id) in log and ("SendStreamingMessage", None) in log


def test_scenarios_are_documented() -> None:
    assert {"default", "write", "write twice", "bash", "tool", "question", "slow", "fail", "retryable", "firehose",
            "sleep", "garbage", "truncate", "rpcerror", "wrongtask", "wrongcontext", "hang", "die"} <= set(SCENARIOS)
    assert all(isinstance(text, str) and text and "\n" not in text for text in SCENARIOS.values())


def test_stop_ends_open_streams_promptly(workspace: str) -> None:
    srv = DemoServer.start(ping_interval=0.2, slow_interval=0.05)
    stream = Stream(requests.post(srv.url, json={"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage",
                                                 "params": message("slow")},
                                  headers={"A2A-Version": "1.0"}, stream=True, timeout=5))
    stream.next_result()
    began = time.monotonic()
    srv.stop()
    assert time.monotonic() - began < 2.0
    try:
        rest = stream.results()
    except (requests.exceptions.ChunkedEncodingError, requests.exceptions.ConnectionError):
        rest = []
    assert len(texts(rest)) < 60  # the slow turn was cut short, not played out
    assert srv.runtime.active_turns == 0

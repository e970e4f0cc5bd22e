"""Check, against the real `iac-code a2a` 0.16.0, every dialect fact the adapter relies on.

The adapter's unit tests use recorded or hand-written frames; if the runtime's dialect
differs from what those assume, only a test that talks to the genuine runtime notices.
This file drives the runtime directly with `requests` (no adapter code) so a failure
points at the dialect, not at our client.
"""

import json
import os
import threading
import time
import uuid
from typing import Any, Dict, Iterator, List, Optional

import requests

from fake_llm import BASH_ARGS, CLOSING_TEXT, MODEL_ID, WRITE_ARGS, FakeLLM

CAPTURE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "captures")
# Committed captures stay stable; set this to rewrite them from a fresh run.
REFRESH_ENV = "IACCODE_AGUI_REFRESH_CAPTURES"
# The runtime's temp base dir (holding workspace/ and config/) is replaced by this, so the
# committed captures carry no machine-specific paths.
CAPTURE_BASE = "/srv"
PERMISSION_ANSWER_KEYS = {"schemaVersion", "kind", "requestTaskId", "inputId", "toolUseId",
                          "decision"}
PERMISSION_INPUT_KEYS = {"kind", "schemaVersion", "inputId", "requestTaskId", "contextId",
                         "toolName", "toolUseId", "isReadOnly", "required", "effect", "target",
                         "title", "prompt", "purpose", "language", "safeSummary", "options"}


# --- a tiny A2A client: JSON-RPC over POST, SSE lines parsed by hand ---------------------

class Transcript:
    """Everything exchanged in one scenario, written as JSON lines for unit-test fixtures."""

    def __init__(self, name: str, workspace: str) -> None:
        self.name = name
        self.workspace = workspace
        self.lines: List[Dict[str, Any]] = []

    def add(self, kind: str, **fields: Any) -> None:
        entry = {"kind": kind}
        entry.update(fields)
        self.lines.append(entry)

    def save(self, tmp_dir: str) -> None:
        """Always keep a copy in tmp; touch the committed capture only when asked or missing."""
        text = "".join(json.dumps(line, sort_keys=True) + "\n" for line in self.lines)
        text = text.replace(os.path.dirname(self.workspace), CAPTURE_BASE)
        with open(os.path.join(tmp_dir, self.name + ".jsonl"), "w", encoding="utf-8") as handle:
            handle.write(text)
        target = os.path.join(CAPTURE_DIR, self.name + ".jsonl")
        if os.environ.get(REFRESH_ENV) == "1" or not os.path.exists(target):
            os.makedirs(CAPTURE_DIR, exist_ok=True)
            with open(target, "w", encoding="utf-8") as handle:
                handle.write(text)


def sse_events(response: requests.Response) -> Iterator[Dict[str, Any]]:
    """Yield each SSE event's JSON data; comments (keepalive pings) are skipped."""
    data_lines: List[str] = []
    for raw in response.iter_lines(decode_unicode=True):
        line = raw.rstrip("\r") if raw is not None else ""
        if line == "":
            if data_lines:
                yield json.loads("\n".join(data_lines))
                data_lines = []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        if field == "data":
            data_lines.append(value[1:] if value.startswith(" ") else value)
    if data_lines:
        yield json.loads("\n".join(data_lines))


class Client:
    def __init__(self, runtime: Any, transcript: Transcript) -> None:
        self.rt = runtime
        self.transcript = transcript

    def rpc(self, method: str, params: Dict[str, Any]) -> Dict[str, Any]:
        body = {"jsonrpc": "2.0", "id": str(uuid.uuid4()), "method": method, "params": params}
        self.transcript.add("rpc_request", body=body)
        response = requests.post(self.rt.url, json=body, headers=self.rt.headers(), timeout=30)
        assert response.status_code == 200, response.text
        payload = response.json()
        self.transcript.add("rpc_response", body=payload)
        assert payload["id"] == body["id"]
        return payload

    def stream(self, params: Dict[str, Any],
               frames: Optional[List[Dict[str, Any]]] = None) -> List[Dict[str, Any]]:
        """SendStreamingMessage; returns each frame's `result`, checking envelope facts."""
        body = {"jsonrpc": "2.0", "id": str(uuid.uuid4()), "method": "SendStreamingMessage",
                "params": params}
        self.transcript.add("rpc_request", body=body)
        results = [] if frames is None else frames
        with requests.post(self.rt.url, json=body, stream=True, timeout=60,
                           headers=self.rt.headers({"Accept": "text/event-stream"})) as response:
            assert response.status_code == 200, response.text
            assert response.headers["Content-Type"].startswith("text/event-stream")
            for envelope in sse_events(response):
                self.transcript.add("sse", frame=envelope)
                assert envelope["jsonrpc"] == "2.0" and envelope["id"] == body["id"]
                result = envelope["result"]
                assert len(result) == 1 and next(iter(result)) in (
                    "task", "statusUpdate", "artifactUpdate"), result
                results.append(result)
        return results

    def http(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        self.transcript.add("http_request", method=method, path=path,
                            params=kwargs.get("params"), body=kwargs.get("json"))
        response = requests.request(method, self.rt.url + path, headers=self.rt.headers(),
                                    timeout=30, **kwargs)
        try:
            payload: Any = response.json()
        except ValueError:
            payload = response.text
        self.transcript.add("http_response", status=response.status_code, body=payload)
        return response


def user_message(runtime: Any, context_id: str, text: Optional[str] = None,
                 task_id: Optional[str] = None,
                 parts: Optional[List[Dict[str, Any]]] = None) -> Dict[str, Any]:
    message: Dict[str, Any] = {
        "messageId": "m-" + uuid.uuid4().hex[:12], "role": "ROLE_USER",
        "parts": parts if parts is not None else [{"text": text}],
        "metadata": {"iac_code": {"preferredLanguage": "en", "run_mode": "normal",
                                  "cleanupOnly": False, "cwd": runtime.workspace}},
        "contextId": context_id}
    if task_id:
        message["taskId"] = task_id
    return {"message": message, "configuration": {"acceptedOutputModes": ["text/plain"]}}


def new_context() -> str:
    return "agui-" + uuid.uuid4().hex


def updates(results: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    return [r["statusUpdate"] for r in results if "statusUpdate" in r]


def iac(update: Dict[str, Any]) -> Dict[str, Any]:
    return (update.get("metadata") or {}).get("iac_code") or {}


def state_of(update: Dict[str, Any]) -> str:
    return update["status"]["state"]


def tool_frames(results: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    return [iac(u)["tool"] for u in updates(results) if "tool" in iac(u)]


def permission_answer(input_meta: Dict[str, Any], decision: str) -> List[Dict[str, Any]]:
    data = {"schemaVersion": 1, "kind": "permission",
            "requestTaskId": input_meta["requestTaskId"], "inputId": input_meta["inputId"],
            "toolUseId": input_meta["toolUseId"], "decision": decision}
    assert set(data) == PERMISSION_ANSWER_KEYS
    return [{"data": data, "mediaType": "application/json"}]


def assert_closing_turn(results: List[Dict[str, Any]], task_id: str, final_text: str) -> None:
    """Every turn ends the same way: assistantFinal text, then INPUT_REQUIRED, no input."""
    ups = updates(results)
    finals = [u for u in ups if "assistantFinal" in iac(u)]
    assert len(finals) == 1
    assert iac(finals[0])["assistantFinal"] == {"complete": True}
    final_message = finals[0]["status"]["message"]
    assert final_message["messageId"] == task_id + "-2"
    assert final_message["role"] == "ROLE_AGENT"
    assert "".join(p["text"] for p in final_message["parts"]) == final_text
    last = ups[-1]
    assert state_of(last) == "TASK_STATE_INPUT_REQUIRED"
    assert "input" not in iac(last)
    assert all(r.get("statusUpdate", {}).get("final") is None for r in results)


# --- scenarios ------------------------------------------------------------------------------

def test_health_card_and_auth(real_a2a: Any, tmp_path: Any) -> None:
    transcript = Transcript("health_card_auth", real_a2a.workspace)
    client = Client(real_a2a, transcript)
    health = client.http("GET", "health")
    assert health.status_code == 200
    assert health.json() == {"status": "healthy", "version": "0.16.0", "mode": "normal"}
    card = client.http("GET", ".well-known/agent-card.json").json()
    uris = {ext["uri"] for ext in card["capabilities"]["extensions"]}
    assert {"urn:iac-code:a2a:thinking-exposure:v1",
            "urn:iac-code:a2a:pipeline-events:v1"} <= uris
    assert "bearerAuth" in card["securitySchemes"]
    unauthorized = requests.post(real_a2a.url, timeout=10, json={
        "jsonrpc": "2.0", "id": "x", "method": "GetTask", "params": {"id": "nope"}})
    assert unauthorized.status_code == 401
    assert unauthorized.json() == {"error": "Unauthorized"}
    missing = client.rpc("GetTask", {"id": "no-such-task"})
    assert missing["error"]["code"] == -32001
    assert missing["error"]["data"][0]["reason"] == "TASK_NOT_FOUND"
    transcript.save(str(tmp_path))


def test_normal_turn(real_a2a: Any, tmp_path: Any) -> None:
    transcript = Transcript("normal_turn", real_a2a.workspace)
    client = Client(real_a2a, transcript)
    context = new_context()
    started = time.monotonic()
    results = client.stream(user_message(real_a2a, context, "hello"))
    transcript.add("note", seconds=round(time.monotonic() - started, 3))

    task = results[0]["task"]
    task_id = task["id"]
    assert task["status"]["state"] == "TASK_STATE_SUBMITTED"
    assert task["contextId"] == context
    assert task["history"][0]["role"] == "ROLE_USER"
    assert task["history"][0]["taskId"] == task_id
    ups = updates(results)
    assert [state_of(u) for u in ups[:2]] == ["TASK_STATE_SUBMITTED", "TASK_STATE_WORKING"]
    session_id = iac(ups[0])["iacCodeSessionId"]
    assert session_id

    thinking = [iac(u)["thinking"] for u in ups if "thinking" in iac(u)]
    assert thinking and all(t["type"] == "raw_thinking" for t in thinking)
    assert "".join(t["text"] for t in thinking) == "Let me think about the answer."

    deltas = [u["status"]["message"] for u in ups
              if u["status"].get("message") and "assistantFinal" not in iac(u)]
    assert len(deltas) > 1
    assert {m["messageId"] for m in deltas} == {task_id + "-message"}
    expected = "Hello! I am the fake LLM. Your message was: hello"
    assert "".join(p["text"] for m in deltas for p in m["parts"]) == expected

    usages = [iac(u)["usage"] for u in ups if "usage" in iac(u)]
    assert len(usages) == 1
    usage = usages[0]
    assert usage["provider"] == "openai" and usage["model"] == "other"
    for key in ("inputTokens", "outputTokens", "totalTokens", "cachedInputTokens"):
        assert isinstance(usage[key], float), (key, usage[key])
    assert usage["totalTokens"] == usage["inputTokens"] + usage["outputTokens"]
    assert_closing_turn(results, task_id, expected)

    # The scripted LLM was called once, streaming, with the runtime's tool schemas.
    chats = real_a2a.fake_llm.chat_requests()
    assert chats and chats[-1]["stream"] is True
    tool_names = {t["function"]["name"] for t in chats[-1].get("tools", [])}
    assert {"write_file", "bash"} <= tool_names

    # A second turn in the same context: a new task, the same iac-code session.
    second = client.stream(user_message(real_a2a, context, "again"))
    assert second[0]["task"]["id"] != task_id
    assert iac(updates(second)[0])["iacCodeSessionId"] == session_id
    transcript.save(str(tmp_path))


def _permission_turn(client: Client, runtime: Any, context: str, text: str) -> Dict[str, Any]:
    results = client.stream(user_message(runtime, context, text))
    ups = updates(results)
    assert not [u for u in ups if "assistantFinal" in iac(u)]
    last = ups[-1]
    assert state_of(last) == "TASK_STATE_INPUT_REQUIRED"
    assert "message" not in last["status"]
    return {"results": results, "task_id": results[0]["task"]["id"], "last": last,
            "session_id": iac(ups[0])["iacCodeSessionId"]}


def test_write_permission_allow_once(real_a2a: Any, tmp_path: Any) -> None:
    transcript = Transcript("write_permission_allow_once", real_a2a.workspace)
    client = Client(real_a2a, transcript)
    context = new_context()
    turn = _permission_turn(client, real_a2a, context, "please write a file")
    task_id = turn["task_id"]

    tools = tool_frames(turn["results"])
    assert [t["status"] for t in tools][0] == "started"
    assert tools[0]["name"] == "write_file"
    assert {t["status"] for t in tools[1:-1]} == {"input_delta"}
    assert all(isinstance(t["partialJsonLength"], float) for t in tools[1:-1])
    complete = tools[-1]
    assert complete["status"] == "input_complete"
    assert complete["toolInput"] == WRITE_ARGS
    assert complete["inputSummary"]["tool_name"] == "write_file"
    tool_use_id = complete["toolUseId"]
    assert all(t["toolUseId"] == tool_use_id for t in tools)

    meta = iac(turn["last"])
    request = meta["input"]
    assert set(request) == PERMISSION_INPUT_KEYS
    assert request["kind"] == "permission" and request["schemaVersion"] == 1
    assert request["inputId"].startswith("permission-")
    assert request["requestTaskId"] == task_id and request["contextId"] == context
    assert request["toolName"] == "write_file" and request["toolUseId"] == tool_use_id
    assert request["effect"] == "file_change" and request["target"] == "hello.txt"
    assert request["isReadOnly"] is False and request["required"] is True
    assert request["options"] == [{"id": "allow_once", "label": "Allow once"},
                                  {"id": "deny", "label": "Deny"}]
    assert meta["permission"] == {"pending": True, "toolName": "write_file",
                                  "autoApproved": False, "toolUseId": tool_use_id}

    # What the adapter checks before answering.
    restored = client.http("POST", "iac-code/session/ensure-restored", json={
        "cwd": real_a2a.workspace, "sessionId": turn["session_id"], "taskId": task_id})
    assert restored.status_code == 200 and restored.json() == {"status": "current"}
    pipeline = client.http("GET", "iac-code/pipeline/state",
                           params={"taskId": task_id, "afterSequence": 0})
    assert pipeline.status_code == 404
    assert pipeline.json() == {"error": "A2A pipeline state not found"}
    fetched = client.rpc("GetTask", {"id": task_id, "historyLength": 100})["result"]
    assert fetched["id"] == task_id and fetched["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert {m["messageId"] for m in fetched["history"]} == {task_id + "-message"}
    assert fetched["metadata"]["iac_code"]["input"] == request
    control = fetched["metadata"]["iac_code"]["executionControl"]
    assert control["taskId"] == task_id and control["executionStatus"] == "input-required"

    answer = client.stream(user_message(real_a2a, context, task_id=task_id,
                                        parts=permission_answer(request, "allow_once")))
    assert "task" not in answer[0]
    assert iac(answer[0]["statusUpdate"])["inputReceived"] == {
        "kind": "permission", "inputId": request["inputId"], "toolUseId": tool_use_id}
    artifacts = [r["artifactUpdate"] for r in answer if "artifactUpdate" in r]
    assert len(artifacts) == 1
    artifact = artifacts[0]["artifact"]
    assert artifact["name"] == "hello.txt" and artifacts[0]["lastChunk"] is True
    part = artifact["parts"][0]
    assert part["url"].startswith("iac-code-artifact://") and part["filename"] == "hello.txt"
    assert part["metadata"]["sourcePath"] == os.path.join(real_a2a.workspace, "hello.txt")
    assert part["metadata"]["byteSize"] == len(WRITE_ARGS["content"])
    done = [t for t in tool_frames(answer) if t["status"] == "completed"]
    assert len(done) == 1 and done[0]["toolUseId"] == tool_use_id
    assert done[0]["artifact"]["artifactId"] == artifact["artifactId"]
    with open(os.path.join(real_a2a.workspace, "hello.txt"), encoding="utf-8") as handle:
        assert handle.read() == WRITE_ARGS["content"]
    assert_closing_turn(answer, task_id, CLOSING_TEXT)
    # The tool result went back to the LLM as a `tool` message.
    assert real_a2a.fake_llm.chat_requests()[-1]["messages"][-1]["role"] == "tool"
    transcript.save(str(tmp_path))


def test_bash_permission_deny(real_a2a: Any, tmp_path: Any) -> None:
    transcript = Transcript("bash_permission_deny", real_a2a.workspace)
    client = Client(real_a2a, transcript)
    context = new_context()
    turn = _permission_turn(client, real_a2a, context, "use bash please")
    request = iac(turn["last"])["input"]
    assert request["toolName"] == "bash" and request["effect"] == "local_execution"
    assert request["target"] == "the current local workspace; command: " + BASH_ARGS["command"]
    summary = tool_frames(turn["results"])[-1]["inputSummary"]["fields"]
    assert "command" in summary and "description" not in summary  # unknown names are hashed

    answer = client.stream(user_message(real_a2a, context, task_id=turn["task_id"],
                                        parts=permission_answer(request, "deny")))
    assert not [r for r in answer if "artifactUpdate" in r]
    failed = [t for t in tool_frames(answer) if t["status"] == "failed"]
    assert len(failed) == 1 and failed[0]["name"] == "bash"
    assert "explicitly denied" in failed[0]["result"]
    assert not os.path.exists(os.path.join(real_a2a.workspace, "bash_out.txt"))
    assert_closing_turn(answer, turn["task_id"], CLOSING_TEXT)
    transcript.save(str(tmp_path))


def test_cancel_task(real_a2a: Any, tmp_path: Any) -> None:
    transcript = Transcript("cancel_task", real_a2a.workspace)
    client = Client(real_a2a, transcript)
    context = new_context()
    frames: List[Dict[str, Any]] = []
    errors: List[BaseException] = []

    def consume() -> None:
        try:
            client.stream(user_message(real_a2a, context, "go slow please"), frames)
        except BaseException as exc:  # surfaced by the main thread's assertion
            errors.append(exc)

    reader = threading.Thread(target=consume, daemon=True)
    reader.start()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not any(
            u["status"].get("message") for u in updates(list(frames))):
        time.sleep(0.05)
    assert frames, "no frame before the cancel"
    task_id = frames[0]["task"]["id"]

    canceled = client.rpc("CancelTask", {"id": task_id})["result"]
    assert canceled["id"] == task_id
    assert canceled["status"]["state"] == "TASK_STATE_CANCELED"
    message = canceled["status"]["message"]
    assert message["messageId"].startswith(task_id + "-")
    assert [p["text"] for p in message["parts"]] == ["Task canceled."]
    assert canceled["metadata"]["iac_code"]["executionControl"]["taskId"] == task_id

    reader.join(15)
    assert not reader.is_alive(), "the stream did not close after the cancel"
    assert not errors, errors
    last = updates(frames)[-1]
    assert state_of(last) == "TASK_STATE_CANCELED"
    assert last["status"]["message"]["parts"] == message["parts"]

    again = client.rpc("CancelTask", {"id": task_id})
    assert again["error"]["code"] == -32002
    assert again["error"]["data"][0]["reason"] == "TASK_NOT_CANCELABLE"
    assert client.rpc("GetTask", {"id": task_id})["result"]["status"]["state"] == \
        "TASK_STATE_CANCELED"

    # A turn that ended INPUT_REQUIRED is not cancelable either: the adapter must cope.
    idle = client.stream(user_message(real_a2a, context, "hello"))
    refused = client.rpc("CancelTask", {"id": idle[0]["task"]["id"]})
    assert refused["error"]["code"] == -32002
    transcript.save(str(tmp_path))


def test_rejected_requests(real_a2a: Any, tmp_path: Any) -> None:
    transcript = Transcript("rejected_requests", real_a2a.workspace)
    client = Client(real_a2a, transcript)
    bad_mode = user_message(real_a2a, new_context(), "hello")
    bad_mode["message"]["metadata"]["iac_code"]["run_mode"] = "turbo"
    error = client.rpc("SendMessage", bad_mode)["error"]
    assert error["code"] == -32602 and error["data"][0]["reason"] == "INVALID_PARAMS"

    outside = user_message(real_a2a, new_context(), "hello")
    outside["message"]["metadata"]["iac_code"]["cwd"] = os.path.dirname(real_a2a.workspace)
    task = client.rpc("SendMessage", outside)["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_FAILED"
    assert [p["text"] for p in task["status"]["message"]["parts"]] == [
        "Invalid A2A workspace metadata."]
    transcript.save(str(tmp_path))


def test_fake_llm_non_streaming_and_models() -> None:
    """The paths the runtime did not use in the scenarios above still answer correctly."""
    with FakeLLM() as llm:
        models = requests.get(llm.base_url + "/models", timeout=10).json()
        assert [m["id"] for m in models["data"]] == [MODEL_ID]
        reply = requests.post(llm.base_url + "/chat/completions", timeout=10, json={
            "model": MODEL_ID, "messages": [{"role": "user", "content": "write it"}]}).json()
        choice = reply["choices"][0]
        assert choice["finish_reason"] == "tool_calls"
        call = choice["message"]["tool_calls"][0]
        assert call["function"]["name"] == "write_file"
        assert json.loads(call["function"]["arguments"]) == WRITE_ARGS
        assert reply["usage"]["total_tokens"] == (reply["usage"]["prompt_tokens"]
                                                  + reply["usage"]["completion_tokens"])
        assert [r["path"] for r in llm.requests] == ["/v1/models", "/v1/chat/completions"]

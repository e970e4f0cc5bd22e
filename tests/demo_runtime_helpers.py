"""Shared by the scripted-runtime tests: one demo runtime per test module, and a plain ``requests`` client
for its JSON-RPC methods and SSE frames, so both suites read the wire the same way."""
import json
import time
import uuid
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pytest
import requests

from iaccode_agui.demo import DemoServer

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

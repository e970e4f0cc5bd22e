"""End-to-end harness: the scripted runtime and the adapter on real waitress servers on loopback.

Everything binds 127.0.0.1 port 0 and is stopped by handle.  ``Adapter.run`` posts a RunAgentInput and
returns the parsed, conformance-checked SSE stream.
"""
import json
import time
import uuid
from typing import Any, Dict, List, Optional, Tuple

import requests

from iaccode_agui.web.app import AguiApp
from iaccode_agui.config import Settings
from iaccode_agui.server.serving import ServerThread, waitress_limits
from tests.agui_checker import check_stream, parse_sse


class Adapter:
    """An adapter instance (AguiApp on waitress) in front of ``upstream_url``."""

    def __init__(self, upstream_url: str, upstream_token: Optional[str], state_dir: str, workspace: str,
                 **settings: Any) -> None:
        defaults: Dict[str, Any] = dict(a2a_url=upstream_url, a2a_token=upstream_token, state_dir=state_dir,
                                        allowed_cwds=(workspace,), heartbeat_interval=15.0, disconnect_poll=0.1)
        defaults.update(settings)
        self.settings = Settings(**defaults)
        self.app = AguiApp(self.settings)
        self.server = ServerThread(self.app, threads=32, slice_seconds=0.05,
                                   **waitress_limits(self.settings.largest_request_bytes))
        self.url = self.server.url
        self.workspace = workspace
        self.session = requests.Session()

    def stop(self) -> None:
        self.app.close(0, cancel_wait=5.0)
        self.server.stop()

    # ---- requests -------------------------------------------------------------------------------
    def body(self, text: Optional[str] = "hello", *, thread: str = "thread-1", run: Optional[str] = None,
             ros: str = "inv-1", resume: Optional[List[Dict[str, Any]]] = None, **props: Any) -> Dict[str, Any]:
        iac = {"schemaVersion": 1, "rosInvocationId": ros, "cwd": self.workspace}
        iac.update(props)
        messages = [] if text is None else [{"id": "m-" + uuid.uuid4().hex[:8], "role": "user", "content": text}]
        body: Dict[str, Any] = {"threadId": thread, "runId": run or "run-" + uuid.uuid4().hex[:8], "state": {},
                                "messages": messages, "tools": [], "context": [],
                                "forwardedProps": {"iacCode": iac}}
        if resume is not None:
            body["resume"] = resume
        return body

    def post(self, body: Any, headers: Optional[Dict[str, str]] = None, path: str = "", stream: bool = False,
             timeout: float = 30) -> requests.Response:
        base = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        base.update(headers or {})
        data = body if isinstance(body, (bytes, str)) else json.dumps(body)
        return self.session.post(self.url + path, data=data, headers=base, stream=stream, timeout=timeout)

    def run(self, body: Dict[str, Any], headers: Optional[Dict[str, str]] = None,
            timeout: float = 30) -> List[Dict[str, Any]]:
        response = self.post(body, headers=headers, timeout=timeout)
        assert response.status_code == 200, response.text
        assert response.headers["Content-Type"].startswith("text/event-stream")
        return check_stream(response.content)

    def cancel(self, execution_id: str, thread: str, ros: str) -> requests.Response:
        return self.post({"threadId": thread, "rosInvocationId": ros},
                         path="extensions/iac-code/v1/executions/%s/cancel" % execution_id)


def interrupt_of(events: List[Dict[str, Any]]) -> Dict[str, Any]:
    final = events[-1]
    assert final["type"] == "RUN_FINISHED" and final["outcome"]["type"] == "interrupt", final
    return final["outcome"]["interrupts"][0]


def session_of(events: List[Dict[str, Any]]) -> Dict[str, Any]:
    return next(e["value"] for e in events if e["type"] == "CUSTOM" and e["name"] == "iac-code.session.v1")


def text_of(events: List[Dict[str, Any]]) -> str:
    return "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")


def wait_for(predicate: Any, timeout: float = 5.0, interval: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())


class SSEReader:
    """Incremental reader of a streamed adapter response that keeps every event seen so far."""

    def __init__(self, response: requests.Response) -> None:
        self.response = response
        self.raw = b""
        self.events: List[Dict[str, Any]] = []
        self._chunks = response.iter_content(chunk_size=None)

    def until(self, stop_type: str, limit: float = 10.0) -> List[Dict[str, Any]]:
        deadline = time.monotonic() + limit
        while not any(e["type"] == stop_type for e in self.events):
            if time.monotonic() > deadline:
                raise AssertionError("no %s within %.1f s; got %r" % (stop_type, limit, [e["type"] for e in self.events]))
            try:
                chunk = next(self._chunks)
            except StopIteration:
                break
            self.raw += chunk
            complete = self.raw.rsplit(b"\n\n", 1)[0] + b"\n\n" if b"\n\n" in self.raw else b""
            self.events, _, _ = parse_sse(complete)
        return self.events

    def close(self) -> None:
        self.response.close()


def read_sse_until(response: requests.Response, stop_type: str, limit: float = 10.0) -> Tuple[SSEReader, List[Dict[str, Any]]]:
    reader = SSEReader(response)
    return reader, reader.until(stop_type, limit)

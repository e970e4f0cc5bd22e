"""Shared by the hostile-input and security tests: an adapter app in front of a closed port, and the check
every answer to a hostile request must pass.

The contract: whatever a client sends, the answer is never a 5xx, never shows a traceback or a Python repr,
and is either a 200 SSE stream or exactly ``{"error":{"code","message"}}`` with the status declared for
that code.  Kept in one module so every suite judges an answer by the very same rules.
"""
import json
import os
import uuid
from typing import Any, Dict, Iterator, Optional, Tuple

import pytest
from werkzeug.test import Client

from iaccode_agui.web.app import AguiApp
from iaccode_agui.config import Settings
from iaccode_agui.errors import ERRORS
from iaccode_agui.server.upstream import free_loopback_port
from tests.agui_checker import check_stream

SMALL_LIMIT = 64 * 1024
BIG_LIMIT = 24 * 1024 * 1024
CANCEL_PATH = "/extensions/iac-code/v1/executions/%s/cancel"
REPR_MARKERS = ("Traceback", 'File "', "object at 0x", "<class '", "<function ", "Exception(", "Error(")
EXPECTED_HEADERS = {"content-type", "content-length", "cache-control", "x-accel-buffering", "www-authenticate",
                    "allow", "retry-after"}
PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 16


class Env:
    """An adapter app in front of a closed port, plus a werkzeug client for it."""

    def __init__(self, root: str, **overrides: Any) -> None:
        self.root = root
        self.workspace = os.path.realpath(os.path.join(root, "ws"))
        os.makedirs(self.workspace, exist_ok=True)
        self.state_dir = os.path.join(root, "state")
        values: Dict[str, Any] = dict(a2a_url="http://127.0.0.1:%d/" % free_loopback_port(), state_dir=self.state_dir,
                                      allowed_cwds=(self.workspace,), max_request_bytes=SMALL_LIMIT,
                                      disconnect_poll=0.05, connect_timeout=1.0)
        values.update(overrides)
        self.app = AguiApp(Settings(**values))
        self.client = Client(self.app)

    def close(self) -> None:
        self.app.close(0, cancel_wait=5.0)     # every timer and thread of the app, not only the expiry's

    def body(self, text: Any = "hello", thread: str = "t", run: str = "r", **props: Any) -> Dict[str, Any]:
        iac = {"schemaVersion": 1, "rosInvocationId": "inv", "cwd": self.workspace}
        iac.update(props)
        return {"threadId": thread, "runId": run, "state": {}, "tools": [], "context": [],
                "messages": [{"id": "m1", "role": "user", "content": text}], "forwardedProps": {"iacCode": iac}}

    def call(self, data: Any, path: str = "/", headers: Optional[Dict[str, str]] = None,
             content_type: str = "application/json", method: str = "POST") -> Tuple[int, Dict[str, str], bytes]:
        raw = data if isinstance(data, bytes) else json.dumps(data).encode("utf-8")
        response = self.client.open(path, method=method, data=raw, headers=headers or {},
                                    content_type=content_type, buffered=False)
        try:
            content = response.get_data()
        finally:
            response.close()
        return response.status_code, dict(response.headers), content


def assert_contract(status: int, headers: Dict[str, str], body: bytes, allow_5xx: bool = False) -> Optional[str]:
    """Checks one answer; returns the error code (None for a 200).  ``allow_5xx`` admits a documented 503."""
    assert status < 500 or (allow_5xx and status == 503), (status, body[:500])
    text = body.decode("utf-8")
    for marker in REPR_MARKERS:
        assert marker not in text, (marker, text[:500])
    for name, value in headers.items():
        assert name.lower() in EXPECTED_HEADERS, (name, value)
        assert "\r" not in value and "\n" not in value
    if status == 200 and headers["Content-Type"].startswith("text/event-stream"):
        events = check_stream(body)
        assert events[0]["type"] == "RUN_STARTED" and events[-1]["type"] in ("RUN_FINISHED", "RUN_ERROR")
        return None
    assert headers["Content-Type"].startswith("application/json"), headers
    payload = json.loads(text)
    if status == 200:
        assert set(payload) == {"executionId", "status"}
        return None
    assert list(payload) == ["error"] and sorted(set(payload["error"]) - {"field"}) == ["code", "message"], payload
    code, message = payload["error"]["code"], payload["error"]["message"]
    field = payload["error"].get("field", "")
    assert isinstance(field, str) and (field == "" or field.startswith("/")), payload
    assert code in ERRORS and ERRORS[code][0] == status, (code, status)
    assert isinstance(message, str) and message.strip()
    return code


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> Iterator[Env]:
    made = Env(str(tmp_path_factory.mktemp("hostile")))
    yield made
    made.close()


@pytest.fixture(scope="module")
def big_env(tmp_path_factory) -> Iterator[Env]:
    made = Env(str(tmp_path_factory.mktemp("hostile-big")), max_request_bytes=BIG_LIMIT)
    yield made
    made.close()


def fresh_run() -> str:
    """Run ids are consumed by admission; a property must not trip over DUPLICATE_RUN_ID by replaying one."""
    return "run-" + uuid.uuid4().hex

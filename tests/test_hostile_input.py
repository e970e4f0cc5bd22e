"""Hostile input: property tests through werkzeug's test client, then explicit edge cases.

The contract under test: whatever a client sends, the answer is never a 5xx, never shows a traceback or a
Python repr, and is either a 200 SSE stream or exactly ``{"error":{"code","message"}}`` with the status
declared for that code.  The upstream is a closed loopback port, so an admitted run fails fast with
``A2A_UNAVAILABLE`` and the property tests need no runtime.

Lone UTF-16 surrogates (legal JSON escapes, not Unicode scalar values) are left out of the generated text
on purpose: they are covered by the explicit, currently failing cases below, and including them would
make every property fail on the same known bug.
"""
import base64
import http.client
import json
import os
import socket
import threading
import uuid
from typing import Any, Dict, Iterator, List, Optional, Tuple
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from werkzeug.test import Client, EnvironBuilder

from iaccode_agui import errors, inputs
from iaccode_agui.app import AguiApp
from iaccode_agui.config import Settings
from iaccode_agui.demo import DemoServer
from iaccode_agui.errors import ERRORS
from tests.agui_checker import check_stream

SMALL_LIMIT = 64 * 1024
BIG_LIMIT = 24 * 1024 * 1024
CANCEL_PATH = "/extensions/iac-code/v1/executions/%s/cancel"
REPR_MARKERS = ("Traceback", 'File "', "object at 0x", "<class '", "<function ", "Exception(", "Error(")
EXPECTED_HEADERS = {"content-type", "content-length", "cache-control", "x-accel-buffering", "www-authenticate",
                    "allow", "retry-after"}
PROPERTY_SETTINGS = dict(deadline=None, database=None,
                         suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _closed_port() -> int:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


class Env:
    """An adapter app in front of a closed port, plus a werkzeug client for it."""

    def __init__(self, root: str, **overrides: Any) -> None:
        self.root = root
        self.workspace = os.path.realpath(os.path.join(root, "ws"))
        os.makedirs(self.workspace, exist_ok=True)
        self.state_dir = os.path.join(root, "state")
        values: Dict[str, Any] = dict(a2a_url="http://127.0.0.1:%d/" % _closed_port(), state_dir=self.state_dir,
                                      allowed_cwds=(self.workspace,), max_request_bytes=SMALL_LIMIT,
                                      disconnect_poll=0.05, connect_timeout=1.0)
        values.update(overrides)
        self.app = AguiApp(Settings(**values))
        self.client = Client(self.app)

    def close(self) -> None:
        self.app.manager.cancel_all()
        self.app.manager.wait_idle(5)
        self.app.client.close()
        self.app.manager.expiry.stop()

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
    assert list(payload) == ["error"] and sorted(payload["error"]) == ["code", "message"], payload
    code, message = payload["error"]["code"], payload["error"]["message"]
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


# ---- strategies ---------------------------------------------------------------------------------------
TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=24)
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(min_value=-2 ** 70, max_value=2 ** 70),
                    st.floats(allow_nan=False, allow_infinity=False), TEXT)
JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
                    max_leaves=12)
HOSTILE_IDS = ["..", ".", "../escape", "../../etc/passwd", "a/b", "a\\b", "/abs", "CON", "con", "aux.txt", "NUL",
               "COM1", "LPT9.txt", "thread.", "~", "aguiid~41", "aguihash~00", " ", "\u202e", "C:\\x", "a\r\nb",
               "\x00", "x" * 1025, "", "é/é"]
IDS = st.one_of(TEXT.filter(bool), st.sampled_from(HOSTILE_IDS), JSON)
PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 16
IMAGE_PARTS = st.fixed_dictionaries({
    "type": st.sampled_from(["image", "binary", "text", "audio", "document"]),
}, optional={
    "source": st.one_of(JSON, st.fixed_dictionaries({
        "type": st.sampled_from(["data", "url", "base64"]),
        "mimeType": st.sampled_from(["image/png", "image/jpeg", "image/svg+xml", "IMAGE/PNG; x=y", "text/plain"]),
        "value": st.one_of(st.just(base64.b64encode(PNG).decode()), TEXT, JSON)})),
    "mimeType": st.sampled_from(["image/png", "text/plain", "image/gif"]),
    "data": st.one_of(st.just(base64.b64encode(b"GIF89a....").decode()), TEXT),
    "url": TEXT, "text": st.one_of(TEXT, JSON),
    "metadata": st.one_of(JSON, st.fixed_dictionaries({"filename": st.sampled_from(HOSTILE_IDS)})),
    "filename": st.sampled_from(HOSTILE_IDS)})
CONTENT = st.one_of(TEXT, st.lists(IMAGE_PARTS, max_size=3), JSON)
MESSAGES = st.one_of(st.lists(st.fixed_dictionaries(
    {"id": st.one_of(TEXT, JSON), "role": st.sampled_from(["user", "assistant", "system", "tool", "developer", "x"])},
    optional={"content": CONTENT, "toolCalls": JSON}), max_size=3), JSON)
PROP_VALUES = {
    "schemaVersion": st.one_of(st.just(1), JSON), "rosInvocationId": st.one_of(TEXT, st.just("x" * 300), JSON),
    "model": st.one_of(TEXT, JSON), "llmApiKey": st.one_of(TEXT, JSON),
    "llmHeaders": st.one_of(st.dictionaries(TEXT, TEXT, max_size=3), JSON),
    "thinking": st.one_of(st.fixed_dictionaries({}, optional={"enabled": st.booleans(), "effort": TEXT,
                                                              "budget": st.integers()}), JSON),
    "userId": st.one_of(TEXT, JSON), "channel": TEXT, "preferredLanguage": st.one_of(
        st.sampled_from(["fr", "zh-CN", "pt_BR", "xx", "", "de-DE-u-co-phonebk", "*"]), TEXT, JSON),
    "candidatePresentation": st.one_of(st.sampled_from(["standard", "rich"]), JSON),
    "runMode": st.one_of(st.sampled_from(["normal", "pipeline"]), JSON), "pipelineName": TEXT,
    "cleanupOnly": st.one_of(st.booleans(), JSON), "activeGuidance": st.one_of(st.booleans(), JSON),
    "executionFence": JSON, "guidanceId": st.one_of(TEXT, JSON), "inputDigest": st.one_of(TEXT, JSON),
    "alibabaCloud": st.one_of(st.fixed_dictionaries({}, optional={
        "accessKeyId": TEXT, "accessKeySecret": TEXT, "securityToken": TEXT, "regionId": TEXT}), JSON),
    "unknownKey": JSON, "cwd": st.one_of(TEXT, st.sampled_from(["/", "/etc", "relative", "~", "~/x", "/tmp/../etc",
                                                               "\x00"]), JSON),
}
RESUME_ENTRY = st.fixed_dictionaries({}, optional={
    "interruptId": st.one_of(TEXT, JSON), "status": st.one_of(st.sampled_from(["resolved", "cancelled"]), JSON),
    "payload": st.one_of(JSON, st.fixed_dictionaries({}, optional={
        "decision": st.sampled_from(["allow_once", "deny", "allow_always", ""]), "selectedId": TEXT,
        "freeText": TEXT})),
    "metadata": JSON, "extra": JSON})
RESUME = st.one_of(st.none(), st.just([]), st.lists(RESUME_ENTRY, max_size=3), JSON)


def fresh_run() -> str:
    """Run ids are consumed by admission; a property must not trip over DUPLICATE_RUN_ID by replaying one."""
    return "run-" + uuid.uuid4().hex


def _mutate(draw: Any, base: Dict[str, Any], values: Dict[str, Any], keep: int = 3, extra: int = 4) -> Dict[str, Any]:
    """Keep (``keep`` times likelier), drop or replace each key of ``base``; maybe add some of ``values``' keys."""
    out: Dict[str, Any] = {}
    for key, value in base.items():
        action = draw(st.sampled_from(["keep"] * keep + ["drop", "replace"]))
        if action == "keep":
            out[key] = value
        elif action == "replace":
            out[key] = draw(values[key]) if key in values else draw(JSON)
    for key in draw(st.lists(st.sampled_from(sorted(values)), max_size=extra, unique=True)):
        out[key] = draw(values[key])
    return out


@st.composite
def run_inputs(draw: Any, env: Env) -> Any:
    if draw(st.integers(0, 19)) == 0:
        return draw(JSON)                               # not even an object, sometimes
    base_props = {"schemaVersion": 1, "rosInvocationId": "inv", "cwd": env.workspace}
    props = _mutate(draw, base_props, PROP_VALUES, keep=8, extra=2)
    if draw(st.booleans()) and isinstance(props.get("cwd"), str) and props["cwd"] == env.workspace:
        props["cwd"] = os.path.join(env.workspace, draw(st.sampled_from(["sub", "..", "../..", "a/../../b", "x y"])))
    forwarded: Any = {"iacCode": props}
    if draw(st.integers(0, 9)) == 0:
        forwarded = draw(st.one_of(JSON, st.just({"iacCode": props, "other": 1}), st.just({})))
    base = {"threadId": "prop-%d" % draw(st.integers(0, 40)), "runId": fresh_run(),
            "state": {}, "messages": [{"id": "m1", "role": "user", "content": "hello"}], "tools": [], "context": [],
            "forwardedProps": forwarded}
    values = {"threadId": IDS, "runId": IDS, "state": JSON, "messages": MESSAGES,
              "tools": st.one_of(st.just([]), JSON), "context": JSON, "forwardedProps": JSON,
              "resume": RESUME, "parentRunId": st.one_of(st.none(), TEXT, JSON),
              "protocolVersion": st.one_of(st.none(), TEXT, JSON), "extraTopLevel": JSON}
    return _mutate(draw, base, values, keep=12, extra=1)


# ---- properties -------------------------------------------------------------------------------------------
@settings(max_examples=300, **PROPERTY_SETTINGS)
@given(data=st.data())
def test_property_run_agent_input_never_breaks_the_contract(env, data):
    body = data.draw(run_inputs(env))
    event("answer: %s" % (assert_contract(*env.call(body)) or "200 SSE"))


@settings(max_examples=150, **PROPERTY_SETTINGS)
@given(data=st.data())
def test_property_iaccode_props_never_break_the_contract(env, data):
    props = _mutate(data.draw, {"schemaVersion": 1, "rosInvocationId": "inv", "cwd": env.workspace}, PROP_VALUES)
    body = env.body("hello", thread="props-%d" % data.draw(st.integers(0, 5)),
                    run=fresh_run())
    body["forwardedProps"]["iacCode"] = props
    code = assert_contract(*env.call(body))
    event("answer: %s" % (code or "200 SSE"))
    if code is not None:
        assert code in ("INVALID_INPUT", "THREAD_BINDING_CONFLICT", "THREAD_BUSY"), code


class PendingThreads:
    """Threads with a live permission interrupt on the scripted runtime, made on demand."""

    def __init__(self, env: Env, demo: DemoServer) -> None:
        self.env, self.demo = env, demo
        self.thread: Optional[str] = None
        self.interrupts = 0

    def current(self) -> Tuple[str, str]:
        state = self.env.app.store.load(self.thread) if self.thread else None
        if state is None or not state.execution.pending:
            self.thread = "pending-%d" % self.interrupts
            self.interrupts += 1
            _, _, raw = self.env.call(self.env.body("please write a file", thread=self.thread, run=fresh_run()))
            assert check_stream(raw)[-1]["outcome"]["type"] == "interrupt"
            state = self.env.app.store.load(self.thread)
        return self.thread, next(iter(state.execution.pending))


@pytest.fixture(scope="module")
def pending(tmp_path_factory) -> Iterator[PendingThreads]:
    demo = DemoServer.start(token="demo-token", ping_interval=0.5, slow_interval=0.2)
    env = Env(str(tmp_path_factory.mktemp("hostile-resume")), a2a_url=demo.url, a2a_token=demo.token)
    try:
        yield PendingThreads(env, demo)
    finally:
        env.close()
        demo.stop()


REAL_ID = "<the pending interrupt id>"
RESUME_AGAINST_PENDING = st.lists(st.fixed_dictionaries({
    "interruptId": st.one_of(st.just(REAL_ID), st.just(REAL_ID), TEXT.filter(bool)),
    "status": st.sampled_from(["resolved", "resolved", "cancelled"])}, optional={
    "payload": st.one_of(JSON, st.fixed_dictionaries({}, optional={
        "decision": st.sampled_from(["allow_once", "deny", "allow_always", "", "ALLOW_ONCE"]), "extra": JSON})),
    "metadata": st.dictionaries(TEXT, JSON, max_size=2)}), min_size=1, max_size=2)


@settings(max_examples=120, **PROPERTY_SETTINGS)
@given(resume=st.one_of(RESUME_AGAINST_PENDING, RESUME_AGAINST_PENDING, RESUME_AGAINST_PENDING, RESUME),
       target=st.sampled_from(["pending", "pending", "pending", "unknown"]),
       ros=st.sampled_from(["inv", "inv", "inv", "other"]))
def test_property_resume_never_breaks_the_contract(pending, resume, target, ros):
    """Resume entries against a live interrupt: never a 5xx, and a tool never runs more than once."""
    thread, interrupt_id = pending.current() if target == "pending" else ("never-seen", "x")
    if isinstance(resume, list):
        resume = [dict(entry, interruptId=interrupt_id)
                  if isinstance(entry, dict) and entry.get("interruptId") == REAL_ID else entry for entry in resume]
    body = pending.env.body(None, thread=thread, run=fresh_run(), rosInvocationId=ros)
    body["messages"], body["resume"] = [], resume
    status, headers, raw = pending.env.call(body)
    code = assert_contract(status, headers, raw)
    if code is None:
        final = check_stream(raw)[-1]
        code = "finished" if final["type"] == "RUN_FINISHED" else final["code"]
    event("answer: %s" % code)
    assert code in ("finished", "INVALID_INPUT", "EXECUTION_LOST", "RESUME_REQUIRED", "INCOMPLETE_RESUME",
                    "UNKNOWN_INTERRUPT", "RESUME_PAYLOAD_INVALID", "RESUME_ALREADY_APPLIED", "CANCELLED"), code
    assert len(pending.demo.runtime.tool_executions) <= pending.interrupts


@settings(max_examples=200, **PROPERTY_SETTINGS)
@given(body=st.one_of(JSON, st.fixed_dictionaries({}, optional={
    "threadId": IDS, "rosInvocationId": st.one_of(st.just("inv"), IDS), "extra": JSON}), st.fixed_dictionaries({
        "threadId": st.one_of(st.sampled_from(["prop-1", "props-0", "t"]), TEXT), "rosInvocationId": st.just("inv")})),
    execution=st.one_of(TEXT, st.sampled_from(["..", "%2e%2e", "x" * 5000, "\r\nSet-Cookie: x=1"])))
def test_property_cancel_body_never_breaks_the_contract(env, body, execution):
    # An id with "/" is the known routing bug (test_doubled_slashes_are_not_found) and is left out here.
    path = CANCEL_PATH % quote(execution.replace("/", "_"), safe="")
    event("answer: %s" % (assert_contract(*env.call(body, path=path)) or "200"))


@settings(max_examples=150, **PROPERTY_SETTINGS)
@given(raw=st.one_of(st.binary(max_size=200), st.text(max_size=200).map(lambda t: t.encode("utf-8", "surrogatepass"))),
       path=st.sampled_from(["/", CANCEL_PATH % "e1"]),
       content_type=st.sampled_from(["application/json", "application/json; charset=latin-1", "text/plain",
                                     "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", ""]))
def test_property_raw_bytes_never_break_the_contract(env, raw, path, content_type):
    event("answer: %s" % (assert_contract(*env.call(raw, path=path, content_type=content_type)) or "200"))


LATIN1 = st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0xFF, blacklist_characters="\x7f"),
                 max_size=30)


@settings(max_examples=150, **PROPERTY_SETTINGS)
@given(headers=st.fixed_dictionaries({}, optional={
    "Accept-Language": LATIN1, "Authorization": LATIN1, "X-Forwarded-For": LATIN1,
    "Last-Event-ID": st.one_of(st.integers(-5, 10 ** 20).map(str), st.text(alphabet="0123456789 +-.e", max_size=20)),
    "Content-Encoding": st.sampled_from(["gzip", "identity", "br"])}))
def test_property_headers_never_break_the_contract(env, headers):
    code = assert_contract(*env.call(env.body("hello", thread="hdr", run=fresh_run()), headers=headers))
    event("answer: %s" % (code or "200 SSE"))


@pytest.mark.parametrize("path", [CANCEL_PATH % "0%2F", CANCEL_PATH % "%2Fx",
                                  "/extensions//iac-code/v1/executions/e/cancel",
                                  "/extensions/iac-code/v1//executions/e/cancel"])
def test_doubled_slashes_are_not_found(env, path):
    status, headers, body = env.call({"threadId": "t", "rosInvocationId": "i"}, path=path)
    assert assert_contract(status, headers, body) in ("NOT_FOUND", "EXECUTION_NOT_FOUND")


@pytest.mark.parametrize("value", ["\u00b2", "1\u00b3", "\u00b9\u00b9"])
def test_last_event_id_with_superscript_digits_is_invalid_input(env, value):
    status, headers, body = env.call(env.body("hello", thread="lei", run="run-lei"), headers={"Last-Event-ID": value})
    assert assert_contract(status, headers, body) == "INVALID_INPUT"


# ---- sizes -------------------------------------------------------------------------------------------------
def _padded(env: Env, size: int) -> bytes:
    raw = json.dumps(env.body("pad", thread="pad", run=fresh_run())).encode("utf-8")
    return raw[:-1] + b" " * (size - len(raw)) + b"}"


def test_body_at_the_limit_is_accepted_one_byte_over_is_413(env):
    status, headers, body = env.call(_padded(env, SMALL_LIMIT))
    assert status == 200 and assert_contract(status, headers, body) is None
    status, headers, body = env.call(_padded(env, SMALL_LIMIT + 1))
    assert status == 413 and assert_contract(status, headers, body) == "REQUEST_TOO_LARGE"


def test_cancel_body_limit_is_64_kib(big_env):
    raw = json.dumps({"threadId": "t", "rosInvocationId": "i", "pad": "x" * (64 * 1024)}).encode()
    status, headers, body = big_env.call(raw, path=CANCEL_PATH % "e1")
    assert status == 413 and assert_contract(status, headers, body) == "REQUEST_TOO_LARGE"


def _streamed(env: Env, raw: bytes) -> Tuple[int, Dict[str, str], bytes]:
    """POST ``raw`` the way a server that streams a chunked body does: no Content-Length, input terminated."""
    environ = EnvironBuilder(path="/", method="POST", data=raw, content_type="application/json").get_environ()
    environ.pop("CONTENT_LENGTH", None)
    environ["wsgi.input_terminated"] = True
    app_iter, status, headers = env.client.run_wsgi_app(environ, buffered=True)
    return int(status.split()[0]), dict(headers), b"".join(app_iter)


def test_streamed_body_within_the_limit_is_read_whole(env):
    status, headers, body = _streamed(env, _padded(env, SMALL_LIMIT))
    assert status == 200 and assert_contract(status, headers, body) is None


@pytest.mark.parametrize("tail", [b"x" * SMALL_LIMIT, b"  trailing bytes past the limit"])
def test_streamed_body_over_the_limit_is_413(env, tail):
    status, headers, body = _streamed(env, _padded(env, SMALL_LIMIT) + tail)
    assert status == 413 and assert_contract(status, headers, body) == "REQUEST_TOO_LARGE"


Exchange = Tuple[int, Dict[str, str], bytes, str]


def _exchange(port: int, head: bytes, parts: List[bytes], wait: float = 5.0) -> Optional[Exchange]:
    """Send a hand-made request on a raw socket; (status, headers, body, raw header block) or None if unanswered."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=wait)
    try:
        sock.sendall(head + b"".join(parts))
        response = http.client.HTTPResponse(sock)
        try:
            response.begin()
        except socket.timeout:
            return None
        return response.status, dict(response.getheaders()), response.read(), str(response.msg)
    finally:
        sock.close()


def _chunked(payload: bytes, size: int = 8192) -> List[bytes]:
    parts = [b"%x\r\n%s\r\n" % (len(payload[i:i + size]), payload[i:i + size]) for i in range(0, len(payload), size)]
    return parts + [b"0\r\n\r\n"]


def _head(extra: str, method: str = "POST", path: str = "/") -> bytes:
    return ("%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nConnection: close\r\n"
            "Accept-Language: fr\r\n%s\r\n" % (method, path, extra)).encode("latin-1")


def _check_wire(status: int, headers: Dict[str, str], body: bytes) -> Optional[str]:
    for name in headers:
        assert name.lower() in EXPECTED_HEADERS | {"date", "server", "connection", "transfer-encoding"}, name
    return assert_contract(status, {k: v for k, v in headers.items() if k.lower() in EXPECTED_HEADERS}, body)


def test_chunked_and_content_length_bodies_over_the_limit_on_the_wire(adapter_factory):
    adapter = adapter_factory(max_request_bytes=SMALL_LIMIT)
    port = adapter.server.port
    payload = json.dumps(adapter.body("x" * (SMALL_LIMIT * 2), thread="wire")).encode()
    for head, parts in ((_head("Transfer-Encoding: chunked\r\n"), _chunked(payload)),
                        (_head("Content-Length: %d\r\n" % len(payload)), [payload])):
        status, headers, body, _ = _exchange(port, head, parts)
        assert status == 413 and _check_wire(status, headers, body) == "REQUEST_TOO_LARGE"
    small = json.dumps(adapter.body("hello", thread="wire-ok")).encode()
    status, headers, _, _ = _exchange(port, _head("Transfer-Encoding: chunked\r\n"), _chunked(small, 100))
    assert status == 200 and headers["Content-Type"].startswith("text/event-stream")


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_oversized_body_is_refused_without_buffering_it(adapter_factory, framing):
    adapter = adapter_factory(max_request_bytes=SMALL_LIMIT)
    if framing == "content-length":
        head, parts = _head("Content-Length: %d\r\n" % (500 * 1024 * 1024)), [b"{" * 1024]
    else:
        head, parts = _head("Transfer-Encoding: chunked\r\n"), _chunked(b"x" * (SMALL_LIMIT * 8))[:-1]
    answer = _exchange(adapter.server.port, head, parts, wait=2.0)     # the body is never completed
    assert answer is not None, "no answer while the oversized body was still being sent"
    assert answer[0] == 413


# ---- images -------------------------------------------------------------------------------------------------
def _image_body(env: Env, parts: List[Dict[str, Any]], run: str) -> Dict[str, Any]:
    return env.body([{"type": "text", "text": "look"}] + parts, thread="img", run=run)


def _data_image(raw: bytes, mime: str = "image/png", **extra: Any) -> Dict[str, Any]:
    part = {"type": "image", "source": {"type": "data", "mimeType": mime, "value": base64.b64encode(raw).decode()}}
    part.update(extra)
    return part


IMAGE_CASES = [
    ("too large", [_data_image(PNG + b"\0" * (8 * 1024 * 1024))], errors.MSG_IMAGE_TOO_LARGE),
    ("total too large", [_data_image(PNG + b"\0" * (6 * 1024 * 1024)), _data_image(PNG + b"\1" * (6 * 1024 * 1024))],
     errors.MSG_IMAGES_TOO_LARGE),
    ("bad base64", [{"type": "image", "source": {"type": "data", "mimeType": "image/png", "value": "!!not base64"}}],
     errors.MSG_IMAGE_INVALID),
    ("base64 with newlines", [{"type": "image", "source": {"type": "data", "mimeType": "image/png",
                                                           "value": base64.encodebytes(PNG * 8).decode()}}],
     errors.MSG_IMAGE_INVALID),
    ("signature mismatch", [_data_image(b"\xff\xd8\xff" + b"\0" * 16)], errors.MSG_IMAGE_INVALID),
    ("empty image", [_data_image(b"")], errors.MSG_IMAGE_INVALID),
    ("svg", [_data_image(b"<svg/>", "image/svg+xml")], errors.MSG_IMAGE_TYPE),
    ("no mime", [{"type": "image", "source": {"type": "data", "value": base64.b64encode(PNG).decode()}}],
     errors.MSG_IMAGE_TYPE),
    ("value not a string", [{"type": "image", "source": {"type": "data", "mimeType": "image/png", "value": 7}}],
     errors.MSG_IMAGE_INVALID),
    ("remote url", [{"type": "image", "source": {"type": "url", "value": "http://169.254.169.254/"}}],
     errors.MSG_REMOTE_MEDIA),
    ("file url", [{"type": "binary", "mimeType": "image/png", "url": "file:///etc/passwd"}], errors.MSG_REMOTE_MEDIA),
    ("binary not image", [{"type": "binary", "mimeType": "application/pdf", "data": "JVBERi0="}],
     errors.MSG_UNSUPPORTED_CONTENT),
    ("webp too short", [_data_image(b"RIFF\0\0\0\0WEB", "image/webp")], errors.MSG_IMAGE_INVALID),
]


@pytest.mark.parametrize("name,parts,message", IMAGE_CASES, ids=[case[0] for case in IMAGE_CASES])
def test_bad_images_are_invalid_input(big_env, name, parts, message):
    status, headers, body = big_env.call(_image_body(big_env, parts, "run-img-" + name.replace(" ", "-")))
    assert status == 400 and assert_contract(status, headers, body) == "INVALID_INPUT"
    assert json.loads(body)["error"]["message"] == message


@pytest.mark.parametrize("filename", ["../../etc/passwd", "a/b.png", "CON.png", "aux.txt", "nul", "..", "x\x00.png",
                                      "a\\b.png", "\x1b[31m.png", "x" * 300])
def test_hostile_image_filenames_are_replaced(big_env, filename):
    part = _data_image(PNG, metadata={"filename": filename})
    request = inputs.parse_run_request(_image_body(big_env, [part], "run-fn"), big_env.app.settings.allowed_cwds)
    assert request.user_message.parts[1]["data"]["filename"] == "agui-image-1"


def test_oversized_image_body_is_413_before_decoding(env):
    status, headers, body = env.call(_image_body(env, [_data_image(PNG + b"\0" * SMALL_LIMIT)], "run-img-413"))
    assert status == 413 and assert_contract(status, headers, body) == "REQUEST_TOO_LARGE"


# ---- malformed JSON -------------------------------------------------------------------------------------------
NESTED = [
    ("arrays", b"[" * 100000 + b"]" * 100000),
    ("objects", b'{"a":' * 100000 + b"1" + b"}" * 100000),
    ("in envelope", b'{"threadId":"t","runId":"r","state":' + b"[" * 100000 + b"]" * 100000 + b"}"),
]


def call_in_thread(env: Env, data: Any) -> Tuple[int, Dict[str, str], bytes]:
    """Run the request in a fresh thread, as a WSGI server does.

    A RecursionError raised by the C JSON parser leaves CPython 3.11's AST recursion bookkeeping of *that*
    thread inconsistent, which later crashes pytest's assertion rewriting ("AST constructor recursion depth
    mismatch") if it happened in the main thread; a server thread also starts with a shallow stack.
    """
    result: List[Tuple[int, Dict[str, str], bytes]] = []
    worker = threading.Thread(target=lambda: result.append(env.call(data)))
    worker.start()
    worker.join(30)
    assert result, "the request did not complete"
    return result[0]


@pytest.mark.parametrize("name,raw", NESTED, ids=[n for n, _ in NESTED])
def test_deeply_nested_json_is_invalid_json(big_env, name, raw):
    status, headers, body = call_in_thread(big_env, raw)
    assert status == 400 and assert_contract(status, headers, body) == "INVALID_JSON"


@pytest.mark.parametrize("depth", [50, 500, 900])
def test_nesting_below_the_parser_limit_is_handled(big_env, depth):
    for where in ("state", "executionFence"):
        body = big_env.body("hello", thread="nest", run="run-nest-%s-%d" % (where, depth))
        nested: Any = {}
        for _ in range(depth):
            nested = {"n": nested}
        if where == "state":
            body["state"] = nested
        else:
            body["forwardedProps"]["iacCode"]["executionFence"] = nested
        status, headers, content = call_in_thread(big_env, body)
        assert_contract(status, headers, content)
        if depth <= 500:
            assert status == 200, content[:200]


INVALID_UTF8 = [
    ("lone continuation", b'{"threadId": "\x80"}'),
    ("truncated sequence", b'{"threadId": "\xe2\x82"}'),
    ("overlong slash", b'{"threadId": "\xc0\xaf"}'),
    ("encoded surrogate", b'{"threadId": "\xed\xa0\x80"}'),
    ("latin-1 text", '{"threadId": "caf\u00e9"}'.encode("latin-1")),
    ("utf-16", '{"threadId": "t"}'.encode("utf-16")),
    ("bom", b"\xef\xbb\xbf{}"),
    ("nan", b'{"threadId": NaN}'),
    ("trailing garbage", b"{}{}"),
    ("empty", b""),
]


@pytest.mark.parametrize("name,raw", INVALID_UTF8, ids=[n for n, _ in INVALID_UTF8])
def test_invalid_encodings_are_invalid_json(env, name, raw):
    for path in ("/", CANCEL_PATH % "e1"):
        status, headers, body = env.call(raw, path=path)
        assert status == 400 and assert_contract(status, headers, body) == "INVALID_JSON", (path, body)


SURROGATE_CASES = [
    ("threadId", lambda body: body.update(threadId="t-\ud800")),
    ("runId", lambda body: body.update(runId="r-sur-\udc00")),
    ("message text", lambda body: body["messages"][0].update(content="hi \ud83d")),
    ("llmApiKey", lambda body: body["forwardedProps"]["iacCode"].update(llmApiKey="\udfff")),
]


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
@pytest.mark.parametrize("name,mutate", SURROGATE_CASES, ids=[n for n, _ in SURROGATE_CASES])
def test_lone_surrogates_are_refused_up_front(env, name, mutate):
    body = env.body("hello", thread="sur-" + name.replace(" ", "-"), run="r-sur-" + name.replace(" ", "-"))
    mutate(body)
    raw = json.dumps(body).encode("ascii")       # ensure_ascii: the surrogate travels as a \\uXXXX escape
    status, headers, content = env.call(raw)
    for worker in threading.enumerate():         # a crashing worker thread must die inside this test
        if worker.name.startswith("agui-run-") and "sur" in worker.name:
            worker.join(5)
    assert status == 400, (status, content[:300])
    assert assert_contract(status, headers, content) in ("INVALID_JSON", "INVALID_INPUT")


# ---- identifiers ------------------------------------------------------------------------------------------
ID_CASES = ["..", ".", "../escape", "../../../../tmp/owned", "a/b", "a\\b", "/abs/path", "CON", "con", "aux.txt",
            "NUL", "nul.json", "COM1", "LPT9.txt", "thread.", "~", "aguiid~41", "aguihash~00", "Thread", "A" * 200,
            "x" * 1024, "x" * 1025, "x" * 10240, "\x00", "a\x00b", "a\r\nb", "a\nSet-Cookie: x=1", "\u202egnp.exe",
            "é/é", ".lock", "t.run", "t.json", " "]


def _files_under(root: str) -> List[str]:
    found = []
    for directory, _, names in os.walk(root):
        found.extend(os.path.join(directory, name) for name in names)
    return found


@pytest.mark.parametrize("field", ["threadId", "runId"])
def test_hostile_ids_work_or_are_invalid_and_stay_inside_the_state_dir(tmp_path, field):
    env = Env(str(tmp_path))
    try:
        threads_dir = os.path.realpath(os.path.join(env.state_dir, "threads"))
        for index, value in enumerate(ID_CASES):
            body = env.body("hello", thread="ids-%d" % index, run="run-ids-%d" % index)
            body[field] = value
            status, headers, content = env.call(body)
            code = assert_contract(status, headers, content)
            invalid = len(value) > 1024 or any(ord(ch) < 0x20 for ch in value)
            if invalid:
                assert code == "INVALID_INPUT", (value[:40], code)
                continue
            assert status == 200, (value[:40], content[:300])
            thread = value if field == "threadId" else "ids-%d" % index
            path = os.path.realpath(env.app.store.path_for(thread))
            assert os.path.dirname(path) == threads_dir and os.path.isfile(path), (value[:40], path)
            assert env.app.store.load(thread).thread_id == thread
        for path in _files_under(str(tmp_path)):
            real = os.path.realpath(path)
            assert real.startswith(threads_dir + os.sep) or real.startswith(env.workspace + os.sep), real
        assert not os.path.exists(os.path.join(str(tmp_path), "escape"))
        assert not os.path.exists("/tmp/owned")
    finally:
        env.close()


def test_ids_are_never_echoed_into_response_headers_on_the_wire(adapter_factory):
    adapter = adapter_factory()
    injected = "%0D%0ASet-Cookie:%20injected=1%0D%0AX-Injected:%201"
    attempts = [
        ("POST", CANCEL_PATH % injected, json.dumps({"threadId": "t", "rosInvocationId": "i"})),
        ("POST", CANCEL_PATH % "e1", json.dumps({"threadId": "t\r\nX-Injected: 1", "rosInvocationId": "i"})),
        ("POST", "/", json.dumps(adapter.body("hi", thread="t\r\nSet-Cookie: injected=1"))),
        ("POST", "/", json.dumps(adapter.body("hi", run="r\nX-Injected: 1"))),
        ("GET", "/" + injected, ""),
        ("POST", "/?x=" + injected, json.dumps(adapter.body("hi", thread="hdr-ok"))),
    ]
    for method, path, payload in attempts:
        data = payload.encode()
        status, headers, body, block = _exchange(adapter.server.port, _head(
            "Content-Length: %d\r\n" % len(data), method, path), [data])
        assert "injected" not in block.lower() and "set-cookie" not in block.lower(), block
        assert status < 500
        if not headers.get("Content-Type", "").startswith("text/event-stream"):
            _check_wire(status, headers, body)

"""Hostile input: property tests through werkzeug's test client, then explicit edge cases (routes, nesting,
encodings, ids); body sizes, images and raw-socket cases live in ``test_request_sizes.py``.

The contract under test: whatever a client sends, the answer is never a 5xx, never shows a traceback or a
Python repr, and is either a 200 SSE stream or exactly ``{"error":{"code","message"}}`` with the status
declared for that code.  The upstream is a closed loopback port, so an admitted run fails fast with
``A2A_UNAVAILABLE`` and the property tests need no runtime.

Lone UTF-16 surrogates (legal JSON escapes, not Unicode scalar values) are left out of the generated text
on purpose: they are covered by the explicit, currently failing cases below, and including them would
make every property fail on the same known bug.
"""
import base64
import json
import os
import threading
from typing import Any, Dict, Iterator, List, Optional, Tuple
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from iaccode_agui.demo import DemoServer
from tests.agui_checker import check_stream
from tests.hostile_helpers import CANCEL_PATH, PNG, Env, assert_contract, fresh_run
from tests.hostile_helpers import big_env, env  # noqa: F401  (fixtures: pytest finds them by these names)

PROPERTY_SETTINGS = dict(deadline=None, database=None,
                         suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


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
@pytest.mark.slow
@settings(max_examples=300, **PROPERTY_SETTINGS)
@given(data=st.data())
def test_property_run_agent_input_never_breaks_the_contract(env, data):
    body = data.draw(run_inputs(env))
    event("answer: %s" % (assert_contract(*env.call(body)) or "200 SSE"))


@pytest.mark.slow
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
@pytest.mark.slow
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
@pytest.mark.slow
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
    """Up to the depth limit (64) the body is used; deeper is refused before SSE, even below the parser's limit."""
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
        code = assert_contract(status, headers, content)
        if depth <= 60:
            assert status == 200, content[:200]
        else:
            assert (status, code) == (400, "INVALID_JSON"), content[:200]


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
        # Thread files, their journal, run logs and the process registry: every file stays in its own state subdirectory.
        inside = [os.path.realpath(os.path.join(env.state_dir, name)) + os.sep for name in ("threads", "runs",
                                                                                           "processes", "journal")]
        for path in _files_under(str(tmp_path)):
            real = os.path.realpath(path)
            assert any(real.startswith(root) for root in inside) or real.startswith(env.workspace + os.sep), real
        assert not os.path.exists(os.path.join(str(tmp_path), "escape"))
        assert not os.path.exists("/tmp/owned")
    finally:
        env.close()

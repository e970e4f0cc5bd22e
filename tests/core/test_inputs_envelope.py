"""Request validation, the envelope side: body shape, forwarded props, tools, resume entries, digest,
request language, cancel body, and the property that parsing yields a RunRequest or INVALID_INPUT only."""
import copy
import os
import string

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from iaccode_agui import errors
from iaccode_agui.errors import AguiError
from iaccode_agui.web.inputs import (
    RunRequest,
    UserMessage,
    canonical_digest,
    parse_cancel_request,
    parse_run_request,
    request_language,
)
from tests.inputs_helpers import GIF, JPEG, PNG, b64, expect_invalid, make_body, with_content, with_props
from tests.inputs_helpers import root  # noqa: F401  (a fixture: pytest finds it by this module-level name)


# --- happy path ---------------------------------------------------------------------------------------

def test_minimal_request_is_parsed(root):
    request = parse_run_request(make_body(root, parentRunId="run-0"), [root])
    assert isinstance(request, RunRequest)
    assert (request.thread_id, request.run_id, request.parent_run_id) == ("thread-1", "run-1", "run-0")
    assert request.cwd == os.path.join(root, "ws") and os.path.isdir(request.cwd)
    assert request.user_message == UserMessage(message_id="m-1", parts=[{"text": "hello"}])
    assert request.resume is None and not request.is_resume
    assert request.ros_invocation_id == "inv-1"
    assert request.user_id is None and request.run_mode is None
    assert request.props == {"schemaVersion": 1, "rosInvocationId": "inv-1", "cwd": os.path.join(root, "ws")}
    assert len(request.digest) == 64 and request.digest == canonical_digest(make_body(root, parentRunId="run-0"))


def test_every_documented_prop_is_accepted(root):
    full = {
        "model": "m", "llmApiKey": "sk", "llmHeaders": {"X-A": "b"}, "userId": "u-1", "channel": "web",
        "preferredLanguage": "fr", "candidatePresentation": "rich", "runMode": "pipeline", "pipelineName": "selling",
        "cleanupOnly": False, "activeGuidance": True, "executionFence": {"epoch": 3}, "guidanceId": "g",
        "inputDigest": "d", "thinking": {"enabled": True, "effort": "high", "budget": 1},
        "alibabaCloud": {"accessKeyId": "a", "accessKeySecret": "b", "securityToken": "c", "regionId": "cn-hangzhou"},
    }
    request = parse_run_request(with_props(root, **full), [root])
    assert request.user_id == "u-1" and request.run_mode == "pipeline"
    assert request.props["alibabaCloud"]["regionId"] == "cn-hangzhou"


@pytest.mark.parametrize("extra", [
    {"unknownTopLevel": {"kept": True}},
    {"parentRunId": None},
    {"protocolVersion": "1.0"},
    {"resume": None},
    {"state": None},
    {"state": [1, "two"]},
])
def test_envelope_tolerates(root, extra):
    assert parse_run_request(make_body(root, **extra), [root]).user_message is not None


def test_schema_version_float_one_is_integer_valued(root):
    assert parse_run_request(with_props(root, schemaVersion=1.0), [root]).props["schemaVersion"] == 1


# --- body and envelope --------------------------------------------------------------------------------

@pytest.mark.parametrize("body", [None, [], "text", 3, True])
def test_non_object_body(body):
    expect_invalid(body, ["/"], errors.MSG_INVALID_BODY)


def _drop(key):
    return lambda body: body.pop(key)


def _set(key, value):
    return lambda body: body.__setitem__(key, value)


def _message(**message):
    return lambda body: body.__setitem__("messages", [message])


@pytest.mark.parametrize("mutate,path", [
    (_drop("threadId"), "/threadId"),
    (_drop("runId"), "/runId"),
    (_drop("state"), "/state"),
    (_drop("messages"), "/messages"),
    (_drop("tools"), "/tools"),
    (_drop("context"), "/context"),
    (_drop("forwardedProps"), "/forwardedProps"),
    (_set("threadId", ""), "/threadId"),
    (_set("threadId", "t" * 1025), "/threadId"),
    (_set("threadId", "thread\n"), "/threadId"),
    (_set("runId", "run\x7f1"), "/runId"),
    (_set("runId", "run\x851"), "/runId"),
    (_set("runId", 7), "/runId"),
    (_set("parentRunId", 7), "/parentRunId"),
    (_set("protocolVersion", 1), "/protocolVersion"),
    (_set("messages", {}), "/messages"),
    (_set("tools", {}), "/tools"),
    (_set("context", None), "/context"),
    (_set("forwardedProps", None), "/forwardedProps"),
    (_set("forwardedProps", []), "/forwardedProps"),
    (_message(role="user", content="x"), "/messages/0/id"),
    (_message(id=1, role="user", content="x"), "/messages/0/id"),
    (_message(id="m", content="x"), "/messages/0/role"),
    (_message(id="m", role="user"), "/messages/0/content"),
    (_message(id="m", role="user", content=None), "/messages/0/content"),
    (_message(id="m", role="user", content=5), "/messages/0/content"),
    (_message(id="m", role="user", content=["text"]), "/messages/0/content/0"),
    (_message(id="m", role="user", content=[{"text": "no type"}]), "/messages/0/content/0/type"),
    (_message(id="m", role="user", content=[{"type": "text", "text": 3}]), "/messages/0/content/0/text"),
    (_message(id="m", role="user", content=[{"type": "text"}]), "/messages/0/content/0/text"),
])
def test_invalid_envelope(root, mutate, path):
    body = make_body(root)
    mutate(body)
    expect_invalid(body, [root], errors.MSG_INVALID_ENVELOPE, path)


def test_threadid_of_1024_chars_is_accepted(root):
    assert parse_run_request(make_body(root, threadId="t" * 1024), [root]).thread_id == "t" * 1024


def test_envelope_error_is_reported_before_props(root):
    body = make_body(root, threadId="")
    body["forwardedProps"] = {}
    expect_invalid(body, [root], errors.MSG_INVALID_ENVELOPE)


def test_schema_text_never_leaks_secrets(root):
    body = with_props(root, llmApiKey=["sk-very-secret"])
    err = expect_invalid(body, [root], errors.MSG_INVALID_PROPS, "/forwardedProps/iacCode/llmApiKey")
    assert "sk-very-secret" not in str(err) and "sk-very-secret" not in err.field


# --- forwardedProps -------------------------------------------------------------------------------------

def _props(**fields):
    return lambda body: body["forwardedProps"]["iacCode"].update(fields)


def _remove_prop(name):
    return lambda body: body["forwardedProps"]["iacCode"].pop(name)


@pytest.mark.parametrize("mutate,path", [
    (_set("forwardedProps", {}), "/forwardedProps/iacCode"),
    (lambda body: body["forwardedProps"].__setitem__("other", {}), "/forwardedProps/other"),
    (lambda body: body["forwardedProps"].__setitem__("iacCode", "x"), "/forwardedProps/iacCode"),
    (_remove_prop("schemaVersion"), "/forwardedProps/iacCode/schemaVersion"),
    (_remove_prop("rosInvocationId"), "/forwardedProps/iacCode/rosInvocationId"),
    (_remove_prop("cwd"), "/forwardedProps/iacCode/cwd"),
    (_props(unknownKey=1), "/forwardedProps/iacCode/unknownKey"),
    (_props(run_mode="normal"), "/forwardedProps/iacCode/run_mode"),
    (_props(ros_invocation_id="inv-1"), "/forwardedProps/iacCode/ros_invocation_id"),
    (_props(schemaVersion="1"), "/forwardedProps/iacCode/schemaVersion"),
    (_props(schemaVersion=2), "/forwardedProps/iacCode/schemaVersion"),
    (_props(schemaVersion=True), "/forwardedProps/iacCode/schemaVersion"),
    (_props(schemaVersion=1.5), "/forwardedProps/iacCode/schemaVersion"),
    (_props(runMode="fast"), "/forwardedProps/iacCode/runMode"),
    (_props(rosInvocationId="r" * 257), "/forwardedProps/iacCode/rosInvocationId"),
    (_props(rosInvocationId=""), "/forwardedProps/iacCode/rosInvocationId"),
    (_props(rosInvocationId=5), "/forwardedProps/iacCode/rosInvocationId"),
    (_props(cwd=""), "/forwardedProps/iacCode/cwd"),
    (_props(cwd="/tmp/a\x00b"), "/forwardedProps/iacCode/cwd"),
    (_props(model=None), "/forwardedProps/iacCode/model"),
    (_props(llmHeaders={"X-A": 1}), "/forwardedProps/iacCode/llmHeaders/X-A"),
    (_props(llmHeaders=["X-A"]), "/forwardedProps/iacCode/llmHeaders"),
    (_props(thinking={"budget": 0}), "/forwardedProps/iacCode/thinking/budget"),
    (_props(thinking={"budget": "5"}), "/forwardedProps/iacCode/thinking/budget"),
    (_props(thinking={"enabled": "true"}), "/forwardedProps/iacCode/thinking/enabled"),
    (_props(thinking={"enabled": True, "level": 3}), "/forwardedProps/iacCode/thinking/level"),
    (_props(candidatePresentation="fancy"), "/forwardedProps/iacCode/candidatePresentation"),
    (_props(cleanupOnly="false"), "/forwardedProps/iacCode/cleanupOnly"),
    (_props(activeGuidance=1), "/forwardedProps/iacCode/activeGuidance"),
    (_props(executionFence=[]), "/forwardedProps/iacCode/executionFence"),
    (_props(guidanceId=""), "/forwardedProps/iacCode/guidanceId"),
    (_props(inputDigest=""), "/forwardedProps/iacCode/inputDigest"),
    (_props(userId=42), "/forwardedProps/iacCode/userId"),
    (_props(alibabaCloud={"accessKeyId": "a", "endpoint": "x"}), "/forwardedProps/iacCode/alibabaCloud/endpoint"),
    (_props(alibabaCloud={"regionId": 1}), "/forwardedProps/iacCode/alibabaCloud/regionId"),
])
def test_invalid_props(root, mutate, path):
    body = make_body(root)
    mutate(body)
    expect_invalid(body, [root], errors.MSG_INVALID_PROPS, path)


def test_ros_invocation_id_of_256_chars_is_accepted(root):
    assert parse_run_request(with_props(root, rosInvocationId="r" * 256), [root]).ros_invocation_id == "r" * 256


# --- tools --------------------------------------------------------------------------------------------

def test_client_tools_are_refused(root):
    expect_invalid(make_body(root, tools=[{}]), [root], errors.MSG_TOOLS_UNSUPPORTED, "/tools")


def test_props_are_checked_before_tools(root):
    body = with_props(root, runMode="fast")
    body["tools"] = [{"name": "t"}]
    expect_invalid(body, [root], errors.MSG_INVALID_PROPS)


def test_tools_are_checked_before_cwd(root):
    body = with_props(root, cwd="relative")
    body["tools"] = [{"name": "t"}]
    expect_invalid(body, [root], errors.MSG_TOOLS_UNSUPPORTED)


# --- resume -------------------------------------------------------------------------------------------

def test_resume_run_needs_no_user_message(root):
    entries = [
        {"interruptId": "permission-1", "status": "resolved", "payload": {"decision": "allow_once"}},
        {"interruptId": "q-1", "status": "cancelled", "metadata": {"sig": "x"}},
    ]
    request = parse_run_request(make_body(root, messages=[], resume=entries), [root])
    assert request.is_resume and request.resume == entries and request.user_message is None


def test_resume_ignores_messages(root):
    body = with_content(root, [{"type": "audio", "source": {"type": "data", "value": "", "mimeType": "audio/wav"}}])
    body["resume"] = [{"interruptId": "i", "status": "cancelled"}]
    assert parse_run_request(body, [root]).user_message is None


def test_empty_resume_is_a_normal_run(root):
    request = parse_run_request(make_body(root, resume=[]), [root])
    assert request.resume is None and not request.is_resume and request.user_message is not None
    expect_invalid(make_body(root, resume=[], messages=[]), [root], errors.MSG_USER_MESSAGE_REQUIRED)


@pytest.mark.parametrize("resume,path", [
    ("x", "/resume"),
    ({"interruptId": "i", "status": "resolved"}, "/resume"),
    (["i"], "/resume/0"),
    ([{"status": "resolved"}], "/resume/0/interruptId"),
    ([{"interruptId": "", "status": "resolved"}], "/resume/0/interruptId"),
    ([{"interruptId": 3, "status": "resolved"}], "/resume/0/interruptId"),
    ([{"interruptId": "i"}], "/resume/0/status"),
    ([{"interruptId": "i", "status": "done"}], "/resume/0/status"),
    ([{"interruptId": "i", "status": "resolved", "extra": 1}], "/resume/0/extra"),
    ([{"interruptId": "i", "status": "resolved", "metadata": []}], "/resume/0/metadata"),
    ([{"interruptId": "i", "status": "resolved"}, {"interruptId": "j", "status": "resolved", "interrupt_id": "j"}],
     "/resume/1/interrupt_id"),
])
def test_invalid_resume(root, resume, path):
    expect_invalid(make_body(root, resume=resume), [root], errors.MSG_RESUME_INVALID, path)


def test_cwd_checked_before_resume(root):
    body = with_props(root, cwd="relative")
    body["resume"] = "x"
    expect_invalid(body, [root], errors.MSG_CWD_NOT_ABSOLUTE)


# --- digest -------------------------------------------------------------------------------------------

def test_digest_ignores_key_order_and_keeps_non_ascii():
    a = {"b": [1, {"y": "é", "x": "中文"}], "a": None}
    b = {"a": None, "b": [1, {"x": "中文", "y": "é"}]}
    assert canonical_digest(a) == canonical_digest(b)
    import hashlib
    expected = hashlib.sha256('{"a":null,"b":[1,{"x":"中文","y":"é"}]}'.encode("utf-8")).hexdigest()
    assert canonical_digest(a) == expected
    assert canonical_digest({"x": "e"}) != canonical_digest({"x": "é"})


def test_digest_covers_the_whole_body(root):
    first = parse_run_request(make_body(root), [root]).digest
    assert parse_run_request(make_body(root, context=[{"description": "d", "value": "v"}]), [root]).digest != first
    assert parse_run_request(with_props(root, llmApiKey="sk"), [root]).digest != first
    reordered = dict(reversed(list(make_body(root).items())))
    assert parse_run_request(reordered, [root]).digest == first


def test_digest_tolerates_lone_surrogates():
    assert len(canonical_digest({"t": "\ud800"})) == 64


# --- request language ---------------------------------------------------------------------------------

@pytest.mark.parametrize("body,header,expected", [
    ({"forwardedProps": {"iacCode": {"preferredLanguage": "zh-CN"}}}, "fr", "zh"),
    ({"forwardedProps": {"iacCode": {"preferredLanguage": "pt_BR", "schemaVersion": "bad"}}, "threadId": ""},
     None, "pt"),
    ({"forwardedProps": {"iacCode": {"preferredLanguage": "xx"}}}, "de;q=0.5, ja", "ja"),
    ({"forwardedProps": {"iacCode": {"preferredLanguage": 5}}}, "es", "es"),
    ({"forwardedProps": {"iacCode": "fr"}}, None, "en"),
    ({"forwardedProps": ["fr"]}, "de", "de"),
    ([], "fr-CA", "fr"),
    (None, None, "en"),
])
def test_request_language(body, header, expected):
    assert request_language(body, header, "en") == expected


def test_request_language_uses_fallback():
    assert request_language({}, "xx", "de") == "de"


# --- cancel -------------------------------------------------------------------------------------------

def test_cancel_request():
    assert parse_cancel_request({"threadId": "t", "rosInvocationId": "r"}) == ("t", "r")


@pytest.mark.parametrize("body,message,path", [
    (None, errors.MSG_INVALID_BODY, ""),
    (["t"], errors.MSG_INVALID_BODY, ""),
    ({}, errors.MSG_CANCEL_IDENTITY, "/threadId"),
    ({"threadId": "t"}, errors.MSG_CANCEL_IDENTITY, "/rosInvocationId"),
    ({"threadId": "", "rosInvocationId": "r"}, errors.MSG_CANCEL_IDENTITY, "/threadId"),
    ({"threadId": "t", "rosInvocationId": 1}, errors.MSG_CANCEL_IDENTITY, "/rosInvocationId"),
    ({"threadId": "t", "rosInvocationId": "r" * 257}, errors.MSG_CANCEL_IDENTITY, "/rosInvocationId"),
    ({"threadId": "t", "rosInvocationId": "r", "force": True}, errors.MSG_CANCEL_IDENTITY, "/force"),
])
def test_invalid_cancel_request(body, message, path):
    with pytest.raises(AguiError) as info:
        parse_cancel_request(body)
    assert (info.value.code, info.value.message, info.value.field) == ("INVALID_INPUT", message, path)


# --- property: nothing but RunRequest or INVALID_INPUT ------------------------------------------------

_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12)
_json = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=4)
                     | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=20)
_KEYS = ["threadId", "runId", "state", "messages", "tools", "context", "forwardedProps", "resume", "parentRunId"]


def _near_valid(root):
    """Bodies that are mostly valid, so every later validation stage (and success) is reached often."""
    ident = st.text(alphabet=string.ascii_letters + string.digits + "-", min_size=1, max_size=6)
    cwd = st.sampled_from([root, os.path.join(root, "w"), "relative", "/", "~/x", "$HOME", root + "/../x"]) \
        | st.text(alphabet=string.ascii_letters + "/.~$", max_size=10).map(lambda s: os.path.join(root, s))
    source = st.fixed_dictionaries({"type": st.sampled_from(["data", "data", "url", "file"])}, optional={
        "value": st.sampled_from([b64(PNG), b64(JPEG), b64(GIF), "!!", ""]) | _json,
        "mimeType": st.sampled_from(["image/png", "image/jpeg", "image/gif", "text/plain"]) | _json})
    part = st.one_of(
        st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=5)}),
        st.fixed_dictionaries({"type": st.just("image"), "source": source}, optional={"metadata": _json}),
        st.fixed_dictionaries({"type": st.sampled_from(["binary", "audio", "text", "image"])}, optional={
            "text": _json, "source": _json, "mimeType": _json, "data": _json, "url": _json}),
    )
    content = st.one_of(st.text(max_size=5), st.lists(part, min_size=1, max_size=3), _json)
    message = st.fixed_dictionaries({"id": ident, "role": st.sampled_from(["user", "user", "assistant"]),
                                     "content": content})
    optional_props = {"runMode": st.sampled_from(["normal", "pipeline", "fast"]), "thinking": _json,
                      "preferredLanguage": st.text(max_size=5), "llmHeaders": _json, "extra": _json}
    props = st.fixed_dictionaries({"schemaVersion": st.sampled_from([1, 1, 1.0, "1", True]), "rosInvocationId": ident,
                                   "cwd": cwd}, optional=optional_props)
    entry = st.fixed_dictionaries({"interruptId": ident, "status": st.sampled_from(["resolved", "cancelled", "x"])},
                                  optional={"payload": _json, "metadata": _json})
    resume = st.one_of(st.none(), st.lists(entry, max_size=2), _json)
    body = st.fixed_dictionaries({
        "threadId": ident, "runId": ident, "state": _json,
        "messages": st.lists(message, max_size=3), "tools": st.lists(_json, max_size=1) | st.just([]),
        "context": st.just([]), "forwardedProps": st.fixed_dictionaries({"iacCode": props}),
    }, optional={"resume": resume, "parentRunId": st.one_of(ident, st.none(), _json)})
    drop = st.sampled_from([None] * 12 + _KEYS)
    return st.tuples(body, drop).map(lambda pair: {k: v for k, v in pair[0].items() if k != pair[1]})


@pytest.fixture(scope="module")
def prop_root(tmp_path_factory):
    return os.path.realpath(str(tmp_path_factory.mktemp("prop-root")))


def _only_run_or_invalid(body, roots):
    snapshot = copy.deepcopy(body)
    try:
        result = parse_run_request(body, roots)
    except AguiError as err:
        assert err.code == "INVALID_INPUT" and err.message in errors.MESSAGES
        assert isinstance(err.field, str)
    else:
        assert isinstance(result, RunRequest) and result.digest == canonical_digest(snapshot)
        assert (result.user_message is None) == result.is_resume
    assert _same_json(body, snapshot)  # validation must not mutate the caller's body


def _same_json(left, right) -> bool:
    """Structural equality in which NaN equals NaN (``==`` says a bare NaN differs from its own copy)."""
    if isinstance(left, float) and isinstance(right, float) and left != left and right != right:
        return True
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(_same_json(left[key], right[key]) for key in left)
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(_same_json(a, b) for a, b in zip(left, right))
    return type(left) is type(right) and left == right


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=_json)
@example(body=float("nan"))  # a bare NaN is not == to its own copy: the mutation check must still hold
@example(body={"state": [float("nan"), float("inf")]})
def test_arbitrary_json_never_crashes(prop_root, body):
    _only_run_or_invalid(body, [prop_root])


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@pytest.mark.slow
@given(data=st.data())
def test_near_valid_bodies_never_crash(prop_root, data):
    _only_run_or_invalid(data.draw(_near_valid(prop_root)), [prop_root])

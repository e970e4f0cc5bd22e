"""The last loose inputs: nesting depth, duplicate keys, non-finite numbers, content codings, the
message count, and the workspace directory that must not appear for a refused request."""
import json
import os
from typing import Any, Dict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from iaccode_agui.web import jsonbody
from iaccode_agui.errors import AguiError
from tests.hostile_helpers import Env, assert_contract, fresh_run
from tests.hostile_helpers import big_env, env  # noqa: F401  (fixtures: pytest finds them by these names)


def _error(env: Env, data: Any, **kwargs: Any) -> Dict[str, Any]:
    status, headers, body = env.call(data, **kwargs)
    code = assert_contract(status, headers, body)
    return {"status": status, "code": code, "message": json.loads(body)["error"]["message"] if code else None}


def _nested(depth: int, leaf: Any = 1) -> Any:
    value = leaf
    for index in range(depth):
        value = [value] if index % 2 else {"n": value}
    return value


# ---- depth ---------------------------------------------------------------------------------------------
def _tree_depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max([_tree_depth(v) for v in value.values()] or [0])
    if isinstance(value, list):
        return 1 + max([_tree_depth(v) for v in value] or [0])
    return 0


@pytest.mark.parametrize("value", [
    1, "x", [], {}, [[]], {"a": [1, {"b": []}]}, [[], [[[]]], []], _nested(70), _nested(64),
    {"text": "[[[[{{{{", "k": ["]]]]", "\\\"[[", "\\\\"]}, ["\\", "\"", "\\\"", "[\\\\\"[", {"\\[": "]\\"}],
])
def test_nesting_depth_matches_the_parsed_tree(value):
    raw = json.dumps(value).encode("utf-8")
    assert jsonbody.nesting_depth(raw) == _tree_depth(value)


_TEXT = st.text(alphabet='[]{}"\\ab\u00e9', max_size=6)
_JSON = st.recursive(st.none() | st.booleans() | st.integers() | _TEXT,
                     lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_TEXT, inner, max_size=4),
                     max_leaves=30)


@settings(max_examples=300, deadline=None)
@given(_JSON, st.booleans())
def test_nesting_depth_property(value, ascii_only):
    raw = json.dumps(value, ensure_ascii=ascii_only).encode("utf-8")
    assert jsonbody.nesting_depth(raw) == _tree_depth(value)


def test_depth_limit_is_checked_before_parsing():
    jsonbody.loads(json.dumps(_nested(64)).encode(), 64)
    with pytest.raises(AguiError) as caught:
        jsonbody.loads(json.dumps(_nested(65)).encode(), 64)
    assert caught.value.code == "INVALID_JSON" and caught.value.params == {"limit": 64}


def test_content_nested_980_deep_is_400_not_500(big_env):
    raw = json.dumps(big_env.body([{"type": "text", "text": "hi", "extra": "@"}], run=fresh_run())).encode()
    raw = raw.replace(b'"@"', b"[" * 980 + b"]" * 980)
    answer = _error(big_env, raw)
    assert (answer["status"], answer["code"]) == (400, "INVALID_JSON")
    assert "64" in answer["message"]


def test_deep_execution_fence_is_refused_before_sse_and_keeps_the_run_id(big_env):
    run = fresh_run()
    body = big_env.body("hello", thread="deep", run=run, executionFence=_nested(500))
    assert _error(big_env, body)["code"] == "INVALID_JSON"
    status, _, _ = big_env.call(big_env.body("hello", thread="deep", run=run))
    assert status == 200          # the refused request did not consume the run id


def test_deep_but_allowed_content_is_a_clean_400(big_env):
    """At the limit, the schema still validates the user message: a 400 with a pointer, never a 500."""
    content = [{"type": "text", "text": _nested(59)}]      # 5 levels of envelope + 59 = 64
    answer = _error(big_env, big_env.body(content, run=fresh_run()))
    assert (answer["status"], answer["code"]) == (400, "INVALID_INPUT")


def test_depth_limit_is_a_setting(tmp_path):
    small = Env(str(tmp_path), max_json_depth=8)
    try:
        body = small.body("hello", run=fresh_run(), executionFence=_nested(6))
        assert _error(small, body)["code"] == "INVALID_JSON"       # 3 levels of envelope + 6 > 8
        assert _error(small, small.body("hello", run=fresh_run()))["code"] is None
    finally:
        small.close()


# ---- duplicate keys and numbers --------------------------------------------------------------------------
def _raw_body(env: Env, iac_extra: str = "", top_extra: str = "") -> bytes:
    return ('{"threadId":"dup","runId":"%s","state":{},"tools":[],"context":[],%s'
            '"messages":[{"id":"m1","role":"user","content":"hi"}],'
            '"forwardedProps":{"iacCode":{"schemaVersion":1,"rosInvocationId":"inv",%s"cwd":%s}}}'
            % (fresh_run(), top_extra, iac_extra, json.dumps(env.workspace))).encode()


def test_duplicate_cwd_is_invalid_json(env):
    answer = _error(env, _raw_body(env, iac_extra='"cwd":"/etc",'))
    assert (answer["status"], answer["code"]) == (400, "INVALID_JSON")
    assert "key" in answer["message"]


@pytest.mark.parametrize("extra", ['"x2":{"a":1,"a":1},', '"x":[{"k":1,"k":2}],', '"threadId":"other",'])
def test_duplicate_keys_anywhere_are_invalid_json(env, extra):
    assert _error(env, _raw_body(env, top_extra=extra))["code"] == "INVALID_JSON"


def test_the_raw_body_without_duplicates_is_accepted(env):
    assert _error(env, _raw_body(env))["code"] is None


@pytest.mark.parametrize("number", ["1e400", "-1e400", "NaN", "Infinity", "-Infinity", "1.5e99999"])
def test_non_finite_numbers_are_invalid_json(env, number):
    answer = _error(env, _raw_body(env, top_extra='"extra":{"n":%s},' % number))
    assert (answer["status"], answer["code"]) == (400, "INVALID_JSON")
    assert "finite" in answer["message"]


def test_large_finite_numbers_are_accepted(env):
    assert _error(env, _raw_body(env, top_extra='"extra":{"n":1e308,"m":-2.5e-300},'))["code"] is None


# ---- content coding ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("coding,shown", [("gzip", "gzip"), ("GZIP", "gzip"), ("identity, br", "br"),
                                          ("deflate", "deflate"), ("x\x7fy", "?"), ("a" * 80, "?")])
def test_content_coding_other_than_identity_is_415(env, coding, shown):
    answer = _error(env, env.body("hello", run=fresh_run()), headers={"Content-Encoding": coding})
    assert (answer["status"], answer["code"]) == (415, "UNSUPPORTED_MEDIA_TYPE")
    assert "Content-Encoding %s " % shown in answer["message"]


def test_identity_coding_is_accepted_and_the_message_is_translated(env):
    assert _error(env, env.body("hello", run=fresh_run()), headers={"Content-Encoding": "identity"})["code"] is None
    answer = _error(env, env.body("hello", run=fresh_run()),
                    headers={"Content-Encoding": "gzip", "Accept-Language": "fr"})
    assert answer["message"] == "Content-Encoding gzip n’est pas pris en charge ; envoyez le corps non compressé."


def test_cancel_route_refuses_codings_too(env):
    answer = _error(env, {"threadId": "t", "rosInvocationId": "i"}, headers={"Content-Encoding": "gzip"},
                    path="/extensions/iac-code/v1/executions/e1/cancel")
    assert answer["status"] == 415


# ---- the workspace is created only after validation -----------------------------------------------------
@pytest.mark.parametrize("spoil", ["no user message", "tools", "bad resume", "bad content", "history"])
def test_refused_request_creates_no_workspace(env, spoil):
    cwd = os.path.join(env.workspace, "never-" + spoil.replace(" ", "-"))
    body = env.body("hello", run=fresh_run(), cwd=cwd)
    if spoil == "no user message":
        body["messages"] = [{"id": "a1", "role": "assistant", "content": "hi"}]
    elif spoil == "tools":
        body["tools"] = [{"name": "t"}]
    elif spoil == "bad resume":
        body["resume"] = [{"interruptId": "", "status": "resolved"}]
    elif spoil == "bad content":
        body["messages"][0]["content"] = [{"type": "text"}]
    else:
        body["messages"].insert(0, {"id": 5, "role": "user"})
    assert _error(env, body)["status"] == 400
    assert not os.path.lexists(cwd)


def test_accepted_request_creates_the_workspace(env):
    cwd = os.path.join(env.workspace, "made-on-accept")
    assert _error(env, env.body("hello", thread="made", run=fresh_run(), cwd=cwd))["code"] is None
    assert os.path.isdir(cwd)


# ---- message count and shallow history --------------------------------------------------------------------
def _with_history(env: Env, count: int) -> Dict[str, Any]:
    body = env.body("hello", run=fresh_run())
    history = [{"id": "h%d" % i, "role": "assistant", "content": ""} for i in range(count - 1)]
    body["messages"] = history + body["messages"]
    return body


def test_message_count_cap_is_413_naming_the_cap(big_env):
    answer = _error(big_env, _with_history(big_env, 10001))
    assert (answer["status"], answer["code"]) == (413, "REQUEST_TOO_LARGE")
    assert "10000" in answer["message"]
    assert _error(big_env, _with_history(big_env, 10000))["code"] is None


def test_message_count_cap_is_a_setting(tmp_path):
    small = Env(str(tmp_path), max_messages=3)
    try:
        assert _error(small, _with_history(small, 3))["code"] is None
        answer = _error(small, _with_history(small, 4), headers={"Accept-Language": "de"})
        assert answer["message"] == "Die Anfrage enthält mehr als 3 Nachrichten."
    finally:
        small.close()


def test_history_is_checked_shallowly(env):
    body = env.body("hello", run=fresh_run())
    body["messages"].insert(0, {"id": "old", "role": "user", "content": [{"type": "video", "deep": [1, 2]}]})
    assert _error(env, body)["code"] is None      # only the newest user message is used, so only it is checked
    body = env.body("hello", run=fresh_run())
    body["messages"].insert(0, {"id": "old"})
    status, headers, raw = env.call(body)
    assert status == 400 and assert_contract(status, headers, raw) == "INVALID_INPUT"


# ---- settings ------------------------------------------------------------------------------------------------
def test_limits_come_from_flags_then_environment(tmp_path):
    from iaccode_agui.server import cli
    from iaccode_agui.config import ConfigError

    def settings(argv, env):
        args = cli.build_parser().parse_args(argv + ["--state-dir", str(tmp_path)])
        return cli.settings_from(args, env, "http://127.0.0.1:1/", None)

    default = settings([], {})
    assert (default.max_json_depth, default.max_messages) == (64, 10000)
    env = {"IAC_CODE_AGUI_MAX_JSON_DEPTH": "20", "IAC_CODE_AGUI_MAX_MESSAGES": "50"}
    assert (settings([], env).max_json_depth, settings([], env).max_messages) == (20, 50)
    assert settings(["--max-messages", "7"], env).max_messages == 7
    for bad in ({"IAC_CODE_AGUI_MAX_MESSAGES": "many"}, {"IAC_CODE_AGUI_MAX_JSON_DEPTH": "0"}):
        with pytest.raises(ConfigError):
            settings([], bad)

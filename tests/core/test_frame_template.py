"""Frames read from a template (the bytes around the text of an earlier frame) give what parsing gives.

Each stream is read twice, by ``A2AStream`` (templates on) and by the frame-by-frame reference that parses
every frame with the stream's whole rule, and both must yield the same results, errors and frame counts;
other tests check that templates are actually used, that they stop being built on a stream where they
never serve, and that no two results share a container a consumer could change.
"""
import copy
import json
import random
from typing import Any, Dict, List

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from iaccode_agui.a2a import frametemplate
from iaccode_agui.a2a import call as stream_module
from iaccode_agui.a2a.call import A2AStream
from tests.core.test_hot_path import _outcome, _Resp
from tests.core.test_projection_run import capture_streams

TASK = "task-1"
MESSAGE = "task-1-message"


def text_frame(text: Any, *, message_id: str = MESSAGE, rpc_id: str = "rpc-1", compact: bool = False,
               ensure_ascii: bool = True, **status: Any) -> bytes:
    body = {"result": {"statusUpdate": {
        "taskId": TASK, "contextId": "ctx-1",
        "status": dict({"state": "TASK_STATE_WORKING", "message": {
            "messageId": message_id, "contextId": "ctx-1", "taskId": TASK, "role": "ROLE_AGENT",
            "parts": [{"text": text}]}}, **status),
        "metadata": {"iac_code": {"iacCodeSessionId": "s-1"}}}}, "id": rpc_id, "jsonrpc": "2.0"}
    separators = (",", ":") if compact else None
    data = json.dumps(body, separators=separators, ensure_ascii=ensure_ascii)
    return b"data: " + data.encode("utf-8", "backslashreplace") + b"\n\n"   # a lone surrogate as its escape


def raw(data: str) -> bytes:
    return b"data: " + data.encode("utf-8", "surrogatepass") + b"\n\n"


TRICKY_TEXTS = [
    "plain ", "", "\"", "\\", "\\\"", "a\"b\\c", "\n\r\t", "\x00\x01\x1f", "\u2028\u2029", "é ü 中文 😀",
    "\ud800", "\udfff", "text", "ROLE_AGENT", MESSAGE, TASK, "rpc-1", "parts", "\x01", "\x02", "}]}}",
    '", "text": "x', "\\u0041", " " * 300,
]


def _same(body: bytes, size: int = 65536) -> Any:
    fast = _outcome(body, size, False)
    assert fast == _outcome(body, size, True)
    return fast


@pytest.mark.parametrize("ensure_ascii", [True, False])
@pytest.mark.parametrize("compact", [True, False])
@pytest.mark.parametrize("size", [9, 65536])
def test_tricky_texts_read_as_parsing_reads_them(ensure_ascii, compact, size):
    body = b"".join(text_frame(text, compact=compact, ensure_ascii=ensure_ascii)
                    for text in ["first "] + TRICKY_TEXTS + TRICKY_TEXTS[::-1])
    results, error, frames = _same(body, size)
    assert error is None and frames == 1 + 2 * len(TRICKY_TEXTS)
    texts = [r["statusUpdate"]["status"]["message"]["parts"][0]["text"] for r in results]
    assert texts == ["first "] + TRICKY_TEXTS + TRICKY_TEXTS[::-1]


def _template_of(text: str = "first ") -> str:
    return text_frame(text)[6:-2].decode("utf-8")


NEAR_MISSES = [
    # The same bytes around something that is not one string token, or around more than the text.
    lambda t: t.replace('"text": "first "', '"text": 7'),
    lambda t: t.replace('"text": "first "', '"text": "a" "b"'),
    lambda t: t.replace('"text": "first "', '"text": "a", "extra": "b"'),
    lambda t: t.replace('"text": "first "', '"text": "a"}, {"text": "b"'),
    lambda t: t.replace('"text": "first "', '"text": "\x07"'),           # a raw control character: not JSON
    lambda t: t.replace('"text": "first "', '"text": "\\x41"'),          # not a JSON escape
    lambda t: t.replace('"text": "first "', '"text": "a\\"'),            # unterminated
    lambda t: t.replace('"text": "first "', '"text": null'),
    lambda t: t + " ",
    lambda t: " " + t,
    lambda t: t.replace('"id": "rpc-1"', '"id": "rpc-2"'),
    lambda t: t.replace('"jsonrpc": "2.0"}', '"jsonrpc": "2.0", "error": {"code": 1, "message": "x"}}'),
    lambda t: t.replace('"role": "ROLE_AGENT"', '"role": "ROLE_USER"'),
    lambda t: t.replace('"parts": [{"text": "first "}]', '"parts": [{"text": "first "}, {"text": "b"}]'),
    lambda t: t[:-1],
]


@pytest.mark.parametrize("miss", range(len(NEAR_MISSES)))
def test_frames_that_only_look_like_the_template_are_parsed(miss):
    template = _template_of()
    body = text_frame("first ") + text_frame("second ") + raw(NEAR_MISSES[miss](template)) + text_frame("third ")
    _same(body)
    _same(body, 5)


def test_a_text_equal_to_another_field_or_key_finds_its_own_slot():
    for text in ["text", MESSAGE, "ROLE_AGENT", "TASK_STATE_WORKING", "2.0", "rpc-1", "s-1", "parts"]:
        data = _template_of(text)
        body = json.loads(data)
        template = frametemplate.build(data, body, json.loads)
        assert template is not None, text
        assert template.match(_template_of(text).replace('"text": "%s"' % text, '"text": "new"')) == \
            json.loads(_template_of("new"))["result"]


def test_duplicate_keys_take_the_slot_that_counts():
    data = _template_of().replace('{"text": "first "}', '{"text": "first ", "text": "first "}')
    body = json.loads(data)
    template = frametemplate.build(data, body, json.loads)
    assert template is not None
    later = data.replace('"text": "first "}', '"text": "later"}')
    assert template.match(later) == json.loads(later)["result"]
    earlier = data.replace('{"text": "first ",', '{"text": "other",')
    assert template.match(earlier) is None       # the first of two equal keys is not the text's slot
    _same(raw(data) + raw(later) + raw(earlier) + raw(later))


def test_no_template_for_a_frame_without_one_text_part():
    for result in [{"statusUpdate": {"status": {"state": "x"}}},
                   {"statusUpdate": {"status": {"message": {"parts": [{"text": "a"}, {"text": "b"}]}}}},
                   {"statusUpdate": {"status": {"message": {"parts": [{"data": {}}]}}}},
                   {"statusUpdate": {"status": {"message": {"parts": [{"text": 1}]}}}},
                   {"statusUpdate": {"status": "odd"}}, {"task": {}}]:
        body = {"result": result, "id": "rpc-1"}
        assert frametemplate.build(json.dumps(body), body, json.loads) is None


@settings(max_examples=150, deadline=None)
@given(st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12), min_size=1, max_size=12),
       st.booleans(), st.sampled_from([1, 17, 65536]))
def test_generated_texts_read_as_parsing_reads_them(texts, ensure_ascii, size):
    body = b"".join(text_frame(text, ensure_ascii=ensure_ascii) for text in texts)
    _same(body, size)


def test_generated_streams_of_messages_and_odd_frames_read_as_parsing_reads_them():
    rng = random.Random(15)
    kinds = [lambda: text_frame(rng.choice(TRICKY_TEXTS)),
             lambda: text_frame("m2 ", message_id="other-message"),
             lambda: text_frame("stamped ", timestamp="2026-01-01T00:00:%02dZ" % rng.randrange(60)),
             lambda: text_frame("wrong call ", rpc_id="rpc-9"),
             lambda: raw(rng.choice(NEAR_MISSES)(_template_of())),
             lambda: b"data: {\"result\": {\"statusUpdate\": {\"n\": 1}}, \"id\": \"rpc-1\"}\n\n",
             lambda: b": ping\n\n"]
    for _ in range(150):
        frames = [rng.choice(kinds)() if rng.random() < 0.3 else text_frame("t%d " % rng.randrange(9))
                  for _ in range(rng.randrange(1, 40))]
        _same(b"".join(frames), rng.choice([3, 64, 65536]))


class _Counting:
    def __init__(self, monkeypatch: Any) -> None:
        self.scans = 0
        self.builds = 0
        scan, build = stream_module._scan, frametemplate.build

        def counted_scan(*args: Any) -> Any:
            self.scans += 1
            return scan(*args)

        def counted_build(*args: Any) -> Any:
            self.builds += 1
            return build(*args)

        monkeypatch.setattr(stream_module, "_scan", counted_scan)
        monkeypatch.setattr(frametemplate, "build", counted_build)


def _read(body: bytes) -> List[Dict[str, Any]]:
    return list(A2AStream(_Resp(body, 65536), "rpc-1", "SendStreamingMessage"))


def test_a_streamed_answer_is_parsed_once_per_message(monkeypatch):
    counting = _Counting(monkeypatch)
    body = b"".join(text_frame("w%d " % i) for i in range(500)) \
        + b"".join(text_frame("v%d " % i, message_id="second") for i in range(500))
    assert len(_read(body)) == 1000
    assert counting.scans == 2 and counting.builds == 2


def test_a_stream_whose_frames_never_repeat_stops_building_templates(monkeypatch):
    counting = _Counting(monkeypatch)
    body = b"".join(text_frame("w ", timestamp="2026-01-01T00:%02d:%02dZ" % divmod(i, 60)) for i in range(3000))
    assert len(_read(body)) == 3000
    assert counting.scans == 3000
    assert counting.builds <= 14      # 1 + 2 + 4 + ... frames apart, not one per frame


def test_results_share_no_container_on_the_path_to_the_text():
    results = _read(b"".join(text_frame("w%d " % i) for i in range(3)))
    first, second = results[1], results[2]
    for path in [(), ("statusUpdate",), ("statusUpdate", "status"), ("statusUpdate", "status", "message"),
                 ("statusUpdate", "status", "message", "parts"), ("statusUpdate", "status", "message", "parts", 0)]:
        a, b = first, second
        for key in path:
            a, b = a[key], b[key]
        assert a is not b, path
    before = copy.deepcopy(second)
    first["statusUpdate"]["status"]["message"]["parts"][0]["text"] = "changed"
    first["statusUpdate"]["status"]["message"]["parts"].append({"text": "more"})
    assert second == before


@pytest.mark.parametrize("name", ["normal_turn", "bash_permission_deny", "write_permission_allow_once",
                                  "cancel_task"])
def test_recorded_real_runtime_streams_read_as_parsing_reads_them(name, monkeypatch):
    for _, frames in capture_streams(name):
        body = b"".join(raw(json.dumps({"jsonrpc": "2.0", "id": "rpc-1", "result": frame})) for frame in frames)
        _same(body)
        _same(body, 11)

"""SSE codec: decoding must not depend on where the network splits the bytes."""
import json
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from iaccode_agui.sse.codec import (
    HEARTBEAT,
    SSEDecodeError,
    SSEDecoder,
    SSEEvent,
    encode_comment,
    encode_event,
    encode_json_event,
)

# Frames as captured from an A2A 1.0 runtime (the A2A 1.0 SDK server's framing): CRLF line ends, one JSON-RPC
# response per event, a keep-alive comment, then an error event.
_RESULTS = [
    {"task": {"id": "bf03b51c-d05a-4378-8008-2ab87d6407f4", "contextId": "df2ee882-e0e1-4b77-95ce-019d4657f533",
              "status": {"state": "TASK_STATE_SUBMITTED"}}},
    {"statusUpdate": {"taskId": "bf03b51c-d05a-4378-8008-2ab87d6407f4", "status": {
        "state": "TASK_STATE_WORKING", "message": {"role": "ROLE_AGENT", "parts": [
            {"text": "思考中：先读取文件", "metadata": {"kind": "thought"}}]}}, "metadata": {"statusMeta": "x"}}},
    {"artifactUpdate": {"taskId": "bf03b51c-d05a-4378-8008-2ab87d6407f4", "artifact": {
        "artifactId": "art-1", "name": "out.txt", "parts": [{"text": "chunk-1 "}]}}},
    {"artifactUpdate": {"taskId": "bf03b51c-d05a-4378-8008-2ab87d6407f4", "artifact": {
        "artifactId": "art-1", "parts": [{"text": "chunk-2"}]}, "append": True, "lastChunk": True}},
    {"statusUpdate": {"taskId": "bf03b51c-d05a-4378-8008-2ab87d6407f4", "status": {
        "state": "TASK_STATE_INPUT_REQUIRED", "timestamp": "2026-11-30T11:20:06.619097Z"}}},
]
_ERROR = {"error": {"code": -32603, "message": "boom ✗"}, "id": 1, "jsonrpc": "2.0"}


def _capture() -> bytes:
    out = []
    for i, result in enumerate(_RESULTS):
        frame = {"result": result, "id": 1, "jsonrpc": "2.0"}
        out.append("data: %s\r\n\r\n" % json.dumps(frame, ensure_ascii=False))
        if i == 2:
            out.append(": ping - 2026-11-30 11:21:46.039076+00:00\r\n\r\n")
    out.append("event: error\r\ndata: %s\r\n\r\n" % json.dumps(_ERROR, ensure_ascii=False))
    return "".join(out).encode("utf-8")


CAPTURE = _capture()


def _feed_split(data: bytes, size: int, decoder: SSEDecoder = None):
    decoder = decoder or SSEDecoder()
    events = []
    for i in range(0, len(data), size):
        events.extend(decoder.feed(data[i:i + size]))
    return events, decoder


def _check_capture(events, decoder):
    assert [e.event for e in events] == ["message"] * len(_RESULTS) + ["error"]
    assert [json.loads(e.data)["result"] for e in events[:-1]] == _RESULTS
    assert json.loads(events[-1].data) == _ERROR
    assert all(e.id is None for e in events)
    assert decoder.comments == 1
    assert not decoder.has_pending


@pytest.mark.parametrize("size", [1, 2, 3, 7, 64, len(CAPTURE)])
def test_capture_fed_in_pieces(size):
    events, decoder = _feed_split(CAPTURE, size)
    _check_capture(events, decoder)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(CAPTURE)), max_size=40))
def test_capture_any_split_points(cuts):
    points = sorted(set(cuts))
    decoder = SSEDecoder()
    events = []
    start = 0
    for point in points + [len(CAPTURE)]:
        events.extend(decoder.feed(CAPTURE[start:point]))
        start = point
    _check_capture(events, decoder)


def test_crlf_split_between_chunks_is_one_line_end():
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\r") == []
    # The LF completes the CR above; if it counted as a second line end, "a" would be dispatched here.
    assert decoder.feed(b"\ndata: b\r") == []
    assert decoder.feed(b"\n\r") == [SSEEvent("message", "a\nb", None)]
    assert decoder.feed(b"\n") == []  # LF after a CR that already ended the blank line: nothing new
    assert decoder.feed(b"data: c\n\n") == [SSEEvent("message", "c", None)]


def test_lone_cr_and_lone_lf_line_ends():
    assert SSEDecoder().feed(b"data: x\rdata: y\r\r") == [SSEEvent("message", "x\ny", None)]
    assert SSEDecoder().feed(b"data: x\ndata: y\n\n") == [SSEEvent("message", "x\ny", None)]
    assert SSEDecoder().feed(b"data: x\r\rdata: y\n\n") == [
        SSEEvent("message", "x", None), SSEEvent("message", "y", None)]


def test_comments_are_counted_not_dispatched():
    decoder = SSEDecoder()
    assert decoder.feed(b": ping\r\n\r\n:\r\n\r\n") == []
    assert decoder.comments == 2
    assert decoder.feed(HEARTBEAT) == []
    assert decoder.comments == 3


def test_field_parsing_rules():
    decoder = SSEDecoder()
    events = decoder.feed(
        b"data:no-space\n"        # the space after the colon is optional
        b"data:  two spaces\n"    # only one space is stripped
        b"data\n"                 # a field name alone means an empty value
        b"unknown: ignored\n"
        b"retry: 1500\n"
        b"\n"
    )
    assert events == [SSEEvent("message", "no-space\n two spaces\n", None)]
    assert decoder.retry == 1500


def test_event_and_id_fields():
    decoder = SSEDecoder()
    events = decoder.feed(b"id: 7\nevent: error\ndata: {}\n\ndata: next\n\nid: 8\x00x\ndata: z\n\n")
    assert events == [
        SSEEvent("error", "{}", "7"),
        # the event type resets after each event; the last event id persists; an id with NUL is ignored
        SSEEvent("message", "next", "7"),
        SSEEvent("message", "z", "7"),
    ]


def test_blank_line_without_data_dispatches_nothing():
    decoder = SSEDecoder()
    assert decoder.feed(b"\r\n\r\nevent: error\r\n\r\n") == []
    assert decoder.feed(b"data: after\r\n\r\n") == [SSEEvent("message", "after", None)]


def test_utf8_split_across_chunks():
    text = "你好，世界"
    data = ("data: %s\r\n\r\n" % text).encode("utf-8")
    for size in (1, 2, 4):
        events, _ = _feed_split(data, size)
        assert events == [SSEEvent("message", text, None)]


def test_leading_bom_is_dropped_once():
    events, _ = _feed_split(b"\xef\xbb\xbfdata: a\n\n\xef\xbb\xbfdata: b\n\n", 1)
    # Only the stream's first BOM is a BOM; later it is part of a field name and the line is ignored.
    assert events == [SSEEvent("message", "a", None)]


def test_invalid_utf8_raises():
    decoder = SSEDecoder()
    assert decoder.feed(b"data: \xff\xfe") == []  # not judged until the line is complete
    with pytest.raises(SSEDecodeError):
        decoder.feed(b"\n\n")


def test_oversize_line_raises_without_line_end():
    decoder = SSEDecoder(max_line_bytes=100)
    decoder.feed(b"data: " + b"x" * 90)
    with pytest.raises(SSEDecodeError):
        decoder.feed(b"y" * 20)


def test_oversize_complete_line_raises():
    decoder = SSEDecoder(max_line_bytes=100)
    with pytest.raises(SSEDecodeError):
        decoder.feed(b"data: " + b"x" * 200 + b"\n\n")
    ok = SSEDecoder(max_line_bytes=100)
    assert ok.feed(b"data: " + b"x" * 90 + b"\n" + b"data: " + b"y" * 90 + b"\n\n")[0].data.count("x") == 90


def test_unterminated_event_is_discarded_at_close():
    decoder = SSEDecoder()
    assert decoder.feed(b"data: complete\n\ndata: half") == [SSEEvent("message", "complete", None)]
    assert decoder.has_pending
    assert decoder.close() == []
    assert not decoder.has_pending
    # A data line that ended but whose blank line never came is also discarded.
    decoder = SSEDecoder()
    assert decoder.feed(b"data: nearly\n") == []
    assert decoder.has_pending
    assert decoder.close() == []


def test_long_line_in_many_small_reads_is_linear():
    # 4 MiB in 1 KiB reads: re-joining the tail on every read copies ~8 GiB (seconds); appending, milliseconds.
    payload = b"x" * (4 * 1024 * 1024)
    data = b"data: " + payload + b"\n\n"
    started = time.perf_counter()
    events, _ = _feed_split(data, 1024)
    assert time.perf_counter() - started < 1.5
    assert len(events) == 1 and len(events[0].data) == len(payload)


def test_encode_event_shape():
    assert encode_event('{"a":1}', 3) == b'id: 3\ndata: {"a":1}\n\n'
    assert encode_event("x") == b"data: x\n\n"
    assert encode_event("a\r\nb\rc\nd") == b"data: a\ndata: b\ndata: c\ndata: d\n\n"
    assert encode_event("{}", event="error") == b"event: error\ndata: {}\n\n"
    with pytest.raises(ValueError):
        encode_event("{}", event="bad\nname")
    assert encode_comment("heartbeat") == HEARTBEAT
    assert encode_comment("a\nb") == b": a\n: b\n\n"


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.text(), st.one_of(st.none(), st.integers(min_value=0, max_value=10 ** 12))),
             min_size=1, max_size=5),
    st.integers(min_value=1, max_value=9),
)
@pytest.mark.slow
def test_encoder_round_trips_through_decoder(items, size):
    wire = b"".join(encode_comment("k") + encode_event(text, eid) for text, eid in items)
    events, decoder = _feed_split(wire, size)
    last_id = None
    expected = []
    for text, eid in items:
        if eid is not None:
            last_id = str(eid)
        expected.append(SSEEvent("message", text.replace("\r\n", "\n").replace("\r", "\n"), last_id))
    assert events == expected
    assert decoder.comments == len(items)


def _reference_events(text: str):
    """The SSE dispatch rules applied one line at a time, the plainest way (no fast path)."""
    if text.startswith("\ufeff"):
        text = text[1:]
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    lines = text.split("\n")
    lines.pop()  # the unterminated tail is not a line yet
    events, data, event, last_id = [], [], "", None
    for line in lines:
        if not line:
            if data:
                events.append(SSEEvent(event or "message", "\n".join(data), last_id))
            data, event = [], ""
            continue
        if line[0] == ":":
            continue
        field, sep, value = line.partition(":")
        if sep and value[:1] == " ":
            value = value[1:]
        if field == "data":
            data.append(value)
        elif field == "event":
            event = value
        elif field == "id" and "\x00" not in value:
            last_id = value
    return events


_SSE_LINES = st.one_of(st.just(""), st.sampled_from([
    "data: x", "data: {\"a\": 1}", "data:y", "data", "data: ", ": ping", "event: error", "event:", "id: 7", "id: 8",
    "id", "retry: 5", "other: z", "data: é 字", "\ufeffdata: bom"]))


@settings(max_examples=1000, deadline=None)
@given(st.lists(_SSE_LINES, max_size=30), st.sampled_from(["\n", "\r\n", "\r"]),
       st.lists(st.integers(min_value=0, max_value=400), max_size=8))
@pytest.mark.slow
def test_decoder_matches_line_by_line_rules(lines, newline, cuts):
    text = "".join(line + newline for line in lines)
    if newline == "\r" and lines:
        text += "x"   # a final lone CR is only a line end once the next byte shows it is not CRLF
    raw = text.encode("utf-8")
    decoder, events, start = SSEDecoder(), [], 0
    for cut in sorted(min(c, len(raw)) for c in cuts) + [len(raw)]:
        events.extend(decoder.feed(raw[start:cut]))
        start = cut
    assert events == _reference_events(text)


@settings(max_examples=200, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
                    max_leaves=12),
       st.integers(min_value=0, max_value=10 ** 12))
def test_json_event_is_the_compact_encoding_on_one_line(value, event_id):
    event = {"type": "CUSTOM", "value": value, "text": "a\r\nb\u2028c"}
    frame = encode_json_event(event, event_id)
    expected = json.dumps(event, separators=(",", ":"), ensure_ascii=False)
    assert frame == ("id: %d\ndata: %s\n\n" % (event_id, expected)).encode("utf-8")
    decoded = SSEDecoder().feed(frame)
    assert [json.loads(e.data) for e in decoded] == [json.loads(expected)]
    assert decoded[0].id == str(event_id)


def test_json_event_refuses_what_json_refuses():
    with pytest.raises(TypeError):
        encode_json_event({"type": "CUSTOM", "value": object()}, 1)
    with pytest.raises(TypeError):
        encode_json_event({"type": "CUSTOM", "value": {1j: 2}}, 1)

"""The per-event shortcuts give exactly what the general code gives.

Three places take a shortcut for the frame nearly every event of a stream is (a text delta of an open
message): the SSE encoder fills a preformatted frame, the A2A stream answers the common frame without its
general rule, and the projection answers a delta of an open message without its general rules.  Each test
runs the shortcut and the general path over the same input and compares the results byte for byte (or
value for value, exceptions included), over tables of awkward cases and over generated ones.
"""
import copy
import json
import random
from typing import Any, Callable, Dict, List, Optional, Tuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from iaccode_agui.sse import codec as sse
from iaccode_agui.a2a.failures import A2AError
from iaccode_agui.a2a.call import A2AStream
from iaccode_agui.projection.projector import RunContext, RunProjector
from iaccode_agui.projection.textreplay import text_digest
from tests.core.test_projection_run import capture_streams, context_of

TRICKY = [
    "", "plain", "~1@2 ", "caf\u00e9", "\u4f60\u597d", "\U0001F600", "a\"b\\c/d", "\x00\x01\x1f\x7f",
    "line\nbreak\r\nand\rcr", "\t tab", "\u2028\u2029", "\ud800", "\udfff", "x\udc80y", "\ud83d\ude00",
    "\ufeffbom", "</script>", "\u0085nel", "\uffff", "a" * 5000,
]


def general_frame(value: Dict[str, Any], event_id: int) -> bytes:
    """What the general encoder writes (the stdlib ``json``, compact, non-ASCII kept)."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), check_circular=False)
    return ("id: %d\ndata: %s\n\n" % (event_id, text)).encode("utf-8", "backslashreplace")


def decoded(frame: bytes) -> Any:
    assert frame.startswith(b"id: ") and frame.endswith(b"\n\n") and frame.count(b"\n") == 3
    return json.loads(frame.split(b"\ndata: ", 1)[1][:-2].decode("utf-8"))


@pytest.mark.parametrize("text", TRICKY)
@pytest.mark.parametrize("kind", ["TEXT_MESSAGE_CONTENT", "REASONING_MESSAGE_CONTENT"])
def test_delta_frames_are_the_general_encoders_bytes(text, kind):
    event = {"type": kind, "messageId": "m-" + text[:3], "delta": text, "timestamp": 1796184406621}
    frame = sse.encode_json_event(dict(event), 41)
    assert frame == general_frame(event, 41)
    # Lone surrogates travel as JSON escapes and come back as they were; two that form a pair come back
    # as the character they spell, as any JSON (and JavaScript) reader joins them.
    expected = {key: json.loads(json.dumps(value)) for key, value in event.items()}
    assert decoded(frame) == expected


def test_a_lone_surrogate_is_sent_as_its_json_escape():
    # Before: the frame could not be encoded as UTF-8 and the run ended as if the runtime had failed.
    frame = sse.encode_json_event({"type": "CUSTOM", "name": "x", "value": "a\ud800b"}, 1)
    assert b'"a\\ud800b"' in frame
    frame = sse.encode_json_event({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "\udfff",
                                   "timestamp": 1}, 2)
    assert b'"delta":"\\udfff"' in frame and decoded(frame)["delta"] == "\udfff"


def test_a_resumed_run_and_an_interrupt_digest_text_with_a_lone_surrogate():
    # Before: hashing the text raised, and the run ended as if the runtime had failed.
    from iaccode_agui.projection.textreplay import digests_of, new_suffix
    assert new_suffix("a\ud800b more", {text_digest("a\ud800b ")}) == "more"
    assert digests_of(["x\udfff"]) == {text_digest("x\udfff")}
    assert text_digest("caf\u00e9") == "850f7dc43910ff890f8879c0ed26fe697c93a067ad93a7d50f466a7028a9bf4e"


class Text(str):
    pass


@pytest.mark.parametrize("event", [
    {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "d", "timestamp": True},
    {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "d", "timestamp": 1.5},
    {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": Text("d"), "timestamp": 1},
    {"type": "TEXT_MESSAGE_CONTENT", "messageId": None, "delta": "d", "timestamp": 1},
    {"type": "TEXT_MESSAGE_CONTENT", "delta": "d", "messageId": "m", "timestamp": 1},
    {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "d", "timestamp": 1, "extra": [1]},
    {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "d"},
    {"type": "RUN_FINISHED", "threadId": "t", "runId": "r", "outcome": {"type": "success"}, "timestamp": 3},
    {"type": 7, "messageId": "m", "delta": "d", "timestamp": 1},
])
def test_other_shapes_take_the_general_encoder(event):
    assert sse.encode_json_event(event, 5) == general_frame(event, 5)


@settings(max_examples=300, deadline=None)
@given(st.text(), st.text(max_size=8), st.integers(min_value=0, max_value=2 ** 62), st.integers(0, 2 ** 40))
def test_generated_deltas_encode_like_the_general_encoder(text, message_id, stamp, event_id):
    event = {"type": "TEXT_MESSAGE_CONTENT", "messageId": message_id, "delta": text, "timestamp": stamp}
    assert sse.encode_json_event(event, event_id) == general_frame(event, event_id)


def test_deltas_of_alternating_messages_with_percent_signs_encode_like_the_general_encoder():
    # The frame of the last type and message id is kept filled in; a "%" in them must not be read as a
    # placeholder, and a change of either must not reuse the other's frame.
    ids = ["m-1", "m-%d", "m-%%s%", "m-1", "", "%", "m-\u00e9\ud800"]
    rng = random.Random(3)
    for index in range(300):
        event = {"type": rng.choice(["TEXT_MESSAGE_CONTENT", "REASONING_MESSAGE_CONTENT", "%s"]),
                 "messageId": rng.choice(ids), "delta": rng.choice(["a", "%d", "%s%%", ""]), "timestamp": index}
        assert sse.encode_json_event(dict(event), index) == general_frame(event, index)


# ---- the A2A stream: the common frame answered inline ------------------------------------------------

class _Raw:
    def __init__(self, data: bytes, size: int) -> None:
        self._data, self._size, self._at, self._fp = data, size, 0, None

    def read1(self, size: int, decode_content: bool = True) -> bytes:
        chunk = self._data[self._at:self._at + min(size, self._size)]
        self._at += len(chunk)
        return chunk


class _Resp:
    def __init__(self, data: bytes, size: int) -> None:
        self.raw = _Raw(data, size)

    def close(self) -> None:
        pass


class FrameByFrame(A2AStream):
    """The reference: every frame through ``_frame``, the stream's whole rule."""

    def __next__(self) -> Any:
        while True:
            if self._aborted:
                self._finish()
                raise StopIteration
            if self._results:
                return self._results.popleft()
            if self._events:
                result = self._frame(self._events.popleft())
                if result is not None:
                    return result
                continue
            if self._done:
                raise StopIteration
            self._fill()


def _outcome(body: bytes, size: int, general: bool) -> Tuple[List[Any], Optional[str], int]:
    kind = FrameByFrame if general else A2AStream
    stream = kind(_Resp(body, size), "rpc-1", "SendStreamingMessage", read_size=size)
    results: List[Any] = []
    try:
        for result in stream:
            results.append(result)
        error = None
    except A2AError as exc:
        error = "%s: %s" % (type(exc).__name__, exc)
    return results, error, stream.frames


def _data(value: Any) -> bytes:
    return b"data: " + json.dumps(value).encode("utf-8") + b"\n\n"


def _ok(n: int, **extra: Any) -> bytes:
    body = {"jsonrpc": "2.0", "id": "rpc-1", "result": {"statusUpdate": {"n": n}}}
    body.update(extra)
    return _data(body)


ODD_FRAMES = [
    b"event: ping\ndata: {}\n\n",
    b"data:  " + _ok(1)[6:],                                   # whitespace before the JSON
    b"data: {\"result\": {\"a\": 1}, \"id\": \"rpc-1\"} \n\n",   # and after it
    _data({"jsonrpc": "2.0", "id": "rpc-2", "result": {"x": 1}}),
    _data({"jsonrpc": "2.0", "id": None, "result": {"x": 2}}),
    _data({"jsonrpc": "2.0", "result": "not an object"}),
    _data([1, 2]),
    b"data: not json\n\n",
    b"data: {\"result\": \n\n",
    b"data: {\"result\": {\"a\": 1}, \"id\": \"rpc-1\"} trailing\n\n",
    b"data: {\"result\": {\"a\": 1}}{\"result\": {\"b\": 2}}\n\n",
    _data({"jsonrpc": "2.0", "id": "rpc-1", "error": {"code": -32000, "message": "boom"}}),
    b"event: error\ndata: {\"error\": {\"code\": 1, \"message\": \"bad\"}}\n\n",
    _data({"jsonrpc": "2.0", "id": "rpc-1", "result": {"y": 1}, "error": None}),
    b": comment\n\n",
    b"data: {\"result\": {\"a\": 1},\ndata: \"id\": \"rpc-1\"}\n\n",   # one frame on two data lines
]


@pytest.mark.parametrize("odd", range(len(ODD_FRAMES)))
@pytest.mark.parametrize("size", [7, 64, 65536])
def test_stream_results_match_the_frame_by_frame_path(odd, size):
    body = b"".join(_ok(n) for n in range(5)) + ODD_FRAMES[odd] + b"".join(_ok(n) for n in range(5, 9))
    fast = _outcome(body, size, False)
    assert fast == _outcome(body, size, True)
    assert [r["statusUpdate"]["n"] for r in fast[0][:5]] == [0, 1, 2, 3, 4]


def test_generated_streams_match_the_frame_by_frame_path():
    rng = random.Random(15)
    for _ in range(200):
        frames = [rng.choice(ODD_FRAMES) if rng.random() < 0.2 else _ok(rng.randrange(100))
                  for _ in range(rng.randrange(1, 30))]
        body = b"".join(frames)
        size = rng.choice([1, 5, 100, 4096])
        assert _outcome(body, size, False) == _outcome(body, size, True)


# ---- the projection: a text delta of an open message -----------------------------------------------

TASK, CONTEXT, SESSION, MESSAGE = "task-1", "agui-ctx", "sess-1", "task-1-message"


def status(state: Any = "TASK_STATE_WORKING", message: Any = None, iac: Any = None,
           **obj: Any) -> Dict[str, Any]:
    body: Dict[str, Any] = {"taskId": TASK, "contextId": CONTEXT, "status": {"state": state}}
    if message is not None:
        body["status"]["message"] = message
    body["metadata"] = {"iac_code": {"iacCodeSessionId": SESSION} if iac is None else iac}
    body.update(obj)
    return {"statusUpdate": body}


def agent(text: Any = "more ", message_id: Any = MESSAGE, **fields: Any) -> Dict[str, Any]:
    message = {"messageId": message_id, "contextId": CONTEXT, "taskId": TASK, "role": "ROLE_AGENT",
               "parts": [{"text": text}]}
    message.update(fields)
    return message


def delta(text: Any = "more ", **kwargs: Any) -> Dict[str, Any]:
    return status(message=agent(text, **kwargs))


PROLOGUE = [status("TASK_STATE_SUBMITTED"), status(), delta("Hello ")]


def _mutated(change: Callable[[Dict[str, Any]], None]) -> Dict[str, Any]:
    frame = delta()
    change(frame)
    return frame


VARIANTS: Dict[str, Any] = {
    "the common delta": delta(),
    "tricky text": delta("\u2028\x00\ud800\U0001F600\"\\"),
    "empty text": delta(""),
    "text not a string": delta(5),
    "two parts": status(message=agent(parts=[{"text": "a"}, {"text": "b"}])),
    "no parts": status(message=agent(parts=[])),
    "part not an object": status(message=agent(parts=["a"])),
    "part without text": status(message=agent(parts=[{"kind": "file"}])),
    "another message": delta(message_id="task-1-2"),
    "no message id": _mutated(lambda f: f["statusUpdate"]["status"]["message"].pop("messageId")),
    "message id not a string": delta(message_id=7),
    "empty message id": delta(message_id=""),
    "user role": status(message=agent(role="ROLE_USER")),
    "no role": _mutated(lambda f: f["statusUpdate"]["status"]["message"].pop("role")),
    "role agent": status(message=agent(role="agent")),
    "role a list": status(message=agent(role=["ROLE_AGENT"])),
    "message not an object": status(message=["x"]),
    "input required": status("TASK_STATE_INPUT_REQUIRED", message=agent()),
    "completed": status("TASK_STATE_COMPLETED", message=agent()),
    "failed": status("TASK_STATE_FAILED", message=agent()),
    "canceled": status("TASK_STATE_CANCELED", message=agent()),
    "auth required": status("TASK_STATE_AUTH_REQUIRED", message=agent()),
    "an unknown state": status("TASK_STATE_DREAMING", message=agent()),
    "lower-case working": status("working", message=agent()),
    "no state": _mutated(lambda f: f["statusUpdate"]["status"].pop("state")),
    "state a list": status(["TASK_STATE_WORKING"], message=agent()),
    "state a number": status(3, message=agent()),
    "status not an object": _mutated(lambda f: f["statusUpdate"].__setitem__("status", "working")),
    "another task": _mutated(lambda f: f["statusUpdate"].__setitem__("taskId", "task-2")),
    "no task id": _mutated(lambda f: f["statusUpdate"].pop("taskId")),
    "another context": _mutated(lambda f: f["statusUpdate"].__setitem__("contextId", "agui-other")),
    "no context id": _mutated(lambda f: f["statusUpdate"].pop("contextId")),
    "another session": status(message=agent(), iac={"iacCodeSessionId": "sess-2"}),
    "no session": status(message=agent(), iac={}),
    "no metadata": _mutated(lambda f: f["statusUpdate"].pop("metadata")),
    "metadata not an object": _mutated(lambda f: f["statusUpdate"].__setitem__("metadata", [1])),
    "iac_code not an object": status(message=agent(), iac=["x"]),
    "thinking beside it": status(message=agent(), iac={"iacCodeSessionId": SESSION,
                                                        "thinking": {"type": "raw_thinking", "text": "hm"}}),
    "usage beside it": status(message=agent(), iac={"iacCodeSessionId": SESSION, "usage": {"inputTokens": 1.0}}),
    "final text": status(message=agent("Hello more"), iac={"iacCodeSessionId": SESSION,
                                                            "assistantFinal": {"complete": True}}),
    "a tool": status(message=agent(), iac={"iacCodeSessionId": SESSION,
                                           "tool": {"toolUseId": "t1", "name": "ls", "status": "started"}}),
    "an input": status("TASK_STATE_INPUT_REQUIRED", message=agent(), iac={
        "iacCodeSessionId": SESSION, "input": {"inputId": "in-1", "kind": "question", "question": "ok?",
                                               "requestTaskId": TASK, "contextId": CONTEXT}}),
    "a task snapshot beside it": dict(delta(), task={"id": TASK, "contextId": CONTEXT,
                                                     "status": {"state": "TASK_STATE_WORKING"}}),
    "an artifact beside it": dict(delta(), artifactUpdate={"taskId": TASK, "artifact": {"artifactId": "a"}}),
    "a task snapshot": {"task": {"id": TASK, "contextId": CONTEXT, "status": {"state": "TASK_STATE_WORKING",
                                                                               "message": agent()}}},
    "a message": {"message": agent()},
    "not an object": ["statusUpdate"],
    "status extra keys": _mutated(lambda f: f["statusUpdate"]["status"].update(timestamp="now", final=True)),
}

STARTS = {
    "new turn": {},
    "bound already": {"task_id": TASK, "session_id": SESSION},
    "resume": {"task_id": TASK, "session_id": SESSION, "resume": True,
               "text_digests": frozenset({text_digest("Hello more ")})},
}


def _projector(quick: bool, **overrides: Any) -> RunProjector:
    fields = dict(thread_id="t1", run_id="r1", execution_id="e1", context_id=CONTEXT, ros_invocation_id="inv")
    fields.update(overrides)
    projector = RunProjector(RunContext(**fields), clock=lambda: 1_800_000_000.0)
    projector.quick = quick
    return projector


def _state(projector: RunProjector) -> Dict[str, Any]:
    """Everything a later frame, the run's end or its persistence could read."""
    seen = {key: value for key, value in vars(projector).items() if key not in ("spans", "pipeline", "usage", "ctx",
                                                                                 "clock", "quick")}
    seen["spans"] = dict(vars(projector.spans))
    seen["usage"] = projector.usage.summary()
    seen["pipeline"] = {key: value for key, value in vars(projector.pipeline).items() if key not in ("spans", "usage")}
    return seen


def _drive(quick: bool, frames: List[Any], adopted: bool = False, **start: Any) -> Tuple[List[Any], Dict[str, Any]]:
    projector = _projector(quick, **start)
    if adopted:
        # A run taken over from its log: its message is open, but no frame of this process confirmed the
        # session, set a state or checked the message against the text shown before.
        projector.spans.replay({"type": "TEXT_MESSAGE_START", "messageId": MESSAGE, "role": "assistant"})
        projector.spans.replay({"type": "TEXT_MESSAGE_CONTENT", "messageId": MESSAGE, "delta": "Hello "})
    out: List[Any] = [] if adopted else list(projector.start())
    for frame in frames:
        out.append(projector.feed(copy.deepcopy(frame)))
    out.append(projector.end_of_stream())
    return out, _state(projector)


@pytest.mark.parametrize("start", sorted(STARTS))
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_a_delta_projects_as_the_general_rules_project_it(variant, start):
    frames = PROLOGUE + [VARIANTS[variant], delta("tail")]
    assert _drive(True, frames, **STARTS[start]) == _drive(False, frames, **STARTS[start])


@pytest.mark.parametrize("start", sorted(STARTS))
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_a_delta_to_an_adopted_runs_open_message_projects_as_the_rules_project_it(variant, start):
    frames = [VARIANTS[variant], delta("more tail"), delta("tail")]
    overrides = dict(STARTS[start], text_digests=frozenset({text_digest("more ")}))
    assert _drive(True, frames, adopted=True, **overrides) == _drive(False, frames, adopted=True, **overrides)


@pytest.mark.parametrize("variant", ["thinking beside it", "another message", "final text"])
def test_after_an_unusual_frame_deltas_still_match(variant):
    frames = PROLOGUE + [VARIANTS[variant], delta("a"),
                         status(message=agent(), iac={"iacCodeSessionId": SESSION,
                                                      "thinking": {"type": "raw_thinking", "text": "x"}}),
                         delta("b"), delta("c", message_id="task-1-2"), delta("d")]
    assert _drive(True, frames) == _drive(False, frames)


def test_the_shortcut_is_taken_for_the_common_delta():
    projector = _projector(True)
    for frame in PROLOGUE:
        projector.feed(copy.deepcopy(frame))
    assert projector._text_delta(delta("x")) == {"type": "TEXT_MESSAGE_CONTENT", "messageId": MESSAGE,
                                                 "delta": "x"}
    assert projector._text_delta(VARIANTS["another message"]) is None   # opening a message is the rules' job


@pytest.mark.parametrize("name", ["normal_turn", "bash_permission_deny", "write_permission_allow_once",
                                  "cancel_task", "pipeline_question_early_exit"])
def test_real_runtime_streams_project_identically(name):
    for _, frames in capture_streams(name):
        context = context_of(frames)
        results = []
        for quick in (True, False):
            projector = _projector(quick, context_id=context)
            out = list(projector.start())
            for frame in frames:
                out.extend(projector.feed(copy.deepcopy(frame)))
            out.extend(projector.end_of_stream())
            results.append((out, _state(projector)))
        assert results[0] == results[1]


def test_a_delta_after_a_frame_without_state_sets_the_state():
    frames = [VARIANTS["no state"], status(message=agent(), iac={}), delta("tail")]
    assert _drive(True, frames, adopted=True) == _drive(False, frames, adopted=True)


def test_a_delta_while_answers_are_expected_projects_as_the_rules_project_it():
    def drive(quick: bool) -> Any:
        projector = _projector(quick, **STARTS["resume"])
        projector.expect_answers(["in-1"])
        out = [projector.feed(copy.deepcopy(frame)) for frame in PROLOGUE + [delta(), delta("x")]]
        return out, _state(projector)
    assert drive(True) == drive(False)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(sorted(VARIANTS)), max_size=8), st.sampled_from(sorted(STARTS)), st.booleans())
def test_generated_sequences_project_identically(variants, start, adopted):
    frames = ([] if adopted else PROLOGUE) + [VARIANTS[name] for name in variants] + [delta("tail")]
    assert _drive(True, frames, adopted, **STARTS[start]) == _drive(False, frames, adopted, **STARTS[start])

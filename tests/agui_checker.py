"""Conformance oracle for AG-UI event streams (test-only).

Two independent checks: every event validates against the official ``ag-ui-protocol`` 1.0 models, and
the sequence obeys the verifier rules of the official client (run boundaries, span open/close balance).
Also a small SSE parser for the adapter's output so tests read exactly what a browser would.
"""
import json
from typing import Any, Dict, Iterable, List, Optional, Tuple

from ag_ui.core import Event as AguiEvent  # type: ignore
from pydantic import TypeAdapter

_ADAPTER = TypeAdapter(AguiEvent)

SPAN_EVENTS = {
    "TEXT_MESSAGE_START": ("text", "messageId", "start"),
    "TEXT_MESSAGE_CONTENT": ("text", "messageId", "use"),
    "TEXT_MESSAGE_END": ("text", "messageId", "end"),
    "TOOL_CALL_START": ("tool", "toolCallId", "start"),
    "TOOL_CALL_ARGS": ("tool", "toolCallId", "use"),
    "TOOL_CALL_END": ("tool", "toolCallId", "end"),
    "REASONING_START": ("reasoning", "messageId", "start"),
    "REASONING_END": ("reasoning", "messageId", "end"),
    "REASONING_MESSAGE_START": ("reasoning_message", "messageId", "start"),
    "REASONING_MESSAGE_CONTENT": ("reasoning_message", "messageId", "use"),
    "REASONING_MESSAGE_END": ("reasoning_message", "messageId", "end"),
    "STEP_STARTED": ("step", "stepName", "start"),
    "STEP_FINISHED": ("step", "stepName", "end"),
}


class SequenceError(AssertionError):
    pass


def _no_nulls(value: Any, path: str = "$") -> None:
    if value is None:
        raise SequenceError("null value at %s" % path)
    if isinstance(value, dict):
        for key, item in value.items():
            if path == "$" or not path.startswith("$.value") and not path.startswith("$.content"):
                _no_nulls(item, "%s.%s" % (path, key))
    elif isinstance(value, list) and not path.startswith("$.value"):
        for index, item in enumerate(value):
            _no_nulls(item, "%s[%d]" % (path, index))


def validate_models(events: Iterable[Dict[str, Any]]) -> None:
    for event in events:
        _ADAPTER.validate_python(event)
        if not isinstance(event.get("timestamp"), int):
            raise SequenceError("event without integer timestamp: %r" % event)
        for key, value in event.items():
            if value is None:
                raise SequenceError("null field %s in %r" % (key, event))
        if event["type"] == "MESSAGES_SNAPSHOT":
            # An activity message's content is open JSON, exactly as an ACTIVITY_SNAPSHOT's content is.
            _no_nulls({key: value for key, value in event.items() if key != "messages"})
            for message in event["messages"]:
                _no_nulls({key: value for key, value in message.items()
                           if not (message.get("role") == "activity" and key == "content")})
        elif event["type"] not in ("CUSTOM", "ACTIVITY_SNAPSHOT"):
            _no_nulls(event)


def check_sequence(events: List[Dict[str, Any]]) -> None:
    """The official verifier's rules, applied to one SSE response (one or more runs)."""
    if not events:
        raise SequenceError("empty stream")
    if events[0]["type"] != "RUN_STARTED":
        raise SequenceError("first event must be RUN_STARTED, got %s" % events[0]["type"])
    state = "idle"
    open_spans: Dict[Tuple[str, str], bool] = {}
    opened_in_run: set = set()
    for index, event in enumerate(events):
        kind = event["type"]
        if state == "finished" and kind not in ("RUN_STARTED", "RUN_ERROR"):
            raise SequenceError("%s after RUN_FINISHED (index %d)" % (kind, index))
        if state == "errored" and kind != "RUN_STARTED":
            raise SequenceError("%s after RUN_ERROR (index %d)" % (kind, index))
        if kind == "RUN_STARTED":
            if state == "running":
                raise SequenceError("RUN_STARTED while a run is active (index %d)" % index)
            state = "running"
            open_spans.clear()
            opened_in_run = set()
            continue
        if state != "running" and kind != "RUN_ERROR":
            raise SequenceError("%s outside a run (index %d)" % (kind, index))
        if kind in SPAN_EVENTS:
            family, key_field, action = SPAN_EVENTS[kind]
            key = (family, event[key_field])
            if action == "start":
                if key in open_spans:
                    raise SequenceError("%s %s opened twice (index %d)" % (family, key[1], index))
                if family != "step" and key in opened_in_run:
                    raise SequenceError("%s %s re-opened in the same run (index %d)" % (family, key[1], index))
                open_spans[key] = True
                opened_in_run.add(key)
            elif key not in open_spans:
                raise SequenceError("%s on %s %s that is not open (index %d)" % (kind, family, key[1], index))
            elif action == "end":
                del open_spans[key]
            continue
        if kind == "RUN_FINISHED":
            if open_spans:
                raise SequenceError("RUN_FINISHED with open spans %s" % sorted(open_spans))
            outcome = event.get("outcome") or {"type": "success"}
            if outcome.get("type") == "interrupt" and not outcome.get("interrupts"):
                raise SequenceError("interrupt outcome without interrupts")
            state = "finished"
        elif kind == "RUN_ERROR":
            state = "errored"
    if state == "running":
        raise SequenceError("stream ended inside a run")


def parse_sse(raw: bytes) -> Tuple[List[Dict[str, Any]], List[Optional[int]], int]:
    """Events, their ``id:`` values and the number of heartbeat comments in an SSE body (LF framing)."""
    if b"\r" in raw:
        raise SequenceError("adapter SSE must use LF framing only")
    events: List[Dict[str, Any]] = []
    ids: List[Optional[int]] = []
    heartbeats = 0
    for block in raw.decode("utf-8").split("\n\n"):
        if not block:
            continue
        data_lines = []
        event_id = None
        for line in block.split("\n"):
            if line.startswith(":"):
                if line.strip() == ": heartbeat":
                    heartbeats += 1
                continue
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "data":
                data_lines.append(value)
            elif field == "id":
                event_id = int(value)
        if data_lines:
            events.append(json.loads("\n".join(data_lines)))
            ids.append(event_id)
    return events, ids, heartbeats


def check_stream(raw: bytes) -> List[Dict[str, Any]]:
    events, ids, _ = parse_sse(raw)
    validate_models(events)
    check_sequence(events)
    if ids and ids != list(range(ids[0], ids[0] + len(ids))):
        raise SequenceError("SSE ids are not consecutive: %r" % ids)
    return events


def types(events: List[Dict[str, Any]]) -> List[str]:
    return [event["type"] for event in events]


def rebuild_messages(events: Iterable[Dict[str, Any]],
                     messages: Iterable[Dict[str, Any]] = ()) -> List[Dict[str, Any]]:
    """The message list a client rebuilds from ``events`` (after ``messages``), placed by the rules of the
    official ``@ag-ui/client`` reducer (``defaultApplyEvents``): a text or reasoning start makes the message
    of its id unless it exists; a tool call joins the assistant message its ``parentMessageId`` names (one of
    that id is made when there is none; without a parent, one with the call's id); a result goes right after
    the assistant message holding its call and the results already there."""
    out = [dict(m) for m in messages]

    def find(message_id: Any) -> Optional[Dict[str, Any]]:
        return next((m for m in out if m["id"] == message_id), None)

    for event in events:
        kind = event["type"]
        if kind in ("TEXT_MESSAGE_START", "REASONING_MESSAGE_START") and find(event["messageId"]) is None:
            out.append({"id": event["messageId"], "role": event.get("role", "assistant"), "content": ""})
        elif kind in ("TEXT_MESSAGE_CONTENT", "REASONING_MESSAGE_CONTENT"):
            found = find(event["messageId"])
            if found is None:
                raise SequenceError("%s for unknown message %s" % (kind, event["messageId"]))
            found["content"] += event["delta"]
        elif kind == "TOOL_CALL_START":
            parent_id = event.get("parentMessageId")
            parent = find(parent_id) if parent_id else None
            if parent is None or parent["role"] != "assistant":
                parent = {"id": parent_id if parent_id and parent is None else event["toolCallId"],
                          "role": "assistant", "content": ""}
                out.append(parent)
            parent.setdefault("toolCalls", []).append(event["toolCallId"])
        elif kind == "TOOL_CALL_RESULT":
            result = {"id": event["messageId"], "role": "tool", "toolCallId": event["toolCallId"],
                      "content": event["content"]}
            at = next((i for i, m in enumerate(out) if event["toolCallId"] in m.get("toolCalls", ())), len(out) - 1)
            at += 1
            while at < len(out) and out[at]["role"] == "tool":
                at += 1
            out.insert(at, result)
    return out


def conversation(messages: Iterable[Dict[str, Any]]) -> List[Tuple[str, str, Tuple[str, ...]]]:
    """(role, text, tool call ids or the answered call) of each message of the dialogue (not reasoning or
    activity), in order."""
    return [(m["role"], m.get("content") or "", tuple(m.get("toolCalls") or [m[k] for k in ("toolCallId",) if k in m]))
            for m in messages if m["role"] not in ("reasoning", "activity")]

"""A thread's conversation as AG-UI messages, folded from the events its runs stream (pure).

The fold is the one a stock client applies to the same events (``@ag-ui/client``'s default reducer), so the
ids and the order a client rebuilt from the stream are exactly the ones stored, whatever the message
boundaries of the projection are:

- ``TEXT_MESSAGE_START`` creates ``{id, role, content}`` unless the id exists (a later segment with the same
  id continues that message); ``TEXT_MESSAGE_CONTENT`` appends to it.
- ``TOOL_CALL_START`` adds ``{id, type: function, function: {name, arguments}}`` to the assistant message
  named by ``parentMessageId`` (created when no such message exists; named after the call when there is no
  parent); ``TOOL_CALL_ARGS`` appends to the arguments; a call id seen before is not added again.
- ``TOOL_CALL_RESULT`` is a ``tool`` message placed right after the assistant message that holds the call
  (after the results already there), or last when the call is unknown; a result id seen before is replaced.
- ``ACTIVITY_SNAPSHOT`` is an ``activity`` message replaced by id (a pipeline's progress).
- Reasoning is not kept: it is the model's working, not the conversation, and a stock client keeps its own
  reasoning messages when a snapshot carries none.  ``MESSAGES_SNAPSHOT`` is the stored conversation itself.

What the stream does not carry comes from the run: its user message (from the request; image data replaced
by a text part naming the image), the interrupts it ended with and the answers a resume got accepted.  An
interrupt is an ``activity`` message ``interrupt-<interrupt id>`` of type ``iac-code.interrupt.v1`` whose
content is ``{"interrupt": <the Interrupt exactly as RUN_FINISHED carried it>}``; the accepted answer adds
``"answer": {"status", "payload"}`` to it, so a UI shows the question and what was answered in place.
"""
from typing import Any, Callable, Dict, Iterator, List, Optional, Set, Tuple

Message = Dict[str, Any]
Event = Dict[str, Any]

INTERRUPT_ACTIVITY = "iac-code.interrupt.v1"
INTERRUPT_PREFIX = "interrupt-"
_DELTAS = {"TEXT_MESSAGE_CONTENT": "messageId", "TOOL_CALL_ARGS": "toolCallId"}
_KEPT = frozenset(["TEXT_MESSAGE_START", "TOOL_CALL_START", "TOOL_CALL_RESULT", "ACTIVITY_SNAPSHOT"])


class Conversation:
    """Stored messages with the run's events folded onto them; ``touched`` names the messages changed."""

    def __init__(self, messages: List[Message]) -> None:
        self.messages = messages
        self._by_id: Dict[str, Message] = {message["id"]: message for message in messages}
        self._calls: Dict[str, Dict[str, Any]] = {}
        self._holder: Dict[str, Message] = {}
        for message in messages:
            for call in message.get("toolCalls") or []:
                self._calls[call["id"]] = call
                self._holder[call["id"]] = message
        self.touched: Set[str] = set()

    def find(self, message_id: str) -> Optional[Message]:
        return self._by_id.get(message_id)

    def apply(self, event: Event) -> None:
        handler = _HANDLERS.get(event.get("type") or "")
        if handler is not None:
            handler(self, event)

    def add(self, message: Message, after: Optional[Message] = None) -> Message:
        """Append ``message`` (or insert it right after ``after``); an existing id is replaced in place."""
        known = self._by_id.get(message["id"])
        if known is not None:
            self.messages[self.messages.index(known)] = message
        elif after is not None:
            self.messages.insert(self.messages.index(after) + 1, message)
        else:
            self.messages.append(message)
        self._by_id[message["id"]] = message
        self.touched.add(message["id"])
        return message

    def _text_start(self, event: Event) -> None:
        if event.get("messageId") not in self._by_id:
            self.add({"id": event["messageId"], "role": event.get("role") or "assistant", "content": ""})

    def _text_content(self, event: Event) -> None:
        message = self._by_id.get(event.get("messageId") or "")
        if message is not None and message.get("role") != "activity":
            before = message.get("content")
            message["content"] = (before if isinstance(before, str) else "") + (event.get("delta") or "")
            self.touched.add(message["id"])

    def _tool_start(self, event: Event) -> None:
        call_id = event.get("toolCallId")
        if not isinstance(call_id, str) or call_id in self._calls:
            return
        parent_id = event.get("parentMessageId")
        parent = self._by_id.get(parent_id) if isinstance(parent_id, str) else None
        if parent is None or parent.get("role") != "assistant":
            new_id = parent_id if isinstance(parent_id, str) and parent is None else call_id
            parent = self._by_id.get(new_id) or self.add({"id": new_id, "role": "assistant"})
            if parent.get("role") != "assistant":
                return      # the call's own id names another kind of message: nowhere to put the call
        call = {"id": call_id, "type": "function",
                "function": {"name": str(event.get("toolCallName") or ""), "arguments": ""}}
        parent.setdefault("toolCalls", []).append(call)
        self._calls[call_id] = call
        self._holder[call_id] = parent
        self.touched.add(parent["id"])

    def _tool_args(self, event: Event) -> None:
        call = self._calls.get(event.get("toolCallId") or "")
        if call is not None:
            call["function"]["arguments"] += event.get("delta") or ""
            self.touched.add(self._holder[call["id"]]["id"])

    def _tool_result(self, event: Event) -> None:
        call_id = event.get("toolCallId")
        message = {"id": event.get("messageId"), "role": "tool", "toolCallId": call_id,
                   "content": event.get("content") if isinstance(event.get("content"), str) else ""}
        if not isinstance(message["id"], str) or not isinstance(call_id, str):
            return
        after = self._holder.get(call_id)
        if message["id"] not in self._by_id and after is not None:
            index = self.messages.index(after) + 1
            while index < len(self.messages) and self.messages[index].get("role") == "tool":
                index += 1
            after = self.messages[index - 1]
        self.add(message, after if message["id"] not in self._by_id else None)

    def _activity(self, event: Event) -> None:
        message_id = event.get("messageId")
        if not isinstance(message_id, str) or (event.get("replace") is False and message_id in self._by_id):
            return
        self.add({"id": message_id, "role": "activity", "activityType": str(event.get("activityType") or ""),
                  "content": event.get("content") if isinstance(event.get("content"), dict) else {}})

    def note_interrupt(self, interrupt: Dict[str, Any]) -> None:
        """The run ended waiting on ``interrupt``: shown in place as an activity message."""
        message_id = INTERRUPT_PREFIX + str(interrupt.get("id"))
        known = self._by_id.get(message_id)
        content = dict(known["content"]) if known is not None else {}
        content["interrupt"] = interrupt
        self.add({"id": message_id, "role": "activity", "activityType": INTERRUPT_ACTIVITY, "content": content})

    def note_answer(self, entry: Dict[str, Any]) -> None:
        """A resume's answer to an interrupt was accepted: kept beside the interrupt it answers."""
        known = self._by_id.get(INTERRUPT_PREFIX + str(entry.get("interruptId")))
        if known is None:
            return          # the interrupt left the history (or predates it): nothing to attach the answer to
        answer = {"status": entry.get("status")}
        if "payload" in entry:
            answer["payload"] = entry["payload"]
        self.add(dict(known, content=dict(known["content"], answer=answer)))

    def add_user(self, message: Message) -> None:
        """The run's user message, unless a message with its id is already there (a repeated request)."""
        if message["id"] not in self._by_id:
            self.add(message)


_HANDLERS: Dict[str, Callable[[Conversation, Event], None]] = {
    "TEXT_MESSAGE_START": Conversation._text_start,
    "TEXT_MESSAGE_CONTENT": Conversation._text_content,
    "TOOL_CALL_START": Conversation._tool_start,
    "TOOL_CALL_ARGS": Conversation._tool_args,
    "TOOL_CALL_RESULT": Conversation._tool_result,
    "ACTIVITY_SNAPSHOT": Conversation._activity,
}


class _Text:
    """One message's deltas (or one call's arguments), kept up to ``cap`` bytes; ``size`` counts them all."""

    __slots__ = ("parts", "size", "kept", "cap")

    def __init__(self, cap: int) -> None:
        self.parts: List[str] = []
        self.size = 0
        self.kept = 0
        self.cap = cap

    def add(self, delta: Any) -> None:
        if not isinstance(delta, str):
            return
        size = len(delta) if delta.isascii() else len(delta.encode("utf-8", "surrogatepass"))
        if self.kept < self.cap:
            self.parts.append(delta)
            self.kept += size
        self.size += size


class RunEvents:
    """What one run streamed, as the fold needs it: the events that create messages, in order, and every
    message's (or call's) deltas joined into one.

    Holding deltas per target keeps a long stream cheap (one join per message, not one string copy per
    delta), and ``cap`` bounds what a run can make the server hold: a text beyond it is cut when stored.
    """

    def __init__(self, cap: int, cut: Callable[[str, int], str]) -> None:
        self.cap = cap
        self.cut = cut          # (text, its size in bytes) -> the text cut to ``cap``, marked
        self.items: List[Any] = []
        self._texts: Dict[Tuple[str, Any], _Text] = {}
        self._activities: Dict[Any, int] = {}

    def add(self, event: Event) -> None:
        kind = event.get("type")
        field = _DELTAS.get(kind)          # type: ignore[arg-type]
        if field is not None:
            key = (kind, event.get(field))
            text = self._texts.get(key)
            if text is None:
                text = self._texts[key] = _Text(self.cap)
                self.items.append({"type": kind, field: key[1], "delta": text})
            text.add(event.get("delta"))
        elif kind == "ACTIVITY_SNAPSHOT" and event.get("messageId") in self._activities:
            self.items[self._activities[event.get("messageId")]] = event      # the latest content counts
        elif kind in _KEPT:
            if kind == "ACTIVITY_SNAPSHOT":
                self._activities[event.get("messageId")] = len(self.items)
            elif kind == "TOOL_CALL_RESULT" and isinstance(event.get("content"), str):
                event = self._fitted(event)
            self.items.append(event)

    def _fitted(self, event: Event) -> Event:
        text = _Text(self.cap)
        text.add(event["content"])
        return event if text.size <= self.cap else dict(event, content=self.cut(event["content"], text.size))

    def events(self) -> Iterator[Event]:
        """The events to fold, each message's deltas joined (and cut when they went past the cap)."""
        for item in self.items:
            delta = item.get("delta")
            if isinstance(delta, _Text):
                joined = "".join(delta.parts)
                yield dict(item, delta=self.cut(joined, delta.size) if delta.size > delta.cap else joined)
            else:
                yield item


def user_message(message_id: str, parts: List[Dict[str, Any]], image_label: Callable[[str, str], str]) -> Message:
    """A run's user message as stored: its text, each image a text part naming it (the data is never kept)."""
    texts = [part["text"] if "text" in part else image_label(
        str((part.get("data") or {}).get("filename") or "image"), str(part.get("mediaType") or ""))
        for part in parts]
    if len(texts) == 1 and "text" in parts[0]:
        return {"id": message_id, "role": "user", "content": texts[0]}
    return {"id": message_id, "role": "user", "content": [{"type": "text", "text": text} for text in texts]}

"""The rules around a stored conversation (pure): what is kept, what is never kept, when a stream needs it.

- Bounds.  A conversation keeps its newest messages within ``max_messages`` and ``max_bytes`` (compact JSON,
  UTF-8); the oldest go first and the drop is remembered (``truncated``).  A tool result whose call went
  with the dropped messages goes too, so what is kept never starts with an answer to nothing.  One text
  (a message's content, a call's arguments, a tool's result) is kept up to a quarter of ``max_bytes``: a
  longer one is cut and ends with a marker that states its size, so a single huge output cannot push the
  whole conversation out.
- Never kept: credentials (``credentials``: the values of credential-named keys anywhere in a call's
  arguments, a tool's result, an answer or an activity, and the run's own credential values wherever they
  appear), and image data (the user message names each image instead).
- The snapshot rule.  A resume run always opens with a ``MESSAGES_SNAPSHOT`` (its first events answer a
  tool call made in an earlier run); a new turn opens with one only when its input does not hold the
  thread's latest stored message (a reload, another device, a client runtime that lost its memory), and
  then the snapshot ends with the run's own user message, because clients replace their list with it.  A
  client whose input holds the latest message is in sync and gets none.  ``resume`` keeps only the first
  case, ``off`` neither.  Activity messages are left out of "latest": stock clients never send them back.
"""
import json
from typing import Any, Callable, Dict, FrozenSet, Iterable, List, Optional, Tuple

from iaccode_agui.canonical import encoded_size
from iaccode_agui.credentials import redact, redact_text

Message = Dict[str, Any]
Mark = Callable[[int], str]        # the original size in bytes -> the marker ending a cut text

# (mode, resume run, client in sync) -> whether the run opens with a snapshot.
_SNAPSHOT_RULE = {
    ("auto", True, True): True, ("auto", True, False): True,
    ("auto", False, True): False, ("auto", False, False): True,
    ("resume", True, True): True, ("resume", True, False): True,
    ("resume", False, True): False, ("resume", False, False): False,
}


def text_cap(max_bytes: int) -> int:
    return max(1, max_bytes // 4)


def cut_text(text: str, size: int, cap: int, mark: Mark) -> str:
    """``text`` (``size`` bytes originally) shortened to at most ``cap`` bytes, its marker included."""
    marker = mark(size)
    room = max(0, cap - len(marker.encode("utf-8")))
    head = text.encode("utf-8", "surrogatepass")[:room].decode("utf-8", "ignore")
    return head + marker


def _fit(text: Any, cap: int, mark: Mark) -> Any:
    if not isinstance(text, str):
        return text
    size = len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
    return text if size <= cap else cut_text(text, size, cap, mark)


def _json_redact(text: str, secrets: Iterable[str]) -> str:
    """A JSON text with credential-named values replaced; any other text only loses known credentials."""
    try:
        value = json.loads(text)
    except ValueError:
        return redact_text(text, secrets)
    cleaned = redact(value, secrets)
    return text if cleaned == value else json.dumps(cleaned, ensure_ascii=False, separators=(",", ":"))


def clean(message: Message, cap: int, mark: Mark, secrets: Iterable[str] = ()) -> Message:
    """``message`` as it may be stored: credentials redacted, long texts cut."""
    role = message.get("role")
    out = dict(message)
    if role == "activity":
        out["content"] = redact(message.get("content"), secrets)
        return out
    content = message.get("content")
    if isinstance(content, list):
        out["content"] = [dict(part, text=_fit(redact_text(part["text"], secrets), cap, mark))
                          if isinstance(part.get("text"), str) else part for part in content]
    elif role == "tool" and isinstance(content, str):
        out["content"] = _fit(_json_redact(content, secrets), cap, mark)
    elif isinstance(content, str):
        out["content"] = _fit(redact_text(content, secrets), cap, mark)
    if message.get("toolCalls"):
        out["toolCalls"] = [dict(call, function=dict(
            call["function"], arguments=_fit(_json_redact(call["function"]["arguments"], secrets), cap, mark)))
            for call in message["toolCalls"]]
    return out


def bound(messages: List[Message], max_messages: int, max_bytes: int) -> Tuple[List[Message], bool]:
    """The newest messages within both bounds, and whether any had to go."""
    kept = 0
    used = 0
    for message in reversed(messages):
        size = encoded_size(message) + 1
        if kept >= max_messages or used + size > max_bytes:
            break
        kept += 1
        used += size
    start = len(messages) - kept
    calls = {call["id"] for message in messages[start:] for call in message.get("toolCalls") or []}
    while start < len(messages) and messages[start].get("role") == "tool" and \
            messages[start].get("toolCallId") not in calls:
        start += 1
    return messages[start:], start > 0


def latest_id(messages: List[Message]) -> Optional[str]:
    """The id a client in sync holds last: the newest message that is not an activity."""
    for message in reversed(messages):
        if message.get("role") != "activity":
            return message["id"]
    return None


def wants_snapshot(mode: str, resume: bool, stored: List[Message], input_ids: FrozenSet[str]) -> bool:
    latest = latest_id(stored)
    in_sync = latest is None or latest in input_ids
    return mode != "off" and bool(stored) and _SNAPSHOT_RULE[(mode, resume, in_sync)]


def snapshot_messages(stored: List[Message], user: Optional[Message]) -> List[Message]:
    """What a snapshot holds: the stored conversation, then the run's own user message (unless stored)."""
    if user is None or any(message["id"] == user["id"] for message in stored):
        return list(stored)
    return list(stored) + [user]


def fit_messages(messages: List[Message], budget: int) -> Tuple[List[Message], bool]:
    """As many of the newest messages as fit ``budget`` bytes of JSON; whether any were left out."""
    return bound(messages, len(messages), budget)

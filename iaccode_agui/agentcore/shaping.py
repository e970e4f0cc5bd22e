"""Event shaping on the AgentCore routes: what the core projects, as an AgentCore client expects it.

Pure: one event in, the events to publish out.  It adds the ``agentcore.usage`` event before
``RUN_FINISHED``, renames in-stream error codes through ``errors.AGENTCORE_CODES``, and keeps every SSE
event under the configured size: text, reasoning and tool-argument deltas are split into several events
(a client appends them anyway); a tool result, which has to arrive whole, is cut short with a visible,
translated marker that states its original size; a ``MESSAGES_SNAPSHOT`` keeps its newest messages and is
marked as shortened (``metadata.iacCode.truncated``).
"""
from typing import Any, Dict, List, Optional

from iaccode_agui import errors, i18n
from iaccode_agui.canonical import encoded_size
from iaccode_agui.agentcore.published_files import ARTIFACT_EVENT, RunFilePublisher
from iaccode_agui.projection import events as ev
from iaccode_agui.projection.history_rules import fit_messages

USAGE_EVENT = "agentcore.usage"
SPLITTABLE = {"TEXT_MESSAGE_CONTENT": "delta", "TOOL_CALL_ARGS": "delta", "REASONING_MESSAGE_CONTENT": "delta",
              "TEXT_MESSAGE_CHUNK": "delta", "TOOL_CALL_CHUNK": "delta"}
TRUNCATABLE = {"TOOL_CALL_RESULT": "content"}
# What the SSE framing adds around the JSON: "id: <n>\n", "data: ", the timestamp field and "\n\n".
FRAME_OVERHEAD = 128
_USAGE_COUNTS = ("inputTokens", "outputTokens", "totalTokens", "cachedInputTokens")
Event = Dict[str, Any]


def usage_value(usage: Optional[List[Dict[str, Any]]]) -> Dict[str, Any]:
    """Run totals plus the per-model figures ``RUN_FINISHED.usage`` carries on ``POST /``."""
    entries = list(usage or [])
    value: Dict[str, Any] = {name: 0 for name in _USAGE_COUNTS[:3]}
    for entry in entries:
        for name in _USAGE_COUNTS:
            if isinstance(entry.get(name), int):
                value[name] = value.get(name, 0) + entry[name]
    value["models"] = entries
    return value


def split_text(text: str, budget: int) -> List[str]:
    """``text`` in pieces whose JSON string encoding (without quotes) fits ``budget`` bytes each.

    A piece starts as long as the budget in characters and shrinks by its overshoot, so plain text takes
    one measurement per piece and any other text at most two more.
    """
    pieces: List[str] = []
    start = 0
    budget = max(16, budget)
    while start < len(text):
        size = budget
        shrunk = False
        while True:
            piece = text[start:start + size]
            size = len(piece)       # the text may end before the window does
            used = encoded_size(piece) - 2
            if used <= budget or size == 1:
                break
            # First in proportion to the overshoot; if that is still too long, dropping ``over``
            # characters drops at least ``over`` bytes, so the next try fits.
            over = used - budget
            size = max(1, size - over if shrunk else min(size - 1, size * budget // used))
            shrunk = True
        pieces.append(piece)
        start += len(piece)
    return pieces


class AgentCoreShaper:
    """Per-run shaping; ``language`` is the run's, for the messages this layer writes itself."""

    def __init__(self, language: str, max_event_bytes: int, files: Optional[RunFilePublisher] = None) -> None:
        self.language = language
        self.max_event_bytes = max_event_bytes
        self.files = files

    def __call__(self, event: Event) -> List[Event]:
        kind = event.get("type")
        if self.files is not None:
            event = self._publish(event)
        if kind == "RUN_FINISHED":
            return [ev.custom(USAGE_EVENT, usage_value(event.get("usage"))), event]
        if kind == "RUN_ERROR":
            return [self._rename_error(event)]
        if kind in SPLITTABLE or kind in TRUNCATABLE:
            return self._fit(event)
        if kind == "MESSAGES_SNAPSHOT":
            return [self._fit_snapshot(event)]
        return [event]

    def _fit_snapshot(self, event: Event) -> Event:
        """A snapshot over the limit keeps its newest messages and says that older ones were left out."""
        limit = self.max_event_bytes - FRAME_OVERHEAD
        if encoded_size(event) <= limit:
            return event
        envelope = encoded_size(ev.messages_snapshot([], truncated=True))
        messages, _ = fit_messages(event.get("messages") or [], limit - envelope)
        return ev.messages_snapshot(messages, truncated=True)

    def _publish(self, event: Event) -> Event:
        """Artifacts name the files a tool wrote; the tool's result then carries their download links."""
        assert self.files is not None
        if event.get("type") == "CUSTOM" and event.get("name") == ARTIFACT_EVENT:
            self.files.note_artifact(event.get("value"))
        elif event.get("type") == "TOOL_CALL_RESULT":
            content = self.files.tool_result_content()
            if content is not None:
                return dict(event, content=content)
        return event

    def _rename_error(self, event: Event) -> Event:
        code = errors.AGENTCORE_CODES.get(event.get("code", ""))
        if code is None:
            return event
        renamed = dict(event, code=code)
        if code in errors.AGENTCORE_MESSAGES:
            renamed["message"] = i18n.translate(errors.AGENTCORE_MESSAGES[code], self.language)
        return renamed

    def _fit(self, event: Event) -> List[Event]:
        field = SPLITTABLE.get(event["type"]) or TRUNCATABLE[event["type"]]
        text = event.get(field)
        if not isinstance(text, str):
            return [event]
        limit = self.max_event_bytes - FRAME_OVERHEAD
        # Quick bound first: no character encodes to more than six bytes in JSON.
        if len(text) * 6 + 2048 <= limit or encoded_size(event) <= limit:
            return [event]
        budget = limit - encoded_size(dict(event, **{field: ""}))
        if event["type"] in SPLITTABLE:
            return [dict(event, **{field: piece}) for piece in split_text(text, budget)]
        size = len(text.encode("utf-8", "surrogatepass"))
        marker = "\n" + i18n.translate(errors.MSG_EVENT_TRUNCATED, self.language).format(size=size)
        head = split_text(text, budget - (encoded_size(marker) - 2))[0]
        return [dict(event, **{field: head + marker})]

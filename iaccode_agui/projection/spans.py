"""Span bookkeeping for one AG-UI run: text, reasoning, tool calls and steps.

AG-UI requires every span to open before use, never open twice and close before the run ends, while the
A2A runtime reuses message ids across a turn (``<taskId>-message``) and across runs.  This tracker hands
out AG-UI ids that are unique within the run and emits the start/end events at the right moments, so
the mapping code only says "text for message X" or "tool Y finished".

Message boundaries follow the conversation a client rebuilds from the events: a tool call ends the text
message it follows (its ``parentMessageId``), so text after the tool's result is a message of its own and
lands below the result.  Ids stay a function of the events already emitted (``_unique``), which is what
lets a run adopted from its log (``replay``) and a re-attached client see the same ids.  A resumed run's
text continues the runtime's message of the turn it resumes; its ``scope`` keeps those ids apart from the
ones the earlier runs of the execution gave the same runtime message.
"""
from typing import Dict, List, Optional, Set

from iaccode_agui.projection import events as ev
from iaccode_agui.projection.events import Event


class SpanTracker:
    def __init__(self, run_id: str, scope: str = "") -> None:
        self.run_id = run_id
        self._suffix = "@" + scope if scope else ""
        self._used_ids: Set[str] = set()
        self._text_ids: Dict[str, str] = {}        # source id -> AG-UI id of the open message
        self._text_order: List[str] = []            # source ids of open messages, oldest first
        self.current_text: Optional[str] = None     # source id of the message that plain text continues
        self.text_buffers: Dict[str, List[str]] = {}  # source id -> text emitted in this run (for digests)
        self._reasoning_id: Optional[str] = None
        self._reasoning_count = 0
        self._tools_open: Dict[str, bool] = {}      # toolCallId -> args ended?
        self._tools_started: Set[str] = set()
        self._tool_results: Set[str] = set()
        self._steps_open: List[str] = []
        self.emitted_text = False

    # ---- ids ----------------------------------------------------------------------------------
    def _unique(self, wanted: str) -> str:
        candidate, n = wanted, 1
        while candidate in self._used_ids:
            n += 1
            candidate = "%s~%d" % (wanted, n)
        self._used_ids.add(candidate)
        return candidate

    # ---- text ---------------------------------------------------------------------------------
    def text(self, source_id: str, delta: str, *, exclusive: bool = True) -> List[Event]:
        """Append ``delta`` to message ``source_id``; ``exclusive`` closes other open messages first."""
        if not delta:
            return []
        out = self.close_reasoning()
        agui_id = self._text_ids.get(source_id)
        if agui_id is None:
            if exclusive:
                out.extend(self.close_texts())
            agui_id = self._unique(source_id + self._suffix)
            self._text_ids[source_id] = agui_id
            self._text_order.append(source_id)
            self.text_buffers.setdefault(source_id, [])
            out.append(ev.text_start(agui_id))
        out.append(self._content(source_id, agui_id, delta))
        return out

    def continue_text(self, source_id: str, delta: str) -> Optional[Event]:
        """The one event ``text`` emits for ``delta`` when message ``source_id`` is open and no reasoning
        span is (nearly every delta of a stream); None, with nothing changed, in any other case."""
        agui_id = self._text_ids.get(source_id)
        if agui_id is None or self._reasoning_id is not None:
            return None
        return self._content(source_id, agui_id, delta)

    def _content(self, source_id: str, agui_id: str, delta: str) -> Event:
        self.current_text = source_id
        self.text_buffers[source_id].append(delta)
        self.emitted_text = True
        return ev.text_content(agui_id, delta)

    def plain_source(self) -> str:
        """The source of text that names no message: the runtime message spoken last (after a tool call
        that ended it, a new AG-UI message of the same source), else one per run."""
        return self.current_text or "assistant-" + self.run_id

    def close_text(self, source_id: Optional[str]) -> List[Event]:
        agui_id = self._text_ids.pop(source_id, None) if source_id is not None else None
        if agui_id is None:
            return []
        self._text_order.remove(source_id)
        return [ev.text_end(agui_id)]

    def close_texts(self) -> List[Event]:
        out: List[Event] = []
        for source_id in list(self._text_order):
            out.extend(self.close_text(source_id))
        return out

    # ---- reasoning ----------------------------------------------------------------------------
    def reasoning(self, delta: str, base_id: Optional[str] = None) -> List[Event]:
        if not delta:
            return []
        out: List[Event] = []
        if self._reasoning_id is None:
            self._reasoning_count += 1
            wanted = "reasoning-" + (base_id or self.run_id)
            self._reasoning_id = self._unique(wanted)
            out.append(ev.reasoning_start(self._reasoning_id))
            out.append(ev.reasoning_message_start(self._reasoning_id))
        out.append(ev.reasoning_content(self._reasoning_id, delta))
        return out

    def close_reasoning(self) -> List[Event]:
        if self._reasoning_id is None:
            return []
        rid, self._reasoning_id = self._reasoning_id, None
        return [ev.reasoning_message_end(rid), ev.reasoning_end(rid)]

    # ---- tools --------------------------------------------------------------------------------
    def tool_start(self, tool_call_id: str, name: str, source_id: Optional[str] = None) -> List[Event]:
        """Open a tool call of message ``source_id`` (default: the message spoken last).

        The call ends that message if it is open and names it as its parent, so the client's assistant
        message holds the text and the call, the result follows it, and later text starts a new message.
        With no open message there is no parent: the client makes an assistant message for the call.
        """
        if tool_call_id in self._tools_started:
            return []
        out = self.close_reasoning()
        source = self.current_text if source_id is None else source_id
        parent = self._text_ids.get(source) if source is not None else None
        out.extend(self.close_text(source))
        self._tools_started.add(tool_call_id)
        self._tools_open[tool_call_id] = False
        out.append(ev.tool_start(tool_call_id, name or "tool", parent))
        return out

    def tool_args_complete(self, tool_call_id: str, name: str, args_json: str,
                           source_id: Optional[str] = None) -> List[Event]:
        out = self.tool_start(tool_call_id, name, source_id)
        if self._tools_open.get(tool_call_id) is False:
            if args_json:
                out.append(ev.tool_args(tool_call_id, args_json))
            out.append(ev.tool_end(tool_call_id))
            self._tools_open[tool_call_id] = True
        return out

    def tool_result(self, tool_call_id: str, content: str) -> List[Event]:
        if tool_call_id in self._tool_results:
            return []
        out: List[Event] = []
        if self._tools_open.get(tool_call_id) is False:
            out.append(ev.tool_end(tool_call_id))
            self._tools_open[tool_call_id] = True
        self._tool_results.add(tool_call_id)
        out.append(ev.tool_result(tool_call_id, content))
        return out

    # ---- steps --------------------------------------------------------------------------------
    def step_open(self, name: str) -> List[Event]:
        if name in self._steps_open:
            return []
        self._steps_open.append(name)
        return [ev.step_started(name)]

    def step_close(self, name: str) -> List[Event]:
        if name not in self._steps_open:
            return []
        self._steps_open.remove(name)
        return [ev.step_finished(name)]

    def step_is_open(self, name: str) -> bool:
        return name in self._steps_open

    # ---- everything -----------------------------------------------------------------------------
    def close_all(self) -> List[Event]:
        """Balance every span before a terminal event (interrupts included)."""
        out = self.close_reasoning()
        for tool_call_id, ended in list(self._tools_open.items()):
            if not ended:
                out.append(ev.tool_end(tool_call_id))
                self._tools_open[tool_call_id] = True
        out.extend(self.close_texts())
        for name in list(reversed(self._steps_open)):
            out.extend(self.step_close(name))
        return out

    # ---- re-building from what was already sent -----------------------------------------------
    def replay(self, event: Event) -> None:
        """Account for ``event`` as already emitted (a run adopted from its log continues its spans)."""
        kind = event.get("type")
        if kind == "TEXT_MESSAGE_START":
            agui_id = event["messageId"]
            source_id = self._source_of(agui_id)
            self._used_ids.add(agui_id)
            self._text_ids[source_id] = agui_id
            if source_id not in self._text_order:
                self._text_order.append(source_id)
            self.text_buffers.setdefault(source_id, [])
        elif kind == "TEXT_MESSAGE_CONTENT":
            source_id = self._source_for(event["messageId"])
            self.text_buffers.setdefault(source_id, []).append(event.get("delta") or "")
            self.current_text = source_id
            self.emitted_text = True
        elif kind == "TEXT_MESSAGE_END":
            source_id = self._source_for(event["messageId"])
            if self._text_ids.get(source_id) == event["messageId"]:
                self.close_text(source_id)
        elif kind == "REASONING_START":
            self._used_ids.add(event["messageId"])
            self._reasoning_id = event["messageId"]
            self._reasoning_count += 1
        elif kind == "REASONING_END":
            self._reasoning_id = None
        else:
            self._replay_tool_or_step(kind, event)

    def _replay_tool_or_step(self, kind: Optional[str], event: Event) -> None:
        if kind == "TOOL_CALL_START":
            self._tools_started.add(event["toolCallId"])
            self._tools_open[event["toolCallId"]] = False
        elif kind == "TOOL_CALL_END":
            self._tools_open[event["toolCallId"]] = True
        elif kind == "TOOL_CALL_RESULT":
            self._tool_results.add(event["toolCallId"])
        elif kind == "STEP_STARTED" and event["stepName"] not in self._steps_open:
            self._steps_open.append(event["stepName"])
        elif kind == "STEP_FINISHED" and event["stepName"] in self._steps_open:
            self._steps_open.remove(event["stepName"])

    def _source_for(self, agui_id: str) -> str:
        for source_id, open_id in self._text_ids.items():
            if open_id == agui_id:
                return source_id
        return self._source_of(agui_id)

    def _source_of(self, agui_id: str) -> str:
        """The source id an AG-UI text id was made from (``_unique`` appends ``~<n>`` to repeated ids)."""
        head, sep, tail = agui_id.rpartition("~")
        head = head if sep and tail.isdigit() and head else agui_id
        if self._suffix and head.endswith(self._suffix) and len(head) > len(self._suffix):
            return head[:-len(self._suffix)]
        return head

    def streamed_text(self) -> str:
        """All text this run has shown, in the order the messages started."""
        return "".join("".join(parts) for parts in self.text_buffers.values())

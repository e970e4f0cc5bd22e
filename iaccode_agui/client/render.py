"""Turning AG-UI events into terminal lines.

Assistant text and reasoning arrive as deltas and are written as they come, so the renderer tracks whether
the cursor sits mid-line: every block line (a tool call, a step, an error) first closes the open line, which
keeps interleaved streams (text that opens a tool call before it ends) readable.  Colour and the non-ASCII
glyphs are both optional so output piped to a file or an old console stays plain.

While a run is silent the user still sees that it is alive: a "waiting" line with the seconds of silence, redrawn
in place on a terminal (and erased by the next output), or, in a transcript, a plain line each time the silence
doubles, so a long quiet run adds a handful of lines rather than one per second.
"""
import contextlib
import json
import os
import threading
import time
from typing import Any, Dict, Iterator, List, Optional, Set, TextIO, Tuple

from iaccode_agui.projection.events import (ARTIFACT_EVENT, PIPELINE_EVENT, SESSION_EVENT,
                                            TOOL_PROGRESS_EVENT)

Event = Dict[str, Any]

_STYLES = {"dim": "2", "bold": "1", "red": "31", "green": "32", "yellow": "33", "cyan": "36"}
_UNICODE = {"reasoning": "\u2026 ", "tool": "\u2699 ", "result": "  \u21b3 ", "step": "\u25b8 ", "done": "\u2713 ",
            "info": "\u00b7 ", "ask": "? ", "wait": "\u00b7 waiting\u2026 "}
_ASCII = {"reasoning": "... ", "tool": "* ", "result": "  -> ", "step": "> ", "done": "+ ", "info": "- ",
          "ask": "? ", "wait": "- waiting... "}
ARGS_LIMIT = 160
RESULT_LIMIT = 200
WAIT_SHOWN_AFTER = 2.0     # seconds of silence before a terminal shows the waiting line
WAIT_FIRST_LINE = 10.0     # ... and before a transcript gets its first one (then at each doubling)
WAIT_TICK = 0.25
ERASE_LINE = "\r\x1b[K"


def color_wanted(out: TextIO, no_color: bool = False) -> bool:
    """Colour only on an interactive terminal, and never when the user or ``NO_COLOR`` says no."""
    if no_color or os.environ.get("NO_COLOR"):
        return False
    return is_terminal(out)


def is_terminal(out: TextIO) -> bool:
    isatty = getattr(out, "isatty", None)
    try:
        return bool(isatty and isatty())
    except (OSError, ValueError):
        return False


def _glyphs_for(out: TextIO) -> Dict[str, str]:
    encoding = getattr(out, "encoding", None)
    if not encoding:
        return _UNICODE
    try:
        "".join(_UNICODE.values()).encode(encoding)
    except (UnicodeEncodeError, LookupError):
        return _ASCII
    return _UNICODE


def shorten(text: str, limit: int) -> str:
    text = " ".join(text.split()) if "\n" in text else text
    return text if len(text) <= limit else text[:limit - 1] + "\u2026"


def compact_json(raw: str) -> str:
    """Tool arguments arrive as a JSON string; re-serialise them tightly when they parse."""
    try:
        return json.dumps(json.loads(raw), ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    except ValueError:
        return raw


class Renderer:
    """Writes one run's events to ``out``; one instance can serve many runs on the same thread."""

    def __init__(self, out: TextIO, color: bool = False) -> None:
        self.out = out
        self.color = color
        self.glyphs = _glyphs_for(out)
        self._at_line_start = True
        self._stream: Optional[str] = None  # "text" or "reasoning" while deltas are being written
        self._tools: Dict[str, List[str]] = {}  # open tool calls: id -> [name, args so far]
        # Parallel messages (pipeline candidates) stream interleaved.  One message is written live; the
        # others are held, in arrival order, and each is written as its own block once the live one ends.
        self._live: Optional[Tuple[str, str]] = None                 # (kind, message id)
        self._held: Dict[Tuple[str, str], List[str]] = {}            # deltas of waiting messages
        self._ended: Set[Tuple[str, str]] = set()                    # waiting messages that already ended
        self.terminal = is_terminal(out)
        self._lock = threading.RLock()       # the waiting ticker writes from its own thread
        self._silent_since: Optional[float] = None   # set while a run is being waited for
        self._next_plain = WAIT_FIRST_LINE
        self._drawn = False                  # a waiting line is on the terminal, to be erased

    # ---- low level ------------------------------------------------------------------------------
    def style(self, text: str, *styles: str) -> str:
        if not self.color or not styles or not text:
            return text
        codes = ";".join(_STYLES[name] for name in styles)
        return "\x1b[%sm%s\x1b[0m" % (codes, text)

    def write(self, text: str, *styles: str) -> None:
        if not text:
            return
        with self._lock:
            if self._drawn:
                self.out.write(ERASE_LINE)
                self._drawn = False
            self.out.write(self.style(text, *styles))
            self._at_line_start = text.endswith("\n")
            self.out.flush()
            if self._silent_since is not None:
                self._silent_since, self._next_plain = time.monotonic(), WAIT_FIRST_LINE

    # ---- waiting ----------------------------------------------------------------------------------
    @contextlib.contextmanager
    def waiting(self) -> Iterator[None]:
        """Show the waiting line whenever the run inside this block stays silent for a while."""
        stop = threading.Event()
        with self._lock:
            self._silent_since, self._next_plain = time.monotonic(), WAIT_FIRST_LINE
        ticker = threading.Thread(target=self._tick_until, args=(stop,), name="client-waiting", daemon=True)
        ticker.start()
        try:
            yield
        finally:
            stop.set()
            ticker.join(1.0)
            with self._lock:
                self._silent_since = None
                if self._drawn:
                    self.out.write(ERASE_LINE)
                    self.out.flush()
                    self._drawn = False

    def _tick_until(self, stop: threading.Event) -> None:
        while not stop.wait(WAIT_TICK):
            with self._lock:
                self._tick()

    def _tick(self) -> None:
        if self._silent_since is None or not self._at_line_start:
            return    # mid-line the streamed text itself is the latest sign of life
        silent = time.monotonic() - self._silent_since
        text = self.glyphs["wait"] + "%d s" % silent
        if self.terminal and silent >= WAIT_SHOWN_AFTER:
            self.out.write(ERASE_LINE + self.style(text, "dim"))
            self._drawn = True
        elif not self.terminal and silent >= self._next_plain:
            self.out.write(text + "\n")
            self._next_plain *= 2
        else:
            return
        self.out.flush()

    def end_line(self) -> None:
        """Close a line left open by streamed deltas (no blank lines otherwise)."""
        if not self._at_line_start:
            self.write("\n")
        self._stream = None

    def line(self, text: str, *styles: str) -> None:
        self.end_line()
        self.write(text, *styles)
        self.write("\n")

    def info(self, text: str) -> None:
        self.line(self.glyphs["info"] + text, "dim")

    def error(self, code: str, message: str, label: str = "error") -> None:
        self.line("%s %s: %s" % (label, code, message), "red")

    # ---- streamed deltas ------------------------------------------------------------------------
    def _delta(self, kind: str, delta: str) -> None:
        prefix = self.glyphs["reasoning"] if kind == "reasoning" else ""
        styles = ("dim",) if kind == "reasoning" else ()
        if self._stream != kind:
            self.end_line()
            self._stream = kind
            self.write(prefix, *styles)
        elif self._at_line_start:
            self.write(prefix, *styles)
        if prefix and "\n" in delta:
            head, _, tail = delta.rpartition("\n")
            self.write(head.replace("\n", "\n" + prefix) + "\n", *styles)
            if tail:
                self.write(prefix + tail, *styles)
            return
        self.write(delta, *styles)

    # ---- events ---------------------------------------------------------------------------------
    def event(self, event: Event) -> None:
        kind = event.get("type")
        handler = getattr(self, "_on_" + str(kind).lower(), None)
        if handler is not None:
            handler(event)

    def _on_text_message_content(self, event: Event) -> None:
        self._message_delta("text", event)

    def _on_text_message_end(self, event: Event) -> None:
        self._message_end("text", event)

    def _on_reasoning_message_content(self, event: Event) -> None:
        self._message_delta("reasoning", event)

    def _on_reasoning_message_end(self, event: Event) -> None:
        self._message_end("reasoning", event)

    def _message_delta(self, kind: str, event: Event) -> None:
        key = (kind, str(event.get("messageId", "")))
        delta = str(event.get("delta", ""))
        if self._live is None and key not in self._held:
            self._live = key
        if key == self._live:
            self._delta(kind, delta)
        else:
            self._held.setdefault(key, []).append(delta)

    def _message_end(self, kind: str, event: Event) -> None:
        key = (kind, str(event.get("messageId", "")))
        if key != self._live:
            if key in self._held:
                self._ended.add(key)
            return
        self.end_line()
        self._live = None
        self._promote()

    def _promote(self) -> None:
        """Write held messages in arrival order; the first one still open becomes the live one."""
        while self._held:
            key = next(iter(self._held))
            self._delta(key[0], "".join(self._held.pop(key)))
            if key not in self._ended:
                self._live = key
                return
            self._ended.discard(key)
            self.end_line()

    def flush_messages(self) -> None:
        """Write everything still held (the run ended, or a block line must not overtake held text)."""
        self._live = None
        self._ended.update(self._held)
        self._promote()
        self.end_line()

    def _on_tool_call_start(self, event: Event) -> None:
        self._tools[str(event.get("toolCallId"))] = [str(event.get("toolCallName", "tool")), ""]

    def _on_tool_call_args(self, event: Event) -> None:
        entry = self._tools.get(str(event.get("toolCallId")))
        if entry is not None:
            entry[1] += str(event.get("delta", ""))

    def _on_tool_call_end(self, event: Event) -> None:
        self._show_tool(str(event.get("toolCallId")))

    def _show_tool(self, tool_call_id: str) -> None:
        entry = self._tools.pop(tool_call_id, None)
        if entry is not None:
            name, args = entry
            self.line("%s%s(%s)" % (self.glyphs["tool"], name, shorten(compact_json(args), ARGS_LIMIT)), "cyan")

    def _on_tool_call_result(self, event: Event) -> None:
        tool_call_id = str(event.get("toolCallId"))
        self._show_tool(tool_call_id)  # a result without its END still names the call first
        self._result(str(event.get("content", "")))

    def _result(self, content: str) -> None:
        lines = content.splitlines() or [""]
        extra = " (+%d lines)" % (len(lines) - 1) if len(lines) > 1 else ""
        self.line(self.glyphs["result"] + shorten(lines[0], RESULT_LIMIT) + extra, "dim")

    # ---- a stored conversation (``--history``) ----------------------------------------------------
    def conversation(self, messages: List[Dict[str, Any]], truncated: bool) -> None:
        """A thread's stored conversation, one block per message, as a run would have shown it."""
        if truncated:
            self.info("earlier messages were dropped from this thread's history")
        for message in messages:
            handler = getattr(self, "_stored_" + str(message.get("role")), None)
            if handler is not None:
                handler(message)
        self.end_line()

    def _stored_user(self, message: Dict[str, Any]) -> None:
        content = message.get("content")
        if isinstance(content, list):
            content = " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
        self.line("> " + str(content or ""), "bold")

    def _stored_assistant(self, message: Dict[str, Any]) -> None:
        if message.get("content"):
            self.line(str(message["content"]))
        for call in message.get("toolCalls") or []:
            function = call.get("function") or {}
            self._tools[str(call.get("id"))] = [str(function.get("name", "tool")), str(function.get("arguments", ""))]
            self._show_tool(str(call.get("id")))

    def _stored_tool(self, message: Dict[str, Any]) -> None:
        self._result(str(message.get("content", "")))

    def _stored_activity(self, message: Dict[str, Any]) -> None:
        content = message.get("content") if isinstance(message.get("content"), dict) else {}
        interrupt = content.get("interrupt")
        if not isinstance(interrupt, dict):
            self.info("activity " + str(message.get("activityType", "")))
            return
        self.line(self.glyphs["ask"] + str(interrupt.get("message", "")), "yellow")
        answer = content.get("answer")
        if isinstance(answer, dict):
            shown = answer.get("payload") if answer.get("status") == "resolved" else answer.get("status")
            self.line(self.glyphs["result"] + compact_json(json.dumps(shown, ensure_ascii=False)), "dim")

    def _on_step_started(self, event: Event) -> None:
        self.line(self.glyphs["step"] + "step " + str(event.get("stepName", "")), "bold")

    def _on_step_finished(self, event: Event) -> None:
        self.line(self.glyphs["done"] + "step " + str(event.get("stepName", "")), "dim")

    def _on_activity_snapshot(self, event: Event) -> None:
        self.info("activity " + str(event.get("activityType", "")))

    def _on_custom(self, event: Event) -> None:
        name = str(event.get("name", ""))
        value = event.get("value")
        value = value if isinstance(value, dict) else {}
        if name == SESSION_EVENT:
            return
        if name == ARTIFACT_EVENT:
            label = value.get("name") or value.get("artifactId") or "?"
            self.info("artifact %s" % label)
        elif name == PIPELINE_EVENT:
            self.info("pipeline %s" % (value.get("eventType") or "?"))
        elif name == TOOL_PROGRESS_EVENT:
            self.info("progress %s" % (value.get("name") or value.get("toolUseId") or "?"))
        else:
            self.info(name)

    def _on_run_error(self, event: Event) -> None:
        self.flush_messages()
        self.error(str(event.get("code", "ERROR")), str(event.get("message", "")), label="RUN_ERROR")

    def _on_run_finished(self, event: Event) -> None:
        self.flush_messages()
        for tool_call_id in list(self._tools):
            self._show_tool(tool_call_id)
        self.end_line()

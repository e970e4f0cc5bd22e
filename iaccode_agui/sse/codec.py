"""Server-Sent Events codec, on bytes, without I/O.

The A2A runtime frames every JSON-RPC stream as SSE and the AG-UI side answers in SSE too, so one codec
serves both directions.  The decoder works on raw bytes rather than text because the network splits the
stream anywhere: inside a CRLF pair, inside a multi-byte UTF-8 character, inside a field name.  Decoding
happens per complete line, which is the only place where a split character can no longer be pending.

The decoder sits on the hot path (one call per socket read, thousands of events per second), so it never
walks the input byte by byte: line ends are normalised and split with ``bytes`` methods, and input
without any line end is only appended to a buffer.
"""
import json
from json import encoder as _json_encoder
from typing import Any, Callable, List, NamedTuple, Optional, Tuple

__all__ = [
    "SSEEvent",
    "SSEDecodeError",
    "SSEDecoder",
    "encode_event",
    "encode_json_event",
    "encode_comment",
    "HEARTBEAT",
    "DEFAULT_MAX_LINE_BYTES",
]

DEFAULT_MAX_LINE_BYTES = 16 * 1024 * 1024

#: The idle keep-alive the AG-UI side writes; a comment so that no client treats it as an event.
HEARTBEAT = b": heartbeat\n\n"

_BOM = "\ufeff"
_new_event = tuple.__new__     # builds an SSEEvent without the NamedTuple constructor's Python frame


class SSEEvent(NamedTuple):
    """One dispatched event.

    ``id`` follows the SSE "last event ID" rule: it is the most recent ``id:`` value seen on the stream
    so far (it persists across events), or None when the stream never sent one.
    """

    event: str
    data: str
    id: Optional[str]


class SSEDecodeError(ValueError):
    """The byte stream is not acceptable SSE (invalid UTF-8 or an oversize line).

    Replacing bad bytes would silently corrupt the JSON inside ``data:``; failing loudly lets the caller
    treat the upstream as broken instead.  The decoder is unusable after raising it.
    """


class SSEDecoder:
    """Incremental SSE decoder fed with arbitrary byte chunks.

    ``feed()`` returns the events completed by that chunk, in order.  ``comments`` counts comment lines
    (pings), which callers use for metrics and tests.  ``max_line_bytes`` bounds the memory a peer can make
    us hold for a single line that never ends.
    """

    __slots__ = (
        "_buf", "_pending_cr", "_data", "_event", "_last_id", "_started", "_max", "comments", "retry",
    )

    def __init__(self, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
        self._buf = bytearray()          # the unterminated tail of the current line
        self._pending_cr = False         # the previous chunk ended in CR: a leading LF now is the same line end
        self._data: List[str] = []       # data lines of the event being built
        self._event = ""
        self._last_id: Optional[str] = None
        self._started = False            # whether the first line (which may carry a BOM) was seen
        self._max = max_line_bytes
        self.comments = 0
        self.retry: Optional[int] = None  # last valid ``retry:`` value; kept for completeness, never acted on

    @property
    def has_pending(self) -> bool:
        """True when bytes of an event that was never terminated by a blank line are held.

        A body that ends in this state was cut short; callers that know the body ended (rather than the
        socket breaking) use it to tell a truncated stream from a clean one.
        """
        return bool(self._buf) or bool(self._data) or bool(self._event)

    def feed(self, chunk: bytes) -> List[SSEEvent]:
        """Consume ``chunk`` and return the events it completes."""
        if self._pending_cr and chunk:
            self._pending_cr = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        if not chunk:
            return []
        if b"\n" not in chunk and b"\r" not in chunk:
            # No line end: only grow the tail.  Appending (instead of re-joining) keeps a long line that
            # arrives in many small reads linear in its size.
            self._buf += chunk
            if len(self._buf) > self._max:
                raise SSEDecodeError("SSE line exceeds %d bytes" % self._max)
            return []
        if self._buf:
            self._buf += chunk
            data = bytes(self._buf)
        else:
            data = chunk
        if data[-1:] == b"\r":
            # This CR ends a line now; an LF opening the next chunk belongs to it.
            self._pending_cr = True
        end = max(data.rfind(b"\n"), data.rfind(b"\r")) + 1
        tail = data[end:]
        if len(tail) > self._max:
            raise SSEDecodeError("SSE line exceeds %d bytes" % self._max)
        self._buf = bytearray(tail)
        # Every complete line is decoded in one call (a line end never splits a UTF-8 sequence), which is
        # what keeps the decoder cheap per event on the hot path.
        try:
            text = data[:end].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SSEDecodeError("SSE stream is not valid UTF-8: %s" % exc) from None
        if end > self._max:
            self._check_line_lengths(text)
        return self._events_of(text)

    def _check_line_lengths(self, text: str) -> None:
        for line in _split_lines(text):
            if len(line) * 4 > self._max and len(line.encode("utf-8")) > self._max:
                raise SSEDecodeError("SSE line exceeds %d bytes" % self._max)

    def _events_of(self, text: str) -> List[SSEEvent]:
        """The events of ``text``, which is whole lines (it ends with a line end).

        It is cut at blank lines, in the stream's own line ends (A2A runtimes send CRLF), so the common
        event, a single ``data: `` line, is dispatched without rewriting or walking the text; any other
        piece goes line by line.  Each piece but the last is followed by the line end of its last line
        plus one blank line, i.e. it ends an event.
        """
        crlf = "\r\n" in text
        if not crlf and "\r" in text:
            text = text.replace("\r", "\n")          # lone CRs as line ends
        pieces = text.split("\r\n\r\n" if crlf else "\n\n")
        last = pieces.pop()
        events: List[SSEEvent] = []
        line = self._line
        for piece in pieces:
            if piece[:6] == "data: " and self._started and not self._data and not self._event \
                    and "\n" not in piece and "\r" not in piece:
                events.append(_new_event(SSEEvent, ("message", piece[6:], self._last_id)))
                continue
            for item in _split_lines(piece):
                line(item, events)
            line("", events)
        if last:
            lines = _split_lines(last)
            lines.pop()                                 # the empty string after its final line end
            for item in lines:
                line(item, events)
        return events

    def close(self) -> List[SSEEvent]:
        """Signal the end of input.

        Per the SSE specification an event not terminated by a blank line is discarded, never dispatched,
        so this always returns an empty list; check ``has_pending`` first to learn whether anything was
        dropped.  It exists so callers treat every input source the same way.
        """
        self._buf = bytearray()
        self._data = []
        self._event = ""
        self._pending_cr = False
        return []

    def _line(self, line: str, events: List[SSEEvent]) -> None:
        if not self._started:
            self._started = True
            if line.startswith(_BOM):
                line = line[1:]
        if not line:
            if self._data:
                events.append(_new_event(SSEEvent, (self._event or "message", "\n".join(self._data), self._last_id)))
                self._data = []
            self._event = ""
            return
        if line[0] == ":":
            self.comments += 1
            return
        field, sep, value = line.partition(":")
        if sep and value[:1] == " ":
            value = value[1:]
        self._field(field, value)

    def _field(self, field: str, value: str) -> None:
        if field == "data":
            self._data.append(value)
        elif field == "event":
            self._event = value
        elif field == "id":
            if "\x00" not in value:
                self._last_id = value
        elif field == "retry":
            if value.isdigit() and value.isascii():
                self.retry = int(value)
        # Any other field is ignored, as the specification requires.


def _split_lines(text: str) -> List[str]:
    # str.splitlines() would also split on \x1c, \u2028 and friends, which SSE treats as ordinary text.
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text.split("\n")


def encode_event(data: str, event_id: Optional[int] = None, *, event: Optional[str] = None) -> bytes:
    """Frame ``data`` as one SSE event with LF line ends.

    Line breaks inside ``data`` would end the field early, so each line becomes its own ``data:`` line;
    a conforming decoder joins them back with LF (CR and CRLF come back as LF).
    """
    parts = []
    if event is not None:
        if "\r" in event or "\n" in event:
            raise ValueError("an SSE event name cannot contain a line break")
        parts.append("event: %s\n" % event)
    if event_id is not None:
        parts.append("id: %d\n" % event_id)
    if "\n" in data or "\r" in data:
        parts.extend("data: %s\n" % line for line in _split_lines(data))
    else:
        parts.append("data: %s\n" % data)
    parts.append("\n")
    return "".join(parts).encode("utf-8")


def _compact_json_encoder() -> Callable[[Any], str]:
    """Compact, non-ASCII-preserving ``json`` encoding, built once.

    ``JSONEncoder.encode`` builds a fresh C encoder on every call, which is a good part of the cost of
    encoding a small event; the C encoder itself is reusable.  Without the circular-reference check:
    events are trees built by this package (a cycle would still stop, as a RecursionError).  Where the C
    accelerator is missing the plain encoder serves, with the same output.
    """
    plain = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
    make = getattr(_json_encoder, "c_make_encoder", None)
    basestring = getattr(_json_encoder, "c_encode_basestring", None)
    if make is None or basestring is None:
        return plain.encode
    encode = make(None, plain.default, basestring, None, ":", ",", False, False, True)

    def compact(value: Any) -> str:
        if isinstance(value, dict):
            return "".join(encode(value, 0))
        return plain.encode(value)
    return compact


_COMPACT = _compact_json_encoder()
_STRING = getattr(_json_encoder, "c_encode_basestring", None) or _json_encoder.py_encode_basestring

# The most frequent events (text and reasoning deltas, with the timestamp the channel adds) have one shape:
# these four keys in this order, three strings and an int.  Filling a preformatted frame with the
# encoder's own string function gives exactly the bytes the general encoder gives, without its dict walk.
_DELTA_KEYS = ("type", "messageId", "delta", "timestamp")
_DELTA_FRAME = 'id: %%d\ndata: {"type":%s,"messageId":%s,"delta":%%s,"timestamp":%%d}\n\n'
# The type and message id repeat for every delta of a message: the frame with them filled in is kept for
# the last pair seen (one tuple, replaced whole, so concurrent runs never see a torn entry).
_last_delta: Tuple[str, str, str] = ("", "", _DELTA_FRAME % ('""', '""'))


def _delta_frame(kind: str, message_id: str) -> str:
    """The format of a delta frame of this type and message (a ``%`` in their JSON doubled)."""
    global _last_delta
    last = _last_delta
    if last[0] == kind and last[1] == message_id:
        return last[2]
    frame = _DELTA_FRAME % (_STRING(kind).replace("%", "%%"), _STRING(message_id).replace("%", "%%"))
    _last_delta = (kind, message_id, frame)
    return frame


def encode_json_event(value: Any, event_id: int) -> bytes:
    """Frame ``value`` as compact JSON in one SSE event with an ``id:``.

    Compact JSON never contains a raw line break (the encoder escapes them inside strings), so the data
    is always one line and needs none of ``encode_event``'s splitting.  A lone surrogate (JSON can carry
    one as an escape, UTF-8 cannot) can only sit inside a JSON string, where the ``\\udXXX`` escape the
    ``backslashreplace`` handler writes is the JSON spelling of the same character.
    """
    if value.__class__ is dict and tuple(value) == _DELTA_KEYS:
        kind, message_id, delta, stamp = value.values()
        if kind.__class__ is str and message_id.__class__ is str and delta.__class__ is str \
                and stamp.__class__ is int:
            return (_delta_frame(kind, message_id) % (event_id, _STRING(delta), stamp)).encode(
                "utf-8", "backslashreplace")
    return ("id: %d\ndata: %s\n\n" % (event_id, _COMPACT(value))).encode("utf-8", "backslashreplace")


def encode_comment(text: str) -> bytes:
    """Frame ``text`` as an SSE comment block (ignored by every client, so it is safe as a keep-alive)."""
    if "\n" in text or "\r" in text:
        return ("".join(": %s\n" % line for line in _split_lines(text)) + "\n").encode("utf-8")
    return (": %s\n\n" % text).encode("utf-8")

"""The byte format of a run's durable event log (pure: bytes in, records out).

A log is a magic line followed by records.  Each record is ``length (4 bytes) | crc32 (4 bytes) | payload``
with both numbers big-endian; the payload's first byte says what it is:

- ``H`` -- the header, once, first: a JSON object naming the run (thread, run, execution, invocation,
  the writing process and its runtime), so a reader can check a request against it.
- ``E`` -- one published event: its SSE id (8 bytes), the length of its type name (1 byte), the type name,
  then the exact SSE frame that was (or will be) sent to clients.  Keeping the frame verbatim means a
  replay sends the same bytes, the same id and the same timestamp as the live stream did.
- ``U`` -- the run's token usage totals so far (a JSON object ``{"usage": [...]}``, the shape of
  ``RUN_FINISHED.usage``), written when they change: they reach clients only with the terminal event,
  so a process that takes the run over after a crash starts from them instead of from zero.
- ``Z`` -- the run's channel closed: nothing follows.  A JSON object with the outcome.

A process killed in the middle of a write leaves a record that is short or whose checksum does not match;
``parse`` stops before it, so a torn tail is never mistaken for an event.  While the writer is alive the
same condition only means "not written yet": readers wait for more bytes instead of giving up.
"""
import dataclasses
import json
import struct
import zlib
from typing import Any, Dict, List, Optional, Tuple

MAGIC = b"AGUIRUNLOG1\n"
KIND_HEADER = "H"
KIND_EVENT = "E"
KIND_CLOSE = "Z"
KIND_USAGE = "U"
MAX_RECORD_BYTES = 1 << 30        # a longer length field can only be damage

TERMINAL_TYPES = frozenset(["RUN_FINISHED", "RUN_ERROR"])

_PREFIX = struct.Struct(">II")
_EVENT = struct.Struct(">QB")


class LogFormatError(ValueError):
    """The bytes are not a run log at all (wrong magic or an unusable header)."""


@dataclasses.dataclass(frozen=True)
class Record:
    kind: str
    seq: int = -1                       # event records: the SSE id
    event_type: str = ""                # event records: the AG-UI event type
    frame: bytes = b""                  # event records: the encoded SSE frame
    fields: Optional[Dict[str, Any]] = None   # header and close records: their JSON object

    @property
    def terminal(self) -> bool:
        return self.kind == KIND_EVENT and self.event_type in TERMINAL_TYPES


def _frame(payload: bytes) -> bytes:
    return _PREFIX.pack(len(payload), zlib.crc32(payload) & 0xFFFFFFFF) + payload


def _json(fields: Dict[str, Any]) -> bytes:
    return json.dumps(fields, ensure_ascii=False, separators=(",", ":"), sort_keys=True).encode("utf-8")


def encode_start(header: Dict[str, Any]) -> bytes:
    """The first bytes of a new log: the magic line and the header record."""
    return MAGIC + _frame(KIND_HEADER.encode("ascii") + _json(header))


def _event_name(event_type: str) -> bytes:
    return event_type.encode("ascii", "replace")[:255]


def encode_event(seq: int, event_type: str, frame: bytes) -> bytes:
    name = _event_name(event_type)
    return _frame(b"E" + _EVENT.pack(seq, len(name)) + name + frame)


_EVENT_HEAD = struct.Struct(">cQB")      # the payload's kind byte, then what ``_EVENT`` holds
_NAMES: Dict[str, bytes] = {}            # event type -> its spelling in a record (a few dozen AG-UI types)
_NAMES_MAX = 256


def encode_events(events: List[Tuple[int, str, bytes]]) -> Tuple[List[bytes], List[int]]:
    """The records of ``(seq, type, frame)`` events, as pieces to join and each record's size.

    The same bytes as ``encode_event`` per event, built for a whole delivery batch at once: the frame is
    copied once (into the joined batch), its checksum continues the record head's instead of covering a
    concatenated copy, and a type's spelling is looked up instead of encoded again for every event.
    """
    parts: List[bytes] = []
    sizes: List[int] = []
    names = _NAMES
    head_of, prefix_of, crc32 = _EVENT_HEAD.pack, _PREFIX.pack, zlib.crc32
    for seq, event_type, frame in events:
        name = names.get(event_type)
        if name is None:
            name = _event_name(event_type)
            if len(names) < _NAMES_MAX:
                names[event_type] = name
        head = head_of(b"E", seq, len(name)) + name
        size = len(head) + len(frame)
        parts += (prefix_of(size, crc32(frame, crc32(head))), head, frame)
        sizes.append(_PREFIX.size + size)
    return parts, sizes


def encode_usage(usage: Any) -> bytes:
    return _frame(KIND_USAGE.encode("ascii") + _json({"usage": usage}))


def encode_close(outcome: Dict[str, Any]) -> bytes:
    return _frame(KIND_CLOSE.encode("ascii") + _json(outcome))


def check_magic(data: bytes) -> Optional[int]:
    """Offset of the first record; None while fewer bytes than the magic are there.

    Raises ``LogFormatError`` when the file starts with anything else.
    """
    if len(data) < len(MAGIC):
        if not MAGIC.startswith(data):
            raise LogFormatError("not a run log")
        return None
    if not data.startswith(MAGIC):
        raise LogFormatError("not a run log")
    return len(MAGIC)


def _decode(payload: bytes) -> Optional[Record]:
    kind = payload[:1].decode("latin-1")
    body = payload[1:]
    if kind == KIND_EVENT:
        if len(body) < _EVENT.size:
            return None
        seq, name_len = _EVENT.unpack_from(body)
        start = _EVENT.size + name_len
        if len(body) < start:
            return None
        return Record(KIND_EVENT, seq=seq, event_type=body[_EVENT.size:start].decode("ascii", "replace"),
                      frame=bytes(body[start:]))
    if kind in (KIND_HEADER, KIND_CLOSE, KIND_USAGE):
        try:
            fields = json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            return None
        return Record(kind, fields=fields if isinstance(fields, dict) else {})
    return None


def parse(data: bytes, offset: int = 0) -> Tuple[List[Record], int]:
    """Every complete, intact record from ``offset`` on, and the offset just after the last one.

    Parsing stops at the first record that is incomplete, fails its checksum or cannot be decoded: what
    follows it is a torn tail (the writer died) or bytes still being written (the writer is alive).
    """
    records: List[Record] = []
    view = memoryview(data)
    end = len(data)
    while end - offset >= _PREFIX.size:
        length, crc = _PREFIX.unpack_from(view, offset)
        if length == 0 or length > MAX_RECORD_BYTES or end - offset - _PREFIX.size < length:
            break
        start = offset + _PREFIX.size
        payload = bytes(view[start:start + length])
        if zlib.crc32(payload) & 0xFFFFFFFF != crc:
            break
        record = _decode(payload)
        if record is None:
            break
        records.append(record)
        offset = start + length
    return records, offset


def ends_with_close(tail: bytes) -> bool:
    """Whether the last bytes of a log are exactly one intact close record (the run's log is complete)."""
    at = tail.rfind(b'Z{"events":')
    if at < _PREFIX.size:
        return False
    records, used = parse(tail, at - _PREFIX.size)
    return used == len(tail) and [record.kind for record in records] == [KIND_CLOSE]


def event_json(frame: bytes) -> Dict[str, Any]:
    """The AG-UI event carried by one SSE frame written by this adapter (``id:`` then ``data:`` lines)."""
    lines = [line[5:].lstrip(b" ") for line in frame.split(b"\n") if line.startswith(b"data:")]
    if not lines:
        raise LogFormatError("the frame carries no data line")
    return json.loads(b"\n".join(lines).decode("utf-8"))

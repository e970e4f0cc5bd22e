"""The journal's files as bytes: the record format, a segment's header, and who has a journal here.

Kept apart from the writer (``journal``) because recovery and the prune tool read journals they do not
own, and the tests read segments, all without a live journal: none of this touches a lock or a thread.

A record is its body's length and CRC-32, then one JSON header line (its kind ``k``, the thread stem
``s``, its sequence number ``q``...) and the raw document bytes.  A segment starts with a header record
padded to ``HEADER_BYTES`` and naming the boot it was written in and the first sequence number that
counts; the records behind it follow until the first one that is torn, corrupt or out of sequence.
"""
import json
import os
import stat
import struct
import zlib
from typing import Any, Dict, Iterator, List, Optional, Set, Tuple

HEADER_BYTES = 512  # a segment's header is rewritten in place, so it has a fixed size
SEGMENTS = (".0.wal", ".1.wal")
LOCK_SUFFIX = ".lock"
_HEAD = struct.Struct(">II")  # body length, CRC-32 of the body
MAX_RECORD_BYTES = 16 << 20  # larger than any thread document plus its record header

PUT = "put"
DELETE = "del"
CANCEL = "cancel"
HEADER = "head"


def boot_id() -> str:
    """This boot's identity; a journal written in another boot has lived through an OS crash or a reboot."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as handle:
            return handle.read().strip()
    except OSError:
        return "unknown"


def encode(meta: Dict[str, Any], payload: bytes = b"") -> bytes:
    """One record: length, CRC-32, then a JSON header line and the raw document bytes."""
    body = json.dumps(meta, separators=(",", ":"), sort_keys=True).encode("utf-8") + b"\n" + payload
    return _HEAD.pack(len(body), zlib.crc32(body)) + body


def decode(data: bytes) -> Iterator[Tuple[Dict[str, Any], bytes]]:
    """Every whole record in ``data``; stops at the first torn or corrupt one (the tail a crash left)."""
    offset = 0
    while offset + _HEAD.size <= len(data):
        length, crc = _HEAD.unpack_from(data, offset)
        body = data[offset + _HEAD.size:offset + _HEAD.size + length]
        if length > MAX_RECORD_BYTES or len(body) != length or zlib.crc32(body) != crc:
            return
        head, _, payload = body.partition(b"\n")
        try:
            meta = json.loads(head.decode("utf-8"))
        except ValueError:
            return
        if not isinstance(meta, dict):
            return
        yield meta, payload
        offset += _HEAD.size + length


def header_record(meta: Dict[str, Any]) -> bytes:
    """A header padded to ``HEADER_BYTES``, so that rewriting it never moves the records behind it."""
    bare = encode(meta, b"")
    return encode(meta, b" " * (HEADER_BYTES - len(bare)))


def read_segment(path: str) -> Tuple[Optional[Dict[str, Any]], List[Tuple[Dict[str, Any], bytes]]]:
    """A segment's header and its current records; a missing, special or headerless file reads as empty.

    A recycled segment still holds older records past its new ones.  They are told apart by their
    sequence numbers, which only grow during a journal's life: the current records start at the header's
    ``first`` and each is above the one before, so reading stops at the first record that is not.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None, []
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            return None, []
        records = list(decode(handle.read()))
    if not records or records[0][0].get("k") != HEADER:
        return None, []
    header, current = records[0][0], []
    last = header.get("first", 0)
    last = last - 1 if type(last) is int else 0
    for meta, payload in records[1:]:
        seq = meta.get("q")
        if type(seq) is not int or seq <= last:
            break
        current.append((meta, payload))
        last = seq
    return header, current


def journal_owners(directory: str) -> List[str]:
    """Every owner id with a file in the journal directory."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    owners = set()
    for name in names:
        for suffix in SEGMENTS + (LOCK_SUFFIX,):
            if name.endswith(suffix) and not name.startswith("."):
                owners.add(name[:-len(suffix)])
    return sorted(owners)


class MentionScan:
    """Which thread stems any journal in the directory (live or orphaned) still holds records for.

    The prune tool asks this under a thread's locks before removing it: a removed file that a journal
    still names would be restored by that journal's recovery after a power loss.  Segments are re-read
    only when their size or identity changed since the last look.
    """

    def __init__(self, directory: str):
        self.directory = directory
        self._cache: Dict[str, Tuple[Tuple[int, int, int], Set[str]]] = {}

    def mentions(self, stem: str) -> bool:
        for owner in journal_owners(self.directory):
            for suffix in SEGMENTS:
                if stem in self._stems(os.path.join(self.directory, owner + suffix)):
                    return True
        return False

    def _stems(self, path: str) -> Set[str]:
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            self._cache.pop(path, None)
            return set()
        key = (info.st_ino, info.st_size, info.st_mtime_ns)
        cached = self._cache.get(path)
        if cached is None or cached[0] != key:
            _, records = read_segment(path)
            cached = (key, {str(meta.get("s")) for meta, _ in records if meta.get("k") in (PUT, DELETE)})
            self._cache[path] = cached
        return cached[1]

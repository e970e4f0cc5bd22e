"""Recovering the journals of dead stores: restore what a crash lost, make the rest durable, remove them.

A journal whose owner lock can be taken belongs to a dead process.  Its records are the thread writes made
durable since that journal's last checkpoint; the thread files themselves were written without fsync.
Which record wins is a pure rule (``decide``) over the newest record of a thread and what its file holds:

- Revisions order a thread's writes.  Every write, by any process, reads the file's revision under the
  thread's ``flock`` and writes one more, so a larger revision is always the later write and two live
  processes writing one thread never disagree.  A file without the field (written before revisions
  existed) counts as revision 0, older than any record.
- A readable file with a revision at least the record's is newer (or the same write): kept.
- A missing file is restored from a document record and left missing for a tombstone.  Only the prune tool
  removes thread files, and it refuses a thread any journal still names; so a record for a missing file was
  written after the removal (or the file's creation was lost by the crash) and restoring it never brings
  back a pruned thread.
- An empty or unreadable file is what an operating-system crash leaves of a file renamed into place
  before its data reached the disk; it is rebuilt only when the journal was written in an earlier boot.  In
  the same boot the page cache survived, so such a file was damaged by something else and stays for the
  operator, exactly as the store leaves it.
- A symlink, FIFO or other special file is never touched (the store refuses to read one too).

Everything restored is fsynced (file and directory); every file the journal names and that is kept is
fsynced too, because its bytes may still be only in the page cache.  Then the journal is removed.
"""
import contextlib
import dataclasses
import fcntl
import json
import os
import stat
from typing import Dict, List, Optional, Tuple

from iaccode_agui.state import journal as wal
from iaccode_agui.state.fileio import FILE_MODE, fsync_dir, fsync_path, read_at_most, replace_file
from iaccode_agui.state.flocks import close_quietly

MISSING = "missing"
PRESENT = "present"
UNREADABLE = "unreadable"
SPECIAL = "special"

KEEP = "keep"
WRITE = "write"
DELETE = "delete"


@dataclasses.dataclass(frozen=True)
class Record:
    stem: str
    kind: str  # wal.PUT or wal.DELETE
    revision: int
    payload: bytes = b""
    same_boot: bool = True
    seq: int = 0


@dataclasses.dataclass(frozen=True)
class FileState:
    kind: str
    revision: int = 0


def newest(records: List[Record]) -> Optional[Record]:
    """The record that wins among one thread's records: highest revision, then the later append."""
    return max(records, key=lambda r: (r.revision, r.seq), default=None)


def decide(record: Optional[Record], file: FileState) -> str:
    """What recovery does to a thread's file given its newest journal record (see the module docstring)."""
    if record is None or file.kind == SPECIAL:
        return KEEP
    apply = WRITE if record.kind == wal.PUT else DELETE
    if file.kind == PRESENT:
        return apply if record.revision > file.revision else KEEP
    if file.kind == MISSING:
        return WRITE if record.kind == wal.PUT else KEEP
    return KEEP if record.same_boot else apply  # UNREADABLE


def records_of(entries: List[Tuple[dict, bytes]], same_boot: bool) -> List[Record]:
    """One journal's records as ``Record``s, cancelled ones (a file write that failed) left out."""
    cancelled = {meta.get("c") for meta, _ in entries if meta.get("k") == wal.CANCEL}
    result = []
    for meta, payload in entries:
        kind, stem, seq = meta.get("k"), meta.get("s"), meta.get("q")
        if kind not in (wal.PUT, wal.DELETE) or not isinstance(stem, str) or seq in cancelled:
            continue
        revision = meta.get("r") if kind == wal.DELETE else _revision_of(payload)
        if type(revision) is not int:
            continue
        result.append(Record(stem, kind, revision, payload, same_boot, seq if type(seq) is int else 0))
    return result


def file_state(path: str, limit: int) -> FileState:
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return FileState(MISSING)
    if not stat.S_ISREG(info.st_mode):
        return FileState(SPECIAL)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        return FileState(MISSING)
    except OSError:
        return FileState(SPECIAL)
    try:
        revision = _revision_of(read_at_most(fd, limit + 1)[:limit + 1], limit)
    finally:
        os.close(fd)
    return FileState(UNREADABLE) if revision is None else FileState(PRESENT, revision)


def _revision_of(data: bytes, limit: int = 1 << 62) -> Optional[int]:
    if not data or len(data) > limit:
        return None
    try:
        document = json.loads(data.decode("utf-8"))
    except ValueError:
        return None
    if not isinstance(document, dict):
        return None
    revision = document.get("revision", 0)
    return revision if type(revision) is int and revision >= 0 else 0


class _Orphan:
    def __init__(self, owner: str, fd: int, records: List[Record]):
        self.owner, self.fd, self.records = owner, fd, records


def recover(store) -> int:  # type: ignore[no-untyped-def]
    """Recover and remove every orphaned journal of ``store``'s directory; returns how many were recovered."""
    directory = store.journal_dir
    if not wal.journal_owners(directory):
        return 0
    wal.require_real_dir(directory)
    guard = os.open(os.path.join(directory, ".recovery"), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                    FILE_MODE)
    try:
        fcntl.flock(guard, fcntl.LOCK_EX)  # one recoverer at a time; live owners never take this lock
        orphans = _claim_orphans(directory)
        try:
            _apply(store, orphans)
            for orphan in orphans:
                for suffix in wal.SEGMENTS + (wal.LOCK_SUFFIX,):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(os.path.join(directory, orphan.owner + suffix))
            if orphans:
                fsync_dir(directory)
        finally:
            for orphan in orphans:
                close_quietly(orphan.fd)
        return len(orphans)
    finally:
        close_quietly(guard)


def _claim_orphans(directory: str) -> List[_Orphan]:
    current = wal.boot_id()
    orphans = []
    for owner in wal.journal_owners(directory):
        fd = os.open(os.path.join(directory, owner + wal.LOCK_SUFFIX),
                     os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # a live owner holds it
            close_quietly(fd)
            continue
        records: List[Record] = []
        for suffix in wal.SEGMENTS:
            header, entries = wal.read_segment(os.path.join(directory, owner + suffix))
            if header is not None:
                records.extend(records_of(entries, header.get("boot") == current))
        orphans.append(_Orphan(owner, fd, records))
    return orphans


def _apply(store, orphans: List[_Orphan]) -> None:  # type: ignore[no-untyped-def]
    by_stem: Dict[str, List[Record]] = {}
    for orphan in orphans:
        for record in orphan.records:
            by_stem.setdefault(record.stem, []).append(record)
    if not by_stem:
        return
    for stem in sorted(by_stem):
        if os.sep in stem or stem.startswith("."):
            continue  # never a stem the store makes; refuse to follow it anywhere
        with store.thread_locked(stem):
            path = os.path.join(store.threads_dir, stem + ".json")
            record = newest(by_stem[stem])
            action = decide(record, file_state(path, store.max_state_bytes))
            if action == WRITE:
                replace_file(store.threads_dir, stem + ".json", record.payload, fsync=True)  # type: ignore
            elif action == DELETE:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
            else:
                fsync_path(path)
    fsync_dir(store.threads_dir)

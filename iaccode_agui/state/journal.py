"""The store's write-ahead journal: one append and one shared fdatasync make a thread-state write durable.

Why it exists: replacing a thread file durably costs a create, an fsync, a rename and a directory fsync,
and the directory fsync grows dearer as the threads directory fills.  Instead each durable write first
appends a checksummed record (the thread's file stem and the whole new document, or a tombstone) to this
store's journal and waits for the journal's ``fdatasync``; the thread file is then replaced without any
fsync.  Other processes see the new file at once through the page cache, a ``kill -9`` loses nothing (the
kernel still writes the page cache out), and after a power loss ``journal_recovery`` rebuilds from the
journal whatever thread file the crash lost or emptied.

- Group commit: writers append under one mutex and then wait for a sync; the first waiter becomes the
  leader and syncs everything appended so far, the others wait for it, so N concurrent writers share one
  ``fdatasync``.  Each waiter sleeps on its own gate and is woken once, when a sync covers its record (or
  to lead the next sync): with one condition for all, every sync and every finished file write woke all
  of them, and a thousand runs starting at once spent ~10 ms of CPU each fighting over the mutex.
- Two segments alternate.  When the active one passes ``CHECKPOINT_BYTES`` or has held records for
  ``CHECKPOINT_SECONDS``, a background thread swaps them, fsyncs every thread file the old segment names and
  the directory once, then rewrites the old segment's header in place (durably, so a checkpointed record
  can never come back and restore a file that was removed since): the header names the first sequence
  number that counts, and the records behind it are history.
- Segments are written full of zeros when the journal opens, so an append overwrites blocks the file
  already has and its ``fdatasync`` writes just those blocks, without a file-system journal commit (which
  would wait for every other file's pending data, the thread files written without fsync among them).  Appends never wait for those fsyncs; they wait only when the
  active segment is ``HARD_SEGMENT_BYTES`` long while a checkpoint is still running, which bounds the journal.
- The owner holds an exclusive ``flock`` on ``<id>.lock`` for the journal's lifetime.  A journal whose lock
  can be taken has a dead owner: the next store to open recovers and removes it.  Each segment starts with a
  header naming the boot it was written in, so recovery can tell a process crash (the page cache survived)
  from an operating-system crash (it did not).
- A failed append is cut back to the last whole record; a failed ``fdatasync`` poisons the journal (a retry
  could report success for data already lost), so every later write fails closed until a reset has made
  the thread files durable by fsync and started a fresh journal.
"""
import contextlib
import errno
import fcntl
import os
import secrets
import stat
import threading
import time
from typing import Any, Dict, List, Optional, Set, Tuple

from iaccode_agui.state.fileio import FILE_MODE, fsync_dir, fsync_path, make_private_dirs, write_all
from iaccode_agui.state.flocks import close_quietly
# The format's names are the journal's too: recovery, the prune tool and the tests read them from here.
from iaccode_agui.state.journal_format import (CANCEL, DELETE, HEADER, HEADER_BYTES, LOCK_SUFFIX,  # noqa: F401
                                               MAX_RECORD_BYTES, PUT, SEGMENTS, MentionScan, boot_id,
                                               decode, encode, header_record, journal_owners, read_segment)

CHECKPOINT_BYTES = 1 << 20
PREALLOC_STEP = 256 << 10   # a segment is written full of zeros this much at a time, ahead of its records
CHECKPOINT_SECONDS = 1.0
HARD_SEGMENT_BYTES = 4 * CHECKPOINT_BYTES
# The most the two segments hold at once: each at its hard size plus the preallocation step that took it
# there.  The store keeps that much free space for its journal (``ThreadStore.space_needed``).
SPACE_BYTES = 2 * (HARD_SEGMENT_BYTES + PREALLOC_STEP)


class _Segment:
    def __init__(self, path: str, fd: int, header: Dict[str, Any]):
        self.path = path
        self.fd = fd
        self.header = header
        self.size = HEADER_BYTES
        self.allocated = 0
        self.inflight = 0
        self.dirty: Set[str] = set()
        self.first_record_at: Optional[float] = None


class Ticket:
    """A record made durable; the writer reports the file it then wrote (or that it gave up)."""

    def __init__(self, journal: "Journal", segment: _Segment, seq: int, stem: str):
        self._journal = journal
        self._segment = segment
        self._seq = seq
        self._stem = stem

    def finish(self, path: Optional[str]) -> None:
        self._journal._finish(self._segment, path)

    def cancel(self) -> None:
        """The file write failed after the record was durable: void the record so recovery never applies it."""
        with contextlib.suppress(OSError):
            self._journal.commit({"k": CANCEL, "s": self._stem, "c": self._seq}, track=False)
        self._journal._finish(self._segment, None)


class Journal:
    """This store's journal under ``directory``; opened on the first write, recovered by the next store."""

    def __init__(self, directory: str, threads_dir: str):
        self.directory = directory
        self.threads_dir = threads_dir
        self.owner_id = ""
        self._pid = os.getpid()
        self._lock = threading.Lock()
        # For the rare waits (checkpoint, close, a segment's writers finishing); sync waiters use gates.
        self._cond = threading.Condition(self._lock)
        self._sync_waiters: List[Tuple[int, Any]] = []   # (sequence number awaited, its gate), oldest first
        self._lock_fd: Optional[int] = None
        self._active: Optional[_Segment] = None
        self._standby: Optional[_Segment] = None
        self._appended = 0
        self._synced = 0
        self._syncing = False
        self._checkpointing = False
        self._broken: Optional[OSError] = None
        self._closed = False
        self._worker: Optional[threading.Thread] = None

    def held_bytes(self) -> int:
        """Bytes its segments already own on disk (written full of zeros): appends there need no more space."""
        with self._lock:
            return sum(segment.allocated for segment in (self._active, self._standby) if segment is not None)

    # -- writing --

    def commit(self, meta: Dict[str, Any], payload: bytes = b"", *, track: bool = True) -> Ticket:
        """Append a record and return once it is durable (sharing one fdatasync with concurrent writers)."""
        if self._pid != os.getpid():
            self._forget_parent()
        with self._cond:
            segment, seq = self._append(meta, payload, writer=track)
            if track:
                segment.inflight += 1
            try:
                self._wait_synced(seq)
            except BaseException:
                if track:
                    segment.inflight -= 1
                    self._cond.notify_all()
                self._wake_sync_waiters()   # a lead role this writer was handed is passed on
                raise
        return Ticket(self, segment, seq, str(meta.get("s", "")))

    def _append(self, meta: Dict[str, Any], payload: bytes, writer: bool) -> Tuple[_Segment, int]:
        segment = self._segment_for_append(writer)
        self._appended += 1
        meta = dict(meta, q=self._appended)
        record = encode(meta, payload)
        try:
            if segment.size + len(record) > segment.allocated:
                segment.allocated = _preallocate(segment.fd, segment.allocated, segment.size + len(record))
            _pwrite_all(segment.fd, record, segment.size)
        except OSError:
            # The next record overwrites whatever part of this one reached the file; its CRC and sequence
            # number keep a leftover tail from ever reading as a record.
            self._appended -= 1
            raise
        segment.size += len(record)
        if segment.first_record_at is None:
            segment.first_record_at = time.monotonic()
        if segment.size >= CHECKPOINT_BYTES:
            self._cond.notify_all()
        return segment, self._appended

    def _segment_for_append(self, writer: bool) -> _Segment:
        """The active segment, once the journal is usable and (for a writer) not at its hard size while a
        checkpoint runs.  Everything is looked at again after a wait: a close or a failed sync may have
        happened meanwhile."""
        while True:
            if self._broken is not None:
                if not writer:  # a cancel: the reset would wait for the cancelling writer itself
                    raise OSError(errno.EIO, "the state journal could not be synced: %s" % self._broken)
                self._reset_locked()
            if self._active is None:
                self._open_locked()
            segment = self._active
            assert segment is not None
            # A cancel skips the wait: its writer still holds the old segment the checkpoint is waiting for.
            if not (writer and self._checkpointing and segment.size >= HARD_SEGMENT_BYTES):
                return segment
            self._cond.wait()

    def _wait_synced(self, seq: int) -> None:
        while self._synced < seq:
            if self._broken is not None:
                raise OSError(errno.EIO, "the state journal could not be synced: %s" % self._broken)
            if self._syncing:
                self._sleep_until_woken(seq)
                continue
            self._syncing = True
            upto, fd = self._appended, self._active.fd  # type: ignore[union-attr]
            failure: Optional[OSError] = None
            synced = False   # stays False when something else (an interrupt) ends the call: nothing is durable
            self._lock.release()
            try:
                os.fdatasync(fd)
                synced = True
            except OSError as exc:
                failure = exc
            finally:
                self._lock.acquire()
                self._syncing = False
                if failure is not None:
                    self._broken = failure
                elif synced:
                    self._synced = max(self._synced, upto)
                self._wake_sync_waiters()
            if failure is not None:
                raise failure

    def _sleep_until_woken(self, seq: int) -> None:
        """Wait (the mutex let go of) until a sync covers ``seq`` or this thread is asked to lead one."""
        gate = threading.Lock()
        gate.acquire()
        entry = (seq, gate)
        self._sync_waiters.append(entry)
        self._lock.release()
        try:
            gate.acquire()
        except BaseException:   # interrupted while asleep: no wake-up may be handed to this entry any more
            self._lock.acquire()
            self._sync_waiters = [waiter for waiter in self._sync_waiters if waiter is not entry]
            raise
        self._lock.acquire()

    def _wake_sync_waiters(self) -> None:
        """Wake every waiter whose record is now durable (all of them if the journal broke), and the oldest
        of the rest to lead the next sync: their records were appended before they slept, so that one
        sync covers every one of them.  Called with the mutex held, whenever ``_synced`` moves."""
        waiting = self._sync_waiters
        if not waiting:
            return
        if self._broken is not None:
            done, rest = waiting, []
        else:
            done = [w for w in waiting if w[0] <= self._synced]
            rest = [w for w in waiting if w[0] > self._synced]
        if rest and not self._syncing:
            done.append(rest.pop(0))
        self._sync_waiters = rest
        for _, gate in done:
            gate.release()

    def _finish(self, segment: _Segment, path: Optional[str]) -> None:
        with self._cond:
            if path is not None:
                segment.dirty.add(path)
            segment.inflight -= 1
            if not segment.inflight:   # only a checkpoint or a close waits for this, and only for zero
                self._cond.notify_all()

    # -- opening and closing --

    def _forget_parent(self) -> None:
        """In a child of ``fork()``: the parent's journal, descriptors and lock are the parent's, not ours.

        Appending to them from two processes would interleave records at the same offsets, so the child
        drops the inherited state (its lock may have been held by a parent thread at the fork) and opens
        its own journal on its first write.
        """
        for fd in [s.fd for s in (self._active, self._standby) if s is not None] + [self._lock_fd]:
            if fd is not None:
                close_quietly(fd)
        self.__init__(self.directory, self.threads_dir)  # type: ignore[misc]

    def _open_locked(self) -> None:
        make_private_dirs(self.directory)
        require_real_dir(self.directory)
        for _ in range(5):
            owner = "%d-%s" % (os.getpid(), secrets.token_hex(6))
            fd = _create_lock(os.path.join(self.directory, owner + LOCK_SUFFIX))
            if fd is not None:
                break
        else:
            raise OSError(errno.EAGAIN, "cannot take a journal lock")
        segments = []
        try:
            header = {"k": HEADER, "boot": boot_id(), "pid": os.getpid(), "owner": owner, "first": 1}
            for suffix in SEGMENTS:
                path = os.path.join(self.directory, owner + suffix)
                seg_fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
                                 FILE_MODE)
                segment = _Segment(path, seg_fd, header)
                segments.append(segment)
                write_all(seg_fd, header_record(header))
                segment.allocated = _preallocate(seg_fd, HEADER_BYTES, HEADER_BYTES + 1)
            fsync_dir(self.directory)
        except BaseException:
            for segment in segments:
                close_quietly(segment.fd)
                with contextlib.suppress(OSError):
                    os.unlink(segment.path)
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(self.directory, owner + LOCK_SUFFIX))
            close_quietly(fd)
            raise
        self.owner_id, self._lock_fd = owner, fd
        self._active, self._standby = segments
        self._closed = False
        if self._worker is None or not self._worker.is_alive():
            self._worker = threading.Thread(target=self._checkpoint_loop, name="state-journal", daemon=True)
            self._worker.start()

    def close(self) -> None:
        """Checkpoint everything and remove the journal (a clean stop leaves nothing to recover)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            while self._checkpointing:
                self._cond.wait()
            if self._active is not None:
                self._retire_locked()

    def _reset_locked(self) -> None:
        """After a failed sync: make every file this journal names durable by fsync, then start afresh."""
        failure = self._broken
        try:
            while self._checkpointing:
                self._cond.wait()
            if self._active is not None:
                self._retire_locked()
        except OSError:
            raise OSError(errno.EIO, "the state journal is unusable: %s" % failure) from failure
        self._broken = None

    def _retire_locked(self) -> None:
        segments = [s for s in (self._active, self._standby) if s is not None]
        while any(s.inflight for s in segments):
            self._cond.wait()
        for path in sorted(set().union(*(s.dirty for s in segments))):
            fsync_path(path)
        fsync_dir(self.threads_dir)
        for segment in segments:
            os.unlink(segment.path)
            close_quietly(segment.fd)
        os.unlink(os.path.join(self.directory, self.owner_id + LOCK_SUFFIX))
        fsync_dir(self.directory)
        close_quietly(self._lock_fd)
        self._lock_fd = self._active = self._standby = None
        self._synced = self._appended
        self._wake_sync_waiters()

    # -- checkpoints --

    def _checkpoint_loop(self) -> None:
        while True:
            with self._cond:
                old = self._next_checkpoint()
                if old is None:
                    # Said under the mutex: a journal reopened from now on starts a new checkpoint thread
                    # (this one, though still alive for a moment, will not look at it again).
                    if self._worker is threading.current_thread():
                        self._worker = None
                    return
            try:
                for path in sorted(old.dirty):
                    fsync_path(path)
                fsync_dir(self.threads_dir)
                _pwrite_all(old.fd, header_record(old.header), 0)  # its records are history now
                os.fdatasync(old.fd)
            except OSError as exc:  # the old segment keeps its records; the reset fsyncs its files again
                with self._cond:
                    self._broken = exc
                    self._checkpointing = False
                    self._cond.notify_all()
                    self._wake_sync_waiters()
                continue
            with self._cond:
                old.size, old.dirty, old.first_record_at = HEADER_BYTES, set(), None
                self._checkpointing = False
                self._cond.notify_all()

    def _next_checkpoint(self) -> Optional[_Segment]:
        """Wait until the active segment is due, swap the segments and return the old one (None: stop)."""
        while True:
            active = self._active
            if self._closed or active is None:
                return None
            if self._broken is None and active.first_record_at is not None and (
                    active.size >= CHECKPOINT_BYTES
                    or time.monotonic() - active.first_record_at >= CHECKPOINT_SECONDS):
                break
            self._cond.wait(CHECKPOINT_SECONDS / 4)
        try:  # every record of the old segment is durable before appends move on
            os.fdatasync(active.fd)
        except OSError as exc:
            self._broken = exc
            self._wake_sync_waiters()
            return None if self._closed else self._next_checkpoint()
        self._synced = self._appended
        self._wake_sync_waiters()
        active.header = dict(active.header, first=self._appended + 1)
        self._checkpointing = True
        self._active, self._standby = self._standby, active
        while active.inflight:
            self._cond.wait()
        return active


def _pwrite_all(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written


def _preallocate(fd: int, start: int, needed: int) -> int:
    """Write zeros from ``start`` to past ``needed`` (whole steps), make the size durable; the new size.

    An append then overwrites blocks the file already owns, so its ``fdatasync`` flushes only those blocks:
    no file-system journal commit, which would also have to write out every other file's pending data
    (the thread files written without fsync among them).  Zeros never read as a record.  A segment grows
    only until its first checkpoint recycles it (about ``CHECKPOINT_BYTES``), so this fsync is rare.
    """
    end = start + PREALLOC_STEP * max(1, -(-(needed - start) // PREALLOC_STEP))
    _pwrite_all(fd, b"\0" * (end - start), start)
    os.fsync(fd)
    return end


def _create_lock(path: str) -> Optional[int]:
    """Create and lock a fresh owner file; None if a recoverer removed it before the lock was taken."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE)
    except FileExistsError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if os.fstat(fd).st_nlink > 0:
            return fd
    except OSError:
        pass
    close_quietly(fd)
    return None


def require_real_dir(directory: str) -> None:
    """Refuse a journal directory that is a symlink or not a directory, as the store refuses its own."""
    if not stat.S_ISDIR(os.lstat(directory).st_mode):
        raise OSError(errno.ENOTDIR, "the journal directory is not a real directory", directory)

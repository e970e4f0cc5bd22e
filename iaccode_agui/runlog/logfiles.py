"""Run logs on disk: one append-only file per run under ``<state dir>/runs``.

Why the files look the way they do:

- The records of one delivery batch (what the owner projected from one upstream read) are appended with
  one ``write`` on an ``O_APPEND`` descriptor before the batch is handed to any client, so once a client
  has seen an id the operating system has it, even if the adapter is killed a moment later.  ``fsync`` runs at the end of the run (and when a run stops at an interrupt, which is an end
  too), not per event: a power cut may lose the tail of a live run, a process crash does not.
- The writer holds an exclusive ``flock`` on its descriptor for as long as it writes.  The kernel drops it
  when the process dies, so any process can tell a live log (lock held) from a finished or orphaned one,
  and retention never removes a log that is still being written.
- A client that re-attaches through another process holds a shared ``flock`` on the run's ``.watch`` file
  while it reads; the owner probes it to know that somebody is still listening (its reconnect-grace timer
  must not cancel a run that is followed elsewhere).  The owner of a run kept without a client holds one on
  the run's ``.detached`` file while no client of its own is attached, so a request on the thread reaching
  another process can tell whether anybody is attached to the run at all (``runs.detached``).
- Names come from the thread and run ids through the same safe key scheme as the thread files; files are
  0600 in a 0700 directory.  Retention removes finished logs older than the TTL, then the oldest ones
  while the total exceeds the size cap.
"""
import contextlib
import errno
import fcntl
import logging
import os
import stat
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

from iaccode_agui.runlog import encoding as logformat
from iaccode_agui.runlog import retention
from iaccode_agui.runlog.encoding import Record
from iaccode_agui.runlog.reader import READ_CHUNK as _READ_CHUNK
from iaccode_agui.runlog.reader import RunLogReader, WatchMark
from iaccode_agui.state.flocks import close_quietly
from iaccode_agui.state.flocks import try_lock as _try_lock
from iaccode_agui.state.keys import run_file_stem

log = logging.getLogger("iaccode_agui.runlog")

_DIR_MODE = 0o700
_FILE_MODE = 0o600
CREATING_SUFFIX = ".creating"   # a log being created: never a ".log" until it is locked and has its header
WATCH_SUFFIX = ".watch"         # marks of clients following a run from another process
DETACHED_SUFFIX = ".detached"   # the owner's mark of a run kept without a client that has none attached
CREATE_ATTEMPTS = 5
CREATING_STALE = 60.0           # an unlocked creation file this old was left by a process that died


def _read_all(fd: int) -> bytes:
    os.lseek(fd, 0, os.SEEK_SET)
    chunks = []
    while True:
        chunk = os.read(fd, _READ_CHUNK)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


class LogFull(OSError):
    """The run's log reached the size cap; the channel stops logging this run."""


class RunLogWriter:
    """The owner's append-only handle on one run's log."""

    def __init__(self, path: str, fd: int, size: int, max_bytes: int, fsync: bool) -> None:
        self.path = path
        self._fd: Optional[int] = fd
        self.size = size
        self._max = max_bytes
        self._fsync = fsync
        self.incomplete = False

    def _write(self, data: bytes, capped: bool = True) -> None:
        if self._fd is None:
            raise OSError(errno.EBADF, "the run log is closed")
        if capped and self._max and self.size + len(data) > self._max:
            raise LogFull(errno.EFBIG, "the run log reached its size cap")
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view):]
        self.size += len(data)

    def append(self, seq: int, event_type: str, frame: bytes) -> None:
        self._write(logformat.encode_event(seq, event_type, frame))

    def note_usage(self, usage: Any) -> None:
        self._write(logformat.encode_usage(usage))

    def append_batch(self, events: List[Tuple[int, str, bytes]]) -> int:
        """Append ``(seq, type, frame)`` records with one ``write``; how many fitted under the size cap.

        One delivery batch is one system call: the records reach the operating system together, before
        the batch is handed to any client.  Records past the cap are left out (the caller notes where the
        log ends), those before it are written.
        """
        parts, sizes = logformat.encode_events(events)
        fitted = len(sizes)
        if self._max and self.size + sum(sizes) > self._max:
            room = self._max - self.size
            for index, size in enumerate(sizes):
                room -= size
                if room < 0:
                    fitted = index
                    break
            del parts[3 * fitted:]
        if fitted:
            self._write(b"".join(parts), capped=False)
        return fitted

    def sync(self) -> None:
        if self._fd is not None and self._fsync:
            os.fsync(self._fd)

    def mark_incomplete(self, last_seq: int, reason: str) -> None:
        """End the log early: nothing more will be written, though the run goes on (size cap, write error).

        It is a close record, so followers elsewhere learn at once that the log stops here (and end their
        streams with ``RUN_LOG_INCOMPLETE``) and nobody takes the run over from a log that misses its end.
        The descriptor and its lock are kept: the prefix stays the owner's replay source until the run ends.
        """
        if self._fd is None or self.incomplete:
            return
        self._write(logformat.encode_close({"events": last_seq + 1, "outcome": "incomplete", "reason": reason}),
                    capped=False)
        self.incomplete = True

    def close(self, outcome: Dict[str, Any]) -> None:
        """Mark the log complete and make it durable; the lock goes with the descriptor."""
        if self._fd is None:
            return
        if self.incomplete:
            self._release()          # its close record was written when it stopped
            return
        try:
            # Past the cap too (one small record): without it a log that filled up mid-run would look
            # like the log of an owner that died, and another process would take the ended run over.
            self._write(logformat.encode_close(outcome), capped=False)
        finally:
            try:
                self.sync()
            finally:
                self._release()

    def release(self) -> None:
        """Let the log go without writing (another process's complete log that was only checked)."""
        self._release()

    def discard(self, last_seq: int = -1) -> None:
        """Give the log up (a write failed): remove it so nobody replays a log with a gap.

        Its followers still read the open file: they are told it stops, when that last write still works.
        """
        with contextlib.suppress(OSError):
            self.mark_incomplete(last_seq, "write-failed")
        with contextlib.suppress(OSError):
            os.unlink(self.path)
        self._release()

    def _release(self) -> None:
        fd, self._fd = self._fd, None
        close_quietly(fd)


class RunLogStore:
    """The ``runs`` directory: creating, opening and expiring run logs."""

    def __init__(self, state_dir: str, *, ttl: float, max_bytes: int, fsync: bool = True) -> None:
        self.runs_dir = os.path.join(os.path.abspath(state_dir), "runs")
        self.ttl = ttl
        self.max_bytes = max_bytes
        self._fsync = fsync
        self._ready = False
        self._stop = threading.Event()
        self._sweeper: Optional[threading.Thread] = None
        # Logs seen closed: the timer's walks stat them instead of opening, locking and reading them.
        # Without this every walk costs a few opens per kept log, and with thousands kept the walks crowd
        # out the request path.
        self._closed = retention.ClosedIndex()

    @property
    def enabled(self) -> bool:
        return self.max_bytes > 0

    def path_for(self, thread_id: str, run_id: str) -> str:
        return os.path.join(self.runs_dir, run_file_stem(thread_id, run_id) + ".log")

    def _ensure_dir(self) -> None:
        if self._ready:
            return
        parent = os.path.dirname(self.runs_dir)
        if not os.path.isdir(parent):
            os.makedirs(parent, _DIR_MODE, exist_ok=True)
        try:
            os.mkdir(self.runs_dir, _DIR_MODE)
        except FileExistsError:
            pass
        if not stat.S_ISDIR(os.lstat(self.runs_dir).st_mode):
            raise OSError(errno.ENOTDIR, "the runs directory is not a real directory")
        os.chmod(self.runs_dir, _DIR_MODE)
        self._ready = True

    def create(self, thread_id: str, run_id: str, header: Dict[str, Any]) -> RunLogWriter:
        """A new log for a run.  A run id comes back only as the continuation of its interrupted run, whose
        log takes the old one's place (the run id names its latest segment), so any old file is replaced.

        The log is made under a private name, locked, given its header, then renamed into place: a
        retention sweep only ever sees it locked (live), so it can never remove a log being created.
        """
        self._ensure_dir()
        path = self.path_for(thread_id, run_id)
        fd, temp = self._locked_new_file(path)
        try:
            writer = RunLogWriter(path, fd, 0, self.max_bytes, self._fsync)
            fields = dict(header, threadId=thread_id, runId=run_id, createdAt=time.time())
            writer._write(logformat.encode_start(fields))
            os.rename(temp, path)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(temp)
            raise
        return writer

    @staticmethod
    def _locked_new_file(path: str) -> Tuple[int, str]:
        """A fresh private file next to ``path``, opened and locked, and still linked under its name."""
        temp = "%s.%d-%d%s" % (path, os.getpid(), threading.get_ident(), CREATING_SUFFIX)
        for attempt in range(CREATE_ATTEMPTS):
            try:
                fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC,
                             _FILE_MODE)
            except FileExistsError:
                # Left by an earlier attempt of this very thread (the name is ours alone): remove and retry.
                # Unlinked only then, not before every creation: one system call less on the way to RUN_STARTED.
                if attempt == CREATE_ATTEMPTS - 1:
                    raise
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(temp)
                continue
            try:
                os.fchmod(fd, _FILE_MODE)
                if not _try_lock(fd, fcntl.LOCK_EX):
                    raise OSError(errno.EBUSY, "the new run log is held by another process")
                # A sweep of stale creations may have unlinked it before the lock: then start again.
                if os.stat(temp, follow_symlinks=False).st_ino == os.fstat(fd).st_ino:
                    return fd, temp
            except FileNotFoundError:
                pass
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)
        raise OSError(errno.EAGAIN, "the new run log kept disappearing")

    def reopen(self, thread_id: str, run_id: str) -> Optional[Tuple[RunLogWriter, Dict[str, Any], List[Record]]]:
        """Take over the log of a run whose writer is gone: its writer, header and intact records.

        The lock is taken before anything is read, so two processes adopting at once cannot both
        continue the file; a torn tail is cut off so the next record follows the last intact one.
        """
        path = self.path_for(thread_id, run_id)
        try:
            fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError:
            return None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode) or not _try_lock(fd, fcntl.LOCK_EX):
                os.close(fd)
                return None
            data = _read_all(fd)
            start = logformat.check_magic(data)
            records, used = logformat.parse(data, start or 0) if start is not None else ([], 0)
            if not records or records[0].kind != logformat.KIND_HEADER:
                os.close(fd)
                return None
            header = dict(records[0].fields or {})
            if header.get("threadId") != thread_id or header.get("runId") != run_id:
                os.close(fd)
                return None
            if used < len(data):
                os.ftruncate(fd, used)
        except (OSError, logformat.LogFormatError) as exc:
            log.warning("cannot take over run log %s: %s", path, exc)
            with contextlib.suppress(OSError):
                os.close(fd)
            return None
        return RunLogWriter(path, fd, used, self.max_bytes, self._fsync), header, records[1:]

    def orphans(self, now: Optional[float] = None) -> List[Tuple[str, str]]:
        """(thread, run) of every kept log whose writer died before closing it: runs to adopt."""
        now = time.time() if now is None else now
        found: List[Tuple[str, str]] = []
        for name, path, known in retention.walk_logs(self.runs_dir, self._closed):
            if known is not None:
                continue
            info = retention.finished_info(path)
            if info is None or info[2] or now - info[1] > self.ttl or \
                    retention.seen_closed(self._closed, name, path, info[0]):
                continue
            reader = RunLogReader.open(path)
            if reader is None:
                continue
            header = reader.header
            reader.close()
            if isinstance(header.get("threadId"), str) and isinstance(header.get("runId"), str):
                found.append((header["threadId"], header["runId"]))
        return found

    def open_reader(self, thread_id: str, run_id: str) -> Optional[RunLogReader]:
        if not self.enabled:
            return None
        reader = RunLogReader.open(self.path_for(thread_id, run_id))
        if reader is not None and (reader.header.get("threadId") != thread_id or
                                   reader.header.get("runId") != run_id):
            reader.close()   # a hashed name shared by two runs: the header decides
            return None
        return reader

    # ---- cross-process attachment -----------------------------------------------------------
    def _watch_path(self, thread_id: str, run_id: str, suffix: str) -> str:
        return os.path.join(self.runs_dir, run_file_stem(thread_id, run_id) + suffix)

    def watch(self, thread_id: str, run_id: str, suffix: str = WATCH_SUFFIX) -> Optional[WatchMark]:
        """Mark the run (``.watch``: followed by a client elsewhere; ``.detached``: no client at its owner)."""
        path = self._watch_path(thread_id, run_id, suffix)
        try:
            self._ensure_dir()
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK,
                             _FILE_MODE))
            # Held read-only: a descriptor open for writing would block a read-only remount.
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError as exc:
            log.warning("cannot mark run %s as followed: %s", run_id, exc)
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
        except OSError:
            os.close(fd)
            return None
        return WatchMark(fd)

    def watched(self, thread_id: str, run_id: str, suffix: str = WATCH_SUFFIX) -> bool:
        """Whether a client in some process follows this run right now (holds its mark of ``suffix``)."""
        try:
            fd = os.open(self._watch_path(thread_id, run_id, suffix), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return False
        try:
            return not _try_lock(fd, fcntl.LOCK_EX)
        finally:
            os.close(fd)

    # ---- retention --------------------------------------------------------------------------
    def sweep(self, now: Optional[float] = None) -> int:
        """Remove expired logs (and stale watch files); returns how many logs went."""
        now = time.time() if now is None else now
        others: List[Tuple[str, str]] = []     # after the logs: a watch file goes once its log has gone
        removed = retention.sweep(self.runs_dir, self._closed, self.ttl, self.max_bytes, now,
                                  lambda name, path: others.append((name, path)))
        for name, path in others:
            if name.endswith(WATCH_SUFFIX) or name.endswith(DETACHED_SUFFIX):
                self._drop_unwatched(path)
            elif name.endswith(CREATING_SUFFIX):
                self._drop_dead_creation(path, now)
        return removed

    def _drop_dead_creation(self, path: str, now: float) -> None:
        with contextlib.suppress(OSError):
            if now - os.lstat(path).st_mtime > CREATING_STALE:
                retention.unlink_if_unlocked(path)

    def _drop_unwatched(self, path: str) -> None:
        log_path = path[:path.rindex(".")] + ".log"
        if os.path.exists(log_path):
            return
        retention.unlink_if_unlocked(path)

    def start_sweeper(self, interval: float) -> None:
        if not self.enabled or self._sweeper is not None:
            return

        def loop() -> None:
            while not self._stop.wait(interval):
                try:
                    self.sweep()
                except Exception:   # retention must never take the server down
                    log.exception("run log retention sweep failed")
        self._sweeper = threading.Thread(target=loop, name="agui-runlog-retention", daemon=True)
        self._sweeper.start()

    def stop(self) -> None:
        self._stop.set()

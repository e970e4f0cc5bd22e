"""The file store: one small JSON file per thread, replaced atomically, guarded by per-thread locks.

Why files and locks look the way they do:

- Each thread has its own file, so a corrupt or unreadable file makes only that thread unavailable, and a
  restart loads nothing up front (threads are read lazily, on request).
- A write never edits the file in place: it writes a private temp file in the same directory, fsyncs it,
  renames it over the old one and fsyncs the directory.  A crash therefore leaves either the old or the new
  document, never a torn one.  Any failure along the way is reported as ``StateWriteFailed`` so callers can
  fail closed (nothing recoverable is announced before it is durable).
- Read-modify-write cycles hold an in-process lock (threads of this adapter) *and* an exclusive ``flock`` on
  ``<stem>.lock`` (other adapter processes sharing the directory).  Locks are per thread id, so different
  threads never wait for each other.
- A run holds a second lock, ``<stem>.run``, for its whole lifetime.  The kernel drops it when the process
  dies, even on ``kill -9``, which is how a restarted adapter tells an orphaned ``activeRun`` (lock free)
  from a live one (lock held).
- The lock files stay after a thread's last request: removing a lock file that another process has open
  (or is about to lock) would let two holders lock two different files of the same name.  Idle threads are
  removed by ``state.prune`` (``tools/prune_threads.py``), which takes both locks first; a lock obtained on
  a file that was removed meanwhile is noticed (no links left) and taken again on the current file.

Platform: Linux/POSIX only (``fcntl.flock``, ``O_NOFOLLOW``, directory fsync).  The state directory must be
on a local filesystem: on NFS, Linux emulates ``flock`` with byte-range locks, which do not exclude two
descriptors of one process.  Lock descriptors are close-on-exec, but a plain ``fork()`` (for example the
``fork`` start method of multiprocessing) shares them with the child until it exits.
"""
import contextlib
import errno
import fcntl
import json
import os
import stat
import threading
import logging
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple, TypeVar

from iaccode_agui.state import journal_recovery
from iaccode_agui.state.fileio import DIR_MODE as _DIR_MODE, FILE_MODE as _FILE_MODE, REPLACE_ATTEMPTS
from iaccode_agui.state.fileio import (free_bytes, fsync_dir, make_private_dirs, no_constant, os_reason, read_regular,
                                      replace_file, size_text, unique_keys)
from iaccode_agui.state.flocks import close_quietly
from iaccode_agui.state.journal import DELETE, PUT, SPACE_BYTES as JOURNAL_SPACE_BYTES, Journal
from iaccode_agui.state.keys import thread_file_stem
from iaccode_agui.state.model import StateCorrupt, ThreadState

MAX_STATE_BYTES = 8 * 1024 * 1024
# Free space kept beyond what the journal may yet allocate: room to replace a thread file and to append
# run-log records meanwhile.  Start-up and /ready refuse a directory with less (``check_writable``).
SPACE_HEADROOM = 1536 << 10

log = logging.getLogger("iaccode_agui.state")
_F = TypeVar("_F", bound=Callable[..., Any])


def _logs_failures(operation: str) -> Callable[[_F], _F]:
    """Log a state failure once, with the directory and the reason, where the disk said no.

    Clients only ever see ``STATE_UNAVAILABLE`` or ``STATE_PERSISTENCE_FAILED``; without this line an operator
    would have no way to learn which path failed or why.
    """
    def wrap(method: _F) -> _F:
        def logged(self: "ThreadStore", *args: Any, **kwargs: Any) -> Any:
            try:
                return method(self, *args, **kwargs)
            except StateError as exc:
                if not getattr(exc, "logged", False):
                    exc.logged = True  # type: ignore[attr-defined]
                    self.report_failure(operation, exc)
                raise
        logged.__name__ = method.__name__
        logged.__doc__ = method.__doc__
        logged.__wrapped__ = method  # type: ignore[attr-defined]
        return logged  # type: ignore[return-value]
    return wrap


class StateError(Exception):
    """Base of the store's failures."""


class StateUnavailable(StateError):
    """The thread's state cannot be read or locked; the app answers 503 ``STATE_UNAVAILABLE``."""


class StateWriteFailed(StateError):
    """The thread's state could not be made durable; callers fail closed with ``STATE_PERSISTENCE_FAILED``."""


class RunLease:
    """Proof that this process runs the thread's active run; released explicitly or by process death."""

    def __init__(self, thread_id: str, fd: int):
        self.thread_id = thread_id
        self._fd: Optional[int] = fd
        self._mutex = threading.Lock()

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Give the lease up; safe to call any number of times, from any thread."""
        with self._mutex:
            fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_UN)
            close_quietly(fd)

    def __enter__(self) -> "RunLease":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.release()

    def __del__(self) -> None:
        # A lease nobody references can never be released by its owner; do not leak the lock.
        with contextlib.suppress(Exception):
            self.release()


class Transaction:
    """One locked read-modify-write of a thread; ``state`` is what was on disk when it started."""

    def __init__(self, store: "ThreadStore", thread_id: str, stem: str, state: Optional[ThreadState],
                 revision: int = 0):
        self.thread_id = thread_id
        self.state = state
        self._store = store
        self._stem = stem
        self._revision = revision  # the file's; every write stores one more (see journal_recovery)
        self._open = True

    def save(self, state: ThreadState) -> None:
        """Durably replace the thread's document; afterwards ``self.state`` is a copy of ``state``.

        Raises ValueError for a state that must never be written (another thread, credentials, a document
        that would not load back) and ``StateWriteFailed`` when the disk refuses.
        """
        self._check_open()
        if state.thread_id != self.thread_id:
            raise ValueError("refusing to save the state of another thread")
        document = state.to_document()   # refuses a credential key anywhere in the document
        try:
            # What a later load would return; once written it is also the copy ``self.state`` becomes.
            # The credential scan of the load is skipped: ``to_document`` just made the same one.
            saved = ThreadState.from_document(document, self.thread_id, credentials_checked=True)
        except StateCorrupt as exc:
            raise ValueError("refusing to save an invalid thread state: %s" % exc.reason) from None
        document["revision"] = self._revision + 1
        try:
            # Compact on purpose: ``indent=`` makes ``json`` fall back to its pure-Python encoder, three
            # times slower, and every run writes this document three times.  Loading accepts either form.
            text = json.dumps(document, separators=(",", ":"), sort_keys=True, allow_nan=False)
        except TypeError as exc:  # a non-JSON value inside an interrupt projection
            raise ValueError("refusing to save a thread state that is not JSON: %s" % exc) from None
        payload = (text + "\n").encode("utf-8")
        if len(payload) > MAX_STATE_BYTES:
            raise StateWriteFailed("the thread state exceeds %d bytes" % MAX_STATE_BYTES)
        self._store._write_atomic(self._stem + ".json", payload)
        self._revision += 1
        self.state = saved

    def delete(self) -> None:
        """Remove the thread's document (its lock files stay: other holders may have them open)."""
        self._check_open()
        self._store._unlink(self._stem + ".json", self._revision + 1)
        self._revision += 1
        self.state = None

    def _check_open(self) -> None:
        if not self._open:
            raise RuntimeError("the transaction is closed")


class ThreadStore:
    """Per-thread JSON documents under ``<state_dir>/threads``."""

    def __init__(self, state_dir: str, *, fsync: bool = True):
        self.state_dir = os.path.abspath(state_dir)
        self.threads_dir = os.path.join(self.state_dir, "threads")
        self.journal_dir = os.path.join(self.state_dir, "journal")
        self.max_state_bytes = MAX_STATE_BYTES
        self._fsync = fsync
        self._journal: Optional[Journal] = Journal(self.journal_dir, self.threads_dir) if fsync else None
        self._mutex = threading.Lock()
        self._recovery = threading.Lock()
        self._dirs_ready = False
        self._recovered = False
        self._locks: Dict[str, List[Any]] = {}  # stem -> [lock, users, owner thread ident]

    def close(self) -> None:
        """Checkpoint and remove this store's journal (a clean stop leaves nothing for recovery to do)."""
        if self._journal is not None:
            with contextlib.suppress(OSError):
                self._journal.close()

    def path_for(self, thread_id: str) -> str:
        """Where the thread's document lives (for diagnostics and tests)."""
        return os.path.join(self.threads_dir, thread_file_stem(thread_id) + ".json")

    # -- reading --

    def load(self, thread_id: str) -> Optional[ThreadState]:
        """The thread's state without locking (a replace is atomic, so the read is never torn)."""
        self.recover()
        return self._read(thread_id, thread_file_stem(thread_id))[0]

    @_logs_failures("recovery")
    def recover(self) -> None:
        """Once per store, before anything is read: recover the journals of dead processes.

        A state that an earlier process made durable may exist only in its journal (see
        ``journal_recovery``); until that journal is applied no read of this directory can be trusted, so a
        failure here is ``StateUnavailable`` and is retried by the next request.
        """
        if self._recovered:
            return
        with self._recovery:
            if self._recovered:
                return
            try:
                journal_recovery.recover(self)
            except OSError as exc:
                raise StateUnavailable("cannot recover the state journal: %s" % os_reason(exc)) from exc
            self._recovered = True

    # -- read-modify-write --

    @contextlib.contextmanager
    def transaction(self, thread_id: str) -> Iterator[Transaction]:
        """Hold the thread's locks for a whole read-modify-write; raises StateUnavailable if unreadable."""
        self.recover()
        stem = thread_file_stem(thread_id)
        with self.thread_locked(stem):
            txn = Transaction(self, thread_id, stem, *self._read(thread_id, stem))
            try:
                yield txn
            finally:
                txn._open = False

    @contextlib.contextmanager
    def thread_locked(self, stem: str) -> Iterator[None]:
        """Both of a thread's locks: this process's threads and, through ``<stem>.lock``, other processes."""
        with self._thread_lock(stem):
            self._ensure_dirs()
            fd = self.lock_file(stem + ".lock", fcntl.LOCK_EX)
            assert fd is not None
            try:
                yield
            finally:
                os.close(fd)  # closing the descriptor drops the flock

    def put_document(self, stem: str, payload: bytes) -> None:
        """Durably replace ``<stem>.json`` exactly as a thread's state is written (journal, then file).

        For a document kept beside a thread's state; the caller holds ``thread_locked(stem)`` and puts a
        ``revision`` one above the file's into ``payload``, which is what orders it in a recovery.
        """
        self._write_atomic(stem + ".json", payload)

    # -- run leases --

    def try_run_lease(self, thread_id: str) -> Optional[RunLease]:
        """Take the thread's run lease without waiting; None when anyone (any process or handle) holds it."""
        self.recover()
        self._ensure_dirs()
        fd = self.lock_file(thread_file_stem(thread_id) + ".run", fcntl.LOCK_EX | fcntl.LOCK_NB)
        return None if fd is None else RunLease(thread_id, fd)

    def run_lease_is_held(self, thread_id: str) -> bool:
        """Whether some live holder has the run lease (probes by taking and releasing it)."""
        lease = self.try_run_lease(thread_id)
        if lease is None:
            return True
        lease.release()
        return False

    # -- diagnostics --

    def space_needed(self) -> int:
        """Free bytes the directory must still have: what the journal may yet allocate, plus headroom."""
        journal = 0 if self._journal is None else JOURNAL_SPACE_BYTES - self._journal.held_bytes()
        return max(0, journal) + SPACE_HEADROOM

    def check_writable(self) -> int:
        """Prove the directory usable now: create it (0700) if missing, write, fsync and remove a probe file,
        and find at least ``space_needed()`` bytes free; returns the bytes free.

        Raises ``StateUnavailable`` whose message names the path and the operating system's reason (or the
        space free and needed), so a start-up check and the readiness probe can say exactly what is wrong.
        """
        try:
            ThreadStore._ensure_dirs.__wrapped__(self)  # type: ignore[attr-defined]  # the caller reports it
        except StateUnavailable as exc:
            self._dirs_ready = False
            cause = exc.__cause__
            reason = str(exc)
            if isinstance(cause, OSError):
                reason = "cannot create or open it: %s%s" % (
                    os_reason(cause), " at %s" % cause.filename if cause.filename else "")
            raise StateUnavailable("%s: %s" % (self.state_dir, reason)) from exc
        probe = os.path.join(self.threads_dir, ".probe-%d-%d" % (os.getpid(), threading.get_ident()))
        try:
            fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, _FILE_MODE)
            try:
                os.write(fd, b"probe\n")
                if self._fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)
            os.unlink(probe)
        except OSError as exc:
            self._dirs_ready = False
            raise StateUnavailable("%s: not writable: %s" % (self.state_dir, os_reason(exc))) from exc
        free, needed = free_bytes(self.state_dir), self.space_needed()
        if free < needed:
            raise StateUnavailable("%s: %s free, a run needs %s (the state journal and room for a thread file)"
                                   % (self.state_dir, size_text(free), size_text(needed)))
        return free

    def report_failure(self, operation: str, exc: BaseException) -> None:
        """Log a failed state operation with the directory and the reason (the HTTP answer names neither)."""
        log.warning("state %s failed in %s: %s", operation, self.state_dir, exc)

    # -- internals --

    @contextlib.contextmanager
    def _thread_lock(self, stem: str) -> Iterator[None]:
        me = threading.get_ident()
        with self._mutex:
            entry = self._locks.setdefault(stem, [threading.Lock(), 0, None])
            if entry[2] == me:
                raise RuntimeError("nested transaction on the same thread state would deadlock")
            entry[1] += 1
        try:
            with entry[0]:
                entry[2] = me
                try:
                    yield
                finally:
                    entry[2] = None
        finally:
            with self._mutex:
                entry[1] -= 1
                if entry[1] == 0:
                    del self._locks[stem]

    @_logs_failures("preparation")
    def _ensure_dirs(self) -> None:
        if self._dirs_ready:
            return
        with self._mutex:
            try:
                make_private_dirs(self.state_dir)
                try:
                    os.mkdir(self.threads_dir, _DIR_MODE)
                except FileExistsError:
                    pass
                info = os.lstat(self.threads_dir)
                if not stat.S_ISDIR(info.st_mode):
                    raise StateUnavailable("the threads directory is not a real directory")
                os.chmod(self.threads_dir, _DIR_MODE)
            except OSError as exc:
                raise StateUnavailable("cannot prepare the state directory: %s" % exc) from exc
            self._dirs_ready = True

    def lock_file(self, name: str, flags: int) -> Optional[int]:
        """A descriptor of ``name`` holding ``flock(flags)``; None when LOCK_NB finds it taken.

        A lock file may be removed by the prune tool while someone waits on it; a lock obtained on a file
        that is no longer linked protects nothing, so it is dropped and the current file is tried again.
        """
        for _ in range(REPLACE_ATTEMPTS + 1):
            fd = self._open_lock_file(name)
            try:
                fcntl.flock(fd, flags)
                if os.fstat(fd).st_nlink > 0:
                    return fd
            except OSError as exc:
                os.close(fd)
                if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                    return None
                failure = StateUnavailable("cannot lock %s: %s" % (name, exc))
                self.report_failure("lock", failure)
                raise failure from exc
            os.close(fd)
        raise StateUnavailable("the lock file %s keeps being removed" % name)

    @_logs_failures("lock")
    def _open_lock_file(self, name: str) -> int:
        path = os.path.join(self.threads_dir, name)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, _FILE_MODE)
        except OSError as exc:
            raise StateUnavailable("cannot open the lock file %s: %s" % (name, exc)) from exc
        try:
            mode = os.fstat(fd).st_mode
            if not stat.S_ISREG(mode):
                raise StateUnavailable("the lock file %s is not a regular file" % name)
            if stat.S_IMODE(mode) != _FILE_MODE:
                with contextlib.suppress(OSError):  # the lock works regardless; tightening is best-effort
                    os.fchmod(fd, _FILE_MODE)
        except BaseException:
            os.close(fd)
            raise
        return fd

    @_logs_failures("read")
    def _read(self, thread_id: str, stem: str) -> Tuple[Optional[ThreadState], int]:
        """The thread's state and the revision its file carries (0 for a file written before revisions)."""
        try:
            info = os.lstat(self.threads_dir)
        except FileNotFoundError:
            return None, 0
        except OSError as exc:
            raise StateUnavailable("cannot inspect the threads directory: %s" % exc) from exc
        if not stat.S_ISDIR(info.st_mode):
            raise StateUnavailable("the threads directory is not a real directory")
        try:
            data = read_regular(os.path.join(self.threads_dir, stem + ".json"), MAX_STATE_BYTES)
        except ValueError as exc:
            raise StateUnavailable("the thread state is unusable: %s" % exc) from exc
        except OSError as exc:  # ELOOP for a symlink, EACCES, ...
            raise StateUnavailable("cannot read the thread state: %s" % exc) from exc
        if data is None:
            return None, 0
        try:
            document = json.loads(data.decode("utf-8"), object_pairs_hook=unique_keys, parse_constant=no_constant)
            return ThreadState.from_document(document, thread_id), document.get("revision", 0)
        except (UnicodeDecodeError, ValueError) as exc:  # JSONDecodeError and StateCorrupt are ValueErrors
            raise StateUnavailable("the thread state is corrupt: %s" % exc) from exc

    @_logs_failures("write")
    def _write_atomic(self, name: str, payload: bytes) -> None:
        """Make ``payload`` the file's document: durable in the journal first, then visible in the file.

        The file is replaced without fsync: the journal record already survives a power loss, and the
        checkpoint (or the next store's recovery) fsyncs the file later, off the request path.
        """
        self._ensure_dirs_for_write()
        ticket = None
        try:
            if self._journal is not None:
                ticket = self._journal.commit({"k": PUT, "s": name[:-len(".json")]}, payload)
            path = replace_file(self.threads_dir, name, payload, fsync=False)
        except OSError as exc:
            if ticket is not None:
                ticket.cancel()
            raise StateWriteFailed("cannot write the thread state: %s" % exc) from exc
        if ticket is not None:
            ticket.finish(path)

    @_logs_failures("delete")
    def _unlink(self, name: str, revision: int) -> None:
        """Remove the file: a tombstone record, then the unlink and a directory fsync (deletes are rare).

        The tombstone outranks every older record of this thread in any journal recovered with it.  The
        adapter itself never deletes a thread; the prune tool does, and it refuses a thread that any journal
        still names, because a journal recovered after this store's tombstone was checkpointed away would
        restore its older record onto the missing file.
        """
        ticket = None
        try:
            if self._journal is not None:
                ticket = self._journal.commit({"k": DELETE, "s": name[:-len(".json")], "r": revision})
            os.unlink(os.path.join(self.threads_dir, name))
            if self._fsync:
                fsync_dir(self.threads_dir)
        except FileNotFoundError:
            pass
        except OSError as exc:
            if ticket is not None:
                ticket.cancel()
                ticket = None
            raise StateWriteFailed("cannot delete the thread state: %s" % exc) from exc
        finally:
            if ticket is not None:
                ticket.finish(None)

    def _ensure_dirs_for_write(self) -> None:
        try:
            self._ensure_dirs()
        except StateUnavailable as exc:
            raise StateWriteFailed(str(exc)) from exc


__all__ = ["StateError", "StateUnavailable", "StateWriteFailed", "RunLease", "Transaction", "ThreadStore"]

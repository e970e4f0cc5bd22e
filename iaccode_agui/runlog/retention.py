"""The retention timer's passes over the runs directory, one log at a time.

A busy adapter keeps thousands of finished logs (every run of the last ten minutes, by default), and the
housekeeping timer walks all of them every ten seconds, twice: the orphan scan and the retention sweep.
Those walks used to build lists of every name, path and tuple first, about 4 MB of short-lived objects
per walk with 10,000 logs.  Objects that runs allocated meanwhile landed among them, and pymalloc hands
an arena back only once all of it is free, so every walk left the heap a little larger: after 10,000 runs
in a row the process kept about 3 MB more than without the walks.  Now a walk reads the directory
entry by entry (``os.scandir``), keeps only what it acts on (the orphans it found; the oldest logs only
when the size cap is exceeded), and the index of closed logs is updated in place rather than rebuilt.
"""
import contextlib
import fcntl
import os
import threading
from typing import Callable, Dict, Iterator, List, Optional, Tuple

from iaccode_agui.runlog import encoding as logformat
from iaccode_agui.state.flocks import open_probe, try_lock

LOG_SUFFIX = ".log"


def stamp(name: str, size: int, mtime_ns: int) -> int:
    """What the index keeps of a closed log: one hash of its name, size and mtime.

    One small int per kept log instead of its name and a tuple.  Two logs whose triples hash alike (about
    one chance in 2**64 per pair) would only spare the newer one an examination for being an orphan.
    """
    return hash((name, size, mtime_ns))


class ClosedIndex:
    """Stamps of logs seen closed: a closed log never becomes live again, so a walk stats it instead of
    opening, locking and reading it.

    Each complete walk marks the stamps it meets (alternating ``True``/``False``, so marking allocates
    nothing) and then drops the ones it did not meet, whose logs are gone or changed.  A walk that began
    while another was under way leaves the dropping to the later one; what a race loses costs a log one
    more examination, nothing else.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._marks: Dict[int, bool] = {}
        self._mark = False

    def __len__(self) -> int:
        return len(self._marks)

    def __iter__(self) -> Iterator[int]:
        with self._lock:
            return iter(list(self._marks))

    def begin(self) -> bool:
        with self._lock:
            self._mark = not self._mark
            return self._mark

    def meets(self, value: int, mark: bool) -> bool:
        """Whether ``value`` is indexed; marks it as met by the walk that began with ``mark``."""
        with self._lock:
            if value not in self._marks:
                return False
            self._marks[value] = mark      # an existing key: the dict keeps its object and its size
            return True

    def add(self, value: int) -> None:
        with self._lock:
            self._marks[value] = self._mark

    def end(self, mark: bool) -> None:
        with self._lock:
            if mark is not self._mark:
                return
            stale = [value for value, seen in self._marks.items() if seen is not mark]
            for value in stale:
                del self._marks[value]


Entry = Tuple[str, str, Optional[Tuple[int, float]]]


def walk_logs(runs_dir: str, index: ClosedIndex,
              others: Optional[Callable[[str, str], None]] = None) -> Iterator[Entry]:
    """(name, path, (size, mtime) if indexed as closed and unchanged, else None) of each ``.log`` file.

    ``others`` is called with the name and path of every other entry.  The index drops what this walk
    did not meet only when the walk is read to its end.
    """
    mark = index.begin()
    try:
        entries = os.scandir(runs_dir)
    except OSError:
        return
    with entries:
        for entry in entries:
            name = entry.name
            if not name.endswith(LOG_SUFFIX):
                if others is not None:
                    others(name, entry.path)
                continue
            known: Optional[Tuple[int, float]] = None
            if len(index):
                try:
                    info = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if index.meets(stamp(name, info.st_size, info.st_mtime_ns), mark):
                    known = info.st_size, info.st_mtime
            yield name, entry.path, known
    index.end(mark)


def finished_info(path: str) -> Optional[Tuple[int, float, bool]]:
    """(size, mtime, live) of a log, live when its writer still holds its lock; None when unreadable."""
    fd = open_probe(path)
    if fd is None:
        return None
    try:
        info = os.fstat(fd)
        live = not try_lock(fd, fcntl.LOCK_SH)
        return info.st_size, info.st_mtime, live
    except OSError:
        return None
    finally:
        os.close(fd)


def unlink_if_unlocked(path: str) -> bool:
    fd = open_probe(path)
    if fd is None:
        return False
    try:
        if not try_lock(fd, fcntl.LOCK_EX):
            return False
        os.unlink(path)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def is_closed(path: str, size: int) -> bool:
    try:
        with open(path, "rb") as handle:
            handle.seek(max(0, size - 512))
            return logformat.ends_with_close(handle.read())
    except OSError:
        return False


def sweep(runs_dir: str, index: ClosedIndex, ttl: float, max_bytes: int, now: float,
          others: Callable[[str, str], None]) -> int:
    """Remove finished logs older than ``ttl``, then the oldest while all logs exceed ``max_bytes``.

    The first walk removes expired logs as it meets them and sums the sizes of the rest; only when that
    sum is over the cap does a second walk collect the finished logs to remove the oldest of them.
    """
    total = removed = 0
    for _, path, known in walk_logs(runs_dir, index, others):
        info = (known[0], known[1], False) if known is not None else finished_info(path)
        if info is None:
            continue
        size, mtime, live = info
        if not live and now - mtime > ttl and unlink_if_unlocked(path):
            removed += 1        # its stamp leaves the index at the next walk
            continue
        total += size
    if total <= max_bytes:
        return removed
    finished: List[Tuple[float, int, str]] = []
    for _, path, known in walk_logs(runs_dir, index):
        info = (known[0], known[1], False) if known is not None else finished_info(path)
        if info is not None and not info[2]:
            finished.append((info[1], info[0], path))
    finished.sort()
    for _, size, path in finished:
        if total <= max_bytes:
            break
        if unlink_if_unlocked(path):
            total -= size
            removed += 1
    return removed


def seen_closed(index: ClosedIndex, name: str, path: str, size: int) -> bool:
    """Whether the log at ``path`` ends with its close record; a closed one joins the index."""
    if not is_closed(path, size):
        return False
    with contextlib.suppress(OSError):
        info = os.stat(path, follow_symlinks=False)
        if info.st_size == size:
            index.add(stamp(name, info.st_size, info.st_mtime_ns))
    return True

"""Probing another process's ``flock`` on a file in the state directory.

Several files there (run logs, process entries) tell whether their owner is alive by the lock it holds for
its whole life: the kernel drops the lock on any death, even ``kill -9``.  A prober opens the file without
following a planted link or blocking on a planted FIFO, and asks for the lock without waiting.
"""
import errno
import fcntl
import os
from typing import Optional

_PROBE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


def open_probe(path: str) -> Optional[int]:
    """A read-only descriptor of ``path`` for probing its lock; None when it cannot be opened."""
    try:
        return os.open(path, _PROBE_FLAGS)
    except OSError:
        return None


def close_quietly(fd: Optional[int]) -> None:
    """Close a descriptor being given up: a failing close leaves nothing to retry, so it is not an error."""
    if fd is not None:
        try:
            os.close(fd)
        except OSError:
            pass


def try_lock(fd: int, mode: int) -> bool:
    """Take ``mode`` without waiting: False when another descriptor holds a conflicting lock."""
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return False
        raise
    return True

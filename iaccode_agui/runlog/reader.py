"""Reading a run log while another process may still be appending to it.

Kept apart from the writer and the store because a follower on another process needs only this: it
parses whole records as they arrive (a torn tail is kept until the rest is written), and it tells a live
log from a dead one by probing the writer's exclusive ``flock`` with a shared one, which the kernel
releases when the writer dies.  ``WatchMark`` is the follower's own shared lock on the run's ``.watch``
file, so the owner knows somebody elsewhere still listens.
"""
import fcntl
import logging
import os
import stat
from typing import Any, Dict, List, Optional

from iaccode_agui.runlog import encoding as logformat
from iaccode_agui.runlog.encoding import Record
from iaccode_agui.state.flocks import close_quietly
from iaccode_agui.state.flocks import try_lock as _try_lock

log = logging.getLogger("iaccode_agui.runlog")

READ_CHUNK = 1 << 20


class RunLogReader:
    """A reader of one log, from its start; ``read_new`` returns the records written since the last call."""

    def __init__(self, path: str, fd: int) -> None:
        self.path = path
        self._fd: Optional[int] = fd
        self._pending = b""
        self._started = False
        self._backlog: List[Record] = []
        self.header: Dict[str, Any] = {}

    @classmethod
    def open(cls, path: str) -> Optional["RunLogReader"]:
        """The reader with its header read, or None when there is no such (usable) log."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError:
            return None
        reader = cls(path, fd)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise logformat.LogFormatError("not a regular file")
            first = reader.read_new()
        except (OSError, logformat.LogFormatError) as exc:
            log.warning("ignoring unusable run log %s: %s", path, exc)
            reader.close()
            return None
        if not first or first[0].kind != logformat.KIND_HEADER:
            reader.close()    # an empty file: the writer died before its first write
            return None
        reader.header = dict(first[0].fields or {})
        reader._backlog = first[1:]
        return reader

    def read_new(self) -> List[Record]:
        if self._fd is None:
            return []
        backlog, self._backlog = self._backlog, []
        chunks = [self._pending]
        while True:
            chunk = os.read(self._fd, READ_CHUNK)
            if not chunk:
                break
            chunks.append(chunk)
            if len(chunk) < READ_CHUNK:
                break
        data = b"".join(chunks)
        offset = 0
        if not self._started:
            start = logformat.check_magic(data)
            if start is None:
                self._pending = data
                return backlog
            self._started = True
            offset = start
        records, used = logformat.parse(data, offset)
        self._pending = data[used:]
        return backlog + records

    def writer_alive(self) -> bool:
        """Whether a process still holds the log open for writing."""
        if self._fd is None:
            return False
        if _try_lock(self._fd, fcntl.LOCK_SH):
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            return False
        return True

    def close(self) -> None:
        fd, self._fd = self._fd, None
        close_quietly(fd)


class WatchMark:
    """A shared lock on the run's ``.watch`` file, held while a client follows the run from another process."""

    def __init__(self, fd: int) -> None:
        self._fd: Optional[int] = fd

    def release(self) -> None:
        fd, self._fd = self._fd, None
        close_quietly(fd)

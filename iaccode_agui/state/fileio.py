"""File primitives the store and its journal share: private directories, atomic replace, bounded reads.

They live apart from the store so the store module holds only the rules (locks, transactions, which write
is durable when), and the journal's recovery can restore a file exactly the way the store writes one.
"""
import contextlib
import errno
import os
import stat
import time
from typing import Any, Dict, List, Optional

REPLACE_ATTEMPTS = 3
DIR_MODE = 0o700
FILE_MODE = 0o600


def os_reason(exc: OSError) -> str:
    name = errno.errorcode.get(exc.errno or 0, "")
    return "%s (%s)" % (exc.strerror or exc, name) if name else str(exc.strerror or exc)


def free_bytes(path: str) -> int:
    """Bytes an unprivileged process may still write on the file system that holds ``path``."""
    info = os.statvfs(path)
    return info.f_bavail * info.f_frsize


def size_text(count: int) -> str:
    """``count`` bytes for a person: whole KiB below a MiB, else MiB or GiB with one decimal."""
    for unit, shift in (("GiB", 30), ("MiB", 20)):
        if count >= 1 << shift:
            return "%.1f %s" % (count / (1 << shift), unit)
    return "%d KiB" % (count // 1024)


def make_private_dirs(path: str) -> None:
    """Create ``path`` and missing parents as 0700, whatever the umask; existing directories keep their mode."""
    missing = []
    current = path
    while not os.path.isdir(current):
        missing.append(current)
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    for directory in reversed(missing):
        try:
            os.mkdir(directory, DIR_MODE)
        except FileExistsError:
            continue
        os.chmod(directory, DIR_MODE)


def replace_file(directory: str, name: str, payload: bytes, *, fsync: bool) -> str:
    """Write ``payload`` to a private temp file and rename it over ``name``; the final path is returned.

    A reader therefore sees the old or the new document, never a torn one.  ``fsync`` also makes the file
    and its directory entry durable; without it the bytes are in the page cache (visible to every process
    at once) and the caller's journal is what survives a power loss.  One fixed temp name per file: writes
    to one file are serialised by its lock, and a temp file left by a killed process is simply reused.
    """
    final = os.path.join(directory, name)
    temp: Optional[str] = os.path.join(directory, ".%s.tmp" % name)
    fd: Optional[int] = None
    try:
        # O_NONBLOCK: a FIFO planted at the temp name must fail at once (ENXIO without a reader, the
        # regular-file check below with one) instead of blocking this thread's writes forever.
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK,
                     FILE_MODE)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "the temporary state file is not a regular file")
        os.fchmod(fd, FILE_MODE)
        write_all(fd, payload)
        if fsync:
            os.fsync(fd)
        os.close(fd)
        fd = None
        replace_with_retries(temp, final)
        temp = None
        if fsync:
            fsync_dir(directory)
        return final
    finally:
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)
        if temp is not None:
            with contextlib.suppress(OSError):
                os.unlink(temp)


def write_all(fd: int, payload: bytes) -> None:
    view = memoryview(payload)
    while view:
        view = view[os.write(fd, view):]


def replace_with_retries(source: str, target: str) -> None:
    for attempt in range(REPLACE_ATTEMPTS):
        try:
            os.replace(source, target)
            return
        except OSError:
            if attempt == REPLACE_ATTEMPTS - 1:
                raise
            time.sleep(0.01 * (attempt + 1))


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_path(path: str) -> bool:
    """fsync the regular file at ``path`` (no symlink followed); False when it is gone or not regular."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except (FileNotFoundError, OSError) as exc:
        if isinstance(exc, FileNotFoundError) or exc.errno in (errno.ELOOP, errno.ENXIO):
            return False
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        os.fsync(fd)
        return True
    finally:
        os.close(fd)


def read_at_most(fd: int, limit: int) -> bytes:
    chunks = []
    remaining = limit
    while remaining > 0:
        chunk = os.read(fd, min(remaining, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def read_regular(path: str, limit: int) -> Optional[bytes]:
    """The bytes of the regular file at ``path``, None when there is none.

    A symlink is never followed and a FIFO never waited on; a special file or one over ``limit`` bytes is a
    ``ValueError`` (its reason), any other failure the ``OSError`` itself.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError("not a regular file")
        if info.st_size > limit:
            raise ValueError("exceeds %d bytes" % limit)
        data = read_at_most(fd, limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:      # it grew while being read
        raise ValueError("exceeds %d bytes" % limit)
    return data


def unique_keys(pairs: List[Any]) -> Dict[str, Any]:
    result: Dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError("duplicate key %r" % key)
        result[key] = value
    return result


def no_constant(name: str) -> Any:
    raise ValueError("non-finite number %s" % name)

"""Which adapter processes share the state directory right now, and which A2A runtime each one uses.

A thread's session and tasks live in one runtime.  Two processes on one state directory configured with
different runtimes would each send the other's tasks to the wrong runtime and report ``EXECUTION_LOST`` or
a 502 for what is really a deployment mistake.  Each process therefore registers itself in
``<state dir>/processes`` with its runtime, holding an ``flock`` on its entry for its whole life (the kernel
drops it on any death, even ``kill -9``).  A thread records the runtime it was last run on; a process
that finds another runtime there asks the registry whether a live process still uses it: if so the
configuration is wrong and the request is refused clearly, if not the old runtime is simply gone (a
restart with a new runtime) and the thread carries on as after any runtime restart.

Runtimes are compared by what reaches them, not by how their URL is spelt: ``http://localhost:8765`` and
``http://127.0.0.1:8765/`` are one runtime, and two processes configured with those spellings must not
refuse each other's threads.
"""
import contextlib
import errno
import fcntl
import ipaddress
import json
import logging
import os
import stat
from typing import Optional, Set, Tuple
from urllib.parse import urlsplit

from iaccode_agui.state.flocks import close_quietly, open_probe, try_lock
from iaccode_agui.state.keys import thread_file_stem

log = logging.getLogger("iaccode_agui.state")

_DIR_MODE = 0o700
_FILE_MODE = 0o600
_MAX_ENTRY_BYTES = 64 * 1024


_DEFAULT_PORTS = {"http": 80, "https": 443}
# The names and addresses a loopback runtime is reached by when it listens on the usual loopback socket:
# ``localhost`` resolves to 127.0.0.1 and ::1 (the hosts file, not DNS), so all three spell one runtime.
_USUAL_LOOPBACK = frozenset(["localhost", "127.0.0.1", "::1"])

RuntimeKey = Tuple[str, str, int, str]


def runtime_key(url: str) -> RuntimeKey:
    """What identifies a runtime: scheme, host (the usual loopback spellings as one), port, path.

    No name is looked up: only ``localhost`` and literal addresses reach a runtime (the URL is checked
    to be loopback at start-up), so the comparison needs no network.  An unparsable URL is its own key.
    """
    try:
        parts = urlsplit(url.strip())
        scheme = parts.scheme.lower()
        host = (parts.hostname or "").lower().rstrip(".")
        port = parts.port or _DEFAULT_PORTS.get(scheme, 0)
    except ValueError:
        return ("", url, 0, "")
    try:
        host = str(ipaddress.ip_address(host))       # one spelling per address (::0:1 is ::1)
    except ValueError:
        pass
    if host in _USUAL_LOOPBACK:
        host = "loopback"
    return (scheme, host, port, parts.path.rstrip("/"))


def same_runtime(first: Optional[str], second: Optional[str]) -> bool:
    return first is not None and second is not None and runtime_key(first) == runtime_key(second)


class ProcessRegistry:
    def __init__(self, state_dir: str, owner: str, runtime: str) -> None:
        self.directory = os.path.join(os.path.abspath(state_dir), "processes")
        self.owner = owner
        self.runtime = runtime
        self._fd: Optional[int] = None

    def _path(self) -> str:
        return os.path.join(self.directory, thread_file_stem(self.owner) + ".json")

    def register(self) -> None:
        """Announce this process; best-effort (without it, mismatches are only not detected).

        The entry is written, closed, and then locked through a read-only descriptor: a descriptor held open
        for writing would keep the file system from being remounted read-only while the process lives.
        """
        if self._fd is not None:
            return
        path = self._path()
        try:
            os.makedirs(self.directory, _DIR_MODE, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, _FILE_MODE)
            try:
                os.write(fd, json.dumps({"owner": self.owner, "runtime": self.runtime}).encode("utf-8"))
            finally:
                os.close(fd)
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as exc:
            log.warning("cannot register this process in the state directory: %s", exc)
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if os.fstat(fd).st_ino != os.stat(path).st_ino:
                raise OSError(errno.ESTALE, "the entry was taken for a dead one meanwhile")
        except OSError as exc:
            os.close(fd)
            log.warning("cannot register this process in the state directory: %s", exc)
            return
        self._fd = fd

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.unlink(self._path())
            close_quietly(fd)

    def live_runtimes(self) -> Set[str]:
        """Runtimes of every live registered process; entries of dead processes are removed."""
        found: Set[str] = set()
        try:
            names = os.listdir(self.directory)
        except OSError:
            return found
        for name in names:
            if not name.endswith(".json"):
                continue
            runtime = self._live_entry(os.path.join(self.directory, name))
            if runtime is not None:
                found.add(runtime)
        return found

    @staticmethod
    def _live_entry(path: str) -> Optional[str]:
        fd = open_probe(path)
        if fd is None:
            return None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            if not try_lock(fd, fcntl.LOCK_SH):
                entry = json.loads(os.read(fd, _MAX_ENTRY_BYTES).decode("utf-8"))
                runtime = entry.get("runtime") if isinstance(entry, dict) else None
                return runtime if isinstance(runtime, str) else None
            with contextlib.suppress(OSError):
                os.unlink(path)   # nobody holds it: its process is gone
            return None
        except (OSError, ValueError):
            return None
        finally:
            os.close(fd)

    def conflicts_with(self, recorded: Optional[str]) -> bool:
        """Whether a thread recorded on ``recorded`` belongs to a runtime another live process still uses."""
        if not recorded or same_runtime(recorded, self.runtime):
            return False
        key = runtime_key(recorded)
        return any(runtime_key(runtime) == key for runtime in self.live_runtimes())

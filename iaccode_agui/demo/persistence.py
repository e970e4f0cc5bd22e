"""The scripted runtime's sessions and tasks on disk, so a restarted demo behaves like a restarted iac-code.

The real runtime keeps its sessions and tasks across restarts; the adapter keeps its threads.  A demo that
forgot its side on every restart made every thread the adapter remembered unusable.  Each task is one
small JSON document written when its turn ends (or it is cancelled); the context -> session map is one
more.  Writes go to a temp file that is renamed over the old one, so a killed demo leaves the old or the
new document, never half of one.  At most ``max_tasks`` documents are kept: the oldest are dropped.
"""
import contextlib
import json
import logging
import os
import threading
from typing import Any, Dict, Iterator, List, Optional

log = logging.getLogger("iaccode_agui.demo")

MAX_TASKS = 1000
_DIR_MODE = 0o700
_FILE_MODE = 0o600
SESSIONS_FILE = "sessions.json"
TASKS_DIR = "tasks"


class RuntimeDisk:
    """One directory: ``sessions.json`` and ``tasks/<task id>.json``."""

    def __init__(self, directory: str, max_tasks: int = MAX_TASKS) -> None:
        self.directory = os.path.abspath(directory)
        self.tasks_dir = os.path.join(self.directory, TASKS_DIR)
        self.max_tasks = max_tasks
        self._lock = threading.Lock()
        self._saves = 0
        for path in (self.directory, self.tasks_dir):
            os.makedirs(path, mode=_DIR_MODE, exist_ok=True)
            os.chmod(path, _DIR_MODE)

    # -- sessions --
    def load_sessions(self) -> Dict[str, str]:
        value = self._read(os.path.join(self.directory, SESSIONS_FILE))
        if not isinstance(value, dict):
            return {}
        return {key: item for key, item in value.items() if isinstance(key, str) and isinstance(item, str)}

    def save_sessions(self, sessions: Dict[str, str]) -> None:
        self._write(os.path.join(self.directory, SESSIONS_FILE), sessions)

    # -- tasks --
    def load_tasks(self) -> List[Dict[str, Any]]:
        self._prune()
        documents = []
        for name in sorted(os.listdir(self.tasks_dir)):
            if name.endswith(".json"):
                document = self._read(os.path.join(self.tasks_dir, name))
                if isinstance(document, dict) and isinstance(document.get("id"), str):
                    documents.append(document)
        return documents

    def save_task(self, document: Dict[str, Any]) -> None:
        task_id = document["id"]
        if not _safe_name(task_id):
            return
        self._write(os.path.join(self.tasks_dir, task_id + ".json"), document)
        with self._lock:
            self._saves += 1
            due = self._saves % 100 == 0
        if due:
            self._prune()

    # -- files --
    def _prune(self) -> None:
        with contextlib.suppress(OSError):
            entries = [entry for entry in os.scandir(self.tasks_dir) if entry.name.endswith(".json")]
            if len(entries) <= self.max_tasks:
                return
            entries.sort(key=lambda entry: entry.stat().st_mtime)
            for entry in entries[:len(entries) - self.max_tasks]:
                os.unlink(entry.path)

    @staticmethod
    def _read(path: str) -> Any:
        try:
            with open(path, encoding="utf-8") as handle:
                return json.load(handle)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            log.warning("demo runtime: ignoring unreadable %s: %s", path, exc)
            return None

    def _write(self, path: str, value: Any) -> None:
        try:
            payload = json.dumps(value, ensure_ascii=False, sort_keys=True).encode("utf-8")
        except (TypeError, ValueError) as exc:
            log.warning("demo runtime: cannot save %s: %s", path, exc)
            return
        temp = "%s.%d.%d.tmp" % (path, os.getpid(), threading.get_ident())
        try:
            with _private_file(temp) as handle:
                handle.write(payload)
            os.replace(temp, path)
        except OSError as exc:
            log.warning("demo runtime: cannot save %s: %s", path, exc)
            with contextlib.suppress(OSError):
                os.unlink(temp)


@contextlib.contextmanager
def _private_file(path: str) -> Iterator[Any]:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, _FILE_MODE)
    with os.fdopen(fd, "wb") as handle:
        yield handle


def _safe_name(task_id: str) -> bool:
    return bool(task_id) and len(task_id) <= 200 and all(ch.isalnum() or ch in "-_." for ch in task_id) \
        and not task_id.startswith(".")


def open_disk(directory: Optional[str]) -> Optional[RuntimeDisk]:
    return RuntimeDisk(directory) if directory else None

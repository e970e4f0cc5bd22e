"""Each thread's conversation, kept beside its state: ``<stem>~history.json`` in the threads directory.

The format is one JSON document per thread, replaced whole on every write::

    {"schemaVersion": 1, "threadId": "...", "revision": 7, "truncated": false,
     "runs": ["<key of a saved run>", ...], "messages": [<AG-UI Message>, ...]}

Why one document and not an append-only file: it is written exactly like the thread's state
(``ThreadStore.put_document``: a journal record made durable by the shared group commit, then an atomic
replace; after a power loss the journal's recovery restores it by the same revision rule), so it is durable
under the same rules with no machinery of its own.  Every process on the state directory reads a whole
document, never a torn tail to skip or a series of changes to fold, and ``--history-max-bytes`` bounds what
each write costs.  The price, rewriting the conversation at the end of each run, is bounded by that setting.

- Writers hold ``thread_locked("<stem>~history")``, the lock the journal's recovery takes for this file;
  readers take none (the replace is atomic).  A plain stem never contains ``~`` and the encoded ones never
  end in ``~history``, so the name cannot be another thread's.
- ``runs`` is a window of the runs already saved: a run adopted after its owner died right after saving it
  is not added a second time.
- The prune tool removes the file (and its lock) together with the thread's state (``state.prune``).
"""
import dataclasses
import json
import os
from typing import Any, Callable, Dict, List, Optional

from iaccode_agui.state.fileio import no_constant, read_regular, unique_keys
from iaccode_agui.state.keys import thread_file_stem
from iaccode_agui.state.store import MAX_STATE_BYTES, StateUnavailable, StateWriteFailed, ThreadStore

SUFFIX = "~history"
SCHEMA_VERSION = 1
RUNS_KEPT = 32
_KEYS = ("schemaVersion", "threadId", "revision", "truncated", "runs", "messages")


@dataclasses.dataclass
class History:
    messages: List[Dict[str, Any]] = dataclasses.field(default_factory=list)
    truncated: bool = False
    runs: List[str] = dataclasses.field(default_factory=list)
    revision: int = 0           # the file's; a write stores one more


def history_stem(thread_id: str) -> str:
    return thread_file_stem(thread_id) + SUFFIX


def parse(data: bytes, thread_id: str) -> History:
    """A stored document, checked; ``ValueError`` names what is wrong with it."""
    doc = json.loads(data.decode("utf-8"), object_pairs_hook=unique_keys, parse_constant=no_constant)
    if not isinstance(doc, dict) or sorted(doc) != sorted(_KEYS) or doc["schemaVersion"] != SCHEMA_VERSION:
        raise ValueError("not a version %d conversation document" % SCHEMA_VERSION)
    if doc["threadId"] != thread_id:
        raise ValueError("the document belongs to another thread")
    messages, runs = doc["messages"], doc["runs"]
    if type(doc["truncated"]) is not bool or not isinstance(runs, list) or not isinstance(messages, list) or \
            not all(isinstance(run, str) for run in runs) or type(doc["revision"]) is not int:
        raise ValueError("truncated, revision, runs or messages has the wrong type")
    for message in messages:
        if not isinstance(message, dict) or not isinstance(message.get("id"), str) or \
                not isinstance(message.get("role"), str):
            raise ValueError("a message without a string id and role")
    return History(messages, doc["truncated"], runs, doc["revision"])


class HistoryStore:
    """Reads and writes the conversations of a state directory's threads."""

    def __init__(self, store: ThreadStore) -> None:
        self.store = store

    def path_for(self, thread_id: str) -> str:
        return os.path.join(self.store.threads_dir, history_stem(thread_id) + ".json")

    def load(self, thread_id: str) -> Optional[History]:
        """The thread's conversation (None when it has none); ``StateUnavailable`` when it cannot be read."""
        self.store.recover()
        return self._read(thread_id)

    def update(self, thread_id: str, change: Callable[[History], Optional[History]]) -> None:
        """One locked read-modify-write; ``change`` returns the new conversation, or None to leave it."""
        self.store.recover()
        stem = history_stem(thread_id)
        with self.store.thread_locked(stem):
            current = self._read(thread_id) or History()
            revision = current.revision
            new = change(current)
            if new is None:
                return
            document = {"schemaVersion": SCHEMA_VERSION, "threadId": thread_id, "revision": revision + 1,
                        "truncated": new.truncated, "runs": new.runs[-RUNS_KEPT:], "messages": new.messages}
            try:
                text = json.dumps(document, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
            except (TypeError, ValueError) as exc:
                raise StateWriteFailed("the conversation is not JSON: %s" % exc) from None
            payload = (text + "\n").encode("utf-8", "surrogatepass")
            if len(payload) > MAX_STATE_BYTES:
                raise StateWriteFailed("the conversation exceeds %d bytes" % MAX_STATE_BYTES)
            self.store.put_document(stem, payload)

    def _read(self, thread_id: str) -> Optional[History]:
        try:
            data = read_regular(self.path_for(thread_id), MAX_STATE_BYTES)
            return None if data is None else parse(data, thread_id)
        except (OSError, ValueError) as exc:      # UnicodeDecodeError and JSONDecodeError are ValueErrors
            raise StateUnavailable("the conversation of thread %r cannot be read: %s" % (thread_id, exc)) from exc

"""Removing idle threads from a state directory, safely next to running adapters.

Every thread leaves up to three files (``<stem>.json``, ``.lock``, ``.run``) and its stored conversation
(``<stem>~history.json`` and its ``.lock``) that the adapter never removes on its own, because a lock file
must outlive every holder; the conversation goes with the thread.  A thread is removed only while this process
holds both of its locks, so no adapter is inside a read-modify-write or a run of it, and only when nothing
in it can still be needed: no active or orphaned run (an orphaned one is recovered by the next request),
no interrupt that can still be answered, no file written within the idle window, and a document that
reads back cleanly (a corrupt one is left for the operator to inspect).  Adapters that were waiting on a
removed lock file notice it and lock the new one (see ``ThreadStore.lock_file``).
"""
import contextlib
import dataclasses
import fcntl
import json
import os
import stat
import time
from typing import Dict, Iterator, List, Optional, Tuple

from iaccode_agui.state.history_store import SUFFIX as HISTORY
from iaccode_agui.state.journal import MentionScan
from iaccode_agui.state.keys import thread_file_stem
from iaccode_agui.state.model import StateCorrupt, ThreadState
from iaccode_agui.state.store import MAX_STATE_BYTES, StateUnavailable, ThreadStore

SUFFIXES = (".json", ".lock", ".run")

# Outcomes, in the order a thread is checked.
REMOVED = "removed"
BUSY = "busy"                # a transaction or a run holds a lock right now
ACTIVE = "active"            # the document records an active (or orphaned) run
INTERRUPTED = "interrupted"  # an interrupt can still be answered
RECENT = "recent"            # written within the idle window
UNREADABLE = "unreadable"    # not a regular file, too large, corrupt or another thread's document


@dataclasses.dataclass
class PruneReport:
    outcomes: Dict[str, List[str]] = dataclasses.field(default_factory=dict)

    def add(self, outcome: str, stem: str) -> None:
        self.outcomes.setdefault(outcome, []).append(stem)

    def count(self, outcome: str) -> int:
        return len(self.outcomes.get(outcome, []))


def thread_stems(store: ThreadStore) -> List[str]:
    """Every stem with at least one file in the threads directory (temp files included)."""
    try:
        names = os.listdir(store.threads_dir)
    except FileNotFoundError:
        return []
    stems = set()
    for name in names:
        if name.startswith(".") and name.endswith(".json.tmp"):
            stems.add(name[1:-len(".json.tmp")])
            continue
        for suffix in SUFFIXES:
            if name.endswith(suffix):
                stems.add(name[:-len(suffix)])
    # A conversation's files belong to their thread's stem.
    return sorted({stem[:-len(HISTORY)] if stem.endswith(HISTORY) else stem for stem in stems})


def prune(store: ThreadStore, idle_seconds: float, *, dry_run: bool = False,
          now: Optional[float] = None) -> PruneReport:
    """Remove every thread idle for ``idle_seconds`` that nothing can still need; report each stem's outcome."""
    report = PruneReport()
    moment = time.time() if now is None else now
    store.recover()  # a dead process's journal is applied (and removed) before anything is judged
    journals = MentionScan(store.journal_dir)
    for stem in thread_stems(store):
        report.add(prune_thread(store, stem, idle_seconds, moment, dry_run, journals), stem)
    return report


def prune_thread(store: ThreadStore, stem: str, idle_seconds: float, now: float, dry_run: bool = False,
                 journals: Optional[MentionScan] = None) -> str:
    with _both_locks(store, stem) as held:
        if not held:
            return BUSY
        # A journal that still names the thread would restore it after a power loss: its owner has not
        # checkpointed that write yet (it will within seconds), so the thread counts as recently written.
        scan = journals or MentionScan(store.journal_dir)
        if scan.mentions(stem) or scan.mentions(stem + HISTORY):
            return RECENT
        verdict = _verdict(store, stem, idle_seconds, now)
        if verdict is None:
            if not dry_run:
                _remove(store, stem)
            return REMOVED
        return verdict


@contextlib.contextmanager
def _both_locks(store: ThreadStore, stem: str) -> Iterator[bool]:
    fds: List[int] = []
    try:
        # A conversation is written only by its thread's run, under the run lease held here, or by a journal
        # recovery, which the mention check below covers: its own lock need not be taken (nor created).
        for suffix in (".lock", ".run"):
            fd = store.lock_file(stem + suffix, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if fd is None:
                yield False
                return
            fds.append(fd)
        yield True
    finally:
        for fd in fds:
            os.close(fd)


def _verdict(store: ThreadStore, stem: str, idle_seconds: float, now: float) -> Optional[str]:
    """Why the thread must stay, or None when it may go."""
    try:
        state = _load(store, stem)
    except (StateUnavailable, StateCorrupt, ValueError, OSError):
        return UNREADABLE
    if state is not None:
        if state.active_run is not None:
            return ACTIVE
        if any(not item.is_expired(now) for item in state.execution.pending.values()):
            return INTERRUPTED
    if now - _newest_mtime(store, stem) < idle_seconds:
        return RECENT
    return None


def _load(store: ThreadStore, stem: str) -> Optional[ThreadState]:
    """The thread's state, found by stem: its document names the thread id, which must map back to it."""
    path = os.path.join(store.threads_dir, stem + ".json")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_STATE_BYTES:
            raise StateCorrupt("not a regular state file of an acceptable size")
        document = json.loads(handle.read().decode("utf-8"))
    thread_id = document.get("threadId") if isinstance(document, dict) else None
    if not isinstance(thread_id, str) or thread_file_stem(thread_id) != stem:
        raise StateCorrupt("the document belongs to another thread")
    return ThreadState.from_document(document, thread_id)


def _newest_mtime(store: ThreadStore, stem: str) -> float:
    newest = 0.0
    for name in _file_names(stem):
        with contextlib.suppress(FileNotFoundError):
            newest = max(newest, os.lstat(os.path.join(store.threads_dir, name)).st_mtime)
    return newest


def _file_names(stem: str) -> Tuple[str, ...]:
    # The lock files go last: until then a concurrent adapter still waits on the same files.
    conversation = stem + HISTORY
    return (stem + ".json", ".%s.json.tmp" % stem, conversation + ".json", ".%s.json.tmp" % conversation,
            stem + ".run", conversation + ".lock", stem + ".lock")


def _remove(store: ThreadStore, stem: str) -> None:
    for name in _file_names(stem):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(store.threads_dir, name))
    fd = os.open(store.threads_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

"""Idle threads leave files behind; the prune command removes them, never a thread that is still needed."""
import fcntl
import os
import subprocess
import sys
import threading
import time

import pytest

from iaccode_agui.state import prune as pruning
from iaccode_agui.state.model import ActiveRun, Execution, ThreadState
from iaccode_agui.state.store import ThreadStore
from tests import ROOT
from tests.core.test_state_store import make_state

DAY = 86400.0
TOOL = os.path.join(ROOT, "tools", "prune_threads.py")


def _idle(store: ThreadStore, thread_id: str, thread_state: ThreadState = None) -> None:
    with store.transaction(thread_id) as txn:
        if thread_state is not None:
            txn.save(thread_state)
    store.run_lease_is_held(thread_id)          # creates the .run file, as a real run does
    _age(store, thread_id, 10 * DAY)


def _age(store: ThreadStore, thread_id: str, seconds: float) -> None:
    stem = store.path_for(thread_id)[:-len(".json")]
    past = time.time() - seconds
    for suffix in pruning.SUFFIXES:
        if os.path.exists(stem + suffix):
            os.utime(stem + suffix, (past, past))


def _plain(thread_id: str) -> ThreadState:
    state = make_state(thread_id)
    state.execution = Execution("exec-1", "ros-1")
    return state


def _files(store: ThreadStore):
    return sorted(os.listdir(store.threads_dir))


@pytest.fixture
def store(tmp_path) -> ThreadStore:
    return ThreadStore(str(tmp_path / "state"), fsync=False)


def test_prune_removes_only_threads_nothing_needs(store):
    _idle(store, "old", _plain("old"))
    _idle(store, "locks-only")                                   # a refused request left only lock files
    with store.transaction("fresh") as txn:
        txn.save(_plain("fresh"))
    _idle(store, "waiting", make_state("waiting"))               # an interrupt without expiry is still answerable
    orphan = _plain("orphan")
    orphan.active_run = ActiveRun("run-1", "owner", time.time())
    _idle(store, "orphan", orphan)
    _idle(store, "running", _plain("running"))
    _idle(store, "corrupt", _plain("corrupt"))
    with open(store.path_for("corrupt"), "w") as handle:
        handle.write("{not json")
    _age(store, "corrupt", 10 * DAY)
    lease = store.try_run_lease("running")
    try:
        report = pruning.prune(store, 7 * DAY)
    finally:
        lease.release()
    assert report.outcomes == {"removed": ["locks-only", "old"], "recent": ["fresh"], "interrupted": ["waiting"],
                               "active": ["orphan"], "busy": ["running"], "unreadable": ["corrupt"]}
    left = _files(store)
    assert not [name for name in left if name.startswith(("old.", "locks-only."))]
    for kept in ("fresh", "waiting", "orphan", "running", "corrupt"):
        assert kept + ".json" in left
    with store.transaction("old") as txn:                        # a pruned thread simply starts afresh
        assert txn.state is None
        txn.save(_plain("old"))


def test_prune_of_many_idle_threads_leaves_no_files(store):
    for index in range(300):
        _idle(store, "t-%d" % index, _plain("t-%d" % index))
    assert len(_files(store)) == 900
    assert pruning.prune(store, 7 * DAY, dry_run=True).count("removed") == 300
    assert len(_files(store)) == 900
    assert pruning.prune(store, 7 * DAY).count("removed") == 300
    assert _files(store) == []


def test_a_waiter_on_a_removed_lock_file_locks_the_new_one(store):
    _idle(store, "race", _plain("race"))
    lock_path = store.path_for("race")[:-len(".json")] + ".lock"
    holder = os.open(lock_path, os.O_RDWR)
    fcntl.flock(holder, fcntl.LOCK_EX)
    inside = threading.Event()
    leave = threading.Event()

    def waiter() -> None:
        with store.transaction("race"):
            inside.set()
            leave.wait(5)

    worker = threading.Thread(target=waiter, daemon=True)
    worker.start()
    time.sleep(0.2)                                              # the waiter now blocks on the old file
    os.unlink(lock_path)
    os.close(holder)                                             # ... and gets the old, unlinked file
    assert inside.wait(5)
    probe = os.open(lock_path, os.O_RDWR)                        # the file the waiter must hold by now
    try:
        with pytest.raises(BlockingIOError):
            fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(probe)
        leave.set()
        worker.join(5)


def test_prune_command_dry_run_then_real(store):
    _idle(store, "old", _plain("old"))
    _idle(store, "waiting", make_state("waiting"))
    base = [sys.executable, TOOL, "--state-dir", store.state_dir, "--idle-days", "7"]
    dry = subprocess.run(base + ["--dry-run"], capture_output=True, text=True, timeout=60)
    assert dry.returncode == 0 and "would be removed           1" in dry.stdout, dry.stdout + dry.stderr
    assert "old.json" in _files(store)
    real = subprocess.run(base, capture_output=True, text=True, timeout=60)
    assert real.returncode == 0 and "removed                    1" in real.stdout, real.stdout
    assert "kept (interrupted)         1" in real.stdout
    assert "old.json" not in _files(store) and "waiting.json" in _files(store)

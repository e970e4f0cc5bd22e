"""File store: atomic durable writes, refusal of odd files, per-thread locking across threads and processes,
and run leases that die with their process."""
import glob
import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time

import pytest

import iaccode_agui
from iaccode_agui.state import store as store_module
from iaccode_agui.state import journal as journal_module
from iaccode_agui.state.keys import thread_file_stem
from iaccode_agui.state.model import Execution, PendingInterrupt, ThreadState
from iaccode_agui.state.store import StateUnavailable, StateWriteFailed, ThreadStore

PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(iaccode_agui.__file__)))


def make_state(thread_id: str = "thread-1", sequence: int = 0) -> ThreadState:
    return ThreadState(
        thread_id=thread_id,
        context_id="ctx",
        cwd="/w",
        user_id="u",
        session_id=None,
        execution=Execution(
            "exec-1",
            "ros-1",
            pipeline_sequence=sequence,
            pending={"in-1": PendingInterrupt({"inputId": "in-1", "title": "Zürich"})},
        ),
    )


def save(store: ThreadStore, state: ThreadState) -> None:
    with store.transaction(state.thread_id) as txn:
        txn.save(state)


def temp_files(store: ThreadStore):
    return glob.glob(os.path.join(store.threads_dir, ".*.tmp"))


@pytest.fixture
def store(tmp_path):
    return ThreadStore(str(tmp_path / "state"))


# --- basic reads and writes ------------------------------------------------------------------------------


def test_missing_thread_loads_as_none_without_creating_anything(tmp_path):
    fresh = ThreadStore(str(tmp_path / "absent"))
    assert fresh.load("t") is None
    assert not os.path.exists(fresh.state_dir)


def test_save_then_load_round_trips(store):
    with store.transaction("thread-1") as txn:
        assert txn.state is None
        txn.save(make_state(sequence=3))
        assert txn.state.execution.pipeline_sequence == 3
    assert store.load("thread-1") == make_state(sequence=3)
    with store.transaction("thread-1") as txn:
        assert txn.state == make_state(sequence=3)


def test_after_a_save_the_transaction_holds_its_own_copy_of_what_was_written(store):
    state = make_state(sequence=3)
    with store.transaction("thread-1") as txn:
        txn.save(state)
        state.execution.pipeline_sequence = 9          # the caller's object is not the transaction's
        assert txn.state is not state and txn.state == make_state(sequence=3)
        assert txn.state == store.load("thread-1")


def test_file_format_and_location(store):
    save(store, make_state("Thread/X"))
    path = store.path_for("Thread/X")
    assert os.path.basename(path) == thread_file_stem("Thread/X") + ".json"
    text = open(path, encoding="utf-8").read()
    assert text.endswith("}\n") and text.count("\n") == 1
    assert text.startswith('{"activeRun":null,"appliedResumeDigests":[]')  # compact, keys sorted
    assert text.isascii() and "Z\\u00fcrich" in text
    assert json.loads(text)["threadId"] == "Thread/X"


def test_a_pretty_printed_file_of_an_earlier_version_still_loads_and_is_rewritten_compact(store):
    save(store, make_state())
    path = store.path_for("thread-1")
    document = json.load(open(path, encoding="utf-8"))
    with open(path, "w", encoding="utf-8") as handle:   # what earlier versions wrote: indent=2
        handle.write(json.dumps(document, indent=2, sort_keys=True) + "\n")
    assert store.load("thread-1") == make_state()
    with store.transaction("thread-1") as txn:
        assert txn.state == make_state()
        txn.save(make_state(sequence=4))
    assert store.load("thread-1") == make_state(sequence=4)
    assert open(path, encoding="utf-8").read().count("\n") == 1


def test_a_saved_state_with_a_credential_is_refused_and_one_on_disk_is_corrupt(store):
    leaking = make_state()
    leaking.execution.pending["in-1"].value["nested"] = [{"llm-api-key": "x"}]
    with store.transaction("thread-1") as txn:
        with pytest.raises(ValueError, match="credentials"):
            txn.save(leaking)
    assert store.load("thread-1") is None
    save(store, make_state())
    path = store.path_for("thread-1")
    document = json.load(open(path, encoding="utf-8"))
    document["execution"]["pending"]["in-1"]["value"]["nested"] = [{"llmApiKey": "x"}]
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(document, handle)
    with pytest.raises(StateUnavailable, match="credential"):
        store.load("thread-1")


def test_saved_state_is_a_snapshot(store):
    state = make_state()
    with store.transaction("thread-1") as txn:
        txn.save(state)
        state.execution.pipeline_sequence = 99
        assert txn.state.execution.pipeline_sequence == 0


def test_save_refuses_foreign_thread_credentials_and_invalid_states(store):
    save(store, make_state())
    before = open(store.path_for("thread-1"), "rb").read()
    with store.transaction("thread-1") as txn:
        with pytest.raises(ValueError):
            txn.save(make_state("thread-2"))
        leaking = make_state()
        leaking.execution.pending["in-1"].value["llmHeaders"] = {"Authorization": "x"}
        with pytest.raises(ValueError):
            txn.save(leaking)
        invalid = make_state()
        invalid.context_id = ""
        with pytest.raises(ValueError, match="contextId"):
            txn.save(invalid)
    assert open(store.path_for("thread-1"), "rb").read() == before
    assert temp_files(store) == []


def test_transaction_is_single_use_and_not_reentrant(store):
    with store.transaction("thread-1") as txn:
        with pytest.raises(RuntimeError):
            with store.transaction("thread-1"):
                pass
    with pytest.raises(RuntimeError):
        txn.save(make_state())


def test_delete_removes_the_document(store):
    save(store, make_state())
    with store.transaction("thread-1") as txn:
        txn.delete()
        assert txn.state is None
    assert store.load("thread-1") is None


# --- permissions -----------------------------------------------------------------------------------------


def test_directories_0700_and_files_0600_despite_umask(tmp_path):
    target = ThreadStore(str(tmp_path / "a" / "b" / "state"))
    old = os.umask(0o277)  # would leave directories 0500 and files 0400 without explicit chmod
    try:
        save(target, make_state())
    finally:
        os.umask(old)
    for directory in (tmp_path / "a", tmp_path / "a" / "b", tmp_path / "a" / "b" / "state", target.threads_dir):
        assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700, directory
    for name in os.listdir(target.threads_dir):
        assert stat.S_IMODE(os.stat(os.path.join(target.threads_dir, name)).st_mode) == 0o600, name


def test_existing_threads_directory_is_tightened(tmp_path):
    threads = tmp_path / "state" / "threads"
    threads.mkdir(parents=True)
    os.chmod(str(threads), 0o755)
    save(ThreadStore(str(tmp_path / "state")), make_state())
    assert stat.S_IMODE(os.stat(str(threads)).st_mode) == 0o700


# --- atomicity and fault injection -----------------------------------------------------------------------


def _failing(exc_text):
    def fail(*args, **kwargs):
        raise OSError(exc_text)
    return fail


@pytest.mark.parametrize("target", ["fdatasync", "replace", "write"])
def test_failed_write_keeps_old_file_and_cleans_up(store, monkeypatch, target):
    save(store, make_state(sequence=1))
    before = open(store.path_for("thread-1"), "rb").read()
    with store.transaction("thread-1") as txn:
        monkeypatch.setattr(os, target, _failing("injected"))
        with pytest.raises(StateWriteFailed, match="injected"):
            txn.save(make_state(sequence=2))
        monkeypatch.undo()
        assert txn.state.execution.pipeline_sequence == 1
    assert open(store.path_for("thread-1"), "rb").read() == before
    assert temp_files(store) == []
    assert store.load("thread-1").execution.pipeline_sequence == 1


def test_replace_is_retried(store, monkeypatch):
    calls = []
    real_replace = os.replace

    def flaky(src, dst):
        calls.append(src)
        if len(calls) < store_module.REPLACE_ATTEMPTS:
            raise PermissionError("busy")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", flaky)
    save(store, make_state(sequence=5))
    assert len(calls) == store_module.REPLACE_ATTEMPTS
    assert store.load("thread-1").execution.pipeline_sequence == 5
    assert temp_files(store) == []


def test_replace_gives_up_after_the_attempts(store, monkeypatch):
    calls = []

    def always(src, dst):
        calls.append(src)
        raise PermissionError("busy")

    monkeypatch.setattr(os, "replace", always)
    with pytest.raises(StateWriteFailed):
        save(store, make_state())
    assert len(calls) == store_module.REPLACE_ATTEMPTS
    assert temp_files(store) == [] and store.load("thread-1") is None


def test_a_write_costs_one_journal_sync_and_no_fsync(store, monkeypatch):
    """The request path: the journal's fdatasync makes the write durable; no file or directory fsync."""
    save(store, make_state(sequence=1))  # opens the journal (its creation syncs its own files)
    calls = []
    real_fsync, real_fdatasync = os.fsync, os.fdatasync
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append("fsync"), real_fsync(fd))[1])
    monkeypatch.setattr(os, "fdatasync", lambda fd: (calls.append("fdatasync"), real_fdatasync(fd))[1])
    monkeypatch.setattr(journal_module, "CHECKPOINT_SECONDS", 3600.0)
    save(store, make_state(sequence=2))
    assert calls == ["fdatasync"]


def test_closing_fsyncs_the_written_files_and_the_directory_once(store, monkeypatch):
    # No timed checkpoint in between: on a loaded machine one could start after the spy is in place and
    # add its own fsyncs of the same files to the list.
    monkeypatch.setattr(journal_module, "CHECKPOINT_SECONDS", 3600.0)
    save(store, make_state())
    save(store, make_state(thread_id="thread-2"))
    synced = []
    real_fsync = os.fsync

    def spy(fd):
        synced.append("dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", spy)
    store.close()
    # both thread files, the threads directory, then the journal directory (the journal files are gone)
    assert synced == ["file", "file", "dir", "dir"]
    assert os.listdir(store.journal_dir) == []


def test_a_failed_journal_sync_fails_closed_until_the_journal_is_reset(store, monkeypatch):
    save(store, make_state(sequence=1))
    monkeypatch.setattr(os, "fdatasync", _failing("injected"))
    with pytest.raises(StateWriteFailed, match="injected"):
        save(store, make_state(sequence=2))
    with pytest.raises(StateWriteFailed):  # a retried sync could claim success for lost data
        save(store, make_state(sequence=3))
    monkeypatch.undo()
    save(store, make_state(sequence=4))  # the reset fsynced the files and started a fresh journal
    assert store.load("thread-1").execution.pipeline_sequence == 4


def test_fsync_can_be_disabled(tmp_path, monkeypatch):
    quick = ThreadStore(str(tmp_path / "s"), fsync=False)
    monkeypatch.setattr(os, "fsync", _failing("must not be called"))
    monkeypatch.setattr(os, "fdatasync", _failing("must not be called"))
    save(quick, make_state())
    assert quick.load("thread-1") is not None
    assert not os.path.exists(quick.journal_dir)


def test_oversized_states_are_neither_written_nor_read(store, monkeypatch):
    save(store, make_state())
    monkeypatch.setattr(store_module, "MAX_STATE_BYTES", 100)
    with pytest.raises(StateUnavailable, match="exceeds"):
        store.load("thread-1")
    monkeypatch.setattr(store_module, "MAX_STATE_BYTES", 8 * 1024 * 1024)
    with store.transaction("thread-1") as txn:
        monkeypatch.setattr(store_module, "MAX_STATE_BYTES", 100)
        with pytest.raises(StateWriteFailed):
            txn.save(make_state())


# --- refusing odd files ----------------------------------------------------------------------------------


def test_symlinked_state_file_is_refused(store, tmp_path):
    save(store, make_state())
    real = tmp_path / "elsewhere.json"
    os.replace(store.path_for("thread-1"), str(real))
    os.symlink(str(real), store.path_for("thread-1"))
    with pytest.raises(StateUnavailable):
        store.load("thread-1")
    with pytest.raises(StateUnavailable):
        with store.transaction("thread-1"):
            pass


def test_fifo_is_refused_without_blocking(store):
    save(store, make_state("other"))
    os.mkfifo(store.path_for("thread-1"))
    started = time.monotonic()
    with pytest.raises(StateUnavailable, match="regular"):
        store.load("thread-1")
    assert time.monotonic() - started < 2


def test_directory_in_place_of_state_file_is_refused(store):
    save(store, make_state("other"))
    os.mkdir(store.path_for("thread-1"))
    with pytest.raises(StateUnavailable):
        store.load("thread-1")


def test_symlinked_threads_directory_is_refused(tmp_path):
    real = tmp_path / "real-threads"
    real.mkdir()
    (tmp_path / "state").mkdir()
    os.symlink(str(real), str(tmp_path / "state" / "threads"))
    linked = ThreadStore(str(tmp_path / "state"))
    with pytest.raises(StateUnavailable):
        linked.load("thread-1")
    with pytest.raises(StateUnavailable):
        with linked.transaction("thread-1"):
            pass


def test_symlinked_lock_file_is_refused(store, tmp_path):
    save(store, make_state("other"))
    os.symlink(str(tmp_path / "target"), os.path.join(store.threads_dir, "thread-1.lock"))
    with pytest.raises(StateUnavailable):
        with store.transaction("thread-1"):
            pass
    assert not (tmp_path / "target").exists()


@pytest.mark.parametrize(
    "content",
    [b"{not json", b"\xff\xfe", b'{"a": NaN}', b'{"schemaVersion": 1, "schemaVersion": 1}', b"[]", b""],
)
def test_corrupt_file_affects_only_its_thread(store, content):
    save(store, make_state("healthy"))
    save(store, make_state())
    with open(store.path_for("thread-1"), "wb") as handle:
        handle.write(content)
    with pytest.raises(StateUnavailable):
        store.load("thread-1")
    with pytest.raises(StateUnavailable):
        with store.transaction("thread-1"):
            pass
    assert store.load("healthy") == make_state("healthy")


def test_document_of_another_thread_is_corrupt(store):
    save(store, make_state("thread-2"))
    os.replace(store.path_for("thread-2"), store.path_for("thread-1"))
    with pytest.raises(StateUnavailable, match="threadId"):
        store.load("thread-1")


# --- locking ---------------------------------------------------------------------------------------------


def _increment(target: ThreadStore, thread_id: str, times: int) -> None:
    for _ in range(times):
        with target.transaction(thread_id) as txn:
            state = txn.state
            time.sleep(0)  # invite a context switch between read and write
            state.execution.pipeline_sequence += 1
            txn.save(state)


def test_two_threads_lose_no_increment(tmp_path):
    target = ThreadStore(str(tmp_path / "s"), fsync=False)
    save(target, make_state())
    workers = [threading.Thread(target=_increment, args=(target, "thread-1", 200)) for _ in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert target.load("thread-1").execution.pipeline_sequence == 400


INCREMENT_SCRIPT = """
import sys, time
from iaccode_agui.state.store import ThreadStore
store = ThreadStore(sys.argv[1], fsync=False)
for _ in range(int(sys.argv[2])):
    with store.transaction("thread-1") as txn:
        state = txn.state
        time.sleep(0)
        state.execution.pipeline_sequence += 1
        txn.save(state)
"""


def _python(*args: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=PROJECT_ROOT)
    return subprocess.Popen([sys.executable, "-c"] + list(args), env=env, stdout=subprocess.PIPE, text=True)


def test_two_processes_lose_no_increment(tmp_path):
    state_dir = str(tmp_path / "s")
    target = ThreadStore(state_dir, fsync=False)
    save(target, make_state())
    children = [_python(INCREMENT_SCRIPT, state_dir, "200") for _ in range(2)]
    for child in children:
        assert child.wait(timeout=120) == 0
    assert target.load("thread-1").execution.pipeline_sequence == 400


def _hold(target: ThreadStore, thread_id: str, entered: threading.Event, seconds: float) -> None:
    with target.transaction(thread_id):
        entered.set()
        time.sleep(seconds)


@pytest.mark.slow
def test_other_threads_are_not_blocked(store):
    entered = threading.Event()
    holder = threading.Thread(target=_hold, args=(store, "thread-a", entered, 1.0))
    holder.start()
    assert entered.wait(5)
    started = time.monotonic()
    save(store, make_state("thread-b"))
    assert time.monotonic() - started < 0.5
    holder.join()


def test_same_thread_waits_for_the_holder(store):
    entered = threading.Event()
    holder = threading.Thread(target=_hold, args=(store, "thread-a", entered, 0.5))
    holder.start()
    assert entered.wait(5)
    started = time.monotonic()
    with store.transaction("thread-a"):
        waited = time.monotonic() - started
    holder.join()
    assert waited >= 0.3


# --- run leases ------------------------------------------------------------------------------------------


def test_run_lease_is_exclusive_until_released(store):
    lease = store.try_run_lease("thread-1")
    assert lease is not None and lease.held
    assert store.try_run_lease("thread-1") is None
    assert store.run_lease_is_held("thread-1")
    assert store.try_run_lease("thread-2") is not None  # other threads are independent
    lease.release()
    lease.release()  # idempotent
    assert not lease.held
    assert not store.run_lease_is_held("thread-1")
    with store.try_run_lease("thread-1") as again:
        assert store.try_run_lease("thread-1") is None
    assert not again.held
    assert not store.run_lease_is_held("thread-1")


def test_run_lease_is_independent_of_transactions(store):
    lease = store.try_run_lease("thread-1")
    save(store, make_state())
    with store.transaction("thread-1"):
        assert store.run_lease_is_held("thread-1")
    lease.release()


LEASE_SCRIPT = """
import sys, time
from iaccode_agui.state.store import ThreadStore
lease = ThreadStore(sys.argv[1]).try_run_lease("thread-1")
print("held" if lease else "busy", flush=True)
time.sleep(60)
"""


def test_run_lease_of_a_killed_process_becomes_available(store):
    child = _python(LEASE_SCRIPT, store.state_dir)
    try:
        assert child.stdout.readline().strip() == "held"
        assert store.try_run_lease("thread-1") is None
        assert store.run_lease_is_held("thread-1")
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
        child.stdout.close()
    lease = store.try_run_lease("thread-1")
    assert lease is not None
    lease.release()


@pytest.mark.parametrize("bad", [float("nan"), object(), {1, 2}])
def test_non_json_projection_values_are_refused(store, bad):
    state = make_state()
    state.execution.pending["in-1"].value["extra"] = bad
    with store.transaction("thread-1") as txn:
        with pytest.raises(ValueError):
            txn.save(state)
    assert store.load("thread-1") is None and temp_files(store) == []


def test_a_temp_file_left_by_a_killed_writer_is_reused_not_accumulated(store):
    with store.transaction("t-temp") as txn:
        txn.save(make_state("t-temp"))
    leftover = os.path.join(store.threads_dir, ".t-temp.json.tmp")
    with open(leftover, "wb") as handle:
        handle.write(b"half a document from a process that was killed mid-write")
    for _ in range(3):
        with store.transaction("t-temp") as txn:
            txn.save(txn.state)
    assert temp_files(store) == []
    assert store.load("t-temp").thread_id == "t-temp"


def test_a_symlinked_temp_file_is_refused(store, tmp_path):
    target = tmp_path / "elsewhere"
    target.write_text("keep")
    os.symlink(str(target), os.path.join(store.threads_dir if os.path.isdir(store.threads_dir) else
                                         _mkthreads(store), ".t-link.json.tmp"))
    with pytest.raises(StateWriteFailed):
        with store.transaction("t-link") as txn:
            txn.save(make_state("t-link"))
    assert target.read_text() == "keep"


def _mkthreads(store):
    os.makedirs(store.threads_dir, mode=0o700, exist_ok=True)
    return store.threads_dir

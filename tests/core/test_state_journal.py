"""The state journal: recovery rules as plain data, simulated power losses, group commit, checkpoints."""
import json
import os
import subprocess
import sys
import threading
import time

import pytest

import iaccode_agui
from iaccode_agui.state import journal as wal
from iaccode_agui.state import journal_recovery as rec
from iaccode_agui.state import prune as pruning
from iaccode_agui.state.model import Execution, ThreadState
from iaccode_agui.state.store import StateUnavailable, ThreadStore
from tests.journal_helpers import end_of_records, from_an_earlier_boot, journal_files, named_stems

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(iaccode_agui.__file__)))


def make_state(thread_id: str, sequence: int = 0) -> ThreadState:
    return ThreadState(thread_id=thread_id, context_id="ctx-" + thread_id, cwd="/work", user_id=None, session_id=None,
                       execution=Execution(execution_id="exec-1", ros_invocation_id="ros-1", pipeline_sequence=sequence))


def save(store: ThreadStore, thread_id: str, sequence: int) -> None:
    with store.transaction(thread_id) as txn:
        txn.save(make_state(thread_id, sequence))


def put(revision: int, same_boot: bool = False, seq: int = 0) -> rec.Record:
    return rec.Record("s", wal.PUT, revision, b"{}", same_boot, seq)


def tomb(revision: int, same_boot: bool = False) -> rec.Record:
    return rec.Record("s", wal.DELETE, revision, b"", same_boot)


# --- the rules, as plain data ---------------------------------------------------------------------------

@pytest.mark.parametrize("records, file, action", [
    ([put(3)], rec.FileState(rec.PRESENT, 2), rec.WRITE),          # the crash lost the newer write
    ([put(3)], rec.FileState(rec.PRESENT, 3), rec.KEEP),           # the file already has it
    ([put(3)], rec.FileState(rec.PRESENT, 7), rec.KEEP),           # another process wrote later
    ([put(1)], rec.FileState(rec.PRESENT, 0), rec.WRITE),          # a file from before revisions existed
    ([put(2), put(5), put(4)], rec.FileState(rec.PRESENT, 4), rec.WRITE),
    ([put(2)], rec.FileState(rec.MISSING), rec.WRITE),             # its creation was lost
    ([tomb(4)], rec.FileState(rec.MISSING), rec.KEEP),
    ([put(2), tomb(3)], rec.FileState(rec.PRESENT, 2), rec.DELETE),  # the delete was lost
    ([put(2), tomb(3)], rec.FileState(rec.MISSING), rec.KEEP),     # a tombstone never re-creates
    ([tomb(3)], rec.FileState(rec.PRESENT, 5), rec.KEEP),          # re-created after the delete: kept
    ([put(2)], rec.FileState(rec.UNREADABLE), rec.WRITE),          # emptied by an OS crash
    ([put(2, same_boot=True)], rec.FileState(rec.UNREADABLE), rec.KEEP),  # no OS crash: not ours to fix
    ([tomb(2)], rec.FileState(rec.UNREADABLE), rec.DELETE),
    ([put(9)], rec.FileState(rec.SPECIAL), rec.KEEP),              # a symlink or FIFO is never touched
    ([], rec.FileState(rec.MISSING), rec.KEEP),
])
def test_decide(records, file, action):
    assert rec.decide(rec.newest(records), file) == action


def test_equal_revisions_prefer_the_later_append():
    assert rec.newest([put(2, seq=1), put(2, seq=5), put(2, seq=3)]).seq == 5


def test_a_cancelled_record_is_never_applied():
    entries = [({"k": wal.PUT, "s": "a", "q": 1}, b'{"revision": 1}'),
               ({"k": wal.PUT, "s": "a", "q": 2}, b'{"revision": 2}'),
               ({"k": wal.CANCEL, "s": "a", "c": 2, "q": 3}, b"")]
    assert [r.revision for r in rec.records_of(entries, False)] == [1]


def test_a_torn_or_corrupt_tail_ends_the_records():
    first, second = wal.encode({"k": wal.PUT, "s": "a", "q": 1}, b"one"), wal.encode({"k": wal.PUT, "s": "b"}, b"2")
    assert [m["s"] for m, _ in wal.decode(first + second[:-1])] == ["a"]
    flipped = bytearray(first + second)
    flipped[-1] ^= 1
    assert [m["s"] for m, _ in wal.decode(bytes(flipped))] == ["a"]
    assert [p for _, p in wal.decode(first + second)] == [b"one", b"2"]


# --- a dead writer and a power loss ---------------------------------------------------------------------

_WRITER = """
import os, sys
sys.path.insert(0, %(root)r)
from iaccode_agui.state import journal
journal.CHECKPOINT_SECONDS = 3600.0
journal.CHECKPOINT_BYTES = 1 << 30
from iaccode_agui.state.model import Execution, ThreadState
from iaccode_agui.state.store import ThreadStore
store = ThreadStore(sys.argv[1])
def save(thread, sequence):
    with store.transaction(thread) as txn:
        txn.save(ThreadState(thread_id=thread, context_id="ctx-" + thread, cwd="/work", user_id=None, session_id=None,
                             execution=Execution(execution_id="exec-1", ros_invocation_id="ros-1", pipeline_sequence=sequence)))
for sequence in (1, 2, 3):
    save("emptied", sequence)
save("lost", 1)
save("deleted", 1)
with store.transaction("deleted") as txn:
    txn.delete()
save("shared", 1)
print("ready", flush=True)
sys.stdin.readline()          # the parent writes "shared" again from its own store meanwhile
save("torn", 1)
os._exit(0)                   # no close: the journal stays, its lock dies with the process
"""


def _dead_writer(state_dir: str, between=None) -> None:
    proc = subprocess.Popen([sys.executable, "-c", _WRITER % {"root": ROOT}, state_dir],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    if between is not None:
        between()
    proc.stdin.write("go\n")
    proc.stdin.flush()
    assert proc.wait(30) == 0


def test_a_power_loss_gives_back_everything_acknowledged_and_nothing_deleted(tmp_path):
    state_dir = str(tmp_path / "state")
    other = ThreadStore(state_dir)

    def live_process_writes_shared_later():
        save(other, "shared", 50)
        other.close()

    _dead_writer(state_dir, live_process_writes_shared_later)
    reader = ThreadStore(state_dir, fsync=False)
    threads = {t: reader.path_for(t) for t in ("emptied", "lost", "deleted", "shared", "torn")}
    assert named_stems(reader.journal_dir) >= {os.path.basename(p)[:-5] for p in threads.values()}
    # What the power loss leaves: a file renamed into place before its data reached the disk is empty,
    # a creation whose directory entry was never synced is gone, a lost unlink brings the old file back.
    with open(threads["emptied"], "r+b") as handle:
        handle.truncate(0)
    os.unlink(threads["lost"])
    with open(threads["deleted"], "wb") as handle:
        handle.write(open(threads["torn"], "rb").read().replace(b"torn", b"deleted"))
    from_an_earlier_boot(reader.journal_dir)
    segment = [os.path.join(reader.journal_dir, n) for n in journal_files(reader.journal_dir)
               if n.endswith(".wal") and wal.read_segment(os.path.join(reader.journal_dir, n))[1]][0]
    with open(segment, "r+b") as handle:  # the crash tore the last record
        handle.seek(end_of_records(segment))
        handle.write(wal.encode({"k": wal.PUT, "s": "x", "q": 10 ** 6}, b"{}")[:-3])

    store = ThreadStore(state_dir)
    assert store.load("emptied").execution.pipeline_sequence == 3
    assert store.load("lost").execution.pipeline_sequence == 1
    assert store.load("deleted") is None and not os.path.exists(threads["deleted"])
    assert store.load("shared").execution.pipeline_sequence == 50   # the live writer's later revision
    assert store.load("torn").execution.pipeline_sequence == 1
    assert journal_files(store.journal_dir) == []


def test_without_an_os_crash_recovery_only_makes_the_files_durable(tmp_path, monkeypatch):
    state_dir = str(tmp_path / "state")
    _dead_writer(state_dir)
    reader = ThreadStore(state_dir, fsync=False)
    with open(reader.path_for("emptied"), "r+b") as handle:
        handle.truncate(0)   # not what a process crash does: left for the operator, as without a journal
    os.unlink(reader.path_for("lost"))  # a missing file still comes back (only prune removes files)
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd))[1])
    store = ThreadStore(state_dir)
    store.recover()
    assert len(synced) >= 4  # the files the journal names, the restored one, both directories
    with pytest.raises(StateUnavailable):
        store.load("emptied")
    assert store.load("lost").execution.pipeline_sequence == 1
    assert store.load("torn").execution.pipeline_sequence == 1
    assert journal_files(store.journal_dir) == []


def test_a_live_journal_is_left_alone(tmp_path):
    state_dir = str(tmp_path / "state")
    live = ThreadStore(state_dir)
    save(live, "t", 1)
    before = journal_files(live.journal_dir)
    other = ThreadStore(state_dir)
    other.recover()
    assert journal_files(live.journal_dir) == before and len(before) == 3
    live.close()
    assert journal_files(live.journal_dir) == []


def test_prune_never_removes_a_thread_a_journal_would_restore(tmp_path):
    state_dir = str(tmp_path / "state")
    live = ThreadStore(state_dir)
    save(live, "idle", 1)
    store = ThreadStore(state_dir)
    report = pruning.prune(store, 0.0, now=time.time() + 10)
    assert report.count(pruning.RECENT) == 1 and os.path.exists(store.path_for("idle"))
    live.close()  # checkpointed: the file is durable, the journal no longer names it
    report = pruning.prune(store, 0.0, now=time.time() + 10)
    assert report.count(pruning.REMOVED) == 1 and store.load("idle") is None


# --- group commit and checkpoints ------------------------------------------------------------------------

def test_concurrent_writers_share_journal_syncs(tmp_path, monkeypatch):
    store = ThreadStore(str(tmp_path / "state"))
    save(store, "warm", 0)
    syncs = []
    real = os.fdatasync

    def slow_sync(fd):
        syncs.append(fd)
        time.sleep(0.02)  # a slow disk, so that writers pile up behind one sync
        real(fd)

    monkeypatch.setattr(os, "fdatasync", slow_sync)
    monkeypatch.setattr(wal, "CHECKPOINT_SECONDS", 3600.0)
    writers = 16
    barrier = threading.Barrier(writers)

    def write(index):
        barrier.wait()
        save(store, "t-%d" % index, index)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert all(store.load("t-%d" % i).execution.pipeline_sequence == i for i in range(writers))
    assert 1 <= len(syncs) < writers


def test_a_checkpoint_empties_the_journal_without_losing_a_write(tmp_path, monkeypatch):
    monkeypatch.setattr(wal, "CHECKPOINT_BYTES", 4096)
    store = ThreadStore(str(tmp_path / "state"))
    for sequence in range(40):
        save(store, "t-%d" % (sequence % 5), sequence)
    deadline = time.monotonic() + 10
    while named_stems(store.journal_dir) and time.monotonic() < deadline:
        time.sleep(0.05)
    sizes = [os.path.getsize(os.path.join(store.journal_dir, n)) for n in journal_files(store.journal_dir)
             if n.endswith(".wal")]
    assert len(sizes) == 2 and max(sizes) <= wal.HEADER_BYTES + 4096 + 2 * wal.PREALLOC_STEP  # recycled, not grown
    assert [store.load("t-%d" % i).execution.pipeline_sequence for i in range(5)] == [35, 36, 37, 38, 39]
    store.close()


def test_revisions_grow_across_processes_and_old_files_count_as_zero(tmp_path):
    state_dir = str(tmp_path / "state")
    first, second = ThreadStore(state_dir), ThreadStore(state_dir)
    save(first, "t", 1)
    path = first.path_for("t")
    document = json.load(open(path))
    assert document.pop("revision") == 1
    with open(path, "w") as handle:  # a file written before revisions existed (indented, as they were)
        handle.write(json.dumps(document, indent=2, sort_keys=True) + "\n")
    save(second, "t", 2)
    save(first, "t", 3)
    assert json.load(open(path))["revision"] == 2
    first.close()
    second.close()


def test_a_symlinked_journal_directory_is_refused(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    store = ThreadStore(str(tmp_path / "state"))
    os.makedirs(store.state_dir)
    os.symlink(str(elsewhere), store.journal_dir)
    from iaccode_agui.state.store import StateWriteFailed
    with pytest.raises(StateWriteFailed, match="not a real directory"):
        save(store, "t", 1)
    assert os.listdir(str(elsewhere)) == [] and store.load("t") is None


def test_a_forked_child_writes_its_own_journal(tmp_path):
    store = ThreadStore(str(tmp_path / "state"))
    save(store, "parent", 1)
    parent_files = journal_files(store.journal_dir)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through its exit status
        try:
            save(store, "child", 1)
            os._exit(0 if len(journal_files(store.journal_dir)) == 6 else 3)
        except BaseException:
            os._exit(4)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    save(store, "parent", 2)  # the parent's journal is intact after the child's writes
    assert set(parent_files) <= set(journal_files(store.journal_dir))
    ThreadStore(str(tmp_path / "state")).recover()  # the dead child's journal
    assert journal_files(store.journal_dir) == parent_files
    assert store.load("child").execution.pipeline_sequence == 1
    store.close()


def test_a_recycled_segment_reads_only_its_new_records():
    header = wal.header_record({"k": wal.HEADER, "boot": "b", "first": 5})
    assert len(header) == wal.HEADER_BYTES
    old = b"".join(wal.encode({"k": wal.PUT, "s": "old-%d" % q, "q": q}, b"{}") for q in (1, 2, 3, 4))
    new = b"".join(wal.encode({"k": wal.PUT, "s": "new-%d" % q, "q": q}, b"{}") for q in (5, 6))
    data = header + new + old[len(new):]  # the new records overwrote the start of the old ones
    import tempfile
    with tempfile.NamedTemporaryFile(suffix=".wal") as handle:
        handle.write(data + b"\0" * 4096)
        handle.flush()
        _, records = wal.read_segment(handle.name)
    assert [meta["s"] for meta, _ in records] == ["new-5", "new-6"]


def test_an_append_overwrites_preallocated_blocks(tmp_path):
    store = ThreadStore(str(tmp_path / "state"))
    save(store, "t", 1)
    sizes = {n: os.path.getsize(os.path.join(store.journal_dir, n)) for n in journal_files(store.journal_dir)
             if n.endswith(".wal")}
    for sequence in range(2, 20):
        save(store, "t", sequence)
    assert sizes == {n: os.path.getsize(os.path.join(store.journal_dir, n)) for n in sizes}
    assert set(sizes.values()) == {wal.HEADER_BYTES + wal.PREALLOC_STEP}
    store.close()


def test_a_segment_grows_ahead_of_its_records(tmp_path, monkeypatch):
    monkeypatch.setattr(wal, "PREALLOC_STEP", 4096)
    monkeypatch.setattr(wal, "CHECKPOINT_SECONDS", 3600.0)
    store = ThreadStore(str(tmp_path / "state"))
    for sequence in range(30):
        save(store, "t-%d" % sequence, sequence)
    active = [os.path.join(store.journal_dir, n) for n in journal_files(store.journal_dir) if n.endswith(".wal")
              and wal.read_segment(os.path.join(store.journal_dir, n))[1]][0]
    assert os.path.getsize(active) > end_of_records(active) > 3 * 4096
    assert len(wal.read_segment(active)[1]) == 30
    store.close()

"""The timer's scans of the run log directory stay cheap however many finished logs are kept.

Every housekeeping pass looks for orphaned logs (a writer that died) and expires old ones.  Opening,
locking and reading every kept log on every pass made the passes cost grow with the number of runs kept
(ten thousand after a busy ten minutes), and the request path slowed down with them.  A log seen closed is
remembered by size and modification time, so later passes only stat it; a log that changes is examined
again.
"""
import builtins
import os

import pytest

from iaccode_agui.runlog import encoding as logformat
from iaccode_agui.runlog import logfiles as runlog
from iaccode_agui.runlog.logfiles import RunLogStore


@pytest.fixture
def store(tmp_path):
    return RunLogStore(str(tmp_path / "state"), ttl=600, max_bytes=1 << 24)


def _opens_in(store, monkeypatch):
    """Count opens of files in the runs directory (os.open and open)."""
    seen = []
    real_os_open, real_open = os.open, builtins.open

    def counting_os_open(path, *args, **kwargs):
        if str(path).startswith(store.runs_dir):
            seen.append(os.path.basename(str(path)))
        return real_os_open(path, *args, **kwargs)

    def counting_open(path, *args, **kwargs):
        if str(path).startswith(store.runs_dir):
            seen.append(os.path.basename(str(path)))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", counting_os_open)
    monkeypatch.setattr(runlog, "open", counting_open, raising=False)
    return seen


def _closed_logs(store, count):
    for index in range(count):
        writer = store.create("t", "r%d" % index, {})
        writer.append(0, "RUN_STARTED", b"id: 0\ndata: {}\n\n")
        writer.close({"events": 1, "outcome": "success"})   # the shape the channel writes


def _orphan(store, run_id):
    writer = store.create("t", run_id, {})
    writer.append(0, "RUN_STARTED", b"id: 0\ndata: {}\n\n")
    writer.discard.__self__._release()        # the process dies: its descriptor and lock go
    return writer.path


def test_closed_logs_are_not_reopened_by_later_passes(store, monkeypatch):
    _closed_logs(store, 30)
    orphan = _orphan(store, "orphan")
    assert store.orphans() == [("t", "orphan")]
    assert store.sweep() == 0
    opened = _opens_in(store, monkeypatch)
    for _ in range(3):
        assert store.orphans() == [("t", "orphan")]
        assert store.sweep() == 0
    assert set(opened) <= {os.path.basename(orphan)}, sorted(set(opened))[:5]


def test_a_remembered_log_that_changes_is_examined_again(store):
    _closed_logs(store, 3)
    assert store.orphans() == []
    path = store.path_for("t", "r1")
    with open(path, "rb") as handle:
        data = handle.read()
    assert logformat.ends_with_close(data)
    with open(path, "r+b") as handle:          # the close record is cut off: the log is an orphan now
        handle.truncate(len(data) - 1)
    assert store.orphans() == [("t", "r1")]


def test_expired_remembered_logs_are_still_removed(store):
    _closed_logs(store, 5)
    assert store.orphans() == []
    assert store.sweep() == 0
    store.ttl = 0
    assert store.sweep(now=os.path.getmtime(store.path_for("t", "r0")) + 5) == 5
    assert [name for name in os.listdir(store.runs_dir) if name.endswith(".log")] == []
    assert store.orphans() == []


def test_remembered_sizes_and_times_decide_retention_as_a_fresh_scan_does(store):
    """The index keeps one int per closed log (a hash of name, size and mtime): sizes and times come from the files."""
    _closed_logs(store, 4)
    paths = [store.path_for("t", "r%d" % index) for index in range(4)]
    for age, path in enumerate(reversed(paths)):    # r0 oldest ... r3 newest, whole seconds apart
        stamp = 1_700_000_000 - 10 * age
        os.utime(path, ns=(stamp * 10 ** 9 + 123_456_789, stamp * 10 ** 9 + 123_456_789))
    store.ttl = 10 ** 9       # the orphan scan indexes only logs within the retention time
    assert store.orphans() == [] and store.sweep(now=1_700_000_000) == 0
    assert len(store._closed) == 4 and all(type(stamp) is int for stamp in store._closed)
    sizes = [os.path.getsize(path) for path in paths]
    store.ttl = 25        # r0 is 30 s old at this "now", r1 20 s: only r0 is past it
    assert store.sweep(now=1_700_000_000) == 1
    assert not os.path.exists(paths[0]) and all(os.path.exists(path) for path in paths[1:])
    store.ttl = 600
    store.max_bytes = sum(sizes[1:]) - 1      # one byte over: the oldest left (r1) goes, by its remembered size
    assert store.sweep(now=1_700_000_000) == 1
    assert [os.path.exists(path) for path in paths] == [False, False, True, True]
    assert store.orphans() == [] and len(store._closed) == 2     # removed logs leave the index


def test_a_walk_over_many_kept_logs_holds_no_list_of_them(tmp_path):
    """The timer walks every kept log twice per pass; a list of all of them per walk (about 400 bytes a log)
    left pymalloc's arenas fragmented by the objects runs allocated meanwhile: the heap grew with the logs kept."""
    import tracemalloc

    store = RunLogStore(str(tmp_path / "state"), ttl=600, max_bytes=1 << 30, fsync=False)
    _closed_logs(store, 1500)
    assert store.orphans() == [] and len(store._closed) == 1500
    tracemalloc.start()
    try:
        for walk in (store.sweep, store.orphans, store.sweep):
            tracemalloc.reset_peak()
            before = tracemalloc.get_traced_memory()[0]
            walk()
            after, peak = tracemalloc.get_traced_memory()
            assert peak - before < 64 * 1024, (walk.__name__, peak - before)
            assert abs(after - before) < 16 * 1024, (walk.__name__, after - before)   # the index is kept, not rebuilt
    finally:
        tracemalloc.stop()
    assert len(store._closed) == 1500

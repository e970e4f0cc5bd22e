"""Run log files: permissions, live/finished detection, torn tails on disk, retention, channel replay."""
import json
import os
import stat
import time

import pytest

from iaccode_agui.errors import AguiError
from iaccode_agui.runlog import encoding as logformat
from iaccode_agui.runlog import logfiles as runlog
from iaccode_agui.sse.channel import RunChannel
from iaccode_agui.sse.framequeue import END
from iaccode_agui.sse.replay_budget import ReplayBudget
from iaccode_agui.runlog.logfiles import RunLogReader, RunLogStore


@pytest.fixture
def store(tmp_path):
    return RunLogStore(str(tmp_path / "state"), ttl=600, max_bytes=1 << 20)


def _event(seq):
    return {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "d%d" % seq, "timestamp": 1}


def _frames(items):
    return b"".join(item for item in items if item is not END)


def test_log_files_are_private_and_named_by_the_key_scheme(store):
    writer = store.create("Thread/1", "run-1", {"executionId": "e"})
    path = store.path_for("Thread/1", "run-1")
    assert writer.path == path and os.path.basename(path).endswith("@run-1.log")
    assert "/" not in os.path.basename(path)[:-4]
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(store.runs_dir).st_mode) == 0o700
    writer.append(0, "RUN_STARTED", b"id: 0\ndata: {}\n\n")
    reader = store.open_reader("Thread/1", "run-1")
    assert reader.header["executionId"] == "e" and reader.header["threadId"] == "Thread/1"
    assert reader.writer_alive()
    assert [r.seq for r in reader.read_new()] == [0]
    writer.close({"outcome": "success"})
    assert not reader.writer_alive()
    assert [r.kind for r in reader.read_new()] == ["Z"]
    reader.close()


def test_a_torn_tail_on_disk_is_ignored_after_the_writer_died(store):
    writer = store.create("t", "r", {})
    writer.append(0, "RUN_STARTED", b"id: 0\ndata: {}\n\n")
    with open(writer.path, "ab") as handle:   # what a kill -9 in the middle of a write leaves
        handle.write(logformat.encode_event(1, "TEXT_MESSAGE_CONTENT", b"id: 1\ndata: {}\n\n")[:11])
    writer.discard.__self__._release()        # the process dies: the descriptor (and its lock) go
    reader = RunLogReader.open(writer.path)
    assert not reader.writer_alive()
    assert [r.seq for r in reader.read_new()] == [0]
    assert reader.read_new() == []


def test_a_reader_of_another_run_under_a_shared_name_is_refused(store):
    writer = store.create("t", "r", {})
    writer.close({})
    os.rename(store.path_for("t", "r"), store.path_for("t", "other"))
    assert store.open_reader("t", "other") is None
    assert store.open_reader("t", "missing") is None


def test_retention_removes_expired_then_oldest_and_never_a_live_log(tmp_path):
    store = RunLogStore(str(tmp_path / "state"), ttl=60, max_bytes=1 << 20)
    now = time.time()
    finished = []
    for index in range(4):
        writer = store.create("t", "r%d" % index, {})
        writer.append(0, "TEXT_MESSAGE_CONTENT", b"x" * 900)
        writer.close({})
        os.utime(writer.path, (now - 50 + index, now - 50 + index))
        finished.append(writer.path)
    live = store.create("t", "live", {})
    live.append(0, "TEXT_MESSAGE_CONTENT", b"x" * 900)
    os.utime(live.path, (now - 1000, now - 1000))
    old = store.create("t", "old", {})
    old.close({})
    os.utime(old.path, (now - 61, now - 61))
    one, live_size = os.path.getsize(finished[0]), os.path.getsize(live.path)
    store.max_bytes = 2 * one + live_size + one // 2
    assert store.sweep(now) == 3   # the expired one, then the two oldest while over the cap
    remaining = sorted(os.listdir(store.runs_dir))
    assert remaining == sorted(os.path.basename(p) for p in finished[2:] + [live.path])
    live.close({})
    assert store.sweep(now + 61) == 3
    assert os.listdir(store.runs_dir) == []


def test_watch_marks_are_visible_across_handles_and_cleaned_up(store):
    writer = store.create("t", "r", {})
    assert not store.watched("t", "r")
    mark = store.watch("t", "r")
    assert store.watched("t", "r")
    mark.release()
    assert not store.watched("t", "r")
    writer.close({})
    os.utime(writer.path, (0, 0))
    store.sweep()
    assert os.listdir(store.runs_dir) == []


def test_the_owners_detached_mark_is_held_while_no_client_is_attached_and_cleaned_up(store):
    """A channel with a marker holds the run's ``.detached`` mark while its client is gone (taken when the
    client leaves: a first attach makes no file), apart from the ``.watch`` marks of followers elsewhere;
    retention removes it with its log."""
    writer = store.create("t", "r", {})
    channel = RunChannel(10, 100, run_log=writer)
    channel.use_marker(lambda: store.watch("t", "r", runlog.DETACHED_SUFFIX))
    sub = channel.attach()
    assert os.listdir(store.runs_dir) == [os.path.basename(writer.path)]
    sub.detach()
    assert store.watched("t", "r", runlog.DETACHED_SUFFIX) and not store.watched("t", "r")
    again = channel.attach()
    assert not store.watched("t", "r", runlog.DETACHED_SUFFIX)
    again.detach()
    channel.close("success")              # the run ended: nobody needs to know about its clients any more
    assert not store.watched("t", "r", runlog.DETACHED_SUFFIX)
    adopted = RunChannel(10, 100)
    adopted.use_marker(lambda: store.watch("t", "a", runlog.DETACHED_SUFFIX), detached_now=True)
    assert store.watched("t", "a", runlog.DETACHED_SUFFIX)
    adopted.close("success")
    os.utime(writer.path, (0, 0))
    store.sweep()
    assert os.listdir(store.runs_dir) == []


def test_a_disabled_store_opens_nothing(tmp_path):
    store = RunLogStore(str(tmp_path), ttl=600, max_bytes=0)
    assert not store.enabled and store.open_reader("t", "r") is None


def test_channel_replays_from_the_log_beyond_its_memory(store):
    channel = RunChannel(max_buffer=5, queue_max=100, run_log=store.create("t", "r", {}))
    first = channel.attach()
    for seq in range(20):
        channel.publish(_event(seq))
    assert channel.memory_bytes > 0 and len(channel._frames) == 5
    channel.detach(first)
    sub = channel.attach(after_seq=2)
    replayed = b"".join(sub.replay)
    ids = [int(line[4:]) for line in replayed.split(b"\n") if line.startswith(b"id: ")]
    assert ids == list(range(3, 20))
    channel.publish(_event(20))
    assert b"id: 20\n" in _frames(sub.queue.take(1))
    channel.close("success")
    assert channel.memory_bytes == 0             # a finished, logged run keeps nothing in memory
    sub.detach()
    again = channel.attach(after_seq=None)
    assert b"".join(again.replay).count(b"\nid: ") + 1 == 21
    with pytest.raises(AguiError) as info:
        channel.attach(after_seq=99)
    assert info.value.code in ("RUN_ALREADY_ATTACHED", "RUN_ALREADY_TERMINAL")


def test_channel_without_a_log_keeps_the_old_limit():
    channel = RunChannel(max_buffer=5, queue_max=100)
    sub = channel.attach()
    for seq in range(20):
        channel.publish(_event(seq))
    channel.detach(sub)
    with pytest.raises(AguiError) as info:
        channel.attach(after_seq=2)
    assert info.value.code == "RUN_ALREADY_TERMINAL"
    assert channel.attach(after_seq=15).replay


def test_the_log_reaches_the_os_before_the_client(store):
    channel = RunChannel(10, 100, run_log=store.create("t", "r", {}))
    sub = channel.attach()
    channel.publish(_event(0))
    reader = store.open_reader("t", "r")
    assert [r.seq for r in reader.read_new()] == [0]
    assert b"id: 0\n" in _frames(sub.queue.take(1))


def test_a_failing_log_is_given_up_and_memory_replay_goes_on(store):
    writer = store.create("t", "r", {})
    channel = RunChannel(10, 100, run_log=writer)
    sub = channel.attach()
    channel.publish(_event(0))
    full = os.open("/dev/full", os.O_WRONLY)   # the next write fails like a full disk (ENOSPC); closing the
    os.dup2(full, writer._fd)                  # descriptor instead made the log's own close a second close of
    os.close(full)                             # a number another thread may have been given meanwhile
    channel.publish(_event(1))
    assert channel.log_path is None and not os.path.exists(writer.path)
    channel.detach(sub)
    assert b"id: 1\n" in b"".join(channel.attach(after_seq=0).replay)


def test_replay_memory_budget_is_shared_and_settled(store):
    budget = ReplayBudget(4000)
    logged = RunChannel(1000, 100, run_log=store.create("t", "a", {}), budget=budget)
    plain = RunChannel(1000, 100, budget=budget)
    for seq in range(40):
        logged.publish(dict(_event(seq), delta="x" * 200))
    assert budget.used <= 4000      # a logged channel trims itself at once: its frames are on disk
    for seq in range(40):
        plain.publish(dict(_event(seq), delta="x" * 200))
    assert budget.over
    budget.settle([], [logged, plain])
    assert not budget.over and budget.used == logged.memory_bytes + plain.memory_bytes
    plain.close()
    logged.close()
    assert budget.used == plain.memory_bytes
    budget.settle([plain], [])
    assert budget.used == plain.memory_bytes <= 4000


def _ids(data):
    return [int(line[4:]) for line in data.split(b"\n") if line.startswith(b"id: ")]


def test_a_log_at_its_size_cap_still_replays_what_memory_already_let_go(tmp_path):
    # The replay budget trims a logged run's memory because the log holds those frames; when the log then
    # reaches its size cap, those frames exist only on disk: a re-attach of the live run must still get
    # them (it used to be refused as RUN_ALREADY_TERMINAL, and a full replay started in the middle).
    store = RunLogStore(str(tmp_path / "state"), ttl=600, max_bytes=4000)
    channel = RunChannel(1000, 100, run_log=store.create("t", "r", {}), budget=ReplayBudget(600))
    first = channel.attach()
    for seq in range(60):
        channel.publish(dict(_event(seq), delta="x" * 40))
    assert channel._frames[0][0] > 3          # memory no longer holds the start
    channel.detach(first)
    sub = channel.attach(after_seq=2)
    assert _ids(b"".join(sub.replay)) == list(range(3, 60))
    channel.publish(_event(60))
    assert b"id: 60\n" in _frames(sub.queue.take(1))
    sub.detach()
    channel.close("success")
    assert channel.memory_bytes > 0           # the frames past the cap live in memory alone
    assert _ids(b"".join(channel.attach(after_seq=None).replay)) == list(range(61))
    assert channel.log_path is not None and not channel.log_complete
    records = store.open_reader("t", "r").read_new()
    assert records[-1].kind == logformat.KIND_CLOSE   # ended, not orphaned: no process takes it over


def test_a_retention_sweep_can_never_remove_a_log_being_created(tmp_path, monkeypatch):
    """A sweep under size pressure runs between the file's creation and its lock: the new log survives."""
    creating = RunLogStore(str(tmp_path), ttl=600, max_bytes=1 << 20)
    sweeping = RunLogStore(str(tmp_path), ttl=0, max_bytes=1)      # removes every unlocked log it sees
    real_lock = runlog._try_lock
    swept = []

    def lock_after_a_sweep(fd, mode):
        if not swept:
            swept.append(None)                    # the sweep's own locks go straight through
            swept[0] = sweeping.sweep(now=time.time() + 10)
        return real_lock(fd, mode)

    monkeypatch.setattr(runlog, "_try_lock", lock_after_a_sweep)
    writer = creating.create("t-race", "r-race", {"executionId": "e"})
    writer.append(0, "RUN_STARTED", b"id: 0\ndata: {}\n\n")
    assert swept == [0]
    assert os.path.exists(writer.path) and os.stat(writer.path).st_ino == os.fstat(writer._fd).st_ino
    reader = creating.open_reader("t-race", "r-race")
    assert reader is not None and [r.seq for r in reader.read_new()] == [0]
    reader.close()
    writer.close({"outcome": "success", "events": 1})
    assert sorted(os.listdir(creating.runs_dir)) == [os.path.basename(writer.path)]


def test_a_creation_file_left_under_this_threads_own_name_is_replaced(tmp_path):
    """An earlier attempt (or a dead process with the same pid and thread id) left the private name behind:
    the creation removes it and goes on, and the log holds only its own records."""
    import threading
    store = RunLogStore(str(tmp_path), ttl=600, max_bytes=1 << 20)
    path = store.path_for("t-left", "r-left")
    os.makedirs(store.runs_dir, exist_ok=True)
    leftover = "%s.%d-%d%s" % (path, os.getpid(), threading.get_ident(), runlog.CREATING_SUFFIX)
    with open(leftover, "wb") as handle:
        handle.write(b"stale bytes of an attempt that failed")
    writer = store.create("t-left", "r-left", {"executionId": "e"})
    writer.append(0, "RUN_STARTED", b"id: 0\ndata: {}\n\n")
    writer.close({"outcome": "success", "events": 1})
    assert sorted(os.listdir(store.runs_dir)) == [os.path.basename(path)]
    reader = store.open_reader("t-left", "r-left")
    assert [r.seq for r in reader.read_new() if r.kind == logformat.KIND_EVENT] == [0]
    reader.close()


def test_a_creation_that_died_half_way_leaves_nothing_past_a_sweep(tmp_path):
    store = RunLogStore(str(tmp_path), ttl=600, max_bytes=1 << 20)
    store.create("t-0", "r-0", {}).close({"outcome": "success", "events": 0})
    stale = os.path.join(store.runs_dir, "dead-creator" + runlog.CREATING_SUFFIX)
    with open(stale, "wb") as handle:
        handle.write(b"AGUI")
    store.sweep()
    assert os.path.exists(stale)              # it may be a creation under way
    store.sweep(now=time.time() + runlog.CREATING_STALE + 1)
    assert not os.path.exists(stale) and len(os.listdir(store.runs_dir)) == 1


def _follow_to_the_end(store, limit=10.0):
    """What a client following run (t, r) from another process receives, until its stream ends."""
    from iaccode_agui.metrics import Metrics
    from iaccode_agui.runlog.follow import LogAttach
    attach = LogAttach(store, Metrics(), 1000, poll=0.01)
    attach.adopt = lambda thread_id, run_id: True          # the owner is alive and holds the run
    _, sub = attach.reattach("t", "r", None, None, "en")
    frames, deadline = [], time.monotonic() + limit
    while time.monotonic() < deadline:
        items = sub.queue.take(100)
        frames.extend(item for item in items if item is not END)
        if END in items:
            return b"".join(frames)
        time.sleep(0.01)
    raise AssertionError("the follower did not end: %r" % frames[-3:])


def _last_event(data):
    return json.loads(data.rstrip(b"\n").split(b"\n\n")[-1].split(b"data: ", 1)[1])


def test_a_follower_of_a_log_that_reached_its_size_cap_is_told_at_once(tmp_path):
    store = RunLogStore(str(tmp_path / "state"), ttl=600, max_bytes=2000)
    channel = RunChannel(1000, 100, run_log=store.create("t", "r", {}))
    for seq in range(40):
        channel.publish(dict(_event(seq), delta="x" * 40))
    assert not channel.log_complete                       # the cap was reached; the run goes on
    data = _follow_to_the_end(store)                      # before the run ends
    logged = _ids(data)
    assert logged == list(range(len(logged))) and 0 < len(logged) < 40
    end = _last_event(data)
    assert end["type"] == "RUN_ERROR" and end["code"] == "RUN_LOG_INCOMPLETE"
    assert not data.rstrip(b"\n").split(b"\n\n")[-1].startswith(b"id:")   # the run's next id is still to come
    channel.publish(_event(40))
    channel.close("success")
    assert _ids(b"".join(channel.attach(after_seq=None).replay)) == list(range(41))   # the owner misses nothing
    assert store.orphans() == []                          # a log that stopped early is never taken over


def test_a_log_given_up_after_a_write_error_ends_its_followers_with_a_clear_code(tmp_path, monkeypatch):
    store = RunLogStore(str(tmp_path / "state"), ttl=600, max_bytes=1 << 20)
    writer = store.create("t", "r", {})
    channel = RunChannel(1000, 100, run_log=writer)
    owner = channel.attach()
    channel.publish(_event(0))
    real_write = os.write

    def disk_full(fd, data):
        if fd == writer._fd and b"TEXT_MESSAGE_CONTENT" in bytes(data):
            raise OSError(28, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", disk_full)
    channel.publish(_event(1))                            # the append fails: the log is given up
    monkeypatch.setattr(os, "write", real_write)
    assert channel.log_path is None and not os.path.exists(writer.path)
    assert b"id: 1\n" in _frames(owner.queue.take(10))    # the owner's live stream goes on


def test_a_follower_whose_log_vanished_while_its_run_lives_gets_run_log_incomplete(tmp_path, monkeypatch):
    store = RunLogStore(str(tmp_path / "state"), ttl=600, max_bytes=1 << 20)
    writer = store.create("t", "r", {})
    channel = RunChannel(1000, 100, run_log=writer)
    channel.publish(_event(0))
    real_write = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: (_ for _ in ()).throw(OSError(28, "No space left"))
                        if fd == writer._fd else real_write(fd, data))
    from iaccode_agui.metrics import Metrics
    from iaccode_agui.runlog.follow import LogAttach
    attach = LogAttach(store, Metrics(), 1000, poll=0.01)
    attach.adopt = lambda thread_id, run_id: True
    _, sub = attach.reattach("t", "r", None, None, "en")
    channel.publish(_event(1))                # disk full: not even the early end can be written
    monkeypatch.setattr(os, "write", real_write)
    frames, deadline = [], time.monotonic() + 10
    while END not in frames and time.monotonic() < deadline:
        frames.extend(sub.queue.take(100))
        time.sleep(0.01)
    data = b"".join(item for item in frames if item is not END)
    assert _ids(data) == [0]
    assert _last_event(data)["code"] == "RUN_LOG_INCOMPLETE"


def test_a_batch_is_logged_with_one_write_before_any_client_sees_it(store, monkeypatch):
    channel = RunChannel(100, 100, run_log=store.create("t", "r", {}))
    sub = channel.attach()
    writes = []
    real_write = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: writes.append(len(data)) or real_write(fd, data))
    reader = store.open_reader("t", "r")
    with channel.batch():
        for seq in range(5):
            channel.publish(_event(seq))
        assert sub.queue.qsize() == 0 and reader.read_new() == [] and writes == []   # held back together
        channel.flush()
        assert len(writes) == 1
        assert [r.seq for r in reader.read_new()] == list(range(5))
        assert _ids(_frames(sub.queue.take(1))) == list(range(5))
        channel.publish(_event(5))
    assert [r.seq for r in reader.read_new()] == [5]     # the end of the block flushes
    assert _ids(_frames(sub.queue.take(1))) == [5]
    assert len(writes) == 2


def test_a_terminal_event_is_not_held_back_by_a_batch(store):
    channel = RunChannel(100, 100, run_log=store.create("t", "r", {}))
    sub = channel.attach()
    with channel.batch():
        channel.publish(_event(0))
        channel.publish({"type": "RUN_FINISHED", "threadId": "t", "runId": "r", "timestamp": 1})
        assert [r.seq for r in store.open_reader("t", "r").read_new()] == [0, 1]
        assert _ids(_frames(sub.queue.take(1))) == [0, 1]


def test_a_client_attaching_during_a_batch_replays_the_held_back_events(store):
    channel = RunChannel(100, 100, run_log=store.create("t", "r", {}))
    with channel.batch():
        channel.publish(_event(0))
        channel.publish(_event(1))
        sub = channel.attach()
        assert _ids(b"".join(sub.replay)) == [0, 1]       # logged first, then replayed from memory
        assert [r.seq for r in store.open_reader("t", "r").read_new()] == [0, 1]
        channel.publish(_event(2))
    assert _ids(_frames(sub.queue.take(1))) == [2]


def test_a_batch_that_crosses_the_size_cap_logs_the_events_that_fit(tmp_path):
    store = RunLogStore(str(tmp_path / "state"), ttl=600, max_bytes=1000)
    channel = RunChannel(1000, 100, run_log=store.create("t", "r", {}))
    with channel.batch():
        for seq in range(20):
            channel.publish(dict(_event(seq), delta="x" * 40))
    records = store.open_reader("t", "r").read_new()
    logged = [r.seq for r in records if r.kind == logformat.KIND_EVENT]
    assert 0 < len(logged) < 20 and logged == list(range(len(logged)))
    assert records[-1].kind == logformat.KIND_CLOSE and records[-1].fields["outcome"] == "incomplete"
    assert channel._log_end == len(logged) and not channel.log_complete
    assert _ids(b"".join(channel.attach(after_seq=None).replay)) == list(range(20))


def test_a_batch_never_takes_the_client_queue_past_its_bound(store):
    import threading

    channel = RunChannel(1000, 4, run_log=store.create("t", "r", {}))
    sub = channel.attach()
    seen = []
    sizes = []

    def read():
        while len(seen) < 10:
            sizes.append(sub.queue.qsize())
            seen.extend(sub.queue.take(0.05))
            time.sleep(0.01)

    reader = threading.Thread(target=read)
    with channel.batch():
        for seq in range(10):
            channel.publish(_event(seq))
        reader.start()
    reader.join(5)
    assert _ids(_frames(seen)) == list(range(10)) and max(sizes) <= 4


def test_a_batch_past_the_size_cap_writes_the_records_that_fit(tmp_path):
    frames = [(seq, "TEXT_MESSAGE_CONTENT", b"id: %d\ndata: {}\n\n" % seq) for seq in range(10)]
    one = len(logformat.encode_event(*frames[0]))
    store = RunLogStore(str(tmp_path / "state"), ttl=600, max_bytes=1 << 20)
    writer = store.create("t", "r", {})
    start = writer.size
    writer._max = start + 4 * one + one // 2         # room for four and a half records
    assert writer.append_batch(frames[:3]) == 3
    assert writer.append_batch(frames[3:]) == 1       # the fourth fits, the fifth does not
    assert writer.size == start + 4 * one
    with open(writer.path, "rb") as handle:
        records, _ = logformat.parse(handle.read(), len(logformat.MAGIC))
    assert [r.seq for r in records if r.kind == logformat.KIND_EVENT] == [0, 1, 2, 3]
    writer.close({"outcome": "success", "events": 4})


def _seqs(frames):
    return [int(line[4:]) for line in b"".join(frames).split(b"\n") if line.startswith(b"id: ")]


@pytest.mark.parametrize("logged", [True, False], ids=["with-log", "memory-only"])
def test_a_continuation_segment_replays_from_its_start_for_an_id_below_it(store, logged):
    """A continuation (``runs.admission``) starts at its segment's first id; an id of the segment before it
    asks for the whole continuation, never for nothing (before: memory-only replay refused it)."""
    base = 3 << 32
    old = store.create("t", "r", {})
    old.close({"outcome": "interrupt"})
    channel = RunChannel(10, 100, first_seq=base, run_log=store.create("t", "r", {"firstSeq": base})
                         if logged else None)
    first = channel.attach()
    for index in range(4):
        channel.publish(_event(index))
    assert _seqs(first.queue.take(4)) == [base, base + 1, base + 2, base + 3]
    channel.close("success")
    first.detach()
    for after, expected in ((None, 0), (0, 0), (7, 0), (base - 1, 0), (base + 1, 2)):
        sub = channel.attach(after_seq=after)
        assert _seqs(sub.replay) == [base + index for index in range(expected, 4)]
        sub.detach()
    with pytest.raises(AguiError):
        channel.attach(after_seq=base + 3)
    if logged:      # the continuation's log took the place of the interrupted segment's
        assert store.open_reader("t", "r").header["firstSeq"] == base


def test_an_adopted_continuation_keeps_its_segment_start(store):
    from iaccode_agui.runs.takeover import first_seq
    assert first_seq({"firstSeq": 5 << 32}) == 5 << 32 and first_seq({}) == 0
    assert first_seq({"firstSeq": -1}) == first_seq({"firstSeq": "7"}) == first_seq({"firstSeq": True}) == 0
    channel = RunChannel(10, 100, first_seq=(1 << 32) + 2, base_seq=1 << 32)   # two events logged before
    channel.publish(_event(2))
    with pytest.raises(AguiError):          # the two before it are only in the log (none here)
        channel.attach(after_seq=0)
    assert _seqs(channel.attach(after_seq=(1 << 32) + 1).replay) == [(1 << 32) + 2]

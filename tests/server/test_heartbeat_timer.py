"""The shared heartbeat timer: its schedule on a fake clock, its thread, and idle streams of a real adapter.

The schedule is pure (clock values in, due entries out), so ordering, cancellation, "a stream that writes
never gets a heartbeat" and "an idle stream gets one every interval" are checked on exact numbers.  The
end-to-end test holds many idle streams open on a real adapter and checks that each one receives
heartbeats while the process has no thread per stream for timing.
"""
import os
import sys
import threading
import time

import pytest

from iaccode_agui.sse.codec import HEARTBEAT
from iaccode_agui.sse import heartbeats
from iaccode_agui.sse.channel import END, Subscription
from iaccode_agui.sse.framequeue import FrameQueue
from iaccode_agui.sse.response import SSEBody
from iaccode_agui.sse.heartbeats import BEAT, GONE, TICK, Entry, HeartbeatTimer, Schedule
from tests import ROOT
from tests.harness import wait_for

sys.path.insert(0, os.path.join(ROOT, "tools"))

from toolkit import many as bench_many  # noqa: E402
from toolkit.client import agui_request  # noqa: E402


class _Named(Entry):
    __slots__ = ("name",)


def named(interval, name, now=0.0, poll=1000.0, gone=None):
    made = _Named(interval, poll, gone, lambda item: None, now)
    made.name = name
    return made


def run_clock(schedule, until, step=TICK):
    """Advance a fake clock in ticks; return (time, name) of every heartbeat given, in order."""
    given = []
    now = 0.0
    while now <= until + 1e-9:
        beats, _ = schedule.due(now)
        given.extend((round(now, 3), e.name) for e in beats)
        now = round(now + step, 6)
    return given


def test_heartbeats_come_out_in_due_order_across_intervals():
    schedule = Schedule()
    for item in (named(1.0, "slow"), named(0.5, "fast"), named(0.75, "mid")):
        schedule.add(item)
    given = run_clock(schedule, 1.6)
    assert given == [(0.5, "fast"), (0.75, "mid"), (1.0, "slow"), (1.0, "fast"), (1.5, "mid"), (1.5, "fast")]
    assert [t for t, _ in given] == sorted(t for t, _ in given)


def test_an_idle_stream_gets_one_heartbeat_every_interval():
    schedule = Schedule()
    idle = named(1.0, "idle")
    schedule.add(idle)
    assert [t for t, _ in run_clock(schedule, 10.0)] == [float(n) for n in range(1, 11)]


def test_a_stream_that_writes_more_often_than_the_interval_never_gets_one():
    schedule = Schedule()
    busy, idle = named(1.0, "busy"), named(1.0, "idle")
    schedule.add(busy)
    schedule.add(idle)
    given = []
    for tick in range(int(10.0 / TICK) + 1):
        now = tick * TICK
        if tick % 12 == 0:
            busy.last = now        # the stream's own write every 0.3 s, as the SSE body records it
        beats, _ = schedule.due(now)
        given.extend(e.name for e in beats)
    assert "busy" not in given and given.count("idle") == 10


def test_a_write_moves_the_next_heartbeat_an_interval_past_it():
    schedule = Schedule()
    item = named(1.0, "one")
    schedule.add(item)
    item.last = 0.6                # wrote at 0.6: nothing at 1.0, a heartbeat at 1.6
    assert run_clock(schedule, 1.55) == []
    assert schedule.due(1.6)[0] == [item]


def test_a_cancelled_stream_gets_nothing_and_leaves_the_heap():
    schedule = Schedule()
    ended, other = named(0.5, "ended"), named(0.5, "other")
    schedule.add(ended)
    schedule.add(other)
    Schedule.cancel(ended)
    assert {name for _, name in run_clock(schedule, 3.0)} == {"other"}
    Schedule.cancel(other)
    assert schedule.next_due() is None and len(schedule) == 0


def test_probes_are_asked_every_poll_and_due_times_are_rounded_to_the_tick():
    schedule = Schedule()
    item = named(100.0, "probed", poll=0.3, gone=lambda: False)
    schedule.add(item)
    assert abs(schedule.next_due() - 0.3) < 1e-9
    asked = []
    now = 0.0
    while now <= 1.0:
        beats, probes = schedule.due(now)
        asked.extend(round(now, 3) for e in probes)
        assert not beats
        now = round(now + TICK, 6)
    assert asked == [0.3, 0.6, 0.9]


def test_the_timer_thread_posts_beats_to_an_idle_queue_and_gone_once():
    timer = HeartbeatTimer()
    queue = FrameQueue(8)
    gone = threading.Event()
    posted = []

    def post(item):
        posted.append(item)
        queue.put(item, 0)

    item = timer.register(0.05, 0.05, gone.is_set, post)
    assert wait_for(lambda: posted.count(BEAT) >= 3, 10)
    gone.set()
    assert wait_for(lambda: GONE in posted, 10)
    assert not item.alive
    count = len(posted)
    assert not wait_for(lambda: len(posted) > count, 0.3)   # nothing more once the client is gone


def test_a_broken_stream_does_not_stop_the_timer_for_the_others():
    timer = HeartbeatTimer()
    good = []

    def broken(item):
        raise RuntimeError("this stream's queue is gone")

    timer.register(0.05, 1000.0, None, broken)
    timer.register(0.05, 1000.0, None, good.append)
    assert wait_for(lambda: len(good) >= 3, 10)


def adapter_threads():
    """Threads of this process that are not the in-process demo runtime's (it runs a thread per turn)."""
    return sum(1 for thread in threading.enumerate() if not thread.name.startswith("demo-"))


@pytest.mark.slow
def test_many_idle_streams_of_a_real_adapter_get_heartbeats_without_a_thread_each(adapter_factory):
    """N silent runs at once: every stream sees heartbeats, and the process grows by about one thread per
    run (the run's upstream reader), not two: nothing per stream waits on a clock of its own.

    waitress keeps one worker per open response; that pool is started with the server, so it is part of
    the baseline here and the growth measured is what the streams themselves add.
    """
    streams = 40
    adapter = adapter_factory(heartbeat_interval=0.2, disconnect_poll=1.0, max_active_runs=streams + 4)
    adapter.server.stop()
    from iaccode_agui.server.serving import ServerThread, waitress_limits

    # The stall sweep at its default (2 heartbeats, 0.4 s) could cut a stream whose worker the busy test
    # machine has not scheduled for that long; that sweep is not what this test is about.
    adapter.server = ServerThread(adapter.app, threads=streams + 8, slice_seconds=0.05, stall_timeout=30.0,
                                  **waitress_limits(adapter.settings.largest_request_bytes))
    adapter.url = adapter.server.url
    assert adapter.run(adapter.body("hello", thread="warm"))[-1]["type"] == "RUN_FINISHED"
    heartbeats.shared_timer().ensure_running()
    before = adapter_threads()
    requests = [agui_request("sleep 2.5", adapter.workspace) for _ in range(streams)]
    runner = bench_many.Concurrent(adapter.url, requests, trace=True, timeout=30)
    peak = [0]
    runner.start()
    assert runner.all_started.wait(30), "not every stream started"
    while any(r.t_end == 0 for r in runner.results):
        peak[0] = max(peak[0], adapter_threads())
        if wait_for(lambda: all(r.t_end for r in runner.results), 0.1):
            break
    results = runner.join()
    assert [r.error for r in results if not r.ok] == []
    assert all(r.heartbeats >= 3 for r in results), sorted(r.heartbeats for r in results)[:5]
    grown = peak[0] - before
    # One reader thread per run, the bench client's selector thread, a little slack: a design that also
    # kept a timer thread (or any thread) per stream would need 2 * streams.
    assert grown <= streams + 8, (before, peak[0])


def test_the_heartbeat_counter_counts_every_bump_from_many_threads_and_renders_as_a_counter():
    from iaccode_agui.metrics import Metrics

    metrics = Metrics()
    tally = metrics.tally("agui_heartbeats_total")
    assert metrics.tally("agui_heartbeats_total") is tally
    workers = [threading.Thread(target=lambda: [tally.bump() for _ in range(5000)]) for _ in range(8)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert tally.value == 40000 and tally.value == 40000   # reading does not change it
    assert metrics.value("agui_heartbeats_total") == 40000
    text = metrics.render()
    assert "# TYPE agui_heartbeats_total counter" in text and "\nagui_heartbeats_total 40000\n" in text


def test_a_forked_child_times_its_streams_with_a_thread_of_its_own():
    """A gunicorn worker is a fork: the parent's timer thread does not exist there."""
    parent = heartbeats.shared_timer()
    running = parent.register(0.05, 1000.0, None, lambda item: None)   # the parent's thread is running
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:   # the child: report, then leave without running any of pytest's teardown
        try:
            got = []
            child = heartbeats.shared_timer()
            child.register(0.05, 1000.0, None, got.append)
            os.write(write_end, b"1" if child is not parent and wait_for(lambda: BEAT in got, 10) else b"0")
        finally:
            os._exit(0)
    try:
        os.close(write_end)
        assert os.read(read_end, 1) == b"1"
    finally:
        os.waitpid(pid, 0)
        os.close(read_end)
        parent.cancel(running)


def test_a_heartbeat_a_busy_queue_could_not_take_is_offered_again_a_tick_later():
    """The timer never waits on a stream's lock; a refused heartbeat comes again long before the interval."""
    import time

    offset = [0.0]
    timer = HeartbeatTimer(clock=lambda: time.monotonic() + offset[0])
    answers = [False, False, True]
    offered = []

    def post(item):
        offered.append(item)
        return answers.pop(0) if answers else True

    timer.register(60.0, 1000.0, None, post)
    offset[0] = 60.0                      # the stream has now been silent for its whole interval
    timer.ensure_running()                # (wakes the thread so it sees the new time)
    # Without the retry the second offer would come an interval (60 s) after the first.
    assert wait_for(lambda: len(offered) >= 3, 10), offered
    assert offered[:3] == [BEAT, BEAT, BEAT]


def test_a_marker_is_offered_without_waiting_and_wakes_a_waiting_reader():
    queue = FrameQueue(1, max_bytes=4)
    assert queue.put(b"full", 0)
    assert queue.offer_marker(BEAT)               # past both bounds: a marker has no bytes
    assert queue.take(0) == [b"full", BEAT]
    with queue._cond:                             # another thread is at work on the queue
        assert not queue.offer_marker(BEAT)
    got = []
    reader = threading.Thread(target=lambda: got.append(queue.take(10)))
    reader.start()
    assert wait_for(lambda: queue._reader_waiting, 10)
    assert queue.offer_marker(BEAT)
    reader.join(10)
    assert got == [[BEAT]]


def test_a_heartbeat_due_between_ticks_goes_out_at_the_tick_before_it_never_after():
    """A client whose read timeout is the interval must never see it fire: early by under a tick, not late."""
    schedule = Schedule()
    item = named(1.0, "between", now=0.01)     # due at 1.01, between the ticks 1.0 and 1.025
    schedule.add(item)
    assert run_clock(schedule, 1.1) == [(1.0, "between")]
    item.last = 1.2 + TICK / 3                 # a write between ticks: due again at 2.2083
    given = run_clock(schedule, 2.5)
    assert [when for when, _ in given if when > 1.0] == [2.2]
    assert 2.2 >= item.last + item.interval - TICK



# ---- the SSE body's side: a heartbeat marker reaches the stream's own thread --------------------------
class _PlayedTimer:
    """Takes registrations like the real timer but never runs: the test plays the timer with ``post``."""

    def __init__(self) -> None:
        self.posts = []

    def register(self, interval, poll, gone, post) -> Entry:
        self.posts.append(post)
        return Entry(interval, poll, gone, post, time.monotonic() - 100)

    def cancel(self, entry: Entry) -> None:
        pass

    def ensure_running(self) -> None:
        pass


def _sse_body():
    sub = Subscription(None, [b"data: replayed\n\n"], maxsize=8)
    bumps = []
    timer = _PlayedTimer()
    body = SSEBody(sub, heartbeat=0.5, poll=1.0, timer=timer, on_heartbeat=lambda: bumps.append(1))
    assert next(body) == b"data: replayed\n\n"
    return body, sub.queue, timer, bumps


def _park(body, queue: FrameQueue):
    """Run the body's generator on a thread until it waits on its queue (as waitress's worker would)."""
    out = []
    thread = threading.Thread(target=lambda: out.extend(body), daemon=True)
    thread.start()
    assert wait_for(lambda: queue._reader_waiting, 10)
    body._entry.last = time.monotonic() - 100   # long silent since its replay, as the tests' premise
    return thread, out


def test_an_idle_stream_writes_its_heartbeat_on_its_own_thread_when_the_timer_posts_it():
    body, queue, timer, bumps = _sse_body()
    thread, out = _park(body, queue)
    assert timer.posts[0](BEAT) is True
    assert wait_for(lambda: out == [HEARTBEAT], 10), out
    assert bumps == [1]
    queue.put_final(END)
    thread.join(10)


def test_a_marker_that_finds_its_stream_a_tick_early_is_still_written():
    """The timer hands a heartbeat out up to a tick before it is due; dropping it as "too early" would
    leave the stream silent for a whole interval more."""
    body, queue, timer, bumps = _sse_body()
    thread, out = _park(body, queue)
    body._entry.last = time.monotonic() - (0.5 - 1.5 * TICK)   # a tick and a half before it is due
    assert timer.posts[0](BEAT) is True
    assert wait_for(lambda: out == [HEARTBEAT], 10), out
    queue.put_final(END)
    thread.join(10)


def test_a_stream_with_frames_queued_gets_no_heartbeat_at_all():
    body, queue, timer, bumps = _sse_body()
    queue.put(b"data: soon\n\n", 0)
    assert body._post(BEAT) is True   # what the timer is handed when it registers the stream
    assert bumps == [] and queue.take(0) == [b"data: soon\n\n"]

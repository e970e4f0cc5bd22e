"""The heartbeat timer's heap under many short streams and odd intervals (pure ``Schedule`` on a fake clock).

Streams that end leave slots behind until those come up; these tests hold the heap to the streams still
open, check an ended stream's objects are not kept alive by its slots, and that no interval, however short,
makes one pass of the timer pop the same slot forever.
"""
import gc
import weakref

from iaccode_agui.sse.heartbeats import TICK, Entry, HeartbeatTimer, Schedule


def test_many_short_streams_leave_a_heap_the_size_of_the_open_ones():
    schedule = Schedule()
    open_streams = [Entry(15.0, 1.0, lambda: False, lambda item: None, 0.0) for _ in range(10)]
    for entry in open_streams:
        schedule.add(entry)
    for _ in range(10000):   # 10,000 streams that opened and ended within the first interval
        ended = Entry(15.0, 1.0, lambda: False, lambda item: None, 0.0)
        schedule.add(ended)
        Schedule.cancel(ended)
    assert len(schedule) <= 1000, len(schedule)   # 20,020 slots before the sweep
    beats, probes = schedule.due(15.0)
    assert sorted(map(id, beats)) == sorted(map(id, open_streams))   # the open ones still get theirs


class _Stream:
    def post(self, item):
        pass

    def gone(self):
        return False


def test_an_ended_stream_is_not_kept_alive_by_its_slot_in_the_heap():
    timer = HeartbeatTimer()
    stream = _Stream()
    entry = timer.register(1000.0, 1000.0, stream.gone, stream.post)
    timer.cancel(entry)
    ref = weakref.ref(stream)
    del stream
    gc.collect()
    assert ref() is None, "the cancelled entry still holds the stream's callbacks"


class _Counting(Entry):
    """An entry that raises once its interval has been read far more often than one pass needs."""
    __slots__ = ("reads", "_interval")

    @property
    def interval(self):
        self.reads += 1
        if self.reads > 1000:
            raise RuntimeError("one pass of the timer keeps popping the same slot")
        return self._interval

    @interval.setter
    def interval(self, value):
        self.reads, self._interval = 0, value


def test_an_interval_far_below_a_tick_gives_one_heartbeat_per_pass_not_a_spin():
    schedule = Schedule()
    entry = _Counting(1e-9, 1000.0, None, lambda item: None, 0.0)
    schedule.add(entry)
    now = 40 * TICK   # exactly on a tick: the re-pushed slot rounds back into the tick being popped
    beats, _ = schedule.due(now)
    assert beats == [entry]
    beats, _ = schedule.due(now + TICK)
    assert beats == [entry]

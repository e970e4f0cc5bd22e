"""One heartbeat and disconnect-probe timer for every SSE stream of the process.

An open stream used to time itself: its server thread woke every ``--heartbeat-interval`` to write the
comment and every ``disconnect_poll`` (1 s) to ask whether the client was still there, so 1,000 idle streams
with 15 s heartbeats meant about 1,000 thread wake-ups a second, each fighting for the interpreter lock,
to find nothing to do.  Here one thread keeps a heap of due times for all streams: it asks the cheap
"client gone?" question itself and only wakes a stream's thread (by posting a marker on the stream's own
queue) when there is something to write or the client is gone.  A stream that writes often never gets a
marker: a write only moves a number, and the timer looks at it when the old due time comes up.

Due times are whole ``TICK`` s so the streams due in the same tick are handled in one pass of the timer,
back to back, not spread over the interval.  A heartbeat is rounded down, to the last tick at or before
it is due: sent up to a tick early rather than up to a tick late, because what a client needs is a write
within every interval (a read timeout set to the interval must never fire).  Probes are rounded up.
``Schedule`` is the pure part (plain clock values in, entries out); ``HeartbeatTimer`` is the thread
around it.
"""
import collections
import heapq
import itertools
import logging
import math
import os
import threading
import time
from typing import Any, Callable, Deque, List, Optional, Tuple

log = logging.getLogger("iaccode_agui.heartbeats")

BEAT = object()   # posted on a stream's queue: silent for its interval, write a heartbeat
GONE = object()   # posted on a stream's queue: the client went away
TICK = 0.025      # due times are whole ticks (s): many streams per pass; a heartbeat at most one tick early
# How early a heartbeat marker may find its stream and still be written: the tick it may be early by, plus
# one for the clock reads in between (a marker dropped as "too early" costs a whole interval).
EARLY = 2 * TICK
HEARTBEAT, PROBE = 0, 1
COMPACT_MIN = 256   # a heap this short is never swept: its ended streams' slots cost next to nothing


def _ignore(item: Any) -> None:
    """What a cancelled entry posts to (the timer may still be handing it a marker when it is cancelled)."""


class Entry:
    """One stream as the timer sees it.  ``last`` is when the stream last wrote (set by the stream's thread
    without a lock: a float store is atomic, and a stale read only moves a heartbeat by one reschedule)."""

    __slots__ = ("interval", "poll", "gone", "post", "last", "alive")

    def __init__(self, interval: float, poll: float, gone: Optional[Callable[[], bool]],
                 post: Callable[[Any], Optional[bool]], now: float) -> None:
        self.interval = interval
        self.poll = poll
        self.gone = gone
        self.post = post
        self.last = now
        self.alive = True


def _tick_at_or_after(when: float) -> int:
    """Due times are whole ticks (integers, so a float quotient never pushes one to the next tick)."""
    return math.ceil(when / TICK - 1e-6)


def _tick_at_or_before(when: float) -> int:
    return math.floor(when / TICK + 1e-6)


def _ticks_until(now: float) -> int:
    return math.floor(now / TICK + 1e-6)


class Schedule:
    """The due times of every stream's next heartbeat and next disconnect probe, in one heap.

    Nothing here reads a clock or calls a stream: ``due(now)`` says which entries need a heartbeat and
    which need a probe at ``now``; the caller does both and reports a gone client with ``cancel``.
    """

    def __init__(self) -> None:
        self._heap: List[Tuple[int, int, int, Entry]] = []
        self._seq = itertools.count()
        self._compact_at = COMPACT_MIN   # heap length at which the slots of ended streams are swept out

    def __len__(self) -> int:
        return len(self._heap)

    def add(self, entry: Entry) -> None:
        if len(self._heap) >= self._compact_at:
            self._compact()
        self._push(entry.last + entry.interval, HEARTBEAT, entry)
        if entry.gone is not None:
            self._push(entry.last + entry.poll, PROBE, entry)

    @staticmethod
    def cancel(entry: Entry) -> None:
        """Forget a stream (ended, cancelled, client gone); its heap slots are dropped when they come up.

        The entry lets go of the stream's callbacks now: a slot can stay in the heap for a whole interval,
        and through them it would keep the ended stream's body, queue and run alive that long."""
        entry.alive = False
        entry.post = _ignore
        entry.gone = None

    def _compact(self) -> None:
        """Drop the slots of ended streams: many short streams would otherwise leave the heap about
        (streams per second x interval) long, whatever the number of streams still open."""
        self._heap = [slot for slot in self._heap if slot[3].alive]
        heapq.heapify(self._heap)
        self._compact_at = max(COMPACT_MIN, 2 * len(self._heap))

    def _push(self, when: float, kind: int, entry: Entry, after: int = -1) -> None:
        """``after``: a slot popped at that tick comes back in a later one, however short the interval
        (else ``due`` would pop it again in the same pass, forever)."""
        tick = _tick_at_or_before(when) if kind == HEARTBEAT else _tick_at_or_after(when)
        heapq.heappush(self._heap, (max(tick, after + 1), next(self._seq), kind, entry))

    def next_due(self) -> Optional[float]:
        """When the earliest slot comes up (None: no stream at all); dead slots are dropped first."""
        heap = self._heap
        while heap and not heap[0][3].alive:
            heapq.heappop(heap)
        return heap[0][0] * TICK if heap else None

    def due(self, now: float) -> Tuple[List[Entry], List[Entry]]:
        """Pop every slot due at ``now``: (entries silent for their interval, entries to probe).

        A heartbeat is given when it falls due before the next tick; the slot of a stream that wrote
        since is pushed back to its new due time instead.  A stream given a heartbeat gets its next slot
        an interval on (the write then moves ``last``).
        """
        beats: List[Entry] = []
        probes: List[Entry] = []
        heap, pop, push, seq = self._heap, heapq.heappop, heapq.heappush, self._seq
        limit = _ticks_until(now)
        soonest = limit + 1            # a slot popped now comes back in a later tick, never this one
        next_tick = soonest * TICK
        while heap and heap[0][0] <= limit:
            _, _, kind, entry = pop(heap)
            if not entry.alive:
                continue
            if kind == PROBE:
                probes.append(entry)
                tick = _tick_at_or_after(now + entry.poll)
            else:
                due = entry.last + entry.interval
                if due < next_tick:
                    beats.append(entry)
                    due = now + entry.interval
                tick = _tick_at_or_before(due)
            push(heap, (tick if tick > limit else soonest, next(seq), kind, entry))
        return beats, probes


class HeartbeatTimer:
    """The thread that runs a ``Schedule`` against the clock; one per process (``shared_timer``)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._schedule = Schedule()
        self._cond = threading.Condition(threading.Lock())
        self._thread: Optional[threading.Thread] = None
        # New streams wait here until the thread moves them into the heap: ``append`` needs no lock, so a
        # thousand streams opening at once do not queue on one (they did: 600 threads in a dump at once).
        self._pending: Deque[Entry] = collections.deque()
        self._wake_at = math.inf   # when the thread looks next; a stream due earlier must wake it
        # Streams whose queue was busy when their heartbeat was due: offered again one tick later.  The
        # thread never waits for a stream's lock: under load a lock held by a thread that is itself waiting
        # for the interpreter lock would make the one timer thread wait in line once per stream.
        self._retry: List[Entry] = []
        self.passes = 0   # timer passes that found work (for tests and curiosity)

    def register(self, interval: float, poll: float, gone: Optional[Callable[[], bool]],
                 post: Callable[[Any], Optional[bool]]) -> Entry:
        """Start timing one stream: ``post(BEAT)`` after ``interval`` s without a write, ``post(GONE)`` once
        ``gone()`` (asked every ``poll`` s) says the client left.  ``post`` must not block; it returns
        False when it could not take the marker at once (the heartbeat is offered again a tick later)."""
        entry = Entry(interval, poll, gone, post, self._clock())
        self._pending.append(entry)
        first = entry.last + (min(interval, poll) if gone is not None else interval)
        if first < self._wake_at or self._thread is None:
            with self._cond:
                self._ensure_thread()
                self._cond.notify()
        return entry

    def cancel(self, entry: Entry) -> None:
        Schedule.cancel(entry)   # no lock, no wake-up: the slot is skipped when it comes up

    def ensure_running(self) -> None:
        """Start the thread again if it is gone (a fork's child has none of its parent's threads)."""
        with self._cond:
            self._ensure_thread()
            self._cond.notify()

    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name="heartbeats", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while True:
            beats, probes = self._next_pass()
            self.passes += 1
            retry, self._retry = self._retry, []
            now = self._clock()
            for entry in beats + [e for e in retry if e.alive and now - e.last >= e.interval - EARLY]:
                if _deliver(entry, BEAT) is False:
                    self._retry.append(entry)
            for entry in probes:
                if _client_gone(entry):
                    _deliver(entry, GONE)   # before the cancel: that lets go of ``post``
                    self.cancel(entry)

    def _next_pass(self) -> Tuple[List[Entry], List[Entry]]:
        """Wait for the next due slot and pop everything due then.

        ``_wake_at`` is published before the last look at ``_pending``: a stream registered after that
        look sees the new wake time and wakes the thread itself if it is due earlier.
        """
        schedule, pending = self._schedule, self._pending
        with self._cond:
            while True:
                while pending:
                    schedule.add(pending.popleft())
                wake = schedule.next_due()
                now = self._clock()
                if wake is not None and wake <= now:
                    self._wake_at = now   # busy with this pass: it looks again right after
                    return schedule.due(now)
                if self._retry:
                    wake = now + TICK if wake is None else min(wake, now + TICK)
                self._wake_at = math.inf if wake is None else wake
                if not pending:
                    self._cond.wait(None if wake is None else max(0.0, wake - now))
                    if self._retry:
                        return schedule.due(self._clock())


def _client_gone(entry: Entry) -> bool:
    gone = entry.gone   # once: a cancel from the stream's thread may clear it meanwhile
    try:
        return bool(gone is not None and gone())
    except Exception:   # a probe that cannot answer has lost its client
        log.exception("disconnect probe failed; treating the client as gone")
        return True


def _deliver(entry: Entry, item: Any) -> Optional[bool]:
    """Hand ``item`` to the stream; False when its queue was busy (the caller offers it again)."""
    try:
        return entry.post(item)
    except Exception:   # one broken stream must not stop the timer of all the others; it is dropped
        Schedule.cancel(entry)
        log.exception("could not post a heartbeat marker to a stream; it gets no more heartbeats")
        return None


_shared: Optional[HeartbeatTimer] = None
_shared_lock = threading.Lock()


def shared_timer() -> HeartbeatTimer:
    """The process's timer, made on first use."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = HeartbeatTimer()
        return _shared


def _forget_after_fork() -> None:
    """A forked child (a gunicorn worker) has none of its parent's threads: it makes its own timer."""
    global _shared, _shared_lock
    _shared, _shared_lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)

"""The hand-off between a run worker and the SSE response that is attached to it.

The worker publishes AG-UI events; each is encoded once (timestamp + per-run ``id:``), appended to the run's
durable log (so the operating system has it before any client does), kept in a bounded in-memory replay
buffer and put on the queue of the currently attached client.  While the worker projects one upstream read
it holds its events back (``batch``) and flushes them before it waits again: one log write and one queue
hand-off per batch instead of per event.  The queue is bounded so a client that stops
reading pushes back on the worker (and, through TCP, on the runtime) instead of growing memory.

Replay is one operation, "everything after id N", whatever the spelling on the wire (``Last-Event-ID`` or
an ``afterSequence`` field): frames still in memory are served from there, older ones from the run log.
A continuation of an interrupted run (``runs.admission``) is a new segment of that run's ids: its channel
starts at the segment's first id, and an id below it asks for the segment from its start.
"""
import collections
import contextlib
import logging
import threading
import time
from typing import Any, Callable, Deque, Dict, Iterable, Iterator, List, Optional, Tuple

from iaccode_agui.sse.codec import encode_json_event
from iaccode_agui.errors import AguiError
from iaccode_agui.sse.framequeue import END, FrameQueue
from iaccode_agui.runlog.encoding import TERMINAL_TYPES
from iaccode_agui.runlog.tail import LogReplay
from iaccode_agui.sse.replay_budget import ReplayBudget
from iaccode_agui.runlog.logfiles import RunLogWriter

__all__ = ["END", "FrameQueue", "RunChannel", "Subscription", "encode_agui_event"]

log = logging.getLogger("iaccode_agui.runs")

_BATCH_MAX = 256    # events held back at most before a flush (bounds a batch's memory and latency)


def encode_agui_event(event: Dict[str, Any], seq: int) -> bytes:
    if "timestamp" not in event:
        event["timestamp"] = int(time.time() * 1000)
    return encode_json_event(event, seq)


class Subscription:
    """One attached client: frames to replay first, then the live queue."""

    def __init__(self, channel: Optional["RunChannel"], replay: Iterable[bytes], maxsize: int,
                 max_bytes: Optional[int] = None) -> None:
        self.channel = channel
        self.replay = replay
        self.queue = FrameQueue(maxsize, max_bytes)
        self.gone: Optional[Callable[[], bool]] = None   # the server's "client disconnected" probe, if any

    def detach(self) -> None:
        close = getattr(self.replay, "close", None)
        if close is not None:
            close()
        if self.channel is not None:
            self.channel.detach(self)


class RunChannel:
    # Makes the mark that tells other processes no client is attached here (``runs.detached``), when set:
    # taken when the subscriber leaves, given up when one attaches or the run ends.  Only a disconnect pays
    # for it (a file and a lock); a run's first attach costs nothing.
    marker: Optional[Callable[[], Any]] = None
    _mark: Any = None

    def __init__(self, max_buffer: int = 10000, queue_max: int = 4096, *, run_log: Optional[RunLogWriter] = None,
                 budget: Optional[ReplayBudget] = None, first_seq: int = 0, base_seq: Optional[int] = None,
                 queue_max_bytes: Optional[int] = None) -> None:
        self._lock = threading.Lock()
        self._frames: Deque[Tuple[int, bytes]] = collections.deque()
        self._max_frames = max(1, max_buffer)
        self._memory = 0
        self._budget = budget
        self._log = run_log
        self.log_path: Optional[str] = run_log.path if run_log is not None else None
        self._log_end: Optional[int] = None   # first id the log has no room for (it reached its size cap)
        self._next_seq = first_seq      # an adopted run continues its log's ids
        self._base_seq = first_seq if base_seq is None else base_seq     # the segment's first id
        self._queue_max = queue_max
        self._queue_max_bytes = queue_max_bytes   # what an attached client may leave unread before the run waits
        self._subscriber: Optional[Subscription] = None
        self.closed = False
        self.events_published = 0
        self._pending: List[Tuple[int, str, bytes]] = []   # published, not yet logged nor delivered
        self._batching = 0
        # Sees every event as published (the run's stored conversation folds them: ``runs.history_writer``).
        self.observe: Optional[Callable[[Dict[str, Any]], None]] = None

    def use_log(self, run_log: Optional[RunLogWriter]) -> None:
        """Give the channel its durable log before the first event (admission opens it after the claim)."""
        if run_log is None:
            return
        with self._lock:
            if self._next_seq == self._base_seq and self._log is None:
                self._log = run_log
                self.log_path = run_log.path
                return
        run_log.discard()     # too late: a log that misses the first events would replay a wrong history

    @property
    def attached(self) -> bool:
        return self._subscriber is not None

    @property
    def log_complete(self) -> bool:
        """Whether the run log holds every frame, so memory is only a cache of it."""
        return self.log_path is not None and self._log_end is None

    def _in_log(self, seq: int) -> bool:
        return self.log_path is not None and (self._log_end is None or seq < self._log_end)

    @property
    def memory_bytes(self) -> int:
        return self._memory

    @property
    def next_seq(self) -> int:
        return self._next_seq

    @property
    def base_seq(self) -> int:
        return self._base_seq

    def logged(self) -> "RunChannel":
        """A closed twin of this finished channel that replays from its complete log alone (``runs.finished``):
        the same ids and attach rules, with no frames in memory and no replay budget."""
        twin = RunChannel(1, self._queue_max, first_seq=self._next_seq, base_seq=self._base_seq,
                          queue_max_bytes=self._queue_max_bytes)
        twin.log_path, twin.closed, twin.events_published = self.log_path, True, self.events_published
        return twin

    def client_gone(self) -> bool:
        """No client, or the attached one's connection is known to be lost (its stream has not noticed yet)."""
        sub = self._subscriber
        return sub is None or (sub.gone is not None and sub.gone())

    def cancel_if_detached(self, cancel: Callable[[], None]) -> bool:
        """``cancel()`` when no client is attached, decided and done under the lock that attaches clients:
        a re-attach either comes first (nothing is cancelled) or sees the run end; True when cancelled."""
        with self._lock:
            if not self.client_gone():
                return False
            cancel()
            return True

    def publish(self, event: Dict[str, Any]) -> None:
        """Encode ``event`` with the next id; inside ``batch()`` it goes out at the next flush."""
        observe = self.observe
        if observe is not None:
            observe(event)
        with self._lock:
            if self.closed:
                return
            seq = self._next_seq
            self._next_seq += 1
            event_type = event.get("type") or ""
            self._pending.append((seq, event_type, encode_agui_event(event, seq)))
            self.events_published += 1
            if self._batching and event_type not in TERMINAL_TYPES and len(self._pending) < _BATCH_MAX:
                return
            frames, sub = self._flush_locked()
        self._deliver_all(sub, frames)

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Hold published events back until ``flush()`` (or the end of the block), to log them in one write.

        The owner thread uses it while it projects what one upstream read brought, and flushes before it
        waits for the next read, so holding back never delays an event behind the network.
        """
        with self._lock:
            self._batching += 1
        try:
            yield
        finally:
            with self._lock:
                self._batching -= 1
            self.flush()

    def flush(self) -> None:
        """Log the held-back events (one write), then hand them to the attached client."""
        with self._lock:
            if not self._pending:
                return
            frames, sub = self._flush_locked()
        self._deliver_all(sub, frames)

    def _flush_locked(self) -> Tuple[List[bytes], Optional[Subscription]]:
        """Held-back events into the log and the replay memory (lock held); the frames for the client."""
        pending, self._pending = self._pending, []
        if self._log is not None and self._log_end is None:
            self._append_to_log(pending)
        self._remember(pending)
        return [frame for _, _, frame in pending], self._subscriber

    def _append_to_log(self, pending: List[Tuple[int, str, bytes]]) -> None:
        run_log = self._log
        assert run_log is not None
        try:
            written = run_log.append_batch(pending)
            if written < len(pending):
                # Everything before this frame is intact on disk and may already be gone from memory: keep
                # the log (and its lock) as the source of that prefix; memory keeps every later frame.
                self._log_end = pending[written][0]
                log.warning("run log %s reached its size cap at event %d", run_log.path, self._log_end)
                self._stop_logging(run_log, self._log_end - 1)
            if any(event_type in TERMINAL_TYPES for _, event_type, _ in pending[:written]):
                run_log.sync()   # the run's outcome (an interrupt included) is on disk before it is shown
        except OSError as exc:
            # Replay falls back to memory alone; a log with a gap would replay a wrong history.
            log.warning("run log %s given up: %s", run_log.path, exc)
            run_log.discard(pending[0][0] - 1)
            self._log = None
            self.log_path = None

    def _remember(self, pending: List[Tuple[int, str, bytes]]) -> None:
        frames = self._frames
        size = 0
        for seq, _, frame in pending:
            frames.append((seq, frame))
            size += len(frame)
        self._memory += size
        budget = self._budget
        if budget is not None:
            budget.charge(size)
        if len(frames) > self._max_frames:
            self._forget(len(frames) - self._max_frames)
        if budget is not None and budget.over and self.log_path is not None:
            # What the log holds is only a cache here: memory only speeds up an early re-attach.
            while frames and budget.over and self._in_log(frames[0][0]):
                self._forget_oldest()

    def _forget(self, count: int) -> int:
        """Drop the ``count`` oldest frames from memory; the bytes released."""
        popleft = self._frames.popleft
        size = 0
        for _ in range(count):
            size += len(popleft()[1])
        self._memory -= size
        if self._budget is not None:
            self._budget.refund(size)
        return size

    def _forget_oldest(self) -> int:
        return self._forget(1)

    def drop_memory(self) -> int:
        """Release every frame kept in memory (a finished run; the log, if any, still replays them)."""
        return self.trim_memory(self._memory)

    def trim_memory(self, size: int) -> int:
        released = 0
        with self._lock:
            while self._frames and released < size:
                released += self._forget_oldest()
        return released

    def _deliver_all(self, sub: Optional[Subscription], frames: List[bytes]) -> None:
        # Block while the client is slow (backpressure); give up once it is no longer the subscriber.
        if sub is None:
            return
        while frames:
            taken = sub.queue.put_many(frames, timeout=0.25)
            if taken:
                frames = frames[taken:]
            elif self._subscriber is not sub:
                return

    def note_usage(self, usage: Any) -> None:
        """Record the run's usage totals in its log (best-effort: they only matter to a take-over)."""
        self.flush()    # after the events that brought them, as when every event was written at once
        with self._lock:
            run_log = self._log
            if self.closed or run_log is None or self._log_end is not None:
                return
            try:
                run_log.note_usage(usage)
            except OSError as exc:     # a full log or disk: the next event's append decides what happens
                log.info("run log %s: usage totals not recorded: %s", run_log.path, exc)

    @staticmethod
    def _stop_logging(run_log: RunLogWriter, last_seq: int) -> None:
        try:
            run_log.mark_incomplete(last_seq, "size-cap")
        except OSError as exc:
            log.warning("run log %s: its early end could not be recorded: %s", run_log.path, exc)

    def close(self, outcome: Optional[str] = None) -> None:
        with self._lock:
            if self.closed:
                return
            frames, sub = self._flush_locked() if self._pending else ([], self._subscriber)
            self.closed = True
            self._release_mark_locked()
            run_log, self._log = self._log, None
            if run_log is not None:
                try:
                    run_log.close({"outcome": outcome, "events": self._next_seq})
                except OSError as exc:
                    log.warning("run log %s not closed cleanly: %s", run_log.path, exc)
                # The complete log replays this run from now on; memory is for live runs.
                if self._log_end is None:
                    self._forget(len(self._frames))
                else:
                    self._forget(sum(1 for seq, _ in self._frames if seq < self._log_end))
        if sub is not None:
            self._deliver_all(sub, frames)
            sub.queue.put_final(END)

    def attach(self, after_seq: Optional[int] = None, takeover_wait: float = 0.0) -> Subscription:
        """Attach a client; ``after_seq`` replays the frames with a greater id (from memory or the log).

        A client that lost its connection usually re-attaches before the server has noticed the loss, so
        for up to ``takeover_wait`` seconds a subscriber whose connection is known to be gone is replaced
        instead of refused.
        """
        deadline = time.monotonic() + takeover_wait
        while True:
            with self._lock:
                previous = self._subscriber
                # A gone subscriber is replaced in the same hold of the lock that attaches the new one:
                # cleared first and attached later, the run would read as having no client in between, and
                # the old stream's close or a second request would cancel the run being re-attached.
                if previous is None or (previous.gone is not None and previous.gone()):
                    return self._attach_locked(after_seq)
            if time.monotonic() >= deadline:
                raise AguiError("RUN_ALREADY_ATTACHED")
            time.sleep(0.05)

    def _attach_locked(self, after_seq: Optional[int]) -> Subscription:
        """The new subscriber takes the place of whatever is there (lock held); the old one's generator
        ends on its own at its next poll, and its detach leaves the new one alone."""
        if self._pending:
            self._flush_locked()   # held-back events are logged and in memory: the replay has them
        sub = Subscription(self, self._replay_after(after_seq), self._queue_max, self._queue_max_bytes)
        self._subscriber = sub
        if self.closed:
            sub.queue.put_final(END)
        self._release_mark_locked()
        return sub

    def use_marker(self, marker: Callable[[], Any], detached_now: bool = False) -> None:
        """Set ``marker``; ``detached_now`` marks at once a run that has no client yet (an adopted one)."""
        with self._lock:
            self.marker = marker
            if detached_now and self._subscriber is None and not self.closed and self._mark is None:
                self._mark = marker()

    def _release_mark_locked(self) -> None:
        mark, self._mark = self._mark, None
        if mark is not None:
            mark.release()

    def _replay_after(self, after_seq: Optional[int]) -> Iterable[bytes]:
        """Frames with an id above ``after_seq`` (all with None) up to the newest published (lock held)."""
        if after_seq is not None and after_seq >= self._next_seq + 1:
            raise AguiError("RUN_ALREADY_TERMINAL")
        if self.closed and after_seq is not None and after_seq + 1 >= self._next_seq:
            # The client already saw the terminal event: nothing is left to tell it.  A client that
            # missed even one event, the terminal one included, still gets that tail.
            raise AguiError("RUN_ALREADY_TERMINAL")
        first = self._base_seq if after_seq is None else max(after_seq + 1, self._base_seq)
        oldest = self._frames[0][0] if self._frames else self._next_seq
        if first >= oldest:
            return [frame for seq, frame in self._frames if seq >= first]
        replay = self._replay_from_log(first, oldest)
        if replay is not None:
            return replay
        if after_seq is None:
            return [frame for _, frame in self._frames]
        raise AguiError("RUN_ALREADY_TERMINAL")

    def _replay_from_log(self, first: int, oldest: int) -> Optional[LogReplay]:
        """Frames from ``first`` on out of the log, then those past its size cap out of memory (lock held)."""
        if self.log_path is None:
            return None
        last = self._next_seq - 1 if self._log_end is None else self._log_end - 1
        if oldest > last + 1:
            return None     # frames between the log's end and memory's start are gone
        tail = [frame for seq, frame in self._frames if seq > last]
        return LogReplay.open(self.log_path, first, last, tail)

    def detach(self, sub: Subscription) -> None:
        with self._lock:
            if self._subscriber is sub:
                self._subscriber = None
                if self.marker is not None and not self.closed and self._mark is None:
                    self._mark = self.marker()

"""The hand-off between a run worker and the SSE response that is attached to it.

The worker publishes AG-UI events; each is encoded once (timestamp + per-run ``id:``), kept in a bounded
replay buffer and put on the queue of the currently attached client.  The queue is bounded so a client
that stops reading pushes back on the worker (and, through TCP, on the runtime) instead of growing memory.
A client that re-attaches with ``Last-Event-ID`` gets the buffered frames after that id, then live ones.
"""
import collections
import json
import threading
import time
from typing import Any, Callable, Deque, Dict, List, Optional, Tuple

from iaccode_agui.a2a.sse import encode_event
from iaccode_agui.errors import AguiError

END = object()   # sentinel put on a subscriber queue when the run has no more events

_ENCODE = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode   # one encoder, not one per event


def encode_agui_event(event: Dict[str, Any], seq: int) -> bytes:
    if "timestamp" not in event:
        event["timestamp"] = int(time.time() * 1000)
    return encode_event(_ENCODE(event), seq)


class FrameQueue:
    """A bounded FIFO of encoded frames with batch reads.

    ``queue.Queue`` costs a lock round trip and a notify per item; here a producer only notifies a reader
    that is actually waiting, and the reader takes everything queued in one call, so a burst of events
    becomes one socket write.  ``put`` blocks while the queue is full (backpressure towards the runtime).
    """

    def __init__(self, maxsize: int) -> None:
        self._items: Deque[Any] = collections.deque()
        self._max = max(1, maxsize)
        self._cond = threading.Condition(threading.Lock())
        self._reader_waiting = False
        self._writer_waiting = False

    def put(self, item: Any, timeout: float) -> bool:
        """Append ``item``; False if it stayed full for ``timeout`` seconds."""
        with self._cond:
            if len(self._items) >= self._max:
                self._writer_waiting = True
                self._cond.wait(timeout)
                self._writer_waiting = False
                if len(self._items) >= self._max:
                    return False
            self._items.append(item)
            if self._reader_waiting:
                self._cond.notify_all()
            return True

    def qsize(self) -> int:
        return len(self._items)

    def put_final(self, item: Any) -> None:
        """Append ``item`` even when full (the end marker must never be lost)."""
        with self._cond:
            self._items.append(item)
            self._cond.notify_all()

    def take(self, timeout: float) -> List[Any]:
        """Everything queued (possibly after waiting up to ``timeout``); [] when nothing came."""
        with self._cond:
            if not self._items:
                self._reader_waiting = True
                self._cond.wait(timeout)
                self._reader_waiting = False
            items = list(self._items)
            self._items.clear()
            if items and self._writer_waiting:
                self._cond.notify_all()
            return items


class Subscription:
    """One attached client: frames to replay first, then the live queue."""

    def __init__(self, channel: "RunChannel", replay: List[bytes], maxsize: int) -> None:
        self.channel = channel
        self.replay = replay
        self.queue = FrameQueue(maxsize)
        self.gone: Optional[Callable[[], bool]] = None   # the server's "client disconnected" probe, if any


class RunChannel:
    def __init__(self, max_buffer: int = 10000, queue_max: int = 4096) -> None:
        self._lock = threading.Lock()
        self._frames: Deque[Tuple[int, bytes]] = collections.deque(maxlen=max(1, max_buffer))
        self._next_seq = 0
        self._queue_max = queue_max
        self._subscriber: Optional[Subscription] = None
        self.closed = False
        self.events_published = 0

    @property
    def attached(self) -> bool:
        return self._subscriber is not None

    def publish(self, event: Dict[str, Any]) -> None:
        with self._lock:
            if self.closed:
                return
            seq = self._next_seq
            self._next_seq += 1
            frame = encode_agui_event(event, seq)
            self._frames.append((seq, frame))
            self.events_published += 1
            sub = self._subscriber
        if sub is not None:
            self._deliver(sub, frame)

    def _deliver(self, sub: Subscription, item: Any) -> None:
        # Block while the client is slow (backpressure); give up once it is no longer the subscriber.
        while not sub.queue.put(item, timeout=0.25):
            if self._subscriber is not sub:
                return

    def close(self) -> None:
        with self._lock:
            if self.closed:
                return
            self.closed = True
            sub = self._subscriber
        if sub is not None:
            sub.queue.put_final(END)

    def attach(self, after_seq: Optional[int] = None, takeover_wait: float = 0.0) -> Subscription:
        """Attach a client; ``after_seq`` replays buffered frames with a greater id.

        A client that lost its connection usually re-attaches before the server has noticed the loss, so
        for up to ``takeover_wait`` seconds a subscriber whose connection is known to be gone is replaced
        instead of refused.
        """
        deadline = time.monotonic() + takeover_wait
        while True:
            with self._lock:
                previous = self._subscriber
                if previous is None:
                    break
                if previous.gone is not None and previous.gone():
                    self._subscriber = None       # its generator ends on its own at the next poll
                    break
            if time.monotonic() >= deadline:
                raise AguiError("RUN_ALREADY_ATTACHED")
            time.sleep(0.05)
        with self._lock:
            if self._subscriber is not None:
                raise AguiError("RUN_ALREADY_ATTACHED")
            if after_seq is None:
                replay = [frame for _, frame in self._frames]
            else:
                oldest = self._frames[0][0] if self._frames else self._next_seq
                if after_seq + 1 < oldest or after_seq >= self._next_seq + 1:
                    raise AguiError("RUN_ALREADY_TERMINAL")
                replay = [frame for seq, frame in self._frames if seq > after_seq]
            sub = Subscription(self, replay, self._queue_max)
            self._subscriber = sub
            if self.closed:
                sub.queue.put_final(END)
            return sub

    def detach(self, sub: Subscription) -> None:
        with self._lock:
            if self._subscriber is sub:
                self._subscriber = None

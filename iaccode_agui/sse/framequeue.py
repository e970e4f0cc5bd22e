"""The bounded frame queue between a run's producer and one SSE response."""
import collections
import threading
from typing import Any, Deque, List, Optional, Sequence, Tuple

END = object()   # sentinel put on a subscriber queue when the run has no more events


def _size(item: Any) -> int:
    """Bytes an item counts against the byte bound: a frame its length, a marker object nothing."""
    return len(item) if item.__class__ is bytes else 0


class FrameQueue:
    """A bounded FIFO of encoded frames with batch reads.

    ``queue.Queue`` costs a lock round trip and a notify per item; here a producer only notifies a reader
    that is actually waiting, and the reader takes everything queued in one call, so a burst of events
    becomes one socket write.  ``put`` blocks while the queue is full (backpressure towards the runtime).

    Full means ``maxsize`` frames or, with ``max_bytes``, that many bytes of frames (one frame is always
    taken into an empty queue, however large).  The byte bound is what makes a client that stops reading
    pause its run soon: frames are small, so a count bound alone lets megabytes pile up for it first.
    """

    def __init__(self, maxsize: int, max_bytes: Optional[int] = None) -> None:
        self._items: Deque[Any] = collections.deque()
        self._max = max(1, maxsize)
        self._max_bytes = max_bytes if max_bytes and max_bytes > 0 else None
        self._bytes = 0
        self._cond = threading.Condition(threading.Lock())
        self._reader_waiting = False
        self._writer_waiting = False
        self.writer_waits = 0     # times a producer found the queue full (a paused run counts up here)

    def put(self, item: Any, timeout: float) -> bool:
        """Append ``item``; False if it stayed full for ``timeout`` seconds."""
        return self.put_many((item,), timeout) == 1

    def put_many(self, items: Sequence[Any], timeout: float) -> int:
        """Append as many of ``items`` as there is room for (waiting up to ``timeout`` while full).

        Returns how many were taken, from the front; 0 if the queue stayed full.  The bound holds for
        batches too: the caller offers the rest again.
        """
        with self._cond:
            taken, size = self._room_for(items)
            if not taken:
                self._writer_waiting = True
                self.writer_waits += 1
                self._cond.wait(timeout)
                self._writer_waiting = False
                taken, size = self._room_for(items)
                if not taken:
                    return 0
            self._items.extend(items if taken == len(items) else items[:taken])
            self._bytes += size
            if self._reader_waiting:
                # One wake-up per wait: until the reader runs, the next items need no notify of their own.
                self._reader_waiting = False
                self._cond.notify()
            return taken

    def _room_for(self, items: Sequence[Any]) -> Tuple[int, int]:
        """How many of ``items`` (from the front) fit now, and their bytes (lock held)."""
        room = self._max - len(self._items)
        if room <= 0 or not items:
            return 0, 0
        taken = len(items) if room >= len(items) else room
        limit = self._max_bytes
        if limit is None:
            return taken, 0
        head = items[:taken]
        try:
            size = sum(map(len, head))
        except TypeError:     # a marker object among the frames (a heartbeat or "client gone" note)
            size = sum(map(_size, head))
        if self._bytes + size <= limit:
            return taken, size
        count = size = 0
        for item in head:
            item_size = _size(item)
            if self._bytes + size + item_size > limit and (count or self._items):
                break
            size += item_size
            count += 1
        return count, size

    def qsize(self) -> int:
        return len(self._items)

    @property
    def queued_bytes(self) -> int:
        return self._bytes

    def put_final(self, item: Any) -> None:
        """Append ``item`` even when full (the end marker must never be lost)."""
        with self._cond:
            self._items.append(item)
            self._cond.notify_all()

    def offer_marker(self, item: Any) -> bool:
        """Append a marker (no bytes, past the bounds) only if the lock is free right now; False if not.

        For the one heartbeat timer of the process, which must never wait on one stream's lock: a busy
        lock means the stream's threads are at work on it anyway, and the timer offers it again later.
        """
        if not self._cond.acquire(False):
            return False
        try:
            self._items.append(item)
            if self._reader_waiting:
                self._reader_waiting = False
                self._cond.notify()
            return True
        finally:
            self._cond.release()

    def take(self, timeout: float) -> List[Any]:
        """Everything queued (possibly after waiting up to ``timeout``); [] when nothing came."""
        with self._cond:
            if not self._items:
                self._reader_waiting = True
                self._cond.wait(timeout)
                self._reader_waiting = False
            items = list(self._items)
            self._items.clear()
            self._bytes = 0
            if items and self._writer_waiting:
                self._writer_waiting = False
                self._cond.notify()
            return items

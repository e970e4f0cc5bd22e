"""The bounded frame queue between a run's producer and one SSE response."""
import collections
import threading
from typing import Any, Deque, List, Sequence

END = object()   # sentinel put on a subscriber queue when the run has no more events


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
        return self.put_many((item,), timeout) == 1

    def put_many(self, items: Sequence[Any], timeout: float) -> int:
        """Append as many of ``items`` as there is room for (waiting up to ``timeout`` while full).

        Returns how many were taken, from the front; 0 if the queue stayed full.  The bound holds for
        batches too: the caller offers the rest again.
        """
        with self._cond:
            if len(self._items) >= self._max:
                self._writer_waiting = True
                self._cond.wait(timeout)
                self._writer_waiting = False
            room = self._max - len(self._items)
            if room <= 0:
                return 0
            taken = len(items) if room >= len(items) else room
            self._items.extend(items if taken == len(items) else items[:taken])
            if self._reader_waiting:
                # One wake-up per wait: until the reader runs, the next items need no notify of their own.
                self._reader_waiting = False
                self._cond.notify()
            return taken

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
                self._writer_waiting = False
                self._cond.notify()
            return items

"""waitress's worker pool, handing each request to the thread that went idle last.

waitress wakes its idle workers through a ``threading.Condition``, which wakes the one that has waited
longest.  A server that sees one request after another therefore cycles through every one of its
workers (128 by default): each of them in turn grows its C stack, fills glibc's per-thread cache of freed
blocks (tcache, up to a few hundred KB per thread, never handed back while the thread lives) and keeps
the connection it served last.  After ten thousand tiny runs that was about 6 MB of the process's memory
that no amount of collecting or trimming gives back.  Waking the newest idle worker instead keeps
sequential and lightly concurrent traffic on the few threads it needs; the others stay as cold as they
were at start-up.  The order in which waiting requests are served does not change (the queue stays
first in, first out); only which idle thread takes the next one does.

A worker also drops the connection it served as soon as it is done with it, instead of holding it in a
local variable until its next request, so an idle worker keeps nothing of its last client alive.
"""
import threading
from typing import Any, List

from waitress.task import ThreadedTaskDispatcher


class NewestFirstCondition:
    """The part of ``threading.Condition`` that waitress's dispatcher uses, waking the newest waiter first.

    Waits have no timeout (waitress's workers wait until notified); the caller holds ``lock`` around
    ``wait``, ``notify`` and ``notify_all``, as with a condition.
    """

    def __init__(self, lock: Any) -> None:
        self._lock = lock
        self._waiters: List[Any] = []

    def wait(self) -> None:
        gate = threading.Lock()
        gate.acquire()
        self._waiters.append(gate)
        self._lock.release()
        try:
            gate.acquire()
        finally:
            self._lock.acquire()

    def notify(self, n: int = 1) -> None:
        waiters = self._waiters
        for _ in range(min(n, len(waiters))):
            waiters.pop().release()

    def notify_all(self) -> None:
        self.notify(len(self._waiters))


class NewestFirstDispatcher(ThreadedTaskDispatcher):
    """waitress's ``ThreadedTaskDispatcher`` with newest-first wake-ups and no reference to a served task."""

    def __init__(self) -> None:
        super().__init__()
        self.queue_cv = NewestFirstCondition(self.lock)

    def handler_thread(self, thread_no: int) -> None:
        # waitress's loop, except that the task is let go of before the thread waits for the next one.
        while True:
            with self.lock:
                while not self.queue and self.stop_count == 0:
                    self.active_count -= 1
                    self.queue_cv.wait()
                    self.active_count += 1
                if self.stop_count > 0:
                    self.active_count -= 1
                    self.stop_count -= 1
                    self.threads.discard(thread_no)
                    self.thread_exit_cv.notify()
                    break
                task = self.queue.popleft()
            try:
                task.service()
            except BaseException:
                self.logger.exception("Exception when servicing %r", task)
            finally:
                task = None

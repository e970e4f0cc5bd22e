"""The worker threads that serve waitress's requests, the one that went idle last first.

waitress's own pool wakes the worker that has waited longest, so requests one after another go round every
worker (``--threads``, 128 by default): each grows its C stack and glibc's per-thread cache of freed blocks,
never handed back while the thread lives.  After 10,000 tiny runs that was about 6 MB more of the
process's memory than with the newest idle worker taking the next request, which keeps sequential and
lightly concurrent traffic on the few workers it needs.  The order in which waiting requests are served
does not change (first in, first out); only which idle worker takes the next one does.

The pool is ours, fed through the server's ``add_task`` (``serving.route_task``); what it does with a task
is what waitress's pool does: ``service()`` it, or ``cancel()`` it when the server stops first.  A worker
lets go of the task it served before it waits, so an idle worker keeps nothing of its last client alive.
"""
import collections
import logging
import threading
import time
from typing import Any, Deque, List

log = logging.getLogger("iaccode_agui.serving")


class NewestFirstPool:
    def __init__(self, threads: int, name: str = "waitress") -> None:
        self._lock = threading.Lock()
        self._queue: Deque[Any] = collections.deque()
        self._idle: List[Any] = []          # the gates of idle workers, the newest last
        self._stopping = False
        self.threads = [threading.Thread(target=self._work, name="%s-%d" % (name, number), daemon=True)
                        for number in range(threads)]
        for thread in self.threads:
            thread.start()

    def add_task(self, task: Any) -> None:
        with self._lock:
            self._queue.append(task)
            gate = self._idle.pop() if self._idle else None
        if gate is not None:
            gate.release()

    def _work(self) -> None:
        gate = threading.Lock()
        gate.acquire()
        while True:
            with self._lock:
                if self._stopping:
                    return
                task = self._queue.popleft() if self._queue else None
                if task is None:
                    self._idle.append(gate)
            if task is None:
                gate.acquire()              # released by add_task, or by shutdown
                continue
            try:
                task.service()
            except BaseException:
                log.exception("exception when serving %r", task)
            task = None                     # not held while the worker waits for the next one

    def shutdown(self, timeout: float = 5.0) -> None:
        """Stop the workers (a task being served is finished first) and cancel the tasks still waiting."""
        with self._lock:
            self._stopping = True
            gates, self._idle = self._idle, []
        for gate in gates:
            gate.release()
        deadline = time.monotonic() + timeout
        for thread in self.threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        alive = sum(1 for thread in self.threads if thread.is_alive())
        if alive:
            log.warning("%d worker thread(s) still running", alive)
        with self._lock:
            pending, self._queue = list(self._queue), collections.deque()
        for task in pending:
            task.cancel()

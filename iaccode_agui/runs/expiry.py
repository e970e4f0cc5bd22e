"""Interrupt expiry by timer: one thread, one heap of (deadline, thread id).

Expiry is also enforced on the next access by admission; the timer makes an abandoned interrupt release
its A2A task even if nobody comes back.  Threads are scheduled when an interrupt is committed and when a
thread with pending interrupts is loaded (after a restart nothing is scanned; the next touch schedules).
"""
import heapq
import logging
import threading
import time
from typing import Callable, List, Optional, Set, Tuple

from iaccode_agui.a2a.client import A2AClient, A2AError
from iaccode_agui.state.model import ThreadState, parse_iso_utc
from iaccode_agui.state.store import StateError, ThreadStore

log = logging.getLogger("iaccode_agui.expiry")


def earliest_expiry(state: Optional[ThreadState]) -> Optional[float]:
    if state is None:
        return None
    deadlines = [parse_iso_utc(item.expires_at) for item in state.execution.pending.values() if item.expires_at]
    return min(deadlines) if deadlines else None


class ExpiryScheduler:
    def __init__(self, store: ThreadStore, client: A2AClient, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.client = client
        self.clock = clock
        self._heap: List[Tuple[float, str]] = []
        self._scheduled: Set[Tuple[float, str]] = set()
        self._cond = threading.Condition()
        self._stopped = False
        self._thread: Optional[threading.Thread] = None

    def schedule_state(self, state: Optional[ThreadState]) -> None:
        deadline = earliest_expiry(state)
        if deadline is not None and state is not None:
            self.schedule(state.thread_id, deadline)

    def schedule(self, thread_id: str, deadline: float) -> None:
        with self._cond:
            key = (deadline, thread_id)
            if key in self._scheduled or self._stopped:
                return
            self._scheduled.add(key)
            heapq.heappush(self._heap, key)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="agui-expiry", daemon=True)
                self._thread.start()
            self._cond.notify()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._stopped and (not self._heap or self._heap[0][0] > self.clock()):
                    wait = (self._heap[0][0] - self.clock()) if self._heap else None
                    self._cond.wait(timeout=None if wait is None else max(0.01, min(wait, 60.0)))
                if self._stopped:
                    return
                key = heapq.heappop(self._heap)
                self._scheduled.discard(key)
            try:
                self.expire(key[1])
            except Exception:  # the timer must survive any single thread's failure
                log.exception("expiry of thread %s failed", key[1])

    def expire(self, thread_id: str) -> bool:
        """Clear the thread's expired interrupts (unless a run is using them); True when something expired."""
        now = self.clock()
        task_id = None
        try:
            with self.store.transaction(thread_id) as txn:
                state = txn.state
                if state is None:
                    return False
                if state.active_run is not None:
                    return False      # a resume is being applied; the run end reschedules
                execution = state.execution
                if not execution.expire_interrupts(now):
                    self.schedule_state(state)
                    return False
                state.mark_terminal(execution.execution_id)
                task_id = execution.task_id
                txn.save(state)
        except StateError as exc:
            log.warning("could not expire interrupts of thread %s: %s", thread_id, exc)
            return False
        if task_id:
            try:
                self.client.cancel_task(task_id)
            except A2AError as exc:
                log.info("best-effort cancel of expired task %s failed: %s", task_id, exc)
        return True

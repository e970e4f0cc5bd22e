"""The runs this process holds, and the one lock over them.

A run is live from its admission (or adoption) to its end, holds a capacity slot until its outcome is
durable, and is kept a while after its end for re-attach (``runs.kept``).  Every move between these sets
happens under one lock, so a lookup never misses a run between two of them, and whoever waits for a run to
leave one (drain, a new request on its thread) is woken by the move.
"""
import threading
import time
from typing import Dict, List, Optional, Tuple

from iaccode_agui.runs.finished import KeptRun
from iaccode_agui.runs.kept import KeptRuns
from iaccode_agui.runs.liverun import LiveRun

Key = Tuple[str, str]


class RunRegistry:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._live: Dict[Key, LiveRun] = {}
        self._by_execution: Dict[str, LiveRun] = {}
        self._active: Dict[Key, LiveRun] = {}     # holding a capacity slot
        self._reserved = 0                       # slots taken by admissions under way
        self.kept = KeptRuns(self._lock)          # finished runs, for re-attach
        self.ended_total = 0                      # runs ended so far (the housekeeper releases memory after them)

    # ---- capacity -------------------------------------------------------------------------------
    def active_count(self) -> int:
        """Runs holding a capacity slot: claimed, not yet released (the terminal event frees the slot)."""
        with self._lock:
            return len(self._active) + self._reserved

    def reserve(self, limit: int) -> bool:
        """Take a slot for an admission under way; False when ``limit`` (0: none) is reached."""
        with self._lock:
            if limit and len(self._active) + self._reserved >= limit:
                return False
            self._reserved += 1
            return True

    def unreserve(self) -> None:
        with self._lock:
            self._reserved -= 1

    # ---- moves ----------------------------------------------------------------------------------
    def add(self, run: LiveRun) -> None:
        with self._lock:
            self._live[run.key] = run
            self._active[run.key] = run
            self._by_execution[run.execution_id] = run

    def release(self, run: LiveRun) -> None:
        """The run's outcome is durable: its capacity slot is free."""
        with self._lock:
            if self._active.get(run.key) is run:
                del self._active[run.key]

    def forget(self, run: LiveRun) -> None:
        """The run could not start: it leaves the live set without being kept."""
        with self._changed:
            self._forget_locked(run)
            self._changed.notify_all()

    def end(self, run: LiveRun) -> None:
        """The run ended: it leaves the live set and is kept for re-attach."""
        with self._changed:
            self._forget_locked(run)
            self.ended_total += 1
            if self._live.get(run.key) is None:     # a live continuation is what the run id names now
                self.kept.add_locked(run)
            self._changed.notify_all()

    def _forget_locked(self, run: LiveRun) -> None:
        if self._live.get(run.key) is run:      # else a continuation of the run already took its place
            del self._live[run.key]
        if self._by_execution.get(run.execution_id) is run:
            del self._by_execution[run.execution_id]

    # ---- lookups --------------------------------------------------------------------------------
    def live(self, key: Key) -> Optional[LiveRun]:
        with self._lock:
            return self._live.get(key)

    def find(self, key: Key) -> Optional[KeptRun]:
        """The run, live or ended, while this process still keeps it."""
        with self._lock:
            run = self._live.get(key)
            return run if run is not None else self.kept.find_locked(key)

    def by_execution(self, execution_id: str) -> Optional[LiveRun]:
        with self._lock:
            return self._by_execution.get(execution_id)

    def live_runs(self) -> List[LiveRun]:
        with self._lock:
            return list(self._live.values())

    def active_on(self, thread_id: str) -> List[LiveRun]:
        with self._lock:
            return [run for run in self._active.values() if run.thread_id == thread_id]

    def released(self, runs: List[LiveRun]) -> bool:
        """True once none of ``runs`` holds its capacity slot any more."""
        with self._lock:
            return all(self._active.get(run.key) is not run for run in runs)

    # ---- waits ----------------------------------------------------------------------------------
    def wait_idle(self, timeout: float) -> bool:
        """Wait until no run is live (at most ``timeout`` s); False when some still are."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while self._live:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._changed.wait(remaining)
        return True

    def wait_released(self, run: LiveRun, timeout: float) -> None:
        """Wait (at most ``timeout`` s) for the run to end after giving up its slot."""
        with self._changed:
            self._changed.wait_for(lambda: self._active.get(run.key) is not run, timeout)

"""The finished runs this process keeps for re-attach: how many, for how long, and their swap for summaries.

A client that lost its stream re-attaches (``Last-Event-ID``) and reads the tail it missed, even after the
run ended, so the manager keeps the last finished runs for a while.  The count and age bounds keep that
list from growing with traffic, and the swap for a summary (``runs.finished``) keeps each kept run small
once its log holds every event.

The manager's lock guards the list: a run moves from the live map to this list under it, in one step, so
a lookup never misses a run between the two.  Methods named ``*_locked`` expect the caller to hold it.
"""
import collections
import threading
import time
from typing import Deque, List, Optional, Tuple

from iaccode_agui.runs.finished import KeptRun, summarise

FINISHED_KEEP = 256          # finished runs whose events stay available for re-attach
FINISHED_TTL = 300.0         # seconds


class KeptRuns:
    """The finished runs, oldest first, each a whole run or its summary."""

    def __init__(self, lock: threading.Lock) -> None:
        self._lock = lock
        self._runs: Deque[KeptRun] = collections.deque()

    def add_locked(self, run: KeptRun) -> None:
        """Keep a run that has just ended, then drop what is past the bounds.

        A continuation of an interrupted run (its ids start above 0) has the run's key: it replaces the
        segment kept before it.
        """
        if run.channel.base_seq and any(item.key == run.key for item in self._runs):
            self._runs = collections.deque(item for item in self._runs if item.key != run.key)
        self._runs.append(run)
        self._prune_locked()

    def find_locked(self, key: Tuple[str, str]) -> Optional[KeptRun]:
        return next((item for item in self._runs if item.key == key), None)

    def snapshot(self) -> List[KeptRun]:
        with self._lock:
            return list(self._runs)

    def prune(self) -> None:
        """Forget finished runs past their window (their logs, if kept, still replay them)."""
        with self._lock:
            self._prune_locked()

    def _prune_locked(self) -> None:
        now = time.monotonic()
        while self._runs and (len(self._runs) > FINISHED_KEEP or now - (self._runs[0].ended_at or 0) > FINISHED_TTL):
            self._runs.popleft()

    def summarise(self) -> int:
        """Keep each finished run whose log holds all its events as a small summary; how many were swapped."""
        with self._lock:
            kept = self._runs
            swaps = [(index, summary) for index, summary in enumerate(map(summarise, kept)) if summary is not None]
            for index, summary in swaps:
                kept[index] = summary
        return len(swaps)

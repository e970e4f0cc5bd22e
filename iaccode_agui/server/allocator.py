"""Collecting the reference cycles finished runs leave, once runs end.

Every run leaves reference cycles (its worker, channel, projector and their callbacks point at each
other), so CPython frees a finished run only at its next full collection, which comes once the long-lived
objects have grown by a quarter: hundreds of runs later.  A server that just served a burst of runs would
keep all of them while it sits idle.  So the housekeeping timer collects after runs end: once when no run
is left (the burst is over), and every ``every_runs`` ended runs while the server stays busy, never per
request.
"""
import gc
from typing import Callable

from iaccode_agui.config import DEFAULT_RELEASE_RUNS  # ended runs between two collections while runs keep coming


class MemoryReleaser:
    """Decides when the housekeeping timer collects cycles, and does it.

    A collection is due when runs ended since the last one and none is left, or when ``every_runs`` runs
    ended since the last one.  ``every_runs`` 0 turns them off.
    """

    def __init__(self, every_runs: int = DEFAULT_RELEASE_RUNS, *, collect: Callable[[], int] = gc.collect) -> None:
        self.every_runs = max(0, int(every_runs))
        self._collect = collect
        self._ended = 0
        self.releases = 0

    def note(self, ended: int, live: int) -> bool:
        """Count what one housekeeping tick saw (runs ended, runs still live); collect when due.  True when
        it collected."""
        self._ended += ended
        if self.every_runs <= 0 or not self._ended or (live and self._ended < self.every_runs):
            return False
        self.release()
        return True

    def release(self) -> None:
        self._ended = 0
        self.releases += 1
        self._collect()

"""The manager's background timer: what was kept for re-attach is released on time, not on the next request.

Every tick forgets finished runs past their window, brings replay memory under its byte budget, keeps
each finished run whose log holds all its events as a small summary (``runs.finished``) and, once
runs have ended (see ``iaccode_agui.server.allocator``), collects the cycles they left; every few ticks it also
expires run logs on disk.  Without the
timer, a burst of large runs followed by silence would keep its memory until the next admission.
"""
import logging
import threading
import time
from typing import Any

from iaccode_agui.server.allocator import MemoryReleaser

log = logging.getLogger("iaccode_agui.runs")

TICK_SECONDS = 2.0
LOG_SWEEP_SECONDS = 10.0


class Housekeeper:
    def __init__(self, manager: Any, tick: float = TICK_SECONDS, sweep_every: float = LOG_SWEEP_SECONDS) -> None:
        self._manager = manager
        self._tick = tick
        self._sweep_every = sweep_every
        self._stop = threading.Event()
        self.releaser = MemoryReleaser(manager.settings.memory_release_runs)
        self._ended_seen = 0
        self._last_sweep = 0.0
        self._thread = threading.Thread(target=self._main, name="agui-housekeeping", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def run_once(self, sweep_logs: bool = True) -> None:
        manager = self._manager
        manager.runs.kept.prune()
        finished = [run.channel for run in manager.finished_runs()]
        for channel in finished:
            if channel.log_complete:
                channel.drop_memory()
        live = [run.channel for run in manager.live_runs()]
        manager.budget.settle(finished, live)
        manager.runs.kept.summarise()    # before the collection below, so the graphs it frees are collected
        ended_total = manager.runs.ended_total
        ended, self._ended_seen = ended_total - self._ended_seen, ended_total
        self.releaser.note(ended, len(live))
        if sweep_logs and manager.runlogs.enabled:
            manager.runlogs.sweep()
            manager.takeover.scan()     # a sibling process that died while this one lives

    def _main(self) -> None:
        while not self._stop.wait(self._tick):
            now = time.monotonic()
            sweep = now - self._last_sweep >= self._sweep_every
            if sweep:
                self._last_sweep = now
            try:
                self.run_once(sweep_logs=sweep)
            except Exception:   # housekeeping must never take the server down
                log.exception("housekeeping failed")

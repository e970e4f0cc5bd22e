"""The process-wide byte budget for replay frames kept in memory.

Every run keeps its recent encoded frames in memory so that a client that re-attaches right away is served
without touching the disk.  Without a bound that is a leak in disguise: hundreds of finished runs of large
outputs keep hundreds of megabytes long after anyone could want them.  The budget counts the bytes of all
channels; when it is exceeded the oldest frames go first -- finished runs before live ones -- and the run
log on disk serves any replay that memory no longer can.
"""
import threading
from typing import Any, Iterable

DEFAULT_REPLAY_MEMORY_BYTES = 64 * 1024 * 1024


class ReplayBudget:
    def __init__(self, max_bytes: int = DEFAULT_REPLAY_MEMORY_BYTES) -> None:
        self.max_bytes = max(0, int(max_bytes))
        self._lock = threading.Lock()
        self.used = 0

    def charge(self, size: int) -> None:
        with self._lock:
            self.used += size

    def refund(self, size: int) -> None:
        with self._lock:
            self.used -= size

    @property
    def over(self) -> bool:
        return self.used > self.max_bytes

    def settle(self, finished: Iterable[Any], live: Iterable[Any]) -> int:
        """Bring memory under the budget: finished runs' frames first (oldest first), then live ones.

        ``finished`` is oldest first; each item has ``drop_memory()`` and ``memory_bytes``; live items also
        ``trim_memory(bytes)``.  Returns the bytes released.
        """
        released = 0
        for channel in finished:
            if not self.over:
                return released
            released += channel.drop_memory()
        for channel in sorted(live, key=lambda item: item.memory_bytes, reverse=True):
            if not self.over:
                break
            released += channel.trim_memory(self.used - self.max_bytes)
        return released

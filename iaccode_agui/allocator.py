"""Giving memory back once runs end, and how many malloc arenas the server process may use.

Every run leaves reference cycles (its worker, channel, projector and their callbacks point at each
other), so CPython frees a finished run only at its next full collection, which comes once the long-lived
objects have grown by a quarter: hundreds of runs later.  What is freed then stays with the allocators:
pymalloc returns an arena only once all of it is free, and glibc keeps the freed pages of its arenas
(one per thread that allocated, up to eight per core) until ``malloc_trim``.  A server that just served a
burst of runs would keep all of that while it sits idle.

So the housekeeping timer collects and trims after runs end: once when no run is left (the burst is
over), and every ``every_runs`` ended runs while the server stays busy, never per request.  On a C library
without ``malloc_trim`` and ``mallopt`` (musl, macOS, Windows) only the collection happens; the arena
limit and the trim are skipped and the allocator keeps its own timing.
"""
import ctypes
import ctypes.util
import gc
import logging
import time
from typing import Callable, Optional

log = logging.getLogger("iaccode_agui.allocator")

from iaccode_agui.config import DEFAULT_RELEASE_RUNS  # ended runs between two releases while runs keep coming
DEFAULT_ARENA_MAX = 2           # malloc arenas of the CLI server (glibc's default: eight per core)
LARGE_RELEASE_BYTES = 8 * 1024 * 1024   # replay memory dropped at once that is worth a trim by itself
LARGE_RELEASE_INTERVAL = 5.0
M_ARENA_MAX = -8                # glibc's mallopt parameter number


def _glibc_function(name: str) -> Optional[Callable[..., int]]:
    """A glibc allocator function, or None where the C library has no such function."""
    path = ctypes.util.find_library("c")
    if not path:
        return None
    try:
        return getattr(ctypes.CDLL(path), name)
    except (OSError, AttributeError):
        return None


def malloc_trim() -> Optional[Callable[[int], int]]:
    """glibc's ``malloc_trim``: returns the free pages of every arena to the operating system."""
    trim = _glibc_function("malloc_trim")
    if trim is not None:
        trim.argtypes = [ctypes.c_size_t]
        trim.restype = ctypes.c_int
    return trim


def limit_arenas(count: int) -> bool:
    """Cap glibc's malloc arenas at ``count`` (0 leaves glibc's default); True when the cap was set.

    Each thread that allocates gets an arena of its own until the cap is reached, and each arena keeps
    the pages its thread touched.  With hundreds of run and request threads over a server's life that is
    sixteen arenas on two cores, each holding freed memory; the interpreter lock serialises nearly every
    allocation anyway, so two arenas cost no throughput.  Only the server's own entry point calls this:
    an application that embeds the adapter in its own WSGI server keeps its allocator settings.
    """
    if count <= 0:
        return False
    mallopt = _glibc_function("mallopt")
    if mallopt is None:
        log.debug("no mallopt in this C library: the malloc arena limit is not applied")
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_ARENA_MAX, count))


def freeze_startup_objects() -> int:
    """Keep what the server built before it listens out of every later collection; returns how many.

    A full collection stops every thread for as long as it walks all the objects the collector tracks,
    and with a thousand open streams that walk was the longest pause their heartbeats saw.  The modules,
    classes, schemas and routes made at start-up live as long as the process, so walking them again
    finds nothing: once they sit in the permanent generation a full collection walks only what came
    after them (the runs, whose cycles it still frees).  Garbage of the start-up itself is collected
    first so that none of it is kept.  Like the arena cap, only the server's own entry point calls this.
    """
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


_GLIBC_TRIM = object()


class MemoryReleaser:
    """Decides when the housekeeping timer collects cycles and trims malloc, and does it.

    A release is due when runs ended since the last one and none is left, when ``every_runs`` runs ended
    since the last one, or when a large amount of replay memory was dropped at once (at most once per
    ``interval``).  ``every_runs`` 0 turns releases off.
    """

    def __init__(self, every_runs: int = DEFAULT_RELEASE_RUNS, *, trim: object = _GLIBC_TRIM,
                 collect: Callable[[], int] = gc.collect, threshold: int = LARGE_RELEASE_BYTES,
                 interval: float = LARGE_RELEASE_INTERVAL) -> None:
        self.every_runs = max(0, int(every_runs))
        self._trim = malloc_trim() if trim is _GLIBC_TRIM else trim
        self._collect = collect
        self._threshold = threshold
        self._interval = interval
        self._ended = 0
        self._bytes = 0
        self._last = float("-inf")
        self.releases = 0

    def note(self, released: int, ended: int, live: int) -> bool:
        """Count what one housekeeping tick saw (bytes of replay dropped, runs ended, runs still live);
        release when due.  True when it released."""
        self._bytes += released
        self._ended += ended
        now = time.monotonic()
        if not self._due(live, now):
            return False
        self.release(now)
        return True

    def _due(self, live: int, now: float) -> bool:
        if self.every_runs <= 0:
            return False
        if self._ended and (live == 0 or self._ended >= self.every_runs):
            return True
        return self._bytes >= self._threshold and now - self._last >= self._interval

    def release(self, now: Optional[float] = None) -> None:
        self._ended = self._bytes = 0
        self._last = time.monotonic() if now is None else now
        self.releases += 1
        self._collect()
        if self._trim is None:
            return
        try:
            self._trim(0)   # type: ignore[operator]
        except Exception as exc:   # only an optimisation; never let it fail a sweep
            log.debug("malloc_trim failed: %s", exc)

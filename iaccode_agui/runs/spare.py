"""Run threads taken from a few spare threads that are already waiting, instead of one created per run.

Why: a run's upstream call waits for its thread.  Creating a thread and waiting until it has been scheduled
cost about a millisecond between a run's first byte and its upstream POST, i.e. on the way to its first text.
A thread whose run ended waits (at most ``keep`` of them, each for at most ``idle_seconds``: the settings
``spare_run_threads`` and ``spare_run_thread_idle``) for the next run instead of exiting, so the next run's
hand-over is one lock release.  When no spare is waiting a new thread is created, exactly as before, so a
burst of runs is never queued behind a bounded pool.

A run sees its thread through ``RunThread`` (start once, ``join``, ``is_alive``, ``ident``, ``name``, as
``threading.Thread``); the thread carries the run's name while it drives the run and ``IDLE_NAME`` while
it waits.  A spare keeps nothing of the run it drove (its target is dropped when it returns).
"""
import os
import threading
from typing import Callable, List, Optional

from iaccode_agui.config import DEFAULT_SPARE_RUN_THREAD_IDLE, DEFAULT_SPARE_RUN_THREADS

IDLE_NAME = "agui-spare-thread"


class RunThread:
    """The thread of one run, started at most once, joinable like ``threading.Thread``."""

    def __init__(self, spares: "SpareThreads", target: Callable[[], None], name: str) -> None:
        self.name = name
        self.ident: Optional[int] = None
        self._spares = spares
        self._target: Optional[Callable[[], None]] = target
        self._started = False
        self._done = threading.Event()

    def start(self) -> None:
        """Hand the run to a waiting spare, or to a new thread; RuntimeError when no thread can be had."""
        if self._started:
            raise RuntimeError("threads can only be started once")
        self._started = True
        try:
            self._spares.launch(self)
        except BaseException:
            self._target = None
            self._done.set()         # never ran: not alive, join returns at once
            raise

    def join(self, timeout: Optional[float] = None) -> None:
        if not self._started:
            raise RuntimeError("cannot join thread before it is started")
        self._done.wait(timeout)

    def is_alive(self) -> bool:
        return self._started and not self._done.is_set()

    def run_here(self) -> None:
        """Drive the run in the calling thread (the one ``launch`` gave it)."""
        target, self._target = self._target, None
        try:
            if target is not None:
                target()
        finally:
            self._done.set()


class _Slot:
    """One waiting spare: its gate is held until a run (or None: exit) is put in ``job``."""

    __slots__ = ("gate", "job")

    def __init__(self) -> None:
        self.gate = threading.Lock()
        self.gate.acquire()
        self.job: Optional[RunThread] = None


class SpareThreads:
    """Up to ``keep`` threads waiting for the next run; ``close()`` lets them all exit."""

    def __init__(self, keep: int = DEFAULT_SPARE_RUN_THREADS,
                 idle_seconds: float = DEFAULT_SPARE_RUN_THREAD_IDLE) -> None:
        self._keep = keep
        self._idle_seconds = idle_seconds
        self._lock = threading.Lock()
        self._waiting: List[_Slot] = []
        self._closed = False
        self._pid = os.getpid()

    @property
    def waiting(self) -> int:
        with self._lock:
            return len(self._waiting)

    def launch(self, job: RunThread) -> None:
        with self._lock:
            if self._pid != os.getpid():   # a forked child: the parent's spares do not exist here
                self._pid, self._waiting = os.getpid(), []
            slot = self._waiting.pop() if self._waiting else None
        if slot is not None:
            slot.job = job
            slot.gate.release()
            return
        thread = threading.Thread(target=self._serve, args=(job,), name=job.name, daemon=True)
        thread.start()
        job.ident = thread.ident

    def close(self) -> None:
        with self._lock:
            self._closed = True
            waiting, self._waiting = self._waiting, []
        for slot in waiting:
            slot.gate.release()      # job None: the spare exits

    def _serve(self, job: Optional[RunThread]) -> None:
        me = threading.current_thread()
        while job is not None:
            me.name = job.name
            job.ident = me.ident
            job.run_here()
            job = None
            me.name = IDLE_NAME
            job = self._wait_for_run()

    def _wait_for_run(self) -> Optional[RunThread]:
        slot = _Slot()
        with self._lock:
            if self._closed or len(self._waiting) >= self._keep or self._pid != os.getpid():
                return None
            self._waiting.append(slot)
        if not slot.gate.acquire(timeout=self._idle_seconds):
            with self._lock:
                if slot in self._waiting:   # nobody took it: exit
                    self._waiting.remove(slot)
                    return None
            slot.gate.acquire()              # taken just as the wait ran out: the run is on its way
        return slot.job

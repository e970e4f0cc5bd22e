"""The journal's group commit under many writers: each waiter is woken for its own sync, not for everyone's.

A burst of runs starting at once means hundreds of threads waiting for one ``fdatasync``.  When they all
slept on one condition, every sync and every finished thread-file write woke all of them to fight over the
journal's mutex: the work grew with the square of the burst.  These tests hold the disk still (a gated
``fdatasync``) so the waiters pile up, then count what the journal does.
"""
import os
import signal
import threading
import time
from typing import Callable, List, Tuple

import pytest

from iaccode_agui.state import journal as wal

WRITERS = 40


class CountingLock:
    """A mutex that counts how often it is taken: each wake-up of a sleeping writer takes it once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.taken = 0

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        got = self._lock.acquire(blocking, timeout)
        if got:
            self.taken += 1
        return got

    def release(self) -> None:
        self._lock.release()

    def locked(self) -> bool:
        return self._lock.locked()

    __enter__ = acquire

    def __exit__(self, *exc: object) -> None:
        self.release()


class GatedDisk:
    """``os.fdatasync`` stand-in: the first call waits for ``open_gate``; ``fail`` makes calls raise."""

    def __init__(self, real: Callable[[int], None]) -> None:
        self.real = real
        self.calls = 0
        self.entered = threading.Event()
        self.gate = threading.Event()
        self.fail = False

    def __call__(self, fd: int) -> None:
        self.calls += 1
        if self.calls == 1:
            self.entered.set()
            assert self.gate.wait(30)
        if self.fail:
            raise OSError(5, "injected I/O error")
        self.real(fd)


@pytest.fixture
def journal(tmp_path, monkeypatch):
    monkeypatch.setattr(wal, "CHECKPOINT_SECONDS", 3600.0)   # no checkpoint sync in the middle of a count
    (tmp_path / "threads").mkdir()
    made = wal.Journal(str(tmp_path / "journal"), str(tmp_path / "threads"))
    counting = CountingLock()
    made._lock = counting
    made._cond = threading.Condition(counting)
    yield made, counting
    closer = threading.Thread(target=made.close, daemon=True)   # a stranded writer would hold it for ever
    closer.start()
    closer.join(10)
    assert not closer.is_alive(), "close() still waits for a writer"


def _record(index: int) -> dict:
    return {"k": wal.PUT, "s": "t-%d" % index, "r": 1}


def _start_writers(journal: wal.Journal, count: int, errors: List[BaseException]) -> List[threading.Thread]:
    def write(index: int) -> None:
        try:
            journal.commit(_record(index), b"{}").finish(None)
        except BaseException as exc:   # collected: the test says which writers failed and how
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(i,), daemon=True) for i in range(count)]
    for thread in threads:
        thread.start()
    return threads


def _wait_appended(journal: wal.Journal, count: int) -> None:
    deadline = time.monotonic() + 20
    while journal._appended < count and time.monotonic() < deadline:
        time.sleep(0.005)
    assert journal._appended >= count
    time.sleep(0.1)   # the last writers reach their wait


def _hold_the_disk(journal: wal.Journal, monkeypatch, unfinished: int = 0) -> Tuple[GatedDisk, List[wal.Ticket]]:
    """Gate the disk; before that, open the segments and make ``unfinished`` records whose writers have
    not reported their file yet (a thread file still being replaced)."""
    disk = GatedDisk(os.fdatasync)
    journal.commit(_record(-1), b"{}").finish(None)
    tickets = [journal.commit(_record(1000 + i), b"{}") for i in range(unfinished)]
    monkeypatch.setattr(os, "fdatasync", disk)
    return disk, tickets


def test_waiters_are_not_woken_by_each_others_file_writes(journal, monkeypatch):
    journal, mutex = journal
    disk, unfinished = _hold_the_disk(journal, monkeypatch, WRITERS - 1)
    leader_errors: List[BaseException] = []
    leader = _start_writers(journal, 1, leader_errors)
    assert disk.entered.wait(10)          # the leader is inside the gated sync, the mutex let go of
    errors: List[BaseException] = []
    before = mutex.taken
    writers = _start_writers(journal, WRITERS, errors)
    _wait_appended(journal, 1 + (WRITERS - 1) + 1 + WRITERS)
    for ticket in unfinished:             # other writers' thread files land, one by one, while these wait
        ticket.finish("/nowhere/t")
        time.sleep(0.005)
    disk.gate.set()
    for thread in leader + writers:
        thread.join(20)
    assert not errors and not leader_errors
    assert not any(thread.is_alive() for thread in leader + writers)
    # Each writer takes the mutex to append, once when it goes to sleep and once per wake-up; a few more
    # for the sync it may lead.  One condition for all made this about WRITERS x (WRITERS + 2).
    taken = mutex.taken - before
    assert taken <= 6 * WRITERS + len(unfinished), taken


def test_writers_that_arrive_during_a_sync_share_the_next_one(journal, monkeypatch):
    journal, _ = journal
    disk, _ = _hold_the_disk(journal, monkeypatch)
    errors: List[BaseException] = []
    leader = _start_writers(journal, 1, errors)
    assert disk.entered.wait(10)
    writers = _start_writers(journal, WRITERS, errors)
    _wait_appended(journal, 2 + WRITERS)
    disk.gate.set()
    for thread in leader + writers:
        thread.join(20)
    assert not errors and not any(thread.is_alive() for thread in leader + writers)
    assert disk.calls == 2                # the leader's, then one handed to a waiter, covering them all
    assert journal._synced == journal._appended


def test_a_failed_sync_fails_every_waiting_writer(journal, monkeypatch):
    journal, _ = journal
    disk, _ = _hold_the_disk(journal, monkeypatch)
    disk.fail = True
    errors: List[BaseException] = []
    leader = _start_writers(journal, 1, errors)
    assert disk.entered.wait(10)
    writers = _start_writers(journal, WRITERS, errors)
    _wait_appended(journal, 2 + WRITERS)
    disk.gate.set()
    for thread in leader + writers:
        thread.join(20)
    assert not any(thread.is_alive() for thread in leader + writers), "a writer still waits for a failed sync"
    assert len(errors) == 1 + WRITERS and all(isinstance(e, OSError) for e in errors)
    monkeypatch.setattr(os, "fdatasync", disk.real)
    journal.commit(_record(5000), b"{}").finish(None)   # the next write resets the journal and works


# --- exception paths -------------------------------------------------------------------------------------

class Interrupted(Exception):
    """What a signal handler raises in the test (KeyboardInterrupt itself would stop pytest)."""


def test_a_writer_interrupted_in_its_sleep_strands_nobody(journal, monkeypatch):
    """The interrupted writer's gate must leave the waiters, or the next lead role would go to it and the
    writers behind it would wait for a sync nobody runs (and a close would wait for them for ever)."""
    journal, _ = journal
    disk, _ = _hold_the_disk(journal, monkeypatch)
    errors: List[BaseException] = []
    leader = _start_writers(journal, 1, errors)
    assert disk.entered.wait(10)
    main = threading.get_ident()

    def interrupt() -> None:
        _wait_appended(journal, 3)            # the main thread asleep behind the held sync
        later.extend(_start_writers(journal, 1, errors))
        _wait_appended(journal, 4)
        signal.pthread_kill(main, signal.SIGUSR1)

    def on_signal(signum, frame):
        raise Interrupted()

    later: List[threading.Thread] = []
    previous = signal.signal(signal.SIGUSR1, on_signal)
    try:
        threading.Thread(target=interrupt, daemon=True).start()
        with pytest.raises(Interrupted):
            journal.commit(_record(99), b"{}")
    finally:
        signal.signal(signal.SIGUSR1, previous)
    disk.gate.set()
    for thread in leader + later:
        thread.join(10)
    assert not errors and not any(thread.is_alive() for thread in leader + later), "a writer was stranded"
    closer = threading.Thread(target=journal.close, daemon=True)
    closer.start()
    closer.join(10)
    assert not closer.is_alive(), "close() waits for a writer that will never finish"


def test_an_interrupted_sync_makes_nothing_durable(journal, monkeypatch):
    """A leader whose sync ends by an exception other than an I/O error has synced nothing: the writers
    behind it must wait for a sync that completes, never return as durable on the strength of that one."""
    journal, _ = journal
    covered = [journal._appended]              # the highest record a completed fdatasync covers
    calls = [0]
    gate, entered = threading.Event(), threading.Event()
    real = os.fdatasync

    def disk(fd: int) -> None:
        calls[0] += 1
        upto = journal._appended
        if calls[0] == 1:
            entered.set()
            assert gate.wait(30)
        if calls[0] == 2:
            raise Interrupted()
        real(fd)
        covered[0] = max(covered[0], upto)

    journal.commit(_record(-1), b"{}").finish(None)
    covered[0] = journal._appended
    monkeypatch.setattr(os, "fdatasync", disk)
    returned: List[int] = []

    def write(index: int) -> None:
        try:
            ticket = journal.commit(_record(index), b"{}")
        except Interrupted:
            return
        returned.append(ticket._seq)
        ticket.finish(None)

    threads = [threading.Thread(target=write, args=(0,), daemon=True)]
    threads[0].start()
    assert entered.wait(10)
    threads += [threading.Thread(target=write, args=(i,), daemon=True) for i in range(1, 8)]
    for thread in threads[1:]:
        thread.start()
    _wait_appended(journal, 9)
    gate.set()
    for thread in threads:
        thread.join(10)
    assert not any(thread.is_alive() for thread in threads)
    assert calls[0] >= 3 and len(returned) == 7      # one writer got the interruption, the rest a real sync
    assert max(returned) <= covered[0], (returned, covered[0])


def test_a_close_while_a_writer_waits_at_the_hard_size_leaves_it_a_usable_journal(tmp_path, monkeypatch):
    """A writer held back at the hard segment size while a checkpoint runs may find the journal closed
    when it wakes: it opens a fresh one (as any write after a close does) instead of failing."""
    monkeypatch.setattr(wal, "CHECKPOINT_BYTES", 4096)
    monkeypatch.setattr(wal, "HARD_SEGMENT_BYTES", 8192)
    monkeypatch.setattr(wal, "CHECKPOINT_SECONDS", 3600.0)
    (tmp_path / "threads").mkdir()
    journal = wal.Journal(str(tmp_path / "journal"), str(tmp_path / "threads"))
    held, entered = threading.Event(), threading.Event()
    real_fsync_dir = wal.fsync_dir

    class LateWriter(CountingLock):
        """The writer takes the mutex back late once the checkpoint ends, so the close gets it first."""

        def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
            if threading.current_thread().name == "late-writer" and held.is_set():
                time.sleep(0.05)
            return super().acquire(blocking, timeout)

        __enter__ = acquire

    journal._lock = LateWriter()
    journal._cond = threading.Condition(journal._lock)

    def slow_fsync_dir(directory: str) -> None:
        if threading.current_thread().name == "state-journal" and not held.is_set():
            entered.set()
            assert held.wait(30)
        real_fsync_dir(directory)

    monkeypatch.setattr(wal, "fsync_dir", slow_fsync_dir)
    while not entered.is_set():                # past CHECKPOINT_BYTES: a checkpoint starts and is held
        journal.commit(_record(1), b"x" * 500).finish(None)
        time.sleep(0.001)
    while journal._active.size < wal.HARD_SEGMENT_BYTES:
        journal.commit(_record(2), b"x" * 500).finish(None)
    closer = threading.Thread(target=journal.close, daemon=True)
    closer.start()                             # waits for the checkpoint
    errors: List[BaseException] = []

    def write() -> None:
        try:
            journal.commit(_record(3), b"{}").finish(None)
        except BaseException as exc:
            errors.append(exc)

    writer = [threading.Thread(target=write, name="late-writer", daemon=True)]
    writer[0].start()
    time.sleep(0.2)                            # the writer waits at the hard size
    held.set()
    closer.join(10)
    writer[0].join(10)
    assert not closer.is_alive() and not writer[0].is_alive()
    assert not errors, errors
    journal.close()


def test_a_journal_reopened_while_its_old_checkpoint_thread_ends_gets_a_new_one(tmp_path, monkeypatch):
    """A write right after a close reopens the journal; the old checkpoint thread may not have ended yet.
    The reopened journal must still be checkpointed (else its segment only ever grows)."""
    monkeypatch.setattr(wal, "CHECKPOINT_SECONDS", 0.05)
    original = wal.Journal._checkpoint_loop
    ending = threading.Event()

    def slow_to_end(self: wal.Journal) -> None:
        original(self)
        ending.set()
        time.sleep(0.5)          # the thread has decided to stop but is still alive

    monkeypatch.setattr(wal.Journal, "_checkpoint_loop", slow_to_end)
    (tmp_path / "threads").mkdir()
    journal = wal.Journal(str(tmp_path / "journal"), str(tmp_path / "threads"))
    journal.commit(_record(1), b"{}").finish(None)
    journal.close()
    assert ending.wait(10)
    journal.commit(_record(2), b"{}").finish(None)   # reopens while the old thread is still alive
    deadline = time.monotonic() + 5
    while journal._active is not None and journal._active.first_record_at is not None \
            and time.monotonic() < deadline:
        time.sleep(0.02)
    assert journal._active.first_record_at is None, "the reopened journal is never checkpointed"
    journal.close()

"""Reading a run log back to a client: a bounded replay, or a live follow until the run's end.

``LogReplay`` serves a re-attach on the owning process for ids that memory no longer holds: a fixed range,
read lazily in batches so a long run is never loaded whole.  ``LogFollower`` serves every client that is
not the owner's single subscriber -- a re-attach that lands on another process, a re-attach after the run
left memory, and the read-only observers -- by tailing the file until the close record (or, when the
writer died without one, until the orphan handler has said how the run ends).
"""
import logging
import threading
from typing import Callable, Iterable, Iterator, List, Optional

from iaccode_agui.runlog import encoding as logformat
from iaccode_agui.sse.framequeue import END, FrameQueue
from iaccode_agui.runlog.reader import RunLogReader, WatchMark

log = logging.getLogger("iaccode_agui.runs")

BATCH_BYTES = 64 * 1024


class LogReplay:
    """Frames ``first..last`` (inclusive) of a log, as batches of whole frames, then ``tail``.

    ``tail`` carries the frames after ``last`` that only memory holds (a log that reached its size cap).
    """

    def __init__(self, reader: RunLogReader, first: int, last: int, tail: Iterable[bytes] = ()) -> None:
        self._reader: Optional[RunLogReader] = reader
        self._first = first
        self._last = last
        self._tail = list(tail)

    @classmethod
    def open(cls, path: str, first: int, last: int, tail: Iterable[bytes] = ()) -> Optional["LogReplay"]:
        reader = RunLogReader.open(path)
        return None if reader is None else cls(reader, first, last, tail)

    def __iter__(self) -> Iterator[bytes]:
        batch: List[bytes] = []
        size = 0
        try:
            while self._reader is not None:
                records = self._reader.read_new()
                if not records:
                    break     # everything up to ``last`` was written before the replay was opened
                for record in records:
                    if record.kind != logformat.KIND_EVENT or record.seq < self._first:
                        continue
                    if record.seq > self._last:
                        break
                    batch.append(record.frame)
                    size += len(record.frame)
                    if size >= BATCH_BYTES:
                        yield b"".join(batch)
                        batch, size = [], 0
                if records[-1].seq >= self._last:
                    break
            if batch:
                yield b"".join(batch)
            if self._tail:
                yield b"".join(self._tail)
        finally:
            self.close()

    def close(self) -> None:
        reader, self._reader = self._reader, None
        if reader is not None:
            reader.close()


OrphanHandler = Callable[[int], Optional[List[bytes]]]
REOPEN_ATTEMPTS = 5


class LogFollower:
    """A thread that copies a log's frames after ``after_seq`` onto a client queue, live, until the end.

    ``on_orphan(last_seq)`` is asked what follows when the writer is gone without having written the run's
    terminal event (the owning process died).  It returns None when the log goes on (the run was adopted,
    here or by another process): the follower then reopens the file -- the adopter may have cut a torn
    tail -- and carries on after the last id it sent.  Otherwise it returns the frames that end the stream.

    ``on_incomplete(last_seq)`` gives the frames that end the stream when the log stops before the run's
    terminal event while the run goes on: a close record without one (the log reached its size cap, or its
    writer gave it up after a write error), or a log that went away while its run still has an owner.
    Ending silently there would look like a cut connection, and ``EXECUTION_LOST`` would be false.
    """

    def __init__(self, reader: RunLogReader, after_seq: Optional[int], queue: FrameQueue, *,
                 on_orphan: OrphanHandler, watch: Optional[WatchMark] = None, poll: float = 0.05,
                 on_orphan_fallback: Optional[Callable[[int], List[bytes]]] = None,
                 on_incomplete: Optional[Callable[[int], List[bytes]]] = None) -> None:
        self._reader = reader
        self._after = -1 if after_seq is None else after_seq
        self._queue = queue
        self._on_orphan = on_orphan
        self._on_orphan_fallback = on_orphan_fallback or (lambda last: [])
        self._on_incomplete = on_incomplete or (lambda last: [])
        self._watch = watch
        self._poll = poll
        self._stop = threading.Event()
        self.last_seq = -1
        self.saw_terminal = False
        self._thread = threading.Thread(target=self._main, name="agui-log-follow", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _put(self, item: bytes) -> bool:
        while not self._queue.put(item, timeout=0.25):
            if self._stop.is_set():
                return False
        return True

    def _main(self) -> None:
        try:
            self._follow()
        except Exception:   # a reader failure must still end the client's stream
            log.exception("following run log %s failed", self._reader.path)
        finally:
            self._queue.put_final(END)
            self._reader.close()
            if self._watch is not None:
                self._watch.release()

    def _follow(self) -> None:
        reopened = 0
        while not self._stop.is_set():
            records = self._reader.read_new()
            if not records:
                if self._reader.writer_alive():
                    self._stop.wait(self._poll)
                    continue
                records = self._reader.read_new()   # what the writer wrote just before it let go
                if not records:
                    if self.saw_terminal:
                        return
                    if reopened >= REOPEN_ATTEMPTS:
                        self._put_all(self._on_orphan_fallback(max(self._after, self.last_seq)))
                        return
                    if not self._orphaned():
                        return
                    reopened += 1
                    continue
            if self._copy(records):
                return

    def _copy(self, records: List[logformat.Record]) -> bool:
        """Queue the new frames; True when the stream is over (close record, or the client left)."""
        for record in records:
            if record.kind == logformat.KIND_CLOSE:
                if not self.saw_terminal:
                    self._put_all(self._on_incomplete(max(self._after, self.last_seq)))
                return True
            if record.kind != logformat.KIND_EVENT or record.seq <= max(self._after, self.last_seq):
                continue
            if not self._put(record.frame):
                return True
            self.last_seq = record.seq
            self.saw_terminal = self.saw_terminal or record.terminal
        return False

    def _orphaned(self) -> bool:
        """True when the log goes on and the follower switched to a fresh reader of it."""
        last = max(self._after, self.last_seq)
        frames = self._on_orphan(last)
        if frames is None:
            self._stop.wait(self._poll)
            fresh = RunLogReader.open(self._reader.path)
            if fresh is not None:
                self._reader.close()
                self._reader = fresh
                return True
            frames = self._on_incomplete(last)     # the run has an owner, but its log is gone
        self._put_all(frames)
        return False

    def _put_all(self, frames: List[bytes]) -> None:
        for frame in frames:
            if not self._put(frame):
                return

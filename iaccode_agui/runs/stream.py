"""The SSE response body: a generator that multiplexes run events and heartbeats.

It runs in the WSGI server's thread.  It waits on the subscription queue in short slices so it can also
notice a gone client (waitress's ``waitress.client_disconnected`` with request look-ahead) within about
``poll`` seconds, and writes the ``: heartbeat`` comment after ``heartbeat`` seconds without an event.
Closing it (waitress does when a write fails, or the poll sees the client gone) detaches the client and
tells the run, which decides whether that cancels the upstream task.
"""
import queue
import time
from typing import Any, Callable, Dict, Iterator, Optional

from iaccode_agui.a2a.sse import HEARTBEAT
from iaccode_agui.runs.channel import END, Subscription


class SSEBody:
    """WSGI app iterator; ``close()`` is called by the server in every case (end, error, disconnect)."""

    def __init__(self, sub: Subscription, *, heartbeat: float, poll: float,
                 client_gone: Optional[Callable[[], bool]] = None,
                 on_close: Optional[Callable[[bool], None]] = None,
                 on_heartbeat: Optional[Callable[[], None]] = None) -> None:
        self._sub = sub
        self._heartbeat = heartbeat
        self._poll = max(0.05, poll)
        self._client_gone = client_gone
        self._on_close = on_close
        self._on_heartbeat = on_heartbeat
        self._finished = False
        self._closed = False
        self._gen = self._generate()

    def __iter__(self) -> Iterator[bytes]:
        return self

    def __next__(self) -> bytes:
        return next(self._gen)

    def _generate(self) -> Iterator[bytes]:
        for frame in self._sub.replay:
            yield frame
        self._sub.replay = []
        last_write = time.monotonic()
        get = self._sub.queue.get
        while True:
            remaining = self._heartbeat - (time.monotonic() - last_write)
            if remaining <= 0:
                if self._on_heartbeat is not None:
                    self._on_heartbeat()
                yield HEARTBEAT
                last_write = time.monotonic()
                continue
            try:
                item = get(timeout=min(self._poll, remaining))
            except queue.Empty:
                if self._client_gone is not None and self._client_gone():
                    return
                continue
            if item is END:
                self._finished = True
                return
            # Drain what is already queued into one write: fewer syscalls under bursts, same latency.
            chunks = [item]
            while len(chunks) < 64:
                try:
                    more = self._sub.queue.get_nowait()
                except queue.Empty:
                    break
                if more is END:
                    self._finished = True
                    break
                chunks.append(more)
            yield b"".join(chunks) if len(chunks) > 1 else item
            if self._finished:
                return
            last_write = time.monotonic()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._gen.close()
        finally:
            self._sub.channel.detach(self._sub)
            if self._on_close is not None:
                self._on_close(self._finished)


def waitress_disconnect_probe(environ: Dict[str, Any]) -> Optional[Callable[[], bool]]:
    probe = environ.get("waitress.client_disconnected")
    return probe if callable(probe) else None

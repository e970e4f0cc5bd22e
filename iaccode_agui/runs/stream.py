"""The SSE response body: a generator that multiplexes run events and heartbeats.

It runs in the WSGI server's thread.  It waits on the subscription queue in short slices so it can also
notice a gone client (waitress's ``waitress.client_disconnected`` with request look-ahead) within about
``poll`` seconds, and writes the ``: heartbeat`` comment after ``heartbeat`` seconds without an event.
Closing it (waitress does when a write fails, or the poll sees the client gone) detaches the client and
tells the run, which decides whether that cancels the upstream task.
"""
import functools
import select
import socket
import time
from typing import Any, Callable, Dict, Iterator, Optional, Sequence, Tuple

from iaccode_agui.a2a.sse import HEARTBEAT
from iaccode_agui.runs.channel import END, Subscription


class SSEBody:
    """WSGI app iterator; ``close()`` is called by the server in every case (end, error, disconnect)."""

    def __init__(self, sub: Subscription, *, heartbeat: float, poll: float,
                 client_gone: Optional[Callable[[], bool]] = None,
                 on_close: Optional[Callable[[bool], None]] = None,
                 on_heartbeat: Optional[Callable[[], None]] = None,
                 after_first_write: Optional[Callable[[], None]] = None,
                 headers: Sequence[Tuple[str, str]] = ()) -> None:
        self._sub = sub
        self.headers = list(headers)   # response headers beyond the SSE ones (route-specific)
        self._heartbeat = heartbeat
        self._poll = max(0.05, poll)
        self._client_gone = client_gone
        self._on_close = on_close
        self._on_heartbeat = on_heartbeat
        self._finished = False
        self._closed = False
        self._after_first_write = after_first_write
        self._written = False
        self._gen = self._generate()

    def __iter__(self) -> Iterator[bytes]:
        return self

    def __next__(self) -> bytes:
        # The server asks for the next chunk once it has sent the previous one: the first write is out.
        if self._written and self._after_first_write is not None:
            self._run_after_first_write()
        chunk = next(self._gen)
        self._written = True
        return chunk

    def _run_after_first_write(self) -> None:
        hook, self._after_first_write = self._after_first_write, None
        if hook is not None:
            hook()

    def _generate(self) -> Iterator[bytes]:
        for frame in self._sub.replay:
            yield frame
        self._sub.replay = []
        last_write = time.monotonic()
        take = self._sub.queue.take
        while True:
            remaining = self._heartbeat - (time.monotonic() - last_write)
            if remaining <= 0:
                if self._on_heartbeat is not None:
                    self._on_heartbeat()
                yield HEARTBEAT
                last_write = time.monotonic()
                continue
            items = take(min(self._poll, remaining))
            if not items:
                if self._client_gone is not None and self._client_gone():
                    return
                continue
            if items[-1] is END:
                self._finished = True
                items.pop()
            if items:
                # Everything already queued goes out in one write: fewer syscalls under bursts, same latency.
                yield b"".join(items) if len(items) > 1 else items[0]
                last_write = time.monotonic()
            if self._finished:
                return

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._run_after_first_write()   # a response closed before its second chunk still starts it
            self._gen.close()
        finally:
            self._sub.detach()
            if self._on_close is not None:
                self._on_close(self._finished)


def client_disconnect_probe(environ: Dict[str, Any]) -> Optional[Callable[[], bool]]:
    """How this WSGI server tells that the client went away, when it can tell at all.

    waitress says it itself (with request look-ahead).  gunicorn hands over the client socket; once the
    request body is read, a hang-up shows as the socket turning readable with nothing to read.  Other
    servers notice only when a write fails, i.e. at the next heartbeat.
    """
    probe = environ.get("waitress.client_disconnected")
    if callable(probe):
        return probe
    sock = environ.get("gunicorn.socket")
    if type(sock) is socket.socket:   # not TLS: peeking at an SSL socket is not possible
        return functools.partial(_socket_closed, sock)
    return None


_HANGUP = select.POLLHUP | select.POLLERR | getattr(select, "POLLRDHUP", 0)


def _socket_closed(sock: socket.socket) -> bool:
    try:
        poller = select.poll()
        poller.register(sock.fileno(), select.POLLIN | _HANGUP)
        events = poller.poll(0)
        if not events:
            return False
        if events[0][1] & _HANGUP:
            return True
        return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except (BlockingIOError, InterruptedError):
        return False
    except (OSError, ValueError):
        return True

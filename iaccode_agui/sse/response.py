"""The SSE response body: a generator that multiplexes run events and heartbeats.

It runs in the WSGI server's thread and waits on the subscription queue only.  Timing lives elsewhere:
the process's one heartbeat timer (``heartbeats.shared_timer``) posts a marker on that queue when the
stream has been silent for ``heartbeat`` seconds (the generator then writes the ``: heartbeat`` comment)
or when the client is gone (asked every ``poll`` seconds through waitress's ``waitress.client_disconnected``
with request look-ahead, or a socket check under gunicorn).  So an idle stream's thread sleeps until there
is something to write, instead of waking every poll to find nothing.  Closing the body (waitress does when
a write fails, or the timer saw the client gone) detaches the client and tells the run, which decides
whether that cancels the upstream task.
"""
import functools
import select
import socket
import time
from typing import Any, Callable, Dict, Iterator, Optional, Sequence, Tuple

from iaccode_agui.sse.codec import HEARTBEAT
from iaccode_agui.sse.channel import END, Subscription
from iaccode_agui.sse.heartbeats import BEAT, EARLY, GONE, Entry, HeartbeatTimer, shared_timer

# How long a stream waits on its queue before it makes sure the timer is still running (a guard only:
# the timer posts long before this when the stream needs anything).
GUARD_WAIT = 60.0


class SSEBody:
    """WSGI app iterator; ``close()`` is called by the server in every case (end, error, disconnect)."""

    def __init__(self, sub: Subscription, *, heartbeat: float, poll: float,
                 client_gone: Optional[Callable[[], bool]] = None,
                 on_close: Optional[Callable[[bool], None]] = None,
                 on_heartbeat: Optional[Callable[[], None]] = None,
                 after_first_write: Optional[Callable[[], None]] = None,
                 headers: Sequence[Tuple[str, str]] = (),
                 timer: Optional[HeartbeatTimer] = None) -> None:
        self._sub = sub
        self._timer = timer or shared_timer()
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
        self._entry: Optional[Entry] = None
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
        # Timed from the first chunk on, not from the end of the replay: the ``after_first_write`` hook
        # (the run's thread start) runs between the first chunk and the next, and however long it takes
        # on a loaded server, the timer keeps this stream's heartbeats going meanwhile.
        entry = self._entry = self._timer.register(self._heartbeat, self._poll, self._client_gone, self._post)
        take = self._sub.queue.take
        try:
            for frame in self._sub.replay:
                yield frame
                entry.last = time.monotonic()
            self._sub.replay = []
            while True:
                items = take(max(GUARD_WAIT, 2 * self._heartbeat))
                if not items:
                    self._timer.ensure_running()
                    continue
                frames = [item for item in items if item.__class__ is bytes]
                marks = items if len(frames) < len(items) else ()   # BEAT, GONE, END: rare, looked at only then
                if frames:
                    # Everything already queued goes out in one write: fewer syscalls, same latency.
                    yield b"".join(frames) if len(frames) > 1 else frames[0]
                    entry.last = time.monotonic()
                elif BEAT in marks and time.monotonic() - entry.last >= self._heartbeat - EARLY:
                    if self._on_heartbeat is not None:
                        self._on_heartbeat()
                    yield HEARTBEAT
                    entry.last = time.monotonic()
                if END in marks:
                    self._finished = True
                    return
                if GONE in marks:
                    return
        finally:
            self._timer.cancel(entry)

    def _post(self, item: object) -> bool:
        """The timer's hand-off: a gone client is always told; a heartbeat only to a stream with nothing
        queued (anything queued is written soon anyway), as a marker on the queue, only if the queue's
        lock is free at once (False: the timer offers it again a tick later).  Markers
        go in past the queue's bounds (no bytes, at most one heartbeat waiting), so the timer never waits
        on a full queue."""
        queue = self._sub.queue
        if item is GONE:
            queue.put_final(item)
            return True
        if queue.qsize():
            return True
        return queue.offer_marker(item)

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

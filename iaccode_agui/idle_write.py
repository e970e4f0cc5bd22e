"""Writing a heartbeat to an idle waitress response from the heartbeat timer's thread.

A stream's heartbeat used to wake the stream's own worker thread only to write 15 bytes: with 1,000
streams at a 0.5 s heartbeat that is 2,000 thread wake-ups a second, and each cost about 120 us of CPU
(the wake-up, the interpreter lock, waitress's write path) against about 35 us for the same write made by
a thread that is already running.  So the timer writes the comment itself, back to back for every stream
due in the same tick.

One thread making many sends meets the interpreter lock's convoy: a socket send lets go of the lock, and
while any other thread is busy computing (a run being admitted) getting it back takes up to the switch
interval, 5 ms, so a pass of 50 sends took a quarter of a second (the streams' own threads wait for the
lock side by side instead).  The send of a heartbeat is therefore made without letting go of the lock:
the socket is non-blocking and the call is given ``MSG_DONTWAIT``, so it returns at once whatever the
peer does (a few microseconds for 20 bytes).  Where the C library's ``send`` cannot be reached that way
(``ctypes`` missing, no such symbol), the ordinary socket send is used.
"""
import errno
import socket
import time
from typing import Any, Callable, Dict, Optional, Tuple

from waitress.task import WSGITask

from iaccode_agui.runs.stream import IDLE_WRITE_KEY

try:   # an interpreter built without ctypes still serves: its heartbeats take the ordinary socket send
    import ctypes
except ImportError:   # pragma: no cover - every CPython this project supports on Linux has it
    ctypes = None  # type: ignore[assignment]

_FLAGS = getattr(socket, "MSG_DONTWAIT", 0) | getattr(socket, "MSG_NOSIGNAL", 0)
_RETRY = (errno.EAGAIN, errno.EWOULDBLOCK, errno.EINTR)


def _libc_send() -> Optional[Callable[..., int]]:
    """The C library's ``send`` called with the interpreter lock held (``PyDLL``), or None."""
    if ctypes is None or not _FLAGS & getattr(socket, "MSG_DONTWAIT", 0):
        return None   # without MSG_DONTWAIT a send could block while holding the lock: never
    try:
        send = ctypes.PyDLL(None, use_errno=True).send
    except (OSError, AttributeError, TypeError):
        return None
    send.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int)
    send.restype = ctypes.c_ssize_t
    return send


_SEND = _libc_send()


def send_now(sock: socket.socket, data: bytes, send: Optional[Callable[..., int]] = _SEND) -> int:
    """Send what the socket takes at once: bytes sent (0: its buffer is full), or -1 on an error."""
    if send is None:
        try:
            return sock.send(data, _FLAGS)
        except (BlockingIOError, InterruptedError):
            return 0
        except OSError:
            return -1
    sent = send(sock.fileno(), data, len(data), _FLAGS)
    if sent >= 0:
        return sent
    return 0 if ctypes.get_errno() in _RETRY else -1


class IdleWriteTask(WSGITask):
    """A waitress response that another thread may write a whole chunk to while it is idle.

    ``write_idle`` never waits: it gives up (False, the caller falls back to waking the stream) when the
    output lock is taken, when output is still waiting to be sent (a heartbeat adds nothing then), before
    the response head is out, once the response has ended (its last chunk is written or about to be), and
    for a response that is not chunked or close-delimited.  The chunk is framed as ``write`` frames it and
    is sent under the output lock, so it lands between two of the stream's own chunks, never inside one;
    what the socket does not take at once goes into waitress's output buffer for its loop to send.
    """

    idle_writes_closed = False
    _idle_wire: Optional[Tuple[bytes, Optional[bytes]]] = None   # (chunk, its bytes on the wire or None)

    def get_environment(self) -> Dict[str, Any]:
        environ = super().get_environment()
        environ[IDLE_WRITE_KEY] = self.write_idle
        return environ

    def execute(self) -> None:
        try:
            super().execute()
        finally:
            self._close_idle_writes()

    def finish(self) -> None:
        self._close_idle_writes()
        super().finish()

    def _close_idle_writes(self) -> None:
        with self.channel.outbuf_lock:   # a write_idle under way finishes first: its chunk precedes the end
            self.idle_writes_closed = True

    def write_idle(self, data: bytes) -> bool:
        channel = self.channel
        lock = channel.outbuf_lock
        if not lock.acquire(False):
            return False
        try:
            if self.idle_writes_closed or not self.wrote_header or not channel.connected or channel.total_outbufs_len:
                return False
            wire = self._idle_wire
            if wire is None or wire[0] is not data:
                wire = self._idle_wire = (data, self._framed(data))
            return wire[1] is not None and _send_or_buffer(channel, wire[1])
        except Exception:   # ClientDisconnected, a send error: the stream's own next write finds out
            return False
        finally:
            lock.release()

    def _framed(self, data: bytes) -> Optional[bytes]:
        """``data`` as ``write`` would put it on the wire, or None where it cannot be written from outside.

        Worked out once per response and chunk (the timer writes the same heartbeat every time): the
        framing is fixed once the head is out, and the timer's pass over a thousand streams is shorter
        without a status check and a formatting per write."""
        if not self.has_body or (not self.chunked_response and self.content_length is not None):
            return None
        return b"%X\r\n%s\r\n" % (len(data), data) if self.chunked_response else data


def _send_or_buffer(channel: Any, data: bytes) -> bool:
    """Send ``data`` on an idle channel now; the rest, if any, goes the usual way (lock held)."""
    sent = send_now(channel.socket, data)
    if sent < 0:
        return False
    if sent:
        channel.last_activity = time.time()
        channel.progress = getattr(channel, "progress", 0) + 1   # the stall sweep sees output moving
    if sent < len(data):
        channel.write_soon(data[sent:])   # re-entrant lock; nothing else is waiting, so it never blocks
    return True

"""The many-streams benchmark client: every stream on one selector in one thread.

A thread per stream (1,000 of them in one process, on the same 2 cores as the servers) made the client the
slowest part of the concurrency test: a heartbeat that reached the socket on time was read seconds later,
when its thread got the interpreter lock, and the lateness shown was the client's.  One thread reading
ready sockets with ``epoll`` notes each chunk when the kernel hands it over, costs a few microseconds per
chunk, and reads the direct runtime, the adapter and the peer the same way, so their figures compare.

Only what the servers send is spoken: HTTP/1.1, a ``Content-Length`` request, and a response that is
chunked, length-delimited or ends at close.  The body bytes go through ``bench_client.EventReader``, the
same timing code the single-stream client uses.
"""
import errno
import resource
import selectors
import socket
import threading
import time
from typing import Dict, List, Optional, Sequence, Tuple
from urllib.parse import urlsplit

from .client import EventReader, StreamResult

Request = Tuple[bytes, Dict[str, str]]


class ChunkedDecoder:
    """Incremental ``Transfer-Encoding: chunked`` decoder (no trailers are ever sent here)."""

    def __init__(self) -> None:
        self.raw = b""
        self.left = 0      # data bytes of the current chunk still to come
        self.skip = 0      # CRLF after a chunk's data still to drop
        self.done = False

    def feed(self, data: bytes) -> bytes:
        buf, pos, out = self.raw + data, 0, []
        while not self.done:
            if self.left:
                take = min(self.left, len(buf) - pos)
                if take <= 0:
                    break
                out.append(buf[pos:pos + take])
                pos += take
                self.left -= take
                self.skip = 0 if self.left else 2
            elif self.skip:
                take = min(self.skip, len(buf) - pos)
                if take <= 0:
                    break
                pos += take
                self.skip -= take
            else:
                eol = buf.find(b"\r\n", pos)
                if eol < 0:
                    break
                size = int(buf[pos:eol].split(b";")[0].strip() or b"0", 16)
                pos = eol + 2
                self.left = size
                self.done = size == 0
        self.raw = buf[pos:]
        return b"".join(out)


class Conn:
    """One stream: connect, send the request, read the head, then hand body bytes to its EventReader."""

    def __init__(self, index: int, address: Tuple[str, int], request: bytes, reader: EventReader) -> None:
        self.index = index
        self.address = address
        self.out = request
        self.reader = reader
        self.result = reader.result
        self.head = b""
        self.in_body = False
        self.length: Optional[int] = None    # Content-Length still to read, when the response has one
        self.chunked: Optional[ChunkedDecoder] = None
        self.error_body = b""
        self.last_io = time.monotonic()
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setblocking(False)

    def start(self) -> None:
        self.result.t_sent = time.time_ns()
        code = self.sock.connect_ex(self.address)
        if code not in (0, errno.EINPROGRESS, errno.EAGAIN):
            raise OSError(code, "connect: %s" % errno.errorcode.get(code, code))

    def send(self) -> bool:
        """Send what is left of the request; True once all of it is out."""
        code = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if code:
            raise OSError(code, "connect: %s" % errno.errorcode.get(code, code))
        sent = self.sock.send(self.out)
        self.out = self.out[sent:]
        return not self.out

    def received(self, data: bytes, now: int) -> bool:
        """Take bytes off the wire; True when the response is complete."""
        self.last_io = time.monotonic()
        if not self.in_body:
            self.head += data
            end = self.head.find(b"\r\n\r\n")
            if end < 0:
                return False
            data = self._parse_head(self.head[:end])
            self.head = b""
        if self.chunked is not None:
            data = self.chunked.feed(data)
        elif self.length is not None:
            data = data[:self.length]
            self.length -= len(data)
        if data:
            self._body(data, now)
        return (self.chunked is not None and self.chunked.done) or self.length == 0

    def _parse_head(self, head: bytes) -> bytes:
        lines = head.decode("latin-1").split("\r\n")
        self.result.status = int(lines[0].split()[1])
        fields = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            fields[name.strip().lower()] = value.strip()
        if "chunked" in fields.get("transfer-encoding", "").lower():
            self.chunked = ChunkedDecoder()
        elif "content-length" in fields:
            self.length = int(fields["content-length"])
        self.in_body = True
        return self.head[len(head) + 4:]

    def _body(self, data: bytes, now: int) -> None:
        if self.result.status == 200:
            self.reader.feed(data, now)
        elif len(self.error_body) < 300:
            self.error_body += data

    def finish(self, error: Optional[str] = None) -> None:
        result = self.result
        result.t_end = time.time_ns()
        if error is None and result.status != 200:
            error = "HTTP %d: %s" % (result.status, self.error_body[:300].decode("utf-8", "replace"))
        result.error = result.error or error
        self.sock.close()


class Concurrent:
    """N streams started at once on one selector; ``all_started`` is set once every stream has received its
    first data frame, and ``earliest_data`` is when the first one did."""

    def __init__(self, url: str, requests_: Sequence[Request], *, trace: bool = False,
                 timeout: float = 120.0, finished_marker: bytes = b'"RUN_FINISHED"') -> None:
        parts = urlsplit(url)
        self.address = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.path = parts.path or "/"
        self.requests = list(requests_)
        self.trace = trace
        self.timeout = timeout
        self.finished_marker = finished_marker
        self.all_started = threading.Event()
        self.earliest_data: Optional[int] = None
        self._started = 0
        self.client_cpu = 0.0   # CPU seconds of the one client thread: shows whether the client kept up
        self.results: List[StreamResult] = [StreamResult() for _ in self.requests]
        self._thread = threading.Thread(target=self._loop, name="bench-many", daemon=True)

    def _first_data(self, when: int) -> None:
        self._started += 1   # only the selector thread calls this
        if self.earliest_data is None or when < self.earliest_data:
            self.earliest_data = when
        if self._started == len(self.requests):
            self.all_started.set()

    def _wire(self, body: bytes, headers: Dict[str, str]) -> bytes:
        lines = ["POST %s HTTP/1.1" % self.path, "Host: %s:%d" % self.address, "Accept-Encoding: identity",
                 "Content-Length: %d" % len(body)]
        lines += ["%s: %s" % item for item in headers.items()]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body

    def start(self) -> None:
        _raise_fd_limit(len(self.requests) + 64)
        self._thread.start()

    def _loop(self) -> None:
        started = time.thread_time()
        try:
            self._serve_all()
        finally:
            self.client_cpu = time.thread_time() - started

    def _serve_all(self) -> None:
        selector = selectors.DefaultSelector()
        open_: Dict[int, Conn] = {}
        for index, (body, headers) in enumerate(self.requests):
            reader = EventReader(self.results[index], self.trace, self.finished_marker, self._first_data)
            conn = Conn(index, self.address, self._wire(body, headers), reader)
            try:
                conn.start()
            except OSError as exc:
                conn.finish("%s: %s" % (type(exc).__name__, exc))
                continue
            open_[conn.sock.fileno()] = conn
            selector.register(conn.sock, selectors.EVENT_WRITE, conn)
        # ``timeout`` bounds each stream's silence; this only keeps a wedged bench from running forever
        # (the peer's streams take several times their silence at 1,000 at once).
        deadline = time.monotonic() + 4 * self.timeout + 60
        while open_ and time.monotonic() < deadline:
            for key, _ in selector.select(0.5):
                self._ready(selector, key.data, open_)
            self._expire(selector, open_)
        for conn in list(open_.values()):
            conn.finish("client gave up after %.0f s" % (4 * self.timeout + 60))
        selector.close()

    def _ready(self, selector: selectors.BaseSelector, conn: Conn, open_: Dict[int, Conn]) -> None:
        try:
            if conn.out:
                if conn.send():
                    selector.modify(conn.sock, selectors.EVENT_READ, conn)
                return
            data = conn.sock.recv(65536)
            now = time.time_ns()
            if not data:
                complete = conn.length is None and conn.chunked is None and conn.in_body
                self._drop(selector, conn, open_, None if complete else
                           "IncompleteRead: connection closed before the end of the body")
            elif conn.received(data, now):
                self._drop(selector, conn, open_, None)
        except (BlockingIOError, InterruptedError):
            return
        except (OSError, ValueError) as exc:
            self._drop(selector, conn, open_, "%s: %s" % (type(exc).__name__, exc))

    def _expire(self, selector: selectors.BaseSelector, open_: Dict[int, Conn]) -> None:
        """A stream silent for ``timeout`` seconds (no heartbeat, no event) is an error, not a stall."""
        limit = time.monotonic() - self.timeout
        for conn in [c for c in open_.values() if c.last_io < limit]:
            self._drop(selector, conn, open_, "timeout: nothing for %.0f s" % self.timeout)

    @staticmethod
    def _drop(selector: selectors.BaseSelector, conn: Conn, open_: Dict[int, Conn], error: Optional[str]) -> None:
        selector.unregister(conn.sock)
        del open_[conn.sock.fileno()]
        conn.finish(error)

    def join(self) -> List[StreamResult]:
        self._thread.join(4 * self.timeout + 80)
        for result in self.results:
            if result.t_end == 0 and result.error is None:
                result.error = "client thread did not finish"
        return self.results


def _raise_fd_limit(wanted: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))

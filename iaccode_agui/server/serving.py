"""Running a WSGI app on waitress in a background thread that can be stopped cleanly.

waitress's own ``run()`` loop dies with EBADF when its sockets are closed from another thread, so the
loop here runs in slices and tears the server down from its own thread.  The slice is long (select wakes
up on any socket activity anyway), so an idle server costs one wake-up per slice, not a busy poll.
"""
import contextlib
import functools
import logging
import resource
import socket
import threading
import time
from typing import Any, Dict, Optional

from waitress import wasyncore
from waitress.adjustments import Adjustments
from waitress.channel import HTTPChannel
from waitress.server import BaseWSGIServer, create_server

from iaccode_agui import i18n
from iaccode_agui.config import DEFAULT_STREAM_BUFFER_BYTES
from iaccode_agui.server.dispatch import NewestFirstPool
from iaccode_agui.server.strict_http import accept_many, close_slow_heads, close_stalled, strict_channel

log = logging.getLogger("iaccode_agui.serving")

DEFAULT_CONNECTION_LIMIT = 2048
DEFAULT_HEADER_TIMEOUT = 10.0
# Workers kept for the probes alone: every other worker can be held by a stream for minutes.
CONTROL_THREADS = 2
CONTROL_NAMES = frozenset(["health", "ready", "metrics"])


def is_control_request(channel: Any) -> bool:
    """Whether the request a channel is about to be served for is a GET/HEAD probe (any mount prefix)."""
    requests = getattr(channel, "requests", None)
    if not requests:
        return False
    request = requests[0]
    path = getattr(request, "path", "") or ""
    return getattr(request, "command", "") in ("GET", "HEAD") and path.rstrip("/").rsplit("/", 1)[-1] in CONTROL_NAMES


def route_task(workers: Any, control: Any, channel: Any) -> None:
    """Hand a channel to the probe workers when its next request is a probe, else to the main pool.

    waitress serves one request per task (a keep-alive connection's next request is a new task), so the
    decision is exact per request.  Probes answer from memory and never wait for a slow reader (their few
    bytes fit the output buffer), so two workers answer them however many streams hold the others.
    """
    (control if is_control_request(channel) else workers).add_task(channel)


def waitress_limits(max_request_bytes: int, stream_buffer: int = DEFAULT_STREAM_BUFFER_BYTES) -> Dict[str, Any]:
    """waitress settings that make the app's own limits hold on the wire.

    ``max_request_bytes`` is the largest body any route accepts.  waitress would otherwise buffer a request
    body up to 1 GiB before the app can refuse it.  Its own limit sits just above the largest route limit: a
    declared ``Content-Length`` over it is refused from the head alone (the same JSON 413 as the app's), and
    the slack covers the chunk-size lines of a chunked body, which waitress counts as body bytes.

    ``stream_buffer`` bounds what a client that stops reading is sent before its run waits for it: the
    output buffer (waitress's default is 16 MiB) and the socket's send buffer (on loopback the kernel grows
    it to megabytes) each hold about that much, as the run's own queue does.  Past them the response's
    worker waits, the queue fills and the run stops pulling from the runtime, so a client that does not
    read costs no CPU until it reads again or is dropped by the stall timeout.
    """
    slack = max(64 * 1024, max_request_bytes // 16)
    return {"max_request_body_size": max_request_bytes + slack, "outbuf_high_watermark": stream_buffer,
            "send_buffer": stream_buffer}


def ensure_fd_limit(wanted: int) -> int:
    """Raise the soft open-file limit towards ``wanted`` (never above the hard limit); return the result.

    Every connection is a descriptor; at the usual soft limit of 1,024 a flood of idle sockets would make
    ``accept`` fail long before the connection limit is reached.
    """
    with contextlib.suppress(ValueError, OSError):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        if soft != resource.RLIM_INFINITY and soft < target:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        return resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return wanted


class ServerThread:
    """waitress on a background thread, hardened against slow, idle and ambiguous clients.

    ``connection_limit`` (default 2,048, at least threads + 256) bounds open sockets; the descriptor limit
    is raised to fit it.  A connection must finish its request head within ``header_timeout`` seconds of
    starting it (a new connection: of connecting), so slowloris clients and sockets that never send
    anything are closed long before waitress's general inactivity timeout; between requests of a
    keep-alive connection that general ``channel_timeout`` applies.  A response whose output has not moved
    for ``stall_timeout`` seconds (default two heartbeat intervals) is closed, which frees its worker.
    ``/health``, ``/ready`` and ``/metrics`` are served by two workers of their own, so a probe is
    answered even while streams hold every other worker and the task queue is long.
    """

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0, *, threads: int = 32,
                 connection_limit: Optional[int] = None, slice_seconds: float = 0.5,
                 header_timeout: float = DEFAULT_HEADER_TIMEOUT, stall_timeout: Optional[float] = None,
                 send_buffer: Optional[int] = None, **adjustments: Any) -> None:
        adjustments.setdefault("channel_request_lookahead", 1)
        # poll(), not select(): select() cannot watch descriptors above 1024, i.e. ~500 open streams.
        adjustments.setdefault("asyncore_use_poll", True)
        adjustments.setdefault("ident", "iaccode-agui")
        adjustments.setdefault("cleanup_interval", max(1, min(5, int(header_timeout / 2))))
        limit = connection_limit or max(threads + 256, DEFAULT_CONNECTION_LIMIT)
        # Room for the listening socket, the upstream pool of every worker, state files and logs.
        available = ensure_fd_limit(limit + 2 * threads + 256)
        if available < limit + 2 * threads + 64:
            limit = max(threads + 16, available - 2 * threads - 64)
            log.warning("open-file limit %d: connection limit lowered to %d", available, limit)
        self.connection_limit = limit
        # The loop runs over a map of our own, so that it can be run in slices and closed from its thread.
        self.socket_map: Dict[int, Any] = {}
        self.server = create_server(app, map=self.socket_map, host=host, port=port, threads=1,
                                    connection_limit=limit, **adjustments)
        # Every request goes to a pool of ours (``route_task``): waitress's own serves nothing.
        self.server.task_dispatcher.set_thread_count(0)  # type: ignore[attr-defined]
        self.workers = NewestFirstPool(threads)
        if send_buffer:
            # Set on every accepted connection.  The kernel doubles the value it is given (its own
            # bookkeeping), so half of it lands on about ``send_buffer``.  The option is a C int (and the
            # kernel caps it far lower anyway): a larger value raised on every accept, which closed the
            # listening socket.
            option = (socket.SOL_SOCKET, socket.SO_SNDBUF, min(max(4096, send_buffer // 2), 2 ** 31 - 1))
            self.server.adj.socket_options = list(Adjustments.socket_options) + [option]  # type: ignore[attr-defined]
        self.control = NewestFirstPool(CONTROL_THREADS, "waitress-control")
        settings = getattr(app, "settings", None)
        # About two heartbeats: a reading client receives at least one write in that time.
        self.stall_timeout = stall_timeout or 2 * float(getattr(settings, "heartbeat_interval", 15.0))
        channel = strict_channel(getattr(settings, "auth_token", None),
                                 getattr(settings, "default_language", i18n.SOURCE_LANGUAGE))
        for dispatcher in list(self.socket_map.values()):
            if isinstance(dispatcher, BaseWSGIServer):
                dispatcher.channel_class = channel  # type: ignore[misc]
                dispatcher.maintenance = functools.partial(  # type: ignore[method-assign]
                    close_slow_heads, dispatcher, dispatcher.maintenance, header_timeout)
                dispatcher.handle_accept = functools.partial(  # type: ignore[method-assign]
                    accept_many, dispatcher, dispatcher.handle_accept, self.socket_map)
                dispatcher.add_task = functools.partial(  # type: ignore[method-assign]
                    route_task, self.workers, self.control)
        self.host = str(self.server.effective_host)  # type: ignore[attr-defined]
        self.port = int(self.server.effective_port)  # type: ignore[attr-defined]
        shown = "[%s]" % self.host if ":" in self.host else self.host
        self.url = "http://%s:%d/" % (shown, self.port)
        self._slice = slice_seconds
        self.stalled_closed = 0
        self._stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name="waitress-loop", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        server_map = self.socket_map
        next_sweep = 0.0
        try:
            while not self._stopping.is_set():
                wasyncore.loop(timeout=self._slice, map=server_map, count=1, use_poll=True)
                now = time.monotonic()
                if now >= next_sweep:      # between passes of the loop, never inside one
                    next_sweep = now + min(1.0, self.stall_timeout / 4)
                    for dispatcher in list(server_map.values()):
                        if isinstance(dispatcher, BaseWSGIServer):
                            self._log_stalled(close_stalled(dispatcher, self.stall_timeout, time.time()))
        finally:
            # Worker threads first: one still finishing a response pulls the trigger pipe, which the
            # server's close() closes (EBADF, or a byte into a descriptor reused meanwhile).
            try:
                self.workers.shutdown(timeout=2)
                self.control.shutdown(timeout=2)
            finally:
                _close_connections(server_map)   # while the wake-up pipe is open, though none pulls it then
                self.server.close()
                wasyncore.close_all(server_map)

    def _log_stalled(self, closed: int) -> None:
        """Say when the stall sweep cut responses: a client that reads too slowly loses its stream here."""
        if closed:
            self.stalled_closed += closed
            log.warning("closed %d response(s) whose output had not moved for %.1f s (--stall-timeout); "
                        "%d so far", closed, self.stall_timeout, self.stalled_closed)

    @property
    def alive(self) -> bool:
        return self.thread.is_alive()

    def stop(self, timeout: float = 5.0) -> None:
        self._stopping.set()
        self.thread.join(timeout)


def _close_connections(server_map: Dict[int, Any]) -> None:
    """Close every client connection as waitress does (``handle_close``) before ``close_all`` closes the rest.

    ``close_all`` closes a socket without the connection's output lock and without waking a worker that
    waits on it for a client that stopped reading: that worker, and its response, would stay blocked for
    as long as the process lives.  ``handle_close`` takes the lock (a write under way finishes first) and
    wakes the waiting worker, whose write then fails and ends its response.
    """
    for dispatcher in list(server_map.values()):
        if isinstance(dispatcher, HTTPChannel):
            try:
                dispatcher.handle_close()
            except Exception:   # shutting down: a connection that fails to close is closed below anyway
                log.debug("closing a connection at shutdown failed", exc_info=True)

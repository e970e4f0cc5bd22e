"""``DemoServer``: the scripted runtime on a loopback waitress server in a daemon thread.

Every open stream holds one waitress worker thread, so the pool is sized for many concurrent streams, and
``channel_request_lookahead`` is on so a stream notices a vanished client while it is silent.
"""
import contextlib
import logging
import threading
from typing import Any, Dict, Optional

from waitress import wasyncore
from waitress.channel import HTTPChannel
from waitress.server import create_server

from iaccode_agui.demo.runtime import ScriptedRuntime

DEFAULT_THREADS = 160
# The runtime's own HTTP log.  Its peer is the adapter, which closes an upstream stream on purpose whenever
# its client goes away; under waitress's shared "waitress" logger that showed up as a second "Client
# disconnected" line next to the adapter's own.
HTTP_LOGGER = "iaccode_agui.demo.http"
log = logging.getLogger("iaccode_agui.demo")


class _RuntimeChannel(HTTPChannel):
    logger = logging.getLogger(HTTP_LOGGER)


class DemoServer:
    """A running demo runtime; build it with ``DemoServer.start``."""

    def __init__(self, runtime: ScriptedRuntime, server: Any, thread: threading.Thread, url: str,
                 socket_map: Dict[int, Any]) -> None:
        self.runtime = runtime
        self.url = url
        self._server = server
        self._socket_map = socket_map
        self._thread = thread
        self._stopped = False
        self._stop_lock = threading.Lock()

    @property
    def token(self) -> Optional[str]:
        return self.runtime.token

    @classmethod
    def start(cls, host: str = "127.0.0.1", port: int = 0, token: Optional[str] = None,
              threads: int = DEFAULT_THREADS, **runtime_kwargs: Any) -> "DemoServer":
        """Bind, start serving in a daemon thread and return at once (the socket already listens)."""
        runtime = ScriptedRuntime(token, **runtime_kwargs)
        # Each open stream holds a thread and a connection: size the connection limit with the threads.  A
        # small output buffer per stream (waitress's default is 16 MiB) makes a reader that stops reading
        # stop its producer soon, as a runtime streaming straight to its socket would.
        socket_map: Dict[int, Any] = {}
        server = create_server(runtime, map=socket_map, host=host, port=port, threads=threads,
                               channel_request_lookahead=8,
                               connection_limit=threads + 100, asyncore_use_poll=True, ident="iac-code-demo",
                               outbuf_high_watermark=256 * 1024)
        server.channel_class = _RuntimeChannel
        bound_port = server.effective_port
        url_host = "[%s]" % host if ":" in host else host
        thread = threading.Thread(target=server.run, name="demo-a2a-server", daemon=True)
        thread.start()
        return cls(runtime, server, thread, "http://%s:%s/" % (url_host, bound_port), socket_map)

    def stop(self, timeout: float = 5.0) -> None:
        """Stop producers and streams, then the worker threads, then the sockets and the loop.

        The order matters: a worker thread still serving a stream when the sockets close writes to its
        channel and pulls the loop's trigger pipe, both closed by then (EBADF), or already reused for some
        other file.  The loop keeps flushing while the threads finish their last writes.
        """
        with self._stop_lock:
            if self._stopped:
                return
            self._stopped = True
        self.runtime.shutdown(timeout)
        server = self._server
        server.task_dispatcher.shutdown(timeout=timeout)
        # Closing sockets must happen on the loop thread; the trigger runs the thunk there.
        try:
            server.trigger.pull_trigger(lambda: wasyncore.close_all(self._socket_map))
        except OSError as exc:
            # The wake-up pipe is gone already (something else in this process closed its descriptor):
            # empty the map so the loop ends at its next poll, then close what it served from here.
            log.warning("demo runtime: its loop's wake-up pipe is already closed (%s); stopping by its map", exc)
            dispatchers = list(self._socket_map.values())
            self._socket_map.clear()
            self._thread.join(timeout)
            for dispatcher in dispatchers:
                with contextlib.suppress(OSError):
                    dispatcher.close()
        self._thread.join(timeout)

    def __enter__(self) -> "DemoServer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

"""Running a WSGI app on waitress in a background thread that can be stopped cleanly.

waitress's own ``run()`` loop dies with EBADF when its sockets are closed from another thread, so the
loop here runs in slices and tears the server down from its own thread.  The slice is long (select wakes
up on any socket activity anyway), so an idle server costs one wake-up per slice, not a busy poll.
"""
import threading
from typing import Any, Dict, Optional

from waitress import wasyncore
from waitress.server import create_server


def waitress_limits(max_request_bytes: int, largest_route_bytes: int = 0) -> Dict[str, int]:
    """waitress settings that make the app's own limits hold on the wire.

    waitress would otherwise buffer a request body up to 1 GiB before the app can refuse it, and up to
    16 MiB of output per slow client before the app's bounded queue applies backpressure.  Up to four times
    the body limit the app answers its JSON 413 (waitress spools such bodies to a temporary file, not to
    memory); beyond that waitress refuses the request itself, with its own plain-text 413.  waitress cannot
    tell routes apart, so a route with a larger limit of its own (``largest_route_bytes``, the AgentCore
    route's) raises the wire limit to exactly that, not four times it.
    """
    wire = max(4 * max_request_bytes, largest_route_bytes) + 64 * 1024
    return {"max_request_body_size": wire, "outbuf_high_watermark": 1024 * 1024}


class ServerThread:
    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0, *, threads: int = 32,
                 connection_limit: Optional[int] = None, slice_seconds: float = 0.5, **adjustments: Any) -> None:
        adjustments.setdefault("channel_request_lookahead", 1)
        # poll(), not select(): select() cannot watch descriptors above 1024, i.e. ~500 open streams.
        adjustments.setdefault("asyncore_use_poll", True)
        adjustments.setdefault("ident", "iaccode-agui")
        self.server = create_server(app, host=host, port=port, threads=threads,
                                    connection_limit=connection_limit or threads + 64, **adjustments)
        self.host = str(self.server.effective_host)  # type: ignore[attr-defined]
        self.port = int(self.server.effective_port)  # type: ignore[attr-defined]
        shown = "[%s]" % self.host if ":" in self.host else self.host
        self.url = "http://%s:%d/" % (shown, self.port)
        self._slice = slice_seconds
        self._stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name="waitress-loop", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        server_map = self.server._map  # type: ignore[attr-defined]
        try:
            while not self._stopping.is_set():
                wasyncore.loop(timeout=self._slice, map=server_map, count=1, use_poll=True)
        finally:
            self.server.close()
            try:
                self.server.task_dispatcher.shutdown(timeout=2)  # type: ignore[attr-defined]
            finally:
                wasyncore.close_all(server_map)

    @property
    def alive(self) -> bool:
        return self.thread.is_alive()

    def stop(self, timeout: float = 5.0) -> None:
        self._stopping.set()
        self.thread.join(timeout)

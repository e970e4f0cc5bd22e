"""Run a WSGI app on a real waitress server for tests that need actual sockets (chunking, cuts, timeouts)."""
import contextlib
import logging
import threading
from typing import Any, Iterator

from waitress import wasyncore
from waitress.server import create_server


@contextlib.contextmanager
def serve_wsgi(app: Any, threads: int = 16, quiet: bool = True) -> Iterator[str]:
    """Serve ``app`` on 127.0.0.1 (free port) in a daemon thread; yields the base URL ending in ``/``.

    The event loop runs in short slices and the server tears itself down from its own thread: closing
    its sockets from the test thread while ``select`` watches them makes the loop die with EBADF.
    ``quiet`` mutes waitress' logger, because some scenarios make the app raise on purpose to cut a
    connection and those tracebacks are only noise.
    """
    logger = logging.getLogger("waitress")
    previous = logger.level
    if quiet:
        logger.setLevel(logging.CRITICAL)
    server = create_server(app, host="127.0.0.1", port=0, threads=threads, channel_timeout=60)
    stopping = threading.Event()

    def run() -> None:
        try:
            while not stopping.is_set():
                wasyncore.loop(timeout=0.05, map=server._map, count=1)
        finally:
            server.close()
            server.task_dispatcher.shutdown(timeout=2)
            wasyncore.close_all(server._map)

    thread = threading.Thread(target=run, name="fake-upstream", daemon=True)
    thread.start()
    try:
        yield "http://127.0.0.1:%d/" % int(server.effective_port)
    finally:
        stopping.set()
        thread.join(5)
        logger.setLevel(previous)

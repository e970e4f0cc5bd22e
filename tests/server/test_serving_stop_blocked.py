"""Stopping the server while a response's worker is blocked on a client that stopped reading.

waitress's worker waits (without a timeout) on the connection's output lock until the event loop has sent
enough of what the client does not read, and only a close made the way waitress closes (``handle_close``,
which wakes it) lets it go.  The stop must close connections that way, or that worker and its response
stay blocked for as long as the process lives.
"""
import socket
import threading

import pytest

from iaccode_agui.server.serving import ServerThread
from tests.harness import wait_for


@pytest.mark.slow
def test_stop_lets_a_worker_blocked_on_a_non_reading_client_end():
    workers = []
    closed = threading.Event()

    def app(environ, start_response):
        workers.append(threading.current_thread())
        start_response("200 OK", [("Content-Type", "text/event-stream")])

        def body():
            try:
                while True:
                    yield b"data: " + b"x" * 16384 + b"\n\n"
            finally:
                closed.set()
        return body()

    server = ServerThread(app, threads=4, slice_seconds=0.05, outbuf_high_watermark=65536, send_buffer=8192)
    client = socket.create_connection((server.host, server.port), timeout=10)
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    try:
        client.sendall(b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")   # and never read
        assert wait_for(lambda: workers, 10)
        channel = next(iter(server.server.active_channels.values()))
        assert wait_for(lambda: channel.total_outbufs_len > 65536, 10)   # the worker waits on the lock now
        server.stop(timeout=15)
        assert wait_for(lambda: not workers[0].is_alive(), 10), "the blocked worker never ended"
        assert closed.is_set()
    finally:
        client.close()
        server.stop()

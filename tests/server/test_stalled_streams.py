"""Clients that post a run and never read: their streams are dropped after the stall timeout so the
workers come back, open streams count against the run cap (429, not a hang), and ``/health`` answers."""
import json
import socket
import time

import pytest
import requests

from iaccode_agui.server.serving import ServerThread, waitress_limits
from tests.harness import Adapter, wait_for


def _adapter(demo, tmp_path, workspace, threads: int, cap: int, stall: float) -> Adapter:
    adapter = Adapter(demo.url, demo.token, str(tmp_path / "state"), workspace, max_active_runs=cap,
                      heartbeat_interval=0.5, queue_max_events=64)
    adapter.server.stop()
    options = dict(waitress_limits(adapter.settings.max_request_bytes), outbuf_high_watermark=65536)
    adapter.server = ServerThread(adapter.app, threads=threads, slice_seconds=0.05, stall_timeout=stall, **options)
    adapter.url = adapter.server.url
    return adapter


def _silent_client(adapter: Adapter, thread: str) -> socket.socket:
    """POST a firehose run with a tiny receive buffer and never read from it."""
    body = json.dumps(adapter.body("firehose 200000", thread=thread)).encode()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", adapter.server.port))
    sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                 % (len(body), body))
    return sock


def _health_ok(adapter: Adapter) -> bool:
    try:
        return requests.get(adapter.url + "health", timeout=3).status_code == 200
    except requests.RequestException:
        return False


@pytest.mark.slow
def test_non_reading_clients_are_dropped_and_their_workers_freed(demo, tmp_path, workspace):
    adapter = _adapter(demo, tmp_path, workspace, threads=4, cap=4, stall=1.0)
    silent = [_silent_client(adapter, "silent-%d" % index) for index in range(4)]
    try:
        assert wait_for(lambda: adapter.app.open_streams == 4, 20)
        # every worker is now busy writing to a client that does not read; within about the stall
        # timeout the server drops those streams and answers again
        assert wait_for(lambda: adapter.app.open_streams == 0, 40), adapter.app.open_streams
        assert _health_ok(adapter)
        assert wait_for(lambda: adapter.app.manager.active_count() == 0, 10)
        events = adapter.run(adapter.body("hello", thread="after"))
        assert events[-1]["type"] == "RUN_FINISHED"
    finally:
        for sock in silent:
            sock.close()
        adapter.stop()


def test_open_streams_count_against_the_run_cap(demo, tmp_path, workspace):
    adapter = _adapter(demo, tmp_path, workspace, threads=8, cap=2, stall=30.0)
    silent = [_silent_client(adapter, "held-%d" % index) for index in range(2)]
    try:
        assert wait_for(lambda: adapter.app.open_streams == 2, 10)
        started = time.monotonic()
        response = adapter.post(adapter.body("hello", thread="third"), timeout=10)
        assert response.status_code == 429 and response.json()["error"]["code"] == "RUNTIME_CAPACITY_EXCEEDED"
        assert time.monotonic() - started < 5
        assert _health_ok(adapter)
    finally:
        for sock in silent:
            sock.close()
        adapter.stop()

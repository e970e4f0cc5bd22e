"""Connection floods against a real waitress server: idle sockets and slowloris heads must not take
``/health`` or a new run down, and slow heads are closed after the header timeout.  CI runs a short
variant; ``-m soak`` runs the 1,000-connection one (``tools/hostile_load.py`` prints the figures)."""
import re
import socket
import time

import pytest

from iaccode_agui.server.serving import ServerThread, waitress_limits
from tests.harness import Adapter
from tests.tools_loader import load_tool

load = load_tool("hostile_load")
Flood, health_latencies, run_seconds = load.Flood, load.health_latencies, load.run_seconds


@pytest.fixture
def small_server(demo, tmp_path, workspace):
    made = []

    def make(**server_options):
        adapter = Adapter(demo.url, demo.token, str(tmp_path / "state"), workspace)
        adapter.server.stop()
        adapter.server = ServerThread(adapter.app, threads=8, slice_seconds=0.05,
                                      **dict(waitress_limits(adapter.settings.max_request_bytes), **server_options))
        adapter.url = adapter.server.url
        made.append(adapter)
        return adapter

    yield make
    for adapter in made:
        adapter.stop()


def _flood_and_probe(adapter, idle: int, slow: int):
    flood = Flood(adapter.server.port, idle, slow, interval=0.5)
    try:
        time.sleep(0.5)
        health = health_latencies(adapter.url, 10, timeout=5.0)
        run = run_seconds(adapter.url, adapter.workspace, timeout=15.0)
    finally:
        flood.close()
    return flood, health, run


@pytest.mark.slow
def test_idle_and_slow_sockets_do_not_block_health_or_runs(small_server):
    adapter = small_server()
    flood, health, run = _flood_and_probe(adapter, idle=300, slow=60)
    assert flood.opened == 360
    assert None not in health, health               # every /health answered (each within 5 s)
    assert run is not None, "no run completed while the flood was open"


def _health_on(sock: socket.socket) -> bytes:
    """One GET /health on an open connection, read to the end of its Content-Length body."""
    sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    raw = b""
    while b"\r\n\r\n" not in raw:
        raw += sock.recv(4096)
    head, _, body = raw.partition(b"\r\n\r\n")
    length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))
    while len(body) < length:
        body += sock.recv(4096)
    return head + b"\r\n\r\n" + body


@pytest.mark.slow
def test_slow_heads_and_silent_sockets_are_closed_after_the_header_timeout(small_server):
    adapter = small_server(header_timeout=1.0)
    silent = socket.create_connection(("127.0.0.1", adapter.server.port), timeout=10)
    slow = socket.create_connection(("127.0.0.1", adapter.server.port), timeout=10)
    try:
        started = time.monotonic()
        closed = {}
        while len(closed) < 2 and time.monotonic() - started < 8:
            for name, sock in (("silent", silent), ("slow", slow)):
                if name in closed:
                    continue
                if name == "slow":
                    try:
                        sock.send(b"P")
                    except OSError:
                        closed[name] = time.monotonic() - started
                        continue
                sock.settimeout(0.2)
                try:
                    if sock.recv(100) == b"":
                        closed[name] = time.monotonic() - started
                except socket.timeout:
                    pass
                except OSError:
                    closed[name] = time.monotonic() - started
        assert set(closed) == {"silent", "slow"}, closed
        # a keep-alive connection that completed a request is not held to the head timeout
        kept = socket.create_connection(("127.0.0.1", adapter.server.port), timeout=10)
        assert b"200 OK" in _health_on(kept)
        time.sleep(2.5)
        assert b"200 OK" in _health_on(kept)
        kept.close()
    finally:
        silent.close()
        slow.close()


def test_connection_limit_default_and_fd_limit(small_server):
    adapter = small_server()
    assert adapter.server.connection_limit >= 2048
    import resource
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert soft == resource.RLIM_INFINITY or soft >= adapter.server.connection_limit


@pytest.mark.soak
def test_a_thousand_idle_and_two_hundred_slow_sockets(small_server):
    adapter = small_server(header_timeout=5.0)
    flood, health, run = _flood_and_probe(adapter, idle=1000, slow=200)
    assert flood.opened == 1200 and None not in health and run is not None

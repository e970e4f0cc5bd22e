"""Probes have workers of their own: with every worker held by a stream nobody reads and more runs
queued behind them, ``/health``, ``/ready`` and ``/metrics`` still answer at once (not after the stall
timeout frees a worker)."""
import time

import requests

from iaccode_agui.server.serving import ServerThread, is_control_request, waitress_limits
from tests.harness import Adapter, wait_for
from tests.server.test_stalled_streams import _silent_client


class _Request:
    def __init__(self, command, path):
        self.command, self.path = command, path


class _Channel:
    def __init__(self, *requests):
        self.requests = list(requests)


def test_probe_requests_are_recognised_under_any_prefix():
    assert is_control_request(_Channel(_Request("GET", "/health")))
    assert is_control_request(_Channel(_Request("HEAD", "/agui/ready/")))
    assert is_control_request(_Channel(_Request("GET", "/metrics"), _Request("POST", "/")))
    assert not is_control_request(_Channel(_Request("POST", "/health")))
    assert not is_control_request(_Channel(_Request("GET", "/healthy")))
    assert not is_control_request(_Channel(_Request("POST", "/"), _Request("GET", "/health")))
    assert not is_control_request(_Channel())


def test_probes_answer_while_streams_hold_every_worker(demo, tmp_path, workspace):
    adapter = Adapter(demo.url, demo.token, str(tmp_path / "state"), workspace, max_active_runs=8,
                      heartbeat_interval=0.5, queue_max_events=64)
    adapter.server.stop()
    options = dict(waitress_limits(adapter.settings.max_request_bytes), outbuf_high_watermark=65536)
    adapter.server = ServerThread(adapter.app, threads=2, slice_seconds=0.05, stall_timeout=120.0, **options)
    adapter.url = adapter.server.url
    silent = [_silent_client(adapter, "held-%d" % index) for index in range(4)]
    try:
        assert wait_for(lambda: adapter.app.open_streams == 2, 20)     # both workers held, two runs queued
        for path in ("health", "metrics", "health"):
            started = time.monotonic()
            response = requests.get(adapter.url + path, timeout=10)
            assert response.status_code == 200
            assert time.monotonic() - started < 5, path
        assert adapter.app.open_streams == 2                           # nothing was freed meanwhile
    finally:
        for sock in silent:
            sock.close()
        adapter.stop()

"""A client that stops reading pauses its run: the run's queue, the server's output buffer and the socket
each hold about ``--stream-buffer-bytes`` for it, then the run stops pulling from the runtime until the
client reads again (and then delivers every event, in order), so silent clients cost no CPU.

Before the byte bound a silent client took in about 28,000 firehose events (megabytes of queue, output
buffer and loopback send buffer) before its run waited, so a few hundred of them kept both cores busy.
"""
import json
import socket
from typing import Any, List, Tuple

import pytest
import requests

from iaccode_agui.server import cli
from iaccode_agui.config import ConfigError
from iaccode_agui.sse.framequeue import FrameQueue
from tests.agentcore_helpers import AGENT, ac_body
from tests.agui_checker import parse_sse
from tests.harness import Adapter, wait_for

FIREHOSE = 20000      # fits whole into the old buffers: before the bound this run never paused


# ---- the queue's byte bound ---------------------------------------------------------------------------
def test_a_byte_bound_queue_takes_what_fits_and_waits_instead_of_spinning():
    queue = FrameQueue(100, max_bytes=1000)
    frames = [b"x" * 400] * 5
    assert queue.put_many(frames, 0.01) == 2 and queue.queued_bytes == 800
    # Not full by count, but the next frame does not fit: the producer must wait (once), not return at
    # once and be called again in a loop (a paused run would then burn a core).
    assert queue.put_many(frames[2:], 0.01) == 0
    assert queue.writer_waits == 1
    assert queue.take(0.01) == frames[:2] and queue.queued_bytes == 0
    assert queue.put_many(frames[2:], 0.01) == 2


def test_one_frame_larger_than_the_bound_still_goes_through_an_empty_queue():
    queue = FrameQueue(100, max_bytes=1000)
    assert queue.put_many([b"y" * 5000, b"z"], 0.01) == 1
    assert queue.put_many([b"z"], 0.01) == 0
    assert queue.take(0.01) == [b"y" * 5000]
    assert queue.put_many([b"z"], 0.01) == 1


def test_marker_objects_pass_a_byte_bound_queue_without_counting():
    marker = object()      # the heartbeat timer posts such markers on a stream's queue
    queue = FrameQueue(100, max_bytes=1000)
    assert queue.put(marker, 0)
    assert queue.put_many([b"x" * 600, marker, b"y" * 300], 0.01) == 3
    assert queue.queued_bytes == 900
    assert queue.put_many([marker, b"z" * 200], 0.01) == 1
    assert queue.take(0.01) == [marker, b"x" * 600, marker, b"y" * 300, marker]


# ---- a silent client on a real server -------------------------------------------------------------------
def _silent(adapter: Adapter, body: Any, path: str = "") -> socket.socket:
    raw = json.dumps(body).encode()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", adapter.server.port))
    sock.sendall(b"POST /%s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                 % (path.encode(), len(raw), raw))
    return sock


def _read_to_end(sock: socket.socket) -> bytes:
    sock.settimeout(60)
    data = b""
    while not data.endswith(b"\r\n0\r\n\r\n"):
        chunk = sock.recv(65536)
        assert chunk, "connection closed before the last chunk"
        data += chunk
    return data


def _dechunk(response: bytes) -> bytes:
    head, _, rest = response.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and b"chunked" in head.lower(), head
    body = b""
    while True:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line, 16)
        if not size:
            return body
        body, rest = body + rest[:size], rest[size + 2:]


def _paused(channel: Any) -> int:
    """Wait until the run's producer waits for room again and again without publishing anything more
    (a full queue for a moment is not a pause); the number of events it published."""
    assert wait_for(lambda: channel._subscriber is not None and channel._subscriber.queue.writer_waits > 0, 30)
    queue = channel._subscriber.queue
    for _ in range(100):
        published, waits = channel.events_published, queue.writer_waits
        assert wait_for(lambda: queue.writer_waits >= waits + 3, 30), "the producer stopped waiting"
        if channel.events_published == published:
            assert not channel.closed
            return published
    raise AssertionError("the run never paused: %d events published" % channel.events_published)


def _texts(events: List[dict]) -> int:
    return sum(1 for event in events if event["type"] == "TEXT_MESSAGE_CONTENT")


@pytest.mark.slow
def test_a_run_whose_client_does_not_read_pauses_and_resumes_with_every_event_in_order(demo, tmp_path, workspace):
    adapter = Adapter(demo.url, demo.token, str(tmp_path / "state"), workspace)
    sock = _silent(adapter, adapter.body("firehose %d" % FIREHOSE, thread="paused"))
    try:
        assert wait_for(lambda: len(adapter.app.manager.live_runs()) == 1, 20)
        channel = adapter.app.manager.live_runs()[0].channel
        published = _paused(channel)
        assert published < FIREHOSE // 2      # the buffers hold a few thousand events, not the whole run
        events, ids, _ = parse_sse(_dechunk(_read_to_end(sock)))
        assert ids == list(range(len(events)))
        assert events[0]["type"] == "RUN_STARTED" and events[-1]["type"] == "RUN_FINISHED"
        assert _texts(events) == FIREHOSE
    finally:
        sock.close()
        adapter.stop()


@pytest.mark.slow
def test_the_buffer_setting_bounds_what_a_silent_client_holds(demo, tmp_path, workspace):
    small = 16 * 1024
    adapter = Adapter(demo.url, demo.token, str(tmp_path / "state"), workspace, stream_buffer_bytes=small)
    adapter.server.stop()
    from iaccode_agui.server.serving import ServerThread, waitress_limits
    adapter.server = ServerThread(adapter.app, threads=8, slice_seconds=0.05,
                                  **waitress_limits(adapter.settings.max_request_bytes, small))
    sock = _silent(adapter, adapter.body("firehose %d" % FIREHOSE, thread="small"))
    try:
        assert wait_for(lambda: len(adapter.app.manager.live_runs()) == 1, 20)
        channel = adapter.app.manager.live_runs()[0].channel
        published = _paused(channel)
        frame = max(len(item) for item in channel._subscriber.queue._items)
        assert channel._subscriber.queue.queued_bytes <= small + frame
        server_side = [ch for ch in adapter.server.server.active_channels.values() if ch.requests]
        assert [ch.socket.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) for ch in server_side] == [small]
        assert server_side[0].adj.outbuf_high_watermark == small
        events, ids, _ = parse_sse(_dechunk(_read_to_end(sock)))
        assert ids == list(range(len(events))) and _texts(events) == FIREHOSE
        assert published < FIREHOSE // 4
    finally:
        sock.close()
        adapter.stop()


@pytest.mark.slow
def test_a_paused_agentcore_run_dropped_by_the_stall_timeout_goes_on_and_logs_everything(demo, tmp_path, workspace):
    """On /ag-ui/agent a run outlives its connection: once the stalled stream is dropped the run is
    detached, runs on at full speed and its log (what a re-attach replays) holds every event."""
    adapter = Adapter(demo.url, demo.token, str(tmp_path / "state"), workspace, default_cwd=workspace)
    adapter.server.stop()
    from iaccode_agui.server.serving import ServerThread, waitress_limits
    # The stall timeout is 1 s only once the pause was seen: from the start, a test thread that a loaded
    # machine holds back for a second would find the stream already dropped and the run running on.
    adapter.server = ServerThread(adapter.app, threads=8, slice_seconds=0.05, stall_timeout=3600.0,
                                  **waitress_limits(adapter.settings.max_request_bytes))
    body = ac_body("firehose %d" % FIREHOSE, thread="agentcore-paused")
    sock = _silent(adapter, body, AGENT)
    try:
        assert wait_for(lambda: len(adapter.app.manager.live_runs()) == 1, 20)
        run = adapter.app.manager.live_runs()[0]
        published = _paused(run.channel)
        assert published < FIREHOSE // 2
        adapter.server.stall_timeout = 1.0        # read by the next sweep: the stalled stream is dropped
        assert wait_for(lambda: run.worker is not None and run.worker.finished, 120)  # dropped, then ran on
        assert run.worker.outcome == "success" and run.channel.log_complete
        adapter.url = adapter.server.url
        replay = adapter.post({"threadId": body["threadId"], "runId": body["runId"], "messages": [], "state": {},
                               "tools": [], "context": [],
                               "forwardedProps": {"agentcore": {"attach": {"afterSequence": 0}}}}, path=AGENT)
        events, ids, _ = parse_sse(replay.content)
        assert ids == list(range(1, len(events) + 1)) and events[-1]["type"] == "RUN_FINISHED"
        assert _texts(events) == FIREHOSE
    finally:
        sock.close()
        adapter.stop()


def test_the_stream_buffer_setting_from_flag_and_environment(tmp_path):
    def settings(argv, env):
        args = cli.build_parser().parse_args(argv + ["--state-dir", str(tmp_path)])
        return cli.settings_from(args, env, "http://127.0.0.1:1/", None)

    assert settings([], {}).stream_buffer_bytes == 128 * 1024
    assert settings(["--stream-buffer-bytes", "65536"], {}).stream_buffer_bytes == 65536
    assert settings([], {"IAC_CODE_AGUI_STREAM_BUFFER_BYTES": "32768"}).stream_buffer_bytes == 32768
    with pytest.raises(ConfigError):
        settings([], {"IAC_CODE_AGUI_STREAM_BUFFER_BYTES": "1000"})


@pytest.mark.slow
def test_every_run_of_several_silent_clients_pauses_and_the_probe_answers(demo, tmp_path, workspace):
    """The load figure (``tools/hostile_load.py --silent 500``) in small: every admitted run pauses."""
    count = 6
    adapter = Adapter(demo.url, demo.token, str(tmp_path / "state"), workspace, max_active_runs=count)
    socks = [_silent(adapter, adapter.body("firehose %d" % FIREHOSE, thread="many-%d" % index))
             for index in range(count)]
    try:
        assert wait_for(lambda: len(adapter.app.manager.live_runs()) == count, 60)
        runs = adapter.app.manager.live_runs()
        published = [_paused(run.channel) for run in runs]
        # Every run waits for its client; none of them is still pulling from the runtime.
        assert all(run.worker is not None and not run.worker.finished for run in runs)
        assert sum(published) < count * FIREHOSE // 2
        assert [run.channel.events_published for run in runs] == published
        assert requests.get(adapter.url + "health", timeout=10).status_code == 200
    finally:
        for sock in socks:
            sock.close()
        adapter.stop()


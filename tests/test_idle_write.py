"""Heartbeats written from the timer's thread: waitress's ``write_idle`` and the SSE body's use of it.

The timer writes an idle stream's heartbeat itself instead of waking the stream's worker thread.  That is
only safe if the write never waits, never lands inside another chunk, never comes before the response
head or after its last chunk, and is framed as waitress frames the stream's own chunks: each of those is
checked here, on stand-in channels for the refusals and on a real waitress server for the wire.
"""
import http.client
import socket
import sys
import threading
import time

import pytest

from iaccode_agui.runs import stream as stream_mod
from iaccode_agui.runs.channel import END, Subscription
from iaccode_agui.runs.framequeue import FrameQueue
from iaccode_agui.runs.heartbeats import BEAT, TICK, Entry
from iaccode_agui.runs.stream import IDLE_WRITE_KEY, SSEBody, idle_writer
from iaccode_agui import idle_write
from iaccode_agui.idle_write import IdleWriteTask
from iaccode_agui.serving import ServerThread
from tests.harness import wait_for


class _Channel:
    """What ``write_idle`` touches of a waitress channel, on one end of a real socket pair."""

    def __init__(self) -> None:
        self.outbuf_lock = threading.Condition()
        self.connected = True
        self.total_outbufs_len = 0
        self.buffered = []                 # what went the usual way (waitress's output buffer)
        self.socket, self.peer = socket.socketpair()
        self.socket.setblocking(False)
        self.peer.setblocking(False)

    def write_soon(self, data: bytes) -> int:
        with self.outbuf_lock:
            self.buffered.append(data)
            return len(data)

    def received(self) -> bytes:
        try:
            return self.peer.recv(1 << 20)
        except BlockingIOError:
            return b""

    def close(self) -> None:
        self.socket.close()
        self.peer.close()


def _task(chunked: bool = True, content_length=None, wrote_header: bool = True) -> IdleWriteTask:
    task = IdleWriteTask.__new__(IdleWriteTask)   # no request to parse: only the response state matters
    task.channel = _Channel()
    task.status = "200 OK"
    task.chunked_response = chunked
    task.content_length = content_length
    task.wrote_header = wrote_header
    return task


def test_an_idle_chunked_response_gets_one_whole_framed_chunk_on_the_wire():
    task = _task()
    task.channel.last_activity = 0.0
    assert task.write_idle(b": heartbeat\n\n") is True
    assert task.channel.received() == b"D\r\n: heartbeat\n\n\r\n"
    assert task.channel.buffered == []
    assert task.channel.last_activity > 0 and task.channel.progress == 1   # the stall sweep sees it move
    task.channel.close()


def test_a_close_delimited_response_gets_the_bytes_as_they_are():
    task = _task(chunked=False)
    assert task.write_idle(b": heartbeat\n\n") is True
    assert task.channel.received() == b": heartbeat\n\n"
    task.channel.close()


def test_write_idle_refuses_instead_of_waiting_or_breaking_the_response():
    cases = {
        "head not out yet": _task(wrote_header=False),
        "length-delimited body": _task(chunked=False, content_length=100),
        "client gone": _task(),
        "output still waiting": _task(),
        "response ended": _task(),
        "no body allowed": _task(),
    }
    cases["client gone"].channel.connected = False
    cases["output still waiting"].channel.total_outbufs_len = 10
    cases["response ended"]._close_idle_writes()
    cases["no body allowed"].status = "304 Not Modified"
    refused = {name: task.write_idle(b"x") for name, task in cases.items()}
    assert refused == {name: False for name in cases}
    assert all(task.channel.received() == b"" and task.channel.buffered == [] for task in cases.values())
    for task in cases.values():
        task.channel.close()


def test_write_idle_does_not_wait_for_a_lock_another_thread_holds():
    task = _task()
    held, release = threading.Event(), threading.Event()

    def holder() -> None:
        with task.channel.outbuf_lock:
            held.set()
            release.wait(10)

    thread = threading.Thread(target=holder)
    thread.start()
    try:
        assert held.wait(10)
        started = time.monotonic()
        assert task.write_idle(b"x") is False
        assert time.monotonic() - started < 1.0
    finally:
        release.set()
        thread.join(10)
    assert task.write_idle(b"x") is True
    task.channel.close()


def test_a_full_socket_buffer_hands_the_chunk_to_waitress_instead_of_waiting():
    task = _task()
    sock = task.channel.socket
    try:
        while True:
            sock.send(b"x" * 65536)
    except BlockingIOError:
        pass
    started = time.monotonic()
    assert task.write_idle(b": heartbeat\n\n") is True
    assert time.monotonic() - started < 1.0
    assert task.channel.buffered == [b"D\r\n: heartbeat\n\n\r\n"]   # waitress's loop sends it when it can
    task.channel.close()


def test_a_send_error_is_a_refusal_not_an_exception_in_the_timer():
    task = _task()
    task.channel.socket.close()          # a descriptor that is gone: the send fails
    assert task.write_idle(b"x") is False
    assert task.channel.buffered == []
    task.channel.peer.close()


def test_send_now_says_what_the_socket_took_with_the_c_send_and_without_it():
    for send in (idle_write._SEND, None):
        ours, peer = socket.socketpair()
        ours.setblocking(False)
        try:
            assert idle_write.send_now(ours, b"abc", send) == 3
            assert peer.recv(10) == b"abc"
            peer.close()
            failed = [idle_write.send_now(ours, b"abc", send) for _ in range(3)]
            assert failed[-1] == -1      # the peer is gone: EPIPE or ECONNRESET, never an exception
        finally:
            ours.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the C library's send is looked up on Linux only here")
def test_on_linux_the_heartbeat_send_keeps_the_interpreter_lock():
    """Without it one thread sending many heartbeats waits up to 5 ms per send behind any busy thread."""
    assert idle_write._SEND is not None


def _streaming_app(seen: dict, proceed: threading.Event):
    def app(environ, start_response):
        seen["write_idle"] = environ.get(IDLE_WRITE_KEY)
        seen["before_head"] = seen["write_idle"](b"early")   # nothing is out yet: must refuse
        start_response("200 OK", [("Content-Type", "text/event-stream")])

        def body():
            yield b"data: first\n\n"
            seen["first_out"] = True
            proceed.wait(10)
            yield b"data: last\n\n"
        return body()
    return app


def test_on_a_real_server_the_chunk_lands_between_the_streams_own_and_never_after_the_end():
    seen: dict = {}
    proceed = threading.Event()
    server = ServerThread(_streaming_app(seen, proceed), threads=4, slice_seconds=0.05)
    try:
        conn = http.client.HTTPConnection(server.host, server.port, timeout=10)
        conn.request("GET", "/stream")
        response = conn.getresponse()
        assert response.getheader("Transfer-Encoding") == "chunked"
        assert response.read1(64) == b"data: first\n\n"
        assert wait_for(lambda: seen.get("first_out"), 10)
        # Called from this thread, as the timer would: the response's worker is parked in the app.
        assert seen["write_idle"](b": heartbeat\n\n") is True
        proceed.set()
        rest = response.read()      # http.client decodes the chunks: a bad frame would raise here
        conn.close()
        assert seen["before_head"] is False
        assert rest == b": heartbeat\n\ndata: last\n\n"
        assert seen["write_idle"](b": heartbeat\n\n") is False   # the response is over
    finally:
        proceed.set()
        server.stop()


def test_the_environ_of_other_servers_offers_no_idle_writer():
    assert idle_writer({}) is None
    assert idle_writer({IDLE_WRITE_KEY: "not callable"}) is None
    marker = lambda data: True  # noqa: E731
    assert idle_writer({IDLE_WRITE_KEY: marker}) is marker


class _Timer:
    """Takes registrations like the real timer but never runs: the test plays the timer with ``post``."""

    def __init__(self) -> None:
        self.posts = []

    def register(self, interval, poll, gone, post) -> Entry:
        self.posts.append(post)
        return Entry(interval, poll, gone, post, time.monotonic() - 100)

    def cancel(self, entry: Entry) -> None:
        pass

    def ensure_running(self) -> None:
        pass


def _body(write_idle):
    sub = Subscription(None, [b"data: replayed\n\n"], maxsize=8)
    bumps = []
    timer = _Timer()
    body = SSEBody(sub, heartbeat=0.5, poll=1.0, timer=timer, write_idle=write_idle,
                   on_heartbeat=lambda: bumps.append(1))
    assert next(body) == b"data: replayed\n\n"
    return body, sub.queue, timer, bumps


def _park(body, queue: FrameQueue):
    """Run the body's generator on a thread until it waits on its queue (as waitress's worker would)."""
    out = []
    thread = threading.Thread(target=lambda: out.extend(body), daemon=True)
    thread.start()
    assert wait_for(lambda: queue._reader_waiting, 10)
    body._entry.last = time.monotonic() - 100   # long silent since its replay, as the tests' premise
    return thread, out


def test_an_idle_stream_gets_its_heartbeat_written_by_the_timer_without_waking_its_thread():
    written = []
    body, queue, timer, bumps = _body(lambda data: written.append(data) or True)
    thread, out = _park(body, queue)
    entry = body._entry
    before = entry.last
    assert timer.posts[0](BEAT) is True
    assert written == [stream_mod.HEARTBEAT] and bumps == [1] and body.idle_heartbeats == 1
    assert entry.last > before                       # the next one is due an interval from now
    assert queue.qsize() == 0 and queue._reader_waiting   # the stream's thread was not woken
    queue.put_final(END)
    thread.join(10)
    assert out == []                                 # and it wrote no heartbeat of its own


def test_a_refused_idle_write_falls_back_to_waking_the_stream():
    body, queue, timer, bumps = _body(lambda data: False)
    thread, out = _park(body, queue)
    assert timer.posts[0](BEAT) is True
    assert wait_for(lambda: out == [stream_mod.HEARTBEAT], 10), out
    assert bumps == [1] and body.idle_heartbeats == 0
    queue.put_final(END)
    thread.join(10)


def test_a_marker_that_finds_its_stream_a_tick_early_is_still_written():
    """The timer hands a heartbeat out up to a tick before it is due; dropping it as "too early" would
    leave the stream silent for a whole interval more."""
    body, queue, timer, bumps = _body(lambda data: False)
    thread, out = _park(body, queue)
    body._entry.last = time.monotonic() - (0.5 - 1.5 * TICK)   # a tick and a half before it is due
    assert timer.posts[0](BEAT) is True
    assert wait_for(lambda: out == [stream_mod.HEARTBEAT], 10), out
    queue.put_final(END)
    thread.join(10)


def test_a_stream_with_frames_queued_gets_no_heartbeat_at_all():
    written = []
    body, queue, timer, bumps = _body(lambda data: written.append(data) or True)
    queue.put(b"data: soon\n\n", 0)
    assert body._post(BEAT) is True   # what the timer is handed when it registers the stream
    assert written == [] and bumps == [] and queue.take(0) == [b"data: soon\n\n"]


def test_before_its_first_chunk_is_out_a_stream_is_not_written_to_from_outside():
    written = []
    sub = Subscription(None, [], maxsize=8)
    timer = _Timer()
    body = SSEBody(sub, heartbeat=0.5, poll=1.0, timer=timer, write_idle=lambda d: written.append(d) or True)
    thread, out = _park(body, sub.queue)
    assert timer.posts[0](BEAT) is True
    assert written == []
    assert wait_for(lambda: out == [stream_mod.HEARTBEAT], 10), out
    sub.queue.put_final(END)
    thread.join(10)


def test_a_real_adapter_writes_idle_heartbeats_from_the_timer(adapter_factory, monkeypatch):
    """End to end: a silent run's heartbeats reach the client and none of them went through the queue."""
    markers = []
    offer = FrameQueue.offer_marker
    monkeypatch.setattr(FrameQueue, "offer_marker", lambda self, item: markers.append(item) or offer(self, item))
    adapter = adapter_factory(heartbeat_interval=0.2, disconnect_poll=1.0)
    response = adapter.post(adapter.body("sleep 1.5"), stream=True)
    assert response.status_code == 200
    raw = b"".join(response.iter_content(None))
    assert b"RUN_FINISHED" in raw
    assert raw.count(b": heartbeat") >= 3, raw
    assert markers == []


def test_a_stream_whose_run_thread_is_slow_to_start_gets_heartbeats_meanwhile():
    """The run's thread is started between the stream's first chunk and its next (``after_first_write``).
    With a thousand streams opening at once that start can wait long for the CPU; the stream must be
    timed already, so its heartbeats go out while the start is under way instead of after it."""
    from iaccode_agui.runs.heartbeats import HeartbeatTimer

    started, release = threading.Event(), threading.Event()

    def slow_start() -> None:
        started.set()
        release.wait(30)

    timer = HeartbeatTimer()

    def app(environ, start_response):
        sub = Subscription(None, [b"data: started\n\n"], maxsize=8)
        start_response("200 OK", [("Content-Type", "text/event-stream")])
        return SSEBody(sub, heartbeat=0.2, poll=60.0, timer=timer, after_first_write=slow_start,
                       write_idle=idle_writer(environ))

    server = ServerThread(app, threads=4, slice_seconds=0.05)
    try:
        conn = http.client.HTTPConnection(server.host, server.port, timeout=10)
        conn.request("GET", "/stream")
        response = conn.getresponse()
        assert response.read1(64) == b"data: started\n\n"
        assert started.wait(10)
        # The hook is still blocked: whatever arrives now was written by the timer.
        assert response.read1(64) == stream_mod.HEARTBEAT
        assert not release.is_set()
        conn.close()
    finally:
        release.set()
        server.stop()

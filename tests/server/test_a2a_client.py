"""A2A client against a real HTTP upstream (waitress) that misbehaves in every way the runtime can."""
import socket
import threading
import time
import uuid

import pytest

from iaccode_agui import __version__
from iaccode_agui.a2a.client import (
    A2AClient,
    A2ARpcError,
    A2AUnavailable,
    SessionBackupNotReady,
    SessionLost,
)
from iaccode_agui.a2a.call import shutdown_read
from tests.upstream_fakes import RESULTS, TASK, TOKEN, FakeUpstream, serve_wsgi


@pytest.fixture(scope="module")
def upstream():
    app = FakeUpstream()
    with serve_wsgi(app) as url:
        app.url = url
        yield app
        app.stop.set()


@pytest.fixture
def client(upstream):
    c = A2AClient(upstream.url, TOKEN, read_timeout=20)
    yield c
    c.close()


def _last(upstream, path="/"):
    return [r for r in upstream.requests if r["path"] == path][-1]


def _stream(client, scenario):
    return client.send_streaming_message({"message": {"messageId": "m1"}, "scenario": scenario})


def test_normal_stream_yields_every_result_and_sends_the_a2a_headers(client, upstream):
    with _stream(client, "normal") as stream:
        assert list(stream) == RESULTS
        assert stream.frames == len(RESULTS)
        assert stream.comments == 2
        assert not stream.aborted
    req = _last(upstream)
    h = req["headers"]
    assert h["a2a-version"] == "1.0"
    assert h["authorization"] == "Bearer " + TOKEN
    assert h["user-agent"] == "iaccode-agui/" + __version__
    assert h["accept"] == "text/event-stream"
    assert h["accept-encoding"] == "identity"
    assert h["content-type"] == "application/json"
    assert req["body"]["jsonrpc"] == "2.0"
    assert req["body"]["method"] == "SendStreamingMessage"
    assert req["body"]["params"]["message"] == {"messageId": "m1"}
    assert uuid.UUID(req["body"]["id"]).version == 4


def test_each_call_gets_a_fresh_uuid4_id(client, upstream):
    client.get_task("t-1")
    client.get_task("t-1")
    ids = [r["body"]["id"] for r in upstream.requests[-2:]]
    assert ids[0] != ids[1]
    assert all(uuid.UUID(i).version == 4 for i in ids)


def test_stream_survives_awkward_network_splits(client):
    assert list(_stream(client, "split-bytes")) == RESULTS


def test_subscribe_to_task(client, upstream):
    assert list(client.subscribe_to_task("t-9")) == [{"task": dict(TASK, id="t-9")}]
    assert _last(upstream)["body"]["method"] == "SubscribeToTask"
    assert _last(upstream)["body"]["params"] == {"id": "t-9"}


def test_error_event_mid_stream_raises_rpc_error_after_earlier_frames(client):
    stream = _stream(client, "error-event")
    assert next(stream) == RESULTS[0]
    with pytest.raises(A2ARpcError) as info:
        next(stream)
    assert (info.value.code, info.value.message) == (-32603, "agent exploded")
    with pytest.raises(StopIteration):
        next(stream)  # an error ends the stream


def test_error_key_in_a_plain_frame_raises_rpc_error(client):
    with pytest.raises(A2ARpcError) as info:
        list(_stream(client, "error-key"))
    assert info.value.code == -32004


def test_upfront_json_error_raises_from_the_call_itself(client):
    with pytest.raises(A2ARpcError) as info:
        _stream(client, "json-error")
    assert info.value.code == -32001
    assert info.value.message == "Task not found"
    assert info.value.data == [{"reason": "TASK_NOT_FOUND"}]


def test_upfront_json_result_is_a_one_frame_stream(client):
    assert list(_stream(client, "json-result")) == [{"message": {"messageId": "m"}}]


@pytest.mark.parametrize("scenario, words", [
    ("truncated-json", "not JSON"),
    ("missing-result", "no result"),
    ("half-event", "middle of an event"),
    ("bad-utf8", "not valid SSE"),
    ("cut", "broke off"),
    ("html", "content type"),
])
def test_broken_streams_raise_unavailable(client, scenario, words):
    with pytest.raises(A2AUnavailable, match=words):
        list(_stream(client, scenario))


def test_cut_connection_after_first_frame_delivers_that_frame_first(client):
    stream = _stream(client, "cut")
    assert next(stream) == RESULTS[0]
    with pytest.raises(A2AUnavailable):
        next(stream)


def test_read_timeout_while_streaming_is_unavailable(upstream):
    impatient = A2AClient(upstream.url, TOKEN, read_timeout=0.5)
    try:
        stream = _stream(impatient, "slow")
        assert next(stream) == RESULTS[0]
        started = time.monotonic()
        with pytest.raises(A2AUnavailable, match="read timeout"):
            next(stream)
        assert time.monotonic() - started < 3
    finally:
        impatient.close()


def test_events_are_delivered_as_they_arrive(client, upstream):
    upstream.sent_at.clear()
    received = []
    for _ in _stream(client, "paced"):
        received.append(time.monotonic())
    assert len(received) == 3 and len(upstream.sent_at) == 3
    # The first frame is in hand long before the server even produces the last one (0.6 s later).
    assert received[0] < upstream.sent_at[2] - 0.4
    assert received[1] < upstream.sent_at[2] - 0.1
    for got, sent in zip(received, upstream.sent_at):
        assert got - sent < 0.25


def _blocked_reader(stream):
    """Iterate ``stream`` in a thread; returns (thread, first-frame event, outcome dict)."""
    first = threading.Event()
    outcome = {}

    def run():
        try:
            for _ in stream:
                first.set()
            outcome["end"] = "stopped"
        except Exception as exc:  # pragma: no cover - reported through the assertion below
            outcome["end"] = exc
        outcome["at"] = time.monotonic()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, first, outcome


@pytest.mark.slow
def test_abort_from_another_thread_unblocks_the_reader(client):
    stream = _stream(client, "slow")
    thread, first, outcome = _blocked_reader(stream)
    assert first.wait(5)
    thread.join(1.0)
    assert thread.is_alive(), "without abort the reader stays blocked in its read"
    aborted_at = time.monotonic()
    stream.abort()
    thread.join(5)
    assert not thread.is_alive()
    assert outcome["end"] == "stopped"
    assert outcome["at"] - aborted_at < 5
    assert stream.aborted
    stream.abort()  # idempotent
    # The aborted connection must not poison the pool for later calls.
    assert client.get_task("t-2")["id"] == "t-2"


def test_abort_before_reading_stops_at_once(client):
    stream = _stream(client, "slow")
    stream.abort()
    assert list(stream) == []


def test_close_releases_a_stream_that_was_not_read(client):
    stream = _stream(client, "normal")
    stream.close()
    assert list(stream) == []


def test_shutdown_read_on_live_ended_and_unknown_responses(client):
    stream = _stream(client, "slow")
    assert next(stream) == RESULTS[0]
    assert shutdown_read(stream._resp) is True
    with pytest.raises(A2AUnavailable):
        next(stream)  # shut down without abort(): an ordinary broken stream

    import requests
    session = requests.Session()
    resp = session.post(client.base_url, json={"jsonrpc": "2.0", "id": "1", "method": "SubscribeToTask",
                                               "params": {"id": "t"}},
                        headers={"Authorization": "Bearer " + TOKEN}, stream=True)
    assert resp.raw.read()  # to the end of the body
    # The body is over and the connection may be back in the pool: it must be left alone.
    assert shutdown_read(resp) is False
    resp.close()
    session.close()
    assert shutdown_read(object()) is False
    assert shutdown_read(None) is False


def test_unary_calls_return_the_bare_result(client, upstream):
    task = client.get_task("t-5", history_length=7)
    assert task["id"] == "t-5" and task["historyLength"] == 7
    assert _last(upstream)["body"]["method"] == "GetTask"
    assert _last(upstream)["body"]["params"] == {"id": "t-5", "historyLength": 7}
    assert client.cancel_task("t-6")["status"]["state"] == "TASK_STATE_CANCELED"
    assert _last(upstream)["body"]["method"] == "CancelTask"
    assert _last(upstream)["body"]["params"] == {"id": "t-6"}
    assert client.send_message({"message": {"messageId": "m"}}) == {"task": TASK}
    assert _last(upstream)["body"]["method"] == "SendMessage"
    assert _last(upstream)["headers"]["a2a-version"] == "1.0"


def test_unary_rpc_error(client):
    with pytest.raises(A2ARpcError) as info:
        client.get_task("missing")
    assert info.value.code == -32001
    assert "Task not found" in str(info.value)


@pytest.mark.parametrize("mode, words", [
    ("text", "not JSON"), ("http500", "HTTP 500"), ("wrong-id", "does not match"), ("no-result", "no result"),
])
def test_unary_unusable_answers(client, mode, words):
    with pytest.raises(A2AUnavailable, match=words):
        client.send_message({"mode": mode})


def test_unauthorized_is_unavailable_and_says_so(upstream):
    for token in (None, "wrong"):
        c = A2AClient(upstream.url, token)
        try:
            with pytest.raises(A2AUnavailable, match="unauthorized"):
                c.get_task("t")
            with pytest.raises(A2AUnavailable, match="unauthorized"):
                _stream(c, "normal")
        finally:
            c.close()
    assert "authorization" not in upstream.requests[-4]["headers"]


def test_connection_refused_is_quick_unavailable():
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    c = A2AClient("http://127.0.0.1:%d" % port, TOKEN, connect_timeout=2)
    started = time.monotonic()
    with pytest.raises(A2AUnavailable, match="cannot reach"):
        c.get_task("t")
    with pytest.raises(A2AUnavailable, match="cannot reach"):
        _stream(c, "normal")
    assert time.monotonic() - started < 2
    assert c.base_url == "http://127.0.0.1:%d/" % port
    c.close()


@pytest.mark.parametrize("session_id, expected", [
    ("current", "current"), ("restored", "restored"),
    ("lost", SessionLost), ("busy", SessionBackupNotReady), ("busy-top", SessionBackupNotReady),
    ("busy-final", A2AUnavailable), ("odd", A2AUnavailable), ("boom", A2AUnavailable),
])
def test_ensure_session_restored(client, upstream, session_id, expected):
    if isinstance(expected, str):
        assert client.ensure_session_restored("/srv/ws", session_id, "t-1") == expected
    else:
        with pytest.raises(expected):
            client.ensure_session_restored("/srv/ws", session_id, None)
    req = _last(upstream, "/iac-code/session/ensure-restored")
    assert req["verb"] == "POST"
    assert req["body"]["cwd"] == "/srv/ws" and req["body"]["sessionId"] == session_id
    assert req["headers"]["a2a-version"] == "1.0"
    assert req["headers"]["authorization"] == "Bearer " + TOKEN


def test_pipeline_state(client, upstream):
    assert client.get_pipeline_state("none", 0) is None
    state = client.get_pipeline_state("t-1", 12)
    assert state["snapshot"] == {"lastSequence": 9}
    assert state["query"] == {"taskId": "t-1", "afterSequence": "12"}
    with pytest.raises(A2AUnavailable):
        client.get_pipeline_state("list", 0)
    assert _last(upstream, "/iac-code/pipeline/state")["headers"]["authorization"] == "Bearer " + TOKEN


def test_health_and_agent_card(client, upstream):
    assert client.health()["status"] == "healthy"
    assert client.agent_card()["name"] == "fake"
    assert _last(upstream, "/.well-known/agent-card.json")["headers"]["a2a-version"] == "1.0"


def test_concurrent_streams_share_one_client(client):
    results, errors = [], []

    def run():
        try:
            results.append(list(_stream(client, "normal")))
        except Exception as exc:  # pragma: no cover - surfaced by the assertion
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert not errors
    assert results == [RESULTS] * 8


class _KeepAliveUpstream:
    """An HTTP/1.1 upstream that keeps connections open after a chunked SSE answer, as uvicorn does
    (waitress closes every chunked response).  ``hold`` makes the body stop short of its end."""

    def __init__(self, hold: bool = False) -> None:
        import json
        import socketserver

        self.hold = hold
        self.connections = 0
        self.release = threading.Event()
        outer = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self):
                outer.connections += 1
                while True:
                    line = self.rfile.readline()
                    if not line:
                        return
                    length = 0
                    while True:
                        header = self.rfile.readline()
                        if header in (b"\r\n", b""):
                            break
                        if header.lower().startswith(b"content-length:"):
                            length = int(header.split(b":")[1])
                    body = json.loads(self.rfile.read(length))
                    self._answer(body)

            def _answer(self, body):
                if body.get("method") != "SendStreamingMessage":
                    data = json.dumps({"result": dict(TASK, id="t-1"), "id": body["id"], "jsonrpc": "2.0"}).encode()
                    self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                                     % (len(data), data))
                    return
                self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
                for result in RESULTS:
                    frame = ("data: %s\r\n\r\n" % json.dumps({"result": result, "id": body["id"],
                                                                "jsonrpc": "2.0"})).encode()
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(frame), frame))
                self.wfile.flush()
                if outer.hold:
                    outer.release.wait(10)
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d/" % self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


def test_a_stream_closed_before_the_end_of_its_body_is_never_waited_for():
    upstream = _KeepAliveUpstream(hold=True)
    client = A2AClient(upstream.url, TOKEN, read_timeout=20)
    try:
        for _ in range(3):
            stream = _stream(client, "normal")
            assert [next(stream) for _ in RESULTS] == RESULTS   # every event, but not the end of the body
            stream.close()
        assert client.get_task("t-1")["id"] == "t-1"
        # A body that stays open is closed, not waited for: each call needs a connection of its own.
        assert upstream.connections == 4
    finally:
        client.close()
        upstream.close()


def test_an_aborted_stream_is_never_pooled():
    upstream = _KeepAliveUpstream()
    client = A2AClient(upstream.url, TOKEN, read_timeout=20)
    try:
        stream = _stream(client, "normal")
        assert next(stream) == RESULTS[0]
        stream.abort()
        stream.close()
        assert client.get_task("t-1")["id"] == "t-1"
        assert upstream.connections == 2
    finally:
        client.close()
        upstream.close()


def test_the_frame_decoder_accepts_and_refuses_exactly_what_json_loads_does():
    import json

    from iaccode_agui.a2a.call import _loads

    good = ['{"result":{"a":[1,2.5,"\\u00e9"]}}', ' {"a":1}', '{"a":1}\n ', "1", '"x"', "null", "[]", '{"a":NaN}']
    for text in good:
        assert json.dumps(_loads(text)) == json.dumps(json.loads(text))   # (NaN is not equal to itself)
    for text in ["", " ", "nul", '{"a":1} x', '{"a":1}{}', "{'a':1}", '{"a":1', "\x00"]:
        try:
            json.loads(text)
        except ValueError:
            pass
        else:
            raise AssertionError("json.loads accepted %r" % text)
        try:
            _loads(text)
        except ValueError:
            continue
        raise AssertionError("the frame decoder accepted %r" % text)

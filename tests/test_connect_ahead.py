"""A runtime that closes the connection of every streamed response gets the next connection opened ahead.

waitress (the scripted runtime's server) answers every chunked response with ``Connection: close``, so each
streaming call would start with a TCP connect and the runtime's accept.  Once such a stream has been read,
the client leaves one connected idle connection in its pool; a runtime that keeps connections alive gets
nothing extra.  Checked by counting connects, never by timing.
"""
import http.server
import json
import socketserver
import threading

import pytest
import urllib3.connection

from iaccode_agui.a2a import dialect
from iaccode_agui.a2a.client import A2AClient
from iaccode_agui.demo import DemoServer


@pytest.fixture
def connects(monkeypatch):
    calls = []
    original = urllib3.connection.HTTPConnection.connect

    def connect(self):
        calls.append(self)
        return original(self)

    monkeypatch.setattr(urllib3.connection.HTTPConnection, "connect", connect)
    return calls


def _message(text, cwd, number=0):
    return dialect.send_params(dialect.build_message("m-%d" % number, [{"kind": "text", "text": text}], None,
                                                     dialect.build_metadata({}, cwd, "en")))


def _read(client, params, abort=False):
    stream = client.send_streaming_message(params)
    if abort:
        next(stream)
        stream.abort()
    frames = list(stream)
    stream.close()
    return frames


def test_the_next_streaming_call_finds_a_connection_already_open(demo, workspace, connects):
    client = A2AClient(demo.url, demo.token)
    try:
        assert _read(client, _message("hello", workspace, 1))
        assert len(connects) == 2                   # the call's own, then one opened ahead
        ahead = connects[-1]
        assert _read(client, _message("hello", workspace, 2))
        assert len(connects) == 3 and connects[1] is ahead   # the call used it; the next is open again
    finally:
        client.close()


def test_an_opened_ahead_connection_the_runtime_dropped_is_replaced(workspace, connects):
    first = DemoServer.start(token="t")
    port = int(first.url.rsplit(":", 1)[1].strip("/"))
    client = A2AClient(first.url, "t")
    try:
        assert _read(client, _message("hello", workspace, 1))
        assert len(connects) == 2
        first.stop()                                # closes the connection waiting in the pool
        second = DemoServer.start(token="t", port=port)
        try:
            assert _read(client, _message("hello", workspace, 2))
            assert len(connects) >= 3               # a fresh connection, not the dropped one
        finally:
            second.stop()
    finally:
        client.close()


def test_an_aborted_stream_opens_nothing_ahead(demo, workspace, connects):
    client = A2AClient(demo.url, demo.token)
    try:
        _read(client, _message("firehose 50", workspace), abort=True)
        assert len(connects) == 1
    finally:
        client.close()


class _KeepAlive(http.server.BaseHTTPRequestHandler):
    """A runtime that keeps its connections: one result frame with a Content-Length, HTTP/1.1."""

    protocol_version = "HTTP/1.1"

    def do_POST(self):
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        frame = {"jsonrpc": "2.0", "id": request["id"], "result": {"task": {"id": "t-1", "contextId": "c-1",
                                                                              "status": {"state": "completed"}}}}
        body = ("data: %s\n\n" % json.dumps(frame)).encode("utf-8")
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_a_runtime_that_keeps_its_connections_gets_nothing_extra(workspace, connects):
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _KeepAlive)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    client = A2AClient("http://127.0.0.1:%d/" % server.server_address[1])
    try:
        for number in range(3):
            assert len(_read(client, _message("hello", workspace, number))) == 1
        assert len(connects) == 1                   # one connection, reused, and none opened ahead
    finally:
        client.close()
        server.shutdown()
        server.server_close()

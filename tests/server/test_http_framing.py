"""HTTP framing on a real waitress socket: smuggling through Content-Length + Transfer-Encoding, an
``Expect: 100-continue`` head that is already too large, and anonymous uploads when a token is required."""
import json
import re
import socket
import time
from typing import List, Tuple

import pytest

from iaccode_agui.server.serving import waitress_limits
from tests.hostile_helpers import SMALL_LIMIT

SMUGGLED = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


def _converse(port: int, data: bytes, wait: float = 5.0, read_limit: int = 1 << 20) -> Tuple[bytes, bool]:
    """Send ``data``, read until the server closes or ``wait`` passes; (everything read, closed by server)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=wait)
    received = b""
    closed = False
    deadline = time.monotonic() + wait
    try:
        sock.sendall(data)
        while time.monotonic() < deadline and len(received) < read_limit:
            sock.settimeout(max(0.05, deadline - time.monotonic()))
            try:
                chunk = sock.recv(65536)
            except socket.timeout:
                break
            except ConnectionResetError:
                closed = True
                break
            if not chunk:
                closed = True
                break
            received += chunk
    finally:
        sock.close()
    return received, closed


def _statuses(raw: bytes) -> List[bytes]:
    """Every status code in the byte stream (a second response may follow a body without a line break)."""
    return re.findall(rb"HTTP/1\.[01] (\d{3}) ", raw)


def _body_json(raw: bytes) -> dict:
    return json.loads(raw.split(b"\r\n\r\n", 1)[1].split(b"\r\n\r\n")[0])


def _head(version: str, fields: str) -> bytes:
    return ("POST / HTTP/%s\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n%s\r\n"
            % (version, fields)).encode("latin-1")


@pytest.mark.parametrize("fields", [
    "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n",
    "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n",
    "transfer-encoding: chunked\r\ncontent-length: 0\r\n",
])
def test_content_length_with_transfer_encoding_is_400_and_close(adapter_factory, fields):
    adapter = adapter_factory()
    raw, closed = _converse(adapter.server.port, _head("1.1", fields) + b"0\r\n\r\n" + SMUGGLED)
    assert _statuses(raw) == [b"400"], raw[:300]
    assert closed, "the connection stayed open after an ambiguous framing"
    assert _body_json(raw)["error"]["code"] == "INVALID_INPUT"
    assert b"protocol" not in raw.split(b"\r\n\r\n", 1)[1]     # the smuggled /health was not served


def test_transfer_encoding_on_http_1_0_keep_alive_is_400_and_close(adapter_factory):
    adapter = adapter_factory()
    head = _head("1.0", "Connection: keep-alive\r\nTransfer-Encoding: chunked\r\n")
    raw, closed = _converse(adapter.server.port, head + SMUGGLED.replace(b"1.1", b"1.0"))
    assert _statuses(raw) == [b"400"], raw[:300]
    assert closed


def test_plain_chunked_and_content_length_requests_still_work(adapter_factory):
    adapter = adapter_factory()
    for framing in ("chunked", "content-length"):
        body = json.dumps(adapter.body("hello", thread="frame-" + framing)).encode()
        if framing == "chunked":
            fields, payload = "Transfer-Encoding: chunked\r\n", b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
        else:
            fields, payload = "Content-Length: %d\r\n" % len(body), body
        raw, _ = _converse(adapter.server.port, _head("1.1", fields + "Connection: close\r\n") + payload, wait=15)
        assert _statuses(raw)[:1] == [b"200"], raw[:300]
        assert b"RUN_FINISHED" in raw


def test_expect_continue_with_a_too_large_content_length_is_413_and_close(adapter_factory):
    # waitress cannot tell routes apart: the head alone is refused over the largest route limit.
    adapter = adapter_factory(max_request_bytes=SMALL_LIMIT, agentcore_max_request_bytes=SMALL_LIMIT)
    too_large = waitress_limits(SMALL_LIMIT)["max_request_body_size"] + 1
    head = _head("1.1", "Content-Length: %d\r\nExpect: 100-continue\r\nAccept-Language: de\r\n" % too_large)
    raw, closed = _converse(adapter.server.port, head, wait=5)
    assert b"100 Continue" not in raw
    assert _statuses(raw) == [b"413"], raw[:300]
    assert closed
    error = _body_json(raw)["error"]
    assert error == {"code": "REQUEST_TOO_LARGE", "message": "Der Anfragetext ist zu groß."}


def test_expect_continue_within_the_limits_still_gets_100_continue(adapter_factory):
    adapter = adapter_factory(max_request_bytes=SMALL_LIMIT)
    body = json.dumps(adapter.body("hello", thread="expect-ok")).encode()
    head = _head("1.1", "Content-Length: %d\r\nExpect: 100-continue\r\nConnection: close\r\n" % len(body))
    sock = socket.create_connection(("127.0.0.1", adapter.server.port), timeout=10)
    try:
        sock.sendall(head)
        assert sock.recv(100).startswith(b"HTTP/1.1 100 Continue")
        sock.sendall(body)
        raw = b""
        while b"RUN_FINISHED" not in raw:
            chunk = sock.recv(65536)
            if not chunk:
                break
            raw += chunk
    finally:
        sock.close()
    assert _statuses(raw)[:1] == [b"200"] and b"RUN_FINISHED" in raw


def test_waitress_body_limit_is_close_to_the_route_limit():
    limits = waitress_limits(12 * 1024 * 1024)["max_request_body_size"]
    assert 12 * 1024 * 1024 < limits <= 12 * 1024 * 1024 * 1.07


@pytest.mark.parametrize("credential", [None, "Authorization: Bearer wrong\r\n", "Authorization: Basic abc\r\n"])
def test_anonymous_upload_is_401_before_the_body_is_read(adapter_factory, credential):
    adapter = adapter_factory(auth_token="s3cret", max_request_bytes=SMALL_LIMIT)
    fields = "Content-Length: %d\r\n%s" % (SMALL_LIMIT, credential or "")
    raw, closed = _converse(adapter.server.port, _head("1.1", fields) + b"{", wait=5)   # the body never comes
    assert _statuses(raw) == [b"401"], raw[:300]
    assert b"www-authenticate: bearer" in raw.lower()
    assert closed
    assert _body_json(raw)["error"]["code"] == "UNAUTHORIZED"


def test_authorized_upload_and_open_health_are_unaffected(adapter_factory):
    adapter = adapter_factory(auth_token="s3cret")
    events = adapter.run(adapter.body("hello", thread="auth-ok"), headers={"Authorization": "Bearer s3cret"})
    assert events[-1]["type"] == "RUN_FINISHED"
    assert adapter.session.get(adapter.url + "health", timeout=5).status_code == 200
    assert adapter.post(adapter.body("hello", thread="auth-no")).status_code == 401

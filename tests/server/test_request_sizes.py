"""Hostile input by size and on the wire: bodies at and past the request limit (buffered, streamed,
chunked, never completed), inline images past their limits or malformed, and ids that try to inject
response headers through a raw socket."""
import base64
import http.client
import json
import socket
from typing import Any, Dict, List, Optional, Tuple

import pytest
from werkzeug.test import EnvironBuilder

from iaccode_agui import errors
from iaccode_agui.web import inputs
from tests.hostile_helpers import (
    CANCEL_PATH, EXPECTED_HEADERS, PNG, SMALL_LIMIT, Env, assert_contract, fresh_run)
from tests.hostile_helpers import big_env, env  # noqa: F401  (fixtures: pytest finds them by these names)


# ---- sizes -------------------------------------------------------------------------------------------------
def _padded(env: Env, size: int) -> bytes:
    raw = json.dumps(env.body("pad", thread="pad", run=fresh_run())).encode("utf-8")
    return raw[:-1] + b" " * (size - len(raw)) + b"}"


def test_body_at_the_limit_is_accepted_one_byte_over_is_413(env):
    status, headers, body = env.call(_padded(env, SMALL_LIMIT))
    assert status == 200 and assert_contract(status, headers, body) is None
    status, headers, body = env.call(_padded(env, SMALL_LIMIT + 1))
    assert status == 413 and assert_contract(status, headers, body) == "REQUEST_TOO_LARGE"


def test_cancel_body_limit_is_64_kib(big_env):
    raw = json.dumps({"threadId": "t", "rosInvocationId": "i", "pad": "x" * (64 * 1024)}).encode()
    status, headers, body = big_env.call(raw, path=CANCEL_PATH % "e1")
    assert status == 413 and assert_contract(status, headers, body) == "REQUEST_TOO_LARGE"


def _streamed(env: Env, raw: bytes) -> Tuple[int, Dict[str, str], bytes]:
    """POST ``raw`` the way a server that streams a chunked body does: no Content-Length, input terminated."""
    environ = EnvironBuilder(path="/", method="POST", data=raw, content_type="application/json").get_environ()
    environ.pop("CONTENT_LENGTH", None)
    environ["wsgi.input_terminated"] = True
    app_iter, status, headers = env.client.run_wsgi_app(environ, buffered=True)
    return int(status.split()[0]), dict(headers), b"".join(app_iter)


def test_streamed_body_within_the_limit_is_read_whole(env):
    status, headers, body = _streamed(env, _padded(env, SMALL_LIMIT))
    assert status == 200 and assert_contract(status, headers, body) is None


@pytest.mark.parametrize("tail", [b"x" * SMALL_LIMIT, b"  trailing bytes past the limit"])
def test_streamed_body_over_the_limit_is_413(env, tail):
    status, headers, body = _streamed(env, _padded(env, SMALL_LIMIT) + tail)
    assert status == 413 and assert_contract(status, headers, body) == "REQUEST_TOO_LARGE"


Exchange = Tuple[int, Dict[str, str], bytes, str]


def _exchange(port: int, head: bytes, parts: List[bytes], wait: float = 5.0) -> Optional[Exchange]:
    """Send a hand-made request on a raw socket; (status, headers, body, raw header block) or None if unanswered."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=wait)
    try:
        sock.sendall(head + b"".join(parts))
        response = http.client.HTTPResponse(sock)
        try:
            response.begin()
        except socket.timeout:
            return None
        return response.status, dict(response.getheaders()), response.read(), str(response.msg)
    finally:
        sock.close()


def _chunked(payload: bytes, size: int = 8192) -> List[bytes]:
    parts = [b"%x\r\n%s\r\n" % (len(payload[i:i + size]), payload[i:i + size]) for i in range(0, len(payload), size)]
    return parts + [b"0\r\n\r\n"]


def _head(extra: str, method: str = "POST", path: str = "/") -> bytes:
    return ("%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nConnection: close\r\n"
            "Accept-Language: fr\r\n%s\r\n" % (method, path, extra)).encode("latin-1")


def _check_wire(status: int, headers: Dict[str, str], body: bytes) -> Optional[str]:
    for name in headers:
        assert name.lower() in EXPECTED_HEADERS | {"date", "server", "connection", "transfer-encoding"}, name
    return assert_contract(status, {k: v for k, v in headers.items() if k.lower() in EXPECTED_HEADERS}, body)


def test_chunked_and_content_length_bodies_over_the_limit_on_the_wire(adapter_factory):
    adapter = adapter_factory(max_request_bytes=SMALL_LIMIT)
    port = adapter.server.port
    payload = json.dumps(adapter.body("x" * (SMALL_LIMIT * 2), thread="wire")).encode()
    for head, parts in ((_head("Transfer-Encoding: chunked\r\n"), _chunked(payload)),
                        (_head("Content-Length: %d\r\n" % len(payload)), [payload])):
        status, headers, body, _ = _exchange(port, head, parts)
        assert status == 413 and _check_wire(status, headers, body) == "REQUEST_TOO_LARGE"
    small = json.dumps(adapter.body("hello", thread="wire-ok")).encode()
    status, headers, _, _ = _exchange(port, _head("Transfer-Encoding: chunked\r\n"), _chunked(small, 100))
    assert status == 200 and headers["Content-Type"].startswith("text/event-stream")


@pytest.mark.parametrize("path", ["/", "/ag-ui/agent"])
@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_oversized_body_is_refused_without_buffering_it(adapter_factory, framing, path):
    # The wire limit follows the largest route limit (the AgentCore route's), here set small too.
    adapter = adapter_factory(max_request_bytes=SMALL_LIMIT, agentcore_max_request_bytes=SMALL_LIMIT)
    if framing == "content-length":
        head, parts = _head("Content-Length: %d\r\n" % (500 * 1024 * 1024), path=path), [b"{" * 1024]
    else:
        head, parts = _head("Transfer-Encoding: chunked\r\n", path=path), _chunked(b"x" * (SMALL_LIMIT * 8))[:-1]
    answer = _exchange(adapter.server.port, head, parts, wait=2.0)     # the body is never completed
    assert answer is not None, "no answer while the oversized body was still being sent"
    assert answer[0] == 413


# ---- images -------------------------------------------------------------------------------------------------
def _image_body(env: Env, parts: List[Dict[str, Any]], run: str) -> Dict[str, Any]:
    return env.body([{"type": "text", "text": "look"}] + parts, thread="img", run=run)


def _data_image(raw: bytes, mime: str = "image/png", **extra: Any) -> Dict[str, Any]:
    part = {"type": "image", "source": {"type": "data", "mimeType": mime, "value": base64.b64encode(raw).decode()}}
    part.update(extra)
    return part


IMAGE_CASES = [
    ("too large", [_data_image(PNG + b"\0" * (8 * 1024 * 1024))], errors.MSG_IMAGE_TOO_LARGE),
    ("total too large", [_data_image(PNG + b"\0" * (6 * 1024 * 1024)), _data_image(PNG + b"\1" * (6 * 1024 * 1024))],
     errors.MSG_IMAGES_TOO_LARGE),
    ("bad base64", [{"type": "image", "source": {"type": "data", "mimeType": "image/png", "value": "!!not base64"}}],
     errors.MSG_IMAGE_INVALID),
    ("base64 with newlines", [{"type": "image", "source": {"type": "data", "mimeType": "image/png",
                                                           "value": base64.encodebytes(PNG * 8).decode()}}],
     errors.MSG_IMAGE_INVALID),
    ("signature mismatch", [_data_image(b"\xff\xd8\xff" + b"\0" * 16)], errors.MSG_IMAGE_INVALID),
    ("empty image", [_data_image(b"")], errors.MSG_IMAGE_INVALID),
    ("svg", [_data_image(b"<svg/>", "image/svg+xml")], errors.MSG_IMAGE_TYPE),
    ("no mime", [{"type": "image", "source": {"type": "data", "value": base64.b64encode(PNG).decode()}}],
     errors.MSG_IMAGE_TYPE),
    ("value not a string", [{"type": "image", "source": {"type": "data", "mimeType": "image/png", "value": 7}}],
     errors.MSG_IMAGE_INVALID),
    ("remote url", [{"type": "image", "source": {"type": "url", "value": "http://169.254.169.254/"}}],
     errors.MSG_REMOTE_MEDIA),
    ("file url", [{"type": "binary", "mimeType": "image/png", "url": "file:///etc/passwd"}], errors.MSG_REMOTE_MEDIA),
    ("binary not image", [{"type": "binary", "mimeType": "application/pdf", "data": "JVBERi0="}],
     errors.MSG_UNSUPPORTED_CONTENT),
    ("webp too short", [_data_image(b"RIFF\0\0\0\0WEB", "image/webp")], errors.MSG_IMAGE_INVALID),
]


@pytest.mark.parametrize("name,parts,message", IMAGE_CASES, ids=[case[0] for case in IMAGE_CASES])
def test_bad_images_are_invalid_input(big_env, name, parts, message):
    status, headers, body = big_env.call(_image_body(big_env, parts, "run-img-" + name.replace(" ", "-")))
    assert status == 400 and assert_contract(status, headers, body) == "INVALID_INPUT"
    assert json.loads(body)["error"]["message"] == message


@pytest.mark.parametrize("filename", ["../../etc/passwd", "a/b.png", "CON.png", "aux.txt", "nul", "..", "x\x00.png",
                                      "a\\b.png", "\x1b[31m.png", "x" * 300])
def test_hostile_image_filenames_are_replaced(big_env, filename):
    part = _data_image(PNG, metadata={"filename": filename})
    request = inputs.parse_run_request(_image_body(big_env, [part], "run-fn"), big_env.app.settings.allowed_cwds)
    assert request.user_message.parts[1]["data"]["filename"] == "agui-image-1"


def test_oversized_image_body_is_413_before_decoding(env):
    status, headers, body = env.call(_image_body(env, [_data_image(PNG + b"\0" * SMALL_LIMIT)], "run-img-413"))
    assert status == 413 and assert_contract(status, headers, body) == "REQUEST_TOO_LARGE"


def test_ids_are_never_echoed_into_response_headers_on_the_wire(adapter_factory):
    adapter = adapter_factory()
    injected = "%0D%0ASet-Cookie:%20injected=1%0D%0AX-Injected:%201"
    attempts = [
        ("POST", CANCEL_PATH % injected, json.dumps({"threadId": "t", "rosInvocationId": "i"})),
        ("POST", CANCEL_PATH % "e1", json.dumps({"threadId": "t\r\nX-Injected: 1", "rosInvocationId": "i"})),
        ("POST", "/", json.dumps(adapter.body("hi", thread="t\r\nSet-Cookie: injected=1"))),
        ("POST", "/", json.dumps(adapter.body("hi", run="r\nX-Injected: 1"))),
        ("GET", "/" + injected, ""),
        ("POST", "/?x=" + injected, json.dumps(adapter.body("hi", thread="hdr-ok"))),
    ]
    for method, path, payload in attempts:
        data = payload.encode()
        status, headers, body, block = _exchange(adapter.server.port, _head(
            "Content-Length: %d\r\n" % len(data), method, path), [data])
        assert "injected" not in block.lower() and "set-cookie" not in block.lower(), block
        assert status < 500
        if not headers.get("Content-Type", "").startswith("text/event-stream"):
            _check_wire(status, headers, body)

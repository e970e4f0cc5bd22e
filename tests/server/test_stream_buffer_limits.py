"""--stream-buffer-bytes at the far end of what it accepts: the server must still take connections."""
import requests

from iaccode_agui.server.serving import ServerThread, waitress_limits


def _hello(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"ok"]


def test_a_stream_buffer_larger_than_a_socket_option_can_hold_still_serves():
    # 8 GiB: half of it (the send buffer option) no longer fits the C int setsockopt takes.
    server = ServerThread(_hello, host="127.0.0.1", port=0, **waitress_limits(1000, 8 * 1024 ** 3))
    try:
        for _ in range(2):
            assert requests.get(server.url, timeout=10).text == "ok"
    finally:
        server.stop()

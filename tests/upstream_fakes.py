"""A real HTTP upstream for client tests: a waitress runner and a fake A2A runtime that misbehaves on demand.

Only real sockets show what matters for the client: chunk boundaries, cut connections, timeouts, aborts.
"""
import contextlib
import io
import json
import logging
import threading
import time
from typing import Any, Iterator

from waitress import wasyncore
from waitress.server import create_server


@contextlib.contextmanager
def serve_wsgi(app: Any, threads: int = 16, quiet: bool = True) -> Iterator[str]:
    """Serve ``app`` on 127.0.0.1 (free port) in a daemon thread; yields the base URL ending in ``/``.

    The event loop runs in short slices and the server tears itself down from its own thread: closing
    its sockets from the test thread while ``select`` watches them makes the loop die with EBADF.
    ``quiet`` mutes waitress' logger, because some scenarios make the app raise on purpose to cut a
    connection and those tracebacks are only noise.
    """
    logger = logging.getLogger("waitress")
    previous = logger.level
    if quiet:
        logger.setLevel(logging.CRITICAL)
    server_map: dict = {}
    server = create_server(app, map=server_map, host="127.0.0.1", port=0, threads=threads, channel_timeout=60)
    stopping = threading.Event()

    def run() -> None:
        try:
            while not stopping.is_set():
                wasyncore.loop(timeout=0.05, map=server_map, count=1)
        finally:
            server.close()
            server.task_dispatcher.shutdown(timeout=2)
            wasyncore.close_all(server_map)

    thread = threading.Thread(target=run, name="fake-upstream", daemon=True)
    thread.start()
    try:
        yield "http://127.0.0.1:%d/" % int(server.effective_port)
    finally:
        stopping.set()
        thread.join(5)
        logger.setLevel(previous)


TOKEN = "secret-token"
TASK = {"id": "t-1", "contextId": "c-1", "status": {"state": "TASK_STATE_SUBMITTED"}}
RESULTS = [
    {"task": TASK},
    {"statusUpdate": {"taskId": "t-1", "contextId": "c-1", "status": {
        "state": "TASK_STATE_WORKING", "message": {"role": "ROLE_AGENT", "parts": [{"text": "正在部署资源栈"}]}}}},
    {"artifactUpdate": {"taskId": "t-1", "artifact": {"artifactId": "a", "parts": [{"text": "x"}]}}},
    {"statusUpdate": {"taskId": "t-1", "contextId": "c-1", "status": {"state": "TASK_STATE_INPUT_REQUIRED"}}},
]
NOT_FOUND = {"code": -32001, "message": "Task not found", "data": [{"reason": "TASK_NOT_FOUND"}]}


def _frame(result, rpc_id):
    body = json.dumps({"result": result, "id": rpc_id, "jsonrpc": "2.0"}, ensure_ascii=False)
    return ("data: %s\r\n\r\n" % body).encode("utf-8")


class FakeUpstream:
    """WSGI app standing in for the runtime; each streaming ``params.scenario`` is one wire behaviour."""

    def __init__(self):
        self.requests = []
        self.stop = threading.Event()
        self.sent_at = []  # monotonic times at which the paced scenario handed each frame to waitress

    def __call__(self, environ, start_response):
        length = int(environ.get("CONTENT_LENGTH") or 0)
        raw = environ["wsgi.input"].read(length) if length else b""
        body = json.loads(raw) if raw else None
        headers = {k[5:].replace("_", "-").lower(): v for k, v in environ.items() if k.startswith("HTTP_")}
        if environ.get("CONTENT_TYPE"):
            headers["content-type"] = environ["CONTENT_TYPE"]
        self.requests.append({"path": environ["PATH_INFO"], "verb": environ["REQUEST_METHOD"],
                              "query": environ.get("QUERY_STRING", ""), "headers": headers, "body": body,
                              "port": environ.get("REMOTE_PORT")})
        if headers.get("authorization") != "Bearer " + TOKEN:
            return self._json(start_response, "401 Unauthorized", {"error": "Unauthorized"})
        path = environ["PATH_INFO"]
        if path == "/" and environ["REQUEST_METHOD"] == "POST":
            return self._rpc(body, start_response)
        if path == "/health":
            return self._json(start_response, "200 OK", {"status": "healthy", "version": "0.16.0"})
        if path == "/.well-known/agent-card.json":
            return self._json(start_response, "200 OK", {"name": "fake", "capabilities": {"streaming": True}})
        if path == "/iac-code/session/ensure-restored":
            return self._restore(body, start_response)
        if path == "/iac-code/pipeline/state":
            query = dict(p.split("=", 1) for p in environ["QUERY_STRING"].split("&"))
            if query["taskId"] == "none":
                return self._json(start_response, "404 Not Found", {"error": "A2A pipeline state not found"})
            if query["taskId"] == "list":
                return self._json(start_response, "200 OK", [])
            return self._json(start_response, "200 OK", {"snapshot": {"lastSequence": 9}, "query": query})
        return self._json(start_response, "404 Not Found", {"error": "nope"})

    @staticmethod
    def _json(start_response, status, obj, content_type="application/json"):
        data = json.dumps(obj, ensure_ascii=False).encode("utf-8")
        start_response(status, [("Content-Type", content_type), ("Content-Length", str(len(data)))])
        return [data]

    def _restore(self, body, start_response):
        sid = body["sessionId"]
        table = {
            "current": ("200 OK", {"status": "current"}),
            "restored": ("200 OK", {"status": "restored"}),
            "odd": ("200 OK", {"status": "maybe"}),
            "lost": ("404 Not Found", {"error": "session not found"}),
            "busy": ("409 Conflict", {"error": {"code": "SESSION_BACKUP_NOT_READY", "retryable": True}}),
            "busy-top": ("409 Conflict", {"code": "SESSION_BACKUP_NOT_READY", "retryable": True}),
            "busy-final": ("409 Conflict", {"error": {"code": "SESSION_BACKUP_NOT_READY", "retryable": False}}),
            "boom": ("500 Internal Server Error", {"error": "boom"}),
        }
        status, obj = table[sid]
        return self._json(start_response, status, obj)

    def _rpc(self, body, start_response):
        method, rpc_id, params = body["method"], body["id"], body.get("params") or {}
        if method == "GetTask":
            if params["id"] == "missing":
                return self._json(start_response, "200 OK", {"error": NOT_FOUND, "id": rpc_id, "jsonrpc": "2.0"})
            task = dict(TASK, id=params["id"], historyLength=params["historyLength"])
            return self._json(start_response, "200 OK", {"result": task, "id": rpc_id, "jsonrpc": "2.0"})
        if method == "CancelTask":
            task = dict(TASK, id=params["id"], status={"state": "TASK_STATE_CANCELED"})
            return self._json(start_response, "200 OK", {"result": task, "id": rpc_id, "jsonrpc": "2.0"})
        if method == "SendMessage":
            mode = params.get("mode")
            if mode == "text":
                start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "4")])
                return [b"oops"]
            if mode == "http500":
                return self._json(start_response, "500 Internal Server Error", {"detail": "x"})
            if mode == "wrong-id":
                return self._json(start_response, "200 OK", {"result": {}, "id": "other", "jsonrpc": "2.0"})
            if mode == "no-result":
                return self._json(start_response, "200 OK", {"id": rpc_id, "jsonrpc": "2.0"})
            return self._json(start_response, "200 OK", {"result": {"task": TASK}, "id": rpc_id, "jsonrpc": "2.0"})
        if method == "SubscribeToTask":
            start_response("200 OK", [("Content-Type", "text/event-stream; charset=utf-8")])
            return [_frame({"task": dict(TASK, id=params["id"])}, rpc_id)]
        if method == "SendStreamingMessage":
            return self._stream(params.get("scenario", "normal"), rpc_id, start_response)
        return self._json(start_response, "200 OK", {"error": {"code": -32601, "message": "Method not found"},
                                                     "id": rpc_id, "jsonrpc": "2.0"})

    def _stream(self, scenario, rpc_id, start_response):
        if scenario == "json-error":
            return self._json(start_response, "200 OK", {"error": NOT_FOUND, "id": rpc_id, "jsonrpc": "2.0"})
        if scenario == "json-result":
            return self._json(start_response, "200 OK", {"result": {"message": {"messageId": "m"}}, "id": rpc_id,
                                                         "jsonrpc": "2.0"})
        if scenario == "html":
            start_response("200 OK", [("Content-Type", "text/html")])
            return [b"<html></html>"]
        start_response("200 OK", [("Content-Type", "text/event-stream; charset=utf-8"), ("Cache-Control", "no-store")])
        return getattr(self, "_gen_" + scenario.replace("-", "_"))(rpc_id)

    def _gen_normal(self, rpc_id):
        for i, result in enumerate(RESULTS):
            yield _frame(result, rpc_id)
            if i % 2 == 0:
                yield b": ping - 2026-11-30 11:21:46.039076+00:00\r\n\r\n"

    def _gen_split_bytes(self, rpc_id):
        # The same frames as separate network writes cut at awkward places: inside "\r\n" and inside
        # multi-byte UTF-8 characters.
        wire = b"".join(_frame(r, rpc_id) for r in RESULTS)
        cut = wire.index("部".encode("utf-8")) + 1
        for piece in (wire[:5], wire[5:cut], wire[cut:cut + 1], wire[cut + 1:-1], wire[-1:]):
            yield piece
            time.sleep(0.01)

    def _gen_slow(self, rpc_id):
        yield _frame(RESULTS[0], rpc_id)
        self.stop.wait(30)

    def _gen_paced(self, rpc_id):
        for i in range(3):
            if i:
                time.sleep(0.3)
            self.sent_at.append(time.monotonic())
            yield _frame(RESULTS[i], rpc_id)

    def _gen_error_event(self, rpc_id):
        yield _frame(RESULTS[0], rpc_id)
        err = json.dumps({"error": {"code": -32603, "message": "agent exploded"}, "id": rpc_id, "jsonrpc": "2.0"})
        yield ("event: error\r\ndata: %s\r\n\r\n" % err).encode("utf-8")

    def _gen_error_key(self, rpc_id):
        err = json.dumps({"error": {"code": -32004, "message": "terminal"}, "id": rpc_id, "jsonrpc": "2.0"})
        yield ("data: %s\r\n\r\n" % err).encode("utf-8")

    def _gen_truncated_json(self, rpc_id):
        yield _frame(RESULTS[0], rpc_id)
        yield b'data: {"result": {"ta\r\n\r\n'

    def _gen_missing_result(self, rpc_id):
        yield ('data: {"id": "%s", "jsonrpc": "2.0"}\r\n\r\n' % rpc_id).encode("utf-8")

    def _gen_half_event(self, rpc_id):
        yield _frame(RESULTS[0], rpc_id)
        yield b'data: {"result": {"task": {}}, "id": '  # the body then ends cleanly, mid-event

    def _gen_bad_utf8(self, rpc_id):
        yield b'data: {"result": "\xff"}\r\n\r\n'

    def _gen_cut(self, rpc_id):
        yield _frame(RESULTS[0], rpc_id)
        time.sleep(0.05)
        raise RuntimeError("simulated crash: waitress drops the connection without the last chunk")


class CountingRuntime:
    """A runtime (the demo's) behind a wrapper that records every upstream call and can replace its card.

    ``calls`` holds ``(verb, path, JSON-RPC method or query)`` in arrival order.  ``card_status`` (e.g.
    ``"404 Not Found"``) answers the agent card instead of the runtime, after ``card_delay`` seconds.
    """

    def __init__(self, runtime, card_status=None, card_delay=0.0):
        self.runtime = runtime
        self.card_status = card_status
        self.card_delay = card_delay
        self.calls = []

    def __call__(self, environ, start_response):
        path = environ["PATH_INFO"]
        length = int(environ.get("CONTENT_LENGTH") or 0)
        raw = environ["wsgi.input"].read(length) if length else b""
        environ["wsgi.input"] = io.BytesIO(raw)
        detail = json.loads(raw).get("method") if raw else environ.get("QUERY_STRING", "")
        self.calls.append((environ["REQUEST_METHOD"], path, detail))
        if path == "/.well-known/agent-card.json" and self.card_status is not None:
            time.sleep(self.card_delay)
            return FakeUpstream._json(start_response, self.card_status, {"error": "no agent card"})
        return self.runtime(environ, start_response)

    def count(self, path):
        return sum(1 for call in self.calls if call[1] == path)

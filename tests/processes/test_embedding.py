"""``create_app(settings)`` mounted under ``/agui`` in a host WSGI stack, served by two different servers.

The adapter must not assume it owns the URL root or that it runs on waitress: the same stack is served by
waitress and by the stdlib ``wsgiref`` server (threaded), which has no ``waitress.client_disconnected``
probe, so there a vanished client is only noticed when a heartbeat write fails.  The stack below is the
example docs/operations.rst gives to embedders; its ``app.py`` also runs as a process, stopped by Ctrl-C.

Live streams are read with ``http.client``'s ``read1``: wsgiref answers HTTP/1.0 with a close-delimited
body, which ``requests``' ``iter_content`` only hands over once the connection closes, while a browser's
``EventSource`` (and ``read1``) sees each frame as it is written.
"""
import http.client
import json
import os
import signal
import subprocess
import sys
import socketserver
import threading
import time
import uuid
from typing import Any, Callable, Dict, Iterator, List, Optional
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import pytest
import requests
from werkzeug.middleware.dispatcher import DispatcherMiddleware

import iaccode_agui
from iaccode_agui.config import Settings
from iaccode_agui.server.serving import ServerThread
from iaccode_agui.state.store import ThreadStore
from iaccode_agui.server.upstream import free_loopback_port
from tests.adapter_process import post_run, run_body
from tests.agui_checker import check_stream, parse_sse, types
from tests.harness import SSEReader, interrupt_of, session_of, text_of, wait_for
from tests.docs.test_readme import ROOT, _literal_blocks, doc

PREFIX = "/agui"


def host_site(environ: Dict[str, Any], start_response: Callable[..., Any]) -> List[bytes]:
    """The embedding application's own pages, which keep the root."""
    start_response("200 OK", [("Content-Type", "text/plain; charset=utf-8")])
    return [b"host site at %s" % environ.get("PATH_INFO", "").encode("latin-1")]


class ThreadingWSGIServer(socketserver.ThreadingMixIn, WSGIServer):
    """wsgiref's server handles one request at a time; every open SSE stream needs its own thread."""

    daemon_threads = True


class QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's parameter name
        pass


class WsgirefServer:
    def __init__(self, app: Any) -> None:
        self.httpd = make_server("127.0.0.1", 0, app, server_class=ThreadingWSGIServer, handler_class=QuietHandler)
        self.port = self.httpd.server_port
        self.url = "http://127.0.0.1:%d/" % self.port
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                       name="wsgiref-loop", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


class WaitressServer:
    def __init__(self, app: Any) -> None:
        self.server = ServerThread(app, threads=16, slice_seconds=0.05)
        self.port = self.server.port
        self.url = self.server.url

    def stop(self) -> None:
        self.server.stop()


class Site:
    """The host stack on one server, plus request helpers that always go through the prefix."""

    def __init__(self, app: Any, server: Any, workspace: str) -> None:
        self.app = app
        self.server = server
        self.base = server.url.rstrip("/") + PREFIX + "/"
        self.workspace = workspace

    def body(self, text: Optional[str], *, thread: str, run: Optional[str] = None, ros: str = "inv-1",
             resume: Optional[List[Dict[str, Any]]] = None) -> Dict[str, Any]:
        messages = [] if text is None else [{"id": "m-" + uuid.uuid4().hex[:8], "role": "user", "content": text}]
        body: Dict[str, Any] = {
            "threadId": thread, "runId": run or "run-" + uuid.uuid4().hex[:8], "state": {}, "messages": messages,
            "tools": [], "context": [],
            "forwardedProps": {"iacCode": {"schemaVersion": 1, "rosInvocationId": ros, "cwd": self.workspace}}}
        if resume is not None:
            body["resume"] = resume
        return body

    def post(self, body: Dict[str, Any], path: str = "", url: Optional[str] = None,
             timeout: float = 30) -> requests.Response:
        return requests.post(url or self.base + path, data=json.dumps(body), timeout=timeout,
                             headers={"Content-Type": "application/json", "Accept": "text/event-stream"})

    def run(self, body: Dict[str, Any], url: Optional[str] = None) -> List[Dict[str, Any]]:
        response = self.post(body, url=url)
        assert response.status_code == 200, response.text
        assert response.headers["Content-Type"].startswith("text/event-stream")
        return check_stream(response.content)


class LiveStream:
    """A POSTed run read frame by frame as the bytes arrive."""

    def __init__(self, site: Site, body: Dict[str, Any]) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", site.server.port, timeout=10)
        self.conn.request("POST", PREFIX + "/", body=json.dumps(body),
                          headers={"Content-Type": "application/json", "Accept": "text/event-stream"})
        self.response = self.conn.getresponse()
        assert self.response.status == 200, self.response.read()
        self.raw = b""
        self.events: List[Dict[str, Any]] = []

    def until(self, stop_type: str, limit: float = 10.0) -> List[Dict[str, Any]]:
        deadline = time.monotonic() + limit
        while not any(e["type"] == stop_type for e in self.events):
            assert time.monotonic() < deadline, "no %s within %.1f s: %r" % (stop_type, limit, types(self.events))
            chunk = self.response.read1(65536)
            if not chunk:
                break
            self.raw += chunk
            complete = self.raw[:self.raw.rfind(b"\n\n") + 2] if b"\n\n" in self.raw else b""
            self.events = parse_sse(complete)[0]
        return self.events

    def close(self) -> None:
        self.response.close()
        self.conn.close()


SERVERS = {"waitress": WaitressServer, "wsgiref": WsgirefServer}


@pytest.fixture(params=sorted(SERVERS))
def site(request, demo, workspace, tmp_path) -> Iterator[Site]:
    settings = Settings(a2a_url=demo.url, a2a_token=demo.token, state_dir=str(tmp_path / "state"),
                        allowed_cwds=(workspace,), heartbeat_interval=0.2, disconnect_poll=0.1)
    app = iaccode_agui.create_app(settings)
    stack = DispatcherMiddleware(host_site, {PREFIX: app})
    server = SERVERS[request.param](stack)
    try:
        yield Site(app, server, workspace)
    finally:
        app.manager.cancel_all()
        app.manager.wait_idle(5)
        server.stop()
        app.close(0)


def test_prefix_routes_and_host_site_untouched(site):
    root = site.server.url
    assert requests.get(root, timeout=5).text == "host site at /"
    assert requests.get(root + "about", timeout=5).text == "host site at /about"
    health = requests.get(site.base + "health", timeout=5)
    assert health.status_code == 200 and health.json()["protocol"] == "ag-ui"
    metrics = requests.get(site.base + "metrics", timeout=5)
    assert metrics.status_code == 200 and "agui_active_runs" in metrics.text
    missing = requests.get(site.base + "nope", timeout=5)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "NOT_FOUND"
    # the adapter's routes exist only under the prefix
    assert requests.get(root + "health", timeout=5).text == "host site at /health"


@pytest.mark.parametrize("mount_url", ["slash", "bare"])
def test_normal_run_through_the_prefix(site, demo, mount_url):
    url = site.base if mount_url == "slash" else site.base.rstrip("/")
    events = site.run(site.body("hello there", thread="n-" + mount_url), url=url)
    kinds = types(events)
    assert kinds[0] == "RUN_STARTED" and kinds[-1] == "RUN_FINISHED"
    assert events[-1]["outcome"] == {"type": "success"}
    assert "You said: hello there" in text_of(events)
    assert ("SendStreamingMessage", None) in demo.runtime.requests_log


def test_permission_interrupt_and_resume_through_the_prefix(site, demo, workspace):
    first = site.run(site.body("please write a file", thread="p1", run="r1"))
    interrupt = interrupt_of(first)
    assert interrupt["reason"] == "tool_call"
    answer = [{"interruptId": interrupt["id"], "status": "resolved", "payload": {"decision": "allow_once"}}]
    resumed = site.run(site.body(None, thread="p1", run="r2", resume=answer))
    assert resumed[-1]["outcome"] == {"type": "success"}
    assert session_of(resumed)["executionId"] == session_of(first)["executionId"]
    result = next(e for e in resumed if e["type"] == "TOOL_CALL_RESULT")
    assert result["toolCallId"] == interrupt["toolCallId"]
    assert os.path.exists(os.path.join(workspace, "hello.txt"))
    assert len(demo.runtime.tool_executions) == 1


def test_cancel_extension_through_the_prefix(site):
    reader = LiveStream(site, site.body("slow please", thread="c1", ros="inv-c"))
    try:
        events = reader.until("TEXT_MESSAGE_CONTENT")
        execution_id = session_of(events)["executionId"]
        cancel = site.post({"threadId": "c1", "rosInvocationId": "inv-c"},
                           path="extensions/iac-code/v1/executions/%s/cancel" % execution_id)
        assert cancel.status_code == 200 and cancel.json()["status"] == "cancelled"
        events = reader.until("RUN_ERROR")
        assert events[-1]["code"] == "CANCELLED"
        check_stream(reader.raw)
    finally:
        reader.close()


def test_sse_streams_before_the_run_ends_and_disconnect_cancels(site, demo):
    """The slow scenario takes 60 x 0.2 s; its first delta must arrive long before that."""
    started = time.monotonic()
    reader = LiveStream(site, site.body("slow please", thread="s1"))
    events = reader.until("TEXT_MESSAGE_CONTENT", limit=5)
    first_delta_after = time.monotonic() - started
    assert first_delta_after < 5 and "RUN_FINISHED" not in types(events)
    task_id = session_of(events)["taskId"]
    assert site.app.manager.active_count() == 1
    disconnected = time.monotonic()
    reader.close()
    # wsgiref only learns of the disconnect when a heartbeat (0.2 s) or delta write fails
    assert wait_for(lambda: ("CancelTask", task_id) in demo.runtime.requests_log, 5)
    assert time.monotonic() - disconnected < 4
    assert wait_for(lambda: site.app.manager.active_count() == 0 and site.app.open_streams == 0, 5)
    state = site.app.store.load("s1")
    assert state.active_run is None and state.execution.execution_id in state.terminal_execution_ids


def test_the_readme_example_stops_cleanly_on_ctrl_c(tmp_path):
    """The ``app.py`` of docs/operations.rst as a process: Ctrl-C during a run ends that run with its ``RUN_ERROR`` on the
    open stream, writes the thread down as idle and exits 0 (only the port and the drain are changed)."""
    example = next(block for block in _literal_blocks(doc("operations.rst")) if "DispatcherMiddleware(site" in block)
    port = free_loopback_port()
    assert "port=8080" in example
    (tmp_path / "app.py").write_text(example.replace("port=8080", "port=%d" % port).replace(
        "agui.close(10)", "agui.close(0.5)"))
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "app.py"], cwd=str(tmp_path), env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    base = "http://127.0.0.1:%d/agui/" % port
    try:
        assert wait_for(lambda: _answers(base + "health"), 20), proc.stdout.read() if proc.poll() else ""
        reader = SSEReader(post_run(base, run_body("/tmp", "slow please", "embedded")))
        reader.until("TEXT_MESSAGE_CONTENT")
        proc.send_signal(signal.SIGINT)
        events = reader.until("RUN_ERROR", limit=15)
        assert proc.wait(15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
    output = proc.stdout.read().decode()
    assert events[-1]["code"] == "CANCELLED", events[-1]
    assert "Traceback" not in output and "still running" not in output, output
    state = ThreadStore(str(tmp_path / "agui-state")).load("embedded")
    assert state is not None and state.active_run is None


def _answers(url: str) -> bool:
    try:
        return requests.get(url, timeout=2).status_code == 200
    except requests.RequestException:
        return False

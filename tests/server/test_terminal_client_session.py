"""The terminal client names its thread in ``X-AgentCore-Session-ID`` on every request.

A load balancer in front of several hosts hashes that header to keep a thread on one host (the documented
nginx deployment), so a run, its resumes, its re-attaches and its cancel must all carry it.  A recording
WSGI layer in front of a real adapter shows what arrived.
"""
import io
from typing import Any, Callable, Iterable, List, Optional, Tuple

import pytest

from iaccode_agui.client import main
from iaccode_agui.client.transport import session_header
from iaccode_agui.server.serving import ServerThread
from tests.processes.test_terminal_client import Client, InterruptingOutput
from tests.tcp_relay import TcpRelay
from tests.server.test_terminal_client_reattach import cut_after_first_event


class HeaderRecorder:
    """Passes every request to the adapter and records (method, path, X-AgentCore-Session-ID or None)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.seen: List[Tuple[str, str, Optional[str]]] = []

    def __call__(self, environ: dict, start_response: Callable) -> Iterable[bytes]:
        self.seen.append((environ["REQUEST_METHOD"], environ.get("PATH_INFO", ""),
                          environ.get("HTTP_X_AGENTCORE_SESSION_ID")))
        return self.app(environ, start_response)


class Recorded:
    """The adapter's app served again behind the recorder; ``url``/``workspace`` as the Client helper wants."""

    def __init__(self, adapter: Any) -> None:
        self.recorder = HeaderRecorder(adapter.app)
        self.server = ServerThread(self.recorder, threads=8, slice_seconds=0.05)
        self.url = self.server.url
        self.port = self.server.port
        self.workspace = adapter.workspace

    def stop(self) -> None:
        self.server.stop()


@pytest.fixture
def recorded(adapter_factory):
    made = Recorded(adapter_factory(reconnect_grace=5.0))
    try:
        yield made
    finally:
        made.stop()


def test_run_and_resume_name_the_thread(recorded):
    run = Client(recorded, "write a file", answers=["1"], thread="pinned-1")
    assert run.code == 0, run.text
    assert recorded.recorder.seen == [("POST", "/", "pinned-1"), ("POST", "/", "pinned-1")]
    assert "resume" in run.transport.bodies[1]


def test_the_cancel_names_the_thread(recorded):
    out = InterruptingOutput("slow-0")
    run = Client(recorded, "slow", out=out, thread="pinned-2")
    assert out.fired and run.code == 130
    cancels = [entry for entry in recorded.recorder.seen if entry[1].endswith("/cancel")]
    assert len(cancels) == 1 and cancels[0][2] == "pinned-2", recorded.recorder.seen
    assert all(entry[2] == "pinned-2" for entry in recorded.recorder.seen)


@pytest.mark.slow
def test_a_reattach_names_the_thread(recorded):
    proxy = TcpRelay("127.0.0.1", recorded.port, cut_first_when=cut_after_first_event)
    try:
        out = io.StringIO()
        code = main(["--url", proxy.url, "--cwd", recorded.workspace, "--thread", "pinned-3", "sleep 1"],
                    input_fn=lambda prompt: "", out=out)
    finally:
        proxy.close()
    assert code == 0 and proxy.cuts == 1, out.getvalue()
    assert recorded.recorder.seen == [("POST", "/", "pinned-3"), ("POST", "/", "pinned-3")]


def test_a_thread_id_that_cannot_be_a_header_goes_without_it(recorded):
    assert session_header("t-1") == {"X-AgentCore-Session-ID": "t-1"}
    assert session_header("会话-1") == {} and session_header("a\nb") == {} and session_header(None) == {}
    run = Client(recorded, "hello", thread="会话-1")
    assert run.code == 0, run.text
    assert recorded.recorder.seen == [("POST", "/", None)]

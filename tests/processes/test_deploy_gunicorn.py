"""gunicorn for real: the recipe in ``iaccode_agui/deploy/`` with 2 workers on one state dir and one runtime process.

The scripted runtime runs as its own process (``python -m iaccode_agui.demo``), as ``iac-code a2a`` would.
Each test holds one pinned connection per worker (the test config logs which worker pid served a probe
request), so "on the other worker" is a fact checked per request, not a hope about load balancing.
"""
import json
import os
import time
import uuid
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pytest

from iaccode_agui.config import ConfigError
from iaccode_agui.state.store import ThreadStore
from iaccode_agui.wsgi import create_app, settings_from_args
from tests.agui_checker import check_sequence, validate_models
from tests.tools_loader import load_tool

procs = load_tool("toolkit.deploy")
TOKEN = "gunicorn-runtime-token"
GRACE = 3.0     # --reconnect-grace: a run whose client hung up waits this long for a re-attach

pytest.importorskip("gunicorn", reason="gunicorn is a test dependency (setup.cfg test extra)")


class Deployment:
    def __init__(self, base: str) -> None:
        self.base = base
        self.workspace = os.path.realpath(os.path.join(base, "ws"))
        self.state_dir = os.path.join(base, "state")
        os.makedirs(self.workspace)
        self.runtime = procs.RuntimeProcess(base, TOKEN, slow_interval=0.1, allowed_cwds=[self.workspace])
        self.env = {"IAC_CODE_AGUI_A2A_URL": self.runtime.url, "IAC_CODE_AGUI_A2A_TOKEN": TOKEN,
                    "IAC_CODE_AGUI_STATE_DIR": self.state_dir, "IAC_CODE_AGUI_ALLOWED_CWDS": self.workspace,
                    "AGUI_GUNICORN_THREADS": "16", "AGUI_ADAPTER_ARGS": "--reconnect-grace %g" % GRACE}
        self.gunicorn = procs.GunicornProcess(base, self.env, workers=2)

    def body(self, text: Optional[str], thread: str, resume: Optional[List[Dict[str, Any]]] = None) -> Dict[str, Any]:
        messages = [] if text is None else [{"id": "m-" + uuid.uuid4().hex[:8], "role": "user", "content": text}]
        body: Dict[str, Any] = {"threadId": thread, "runId": "run-" + uuid.uuid4().hex[:10], "state": {},
                                "messages": messages, "tools": [], "context": [],
                                "forwardedProps": {"iacCode": {"schemaVersion": 1, "rosInvocationId": "inv-" + thread,
                                                               "cwd": os.path.join(self.workspace, thread)}}}
        if resume is not None:
            body["resume"] = resume
        os.makedirs(os.path.join(self.workspace, thread), exist_ok=True)
        return body


@pytest.fixture(scope="module")
def deployment(tmp_path_factory) -> Iterator[Deployment]:
    deployment = Deployment(str(tmp_path_factory.mktemp("gunicorn")))
    try:
        yield deployment
    finally:
        status = deployment.gunicorn.stop()
        deployment.runtime.stop()
    assert status == 0, deployment.gunicorn.log()[-3000:]


@pytest.fixture
def workers(deployment) -> Iterator[Tuple[Any, Any]]:
    """(owner, other): one pinned connection on each of the two workers."""
    found = procs.connections_on_every_worker(deployment.gunicorn)
    pair = tuple(found.values())
    assert pair[0].pid != pair[1].pid
    yield pair
    for conn in pair:
        conn.close()


def _clean(events: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    return [{k: v for k, v in e.items() if k != "_id"} for e in events if e["type"] != ":"]


class Stream:
    """A run's SSE response read incrementally; ``rest()`` reads to the end and checks conformance."""

    def __init__(self, response: Any) -> None:
        assert response.status == 200, (response.status, response.read())
        self.response = response
        self.events: List[Dict[str, Any]] = []
        self._iter = procs.sse_events(response)

    def until(self, event_type: str) -> Dict[str, Any]:
        for event in self._iter:
            self.events.append(event)
            if event["type"] == event_type:
                return event
        raise AssertionError("stream ended without %s: %r" % (event_type, [e["type"] for e in self.events]))

    def rest(self) -> List[Dict[str, Any]]:
        self.events.extend(self._iter)
        events = _clean(self.events)
        validate_models(events)
        check_sequence(events)
        return events

    def session(self) -> Dict[str, Any]:
        return next(e["value"] for e in self.events if e["type"] == "CUSTOM" and e["name"] == "iac-code.session.v1")


def _run(conn: Any, body: Dict[str, Any]) -> List[Dict[str, Any]]:
    return Stream(conn.request("POST", "/", body)).rest()


def _error(response: Any) -> Tuple[int, str]:
    return response.status, json.loads(response.read())["error"]["code"]


# ---- every row of "any worker serves any request of a thread" ---------------------------------------------

def test_runs_are_admitted_on_both_workers(deployment, workers):
    for index, conn in enumerate(workers):
        events = _run(conn, deployment.body("hello", "admit-%d" % index))
        assert events[-1]["type"] == "RUN_FINISHED"
    assert {conn.pid for conn in workers} <= set(deployment.gunicorn.worker_pids())


def test_a_thread_busy_on_one_worker_is_busy_on_the_other(deployment, workers):
    owner, other = workers
    stream = Stream(owner.request("POST", "/", deployment.body("sleep 1", "busy")))
    stream.until("RUN_STARTED")
    assert _error(other.request("POST", "/", deployment.body("hello", "busy"))) == (409, "THREAD_BUSY")
    assert stream.rest()[-1]["type"] == "RUN_FINISHED"
    assert _run(other, deployment.body("hello", "busy"))[-1]["type"] == "RUN_FINISHED"


def test_an_interrupt_raised_on_one_worker_is_resumed_on_the_other(deployment, workers):
    owner, other = workers
    events = _run(owner, deployment.body("please write a file", "resume"))
    outcome = events[-1]["outcome"]
    assert outcome["type"] == "interrupt"
    answer = [{"interruptId": outcome["interrupts"][0]["id"], "status": "resolved",
               "payload": {"decision": "allow_once"}}]
    resumed = _run(other, deployment.body(None, "resume", resume=answer))
    assert resumed[-1]["type"] == "RUN_FINISHED" and resumed[-1].get("outcome", {}).get("type") != "interrupt"
    assert os.path.isfile(os.path.join(deployment.workspace, "resume", "hello.txt"))
    state = ThreadStore(deployment.state_dir).load("resume")
    assert state is not None and not state.execution.pending


def test_the_cancel_extension_on_the_other_worker_ends_the_owners_stream(deployment, workers):
    owner, other = workers
    stream = Stream(owner.request("POST", "/", deployment.body("slow", "cancel")))
    stream.until("TEXT_MESSAGE_CONTENT")
    session = stream.session()
    sent = time.monotonic()
    response = other.request("POST", "/extensions/iac-code/v1/executions/%s/cancel" % session["executionId"],
                             {"threadId": "cancel", "rosInvocationId": "inv-cancel"})
    assert response.status == 200 and b'"cancelled"' in response.read()
    events = stream.rest()
    took = time.monotonic() - sent
    assert events[-1]["type"] == "RUN_ERROR" and events[-1]["code"] == "CANCELLED", events[-1]
    print("owner's stream ended %.3f s after the cancel on the other worker" % took)
    assert took < 5, took
    assert deployment.runtime.get_task(session["taskId"])["status"]["state"] == "TASK_STATE_CANCELED"
    time.sleep(0.5)   # the owner's end of run must not cancel the task a second time
    assert deployment.runtime.calls("CancelTask", session["taskId"]) == 1


def test_an_agentcore_stop_on_the_other_worker_ends_the_owners_stream(deployment, workers):
    """POST /ag-ui/agent on one worker, /ag-ui/agent/stop on the other: 204, the owner's stream ends with
    RUN_ERROR RUN_CANCELLED within a second, and the A2A task is cancelled exactly once."""
    owner, other = workers
    body = deployment.body("slow", "ac-stop")
    header = {"X-AgentCore-Session-ID": "ac-stop"}
    stream = Stream(owner.request("POST", "/ag-ui/agent", body, headers=header))
    stream.until("TEXT_MESSAGE_CONTENT")
    task = stream.session()["taskId"]
    sent = time.monotonic()
    response = other.request("POST", "/ag-ui/agent/stop", {"threadId": "ac-stop", "runId": body["runId"]},
                             headers=header)
    response.read()
    assert response.status == 204
    events = stream.rest()
    took = time.monotonic() - sent
    print("owner's AgentCore stream ended %.3f s after the stop on the other worker" % took)
    assert events[-1]["type"] == "RUN_ERROR" and events[-1]["code"] == "RUN_CANCELLED", events[-1]
    assert took < 1.0, took
    time.sleep(0.5)
    assert deployment.runtime.calls("CancelTask", task) == 1
    again = other.request("POST", "/ag-ui/agent/stop", {"threadId": "ac-stop", "runId": body["runId"]},
                          headers=header)
    again.read()
    assert again.status == 204 and deployment.runtime.calls("CancelTask", task) == 1


def test_a_client_that_hangs_up_under_gunicorn_cancels_its_run_before_any_heartbeat(deployment, workers):
    """A silent run (no write can fail) and the recipe's 15 s heartbeat: the hang-up is seen by the probe of
    gunicorn's client socket within about the 1 s disconnect poll, and the run is cancelled when the
    reconnect grace runs out, long before any heartbeat could have told."""
    owner, other = workers
    stream = Stream(owner.request("POST", "/", deployment.body("sleep 12", "hangup")))
    stream.until("CUSTOM")
    task = stream.session()["taskId"]
    hung_up = time.monotonic()
    owner.close()
    state = None
    while time.monotonic() < hung_up + GRACE + 4:
        state = deployment.runtime.get_task(task)["status"]["state"]
        if state == "TASK_STATE_CANCELED":
            break
        time.sleep(0.05)
    print("task cancelled %.2f s after the hang-up" % (time.monotonic() - hung_up))
    assert state == "TASK_STATE_CANCELED" and time.monotonic() - hung_up >= GRACE * 0.9
    assert _run(other, deployment.body("hello", "hangup"))[-1]["type"] == "RUN_FINISHED"
    assert deployment.runtime.calls("CancelTask", task) == 1


def test_a_reattach_on_the_other_worker_tails_the_owners_run_to_its_end(deployment, workers):
    """The owner keeps streaming into its log; the other worker follows it live, and the owner's grace
    timer counts that client as attached (the run outlives the grace)."""
    owner, other = workers
    body = deployment.body("slow", "tail")
    stream = Stream(owner.request("POST", "/", body))
    while sum(1 for e in stream.events if e["type"] == "TEXT_MESSAGE_CONTENT") < 5:
        stream.until("TEXT_MESSAGE_CONTENT")
    last_id = stream.events[-1]["_id"]
    hung_up = time.monotonic()
    owner.close()
    time.sleep(0.3)
    tail = Stream(other.request("POST", "/", body, headers={"Last-Event-ID": str(last_id)}))
    stamps = []
    for event in procs.sse_events(tail.response):
        tail.events.append(event)
        stamps.append(time.monotonic())
    assert tail.events[0]["_id"] == last_id + 1 and tail.events[-1]["type"] == "RUN_FINISHED", tail.events[-1]
    events = _clean(stream.events + tail.events)
    validate_models(events)
    check_sequence(events)
    assert "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT") == "".join(
        "slow-%d " % n for n in range(60))
    print("tail: %d events over %.2f s, run ended %.2f s after the hang-up (grace %.0f s)" % (
        len(stamps), stamps[-1] - stamps[0], stamps[-1] - hung_up, GRACE))
    assert stamps[-1] - stamps[0] > 2.0            # live, as the owner wrote them, not one burst
    assert stamps[-1] - hung_up > GRACE             # the grace ran out meanwhile: the run was not cancelled


# ---- the recipe refuses what cannot stream ------------------------------------------------------------

def test_the_recipe_refuses_the_sync_worker_at_start_up(deployment, tmp_path):
    server = procs.GunicornProcess(str(tmp_path), deployment.env, config=procs.RECIPE, wait=False,
                                   args=["--worker-class", "sync", "--threads", "1"])
    assert server.proc.wait(30) != 0
    assert "use the gthread worker" in server.log()


def _load_refusal(server: Any) -> str:
    """The one line gunicorn printed for an application that refused to load; gunicorn stopped with 4."""
    assert server.proc.wait(30) == 4, server.log()
    log = server.log()
    assert "Traceback" not in log and "App failed to load" in log, log
    (line,) = [line for line in log.splitlines() if line.startswith("iaccode_agui: ")]
    return line


def test_the_application_refuses_the_sync_worker_as_it_loads(deployment, tmp_path):
    """Without the recipe's start-up check, the worker refuses to load the application: one line naming
    the worker class to use, before any request is accepted (not a 503 on the first request)."""
    server = procs.GunicornProcess(str(tmp_path), deployment.env, workers=1, config=os.devnull, wait=False,
                                   args=["--worker-class", "sync", "iaccode_agui.wsgi:create_app()"])
    line = _load_refusal(server)
    assert "sync worker" in line and "--worker-class gthread --threads N" in line, line


@pytest.mark.parametrize("preload", [False, True])
def test_a_missing_runtime_url_under_gunicorn_is_one_line(deployment, tmp_path, preload):
    env = {k: v for k, v in deployment.env.items() if k != "IAC_CODE_AGUI_A2A_URL"}
    args = ["--worker-class", "gthread", "--threads", "4", "iaccode_agui.wsgi:create_app()"]
    server = procs.GunicornProcess(str(tmp_path), env, workers=1, config=os.devnull, wait=False,
                                   args=(["--preload"] if preload else []) + args)
    if preload:   # refused in the arbiter, before any worker: a plain exit
        assert server.proc.wait(30) == 1
        lines = server.log().strip().splitlines()
        assert lines[-1].startswith("iaccode_agui: set IAC_CODE_AGUI_A2A_URL") and "Traceback" not in server.log()
        return
    assert "IAC_CODE_AGUI_A2A_URL" in _load_refusal(server)


# ---- the factory's settings ------------------------------------------------------------------------------

def test_the_factory_reads_flags_and_variables_and_refuses_what_the_server_owns(tmp_path):
    env = {"IAC_CODE_AGUI_A2A_URL": "http://127.0.0.1:9/", "IAC_CODE_AGUI_STATE_DIR": str(tmp_path),
           "IAC_CODE_AGUI_A2A_TOKEN": "t"}
    settings = settings_from_args(["--heartbeat-interval", "3", "--max-active-runs", "7"], env)
    assert (settings.a2a_url, settings.a2a_token, settings.heartbeat_interval, settings.max_active_runs) == (
        "http://127.0.0.1:9/", "t", 3.0, 7)
    assert settings.state_dir == os.path.realpath(str(tmp_path))
    with pytest.raises(ConfigError, match="IAC_CODE_AGUI_A2A_URL"):
        settings_from_args([], {"IAC_CODE_AGUI_STATE_DIR": str(tmp_path)})
    for flag in (["--port", "8000"], ["--threads=8"], ["--demo"]):
        with pytest.raises(ConfigError, match="does not apply under a WSGI server"):
            settings_from_args(flag, env)
    with pytest.raises(ConfigError, match="invalid adapter arguments"):
        settings_from_args(["--no-such-flag"], env)
    with pytest.raises(ConfigError, match="loopback"):
        settings_from_args(["--a2a-url", "http://example.com/"], env)


def test_the_factory_application_refuses_a_single_threaded_server_in_process(tmp_path):
    app = create_app(env={"IAC_CODE_AGUI_A2A_URL": "http://127.0.0.1:9/", "IAC_CODE_AGUI_STATE_DIR": str(tmp_path)})
    try:
        seen: List[str] = []
        body = b"".join(app({"REQUEST_METHOD": "GET", "PATH_INFO": "/health", "wsgi.multithread": False,
                             "HTTP_ACCEPT_LANGUAGE": "de", "SERVER_NAME": "x", "SERVER_PORT": "1",
                             "wsgi.url_scheme": "http"}, lambda status, headers: seen.append(status)))
        assert seen == ["503 SERVICE UNAVAILABLE"] and b"WSGI_SERVER_UNSUPPORTED" in body
        assert "Threads".encode() in body   # the German message
        seen.clear()
        b"".join(app({"REQUEST_METHOD": "GET", "PATH_INFO": "/health", "wsgi.multithread": True,
                      "SERVER_NAME": "x", "SERVER_PORT": "1", "wsgi.url_scheme": "http",
                      "wsgi.input": open(os.devnull, "rb")}, lambda status, headers: seen.append(status)))
        assert seen == ["200 OK"]
    finally:
        app.close(1)


def test_the_factory_checks_the_state_directory_before_serving(tmp_path):
    """As ``python -m iaccode_agui`` does at start-up: created 0700, a probe written, else a clear refusal."""
    env = {"IAC_CODE_AGUI_A2A_URL": "http://127.0.0.1:9/", "IAC_CODE_AGUI_STATE_DIR": str(tmp_path / "new" / "st")}
    create_app(env=env).close(1.0)
    assert os.stat(str(tmp_path / "new" / "st")).st_mode & 0o777 == 0o700
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    env["IAC_CODE_AGUI_STATE_DIR"] = str(blocker / "state")
    with pytest.raises(ConfigError) as caught:
        create_app(env=env)
    message = str(caught.value)
    assert str(blocker / "state") in message and "Not a directory" in message
    assert "IAC_CODE_AGUI_STATE_DIR" in message


def test_the_recipe_keeps_gunicorn_s_control_socket_out_of_home(deployment, tmp_path):
    """gunicorn 25.1+ opens a control socket in $XDG_RUNTIME_DIR or ~/.gunicorn by default; the recipe
    turns it off, so a shared host gets no socket in a user's home (older gunicorn ignores the setting)."""
    home, runtime_dir = tmp_path / "home", tmp_path / "xdg"
    home.mkdir()
    runtime_dir.mkdir()
    env = dict(deployment.env, HOME=str(home), XDG_RUNTIME_DIR=str(runtime_dir),
               IAC_CODE_AGUI_STATE_DIR=str(tmp_path / "state"))
    server = procs.GunicornProcess(str(tmp_path), env, workers=1, config=procs.RECIPE)
    try:
        found = [os.path.join(d, f) for d in (str(home), str(runtime_dir)) for d, _, files in os.walk(d)
                 for f in files]
        assert found == [], found
    finally:
        assert server.stop() == 0

"""Edges of the AgentCore routes found by an adversarial review: each test failed before its fix."""
import json

import requests
from werkzeug.test import Client

from iaccode_agui import errors
from iaccode_agui.app import AguiApp
from iaccode_agui.config import Settings
from tests.agentcore_helpers import ac_body

SESSION = "X-AgentCore-Session-ID"


def test_a_refused_key_on_the_agentcore_routes_names_x_api_key_at_the_http_layer_too(adapter_factory, workspace):
    """The server refuses a request whose head lacks credentials before reading its body; on the AgentCore
    routes that answer must say what those routes accept (the API key), as the application's own does."""
    adapter = adapter_factory(auth_token="tok", default_cwd=workspace)
    for path in ("ag-ui/agent", "ag-ui/agent/stop"):
        headers = {"Content-Type": "application/json", "x-api-key": "wrong", SESSION: "session-001"}
        response = requests.post(adapter.url + path, data=json.dumps(ac_body()), timeout=10, headers=headers)
        assert response.status_code == 401
        assert response.json()["error"] == {"code": "UNAUTHORIZED", "message": errors.MSG_UNAUTHORIZED_API_KEY}
    response = requests.post(adapter.url, data=json.dumps(ac_body()), timeout=10,
                             headers={"Content-Type": "application/json", "Authorization": "Bearer wrong"})
    assert response.json()["error"]["message"] == errors.MSG_UNAUTHORIZED


def test_every_agentcore_answer_echoes_the_session_header_even_when_the_body_is_unreadable(tmp_path, workspace):
    app = AguiApp(Settings(a2a_url="http://127.0.0.1:9/", state_dir=str(tmp_path / "state"),
                           allowed_cwds=(workspace,), default_cwd=workspace))
    try:
        client = Client(app)
        for data, content_type, code in ((b'{"threadId": "session-001"', "application/json", "INVALID_JSON"),
                                         (b"{}", "text/plain", "UNSUPPORTED_MEDIA_TYPE"),
                                         (b"[1]", "application/json", "INVALID_AG_UI_REQUEST")):
            for path in ("/ag-ui/agent", "/ag-ui/agent/stop"):
                response = client.post(path, data=data, content_type=content_type, headers={SESSION: "session-001"})
                assert response.status_code in (400, 415), (path, response.status_code)
                assert response.headers.get(SESSION) == "session-001", (path, code, response.get_json())
    finally:
        app.close(0)


def test_a_stop_on_another_process_cancels_the_pending_execution_its_run_ended_in(adapter_factory, workspace,
                                                                                 tmp_path):
    """A stop lands on whichever process (gunicorn worker) the balancer picks: on a process other than the
    owner it must clear the interrupt the run ended in, as it does on the owner, not answer 204 and leave
    the interrupt answerable."""
    from tests.agentcore_helpers import STOP, ac_post, ac_stream
    state_dir = str(tmp_path / "shared-state")
    owner = adapter_factory(default_cwd=workspace, state_dir=state_dir)
    other = adapter_factory(default_cwd=workspace, state_dir=state_dir)
    events, _ = ac_stream(owner, ac_body("please write a file", thread="stop-x", run="r-int"))
    assert events[-1]["outcome"]["type"] == "interrupt"
    assert owner.app.store.load("stop-x").execution.pending
    response = ac_post(other, {"threadId": "stop-x", "runId": "r-int"}, path=STOP)
    assert response.status_code == 204, response.text
    assert not owner.app.store.load("stop-x").execution.pending
    # A stop of an older run of the thread still changes nothing: its execution may be a newer run's now.
    ac_stream(owner, ac_body("hello", thread="stop-y", run="old"))
    ac_stream(owner, ac_body("please write a file", thread="stop-y", run="new"))
    assert ac_post(other, {"threadId": "stop-y", "runId": "old"}, path=STOP).status_code == 204
    assert owner.app.store.load("stop-y").execution.pending


def test_a_file_link_swapped_for_a_fifo_after_its_check_is_refused_without_blocking(tmp_path, monkeypatch):
    """The agent can replace a published file between the link's confinement check and its open: a FIFO
    there must not hold the server thread until someone writes to it."""
    import os
    import threading

    import pytest as _pytest

    from iaccode_agui.agentcore import files
    from iaccode_agui.errors import AguiError
    root = tmp_path / "ws"
    root.mkdir()
    target = root / "report.txt"
    target.write_text("data")
    links = files.FileLinks(60.0, 10)
    token, _ = links.publish(str(target), str(root))
    target.unlink()
    os.mkfifo(str(target))
    monkeypatch.setattr(files, "confined", lambda path, root: path)   # the swap lands after the check
    outcome = []

    def fetch() -> None:
        try:
            links.open(token)
        except AguiError as exc:
            outcome.append(exc.code)

    worker = threading.Thread(target=fetch, daemon=True)
    worker.start()
    worker.join(5)
    if worker.is_alive():   # unblock the open so the thread can end, then fail
        os.close(os.open(str(target), os.O_WRONLY | os.O_NONBLOCK))
        _pytest.fail("opening the link blocked on a FIFO")
    assert outcome == ["FILE_LINK_NOT_FOUND"]


def test_capabilities_name_the_routes_where_they_are_mounted(tmp_path, workspace):
    """Embedded under a prefix, the routes the capabilities document names must be the ones that answer."""
    from werkzeug.exceptions import NotFound
    from werkzeug.middleware.dispatcher import DispatcherMiddleware
    app = AguiApp(Settings(a2a_url="http://127.0.0.1:9/", state_dir=str(tmp_path / "state"),
                           allowed_cwds=(workspace,)))
    try:
        client = Client(DispatcherMiddleware(NotFound(), {"/agui": app}))
        routes = client.get("/agui/capabilities").get_json()["custom"]["iacCode"]["routes"]
        assert routes == {"run": "/agui/", "agentcore": "/agui/ag-ui/agent", "stop": "/agui/ag-ui/agent/stop"}
        for path in routes.values():
            assert client.post(path, data=b"{}", content_type="application/json").status_code == 400
        plain = Client(app).get("/capabilities").get_json()["custom"]["iacCode"]["routes"]
        assert plain == {"run": "/", "agentcore": "/ag-ui/agent", "stop": "/ag-ui/agent/stop"}
    finally:
        app.close(0)

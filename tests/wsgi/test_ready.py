"""Liveness (/health) and readiness (/ready): what a monitor, a balancer and a Kubernetes probe see."""
import json
import logging

import pytest
from werkzeug.test import Client

from iaccode_agui.web.app import AGUI_PACKAGE_VERSION, AguiApp
from iaccode_agui.config import Settings
from iaccode_agui.web.readiness import Readiness, check_runtime


def _app(tmp_path, workspace, a2a_url, token=None, **extra):
    settings = Settings(a2a_url=a2a_url, a2a_token=token, state_dir=str(tmp_path / "state"),
                        allowed_cwds=(workspace,), **extra)
    return AguiApp(settings)


@pytest.fixture
def make_app(tmp_path, workspace):
    made = []

    def make(a2a_url, token=None, **extra):
        app = _app(tmp_path, workspace, a2a_url, token, **extra)
        made.append(app)
        return app

    yield make
    for app in made:
        app.close(0.1)


def test_health_has_the_reference_shape_plus_package_version(make_app):
    app = make_app("http://127.0.0.1:9/")
    response = Client(app).get("/health")
    payload = response.get_json()
    assert response.status_code == 200
    reference_keys = {"status", "protocol", "protocolPackageVersion", "executionKernel", "serverVersion"}
    assert reference_keys <= set(payload)
    assert payload["protocolPackageVersion"] == AGUI_PACKAGE_VERSION


def test_package_version_is_the_one_the_event_models_come_from():
    from importlib.metadata import version
    assert version("ag-ui-protocol") == AGUI_PACKAGE_VERSION


def test_ready_is_200_with_a_live_runtime_and_a_writable_state_dir(make_app, demo):
    app = make_app(demo.url, demo.token, auth_token="secret")
    response = Client(app).get("/ready")   # no credentials: probes carry none
    assert response.status_code == 200, response.get_data(as_text=True)
    payload = response.get_json()
    assert payload["status"] == "ready" and payload["failing"] == []
    assert set(payload["checks"]) == {"stateDir", "runtime", "draining"}


def test_ready_names_an_unreachable_runtime_while_health_stays_200(make_app):
    app = make_app("http://127.0.0.1:9/")
    client = Client(app)
    response = client.get("/ready")
    assert response.status_code == 503 and response.headers["Retry-After"] == "1"
    payload = response.get_json()
    assert payload["status"] == "not_ready" and payload["failing"] == ["runtime"]
    assert "cannot reach" in payload["checks"]["runtime"]["detail"]
    assert client.get("/health").status_code == 200


def test_ready_names_a_broken_state_dir(make_app, demo, tmp_path):
    app = make_app(demo.url, demo.token)
    client = Client(app)
    assert client.get("/ready").status_code == 200
    state = tmp_path / "state"
    for child in state.rglob("*"):
        if child.is_file():
            child.unlink()
    (state / "threads").rmdir()
    (state / "threads").write_text("not a directory")
    app.readiness._cached = None
    response = client.get("/ready")
    assert response.status_code == 503
    payload = response.get_json()
    assert payload["failing"] == ["stateDir"]
    assert str(state) in payload["checks"]["stateDir"]["detail"]
    assert client.get("/health").status_code == 200


def test_ready_is_503_while_draining(make_app, demo):
    app = make_app(demo.url, demo.token)
    client = Client(app)
    app.manager.draining = True
    response = client.get("/ready")
    assert response.status_code == 503 and response.get_json()["failing"] == ["draining"]
    assert client.get("/health").status_code == 200


class _CountingProbe:
    def __init__(self):
        self.calls = 0

    def health(self):
        self.calls += 1
        return {"status": "healthy"}

    def agent_card(self):
        raise AssertionError("not needed")

    def close(self):
        pass


class _Store:
    def __init__(self):
        self.calls = 0

    def check_writable(self):
        self.calls += 1
        return 1 << 30      # bytes free

    def space_needed(self):
        return 10 << 20


def test_checks_are_cached_for_the_ttl():
    now = [100.0]
    probe, store = _CountingProbe(), _Store()
    readiness = Readiness(store, probe, lambda: False, ttl=2.0, clock=lambda: now[0])
    for _ in range(50):
        assert readiness.report().ready
    assert (probe.calls, store.calls) == (1, 1)
    now[0] += 2.5
    readiness.report()
    assert (probe.calls, store.calls) == (2, 2)


def test_a_generic_agent_without_health_is_up_when_its_card_answers():
    from iaccode_agui.a2a.client import A2AUnavailable

    class Generic:
        def health(self):
            raise A2AUnavailable("health: the A2A runtime answered HTTP 404")

        def agent_card(self):
            return {"name": "generic"}

    assert check_runtime(Generic()).ok


def test_access_log_carries_the_code_of_errors_before_the_stream(make_app, workspace, caplog):
    caplog.set_level(logging.INFO, logger="iaccode_agui.access")
    app = make_app("http://127.0.0.1:9/")
    client = Client(app)
    client.post("/", data=b"{nope", content_type="application/json")
    client.get("/nope")
    client.post("/extensions/iac-code/v1/executions/e/cancel", data=json.dumps(
        {"threadId": "t", "rosInvocationId": "i"}), content_type="application/json")
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "iaccode_agui.access"]
    assert [(line["status"], line["code"]) for line in lines] == [
        (400, "INVALID_JSON"), (404, "NOT_FOUND"), (404, "EXECUTION_NOT_FOUND")]


def test_a_failing_state_operation_is_logged_with_path_and_reason(make_app, workspace, tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="iaccode_agui.state")
    app = make_app("http://127.0.0.1:9/")
    state = tmp_path / "state"
    state.mkdir(exist_ok=True)
    (state / "threads").write_text("a file where the threads directory belongs")
    body = {"threadId": "t", "runId": "r", "state": {}, "tools": [], "context": [],
            "messages": [{"id": "m", "role": "user", "content": "hi"}],
            "forwardedProps": {"iacCode": {"schemaVersion": 1, "rosInvocationId": "i", "cwd": workspace}}}
    response = Client(app).post("/", data=json.dumps(body), content_type="application/json")
    assert response.status_code == 503 and response.get_json()["error"]["code"] == "STATE_UNAVAILABLE"
    lines = [r.getMessage() for r in caplog.records if r.name == "iaccode_agui.state"]
    assert lines and str(state) in lines[0] and "not a real directory" in lines[0], lines

"""The AgentCore route family's contract before SSE, at the WSGI level (no sockets, no runtime)."""
import base64
import json

import pytest
from werkzeug.test import Client

from iaccode_agui import errors, i18n
from iaccode_agui.web.app import AguiApp
from iaccode_agui.config import ConfigError, Settings
from tests.agentcore_helpers import SESSION, ac_body, attach_body

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 32


def make(tmp_path, workspace, **settings):
    base = dict(a2a_url="http://127.0.0.1:9/", state_dir=str(tmp_path / "state"), allowed_cwds=(workspace,))
    base.update(settings)
    app = AguiApp(Settings(**base))
    return app, Client(app)


@pytest.fixture
def client(tmp_path, workspace):
    app, client = make(tmp_path, workspace, default_cwd=workspace)
    yield client
    app.close(0)


@pytest.fixture
def strict(tmp_path, workspace):
    app, client = make(tmp_path, workspace)
    yield client
    app.close(0)


def post(client, payload, path="/ag-ui/agent", headers=None):
    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return client.post(path, data=data, headers=headers or {}, content_type="application/json")


def error(response):
    payload = response.get_json()
    assert set(payload) == {"error"} and set(payload["error"]) - {"field"} == {"code", "message"}, payload
    return response.status_code, payload["error"]["code"], payload["error"]["message"]


def test_session_header_must_equal_the_thread_on_both_route_families(client, workspace):
    mismatch = {"X-AgentCore-Session-ID": "other"}
    response = post(client, ac_body(thread="session-001"), headers=mismatch)
    assert error(response) == (400, "SESSION_ID_MISMATCH", "X-AgentCore-Session-ID must equal RunAgentInput.threadId.")
    assert response.headers["X-AgentCore-Session-ID"] == "session-001"
    assert error(post(client, ac_body(thread="session-001"), path="/", headers=mismatch))[:2] == (
        400, "SESSION_ID_MISMATCH")
    stop = post(client, {"threadId": "session-001", "runId": "r"}, path="/ag-ui/agent/stop", headers=mismatch)
    assert error(stop)[:2] == (400, "SESSION_ID_MISMATCH")


def test_request_errors_use_the_agentcore_names(client):
    assert error(post(client, b"{nope"))[:2] == (400, "INVALID_JSON")
    assert error(post(client, {"threadId": "t"}))[:2] == (400, "INVALID_AG_UI_REQUEST")
    body = ac_body()
    body["messages"].insert(0, {"id": "x", "role": "robot", "content": "hi"})
    assert error(post(client, body)) == (400, "INVALID_AG_UI_REQUEST", errors.MSG_ROLE_UNSUPPORTED)
    body = ac_body()
    body["messages"].insert(0, {"id": "x", "role": "tool", "content": "hi"})
    assert error(post(client, body)) == (400, "INVALID_AG_UI_REQUEST", errors.MSG_TOOL_CALL_ID_REQUIRED)
    props = ac_body(forwardedProps={"iacCode": {"schemaVersion": 2}})
    assert error(post(client, props))[:2] == (400, "INVALID_AG_UI_REQUEST")


@pytest.mark.parametrize("change,message", [
    ({"tools": [{"name": "get_order", "description": "d", "parameters": {"type": "object"}}]},
     errors.MSG_TOOLS_UNSUPPORTED),
    ({"messages": [{"id": "m", "role": "user", "content": [
        {"type": "image", "source": {"type": "url", "value": "https://example.com/a.png"}}]}]}, errors.MSG_REMOTE_MEDIA),
    ({"messages": [{"id": "m", "role": "user", "content": [
        {"type": "audio", "source": {"type": "data", "value": "AAAA", "mimeType": "audio/wav"}}]}]},
     errors.MSG_AUDIO_UNSUPPORTED),
    ({"messages": [{"id": "m", "role": "user", "content": [
        {"type": "video", "source": {"type": "data", "value": "AAAA", "mimeType": "video/mp4"}}]}]},
     errors.MSG_VIDEO_UNSUPPORTED),
    ({"messages": [{"id": "m", "role": "user", "content": [
        {"type": "document", "source": {"type": "data", "value": "AAAA", "mimeType": "application/pdf"}}]}]},
     errors.MSG_DOCUMENT_UNSUPPORTED),
])
def test_executor_input_unsupported(client, change, message):
    assert error(post(client, ac_body(**change))) == (400, "EXECUTOR_INPUT_UNSUPPORTED", message)


def test_post_root_keeps_invalid_input_for_the_same_refusals(client):
    assert error(post(client, ac_body(tools=[{"name": "x"}]), path="/")) == (
        400, "INVALID_INPUT", errors.MSG_TOOLS_UNSUPPORTED)


def test_missing_workspace_names_the_flag(tmp_path, workspace):
    app, client = make(tmp_path, workspace)
    status, code, message = error(post(client, ac_body()))
    assert (status, code) == (400, "INVALID_AG_UI_REQUEST") and "--default-cwd" in message
    # POST / keeps the strict iac-code contract without a default workspace.
    assert error(post(client, ac_body(), path="/"))[:2] == (400, "INVALID_INPUT")
    app.client.close()


def test_default_cwd_must_lie_in_the_allowed_roots(tmp_path, workspace):
    with pytest.raises(ConfigError):
        Settings(a2a_url="http://127.0.0.1:9/", state_dir=str(tmp_path / "s"), allowed_cwds=(workspace,),
                 default_cwd=str(tmp_path))
    with pytest.raises(ConfigError):
        Settings(a2a_url="http://127.0.0.1:9/", state_dir=str(tmp_path / "s"), allowed_cwds=(workspace,),
                 default_cwd=workspace + "/missing")


def test_payload_limits_name_the_limit(tmp_path, workspace):
    app, client = make(tmp_path, workspace, default_cwd=workspace, agentcore_max_request_bytes=64 * 1024,
                       max_image_bytes=1024, max_images_bytes=2048)
    big = ac_body("x" * (70 * 1024))
    assert error(post(client, big)) == (413, "PAYLOAD_TOO_LARGE", "The request body exceeds the limit of 64 KiB.")
    image = {"type": "image", "source": {"type": "data", "mimeType": "image/png",
                                         "value": base64.b64encode(PNG + b"\x00" * 1024).decode()}}
    one = ac_body(messages=[{"id": "m", "role": "user", "content": [image]}])
    assert error(post(client, one)) == (413, "PAYLOAD_TOO_LARGE", "An image exceeds the limit of 1 KiB.")
    small = {"type": "image", "source": {"type": "data", "mimeType": "image/png",
                                         "value": base64.b64encode(PNG + b"\x00" * 900).decode()}}
    three = ac_body(messages=[{"id": "m", "role": "user", "content": [small, small, small]}])
    status, code, message = error(post(client, three, headers={"Accept-Language": "de"}))
    assert (status, code, message) == (413, "PAYLOAD_TOO_LARGE", "Die Bilder überschreiten die Gesamtgrenze von 2 KiB.")
    # POST / reports the same image refusal as INVALID_INPUT, with the figure too.
    assert error(post(client, one, path="/"))[:2] == (400, "INVALID_INPUT")
    app.client.close()


def test_agentcore_body_limit_is_larger_than_post_roots(tmp_path, workspace):
    app, client = make(tmp_path, workspace, default_cwd=workspace, max_request_bytes=32 * 1024)
    body = ac_body("y" * (40 * 1024))
    assert error(post(client, body, path="/"))[:2] == (413, "REQUEST_TOO_LARGE")
    assert error(post(client, body))[:2] == (503, "RUNTIME_NOT_READY")   # admitted past the size check
    app.client.close()


@pytest.mark.parametrize("after", [True, 1.0, 1.5, -1, 2 ** 53, "3", None, [1]])
def test_invalid_attach(client, after):
    response = post(client, attach_body("t", "r", after))
    assert error(response)[:2] == (400, "INVALID_ATTACH")
    assert response.headers["X-AgentCore-Session-ID"] == "t"


def test_attach_shape_checks(client):
    extra = attach_body("t", "r", 0)
    extra["forwardedProps"]["agentcore"]["attach"]["more"] = 1
    assert error(post(client, extra))[:2] == (400, "INVALID_ATTACH")
    with_messages = attach_body("t", "r", 0)
    with_messages["messages"] = [{"id": "m", "role": "user", "content": "hi"}]
    assert error(post(client, with_messages)) == (400, "INVALID_ATTACH", errors.MSG_ATTACH_MESSAGES)
    assert error(post(client, attach_body("t", "r", 2 ** 53 - 1)))[:2] == (404, "RUN_NOT_FOUND")
    assert error(post(client, attach_body("t", "r", 0)))[:2] == (404, "RUN_NOT_FOUND")
    not_object = attach_body("t", "r", 0)
    not_object["forwardedProps"]["agentcore"] = "attach"
    assert error(post(client, not_object))[:2] == (400, "INVALID_ATTACH")


@pytest.mark.parametrize("payload", [b"[1]", b'{"threadId": "t"}', b'{"threadId": 1, "runId": "r"}',
                                     b'{"threadId": "t", "runId": ""}', b'{"threadId": "t\\u0000", "runId": "r"}'])
def test_invalid_stop(client, payload):
    assert error(post(client, payload, path="/ag-ui/agent/stop"))[:2] == (400, "INVALID_STOP")


def test_stop_unknown_and_bad_json(client):
    assert error(post(client, {"threadId": "t", "runId": "r"}, path="/ag-ui/agent/stop"))[:2] == (
        404, "RUN_NOT_FOUND")
    assert error(post(client, b"{", path="/ag-ui/agent/stop"))[:2] == (400, "INVALID_JSON")


def test_runtime_not_ready_before_any_sse_byte(client):
    response = post(client, ac_body())
    assert error(response) == (503, "RUNTIME_NOT_READY", errors.MSG_RUNTIME_NOT_READY)
    assert response.headers["Retry-After"] == "2"


def test_auth_accepts_x_api_key_and_bearer_in_constant_time(tmp_path, workspace, monkeypatch):
    app, client = make(tmp_path, workspace, default_cwd=workspace, auth_token="tok")
    compared = []
    import hmac
    real = hmac.compare_digest
    monkeypatch.setattr(hmac, "compare_digest", lambda a, b: compared.append((a, b)) or real(a, b))
    assert error(post(client, ac_body())) == (401, "UNAUTHORIZED", errors.MSG_UNAUTHORIZED_API_KEY)
    assert len(compared) == 2     # both spellings checked, even when neither was sent
    assert error(post(client, ac_body(), headers={"x-api-key": "tok"}))[:2] == (503, "RUNTIME_NOT_READY")
    assert error(post(client, ac_body(), headers={"Authorization": "Bearer tok"}))[:2] == (503, "RUNTIME_NOT_READY")
    assert error(post(client, ac_body(), headers={"x-api-key": "tok2"}))[0] == 401
    assert client.get("/capabilities").status_code == 401
    assert client.get("/ag-ui/agent/capabilities", headers={"x-api-key": "tok"}).status_code == 200
    assert error(post(client, ac_body(), path="/", headers={"x-api-key": "tok"}))[:2] == (
        401, "UNAUTHORIZED")
    app.client.close()


def test_capabilities_follow_the_settings(tmp_path, workspace):
    app, client = make(tmp_path, workspace, upstream_kind="generic", max_image_bytes=4096)
    doc = client.get("/capabilities").get_json()
    assert doc["identity"]["type"] == "a2a" and doc["reasoning"]["supported"] is False
    assert doc["custom"]["iacCode"]["limits"]["maxImageBytes"] == 4096
    assert doc["custom"]["iacCode"]["serverDefaults"] is False
    app.manager.draining = True
    assert client.get("/capabilities").get_json()["custom"]["iacCode"]["draining"] is True
    app.client.close()


def test_capabilities_validate_against_the_ag_ui_models(client):
    models = pytest.importorskip("ag_ui.core")
    document = client.get("/capabilities").get_json()
    if not hasattr(models, "AgentCapabilities"):
        pytest.skip("ag-ui-protocol %s has no AgentCapabilities model" % getattr(models, "__version__", "?"))
    models.AgentCapabilities.model_validate(document)


def test_the_code_table_is_declared_and_translated():
    declared = set(errors.ERRORS)
    for core, public in errors.AGENTCORE_CODES.items():
        assert core in declared and public in declared
    for message, public in errors.AGENTCORE_MESSAGE_CODES.items():
        assert message in errors.MESSAGES and public in declared
    for seed_code in ("INVALID_JSON", "INVALID_AG_UI_REQUEST", "SESSION_ID_MISMATCH", "INVALID_ATTACH",
                      "INVALID_STOP", "RUN_NOT_FOUND", "RUN_ALREADY_EXISTS", "RUN_ALREADY_TERMINAL",
                      "RUN_ALREADY_ATTACHED", "SESSION_UNAVAILABLE", "PAYLOAD_TOO_LARGE",
                      "RUNTIME_CAPACITY_EXCEEDED", "RUNTIME_NOT_READY", "RUNTIME_DRAINING",
                      "EXECUTOR_INPUT_UNSUPPORTED", "RUN_CANCELLED"):
        assert seed_code in declared, seed_code
    # Nothing is queued and attach always works: these two can never be answered.
    assert "SESSION_QUEUE_FULL" not in declared and "RUN_ATTACH_UNSUPPORTED" not in declared
    messages = {errors.ERRORS[code][1] for code in errors.AGENTCORE_CODES.values()}
    messages |= set(errors.AGENTCORE_MESSAGES.values()) | set(errors.AGENTCORE_MESSAGE_CODES)
    for language in i18n.SUPPORTED:
        for message in messages:
            if language != i18n.SOURCE_LANGUAGE:
                assert i18n.translate(message, language) != message, (language, message)


def test_agentcore_streams_take_and_give_back_a_stream_slot(tmp_path, workspace):
    """/ag-ui/agent and its attach hold a server worker per stream, so they share POST /'s stream cap."""
    app, client = make(tmp_path, workspace, default_cwd=workspace, max_active_runs=1)
    try:
        app.agentcore.probe.check = lambda: None       # the runtime would be ready; the slot is what is tested
        assert error(post(client, attach_body("t", "r", 0)))[:2] == (404, "RUN_NOT_FOUND")
        assert app.open_streams == 0                   # a refused attach gave its slot back
        app.reserve_stream()                           # another client's stream holds the only slot
        for body in (ac_body(), attach_body("t", "r", 0)):
            response = post(client, body)
            assert error(response)[:2] == (429, "RUNTIME_CAPACITY_EXCEEDED")
            assert response.headers["Retry-After"] == "1"
            assert response.headers["X-AgentCore-Session-ID"] == body["threadId"]
        assert app.open_streams == 1
        app.release_stream()
    finally:
        app.close(0)



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

"""The HTTP contract before SSE, at the WSGI level with werkzeug's test client (no sockets)."""
import json

import pytest
from werkzeug.test import Client

from iaccode_agui.web.app import AguiApp
from iaccode_agui.config import Settings


@pytest.fixture
def client(tmp_path, workspace):
    settings = Settings(a2a_url="http://127.0.0.1:9/", state_dir=str(tmp_path / "state"),
                        allowed_cwds=(workspace,), auth_token=None)
    app = AguiApp(settings)
    yield Client(app)
    app.close(0)


def body(workspace, **changes):
    value = {"threadId": "t", "runId": "r", "state": {}, "tools": [], "context": [],
             "messages": [{"id": "m", "role": "user", "content": "hi"}],
             "forwardedProps": {"iacCode": {"schemaVersion": 1, "rosInvocationId": "i", "cwd": workspace}}}
    value.update(changes)
    return value


def post(client, payload, headers=None, path="/", content_type="application/json"):
    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return client.post(path, data=data, headers=headers or {}, content_type=content_type)


def error(response):
    assert response.content_type.startswith("application/json")
    payload = response.get_json()
    assert set(payload) == {"error"} and set(payload["error"]) - {"field"} == {"code", "message"}
    return response.status_code, payload["error"]["code"], payload["error"]["message"]


def test_unsupported_media_type(client, workspace):
    assert error(post(client, body(workspace), content_type="text/plain")) == (
        415, "UNSUPPORTED_MEDIA_TYPE", "Content-Type must be application/json.")
    ok_charset = post(client, b"{", content_type="application/json; charset=utf-8")
    assert error(ok_charset)[1] == "INVALID_JSON"


def test_invalid_json_and_non_object(client):
    assert error(post(client, b"{nope")) == (400, "INVALID_JSON", "The request body is not valid JSON.")
    assert error(post(client, b"\xff\xfe"))[1] == "INVALID_JSON"
    assert error(post(client, b"[1]"))[:2] == (400, "INVALID_INPUT")
    assert error(post(client, b'{"a": NaN}'))[1] == "INVALID_JSON"
    assert error(post(client, b"[" * 100000 + b"]" * 100000))[1] == "INVALID_JSON"


def test_body_limit(client, workspace):
    big = b'{"x":"' + b"a" * (12 * 1024 * 1024) + b'"}'
    assert error(post(client, big))[:2] == (413, "REQUEST_TOO_LARGE")
    cancel = b'{"threadId":"t","rosInvocationId":"' + b"a" * (70 * 1024) + b'"}'
    assert error(post(client, cancel, path="/extensions/iac-code/v1/executions/e/cancel"))[:2] == (
        413, "REQUEST_TOO_LARGE")


@pytest.mark.parametrize("changes,message", [
    ({"tools": [{"name": "x"}]}, "Client-defined tools are not supported."),
    ({"messages": []}, "A new run requires a user message."),
    ({"threadId": ""}, "Invalid AG-UI RunAgentInput envelope: `threadId` must not be empty."),
    ({"forwardedProps": {}}, "Invalid iac-code forwarded properties: `forwardedProps.iacCode` is required."),
    ({"messages": [{"id": "m", "role": "user", "content": [
        {"type": "image", "source": {"type": "url", "value": "https://x/y.png", "mimeType": "image/png"}}]}]},
     "Remote media URLs are not supported."),
])
def test_invalid_input_messages_are_specific(client, workspace, changes, message):
    assert error(post(client, body(workspace, **changes))) == (400, "INVALID_INPUT", message)


def test_cwd_outside_roots_translated(client, workspace):
    payload = body(workspace)
    payload["forwardedProps"]["iacCode"]["cwd"] = "/etc"
    outside = ("Invalid iac-code forwarded properties: `cwd` is outside the allowed workspace roots; the server's "
               "IAC_CODE_AGUI_ALLOWED_CWDS setting lists them.")
    assert error(post(client, payload))[2] == outside
    payload["forwardedProps"]["iacCode"]["preferredLanguage"] = "zh"
    status, code, message = error(post(client, payload))
    assert (status, code) == (400, "INVALID_INPUT") and message.startswith("无效的 iac-code 转发属性：`cwd` ")
    assert "IAC_CODE_AGUI_ALLOWED_CWDS" in message
    extra = body(workspace)
    extra["forwardedProps"]["iacCode"]["bogus"] = 1
    assert error(post(client, extra, headers={"Accept-Language": "zh-CN,zh;q=0.9"}))[2] == (
        "无效的 iac-code 转发属性：`bogus` 不是已知字段。")


def test_unknown_route_and_method(client):
    assert error(client.get("/nope"))[:2] == (404, "NOT_FOUND")
    response = client.get("/")
    assert error(response)[:2] == (405, "METHOD_NOT_ALLOWED")
    assert "POST" in response.headers["Allow"]


def test_health_shape(client):
    payload = client.get("/health").get_json()
    assert payload["status"] == "ok" and payload["protocol"] == "ag-ui"
    assert payload["protocolVersion"] == "1.0" and payload["executionKernel"] == "a2a-1.0"
    assert payload["serverVersion"]


def test_cancel_body_validation(client):
    path = "/extensions/iac-code/v1/executions/e1/cancel"
    assert error(post(client, {"threadId": "t"}, path=path)) == (
        400, "INVALID_INPUT", "threadId and rosInvocationId are required.")
    assert error(post(client, {"threadId": "t", "rosInvocationId": "i"}, path=path))[:2] == (
        404, "EXECUTION_NOT_FOUND")


def test_unreachable_runtime_is_run_error_not_http_error(client, workspace):
    response = post(client, body(workspace, threadId="down"))
    assert response.status_code == 200
    raw = b"".join(response.response)
    events = [json.loads(line[6:]) for line in raw.split(b"\n") if line.startswith(b"data: ")]
    assert [e["type"] for e in events] == ["RUN_STARTED", "RUN_ERROR"]
    assert events[-1]["code"] == "A2A_UNAVAILABLE"


def test_auth_required_when_configured(tmp_path, workspace):
    app = AguiApp(Settings(a2a_url="http://127.0.0.1:9/", state_dir=str(tmp_path / "s"),
                           allowed_cwds=(workspace,), auth_token="tok"))
    try:
        client = Client(app)
        for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "Basic dG9r"},
                        {"Authorization": "tok"}):
            assert error(post(client, body(workspace), headers=headers))[:2] == (401, "UNAUTHORIZED")
        assert client.get("/health").status_code == 200
        accepted = post(client, body(workspace), headers={"Authorization": "BEARER tok"})
        assert accepted.status_code == 200
        b"".join(accepted.response)
    finally:
        app.close(0)

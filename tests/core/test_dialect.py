"""Outgoing A2A messages and incoming frame readers (the iac-code dialect), as plain data."""
import base64
import hashlib

import pytest

from iaccode_agui.a2a import dialect
from iaccode_agui.web.inputs import parse_run_request

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 16


def test_context_id_is_deterministic():
    expected = "agui-" + hashlib.sha256("thread-1".encode()).hexdigest()[:40]
    assert dialect.context_id_for("thread-1") == expected and len(expected) == 45


def test_metadata_maps_every_forwarded_prop():
    props = {"schemaVersion": 1, "rosInvocationId": " inv-1 ", "cwd": "/ignored", "userId": "u", "channel": "web",
             "candidatePresentation": "rich", "runMode": "pipeline", "pipelineName": "selling", "model": "m",
             "llmApiKey": "sk", "llmHeaders": {}, "cleanupOnly": True,
             "thinking": {"enabled": True, "effort": "low", "budget": 1024},
             "alibabaCloud": {"accessKeyId": "AK", "accessKeySecret": "SK", "securityToken": "ST", "regionId": "cn"}}
    meta = dialect.build_metadata(props, "/srv/ws", "fr")
    assert meta == {
        "cwd": "/srv/ws", "preferredLanguage": "fr", "cleanupOnly": True, "rosInvocationId": "inv-1", "user_id": "u",
        "channel": "web", "candidatePresentation": "rich", "run_mode": "pipeline", "pipeline_name": "selling",
        "iac_code_model": "m", "iac_code_api_key": "sk", "llm_headers": {},
        "thinking": {"enabled": True, "effort": "low", "budget": 1024},
        "alibaba_cloud_access_key_id": "AK", "alibaba_cloud_access_key_secret": "SK",
        "alibaba_cloud_security_token": "ST", "alibaba_cloud_region_id": "cn"}
    minimal = dialect.build_metadata({"schemaVersion": 1, "rosInvocationId": "i", "cwd": "/x"}, "/x", "en")
    assert minimal == {"cwd": "/x", "preferredLanguage": "en", "cleanupOnly": False, "rosInvocationId": "i"}


def test_new_turn_message_with_image(tmp_path):
    root = str(tmp_path)
    body = {"threadId": "t", "runId": "r", "state": {}, "tools": [], "context": [],
            "messages": [{"id": "old", "role": "user", "content": "earlier"},
                         {"id": "a1", "role": "assistant", "content": "ok"},
                         {"id": "m-9", "role": "user", "content": [
                             {"type": "text", "text": "look"},
                             {"type": "image", "source": {"type": "data", "value": base64.b64encode(PNG).decode(),
                                                          "mimeType": "image/png"}, "metadata": {"filename": "s.png"}}]}],
            "forwardedProps": {"iacCode": {"schemaVersion": 1, "rosInvocationId": "i", "cwd": root}}}
    req = parse_run_request(body, [root])
    message = dialect.build_message(req.user_message.message_id, req.user_message.parts, "agui-x",
                                    dialect.build_metadata(req.props, req.cwd, "en"))
    assert message["messageId"] == "m-9" and message["role"] == "ROLE_USER" and "taskId" not in message
    assert message["parts"][0] == {"text": "look"}
    assert message["parts"][1] == {"data": {"filename": "s.png", "bytes": base64.b64encode(PNG).decode()},
                                   "mediaType": "image/png"}
    params = dialect.send_params(dialect.build_message("x", [{"text": "a"}], "agui-x", {}, task_id="t-1"))
    assert params["configuration"] == {"acceptedOutputModes": ["text/plain"]}
    assert params["message"]["taskId"] == "t-1"


@pytest.mark.parametrize("raw,expected", [("TASK_STATE_INPUT_REQUIRED", "input-required"), ("input_required", "input-required"),
                                          ("completed", "completed"), ("TASK_STATE_AUTH_REQUIRED", "auth-required"),
                                          (None, ""), (3, "")])
def test_normalize_state(raw, expected):
    assert dialect.normalize_state(raw) == expected


def test_unwrap_kinds_and_bare_objects():
    assert dialect.unwrap({"statusUpdate": {"taskId": "t"}}) == ("statusUpdate", {"taskId": "t"})
    task = {"id": "t", "status": {"state": "TASK_STATE_WORKING"}}
    assert dialect.unwrap(task) == ("task", task)
    assert dialect.unwrap({"role": "ROLE_AGENT", "parts": []})[0] == "message"
    assert dialect.unwrap("junk") == ("unknown", {})
    assert dialect.frame_task_id("task", task) == "t"


def test_message_text_ignores_user_and_non_text_parts():
    agent = {"role": "ROLE_AGENT", "parts": [{"text": "a"}, {"data": {}}, {"text": "b"}]}
    assert dialect.message_text(agent) == "ab"
    assert dialect.message_text({"role": "ROLE_USER", "parts": [{"text": "x"}]}) == ""


def test_backup_not_ready_detection():
    assert dialect.rpc_error_is_backup_not_ready({"code": "SESSION_BACKUP_NOT_READY", "retryable": True})
    assert dialect.rpc_error_is_backup_not_ready([{"@type": "x"}, {"code": "SESSION_BACKUP_NOT_READY", "retryable": True}])
    assert not dialect.rpc_error_is_backup_not_ready({"code": "SESSION_BACKUP_NOT_READY", "retryable": False})

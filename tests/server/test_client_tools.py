"""Client-declared tools (``RunAgentInput.tools``): refused by default, or checked, accepted and never sent to the
runtime with ``--client-tools ignore``, on both route families.

The ignore case runs against the scripted runtime behind a recorder of every request body it gets, so "never
sent" is checked on the bytes the runtime received.
"""
import io
import json
import logging

import pytest
from werkzeug.test import Client

from iaccode_agui import errors
from iaccode_agui.server import cli
from iaccode_agui.web.app import AguiApp
from iaccode_agui.config import MAX_CLIENT_TOOL_BYTES, MAX_CLIENT_TOOLS, ConfigError, Settings
from iaccode_agui.demo.runtime import ScriptedRuntime
from iaccode_agui.server.serving import ServerThread
from tests.agentcore_helpers import ac_body
from tests.harness import Adapter

TOOLS = [
    {"name": "show_weather_card", "description": "Shows a weather card in the page",
     "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
    {"name": "confirm_booking", "description": "Asks the user to confirm", "parameters": {"type": "object"},
     "metadata": {"copilotkit": {"followUp": False}}, "extraKey": 1},
]
ROUTES = [("/", "INVALID_INPUT"), ("/ag-ui/agent", "INVALID_AG_UI_REQUEST")]


class RecordingRuntime:
    """The scripted runtime behind a WSGI shim that keeps every request body it is sent."""

    def __init__(self) -> None:
        self.runtime = ScriptedRuntime("demo-token", ping_interval=0.5)
        self.bodies = []
        self.server = ServerThread(self, threads=16)
        self.url = self.server.url

    def __call__(self, environ, start_response):
        raw = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
        self.bodies.append(raw)
        environ["wsgi.input"] = io.BytesIO(raw)
        return self.runtime(environ, start_response)

    def stop(self) -> None:
        self.runtime.shutdown(5)
        self.server.stop()


@pytest.fixture
def recorded():
    runtime = RecordingRuntime()
    yield runtime
    runtime.stop()


@pytest.fixture
def ignoring(recorded, tmp_path, workspace):
    adapter = Adapter(recorded.url, "demo-token", str(tmp_path / "state"), workspace, default_cwd=workspace,
                      client_tools="ignore")
    yield adapter
    adapter.stop()


def wsgi(tmp_path, workspace, **settings):
    app = AguiApp(Settings(a2a_url="http://127.0.0.1:9/", state_dir=str(tmp_path / "state"),
                           allowed_cwds=(workspace,), default_cwd=workspace, **settings))
    return app, Client(app)


def refusal(client, path, body):
    response = client.post(path, data=json.dumps(body), content_type="application/json")
    return response.status_code, response.get_json()["error"]


# ---- reject (the default) -------------------------------------------------------------------------------

@pytest.mark.parametrize("path,code", [("/", "INVALID_INPUT"), ("/ag-ui/agent", "EXECUTOR_INPUT_UNSUPPORTED")])
def test_tools_are_refused_by_default_naming_the_field(tmp_path, workspace, path, code):
    app, client = wsgi(tmp_path, workspace)
    try:
        assert refusal(client, path, ac_body(tools=TOOLS)) == (
            400, {"code": code, "message": errors.MSG_TOOLS_UNSUPPORTED, "field": "/tools"})
    finally:
        app.close(0)


# ---- ignore -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", ["", "ag-ui/agent"])
def test_ignored_tools_are_accepted_never_reach_the_runtime_and_are_logged(ignoring, recorded, caplog, path):
    caplog.set_level(logging.INFO, logger="iaccode_agui.access")
    body = ac_body(thread="tools-" + (path or "root"), tools=TOOLS)
    response = ignoring.post(body, path=path)
    assert response.status_code == 200, response.text
    assert b'"type":"RUN_FINISHED"' in response.content.replace(b" ", b"")
    sent = b"".join(recorded.bodies)
    assert b"SendStreamingMessage" in sent          # the turn did reach the runtime
    for secret in (b"show_weather_card", b"Shows a weather card", b"confirm_booking", b"followUp"):
        assert secret not in sent
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "iaccode_agui.access"]
    line = next(line for line in lines if line.get("thread") == body["threadId"])
    assert line["status"] == 200 and line["clientToolsIgnored"] == 2


def test_a_request_without_tools_logs_no_ignored_tools(ignoring, caplog):
    caplog.set_level(logging.INFO, logger="iaccode_agui.access")
    assert ignoring.post(ac_body(thread="no-tools")).status_code == 200
    line = next(json.loads(r.getMessage()) for r in caplog.records if r.name == "iaccode_agui.access")
    assert "clientToolsIgnored" not in line


@pytest.mark.parametrize("tools,field,problem", [
    ([{"description": "d"}], "/tools/0/name", "`tools[0].name` is required."),
    ([{"name": "x"}], "/tools/0/description", "`tools[0].description` is required."),
    ([{"name": "", "description": "d"}], "/tools/0/name", "`tools[0].name` must not be empty."),
    ([{"name": "x\n", "description": "d"}], "/tools/0/name", "`tools[0].name` must not contain control characters."),
    ([{"name": "x", "description": "d", "parameters": None}], "/tools/0/parameters",
     "`tools[0].parameters` must be of JSON type object | boolean."),
    ([{"name": "x", "description": "d", "metadata": []}], "/tools/0/metadata",
     "`tools[0].metadata` must be of JSON type object."),
    (["x"], "/tools/0", "`tools[0]` must be of JSON type object."),
    ([{"name": "t%d" % n, "description": "d"} for n in range(MAX_CLIENT_TOOLS + 1)], "/tools",
     "`tools` must have at most %d items." % MAX_CLIENT_TOOLS),
    ([TOOLS[0], {"name": "big", "description": "d" * MAX_CLIENT_TOOL_BYTES}], "/tools/1",
     "`tools[1]` must be at most 64 KiB of JSON."),
])
@pytest.mark.parametrize("path,code", ROUTES)
def test_ignored_tools_are_still_checked(tmp_path, workspace, path, code, tools, field, problem):
    app, client = wsgi(tmp_path, workspace, client_tools="ignore")
    try:
        status, error = refusal(client, path, ac_body(tools=tools))
    finally:
        app.close(0)
    assert (status, error) == (400, {"code": code, "field": field,
                                     "message": "Invalid AG-UI RunAgentInput envelope: " + problem})


def test_the_bounds_admit_what_they_name(tmp_path, workspace):
    from iaccode_agui.canonical import canonical_json
    from iaccode_agui.web.inputs import InputPolicy, parse_run_request

    padding = MAX_CLIENT_TOOL_BYTES - len(canonical_json({"name": "big", "description": ""}).encode())
    tools = [{"name": "t%d" % n, "description": "d"} for n in range(MAX_CLIENT_TOOLS - 1)]
    tools.append({"name": "big", "description": "d" * padding})
    request = parse_run_request(ac_body(tools=tools), [workspace], InputPolicy(default_cwd=workspace,
                                                                                 client_tools="ignore"))
    assert request.ignored_tools == MAX_CLIENT_TOOLS


# ---- capabilities and settings ------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["reject", "ignore"])
def test_capabilities_never_claim_client_tools(tmp_path, workspace, mode):
    app, client = wsgi(tmp_path, workspace, client_tools=mode)
    try:
        document = client.get("/ag-ui/agent/capabilities").get_json()
    finally:
        app.close(0)
    assert document["tools"] == {"supported": True, "clientProvided": False}
    details = document["custom"]["iacCode"]
    assert details["clientTools"] == mode
    assert (details["limits"]["maxClientTools"], details["limits"]["maxClientToolBytes"]) == (
        MAX_CLIENT_TOOLS, MAX_CLIENT_TOOL_BYTES)


def test_flag_and_variable(tmp_path, workspace):
    def settings(argv, env):
        env = dict(env, IAC_CODE_AGUI_ALLOWED_CWDS=workspace, IAC_CODE_AGUI_STATE_DIR=str(tmp_path))
        return cli.settings_from(cli.build_parser().parse_args(argv), env, "http://127.0.0.1:9/", None)

    assert settings([], {}).client_tools == "reject"
    assert settings([], {"IAC_CODE_AGUI_CLIENT_TOOLS": "ignore"}).client_tools == "ignore"
    assert settings(["--client-tools", "reject"], {"IAC_CODE_AGUI_CLIENT_TOOLS": "ignore"}).client_tools == "reject"
    with pytest.raises(ConfigError):
        settings([], {"IAC_CODE_AGUI_CLIENT_TOOLS": "accept"})
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["--client-tools", "accept"])
    with pytest.raises(ConfigError):
        Settings(a2a_url="http://127.0.0.1:9/", state_dir=str(tmp_path), allowed_cwds=(workspace,),
                 client_tools="maybe")

"""CopilotKit in front of the adapter, as a CopilotKit app runs it: offline, headless, on both routes.

``tests/node/copilotkit_check.cjs`` runs a ``@copilotkit/runtime`` 1.75 server whose agent is a plain
``HttpAgent`` pointing at the adapter, and drives it with ``@copilotkit/core`` 1.74 the way ``CopilotChat``,
``useInterrupt`` and ``useFrontendTool`` do.  One driver process per route runs every case (loading CopilotKit
takes about a second), against one adapter per route; each test below checks one case of that report.  The
packages are pinned in ``tests/node/package.json``; only a machine where they cannot be had skips, saying why.
"""
import json
import os
import subprocess

import pytest

from iaccode_agui.demo import DemoServer
from tests.adapter_process import start_cli
from tests.harness import Adapter
from tests.node_packages import NODE_DIR, Unavailable, node_env, node_modules
from tests.docs.test_readme import ROOT, _literal_blocks

KEY = "copilotkit-key"
ROUTES = ("agent", "root")
CASES = ["chat", "twoTurns", "lostMemory", "serverTool", "interrupt", "stop", "runError"]
HOWTO = os.path.join(ROOT, "docs", "copilotkit.rst")


@pytest.fixture(scope="module")
def modules() -> str:
    try:
        return node_modules(node_major=20)    # what @copilotkit/runtime 1.75 and core 1.74 declare
    except Unavailable as missing:
        print(missing)
        pytest.skip(str(missing))


def _workspace(base, name: str) -> str:
    path = base / name
    path.mkdir()
    return os.path.realpath(str(path))


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    """The demo runtime and one adapter per route: /ag-ui/agent with a default workspace, POST / without one
    (so every run there must bring its ``iacCode`` through CopilotKit's ``properties``)."""
    base = tmp_path_factory.mktemp("copilotkit")
    demo = DemoServer.start(token="demo-token", ping_interval=0.5, slow_interval=0.1)
    spaces = {route: _workspace(base, "ws-" + route) for route in ROUTES}
    adapters = {"agent": Adapter(demo.url, demo.token, str(base / "state-agent"), spaces["agent"],
                                 default_cwd=spaces["agent"], auth_token=KEY),
                "root": Adapter(demo.url, demo.token, str(base / "state-root"), spaces["root"], auth_token=KEY)}
    try:
        yield {"demo": demo, "base": base, "spaces": spaces, "adapters": adapters}
    finally:
        for adapter in adapters.values():
            adapter.stop()
        demo.stop()


def _drive(modules: str, route: str, adapter_url: str, cwd: str, cases, stop_agent_module: str = "") -> dict:
    config = {"route": route, "adapter": adapter_url, "apiKey": KEY, "cwd": cwd, "cases": cases,
              "stopAgentModule": stop_agent_module}
    done = subprocess.run(["node", os.path.join(NODE_DIR, "copilotkit_check.cjs"), json.dumps(config)],
                          capture_output=True, text=True, timeout=120, env=node_env(modules))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def _stoppable_agent_module(base, modules: str) -> str:
    """The how-to's HttpAgent subclass, as printed, in a module that resolves ``@ag-ui/client`` like an app's."""
    block = next(block for block in _literal_blocks(HOWTO) if "class StoppableHttpAgent" in block)
    folder = base / "howto"
    folder.mkdir()
    os.symlink(modules, str(folder / "node_modules"))
    (folder / "stoppable-agent.mjs").write_text(block, encoding="utf-8")
    return str(folder / "stoppable-agent.mjs")


@pytest.fixture(scope="module")
def reports(stack, modules):
    stoppable = _stoppable_agent_module(stack["base"], modules)
    return {route: _drive(modules, route, stack["adapters"][route].url, stack["spaces"][route],
                          CASES + (["stopNow"] if route == "agent" else []), stoppable) for route in ROUTES}


@pytest.fixture(scope="module")
def tool_reports(stack, modules):
    """The frontend-tool case, against an adapter started with ``--client-tools ignore`` (both routes)."""
    base, demo = stack["base"], stack["demo"]
    space = _workspace(base, "ws-tools")
    env = dict(os.environ, IAC_CODE_AGUI_ALLOWED_CWDS=space)
    proc, port = start_cli(["--a2a-url", demo.url, "--a2a-token", demo.token, "--state-dir", str(base / "state-tools"),
                            "--default-cwd", space, "--auth-token", KEY, "--client-tools", "ignore",
                            "--drain-timeout", "1"], env, str(base / "tools-adapter.log"))
    try:
        url = "http://127.0.0.1:%d/" % port
        yield {route: _drive(modules, route, url, space, ["frontendTool"]) for route in ROUTES}
    finally:
        proc.terminate()
        proc.wait(30)


def _case(report: dict, name: str) -> dict:
    result = report[name]
    assert "error" not in result, result.get("error")
    return result


def _succeeded(run: dict, text: str) -> None:
    assert run["last"]["type"] == "RUN_FINISHED", run["last"]
    assert run["last"]["outcome"] in (None, {"type": "success"}) and run["errors"] == [], (run["last"], run["errors"])
    assert text in run["text"]


def _conversation(run: dict):
    return [(m["role"], m["content"], [call["name"] for call in m["toolCalls"]]) for m in run["messages"]]


@pytest.mark.parametrize("route", ROUTES)
def test_chat(reports, route):
    chat = _case(reports[route], "chat")
    _succeeded(chat, "You said: hello from copilotkit")
    assert [role for role, _, _ in _conversation(chat)] == ["user", "assistant"]


@pytest.mark.parametrize("route", ROUTES)
def test_two_turns_on_one_thread(reports, route):
    turns = _case(reports[route], "twoTurns")
    _succeeded(turns["first"], "You said: first turn")
    _succeeded(turns["second"], "You said: second turn")
    assert [role for role, _, _ in _conversation(turns["second"])] == ["user", "assistant", "user", "assistant"]


@pytest.mark.parametrize("route", ROUTES)
def test_a_runtime_that_lost_its_memory_gets_the_conversation_back_on_its_next_run(reports, route):
    """A fresh CopilotKit runtime and page on a thread with two turns: the page sends only its new message, the
    run opens with a MESSAGES_SNAPSHOT, and the page's agent ends the run holding the whole conversation with the
    ids the earlier streams used."""
    case = _case(reports[route], "lostMemory")
    earlier = case["second"]["messages"]
    assert [(m["role"], m["content"]) for m in earlier] == [
        ("user", "first turn"), ("assistant", "Hello! I am the scripted runtime. You said: first turn"),
        ("user", "second turn"), ("assistant", "Hello! I am the scripted runtime. You said: second turn")]
    third = case["third"]
    _succeeded(third, "You said: third turn")
    assert third["types"][:2] == ["RUN_STARTED", "MESSAGES_SNAPSHOT"]
    assert len(case["sentMessages"]) == 1                     # the runtime had nothing but the new message
    held = third["messages"]
    # @ag-ui/client merges a snapshot into the list it holds (a message it has keeps its place, the others follow
    # in the snapshot's order): the earlier turns come back in order, with their ids, and the reply ends the list.
    (sent,) = [m for m in held if m["id"] == case["sentMessages"][0]]
    assert (sent["role"], sent["content"]) == ("user", "third turn")
    assert [m for m in held if m is not sent][:4] == earlier and len(held) == 6
    assert (held[-1]["role"], held[-1]["content"]) == ("assistant",
                                                       "Hello! I am the scripted runtime. You said: third turn")


@pytest.mark.parametrize("route", ROUTES)
def test_server_side_tool_messages_follow_the_conversation(reports, route):
    tool = _case(reports[route], "serverTool")
    _succeeded(tool, "Demo workspace")
    assert _conversation(tool) == [
        ("user", "use a tool", []),
        ("assistant", "Let me read README.md.", ["read_file"]),
        ("tool", "# Demo workspace\n", []),
        ("assistant", "README.md starts with the heading 'Demo workspace'.", []),
    ]
    asked, result = tool["messages"][1], tool["messages"][2]
    assert result["toolCallId"] == asked["toolCalls"][0]["id"]
    starts = [event for event in tool["events"] if event["type"] == "TOOL_CALL_START"]
    assert [event.get("parentMessageId") for event in starts] == [asked["id"]]
    kinds = [(event["type"], event.get("messageId")) for event in tool["events"]]
    assert kinds.index(("TEXT_MESSAGE_END", asked["id"])) < [event["type"] for event in tool["events"]].index(
        "TOOL_CALL_START")


@pytest.mark.parametrize("route", ROUTES)
def test_interrupt_answered_the_use_interrupt_way(reports, stack, route):
    case = _case(reports[route], "interrupt")
    assert case["asked"]["last"]["outcome"]["type"] == "interrupt"
    interrupt = case["interrupt"]
    assert interrupt["reason"] == "tool_call" and interrupt["toolCallId"] and interrupt["expiresAt"]
    assert interrupt["responseSchema"]["properties"]["decision"]["enum"] == ["allow_once", "deny"]
    # What useInterrupt put on the wire: the interrupted run's id, the resume entry and the answer as a tool result.
    sent = case["sent"]
    assert sent["runId"] == case["interruptedRunId"]
    assert sent["resume"] == [{"interruptId": interrupt["id"], "status": "resolved",
                               "payload": {"decision": "allow_once"}}]
    assert (sent["lastMessage"]["role"], sent["lastMessage"]["toolCallId"]) == ("tool", interrupt["toolCallId"])
    _succeeded(case["resumed"], "Done: hello.txt was written.")
    assert _conversation(case["resumed"])[-1] == ("assistant", "Done: hello.txt was written.", [])
    assert os.path.exists(os.path.join(stack["spaces"][route], "hello.txt"))


@pytest.mark.parametrize("route", ROUTES)
def test_stop_then_a_new_message(reports, route):
    case = _case(reports[route], "stop")
    stopped = case["stopped"]
    assert stopped["text"].startswith("slow-0") and "slow-59" not in stopped["text"]
    assert stopped["last"]["type"] == "RUN_ERROR", stopped["last"]    # CopilotKit's own end of an aborted run
    _succeeded(case["next"], "You said: hello again")
    if route == "agent":    # the run left without a client was cancelled, not left to finish
        assert case["adapterEnd"] == {"status": 200, "type": "RUN_ERROR", "code": "RUN_CANCELLED"}


def test_howto_stoppable_agent_stops_the_run_at_once(reports):
    case = _case(reports["agent"], "stopNow")
    assert case["adapterEnd"] == {"status": 200, "type": "RUN_ERROR", "code": "RUN_CANCELLED"}
    _succeeded(case["next"], "You said: hello again")


@pytest.mark.parametrize("route", ROUTES)
def test_frontend_tool_with_client_tools_ignore(tool_reports, route):
    case = _case(tool_reports[route], "frontendTool")
    assert case["sentTools"] == ["showBanner"]
    _succeeded(case, "You said: hello with a banner")


@pytest.mark.parametrize("route", ROUTES)
def test_run_error_then_the_thread_goes_on(reports, route):
    case = _case(reports[route], "runError")
    failed = case["failed"]
    assert failed["last"]["type"] == "RUN_ERROR" and failed["last"]["code"] == "A2A_EXECUTION_FAILED"
    assert "Something went wrong." in failed["text"]
    assert [error["code"] for error in failed["errors"]] == ["agent_run_error_event"]
    _succeeded(case["after"], "You said: are you there")


@pytest.mark.parametrize("route", ROUTES)
def test_every_event_passes_the_runtimes_client_unchanged(reports, route):
    """Each event the adapter sent parses under the runtime's pinned @ag-ui client, and each run the adapter
    streamed to its end reached the page with the same events (nothing rejected, dropped or added)."""
    report = reports[route]
    assert report["wire"] and report["invalid"] == []
    seen = iter((run["runId"], run["types"]) for run in report["clientRuns"])
    missing = [run for run in report["wire"] if (run["runId"], run["types"]) not in seen]
    assert missing == [], (missing, report["clientRuns"])
    assert report["offLoopback"] == []


def test_howto_names_real_flags_and_the_agentcore_route():
    from iaccode_agui.server.cli import build_parser
    flags = {option for action in build_parser()._actions for option in action.option_strings}
    with open(HOWTO, encoding="utf-8") as handle:
        text = handle.read()
    for flag in ("--default-cwd", "--auth-token", "--client-tools", "--detached-run-timeout"):
        assert flag in text and flag in flags, flag
    runtime = next(block for block in _literal_blocks(HOWTO) if "new CopilotRuntime" in block)
    assert "new HttpAgent" in runtime and '/ag-ui/agent"' in runtime

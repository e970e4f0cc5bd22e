"""Message boundaries as a client sees them: the official ``@ag-ui/client`` rebuilds each conversation in order.

A tool call ends the assistant text before it (its ``parentMessageId``); text after the tool's result is a new
message, so the reply is shown below the result it is based on, in a run, across an interrupt and its resume
and in pipeline mode, on both routes.  Re-attaching to a finished run replays the very same ids.
"""
import json
import os
import subprocess
from typing import Any, Dict, List, Tuple

import pytest

from iaccode_agui.demo.scenarios import Write
from tests.agentcore_helpers import ac_body, ac_post, ac_stream, attach_body
from tests.agui_checker import conversation, parse_sse, rebuild_messages
from tests.node_packages import NODE_DIR, node_env

READ_TEXT = "Let me read README.md."
READ_REPLY = "README.md starts with the heading 'Demo workspace'."


def _official_messages(modules: str, config: Dict[str, Any]) -> Dict[str, List[Dict[str, Any]]]:
    env = node_env(modules)
    done = subprocess.run(["node", os.path.join(NODE_DIR, "messages_check.cjs"), json.dumps(config)],
                          capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def _in_order(turns: List[Tuple[str, str, Tuple[str, ...]]]) -> None:
    """Every result follows the assistant message that holds its call (after that message's other results)."""
    for index, (role, _, calls) in enumerate(turns):
        if role == "tool":
            before = index - 1
            while turns[before][0] == "tool":
                before -= 1
            assert turns[before][0] == "assistant" and calls[0] in turns[before][2], turns


@pytest.mark.parametrize("route", ["", "ag-ui/agent"])
def test_the_official_client_rebuilds_each_conversation_in_order(ag_ui_client_modules, adapter_factory,
                                                                 workspace, route):
    adapter = adapter_factory(default_cwd=workspace)
    iac = {"schemaVersion": 1, "rosInvocationId": "inv-mb", "cwd": workspace}
    report = _official_messages(ag_ui_client_modules, {
        "url": adapter.url + route, "headers": {}, "thread": "mb",
        "forwardedProps": {"iacCode": iac} if not route else {},
        "pipelineProps": {"iacCode": dict(iac, runMode="pipeline", pipelineName="selling")}})

    tool = conversation(report["tool"])
    call = tool[1][2]
    assert tool == [("user", "tool", ()), ("assistant", READ_TEXT, call), ("tool", "# Demo workspace\n", call),
                    ("assistant", READ_REPLY, ())]
    assert [m["role"] for m in report["tool"]].count("reasoning") == 2      # interleaved, kept apart

    write = conversation(report["write"])         # an interrupt, then its resume
    call = write[1][2]
    assert [(role, calls) for role, _, calls in write] == [("user", ()), ("assistant", call), ("tool", call),
                                                           ("assistant", ())]
    assert write[1][1] == "I'll create hello.txt for you." and write[3][1] == Write.done_text

    pipeline = conversation(report["pipeline"])   # a question, then its answer's run up to the next interrupt
    _in_order(pipeline)
    (_, intro, search), (_, _, found), (_, asked, question), (_, answer, answered), (role, noted, _) = pipeline[1:6]
    assert intro == "Let me understand your request. " and found == search
    assert asked == "" and answered == question and answer == "Hangzhou"
    assert role == "assistant" and noted.startswith("Region Hangzhou noted.")
    assert not any("Region" in text for role, text, _ in pipeline[:5])


def test_a_reattach_replays_the_ids_of_the_messages_it_missed(adapter_factory, workspace):
    # A client that lost the stream right after the tool call gets the rest with the ids the run gave them.
    adapter = adapter_factory(default_cwd=workspace)
    events, ids = ac_stream(adapter, ac_body("tool", thread="mb-att", run="r-att"))
    cut = [e["type"] for e in events].index("TOOL_CALL_START")
    replayed, replayed_ids, _ = parse_sse(ac_post(adapter, attach_body("mb-att", "r-att", ids[cut])).content)
    assert replayed_ids == ids[cut + 1:] and replayed == events[cut + 1:]
    body = adapter.body("tool", thread="mb-le")
    events, ids, _ = parse_sse(adapter.post(body).content)
    cut = [e["type"] for e in events].index("TOOL_CALL_START")
    rest, _, _ = parse_sse(adapter.post(body, headers={"Last-Event-ID": str(ids[cut])}).content)
    assert rest == events[cut + 1:]
    assert conversation(rebuild_messages(events[:cut + 1] + rest)) == conversation(rebuild_messages(events))
    assert [role for role, _, _ in conversation(rebuild_messages(events))] == ["assistant", "tool", "assistant"]

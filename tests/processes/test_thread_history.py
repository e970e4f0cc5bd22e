"""Each thread's stored conversation end to end: the history route, MESSAGES_SNAPSHOT, bounds, redaction, prune.

Real adapters (waitress) in front of the scripted runtime; every stream passes the conformance checker and
every stored message validates against the ``ag-ui-protocol`` models.
"""
import base64
import io
import json
import os
import time
import uuid
from typing import Any, Dict, List, Optional
from urllib.parse import quote

import pytest
import requests
from ag_ui.core import Message
from pydantic import TypeAdapter

from iaccode_agui.client import main as client_main
from iaccode_agui.state import prune as pruning
from iaccode_agui.state.store import ThreadStore
from tests.adapter_process import AdapterProcess
from tests.agentcore_helpers import ac_body, ac_stream, error_of
from tests.agui_checker import check_sequence, parse_sse, validate_models
from tests.harness import interrupt_of

MESSAGES = TypeAdapter(List[Message])
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x00" * 64).decode()


def history(adapter: Any, thread: str, prefix: str = "", **headers: str) -> Dict[str, Any]:
    response = requests.get(adapter.url + prefix + "threads/%s/messages" % quote(thread, safe=""), headers=headers,
                            timeout=10)
    assert response.status_code == 200, response.text
    document = response.json()
    assert set(document) == {"threadId", "messages", "truncated"} and document["threadId"] == thread
    MESSAGES.validate_python(document["messages"])
    return document


def snapshots(events: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    return [event for event in events if event["type"] == "MESSAGES_SNAPSHOT"]


def ids_of(messages: List[Dict[str, Any]]) -> List[str]:
    return [message["id"] for message in messages]


def turn(adapter: Any, text: str, thread: str, known: Optional[List[Dict[str, Any]]] = None, **props: Any):
    """A new turn whose input holds ``known`` (a stock client's history) before the new user message."""
    body = adapter.body(text, thread=thread, **props)
    body["messages"] = [m for m in known or [] if m["role"] != "activity"] + body["messages"]
    return body, adapter.run(body)


def allow(interrupt: Dict[str, Any]) -> List[Dict[str, Any]]:
    return [{"interruptId": interrupt["id"], "status": "resolved", "payload": {"decision": "allow_once"}}]


def test_the_conversation_outlives_the_run_logs_through_the_route_and_a_snapshot(adapter_factory, tmp_path):
    state_dir = str(tmp_path / "state")
    first = adapter_factory(state_dir=state_dir, run_log_ttl=1)
    body1, _ = turn(first, "tool please", "h1")
    body2, events = turn(first, "write a file", "h1", history(first, "h1")["messages"])
    first.run(first.body(None, thread="h1", resume=allow(interrupt_of(events))))
    first.stop()
    second = adapter_factory(state_dir=state_dir, run_log_ttl=1)
    second.app.manager.runlogs.sweep(now=time.time() + 5)
    assert not [name for name in os.listdir(os.path.join(state_dir, "runs")) if name.endswith(".log")]
    stored = history(second, "h1")["messages"]
    # one assistant message per text segment: the text after a tool result is a message of its own
    assert [m["role"] for m in stored] == ["user", "assistant", "tool", "assistant", "user", "assistant", "tool",
                                           "activity", "assistant"]
    assert stored[0] == body1["messages"][0] and stored[4] == body2["messages"][-1]
    assert stored[1]["toolCalls"][0]["function"]["name"] == "read_file"
    assert stored[2]["content"] == "# Demo workspace\n"
    assert "Done: hello.txt was written." in stored[8]["content"]
    answer = stored[7]["content"]["answer"]
    assert answer == {"status": "resolved", "payload": {"decision": "allow_once"}}
    # A client that lost everything (a reload, another device) gets it all back, then its own message.
    body3, events = turn(second, "hello again", "h1")
    (snapshot,) = snapshots(events)
    assert events.index(snapshot) == 1
    assert snapshot["messages"] == stored + [body3["messages"][0]]


def test_every_resume_run_opens_with_a_snapshot_holding_the_call_it_answers(adapter):
    body, events = turn(adapter, "write a file", "h2")
    assert not snapshots(events)
    interrupt = interrupt_of(events)
    resumed = adapter.run(adapter.body(None, thread="h2", resume=allow(interrupt)))
    (snapshot,) = snapshots(resumed)
    assert resumed.index(snapshot) == 1
    calls = [call["id"] for m in snapshot["messages"] for call in m.get("toolCalls") or []]
    result = next(e for e in resumed if e["type"] == "TOOL_CALL_RESULT")
    assert result["toolCallId"] in calls and resumed.index(result) > 1
    assert ids_of(snapshot["messages"])[0] == body["messages"][0]["id"]
    assert snapshot["messages"][-1]["content"]["interrupt"] == interrupt


def test_an_in_sync_client_gets_no_snapshot_and_one_that_lost_its_history_does(adapter):
    turn(adapter, "hello", "h3")
    stored = history(adapter, "h3")["messages"]
    _, in_sync = turn(adapter, "more", "h3", stored)
    assert not snapshots(in_sync)
    stored = history(adapter, "h3")["messages"]
    _, stale = turn(adapter, "more still", "h3", stored[:2])      # a client that missed the last turn
    assert ids_of(snapshots(stale)[0]["messages"])[:4] == ids_of(stored)


def test_resume_mode_and_off(adapter_factory):
    resume_only = adapter_factory(messages_snapshot="resume")
    turn(resume_only, "hello", "h4")
    _, events = turn(resume_only, "write a file", "h4")
    assert not snapshots(events)
    resumed = resume_only.run(resume_only.body(None, thread="h4", resume=allow(interrupt_of(events))))
    assert len(snapshots(resumed)) == 1
    off = adapter_factory(messages_snapshot="off", state_dir=resume_only.settings.state_dir + "-off")
    _, events = turn(off, "write a file", "h5")
    resumed = off.run(off.body(None, thread="h5", resume=allow(interrupt_of(events))))
    assert not snapshots(resumed) and len(history(off, "h5")["messages"]) == 5     # user, assistant(call), tool, activity, assistant


def test_agentcore_route_snapshot_fits_the_event_limit_and_says_it_was_shortened(adapter_factory, workspace):
    ac = adapter_factory(default_cwd=workspace, max_sse_event_bytes=4096)
    for index in range(6):
        ac_stream(ac, ac_body("tell me something long %d %s" % (index, "x" * 600), thread="h6"))
    body = ac_body("write a file", thread="h6")
    events, _ = ac_stream(ac, body)
    (snapshot,) = snapshots(events)
    assert snapshot["metadata"] == {"iacCode": {"truncated": True}}
    assert len(json.dumps(snapshot).encode()) <= 4096
    assert snapshot["messages"][-1]["id"] == body["messages"][0]["id"]
    validate_models(events)
    resumed, _ = ac_stream(ac, ac_body(None, thread="h6", resume=allow(interrupt_of(events))))
    assert len(snapshots(resumed)) == 1
    document = history(ac, "h6", prefix="ag-ui/agent/")
    assert document["truncated"] is False and len(document["messages"]) >= 16
    assert body["messages"][0] in document["messages"]
    assert [m["role"] for m in document["messages"]].count("tool") == 1


def test_a_second_process_on_the_state_directory_serves_the_same_conversation(adapter, demo, tmp_path, workspace):
    turn(adapter, "tool please", "h7")
    mine = history(adapter, "h7")
    other = AdapterProcess(demo.url, demo.token, adapter.settings.state_dir, workspace, str(tmp_path / "b.log"))
    try:
        response = requests.get(other.url + "threads/h7/messages", timeout=10)
        assert response.status_code == 200 and response.json() == mine
        body = adapter.body("and now", thread="h7")
        answer = requests.post(other.url, json=body, headers={"Accept": "text/event-stream"}, timeout=30)
        events, _, _ = parse_sse(answer.content)
        check_sequence(events)
        assert snapshots(events)[0]["messages"] == mine["messages"] + body["messages"]
    finally:
        other.kill()
    assert len(history(adapter, "h7")["messages"]) == 6     # user, assistant(call), tool, assistant, user, assistant


def test_bounds_drop_the_oldest_and_mark_it(adapter_factory):
    few = adapter_factory(history_max_messages=3)
    turn(few, "hello", "h8")
    assert history(few, "h8")["truncated"] is False
    body, _ = turn(few, "again", "h8")
    document = history(few, "h8")
    assert document["truncated"] is True and len(document["messages"]) == 3
    assert ids_of(document["messages"])[1] == body["messages"][0]["id"]
    small = adapter_factory(history_max_bytes=4096, state_dir=few.settings.state_dir + "-small")
    turn(small, "firehose 400", "h9")
    document = history(small, "h9")
    size = len(json.dumps(document["messages"], separators=(",", ":"), ensure_ascii=False).encode())
    assert size <= 4096 and document["truncated"] is False
    assert document["messages"][-1]["content"].endswith("bytes]")        # cut, with its original size
    for _ in range(4):
        turn(small, "firehose 400", "h9")
    document = history(small, "h9")
    size = len(json.dumps(document["messages"], separators=(",", ":"), ensure_ascii=False).encode())
    assert document["truncated"] is True and size <= 4096


def test_credentials_and_image_data_are_never_stored(adapter, tmp_path):
    secret = "sk-live-" + uuid.uuid4().hex
    body = adapter.body(None, thread="h10", llmApiKey=secret, alibabaCloud={"accessKeyId": "id",
                                                                            "accessKeySecret": secret + "x"})
    body["messages"] = [{"id": "u-img", "role": "user", "content": [
        {"type": "text", "text": "my key is %s and %sx" % (secret, secret)},
        {"type": "image", "source": {"type": "data", "mimeType": "image/png", "value": PNG},
         "metadata": {"filename": "cat.png"}}]}]
    adapter.run(body)
    stored = history(adapter, "h10")["messages"]
    assert stored[0]["content"] == [{"type": "text", "text": "my key is [redacted] and [redacted]"},
                                    {"type": "text", "text": "[image cat.png (image/png): not kept in the "
                                                             "conversation]"}]
    raw = open(adapter.app.manager.history.path_for("h10"), "rb").read()
    assert secret.encode() not in raw and PNG[:24].encode() not in raw


def test_prune_removes_the_conversation_with_the_thread(adapter_factory, tmp_path):
    state_dir = str(tmp_path / "prune-state")
    adapter = adapter_factory(state_dir=state_dir)
    turn(adapter, "hello", "h11")
    path = adapter.app.manager.history.path_for("h11")
    assert os.path.exists(path)
    adapter.stop()
    report = pruning.prune(ThreadStore(state_dir), 0.0, now=time.time() + 1)
    assert report.count(pruning.REMOVED) == 1
    assert os.listdir(os.path.join(state_dir, "threads")) == []
    again = adapter_factory(state_dir=state_dir)
    response = requests.get(again.url + "threads/h11/messages", timeout=10)
    assert response.status_code == 404 and response.json()["error"]["code"] == "THREAD_NOT_FOUND"


def test_route_errors_auth_and_session_header(adapter_factory, workspace):
    secured = adapter_factory(auth_token="tok", default_cwd=workspace)
    bearer = {"Authorization": "Bearer tok"}
    secured.run(secured.body("hello", thread="a/b c"), headers=bearer)
    assert history(secured, "a/b c", **bearer)["messages"][0]["content"] == "hello"
    assert history(secured, "a/b c", prefix="ag-ui/agent/", **{"x-api-key": "tok"})["messages"]
    get = lambda path, **headers: requests.get(secured.url + path, headers=headers, timeout=10)  # noqa: E731
    assert get("threads/x/messages").status_code == 401
    assert get("threads/x/messages", **{"x-api-key": "tok"}).status_code == 401   # Bearer only on this family
    assert get("ag-ui/agent/threads/x/messages").status_code == 401
    missing = get("threads/never/messages", **bearer)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "THREAD_NOT_FOUND"
    missing = get("ag-ui/agent/threads/never/messages", **bearer)
    assert error_of(missing)[:2] == (404, "THREAD_NOT_FOUND")
    assert missing.headers["X-AgentCore-Session-ID"] == "never"
    assert error_of(get("threads/%01x/messages", **bearer))[:2] == (400, "INVALID_INPUT")
    assert error_of(get("threads/%s/messages" % ("t" * 1025), **bearer))[:2] == (400, "INVALID_INPUT")
    assert error_of(get("ag-ui/agent/threads/%01x/messages", **bearer))[:2] == (400, "INVALID_AG_UI_REQUEST")
    mismatch = get("threads/a%2Fb%20c/messages", **dict(bearer, **{"X-AgentCore-Session-ID": "other"}))
    assert error_of(mismatch)[:2] == (400, "SESSION_ID_MISMATCH")
    same = get("ag-ui/agent/threads/a%2Fb%20c/messages", **dict(bearer, **{"X-AgentCore-Session-ID": "a/b c"}))
    assert same.status_code == 200 and same.headers["X-AgentCore-Session-ID"] == "a/b c"
    german = get("threads/never/messages", **dict(bearer, **{"Accept-Language": "de"}))
    assert german.json()["error"]["message"].startswith("Der Thread wurde nicht gefunden")


def test_capabilities_name_the_history_route(adapter):
    document = requests.get(adapter.url + "capabilities", timeout=10).json()
    assert document["custom"]["iacCode"]["history"] == {
        "served": True, "route": "/threads/{threadId}/messages",
        "agentcoreRoute": "/ag-ui/agent/threads/{threadId}/messages", "messagesSnapshot": "auto",
        "maxMessages": 1000, "maxBytes": 1048576}


def test_a_pipeline_resume_opens_with_a_snapshot(adapter):
    events = adapter.run(adapter.body("pipeline: deploy my web shop", thread="h12", runMode="pipeline",
                                      pipelineName="selling"))
    interrupt = interrupt_of(events)
    resumed = adapter.run(adapter.body(None, thread="h12", runMode="pipeline", pipelineName="selling", resume=[
        {"interruptId": interrupt["id"], "status": "resolved", "payload": {"selectedId": "cn-hangzhou"}}]))
    (snapshot,) = snapshots(resumed)
    reopened = [e["stepName"] for e in resumed[1:resumed.index(snapshot)]]
    assert reopened == ["intent_parsing"] and [e["type"] for e in resumed[:2]] == ["RUN_STARTED", "STEP_STARTED"]
    assert resumed[resumed.index(snapshot) + 1]["type"] == "ACTIVITY_SNAPSHOT"
    assert snapshot["messages"][-1]["content"]["interrupt"] == interrupt
    stored = history(adapter, "h12")["messages"]
    assert any(m["role"] == "activity" and m["activityType"] == "iac-code.pipeline.v1" for m in stored)


def test_terminal_client_prints_a_threads_history(adapter):
    _, events = turn(adapter, "write a file", "h13")
    adapter.run(adapter.body(None, thread="h13", resume=allow(interrupt_of(events))))
    out = io.StringIO()
    code = client_main(["--url", adapter.url, "--thread", "h13", "--history", "--no-color"], out=out)
    text = out.getvalue()
    assert code == 0
    lines = text.splitlines()
    assert lines[0] == "> write a file"
    assert any("write_file(" in line for line in lines)
    assert any(line.startswith("? Change a workspace file") for line in lines)
    assert any('{"decision":"allow_once"}' in line for line in lines)
    assert "Done: hello.txt was written." in text
    out = io.StringIO()
    assert client_main(["--url", adapter.url, "--thread", "nobody", "--history"], out=out) == 1
    assert "THREAD_NOT_FOUND" in out.getvalue()


def test_terminal_client_history_needs_a_thread(capsys):
    with pytest.raises(SystemExit) as exit_info:
        client_main(["--history"])
    assert exit_info.value.code == 2 and "--history needs --thread" in capsys.readouterr().err

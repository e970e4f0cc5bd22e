"""The adapter in front of the REAL `iac-code a2a` 0.16 runtime (scripted LLM, offline).

Normal turn with reasoning, permission interrupt with allow_once / deny / cancelled, a second turn on the
same thread, an adapter restart between the interrupt and the resume, and a live cancel.
"""
import os
import uuid

import pytest

from tests.agui_checker import conversation, rebuild_messages, types
from tests.harness import Adapter, SSEReader, interrupt_of, session_of, text_of


@pytest.fixture
def real_adapter(real_a2a, tmp_path):
    adapter = Adapter(real_a2a.url, real_a2a.token, str(tmp_path / "state"), real_a2a.workspace)
    yield adapter
    adapter.stop()


def _thread() -> str:
    return "it-" + uuid.uuid4().hex[:10]


def test_normal_turn_with_reasoning_then_second_turn(real_adapter):
    thread = _thread()
    first = real_adapter.run(real_adapter.body("hello real runtime", thread=thread, ros="inv-1"), timeout=120)
    kinds = types(first)
    assert "REASONING_MESSAGE_CONTENT" in kinds and "TEXT_MESSAGE_CONTENT" in kinds
    assert "Your message was: hello real runtime" in text_of(first)
    assert text_of(first).count("Your message was") == 1     # the consolidated final text is not repeated
    assert first[-1]["outcome"] == {"type": "success"}
    assert first[-1]["usage"][0]["provider"] == "openai"
    second = real_adapter.run(real_adapter.body("again", thread=thread, ros="inv-2"), timeout=120)
    one, two = session_of(first), session_of(second)
    assert one["sessionId"] == two["sessionId"] and one["contextId"] == two["contextId"]
    assert one["taskId"] != two["taskId"]


def test_permission_allow_once_tool_call_and_artifact(real_adapter, real_a2a):
    thread = _thread()
    first = real_adapter.run(real_adapter.body("please write the file", thread=thread, ros="inv"), timeout=120)
    assert "TOOL_CALL_START" in types(first)
    interrupt = interrupt_of(first)
    assert interrupt["reason"] == "tool_call" and interrupt["metadata"]["toolName"] == "write_file"
    resumed = real_adapter.run(real_adapter.body(None, thread=thread, ros="inv", resume=[
        {"interruptId": interrupt["id"], "status": "resolved", "payload": {"decision": "allow_once"}}]), timeout=120)
    assert any(e["type"] == "CUSTOM" and e["name"] == "iac-code.artifact.v1" for e in resumed)
    result = next(e for e in resumed if e["type"] == "TOOL_CALL_RESULT")
    assert result["toolCallId"] == interrupt["toolCallId"] and "Successfully wrote" in result["content"]
    assert resumed[-1]["outcome"] == {"type": "success"}
    assert os.path.exists(os.path.join(real_a2a.workspace, "hello.txt"))
    # The reply is a message of its own, below the result (the runtime gives it the asking message's id).
    turns = conversation(rebuild_messages(first + resumed))
    call = (interrupt["toolCallId"],)
    assert [(role, calls) for role, _, calls in turns] == [("assistant", call), ("tool", call), ("assistant", ())]
    assert all(text for role, text, _ in turns)


@pytest.mark.parametrize("entry", [{"status": "resolved", "payload": {"decision": "deny"}}, {"status": "cancelled"}])
def test_permission_deny_and_cancelled(real_adapter, entry):
    thread = _thread()
    interrupt = interrupt_of(real_adapter.run(real_adapter.body("use bash please", thread=thread, ros="i"),
                                              timeout=120))
    resumed = real_adapter.run(real_adapter.body(None, thread=thread, ros="i",
                                                 resume=[dict(entry, interruptId=interrupt["id"])]), timeout=120)
    result = next(e for e in resumed if e["type"] == "TOOL_CALL_RESULT")
    assert "denied" in result["content"]
    assert resumed[-1]["outcome"] == {"type": "success"}


def test_interrupt_survives_adapter_restart(real_a2a, tmp_path):
    state_dir = str(tmp_path / "restart-state")
    thread = _thread()
    first = Adapter(real_a2a.url, real_a2a.token, state_dir, real_a2a.workspace)
    try:
        interrupt = interrupt_of(first.run(first.body("write it", thread=thread, ros="inv"), timeout=120))
    finally:
        first.stop()
    second = Adapter(real_a2a.url, real_a2a.token, state_dir, real_a2a.workspace)
    try:
        resumed = second.run(second.body(None, thread=thread, ros="inv", resume=[
            {"interruptId": interrupt["id"], "status": "resolved", "payload": {"decision": "allow_once"}}]),
            timeout=120)
        assert resumed[-1]["outcome"] == {"type": "success"}
        assert any(e["type"] == "TOOL_CALL_RESULT" for e in resumed)
    finally:
        second.stop()


def test_live_cancel_through_extension(real_adapter):
    thread = _thread()
    response = real_adapter.post(real_adapter.body("slow story please", thread=thread, ros="c"), stream=True,
                                 timeout=120)
    reader = SSEReader(response)
    events = reader.until("TEXT_MESSAGE_CONTENT", limit=60)
    execution_id = session_of(events)["executionId"]
    answer = real_adapter.cancel(execution_id, thread, "c")
    assert answer.status_code == 200 and answer.json()["status"] == "cancelled"
    events = reader.until("RUN_ERROR", limit=60)
    reader.close()
    assert events[-1]["code"] == "CANCELLED"

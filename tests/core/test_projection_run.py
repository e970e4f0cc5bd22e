"""The run projection, driven with plain lists of dicts (real runtime captures and hand-made frames)."""
import copy
import json
import os
from typing import Any, Dict, List, Tuple

import pytest

from iaccode_agui.projection.effects import BindSession, CommitInterrupts, EndRun, is_event
from iaccode_agui.projection.projector import RunContext, RunProjector
from iaccode_agui.projection.textreplay import text_digest
from tests.agui_checker import check_sequence, conversation, rebuild_messages, types, validate_models

CAPTURES = os.path.join(os.path.dirname(os.path.dirname(__file__)), "interop", "captures")


def capture_streams(name: str) -> List[Tuple[str, List[Dict[str, Any]]]]:
    """(method, [results]) for every streamed call in a capture, in order."""
    streams: List[Tuple[str, List[Dict[str, Any]]]] = []
    with open(os.path.join(CAPTURES, name + ".jsonl"), encoding="utf-8") as handle:
        for line in handle:
            item = json.loads(line)
            if item["kind"] == "rpc_request":
                streams.append((item["body"]["method"], []))
            elif item["kind"] == "sse" and "result" in item["frame"]:
                streams[-1][1].append(item["frame"]["result"])
    return [(method, frames) for method, frames in streams if frames]


def context_of(frames: List[Dict[str, Any]]) -> str:
    for frame in frames:
        for value in frame.values():
            if isinstance(value, dict) and value.get("contextId"):
                return value["contextId"]
    raise AssertionError("no context id")


def make(frames: List[Dict[str, Any]], **overrides: Any) -> RunProjector:
    fields = dict(thread_id="t1", run_id="r1", execution_id="exec-1", context_id=context_of(frames),
                  ros_invocation_id="inv-1", language="en")
    fields.update(overrides)
    return RunProjector(RunContext(**fields), clock=lambda: 1_800_000_000.0)


def run_all(projector: RunProjector, frames: List[Dict[str, Any]], start: bool = True) -> List[Any]:
    out: List[Any] = list(projector.start()) if start else []
    for frame in frames:
        out.extend(projector.feed(copy.deepcopy(frame)))
        if projector.done:
            break
    out.extend(projector.end_of_stream())
    return out


def events_of(outputs: List[Any]) -> List[Dict[str, Any]]:
    events = [dict(item) for item in outputs if is_event(item)]
    for event in events:
        event.setdefault("timestamp", 1)
    return events


def test_normal_turn_from_real_runtime() -> None:
    _, frames = capture_streams("normal_turn")[0]
    projector = make(frames)
    outputs = run_all(projector, frames)
    events = events_of(outputs)
    validate_models(events)
    check_sequence(events)
    kinds = types(events)
    assert kinds[0] == "RUN_STARTED" and kinds[-1] == "RUN_FINISHED"
    assert kinds[1] == "CUSTOM" and events[1]["name"] == "iac-code.session.v1"
    assert "REASONING_START" in kinds and "TEXT_MESSAGE_START" in kinds
    final = events[-1]
    assert final["outcome"] == {"type": "success"}
    usage = final["usage"]
    assert len(usage) == 1 and all(isinstance(v, int) for k, v in usage[0].items() if k.endswith("Tokens"))
    # the consolidated final text is not shown again
    text = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert text.count("Your message was") == 1
    task_id = frames[0]["task"]["id"]
    start = next(e for e in events if e["type"] == "TEXT_MESSAGE_START")
    assert start["messageId"] == task_id + "-message"
    # effects: task then session bound before the session event, and EndRun before RUN_FINISHED
    effect_kinds = [type(item).__name__ for item in outputs if not is_event(item)]
    assert effect_kinds == ["BindTask", "BindSession", "EndRun"]
    session_index = next(i for i, item in enumerate(outputs) if is_event(item) and item["type"] == "CUSTOM")
    assert isinstance(outputs[session_index - 1], BindSession)
    assert isinstance(outputs[-2], EndRun) and outputs[-2].outcome == "success"


def test_permission_interrupt_from_real_runtime() -> None:
    _, frames = capture_streams("write_permission_allow_once")[0]
    projector = make(frames)
    outputs = run_all(projector, frames)
    events = events_of(outputs)
    validate_models(events)
    check_sequence(events)
    final = events[-1]
    assert final["type"] == "RUN_FINISHED" and final["outcome"]["type"] == "interrupt"
    (interrupt,) = final["outcome"]["interrupts"]
    assert interrupt["reason"] == "tool_call"
    assert interrupt["id"].startswith("permission-")
    assert interrupt["responseSchema"]["properties"]["decision"]["enum"] == ["allow_once", "deny"]
    assert interrupt["expiresAt"].endswith("Z")
    assert interrupt["toolCallId"] == interrupt["metadata"]["toolUseId"]
    tool_args = next(e for e in events if e["type"] == "TOOL_CALL_ARGS")
    assert json.loads(tool_args["delta"]) == {"content": "hello from fake llm\n", "path": "hello.txt"}
    assert tool_args["delta"].index('"content"') < tool_args["delta"].index('"path"')
    commit_index = next(i for i, item in enumerate(outputs) if isinstance(item, CommitInterrupts))
    finished_index = next(i for i, item in enumerate(outputs) if is_event(item) and item["type"] == "RUN_FINISHED")
    assert commit_index < finished_index
    commit = outputs[commit_index]
    assert list(commit.pending) == [interrupt["id"]]
    shown = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert commit.text_digests == (text_digest(shown),)


def test_resume_stream_maps_artifact_and_tool_result() -> None:
    streams = capture_streams("write_permission_allow_once")
    _, first = streams[0]
    _, answer = streams[-1]
    task_id = first[0]["task"]["id"]
    projector = make(answer, task_id=task_id, session_id=None, resume=True)
    outputs = list(projector.start()) + list(projector.accept())
    for frame in answer:
        outputs.extend(projector.feed(frame))
    outputs.extend(projector.end_of_stream())
    events = events_of(outputs)
    validate_models(events)
    check_sequence(events)
    kinds = types(events)
    assert "CUSTOM" in kinds
    artifact = next(e for e in events if e["type"] == "CUSTOM" and e["name"] == "iac-code.artifact.v1")
    assert artifact["value"]["schemaVersion"] == 1 and artifact["value"]["metadata"]["byteSize"] == 20
    result = next(e for e in events if e["type"] == "TOOL_CALL_RESULT")
    assert result["content"].startswith("Successfully wrote")
    assert result["messageId"] == "tool-result-" + result["toolCallId"]
    assert events[-1]["outcome"] == {"type": "success"}


def test_a_real_write_turn_and_its_resume_rebuild_the_conversation_in_order() -> None:
    # The interrupted run's text ends before the tool call it names as parent; the resumed run's reply (the
    # runtime's same message id) is a message of its own, below the tool's result.
    streams = capture_streams("write_permission_allow_once")
    (_, first), (_, answer) = streams[0], streams[-1]
    task_id = first[0]["task"]["id"]
    asking = events_of(run_all(make(first), first))
    resumed_projector = make(answer, run_id="r2", task_id=task_id, session_id=None, resume=True,
                             message_scope="d1g3st")
    resumed = events_of(run_all(resumed_projector, answer))
    kinds = types(asking)
    assert kinds.index("TEXT_MESSAGE_END") == kinds.index("TOOL_CALL_START") - 1
    start = next(e for e in asking if e["type"] == "TOOL_CALL_START")
    assert start["parentMessageId"] == task_id + "-message"
    assert [e["messageId"] for e in resumed if e["type"] == "TEXT_MESSAGE_START"] == [task_id + "-message@d1g3st"]
    user = {"id": "u1", "role": "user", "content": "please write a file"}
    assert conversation(rebuild_messages(asking + resumed, [user])) == [
        ("user", "please write a file", ()),
        ("assistant", "I'll create hello.txt for you.", ("call_fake_1",)),
        ("tool", next(e["content"] for e in resumed if e["type"] == "TOOL_CALL_RESULT"), ("call_fake_1",)),
        ("assistant", "Done. The tool finished.", ())]


def test_session_event_waits_for_acceptance_on_resume() -> None:
    _, frames = capture_streams("normal_turn")[0]
    projector = make(frames, resume=True, task_id=frames[0]["task"]["id"])
    outputs = run_all(projector, frames)
    names = [e.get("name") for e in events_of(outputs) if e["type"] == "CUSTOM"]
    assert "iac-code.session.v1" not in names


def _status(task: str, ctx: str, state: str = "TASK_STATE_WORKING", text: str = "", iac: Any = None,
            message_id: str = "") -> Dict[str, Any]:
    status: Dict[str, Any] = {"state": state}
    if text:
        status["message"] = {"messageId": message_id or task + "-message", "role": "ROLE_AGENT",
                             "parts": [{"text": text}]}
    return {"statusUpdate": {"taskId": task, "contextId": ctx, "status": status,
                             "metadata": {"iac_code": iac or {}}}}


CTX = "agui-ctx"


def simple(**overrides: Any) -> RunProjector:
    fields = dict(thread_id="t1", run_id="r1", execution_id="e1", context_id=CTX, ros_invocation_id="i1")
    fields.update(overrides)
    return RunProjector(RunContext(**fields), clock=lambda: 1_800_000_000.0)


def test_task_id_change_is_a_protocol_error() -> None:
    projector = simple()
    outputs = list(projector.start())
    outputs += projector.feed(_status("task-a", CTX, text="hi"))
    outputs += projector.feed(_status("task-b", CTX, text="there"))
    events = events_of(outputs)
    assert events[-1]["type"] == "RUN_ERROR" and events[-1]["code"] == "A2A_PROTOCOL_ERROR"
    check_sequence(events)


@pytest.mark.parametrize("field,value", [("contextId", "agui-other"), ("session", "s-2")])
def test_context_or_session_change_is_a_protocol_error(field: str, value: str) -> None:
    projector = simple(session_id="s-1")
    outputs = list(projector.start())
    frame = _status("task-a", CTX, text="hi", iac={"iacCodeSessionId": "s-1"})
    outputs += projector.feed(frame)
    bad = _status("task-a", CTX, text="x", iac={"iacCodeSessionId": "s-1"})
    if field == "contextId":
        bad["statusUpdate"]["contextId"] = value
    else:
        bad["statusUpdate"]["metadata"]["iac_code"]["iacCodeSessionId"] = value
    outputs += projector.feed(bad)
    events = events_of(outputs)
    assert events[-1]["code"] == "A2A_PROTOCOL_ERROR"
    check_sequence(events)


@pytest.mark.parametrize("state,code", [("TASK_STATE_FAILED", "A2A_EXECUTION_FAILED"),
                                        ("TASK_STATE_REJECTED", "A2A_EXECUTION_FAILED"),
                                        ("TASK_STATE_AUTH_REQUIRED", "A2A_EXECUTION_FAILED"),
                                        ("TASK_STATE_CANCELED", "CANCELLED")])
def test_terminal_failures(state: str, code: str) -> None:
    projector = simple()
    outputs = list(projector.start()) + projector.feed(_status("t", CTX, text="working"))
    outputs += projector.feed(_status("t", CTX, state=state, text="Task canceled.", message_id="t-5"))
    events = events_of(outputs)
    check_sequence(events)
    assert events[-1]["type"] == "RUN_ERROR" and events[-1]["code"] == code
    texts = [e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT"]
    assert texts == ["working", "Task canceled."]


def test_stream_ending_while_working_is_a_failure_and_completed_is_success() -> None:
    projector = simple()
    outputs = list(projector.start()) + projector.feed(_status("t", CTX, text="partial"))
    outputs += projector.end_of_stream()
    assert events_of(outputs)[-1]["code"] == "A2A_EXECUTION_FAILED"
    projector = simple()
    outputs = list(projector.start()) + projector.feed(_status("t", CTX, state="TASK_STATE_COMPLETED", text="ok"))
    assert events_of(outputs)[-1]["outcome"] == {"type": "success"}
    assert projector.done


def test_retryable_error_is_a_successful_turn() -> None:
    projector = simple()
    frame = _status("t", CTX, state="TASK_STATE_INPUT_REQUIRED", text="A temporary error occurred. Please retry.",
                    iac={"error": {"retryable": True}})
    events = events_of(list(projector.start()) + projector.feed(frame))
    assert events[-1]["outcome"] == {"type": "success"}


def test_tools_progress_usage_and_dedupe() -> None:
    projector = simple()
    out = list(projector.start())
    out += projector.feed(_status("t", CTX, text="Let me look."))
    out += projector.feed(_status("t", CTX, iac={"tool": {"status": "started", "toolUseId": "u1", "name": "read_file"}}))
    out += projector.feed(_status("t", CTX, iac={"tool": {"status": "started", "toolUseId": "u1", "name": "read_file"}}))
    out += projector.feed(_status("t", CTX, iac={"tool": {"status": "input_complete", "toolUseId": "u1",
                                                          "name": "read_file", "inputSummary": "pwd"}}))
    out += projector.feed(_status("t", CTX, iac={"tool": {"status": "progress", "toolUseId": "u1", "name": "read_file",
                                                          "mcp": {"progress": 1.0, "total": 2.0}}}))
    for _ in range(2):
        out += projector.feed(_status("t", CTX, iac={"tool": {"status": "completed", "toolUseId": "u1",
                                                              "name": "read_file", "result": {"lines": 3.0}}}))
    out += projector.feed(_status("t", CTX, iac={"usage": {"inputTokens": 10.0, "outputTokens": 2.0, "totalTokens": 12.0,
                                                           "provider": "openai", "model": "m"}}))
    out += projector.feed(_status("t", CTX, iac={"usage": {"inputTokens": 5, "outputTokens": 1, "totalTokens": 6,
                                                           "provider": "openai", "model": "m"}}))
    out += projector.feed(_status("t", CTX, iac={"usage": {"inputTokens": 7, "outputTokens": 1, "provider": "other",
                                                           "model": "x"}}))
    out += projector.feed(_status("t", CTX, state="TASK_STATE_INPUT_REQUIRED"))
    events = events_of(out)
    validate_models(events)
    check_sequence(events)
    kinds = types(events)
    assert kinds.count("TOOL_CALL_START") == 1 and kinds.count("TOOL_CALL_RESULT") == 1
    start = next(e for e in events if e["type"] == "TOOL_CALL_START")
    assert start["parentMessageId"] == "t-message"
    args = next(e for e in events if e["type"] == "TOOL_CALL_ARGS")
    assert args["delta"] == '{"summary":"pwd"}'
    progress = next(e for e in events if e["type"] == "CUSTOM" and e["name"] == "iac-code.tool-progress.v1")
    assert progress["value"]["mcp"] == {"progress": 1, "total": 2}
    result = next(e for e in events if e["type"] == "TOOL_CALL_RESULT")
    assert result["content"] == '{"lines":3}'
    assert events[-1]["usage"] == [
        {"provider": "openai", "model": "m", "inputTokens": 15, "outputTokens": 3, "totalTokens": 18},
        {"provider": "other", "model": "x", "inputTokens": 7, "outputTokens": 1}]


def _tool(tool_id: str, status: str, **fields: Any) -> Dict[str, Any]:
    return _status("t", CTX, iac={"tool": dict(fields, toolUseId=tool_id, name="read_file", status=status)})


def test_text_after_a_tool_call_is_a_new_message_below_the_tool_s_result() -> None:
    projector = simple()
    out = list(projector.start())
    out += projector.feed(_status("t", CTX, iac={"thinking": {"type": "raw_thinking", "text": "look first"}}))
    out += projector.feed(_status("t", CTX, text="Let me look."))
    out += projector.feed(_status("t", CTX, iac={"thinking": {"type": "raw_thinking", "text": "which file"}}))
    out += projector.feed(_tool("u1", "started"))
    out += projector.feed(_tool("u1", "input_complete", inputSummary="README.md"))
    out += projector.feed(_tool("u1", "completed", result="# Demo"))
    out += projector.feed(_status("t", CTX, iac={"thinking": {"type": "raw_thinking", "text": "short"}}))
    out += projector.feed(_status("t", CTX, text="It is "))       # the runtime's same message id
    out += projector.feed(_status("t", CTX, text="a demo."))
    out += projector.feed(_status("t", CTX, state="TASK_STATE_INPUT_REQUIRED"))
    events = events_of(out)
    validate_models(events)
    check_sequence(events)
    texts = [e for e in events if e["type"].startswith("TEXT_MESSAGE_")]
    assert [(e["type"], e["messageId"]) for e in texts if e["type"] != "TEXT_MESSAGE_CONTENT"] == [
        ("TEXT_MESSAGE_START", "t-message"), ("TEXT_MESSAGE_END", "t-message"),
        ("TEXT_MESSAGE_START", "t-message~2"), ("TEXT_MESSAGE_END", "t-message~2")]
    kinds = types(events)
    assert kinds[kinds.index("TOOL_CALL_START") - 3:kinds.index("TOOL_CALL_START") + 1] == [
        "REASONING_MESSAGE_END", "REASONING_END", "TEXT_MESSAGE_END", "TOOL_CALL_START"]
    assert next(e for e in events if e["type"] == "TOOL_CALL_START")["parentMessageId"] == "t-message"
    user = {"id": "u", "role": "user", "content": "what is in README.md?"}
    messages = rebuild_messages(events, [user])
    assert [m["role"] for m in messages] == ["user", "reasoning", "assistant", "tool", "reasoning", "reasoning",
                                             "assistant"]
    assert conversation(messages) == [("user", "what is in README.md?", ()), ("assistant", "Let me look.", ("u1",)),
                                      ("tool", "# Demo", ("u1",)), ("assistant", "It is a demo.", ())]


def test_a_tool_call_without_text_before_it_has_no_parent() -> None:
    # No text to hang the calls on: each is left to the client, which makes an assistant message for it.
    projector = simple()
    out = list(projector.start())
    out += projector.feed(_tool("u1", "started"))
    out += projector.feed(_tool("u1", "completed", result="one"))
    out += projector.feed(_status("t", CTX, text="First."))
    out += projector.feed(_tool("u2", "started"))
    out += projector.feed(_tool("u3", "started"))             # parallel, no text in between
    out += projector.feed(_tool("u2", "completed", result="two"))
    out += projector.feed(_tool("u3", "completed", result="three"))
    out += projector.feed(_status("t", CTX, text="Second."))
    out += projector.feed(_status("t", CTX, state="TASK_STATE_INPUT_REQUIRED"))
    events = events_of(out)
    check_sequence(events)
    starts = [e for e in events if e["type"] == "TOOL_CALL_START"]
    assert [e.get("parentMessageId") for e in starts] == [None, "t-message", None]
    assert conversation(rebuild_messages(events)) == [
        ("assistant", "", ("u1",)), ("tool", "one", ("u1",)), ("assistant", "First.", ("u2",)),
        ("tool", "two", ("u2",)), ("assistant", "", ("u3",)), ("tool", "three", ("u3",)),
        ("assistant", "Second.", ())]


def test_reasoning_after_text_gets_a_fresh_id() -> None:
    projector = simple()
    out = list(projector.start())
    out += projector.feed(_status("t", CTX, iac={"thinking": {"type": "raw_thinking", "text": "plan"}}))
    out += projector.feed(_status("t", CTX, text="first"))
    out += projector.feed(_status("t", CTX, iac={"thinking": {"type": "raw_thinking", "text": "more"}}))
    out += projector.feed(_status("t", CTX, iac={"thinking": {"type": "summary", "text": "ignored"}}))
    out += projector.feed(_status("t", CTX, text=" second"))
    out += projector.feed(_status("t", CTX, state="TASK_STATE_INPUT_REQUIRED"))
    events = events_of(out)
    check_sequence(events)
    starts = [e["messageId"] for e in events if e["type"] == "REASONING_START"]
    assert starts == ["reasoning-r1", "reasoning-r1~2"]
    assert "ignored" not in json.dumps(events)


def test_text_replay_suppressed_on_resume() -> None:
    shown = "I'll create hello.txt for you."
    projector = simple(resume=True, task_id="t", text_digests=frozenset({text_digest(shown)}))
    out = list(projector.start()) + list(projector.accept())
    out += projector.feed(_status("t", CTX, text=shown + " Done."))
    out += projector.feed(_status("t", CTX, text=" More."))
    out += projector.feed(_status("t", CTX, text=shown, message_id="other"))
    out += projector.feed(_status("t", CTX, state="TASK_STATE_INPUT_REQUIRED"))
    deltas = [e["delta"] for e in events_of(out) if e["type"] == "TEXT_MESSAGE_CONTENT"]
    assert deltas == [" Done.", " More."]


def test_assistant_final_shown_when_nothing_streamed() -> None:
    projector = simple()
    out = list(projector.start())
    out += projector.feed(_status("t", CTX, text="Full answer.", message_id="t-2",
                                  iac={"assistantFinal": {"complete": True}}))
    out += projector.feed(_status("t", CTX, state="TASK_STATE_INPUT_REQUIRED"))
    deltas = [e["delta"] for e in events_of(out) if e["type"] == "TEXT_MESSAGE_CONTENT"]
    assert deltas == ["Full answer."]


def test_applied_inputs_are_not_reannounced_and_input_for_other_task_is_refused() -> None:
    permission = {"kind": "permission", "inputId": "p-1", "required": True, "requestTaskId": "t", "contextId": CTX,
                  "toolUseId": "u", "toolName": "bash", "prompt": "Allow?",
                  "options": [{"id": "allow_once", "label": "Allow once"}, {"id": "deny", "label": "Deny"}]}
    projector = simple(applied_ids=frozenset({"p-1"}), task_id="t", resume=True)
    out = list(projector.start())
    out += projector.feed(_status("t", CTX, state="TASK_STATE_INPUT_REQUIRED", iac={"input": permission}))
    assert events_of(out)[-1]["outcome"] == {"type": "success"}
    projector = simple()
    bad = dict(permission, requestTaskId="other")
    out = list(projector.start()) + projector.feed(_status("t", CTX, state="TASK_STATE_INPUT_REQUIRED",
                                                           iac={"input": bad}))
    assert events_of(out)[-1]["code"] == "A2A_PROTOCOL_ERROR"


def test_generic_agent_input_required_becomes_free_text_interrupt() -> None:
    projector = simple(generic=True)
    out = list(projector.start())
    out += projector.feed({"task": {"id": "t", "contextId": CTX, "status": {"state": "TASK_STATE_SUBMITTED"}}})
    out += projector.feed(_status("t", CTX, state="TASK_STATE_INPUT_REQUIRED", text="What is your name?",
                                  message_id="m-9"))
    events = events_of(out)
    validate_models(events)
    check_sequence(events)
    (interrupt,) = events[-1]["outcome"]["interrupts"]
    assert interrupt["reason"] == "input_required" and interrupt["id"] == "input-t"
    assert interrupt["responseSchema"]["required"] == ["freeText"]


def test_history_text_for_snapshot_only_replies() -> None:
    projector = simple(generic=True)
    task = {"task": {"id": "t", "contextId": CTX, "status": {"state": "TASK_STATE_COMPLETED"},
                     "history": [{"role": "ROLE_USER", "parts": [{"text": "q"}], "messageId": "u"},
                                 {"role": "ROLE_AGENT", "parts": [{"text": "answer"}], "messageId": "a"}]}}
    out = list(projector.start()) + projector.feed(task, history_text=True)
    deltas = [e["delta"] for e in events_of(out) if e["type"] == "TEXT_MESSAGE_CONTENT"]
    assert deltas == ["answer"]


def test_abort_after_prepared_interrupt_balances_spans() -> None:
    permission = {"kind": "permission", "inputId": "p-1", "required": True, "toolUseId": "u", "prompt": "Allow?"}
    projector = simple()
    out = list(projector.start()) + projector.feed(_status("t", CTX, text="hi"))
    prepared = projector.feed(_status("t", CTX, state="TASK_STATE_INPUT_REQUIRED", iac={"input": permission}))
    assert isinstance(prepared[0], CommitInterrupts)
    closing = [item for item in prepared[1:] if is_event(item) and item["type"] not in ("RUN_FINISHED", "CUSTOM")]
    events = events_of(out + closing + projector.abort("STATE_PERSISTENCE_FAILED", "x"))
    check_sequence(events)
    assert events[-1]["code"] == "STATE_PERSISTENCE_FAILED" and projector.pending == {}


def test_a_new_turn_whose_first_session_differs_is_a_lost_conversation() -> None:
    projector = simple(session_id="s-1")
    outputs = list(projector.start())
    outputs += projector.feed(_status("task-a", CTX, text="hi", iac={"iacCodeSessionId": "s-new"}))
    events = events_of(outputs)
    assert events[-1]["type"] == "RUN_ERROR" and events[-1]["code"] == "CONVERSATION_LOST"
    check_sequence(events)


def test_a_resume_whose_session_differs_stays_a_protocol_error() -> None:
    projector = simple(session_id="s-1", resume=True, task_id="task-a")
    outputs = list(projector.start())
    outputs += projector.feed(_status("task-a", CTX, text="hi", iac={"iacCodeSessionId": "s-new"}))
    assert events_of(outputs)[-1]["code"] == "A2A_PROTOCOL_ERROR"

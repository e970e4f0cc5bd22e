"""Pipeline mode (`selling`, first step) against the REAL `iac-code a2a` 0.16 runtime, offline.

The pipeline projection was built from a reading of the reference adapter plus one capture; only the
genuine runtime proves the envelopes, the `ask_user_question` projection, the text answer and the early
exit look the way the adapter assumes.  The scripted LLM (see `fake_llm.decide_pipeline`) plays the
`intent_parsing` step: one question, then a `complete_step` conclusion with `is_infra_intent: false`.
The first test talks to the runtime directly (a failure points at the dialect), the second goes through
the adapter (a failure points at our projection).
"""

import json
import sys
import time
import uuid
from typing import Any, Dict, List

import requests

from fake_llm import (ASK_USER_QUESTION, COMPLETE_STEP, PIPELINE_ASK_ARGS, PIPELINE_INTRO,
                      PIPELINE_OPTIONS, decide)
from test_real_runtime_dialect import Client, Transcript, iac, new_context, state_of, updates
from tests.harness import Adapter, interrupt_of, session_of, text_of

PIPELINE_NAME = "selling"
FIRST_STEP = "intent_parsing"
EXTENSION_URI = "urn:iac-code:a2a:pipeline-events:v1"
ASK_REASONING = "The request is vague; ask the user."
QUESTION_INPUT_KEYS = {"kind", "schemaVersion", "inputId", "requestTaskId", "contextId", "toolUseId",
                       "prompt", "options", "allowFreeText", "freeTextPrompt", "required"}
# Both LLM calls of the step; more means the runtime rejected a conclusion and is retrying.
STEP_LLM_CALLS = 2


def pipeline_message(runtime: Any, context_id: str, text: str, task_id: str = "") -> Dict[str, Any]:
    message: Dict[str, Any] = {
        "messageId": "m-" + uuid.uuid4().hex[:12], "role": "ROLE_USER", "parts": [{"text": text}],
        "metadata": {"iac_code": {"preferredLanguage": "en", "run_mode": "pipeline",
                                  "pipeline_name": PIPELINE_NAME, "cleanupOnly": False,
                                  "cwd": runtime.workspace}},
        "contextId": context_id}
    if task_id:
        message["taskId"] = task_id
    return {"message": message, "configuration": {"acceptedOutputModes": ["text/plain"]}}


def envelopes(results: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    return [iac(u)["pipeline"] for u in updates(results) if "pipeline" in iac(u)]


def of_type(envs: List[Dict[str, Any]], event_type: str) -> List[Dict[str, Any]]:
    return [e for e in envs if e["eventType"] == event_type]


def chat_calls_since(runtime: Any, count: int) -> List[Dict[str, Any]]:
    return runtime.fake_llm.chat_requests()[count:]


def assert_envelope_shape(env: Dict[str, Any], task_id: str, context: str) -> None:
    assert env["schemaVersion"] == "1.0" and env["extensionUri"] == EXTENSION_URI
    assert env["eventId"].startswith("evt-")
    assert env["pipelineName"] == PIPELINE_NAME
    assert env["taskId"] == task_id and env["contextId"] == context
    assert isinstance(env["sequence"], float) and env["sequence"].is_integer()
    if env["scope"] == "step":
        assert env["step"]["id"] == FIRST_STEP
        assert env["step"]["runId"] == "step-%s-1" % FIRST_STEP


def assert_only_envelopes(results: List[Dict[str, Any]]) -> None:
    """Pipeline mode carries everything in envelopes: no text messages, no normal-mode signals."""
    for update in updates(results):
        assert "message" not in update["status"], update
        meta = iac(update)
        assert "pipeline" in meta, update
        assert not {"tool", "thinking", "usage", "assistantFinal"} & set(meta), meta


def assert_step_tools(chat: Dict[str, Any]) -> None:
    """The tool schemas the fake LLM's pipeline script is written against."""
    tools = {t["function"]["name"]: t["function"]["parameters"] for t in chat["tools"]}
    assert set(tools) == {"read_memory", COMPLETE_STEP, ASK_USER_QUESTION}
    ask = tools[ASK_USER_QUESTION]
    assert ask["required"] == ["question", "options"]
    assert ask["properties"]["options"]["items"]["required"] == ["id", "label"]
    conclusion = tools[COMPLETE_STEP]["properties"]["conclusion"]
    assert tools[COMPLETE_STEP]["required"] == ["conclusion"]
    assert conclusion["required"] == ["is_infra_intent", "confidence"]
    assert {"clarification_choice", "clarification_text", "category"} <= set(conclusion["properties"])


def test_pipeline_question_then_early_exit(real_a2a: Any, tmp_path: Any) -> None:
    transcript = Transcript("pipeline_question_early_exit", real_a2a.workspace)
    client = Client(real_a2a, transcript)
    context = new_context()
    calls_before = len(real_a2a.fake_llm.chat_requests())
    started = time.monotonic()
    first = client.stream(pipeline_message(real_a2a, context, "hello pipeline"))
    first_seconds = time.monotonic() - started
    transcript.add("note", seconds=round(first_seconds, 3))

    task = first[0]["task"]
    task_id = task["id"]
    assert task["status"]["state"] == "TASK_STATE_SUBMITTED" and task["contextId"] == context
    assert_only_envelopes(first[1:])
    envs = envelopes(first)
    for env in envs:
        assert_envelope_shape(env, task_id, context)
    sequences = [int(e["sequence"]) for e in envs]
    assert sequences == list(range(1, len(envs) + 1))

    assert envs[0]["eventType"] == "pipeline_started" and envs[0]["scope"] == "pipeline"
    assert envs[0]["data"]["stepNames"][0] == FIRST_STEP and envs[0]["data"]["totalSteps"] == 5
    assert envs[0]["data"]["userRequest"] == "hello pipeline"
    assert envs[1]["eventType"] == "step_started" and envs[1]["data"]["name"] == FIRST_STEP
    thinking = of_type(envs, "thinking_delta")
    assert {t["data"]["type"] for t in thinking} == {"raw_thinking"}
    assert "".join(t["data"]["text"] for t in thinking) == ASK_REASONING
    assert "".join(t["data"]["text"] for t in of_type(envs, "text_delta")) == PIPELINE_INTRO
    [started_tool] = of_type(envs, "tool_started")
    assert started_tool["data"]["toolName"] == ASK_USER_QUESTION
    assert started_tool["data"]["input"] == PIPELINE_ASK_ARGS
    tool_use_id = started_tool["data"]["toolUseId"]
    assert of_type(envs, "usage")[0]["data"]["provider"] == "openai"
    assert not of_type(envs, "tool_result")  # the question has no result until it is answered

    last = updates(first)[-1]
    assert state_of(last) == "TASK_STATE_INPUT_REQUIRED"
    assert envs[-1]["eventType"] == "input_required" and envs[-1]["status"] == "input_required"
    question = iac(last)["input"]
    assert set(question) == QUESTION_INPUT_KEYS
    assert question["kind"] == ASK_USER_QUESTION and question["schemaVersion"] == 1
    assert question["inputId"] == "ask-" + tool_use_id and question["toolUseId"] == tool_use_id
    assert question["requestTaskId"] == task_id and question["contextId"] == context
    assert question["prompt"] == PIPELINE_ASK_ARGS["question"]
    assert question["options"] == PIPELINE_OPTIONS
    assert question["allowFreeText"] is True and question["required"] is True
    assert envs[-1]["data"]["options"] == PIPELINE_OPTIONS
    assert envs[-1]["data"]["toolUseId"] == tool_use_id

    [ask_call] = chat_calls_since(real_a2a, calls_before)
    assert_step_tools(ask_call)

    # The catch-up endpoint the adapter reads before resuming.
    state = client.http("GET", "iac-code/pipeline/state",
                        params={"taskId": task_id, "afterSequence": 0})
    assert state.status_code == 200
    snapshot = state.json()["snapshot"]
    assert snapshot["lastSequence"] == sequences[-1]
    assert snapshot["taskId"] == task_id and snapshot["contextId"] == context
    assert snapshot["pipelineName"] == PIPELINE_NAME
    assert snapshot["pendingInput"]["inputId"] == question["inputId"]
    assert [e["sequence"] for e in state.json()["events"]] == sequences
    tail = requests.get(real_a2a.url + "iac-code/pipeline/state", headers=real_a2a.headers(),
                        params={"taskId": task_id, "afterSequence": 10}, timeout=30).json()
    assert [e["sequence"] for e in tail["events"]] == sequences[10:]  # (kept out of the capture)
    fetched = client.rpc("GetTask", {"id": task_id, "historyLength": 100})["result"]
    assert fetched["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert fetched["metadata"]["iac_code"]["input"] == question

    # The answer: the option LABEL as a plain text part on the same task.
    label = PIPELINE_OPTIONS[0]["label"]
    started = time.monotonic()
    second = client.stream(pipeline_message(real_a2a, context, label, task_id=task_id))
    transcript.add("note", seconds=round(time.monotonic() - started, 3))
    assert "task" not in second[0]
    assert_only_envelopes(second)
    answered = envelopes(second)
    for env in answered:
        assert_envelope_shape(env, task_id, context)
    assert min(int(e["sequence"]) for e in answered) > sequences[-1]
    assert len({e["sequence"] for e in answered}) == len(answered)
    received = answered[0]
    assert received["eventType"] == "input_received"
    assert received["data"]["toolUseId"] == tool_use_id
    assert received["data"]["selectedId"] == PIPELINE_OPTIONS[0]["id"]
    [conclude] = [e for e in of_type(answered, "tool_result")
                  if e["data"]["toolName"] == COMPLETE_STEP]
    assert conclude["data"]["isError"] is False
    [step_done] = of_type(answered, "step_completed")
    assert step_done["data"]["conclusion"]["is_infra_intent"] is False
    assert step_done["data"]["conclusion"]["clarification_choice"] == PIPELINE_OPTIONS[0]["id"]
    assert not of_type(answered, "step_failed") and not of_type(answered, "pipeline_failed")
    [completed] = of_type(answered, "pipeline_completed")
    assert completed["data"] == {"totalSteps": 5, "earlyExit": True}
    assert completed["scope"] == "pipeline" and completed["status"] == "completed"
    done_frame = next(u for u in updates(second)
                      if iac(u)["pipeline"]["eventType"] == "pipeline_completed")
    assert state_of(done_frame) == "TASK_STATE_COMPLETED"
    assert state_of(updates(second)[-1]) == "TASK_STATE_COMPLETED"

    # The runtime turned the label back into the option id for the LLM; no retry loop happened.
    calls = chat_calls_since(real_a2a, calls_before)
    assert len(calls) == STEP_LLM_CALLS
    tool_message = calls[-1]["messages"][-1]
    assert tool_message["role"] == "tool" and tool_message["tool_call_id"] == tool_use_id
    assert json.loads(tool_message["content"]) == {
        "selected_id": PIPELINE_OPTIONS[0]["id"], "selected_label": label, "free_text": ""}

    # The state log holds more than the live stream: each terminal event is first logged as
    # `pending_backup` (never streamed), then again under a new eventId once committed. A catch-up
    # that applies every unseen eventId would therefore announce the completion twice.
    final = client.http("GET", "iac-code/pipeline/state",
                        params={"taskId": task_id, "afterSequence": sequences[-1]})
    assert final.status_code == 200
    logged = final.json()["events"]
    assert final.json()["snapshot"]["lastSequence"] == max(e["sequence"] for e in logged)
    assert final.json()["snapshot"]["status"] == "completed"
    live_ids = {e["eventId"] for e in answered}
    assert live_ids <= {e["eventId"] for e in logged}
    logged_completions = of_type(logged, "pipeline_completed")
    assert [e.get("visibility") for e in logged_completions] == ["pending_backup", "committed"]
    assert logged_completions[0]["eventId"] not in live_ids
    assert completed["visibility"] == "committed"
    assert completed["eventId"] == logged_completions[1]["eventId"]
    assert client.rpc("GetTask", {"id": task_id})["result"]["status"]["state"] == \
        "TASK_STATE_COMPLETED"
    transcript.save(str(tmp_path))
    sys.stderr.write("[interop] pipeline question turn %.2f s\n" % first_seconds)


def _steps(events: List[Dict[str, Any]], kind: str) -> List[str]:
    return [e["stepName"] for e in events if e["type"] == kind]


def test_pipeline_through_adapter(real_a2a: Any, tmp_path: Any) -> None:
    adapter = Adapter(real_a2a.url, real_a2a.token, str(tmp_path / "state"), real_a2a.workspace)
    try:
        thread = "it-pipe-" + uuid.uuid4().hex[:8]
        props = {"runMode": "pipeline", "pipelineName": PIPELINE_NAME}
        started = time.monotonic()
        first = adapter.run(adapter.body("hello pipeline", thread=thread, ros="inv-p", **props),
                            timeout=180)
        first_seconds = time.monotonic() - started
        assert PIPELINE_INTRO in text_of(first)
        assert "REASONING_MESSAGE_CONTENT" in {e["type"] for e in first}
        assert FIRST_STEP in _steps(first, "STEP_STARTED")
        customs = [e for e in first if e["type"] == "CUSTOM" and e["name"] == "iac-code.pipeline.v1"]
        assert "pipeline_started" in [c["value"]["eventType"] for c in customs]
        interrupt = interrupt_of(first)
        assert interrupt["reason"] == "input_required"
        branches = interrupt["responseSchema"]["oneOf"]
        consts = [b["properties"]["selectedId"]["const"] for b in branches
                  if "selectedId" in b.get("properties", {})]
        assert consts == [o["id"] for o in PIPELINE_OPTIONS]
        assert any("freeText" in b.get("properties", {}) for b in branches)
        tool_call_id = interrupt["toolCallId"]
        assert any(e["type"] == "TOOL_CALL_START" and e["toolCallId"] == tool_call_id
                   and e["toolCallName"] == ASK_USER_QUESTION for e in first)
        upstream_task = session_of(first)["taskId"]

        started = time.monotonic()
        resumed = adapter.run(adapter.body(None, thread=thread, ros="inv-p", resume=[
            {"interruptId": interrupt["id"], "status": "resolved",
             "payload": {"selectedId": PIPELINE_OPTIONS[0]["id"]}}], **props), timeout=180)
        resume_seconds = time.monotonic() - started
        kinds = [e["type"] for e in resumed]
        assert "ACTIVITY_SNAPSHOT" in kinds
        result = next(e for e in resumed
                      if e["type"] == "TOOL_CALL_RESULT" and e["toolCallId"] == tool_call_id)
        assert PIPELINE_OPTIONS[0]["label"] in result["content"]
        assert FIRST_STEP in _steps(resumed, "STEP_FINISHED")
        pipeline = [e["value"] for e in resumed
                    if e["type"] == "CUSTOM" and e["name"] == "iac-code.pipeline.v1"]
        assert "pipeline_completed" in [p["eventType"] for p in pipeline]
        assert resumed[-1]["type"] == "RUN_FINISHED"
        assert resumed[-1]["outcome"] == {"type": "success"}
        assert session_of(resumed)["taskId"] == upstream_task

        # What actually went upstream: the label, as text, on the same task.
        answer = requests.post(real_a2a.url, headers=real_a2a.headers(), timeout=30, json={
            "jsonrpc": "2.0", "id": "check", "method": "GetTask",
            "params": {"id": upstream_task, "historyLength": 100}}).json()["result"]
        assert answer["status"]["state"] == "TASK_STATE_COMPLETED"
        sys.stderr.write("[interop] adapter pipeline: question %.2f s, resume %.2f s\n"
                         % (first_seconds, resume_seconds))
    finally:
        adapter.stop()


def test_fake_llm_pipeline_branches_the_live_run_skips() -> None:
    """Free-text answers and the runtime's "call complete_step" nudge still end the step early."""
    tools = [{"type": "function", "function": {"name": name}}
             for name in ("read_memory", COMPLETE_STEP, ASK_USER_QUESTION)]
    asked = decide([{"role": "user", "content": "hi"}], tools)
    assert asked.tool == (ASK_USER_QUESTION, PIPELINE_ASK_ARGS) and asked.text == PIPELINE_INTRO
    call = {"id": "c1", "type": "function", "function": {"name": ASK_USER_QUESTION, "arguments": "{}"}}
    answer = json.dumps({"selected_id": "", "selected_label": "", "free_text": "a blog"})
    concluded = decide([{"role": "assistant", "content": "", "tool_calls": [call]},
                        {"role": "tool", "tool_call_id": "c1", "content": answer}], tools)
    assert concluded.tool is not None and concluded.tool[0] == COMPLETE_STEP
    conclusion = concluded.tool[1]["conclusion"]
    assert conclusion["is_infra_intent"] is False and conclusion["clarification_text"] == "a blog"
    assert "clarification_choice" not in conclusion
    nudged = decide([{"role": "user", "content": "please call complete_step now"}], tools)
    assert nudged.tool is not None and nudged.tool[0] == COMPLETE_STEP
    assert decide([{"role": "user", "content": "hi"}], tools[:1]).tool is None  # normal mode

"""The pipeline-mode mapper, driven with envelopes shaped like the runtime's pipeline events and batches."""
import copy
from typing import Any, Dict, List, Optional

import pytest

from iaccode_agui.projection import events as ev
from iaccode_agui.projection.pipeline import PIPELINE_CUSTOM_ALLOWLIST, PipelineMapper, step_key_of
from iaccode_agui.projection.spans import SpanTracker
from iaccode_agui.projection.usage import UsageLedger
from tests.agui_checker import check_sequence, conversation, rebuild_messages, types, validate_models

# Copied literally from the AG-UI contract of ``iac-code agui`` (its "iac-code.pipeline.v1" list), group by group.
SEED_ALLOWLIST = (
    "pipeline_started, pipeline_resumed, pipeline_completed, pipeline_error, pipeline_warning, backup_blocked",
    "candidate_started, candidate_completed, candidate_failed, candidate_interrupted, candidate_restart_requested, "
    "candidate_selected, candidate_detail_shown, candidate_step_failed",
    "sub_pipeline_started, sub_pipeline_completed, sub_step_failed, step_failed",
    "stack_progress, stack_instances_progress, stack_current_changed, cleanup_started, cleanup_progress, "
    "cleanup_completed, cleanup_failed",
    "rollback_triggered, rollback_completed",
    "context_compaction_started, context_compacted, context_compaction_failed, fields_marked_stale",
    "diagram_shown, mcp_status, tool_progress",
)

RUN_ID = "agui-pr-7f3a"
SESSION = "4e78cf4a-session"


def envelope(seq: Optional[float], event_type: str, data: Optional[Dict[str, Any]] = None, *,
             event_id: Optional[str] = "auto", scope: str = "step", step: Optional[str] = "intent_parsing",
             **extra: Any) -> Dict[str, Any]:
    """A pipeline envelope as the runtime sends it (floats for numbers, as protobuf Struct does)."""
    env: Dict[str, Any] = {
        "schemaVersion": "1.0", "extensionUri": "urn:iac-code:a2a:pipeline-events:v1",
        "eventType": event_type, "scope": scope, "status": "working", "pipelineName": "selling",
        "pipelineRunId": RUN_ID, "taskId": "task-1", "contextId": "agui-ctx", "createdAt": "2026-11-30T11:23:20Z",
        "iacCodeSessionId": SESSION, "data": data if data is not None else {}}
    if seq is not None:
        env["sequence"] = seq
    if event_id == "auto":
        env["eventId"] = "evt-%s" % (int(seq) if seq is not None else event_type)
    elif event_id is not None:
        env["eventId"] = event_id
    if step is not None:
        env["step"] = {"id": step, "index": 1.0, "total": 5.0, "attempt": 1.0, "runId": "step-%s-1" % step}
    env.update(extra)
    return env


def cand_env(seq: float, event_type: str, cand: str, cstep: str = "template_generating",
             data: Optional[Dict[str, Any]] = None, **extra: Any) -> Dict[str, Any]:
    return envelope(seq, event_type, data, scope="candidate_step", step=None,
                    candidate={"id": cand, "runId": cand + "-r1", "index": 0.0},
                    candidateStep={"id": cstep}, **extra)


def mapper(**kwargs: Any) -> PipelineMapper:
    return PipelineMapper(SpanTracker("r1"), UsageLedger(), thread_id="tp2", **kwargs)


def live(m: PipelineMapper, *envs: Dict[str, Any]) -> List[Dict[str, Any]]:
    out: List[Dict[str, Any]] = []
    for env in envs:
        out.extend(m.feed({"pipeline": copy.deepcopy(env), "iacCodeSessionId": SESSION}))
    return out


def batch(*envs: Dict[str, Any]) -> Dict[str, Any]:
    return {"pipelineBatch": {"schemaVersion": "1.0", "extensionUri": "urn:iac-code:a2a:pipeline-events:v1",
                              "events": [copy.deepcopy(env) for env in envs]}}


def as_run(m: PipelineMapper, body: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Wrap mapped events in a run, balance the spans, and check the result like a strict client would."""
    events = [ev.run_started("tp2", "r1")] + body + m.spans.close_all() + [
        ev.run_finished_success("tp2", "r1", m.usage.summary())]
    stamped = [dict(event, timestamp=1_800_000_000_000 + index) for index, event in enumerate(events)]
    check_sequence(stamped)
    validate_models(stamped)
    return events


def customs(events: List[Dict[str, Any]]) -> List[str]:
    return [e["value"]["eventType"] for e in events if e["type"] == "CUSTOM"]


# ---- allowlist -------------------------------------------------------------------------------------------
def test_allowlist_is_exactly_the_contract_list() -> None:
    seed = {name.strip() for group in SEED_ALLOWLIST for name in group.split(",")}
    assert len(seed) == 34
    assert PIPELINE_CUSTOM_ALLOWLIST == frozenset(seed)


def test_allowlisted_events_become_custom_with_the_whole_coerced_envelope() -> None:
    m = mapper()
    started = envelope(1.0, "pipeline_started", {"pipelineType": "selling", "totalSteps": 5.0,
                                                  "userRequest": "Create a VPC", "stepNames": ["a", "b"]},
                       scope="pipeline", step=None)
    out = live(m, started)
    assert types(out) == ["CUSTOM"]
    assert out[0]["name"] == "iac-code.pipeline.v1"
    value = out[0]["value"]
    assert value["data"]["totalSteps"] == 5 and isinstance(value["data"]["totalSteps"], int)
    assert value["sequence"] == 1 and isinstance(value["sequence"], int)
    assert value["eventId"] == "evt-1" and value["pipelineName"] == "selling" and value["extensionUri"]
    as_run(m, out)


@pytest.mark.parametrize("event_type", ["message_started", "context_usage", "permission_requested",
                                        "backup_committed", "pipeline_progress", "pipeline_failed",
                                        "input_required", "something_new"])
def test_events_off_the_allowlist_without_a_mapping_are_dropped(event_type: str) -> None:
    m = mapper()
    assert live(m, envelope(3.0, event_type, {"x": 1.0})) == []
    assert m.sequence == 3   # dropped, but still consumed by the cursor


def test_standard_signals_are_never_duplicated_as_custom() -> None:
    m = mapper()
    out = live(m,
               envelope(1.0, "step_started"),
               envelope(2.0, "thinking_delta", {"type": "raw_thinking", "text": "hm"}),
               envelope(3.0, "text_delta", {"text": "Hi"}),
               envelope(4.0, "tool_started", {"toolName": "bash", "toolUseId": "t1", "input": {"command": "pwd"}}),
               envelope(5.0, "tool_result", {"toolName": "bash", "toolUseId": "t1", "result": "/srv",
                                             "isError": False}),
               envelope(6.0, "usage", {"inputTokens": 1.0, "outputTokens": 2.0, "totalTokens": 3.0}),
               envelope(7.0, "step_completed"))
    assert customs(out) == []
    as_run(m, out)


# ---- dedupe --------------------------------------------------------------------------------------------
def test_dedupe_by_event_id_even_with_a_higher_sequence() -> None:
    m = mapper()
    first = envelope(8.0, "text_delta", {"text": "Let "}, event_id="evt-43f4")
    again = envelope(9.0, "text_delta", {"text": "Let "}, event_id="evt-43f4")
    out = live(m, first, again)
    assert [e["delta"] for e in out if e["type"] == "TEXT_MESSAGE_CONTENT"] == ["Let "]
    assert m.sequence == 8 and "evt-43f4" in m.seen_event_ids


def test_dedupe_by_sequence_and_cursor_is_the_max() -> None:
    m = mapper(sequence=5)
    out = live(m,
               envelope(5.0, "text_delta", {"text": "old"}, event_id="evt-new-a"),   # at the cursor
               envelope(4.0, "text_delta", {"text": "older"}, event_id=None),         # below, no id
               envelope(7.0, "text_delta", {"text": "new"}),
               envelope(6.0, "text_delta", {"text": "late"}, event_id="evt-new-b"),   # out of order, new id
               envelope(6.0, "text_delta", {"text": "late-no-id"}, event_id=None))   # out of order, no id
    assert [e["delta"] for e in out if e["type"] == "TEXT_MESSAGE_CONTENT"] == ["new", "late"]
    assert m.sequence == 7


def test_out_of_order_live_events_with_new_ids_are_kept() -> None:
    """The real runtime sends 35, 37, 36 after an early exit; 36 must not be lost."""
    m = mapper()
    out = live(m, envelope(35.0, "pipeline_completed"), envelope(37.0, "cleanup_completed"),
               envelope(36.0, "stack_progress"))
    assert [e["value"]["eventType"] for e in out if e["type"] == "CUSTOM"] == [
        "pipeline_completed", "cleanup_completed", "stack_progress"]
    assert m.sequence == 37


def test_recovery_skips_provisional_pending_backup_copies() -> None:
    m = mapper()
    state = {"snapshot": {"pipelineRunId": RUN_ID, "lastSequence": 35.0},
             "events": [envelope(33.0, "pipeline_completed", visibility="pending_backup"),
                        envelope(35.0, "pipeline_completed", visibility="committed")]}
    out = m.recover(state)
    assert [e["value"]["sequence"] for e in out if e["type"] == "CUSTOM"] == [35]


def test_sequence_zero_or_missing_is_not_deduped_by_sequence() -> None:
    m = mapper(sequence=10)
    out = live(m, envelope(0.0, "text_delta", {"text": "a"}, event_id="evt-z1"),
               envelope(None, "text_delta", {"text": "b"}, event_id="evt-z2"),
               envelope(None, "text_delta", {"text": "b"}, event_id="evt-z2"))
    assert [e["delta"] for e in out if e["type"] == "TEXT_MESSAGE_CONTENT"] == ["a", "b"]
    assert m.sequence == 10


def test_batch_is_applied_in_order_after_the_single_envelope() -> None:
    m = mapper()
    iac = batch(envelope(3.0, "text_delta", {"text": "B"}), envelope(2.0, "text_delta", {"text": "x"}),
                envelope(4.0, "text_delta", {"text": "C"}))
    iac["pipeline"] = envelope(1.0, "text_delta", {"text": "A"})
    out = m.feed(iac)
    # "x" arrives out of sequence order but with a new eventId in this run: it is kept, not lost
    assert [e["delta"] for e in out if e["type"] == "TEXT_MESSAGE_CONTENT"] == ["A", "B", "x", "C"]
    assert m.sequence == 4
    assert m.feed(batch(envelope(4.0, "text_delta", {"text": "C"}))) == []
    as_run(m, out)


def test_the_batch_example_from_the_dialect_opens_a_candidate_step_and_streams_text() -> None:
    frame = {"pipelineBatch": {"schemaVersion": "1.0", "extensionUri": "urn:iac-code:a2a:pipeline-events:v1",
                               "events": [
        {"eventId": "evt-a", "sequence": 11, "eventType": "candidate_step_started", "scope": "candidate_step",
         "pipelineRunId": "pr-1", "candidate": {"id": "cand-0", "runId": "cand-0-r1", "index": 0},
         "candidateStep": {"id": "template_generating"}, "status": "working", "data": {}},
        {"eventId": "evt-b", "sequence": 12, "eventType": "text_delta", "scope": "candidate_step",
         "candidate": {"runId": "cand-0-r1"}, "candidateStep": {"id": "template_generating"},
         "data": {"text": "Generating..."}}]},
        "pendingPermissions": [{"kind": "permission", "inputId": "perm-1", "required": True}]}
    m = mapper()
    out = m.feed(frame)
    assert out[0] == ev.step_started("candidate:cand-0:template_generating")
    assert out[1] == ev.text_start("pipeline-message:pr-1:candidate_step:cand-0-r1:template_generating")
    assert m.open_steps == {"candidate:cand-0:template_generating"}
    assert m.pipeline_run_id == "pr-1" and m.sequence == 12
    as_run(m, out)


def test_garbage_is_ignored() -> None:
    m = mapper()
    assert m.feed({"pipeline": "nope", "pipelineBatch": {"events": [1, None, "x"]}}) == []
    assert m.feed({}) == [] and m.sequence == 0 and not m.changed


# ---- text, reasoning, tools, usage ---------------------------------------------------------------------------
def test_text_and_reasoning_ids_follow_the_stream_and_the_default_run_id() -> None:
    m = mapper()
    no_run = envelope(2.0, "thinking_delta", {"type": "raw_thinking", "text": "Let "})
    del no_run["pipelineRunId"]
    text = envelope(3.0, "text_delta", {"text": "Which region?"})
    del text["pipelineRunId"]
    out = live(m, no_run, text)
    base = "pipeline-message:pipeline-tp2:step:step-intent_parsing-1"
    assert out[0] == ev.reasoning_start("reasoning-" + base)
    assert ev.text_start(base) in out
    assert types(out).index("REASONING_END") < types(out).index("TEXT_MESSAGE_START")
    as_run(m, out)


def test_first_envelope_run_id_is_adopted() -> None:
    m = mapper()
    live(m, envelope(1.0, "text_delta", {"text": "a"}))
    assert m.pipeline_run_id == RUN_ID
    other = envelope(2.0, "text_delta", {"text": "b"})
    other["pipelineRunId"] = "something-else"
    out = live(m, other)
    assert m.pipeline_run_id == RUN_ID
    assert out == [ev.text_content("pipeline-message:%s:step:step-intent_parsing-1" % RUN_ID, "b")]


def test_non_raw_thinking_is_ignored() -> None:
    m = mapper()
    assert live(m, envelope(1.0, "thinking_delta", {"type": "summary", "text": "x"})) == []


def test_parallel_candidates_stream_side_by_side_and_balance_at_close() -> None:
    m = mapper()
    out = live(m,
               cand_env(1.0, "candidate_step_started", "cand-0"),
               cand_env(2.0, "candidate_step_started", "cand-1"),
               cand_env(3.0, "text_delta", "cand-0", data={"text": "A1 "}),
               cand_env(4.0, "text_delta", "cand-1", data={"text": "B1 "}),
               cand_env(5.0, "thinking_delta", "cand-1", data={"type": "raw_thinking", "text": "b thinks"}),
               cand_env(6.0, "thinking_delta", "cand-0", data={"type": "raw_thinking", "text": "a thinks"}),
               cand_env(7.0, "text_delta", "cand-0", data={"text": "A2"}),
               cand_env(8.0, "text_delta", "cand-1", data={"text": "B2"}),
               cand_env(9.0, "tool_started", "cand-0",      # cand-1 spoke last; the parent is still cand-0
                        data={"toolName": "ros", "toolUseId": "ta", "input": {"b": 1.0, "a": 2}}))
    ids = ["pipeline-message:%s:candidate_step:cand-%d-r1:template_generating" % (RUN_ID, n) for n in (0, 1)]
    assert {e["messageId"] for e in out if e["type"] == "TEXT_MESSAGE_START"} == set(ids)
    # Both stay open in parallel until cand-0's tool call ends cand-0's message (only that one).
    assert types(out)[-4:] == ["TEXT_MESSAGE_END", "TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END"]
    assert [e["messageId"] for e in out if e["type"] == "TEXT_MESSAGE_END"] == [ids[0]]
    contents = [(e["messageId"].split(":")[3], e["delta"]) for e in out if e["type"] == "TEXT_MESSAGE_CONTENT"]
    assert contents == [("cand-0-r1", "A1 "), ("cand-1-r1", "B1 "), ("cand-0-r1", "A2"), ("cand-1-r1", "B2")]
    reasoning = [e["messageId"] for e in out if e["type"] == "REASONING_START"]
    assert reasoning == ["reasoning-pipeline-message:%s:candidate_step:cand-1-r1:template_generating" % RUN_ID,
                         "reasoning-pipeline-message:%s:candidate_step:cand-0-r1:template_generating" % RUN_ID]
    start = next(e for e in out if e["type"] == "TOOL_CALL_START")
    assert start["parentMessageId"] == ids[0]
    assert m.open_steps == {"candidate:cand-0:template_generating", "candidate:cand-1:template_generating"}
    closing = m.spans.close_all()
    assert [e["messageId"] for e in closing if e["type"] == "TEXT_MESSAGE_END"] == [ids[1]]
    assert sorted(e["stepName"] for e in closing if e["type"] == "STEP_FINISHED") == sorted(m.open_steps)
    as_run(m, out + closing)


def test_tool_started_gives_start_sorted_args_end_and_result_content() -> None:
    m = mapper()
    out = live(m,
               envelope(1.0, "text_delta", {"text": "Asking."}),
               envelope(2.0, "tool_started", {"toolName": "ask_user_question", "toolUseId": "call_fake_1",
                                              "input": {"question": "Which region?", "options": ["b", "a"],
                                                        "count": 2.0, "ünï": "✓"}}),
               envelope(3.0, "tool_result", {"toolName": "ask_user_question", "toolUseId": "call_fake_1",
                                             "isError": False, "result": {"z": 1.0, "a": [2.0]}}),
               envelope(4.0, "tool_started", {"toolUseId": "t2"}),
               envelope(5.0, "tool_result", {"toolName": "complete_step", "toolUseId": "t2",
                                             "result": "Step Intent parsing completed."}),
               envelope(6.0, "tool_result", {"toolUseId": "t2", "result": "again"}))
    assert types(out)[2:] == ["TEXT_MESSAGE_END", "TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END",
                              "TOOL_CALL_RESULT", "TOOL_CALL_START", "TOOL_CALL_END", "TOOL_CALL_RESULT"]
    start, args = out[3], out[4]
    assert start["toolCallName"] == "ask_user_question"
    assert start["parentMessageId"] == out[2]["messageId"] == "pipeline-message:%s:step:step-intent_parsing-1" % RUN_ID
    assert args["delta"] == '{"count":2,"options":["b","a"],"question":"Which region?","ünï":"✓"}'
    assert out[6]["content"] == '{"a":[2],"z":1}'
    assert out[7]["toolCallName"] == "tool" and "parentMessageId" not in out[7]     # no text before it
    assert out[9]["content"] == "Step Intent parsing completed."
    as_run(m, out)


def test_a_stream_s_text_after_its_tool_result_is_a_new_message_below_it() -> None:
    # cand-0 calls a tool while cand-1 goes on talking: only cand-0's message ends, and cand-0's later text is
    # a message of its own, below the result.
    m = mapper()
    out = live(m,
               cand_env(1.0, "text_delta", "cand-0", data={"text": "A plans. "}),
               cand_env(2.0, "text_delta", "cand-1", data={"text": "B plans. "}),
               cand_env(3.0, "tool_started", "cand-0", data={"toolName": "ros", "toolUseId": "ta", "input": {}}),
               cand_env(4.0, "text_delta", "cand-1", data={"text": "B goes on."}),
               cand_env(5.0, "tool_result", "cand-0", data={"toolUseId": "ta", "result": "ok"}),
               cand_env(6.0, "text_delta", "cand-0", data={"text": "A is done."}))
    a_id = "pipeline-message:%s:candidate_step:cand-0-r1:template_generating" % RUN_ID
    assert [e["messageId"] for e in out if e["type"] == "TEXT_MESSAGE_START"][-1] == a_id + "~2"
    events = as_run(m, out)
    assert conversation(rebuild_messages(events)) == [
        ("assistant", "A plans. ", ("ta",)), ("tool", "ok", ("ta",)), ("assistant", "B plans. B goes on.", ()),
        ("assistant", "A is done.", ())]


def test_a_resumed_run_s_text_in_the_asking_step_is_a_message_of_its_own() -> None:
    scoped = PipelineMapper(SpanTracker("r2", "d1g3st"), UsageLedger(), thread_id="tp2")
    out = live(scoped, envelope(1.0, "text_delta", {"text": "Region noted."}))
    assert out[0]["messageId"] == "pipeline-message:%s:step:step-intent_parsing-1@d1g3st" % RUN_ID


def test_usage_is_recorded_not_emitted() -> None:
    m = mapper()
    out = live(m, envelope(1.0, "usage", {"provider": "openai", "model": "other", "inputTokens": 102.0,
                                          "outputTokens": 22.0, "totalTokens": 124.0, "cachedInputTokens": 0.0}),
               envelope(2.0, "usage", {"provider": "openai", "model": "other", "inputTokens": 3.0,
                                       "outputTokens": 1.0, "totalTokens": 4.0}),
               envelope(3.0, "usage", {"totalTokens": 9000.0, "contextWindow": 128000.0, "usagePercent": 7.0}))
    assert out == []
    assert m.usage.summary() == [{"provider": "openai", "model": "other", "inputTokens": 105,
                                  "outputTokens": 23, "totalTokens": 128, "cachedInputTokens": 0}]


# ---- steps ---------------------------------------------------------------------------------------------
def test_step_keys_and_names() -> None:
    assert step_key_of(envelope(1.0, "step_started")) == "step:intent_parsing"
    assert step_key_of(cand_env(1.0, "candidate_step_started", "c9")) == "candidate:c9:template_generating"
    by_sub = envelope(1.0, "candidate_step_completed", scope="candidate_step", step=None,
                      subPipelineId="sub-3", candidateStep={"id": "deploy"})
    assert step_key_of(by_sub) == "candidate:sub-3:deploy"
    by_run = envelope(1.0, "candidate_step_completed", scope="candidate_step", step=None,
                      candidate={"runId": "c-r2"}, candidateStep={"id": "deploy"})
    assert step_key_of(by_run) == "candidate:c-r2:deploy"
    assert step_key_of(envelope(1.0, "step_started", step=None)) is None


def test_step_lifecycle_in_one_run() -> None:
    m = mapper()
    out = live(m, envelope(1.0, "step_started"))
    assert out == [ev.step_started("intent_parsing")] and m.open_steps == {"step:intent_parsing"}
    assert m.changed
    assert m.progress() == (1, ["step:intent_parsing"]) and not m.changed
    out += live(m, envelope(2.0, "step_started", event_id="evt-dup-start"))   # already open: nothing
    out += live(m, envelope(3.0, "step_completed"))
    assert out[-1] == ev.step_finished("intent_parsing") and m.open_steps == set()
    assert m.changed and m.progress() == (3, [])
    as_run(m, out)


def test_durable_steps_reopen_sorted_at_run_start_and_close_at_close_all() -> None:
    m = mapper(sequence=40, open_steps=["step:template_generating", "candidate:c1:validate", "step:b"])
    opened = m.reopen_steps()
    assert opened == [ev.step_started("candidate:c1:validate"), ev.step_started("b"),
                      ev.step_started("template_generating")]     # sorted by durable key
    assert not m.changed
    closing = m.spans.close_all()
    assert sorted(e["stepName"] for e in closing) == ["b", "candidate:c1:validate", "template_generating"]
    assert all(e["type"] == "STEP_FINISHED" for e in closing)
    assert m.progress() == (40, ["candidate:c1:validate", "step:b", "step:template_generating"])
    as_run(m, opened + closing)


def test_completion_of_a_reopened_durable_step_closes_it() -> None:
    m = mapper(sequence=4, open_steps=["step:intent_parsing"])
    out = m.reopen_steps() + live(m, envelope(5.0, "step_completed"))
    assert out == [ev.step_started("intent_parsing"), ev.step_finished("intent_parsing")]
    assert m.open_steps == set()
    as_run(m, out)


def test_durable_step_not_opened_in_this_run_completes_as_a_zero_length_pair() -> None:
    m = mapper(sequence=4, open_steps=["step:intent_parsing", "candidate:cand-0:template_generating"])
    out = live(m, envelope(5.0, "step_completed"),
               cand_env(6.0, "candidate_step_completed", "cand-0"))
    assert out == [ev.step_started("intent_parsing"), ev.step_finished("intent_parsing"),
                   ev.step_started("candidate:cand-0:template_generating"),
                   ev.step_finished("candidate:cand-0:template_generating")]
    assert m.open_steps == set()
    as_run(m, out)


def test_completion_of_an_unknown_step_is_ignored() -> None:
    m = mapper()
    assert live(m, envelope(1.0, "step_completed"), cand_env(2.0, "candidate_step_completed", "c0")) == []
    assert m.open_steps == set() and m.sequence == 2


def test_input_received_reopens_a_closed_step() -> None:
    m = mapper()
    out = live(m, envelope(1.0, "step_started"), envelope(2.0, "step_completed"),
               envelope(3.0, "input_received", {"kind": "ask_user_question", "inputId": "ask-call_fake_1"}))
    assert types(out) == ["STEP_STARTED", "STEP_FINISHED", "STEP_STARTED"]
    assert m.open_steps == {"step:intent_parsing"}
    as_run(m, out)


def test_step_failed_closes_and_emits_custom() -> None:
    m = mapper()
    out = live(m, envelope(1.0, "step_started"),
               envelope(2.0, "step_failed", {"error": "boom"}),
               cand_env(3.0, "candidate_step_started", "c0"),
               cand_env(4.0, "candidate_step_failed", "c0", data={"error": "bad"}))
    assert types(out) == ["STEP_STARTED", "STEP_FINISHED", "CUSTOM", "STEP_STARTED", "STEP_FINISHED", "CUSTOM"]
    assert customs(out) == ["step_failed", "candidate_step_failed"]
    assert m.open_steps == set()
    as_run(m, out)


def test_failed_unknown_step_still_reports_the_failure() -> None:
    m = mapper()
    out = live(m, envelope(1.0, "step_failed", {"error": "boom"}))
    assert types(out) == ["CUSTOM"]


# ---- recovery ----------------------------------------------------------------------------------------
def state(last: float, events: List[Dict[str, Any]], run_id: str = "agui-snap") -> Dict[str, Any]:
    return {"snapshot": {"schemaVersion": "1.0", "pipelineRunId": run_id, "taskId": "task-1",
                         "contextId": "agui-ctx", "lastSequence": last, "display": {"step": 2.0}},
            "events": events}


def test_recovery_emits_the_snapshot_then_fills_gaps_and_raises_the_cursor() -> None:
    m = mapper(sequence=10, open_steps=["step:intent_parsing"])
    m.seen_event_ids.add("evt-9")
    out = m.reopen_steps() + m.recover(state(20.0, [
        envelope(9.0, "text_delta", {"text": "seen"}, event_id="evt-9"),
        envelope(8.0, "text_delta", {"text": "gap "}, event_id="evt-gap"),     # new id below cursor: applied
        envelope(7.0, "text_delta", {"text": "no id"}, event_id=None),         # no id at/below cursor: skipped
        envelope(10.0, "text_delta", {"text": "no id"}, event_id=None),
        envelope(12.0, "text_delta", {"text": "after"}, event_id=None),         # no id above cursor: applied
        envelope(13.0, "pipeline_completed", {"totalSteps": 5.0, "earlyExit": True}, scope="pipeline", step=None),
        envelope(14.0, "step_completed"),
    ]))
    assert out[1] == {"type": "ACTIVITY_SNAPSHOT", "messageId": "pipeline:agui-snap",
                      "activityType": "iac-code.pipeline.v1",
                      "content": {"schemaVersion": 1, "pipelineRunId": "agui-snap",
                                  "snapshot": {"schemaVersion": "1.0", "pipelineRunId": "agui-snap", "taskId": "task-1",
                                               "contextId": "agui-ctx", "lastSequence": 20, "display": {"step": 2}}},
                      "replace": True}
    assert [e["delta"] for e in out if e["type"] == "TEXT_MESSAGE_CONTENT"] == ["gap ", "after"]
    assert ev.text_start("pipeline-message:agui-snap:step:step-intent_parsing-1") in out
    assert customs(out) == ["pipeline_completed"]
    assert out[-1] == ev.step_finished("intent_parsing")
    assert m.sequence == 20 and "evt-gap" in m.seen_event_ids
    assert m.changed and m.progress() == (20, [])
    live_again = live(m, envelope(15.0, "text_delta", {"text": "dup"}, event_id="evt-fresh"))
    assert live_again == []
    as_run(m, out)


def test_recovery_keeps_a_higher_cursor_and_tolerates_an_empty_state() -> None:
    m = mapper(sequence=30)
    out = m.recover({"snapshot": {"lastSequence": 5.0}})
    assert out == [ev.activity_snapshot("pipeline:pipeline-tp2", "iac-code.pipeline.v1",
                                        {"schemaVersion": 1, "pipelineRunId": "pipeline-tp2",
                                         "snapshot": {"lastSequence": 5}}, replace=True)]
    assert m.sequence == 30 and not m.changed
    assert m.recover("nope") == []   # type: ignore[arg-type]


def test_session_ids_are_collected_for_the_identity_check() -> None:
    m = mapper()
    live(m, envelope(1.0, "text_delta", {"text": "a"}), envelope(1.0, "text_delta", {"text": "a"}))
    other = envelope(2.0, "message_started")
    other["iacCodeSessionId"] = "other-session"
    m.feed(batch(other))
    m.recover(state(2.0, [envelope(3.0, "context_usage")]))
    assert m.session_ids == [SESSION, "other-session"]


# ---- whole runs like the reference implementation's captured output -------------------------------
def test_two_runs_across_an_interrupt_stay_balanced() -> None:
    m1 = mapper()
    run1 = live(m1,
                envelope(1.0, "pipeline_started", {"pipelineType": "selling", "totalSteps": 5.0}, scope="pipeline",
                         step=None),
                envelope(2.0, "step_started"),
                envelope(3.0, "context_usage", {"totalTokens": 10.0}),
                envelope(4.0, "message_started"),
                envelope(5.0, "thinking_delta", {"type": "raw_thinking", "text": "Let me ask."}),
                envelope(6.0, "text_delta", {"text": "Which region?"}),
                envelope(7.0, "tool_started", {"toolName": "ask_user_question", "toolUseId": "call_fake_1",
                                               "input": {"question": "Which region?"}}),
                envelope(8.0, "usage", {"inputTokens": 10.0, "outputTokens": 5.0, "totalTokens": 15.0}),
                envelope(9.0, "input_required", {"kind": "ask_user_question"}, status="input_required"))
    assert types(run1) == ["CUSTOM", "STEP_STARTED", "REASONING_START", "REASONING_MESSAGE_START",
                           "REASONING_MESSAGE_CONTENT", "REASONING_MESSAGE_END", "REASONING_END",
                           "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END", "TOOL_CALL_START",
                           "TOOL_CALL_ARGS", "TOOL_CALL_END"]
    as_run(m1, run1)
    sequence, steps = m1.progress()
    assert (sequence, steps) == (9, ["step:intent_parsing"])

    m2 = PipelineMapper(SpanTracker("r2"), UsageLedger(), thread_id="tp2", sequence=sequence, open_steps=steps)
    run2 = m2.reopen_steps()
    run2 += m2.recover(state(9.0, [], run_id=RUN_ID))
    run2 += m2.spans.tool_result("call_fake_1", "Hangzhou")
    run2 += live(m2,
                 envelope(9.0, "text_delta", {"text": "stale"}),
                 envelope(10.0, "input_received", {"kind": "ask_user_question"}),
                 envelope(11.0, "text_delta", {"text": "Noted."}),
                 envelope(12.0, "tool_started", {"toolName": "complete_step", "toolUseId": "call_fake_2",
                                                 "input": {"conclusion": "cn-hangzhou"}}),
                 envelope(13.0, "tool_result", {"toolName": "complete_step", "toolUseId": "call_fake_2",
                                                "result": "Step Intent parsing completed. Conclusion submitted."}),
                 envelope(14.0, "step_completed"),
                 envelope(15.0, "pipeline_completed", {"totalSteps": 5.0, "earlyExit": True}, scope="pipeline",
                          step=None))
    assert types(run2)[:3] == ["STEP_STARTED", "ACTIVITY_SNAPSHOT", "TOOL_CALL_RESULT"]
    assert "stale" not in [e.get("delta") for e in run2]
    assert customs(run2) == ["pipeline_completed"]
    assert run2[-1]["value"]["data"] == {"totalSteps": 5, "earlyExit": True}
    assert m2.progress() == (15, [])
    as_run(m2, run2)

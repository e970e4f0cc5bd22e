"""Pipeline mode end to end: the adapter on waitress in front of the scripted runtime's pipeline scenario.

Every stream goes through the AG-UI conformance checker (``Adapter.run``).  The runtime side of each wire
fault used here (batches, a replayed envelope, a gap only the state endpoint has, a sideband permission,
answer streams that end early) is pinned by tests/server/test_demo_pipeline.py.
"""
from collections import Counter
from typing import Any, Dict, List


from tests.harness import interrupt_of, session_of

KW = dict(runMode="pipeline", pipelineName="selling")
PIPELINE_EVENT = "iac-code.pipeline.v1"
# The documented pipeline event names, written out here rather than imported, so the test cannot agree with
# a wrong list.
ALLOWLIST = frozenset("""
    pipeline_started pipeline_resumed pipeline_completed pipeline_error pipeline_warning backup_blocked
    candidate_started candidate_completed candidate_failed candidate_interrupted candidate_restart_requested
    candidate_selected candidate_detail_shown candidate_step_failed sub_pipeline_started sub_pipeline_completed
    sub_step_failed step_failed stack_progress stack_instances_progress stack_current_changed cleanup_started
    cleanup_progress cleanup_completed cleanup_failed rollback_triggered rollback_completed
    context_compaction_started context_compacted context_compaction_failed fields_marked_stale diagram_shown
    mcp_status tool_progress""".split())
STANDARD = {"text_delta", "thinking_delta", "tool_started", "tool_result", "usage", "step_started",
            "step_completed", "candidate_step_started", "candidate_step_completed", "input_required",
            "input_received"}


def resolve(interrupt: Dict[str, Any], payload: Dict[str, Any]) -> List[Dict[str, Any]]:
    return [{"interruptId": interrupt["id"], "status": "resolved", "payload": payload}]


def pipeline_customs(events: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    return [e["value"] for e in events if e["type"] == "CUSTOM" and e["name"] == PIPELINE_EVENT]


def custom_types(events: List[Dict[str, Any]]) -> List[str]:
    return [value["eventType"] for value in pipeline_customs(events)]


def reopened(events: List[Dict[str, Any]]) -> List[str]:
    """Step names started right after RUN_STARTED (the durable steps a run re-opens)."""
    names = []
    for event in events[1:]:
        if event["type"] != "STEP_STARTED":
            break
        names.append(event["stepName"])
    return names


def assert_steps_balanced(events: List[Dict[str, Any]]) -> None:
    started = Counter(e["stepName"] for e in events if e["type"] == "STEP_STARTED")
    finished = Counter(e["stepName"] for e in events if e["type"] == "STEP_FINISHED")
    assert started == finished, (started, finished)


def texts_by_message(events: List[Dict[str, Any]]) -> Dict[str, str]:
    out: Dict[str, str] = {}
    for event in events:
        if event["type"] == "TEXT_MESSAGE_CONTENT":
            out[event["messageId"]] = out.get(event["messageId"], "") + event["delta"]
    return out


def tool_results(events: List[Dict[str, Any]], tool_call_id: str) -> List[str]:
    return [e["content"] for e in events if e["type"] == "TOOL_CALL_RESULT" and e["toolCallId"] == tool_call_id]


def memory_of(demo: Any, task_id: str) -> Dict[str, Any]:
    return demo.runtime.store.get(task_id).scenario_state["pipeline"]


def test_full_pipeline_across_four_interrupts_and_an_adapter_restart(adapter_factory, demo, tmp_path):
    state_dir = str(tmp_path / "pipeline-state")
    first = adapter_factory(state_dir=state_dir)

    run1 = first.run(first.body("pipeline: deploy my web shop", thread="pl", ros="inv", **KW))
    question = interrupt_of(run1)
    assert question["metadata"]["kind"] == "ask_user_question" and question["toolCallId"]
    task_id = session_of(run1)["taskId"]
    memory = memory_of(demo, task_id)
    assert custom_types(run1) == ["pipeline_started"] and "ACTIVITY_SNAPSHOT" not in [e["type"] for e in run1]
    assert [e["stepName"] for e in run1 if e["type"] == "STEP_STARTED"] == ["intent_parsing"]
    reasoning = next(e for e in run1 if e["type"] == "REASONING_START")
    assert reasoning["messageId"] == "reasoning-pipeline-message:%s:step:step-intent_parsing-1" % memory["runId"]
    assert "understand your request." in "".join(texts_by_message(run1).values())

    run2 = first.run(first.body(None, thread="pl", ros="inv", resume=resolve(question, {"selectedId": "cn-hangzhou"}),
                                **KW))
    permission = interrupt_of(run2)
    assert permission["reason"] == "tool_call" and permission["metadata"]["scope"] == "candidate"
    assert permission["metadata"]["subPipelineId"] == "cand-1" and permission["metadata"]["toolName"] == "ros_deploy"
    assert tool_results(run2, question["toolCallId"]) == ["Hangzhou"]
    candidate_steps = {"candidate:cand-0:template_generating", "candidate:cand-1:template_generating"}
    assert candidate_steps <= {e["stepName"] for e in run2 if e["type"] == "STEP_STARTED"}
    # parallel candidates: one message each, both open at once, replayed text not doubled
    by_message = texts_by_message(run2)
    a_id = next(m for m, text in by_message.items() if text.startswith("Candidate A"))
    b_id = next(m for m, text in by_message.items() if text.startswith("Candidate B"))
    assert a_id != b_id
    assert (by_message[a_id], by_message[b_id]) == ("Candidate A: SLB + ECS + RDS. ", "Candidate B: ACK + PolarDB. ")
    positions = {(e["type"], e["messageId"]): i for i, e in enumerate(run2) if e["type"].startswith("TEXT_MESSAGE_")}
    assert positions[("TEXT_MESSAGE_START", b_id)] < positions[("TEXT_MESSAGE_END", a_id)]
    assert custom_types(run2) == ["candidate_started", "candidate_started"]  # the replay is not shown again

    run3 = first.run(first.body(None, thread="pl", ros="inv", resume=resolve(permission, {"decision": "allow_once"}),
                                **KW))
    selection = interrupt_of(run3)
    assert selection["metadata"]["kind"] == "candidate_selection"
    assert tool_results(run3, permission["toolCallId"]) == ["Preview stack preview-cand-1 validated (12 resources)."]
    assert demo.runtime.tool_executions.count((task_id, permission["toolCallId"])) == 1
    calls = [method for method, ref in demo.runtime.requests_log if ref == task_id]
    sent = calls.index("SendMessage")
    assert calls.count("SendMessage") == 1 and calls[sent + 1:sent + 3] == ["GetTask", "SubscribeToTask"]
    first.stop()

    second = adapter_factory(state_dir=state_dir)
    run4 = second.run(second.body(None, thread="pl", ros="inv", resume=resolve(selection, {"selectedId": "cand-1"}),
                                  **KW))
    confirmation = interrupt_of(run4)
    assert confirmation["metadata"]["kind"] == "deployment_confirmation"
    run5 = second.run(second.body(None, thread="pl", ros="inv", resume=resolve(confirmation, {"selectedId": "confirm"}),
                                  **KW))
    assert run5[-1]["type"] == "RUN_FINISHED" and run5[-1]["outcome"] == {"type": "success"}
    assert run5[-1]["usage"][0]["inputTokens"] > 0
    runs = [run1, run2, run3, run4, run5]

    # spans: balanced in every run; durable steps re-opened first thing in every resumed run
    for events in runs:
        assert_steps_balanced(events)
    assert [sorted(reopened(events)) for events in runs] == [
        [], ["intent_parsing"], sorted(candidate_steps | {"architecture"}), ["architecture"], ["deploy"]]
    for events in runs[1:]:
        # a resume opens with the thread's conversation, then the pipeline's own snapshot
        after = events[1 + len(reopened(events)):]
        assert [event["type"] for event in after[:2]] == ["MESSAGES_SNAPSHOT", "ACTIVITY_SNAPSHOT"]

    # CUSTOM pipeline events: only allowlisted types, each envelope once, in the run that saw it
    assert [custom_types(events) for events in runs] == [
        ["pipeline_started"], ["candidate_started", "candidate_started"],
        ["candidate_completed", "candidate_completed"],
        ["diagram_shown", "candidate_selected", "stack_progress", "stack_instances_progress", "stack_progress"],
        ["stack_progress", "stack_instances_progress", "stack_progress", "cleanup_started", "cleanup_progress",
         "cleanup_completed", "pipeline_completed"]]
    every = [value for events in runs for value in pipeline_customs(events)]
    assert {v["eventType"] for v in every} <= ALLOWLIST and not {v["eventType"] for v in every} & STANDARD
    assert len({v["eventId"] for v in every}) == len(every)
    replayed = [v for v in every if v["eventId"] in memory["replayed"]]
    assert [(v["eventType"], v["candidate"]["id"]) for v in replayed] == [("candidate_started", "cand-1")]
    assert pipeline_customs(run5)[-1]["data"]["deployed"] is True

    # the gap: only the pipeline/state recovery of run 4 (after the restart) carries it
    (hidden,) = memory["hidden"]
    snapshot_at = next(i for i, e in enumerate(run4) if e["type"] == "ACTIVITY_SNAPSHOT")
    activity = run4[snapshot_at]
    assert activity["activityType"] == PIPELINE_EVENT and activity["replace"] is True
    assert activity["messageId"] == "pipeline:" + memory["runId"]
    gap = [i for i, e in enumerate(run4) if e["type"] == "CUSTOM" and e["value"].get("eventId") == hidden]
    assert gap == [snapshot_at + 1]
    assert activity["content"]["snapshot"]["lastSequence"] >= run4[gap[0]]["value"]["sequence"]
    assert [method for method, ref in demo.runtime.requests_log if ref == task_id].count("SendStreamingMessage") == 3


def test_failed_pipeline_shows_step_failed_and_drops_pipeline_failed(adapter, demo):
    events = adapter.run(adapter.body("pipeline fail", thread="pf", **KW))
    assert events[-1]["type"] == "RUN_ERROR" and events[-1]["code"] == "A2A_EXECUTION_FAILED"
    assert custom_types(events) == ["pipeline_started", "step_failed"]
    failed = pipeline_customs(events)[-1]
    assert failed["data"]["errorDetails"]["type"] == "StepFailed"
    assert_steps_balanced(events)
    sent = [e["eventType"] for e in memory_of(demo, session_of(events)["taskId"])["log"]]
    assert sent[-2:] == ["step_failed", "pipeline_failed"]  # the runtime did send it; the adapter dropped it


def test_quick_pipeline_completes_with_pipeline_completed(adapter):
    events = adapter.run(adapter.body("pipeline quick", thread="pq", **KW))
    assert events[-1]["type"] == "RUN_FINISHED" and events[-1]["outcome"] == {"type": "success"}
    assert custom_types(events) == ["pipeline_started", "pipeline_completed"]
    assert pipeline_customs(events)[-1]["data"]["earlyExit"] is True
    assert "Nothing to deploy for this request." in texts_by_message(events).values()
    assert [e["stepName"] for e in events if e["type"] == "STEP_FINISHED"] == ["intent_parsing"]
    assert events[-1]["usage"][0]["outputTokens"] == 22


def test_answer_streams_that_end_early_are_followed_to_the_next_boundary(adapter, demo):
    run1 = adapter.run(adapter.body("pipeline detach no-candidates", thread="pd", **KW))
    run2 = adapter.run(adapter.body(None, thread="pd", resume=resolve(interrupt_of(run1), {"freeText": "Shanghai"}),
                                    **KW))
    confirmation = interrupt_of(run2)
    assert "Region Shanghai noted. " in "".join(texts_by_message(run2).values())
    run3 = adapter.run(adapter.body(None, thread="pd", resume=resolve(confirmation, {"action": "cancel"}), **KW))
    assert run3[-1]["outcome"] == {"type": "success"}
    assert custom_types(run3) == ["cleanup_started", "cleanup_progress", "cleanup_completed", "pipeline_completed"]
    task_id = session_of(run1)["taskId"]
    calls = [method for method, ref in demo.runtime.requests_log if ref == task_id]
    assert calls.count("SubscribeToTask") == 2
    for events in (run1, run2, run3):
        assert_steps_balanced(events)


def _late_sideband_runs(adapter: Any) -> List[List[Dict[str, Any]]]:
    """The candidate permission answered while the runtime races to the selection with nobody watching."""
    run1 = adapter.run(adapter.body("pipeline eager no-question no-deploy", thread="pe", **KW))
    run2 = adapter.run(adapter.body(None, thread="pe", resume=resolve(interrupt_of(run1), {"decision": "allow_once"}),
                                    **KW))
    run3 = adapter.run(adapter.body(None, thread="pe", resume=resolve(interrupt_of(run2), {"selectedId": "cand-0"}),
                                    **KW))
    assert run3[-1]["outcome"] == {"type": "success"}
    return [run1, run2, run3]


def test_events_missed_during_a_sideband_resume_are_delivered_exactly_once(adapter):
    runs = _late_sideband_runs(adapter)
    later = runs[1] + runs[2]
    assert Counter(custom_types(later))["candidate_completed"] == 2
    permission_call = next(e["toolCallId"] for e in runs[0] if e["type"] == "TOOL_CALL_START"
                           and e["toolCallName"] == "ros_deploy")
    assert len(tool_results(later, permission_call)) == 1
    assert sum(text.count("Validated. ") for events in runs for text in texts_by_message(events).values()) == 1
    for events in runs:
        assert_steps_balanced(events)


def test_sideband_resume_recovers_missed_events_before_the_next_interrupt(adapter):
    runs = _late_sideband_runs(adapter)
    assert custom_types(runs[1]).count("candidate_completed") == 2


def test_follow_recovers_pipeline_events_when_the_task_ended_before_the_follow(adapter):
    run1 = adapter.run(adapter.body("pipeline eager detach no-question no-candidates", thread="pg", **KW))
    run2 = adapter.run(adapter.body(None, thread="pg", resume=resolve(interrupt_of(run1), {"selectedId": "confirm"}),
                                    **KW))
    assert run2[-1]["outcome"] == {"type": "success"}
    assert "pipeline_completed" in custom_types(run2)

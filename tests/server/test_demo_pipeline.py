"""The scripted runtime's pipeline mode, alone, over real HTTP with plain ``requests``.

These pin what the adapter's pipeline mapping is tested against (the runtime's ``iac-code.pipeline.v1`` envelopes, batches and state endpoint):
envelope shapes, batches, a replayed envelope, a gap only ``/iac-code/pipeline/state`` fills, and the
sideband permission (SendMessage ack, then SubscribeToTask for the rest).
"""
import json
import time
import uuid
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pytest
import requests

from iaccode_agui.demo import SCENARIOS, DemoServer
from iaccode_agui.demo.pipeline_events import EXTENSION_URI

TOKEN = "pipeline-secret"
HEADERS = {"A2A-Version": "1.0", "Authorization": "Bearer " + TOKEN}
ENVELOPE_KEYS = {"schemaVersion", "extensionUri", "sequence", "eventId", "eventType", "scope", "status",
                 "pipelineName", "pipelineRunId", "taskId", "contextId", "iacCodeSessionId", "createdAt", "data"}


@pytest.fixture(scope="module")
def server() -> Iterator[DemoServer]:
    srv = DemoServer.start(token=TOKEN, ping_interval=0.2)
    yield srv
    srv.stop()


# --- a tiny A2A client ---------------------------------------------------------------------------------------
def rpc(server: DemoServer, method: str, params: Dict[str, Any], stream: bool = False) -> requests.Response:
    body = {"jsonrpc": "2.0", "id": str(uuid.uuid4()), "method": method, "params": params}
    return requests.post(server.url, json=body, headers=HEADERS, stream=stream, timeout=(5, 10))


def message(text: Optional[str] = None, task_id: Optional[str] = None, data: Optional[Dict[str, Any]] = None,
            pipeline: str = "selling") -> Dict[str, Any]:
    parts = [{"data": data, "mediaType": "application/json"}] if data is not None else [{"text": text}]
    msg: Dict[str, Any] = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "contextId": "ctx-pipe",
                           "parts": parts, "metadata": {"iac_code": {"run_mode": "pipeline",
                                                                     "pipeline_name": pipeline}}}
    if task_id is not None:
        msg["taskId"] = task_id
    return {"message": msg}


class Stream:
    """SSE results of one response, read incrementally (subscriptions never end on their own)."""

    def __init__(self, response: requests.Response) -> None:
        assert response.status_code == 200 and response.headers["Content-Type"].startswith("text/event-stream")
        self.response = response
        self._lines = response.iter_lines()

    def next(self) -> Optional[Dict[str, Any]]:
        for line in self._lines:
            if line.startswith(b"data: "):
                payload = json.loads(line[6:])
                assert "error" not in payload, payload
                return payload["result"]
        return None

    def all(self) -> List[Dict[str, Any]]:
        out = []
        result = self.next()
        while result is not None:
            out.append(result)
            result = self.next()
        return out

    def until_state(self, *states: str) -> List[Dict[str, Any]]:
        out: List[Dict[str, Any]] = []
        while not out or state_of(out[-1]) not in states:
            result = self.next()
            assert result is not None, "stream ended before %s: %r" % (states, [state_of(r) for r in out])
            out.append(result)
        return out


def send(server: DemoServer, text: str, task_id: Optional[str] = None) -> List[Dict[str, Any]]:
    return Stream(rpc(server, "SendStreamingMessage", message(text, task_id), stream=True)).all()


def state_of(result: Dict[str, Any]) -> str:
    if "task" in result:
        return result["task"]["status"]["state"]
    return result["statusUpdate"]["status"]["state"]


def iac(result: Dict[str, Any]) -> Dict[str, Any]:
    obj = result.get("statusUpdate") or result.get("task") or {}
    return obj.get("metadata", {}).get("iac_code", {})


def envelopes(results: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    out: List[Dict[str, Any]] = []
    for result in results:
        meta = iac(result)
        if "pipeline" in meta:
            out.append(meta["pipeline"])
        out.extend(meta.get("pipelineBatch", {}).get("events", []))
    return out


def of_type(events: List[Dict[str, Any]], event_type: str) -> List[Dict[str, Any]]:
    return [e for e in events if e["eventType"] == event_type]


def pipeline_state(server: DemoServer, task_id: str, after: int = 0) -> requests.Response:
    return requests.get(server.url + "iac-code/pipeline/state", params={"taskId": task_id, "afterSequence": after},
                        headers=HEADERS, timeout=5)


def get_task(server: DemoServer, task_id: str) -> Dict[str, Any]:
    return rpc(server, "GetTask", {"id": task_id}).json()["result"]


def permission_answer(task_id: str, pending: Dict[str, Any], decision: str = "allow_once") -> Dict[str, Any]:
    return {"schemaVersion": 1, "kind": "permission", "requestTaskId": task_id, "inputId": pending["inputId"],
            "toolUseId": pending["toolUseId"], "decision": decision}


def wait_for(predicate: Any, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return bool(predicate())


def to_permission(server: DemoServer, text: str) -> Tuple[str, Dict[str, Any], List[Dict[str, Any]]]:
    """Run ``text`` (which must skip the question) up to the sideband permission."""
    results = send(server, text)
    task_id = results[0]["task"]["id"]
    assert state_of(results[-1]) == "TASK_STATE_INPUT_REQUIRED"
    return task_id, iac(results[-1])["pendingPermissions"][0], results


# --- tests ---------------------------------------------------------------------------------------------------
def test_first_step_streams_envelopes_and_parks_on_a_question(server: DemoServer) -> None:
    results = send(server, "pipeline please")
    task_id = results[0]["task"]["id"]
    assert [state_of(r) for r in results[:3]] == ["TASK_STATE_SUBMITTED"] * 2 + ["TASK_STATE_WORKING"]
    events = envelopes(results)
    assert [e["eventType"] for e in events] == [
        "pipeline_started", "step_started", "thinking_delta", "text_delta", "text_delta", "text_delta",
        "tool_started", "tool_result", "usage", "tool_started", "input_required"]
    assert [e["sequence"] for e in events] == [float(n) for n in range(1, 12)]  # protobuf Struct numbers
    session = iac(results[1])["iacCodeSessionId"]
    for envelope in events:
        assert ENVELOPE_KEYS <= set(envelope) and envelope["eventId"].startswith("evt-")
        assert envelope["extensionUri"] == EXTENSION_URI and envelope["schemaVersion"] == "1.0"
        assert (envelope["taskId"], envelope["contextId"], envelope["iacCodeSessionId"]) == (task_id, "ctx-pipe",
                                                                                           session)
        assert envelope["pipelineName"] == "selling" and envelope["pipelineRunId"].startswith("prun-")
    # pipeline mode carries no status text, no tool and no thinking metadata: only envelopes (and the input)
    for result in results[3:]:
        assert set(iac(result)) <= {"pipeline", "pipelineBatch", "input"}
        assert "message" not in result["statusUpdate"]["status"]
    started = events[0]
    assert "step" not in started and started["scope"] == "pipeline"
    assert started["data"]["stepNames"] == ["intent_parsing", "architecture", "deploy"]
    assert events[1]["step"] == {"id": "intent_parsing", "runId": "step-intent_parsing-1", "attempt": 1.0,
                                 "index": 1.0, "total": 3.0}
    assert events[2]["data"] == {"type": "raw_thinking", "text": "The user wants a web shop deployed. "}
    ask = events[-1]
    projection = iac(results[-1])["input"]
    assert state_of(results[-1]) == "TASK_STATE_INPUT_REQUIRED" and ask["status"] == "input_required"
    assert projection["kind"] == "ask_user_question" and projection["required"] is True
    assert projection["inputId"] == ask["data"]["inputId"] and projection["requestTaskId"] == task_id
    assert projection["toolUseId"] == events[-2]["data"]["toolUseId"]
    assert projection["inputId"] == "ask-" + projection["toolUseId"]
    assert [o["label"] for o in projection["options"]] == ["Hangzhou", "Beijing"]
    snapshot = get_task(server, task_id)
    assert snapshot["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert snapshot["metadata"]["iac_code"]["input"]["inputId"] == projection["inputId"]
    state = pipeline_state(server, task_id).json()
    assert [e["eventId"] for e in state["events"]] == [e["eventId"] for e in events]
    assert state["events"][0]["sequence"] == 1  # the state endpoint is plain JSON, not protobuf Struct
    snap = state["snapshot"]
    assert (snap["schemaVersion"], snap["taskId"], snap["contextId"], snap["lastSequence"]) == (
        "1.0", task_id, "ctx-pipe", 11)
    assert snap["pipelineRunId"] == started["pipelineRunId"]
    assert snap["display"]["pendingInput"] == {"kind": "ask_user_question", "inputId": projection["inputId"]}
    assert pipeline_state(server, task_id, 9).json()["events"] == state["events"][9:]


def test_answer_runs_parallel_candidates_with_batches_and_replays(server: DemoServer) -> None:
    first = send(server, "pipeline")
    task_id = first[0]["task"]["id"]
    question = iac(first[-1])["input"]
    results = send(server, "Hangzhou", task_id)
    events = envelopes(results)
    received = events[0]
    assert received["eventType"] == "input_received" and received["step"]["id"] == "intent_parsing"
    assert received["data"]["inputId"] == question["inputId"] and received["data"]["answer"] == "Hangzhou"
    assert events[1]["eventType"] == "tool_result" and events[1]["data"]["result"] == "Hangzhou"
    assert events[1]["data"]["toolUseId"] == question["toolUseId"]
    batches = [iac(r)["pipelineBatch"] for r in results if "pipelineBatch" in iac(r)]
    assert len(batches) >= 3 and all(b["extensionUri"] == EXTENSION_URI for b in batches)
    # every new envelope is numbered after the last one; only replays go back
    seen: Dict[str, float] = {}
    replays = []
    last = 11.0
    for envelope in events:
        if envelope["eventId"] in seen:
            assert seen[envelope["eventId"]] == envelope["sequence"]
            replays.append(envelope)
            continue
        assert envelope["sequence"] == last + 1
        last = envelope["sequence"]
        seen[envelope["eventId"]] = envelope["sequence"]
    assert sorted(e["eventType"] for e in replays) == ["candidate_started", "text_delta"]
    memory = server.runtime.store.get(task_id).scenario_state["pipeline"]
    assert sorted(memory["replayed"]) == sorted(e["eventId"] for e in replays)
    # two candidates interleave in their own candidate-step scope
    texts: Dict[str, str] = {}
    firsts = list({e["eventId"]: e for e in reversed(events)}.values())[::-1]
    assert len(firsts) == len(events) - len(replays)
    for envelope in of_type(firsts, "text_delta"):
        if envelope["scope"] == "candidate_step":
            assert envelope["candidateStep"]["id"] == "template_generating"
            texts[envelope["candidate"]["id"]] = texts.get(envelope["candidate"]["id"], "") + envelope["data"]["text"]
    assert texts == {"cand-0": "Candidate A: SLB + ECS + RDS. ", "cand-1": "Candidate B: ACK + PolarDB. "}
    order = [e["candidate"]["id"] for e in of_type(events, "text_delta") if "candidate" in e]
    assert order[:3] == ["cand-0", "cand-1", "cand-0"]
    assert [e["candidate"]["runId"] for e in of_type(events, "candidate_started")][:2] == ["cand-0-r1", "cand-1-r1"]
    # the candidate permission is sideband: pendingPermissions, not input
    last_update = iac(results[-1])
    assert state_of(results[-1]) == "TASK_STATE_INPUT_REQUIRED" and "input" not in last_update
    permission = last_update["pendingPermissions"][0]
    assert {k: permission[k] for k in ("kind", "scope", "subPipelineId", "toolName", "required")} == {
        "kind": "permission", "scope": "candidate", "subPipelineId": "cand-1", "toolName": "ros_deploy",
        "required": True}
    assert permission["requestTaskId"] == task_id and permission["contextId"] == "ctx-pipe"
    assert [o["id"] for o in permission["options"]] == ["allow_once", "deny"] and permission["prompt"]
    assert events[-2]["eventType"] == "tool_started" and events[-2]["data"]["toolUseId"] == permission["toolUseId"]
    assert events[-1]["eventType"] == "input_required" and events[-1]["candidate"]["id"] == "cand-1"
    snapshot = get_task(server, task_id)["metadata"]["iac_code"]
    assert snapshot["pendingPermissions"][0]["inputId"] == permission["inputId"] and "input" not in snapshot


def test_sideband_permission_is_acked_then_followed_and_leaves_a_gap(server: DemoServer) -> None:
    task_id, permission, first = to_permission(server, "pipeline no-question no-deploy")
    answer = permission_answer(task_id, permission)
    # a text or a streamed answer is refused: candidate permissions go through SendMessage
    refused = rpc(server, "SendStreamingMessage", message(data=answer, task_id=task_id)).json()
    assert refused["error"]["code"] == -32602
    assert rpc(server, "SendStreamingMessage", message("yes", task_id=task_id)).json()["error"]["code"] == -32602
    began = time.monotonic()
    acked = rpc(server, "SendMessage", message(data=answer, task_id=task_id)).json()["result"]
    assert time.monotonic() - began < 2.0
    ack = acked["message"]
    assert ack["role"] == "ROLE_AGENT" and ack["taskId"] == task_id
    assert ack["parts"] == [{"data": {"kind": "permission_ack", "inputId": permission["inputId"]}}]
    assert get_task(server, task_id)["status"]["state"] == "TASK_STATE_WORKING"
    again = rpc(server, "SendMessage", message(data=answer, task_id=task_id)).json()
    assert again["error"]["code"] == -32602  # the task is busy with the answer
    follow = Stream(rpc(server, "SubscribeToTask", {"id": task_id}, stream=True))
    assert "task" in follow.next()
    results = follow.until_state("TASK_STATE_INPUT_REQUIRED")
    events = envelopes(results)
    assert events[0]["eventType"] == "input_received" and events[0]["candidate"]["id"] == "cand-1"
    assert events[0]["data"]["decision"] == "allow_once"
    result = of_type(events, "tool_result")[0]
    assert result["data"]["toolUseId"] == permission["toolUseId"] and result["data"]["isError"] is False
    assert server.runtime.tool_executions.count((task_id, permission["toolUseId"])) == 1
    assert sorted(e["candidate"]["id"] for e in of_type(events, "candidate_step_completed")) == ["cand-0", "cand-1"]
    completed = of_type(events, "candidate_completed")
    assert [e["data"]["totalMonthlyCost"] for e in completed] == [1280.5, 1650.0]
    selection = iac(results[-1])["input"]
    assert selection["kind"] == "candidate_selection" and [o["id"] for o in selection["options"]] == ["cand-0",
                                                                                                    "cand-1"]
    assert {"summary", "totalMonthlyCost", "costItems", "label"} <= set(selection["options"][1])
    # the gap: logged after the selection was sent, never streamed, only in pipeline/state
    memory = server.runtime.store.get(task_id).scenario_state["pipeline"]
    assert wait_for(lambda: len(memory["hidden"]) == 1)
    cursor = int(events[-1]["sequence"])
    state = pipeline_state(server, task_id, cursor).json()
    assert [(e["eventId"], e["eventType"], e["sequence"]) for e in state["events"]] == [
        (memory["hidden"][0], "diagram_shown", cursor + 1)]
    assert state["snapshot"]["lastSequence"] == cursor + 1
    assert wait_for(lambda: not server.runtime.store.get(task_id).turn_active)
    # the selection (the option label) completes the pipeline without a deployment (no-deploy)
    final = send(server, "Plan B: ACK + PolarDB", task_id)
    assert state_of(final[-1]) == "TASK_STATE_COMPLETED"
    followed = follow.all()  # the subscription saw everything after the selection, then the end
    assert state_of(followed[-1]) == "TASK_STATE_COMPLETED"
    streamed = {e["eventId"] for e in envelopes(first) + events + envelopes(followed) + envelopes(final)}
    assert memory["hidden"][0] not in streamed
    assert {e["eventId"] for e in state["events"]} | streamed == {e["eventId"] for e in memory["log"]}
    tail = envelopes(final)
    assert of_type(tail, "candidate_selected")[0]["data"]["candidateId"] == "cand-1"
    assert tail[-1]["eventType"] == "pipeline_completed" and tail[-1]["status"] == "completed"
    assert "input" not in get_task(server, task_id)["metadata"]["iac_code"]
    assert rpc(server, "SubscribeToTask", {"id": task_id}).json()["error"]["code"] == -32004


@pytest.mark.parametrize("decision,is_error", [("allow_once", False), ("deny", True)])
def test_sideband_decision_is_reported_in_the_tool_result(server: DemoServer, decision: str, is_error: bool) -> None:
    task_id, permission, _ = to_permission(server, "pipeline no-question")
    executed = len(server.runtime.tool_executions)
    rpc(server, "SendMessage", message(data=permission_answer(task_id, permission, decision), task_id=task_id))
    follow = Stream(rpc(server, "SubscribeToTask", {"id": task_id}, stream=True))
    events = envelopes(follow.until_state("TASK_STATE_INPUT_REQUIRED"))
    follow.response.close()
    assert of_type(events, "tool_result")[0]["data"]["isError"] is is_error
    assert len(server.runtime.tool_executions) == executed + (0 if is_error else 1)


def test_deployment_confirmation_then_cleanup_and_completion(server: DemoServer) -> None:
    results = send(server, "pipeline no-question no-candidates")
    task_id = results[0]["task"]["id"]
    events = envelopes(results)
    assert "candidate_started" not in [e["eventType"] for e in events]
    deploy = of_type(events, "step_started")[-1]
    assert deploy["step"]["id"] == "deploy" and deploy["step"]["index"] == 3.0
    assert [e["data"]["status"] for e in of_type(events, "stack_progress")] == ["CREATE_IN_PROGRESS",
                                                                               "PREVIEW_COMPLETE"]
    assert of_type(events, "stack_instances_progress")[0]["data"]["instances"][0]["regionId"] == "cn-hangzhou"
    confirmation = iac(results[-1])["input"]
    assert confirmation["kind"] == "deployment_confirmation"
    assert [o["action"] for o in confirmation["options"]] == ["confirm", "adjust", "reselect", "cancel"]
    text = json.dumps({"kind": "deployment_confirmation", "action": "adjust",
                       "parameter_overrides": {"InstanceType": "ecs.g7.xlarge"}}, separators=(",", ":"))
    final = send(server, text, task_id)
    tail = envelopes(final)
    assert tail[0]["eventType"] == "input_received" and tail[0]["data"]["action"] == "adjust"
    assert of_type(tail, "stack_progress")[0]["data"]["parameters"] == {"InstanceType": "ecs.g7.xlarge"}
    kinds = [e["eventType"] for e in tail]
    assert kinds[kinds.index("cleanup_started"):kinds.index("cleanup_completed") + 1] == [
        "cleanup_started", "cleanup_progress", "cleanup_completed"]
    assert kinds[-2:] == ["step_completed", "pipeline_completed"]
    assert tail[-1]["data"] == {"totalSteps": 3.0, "earlyExit": False, "deployed": True}
    assert state_of(final[-1]) == "TASK_STATE_COMPLETED"
    state = pipeline_state(server, task_id).json()
    assert state["snapshot"]["display"]["status"] == "completed"
    assert [item["status"] for item in state["snapshot"]["control"]["inputHistory"]] == ["answered"]
    assert [e["sequence"] for e in state["events"]] == list(range(1, len(state["events"]) + 1))


def test_unclear_answers_are_asked_again_and_reselect_goes_back(server: DemoServer) -> None:
    results = send(server, "pipeline no-question no-candidates")
    task_id = results[0]["task"]["id"]
    first = iac(results[-1])["input"]
    again = send(server, "maybe later", task_id)
    second = iac(again[-1])["input"]
    assert second["kind"] == "deployment_confirmation" and second["inputId"] != first["inputId"]
    back = send(server, "Choose another architecture", task_id)
    selection = iac(back[-1])["input"]
    assert selection["kind"] == "candidate_selection"
    # back to the architecture step (its first attempt: no-candidates skipped it before)
    assert of_type(envelopes(back), "step_started")[0]["step"]["runId"] == "step-architecture-1"
    assert iac(send(server, "nobody", task_id)[-1])["input"]["kind"] == "candidate_selection"
    redeploy = send(server, "cand-0", task_id)
    assert of_type(envelopes(redeploy), "step_started")[0]["step"]["runId"] == "step-deploy-2"
    final = send(server, "cancel", task_id)
    tail = envelopes(final)
    assert "stack_progress" not in [e["eventType"] for e in tail] and of_type(tail, "cleanup_completed")
    assert tail[-1]["data"]["deployed"] is False and state_of(final[-1]) == "TASK_STATE_COMPLETED"


def test_detach_ends_the_answer_stream_early_and_subscribers_see_the_rest(server: DemoServer) -> None:
    results = send(server, "pipeline detach no-candidates")
    task_id = results[0]["task"]["id"]
    answered = send(server, "Beijing", task_id)
    assert [e["eventType"] for e in envelopes(answered)] == ["input_received", "tool_result"]
    assert state_of(answered[-1]) == "TASK_STATE_WORKING"
    follow = Stream(rpc(server, "SubscribeToTask", {"id": task_id}, stream=True))
    assert follow.next()["task"]["status"]["state"] == "TASK_STATE_WORKING"
    rest = follow.until_state("TASK_STATE_INPUT_REQUIRED")
    follow.response.close()
    assert of_type(envelopes(rest), "text_delta")[0]["data"]["text"] == "Region Beijing noted. "
    assert iac(rest[-1])["input"]["kind"] == "deployment_confirmation"


def test_quick_and_failing_pipelines(server: DemoServer) -> None:
    quick = send(server, "pipeline quick")
    events = envelopes(quick)
    assert [e["eventType"] for e in events] == ["pipeline_started", "step_started", "thinking_delta",
                                                "text_delta", "text_delta", "usage", "step_completed",
                                                "pipeline_completed"]
    assert events[-1]["data"]["earlyExit"] is True and state_of(quick[-1]) == "TASK_STATE_COMPLETED"
    failing = send(server, "pipeline fail")
    batch = iac(failing[-1])["pipelineBatch"]["events"]
    assert [e["eventType"] for e in batch] == ["step_failed", "pipeline_failed"]
    assert batch[0]["data"]["errorDetails"]["type"] == "StepFailed"
    assert state_of(failing[-1]) == "TASK_STATE_FAILED"
    assert iac(failing[-1])["error"]["retryable"] is False


def test_pipeline_name_state_endpoint_and_scenario_listing(server: DemoServer) -> None:
    results = Stream(rpc(server, "SendStreamingMessage", message("pipeline quick", pipeline="renewal"),
                         stream=True)).all()
    assert {e["pipelineName"] for e in envelopes(results)} == {"renewal"}
    task_id = results[0]["task"]["id"]
    assert pipeline_state(server, task_id, 100).json()["events"] == []
    assert pipeline_state(server, "no-such-task").status_code == 404
    assert {"pipeline", "pipeline quick", "pipeline fail"} <= set(SCENARIOS)

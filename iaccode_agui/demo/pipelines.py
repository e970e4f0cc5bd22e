"""Pipeline-mode scenarios (``run_mode: "pipeline"``): a scripted ``selling`` pipeline.

A message whose ``metadata.iac_code.run_mode`` is ``pipeline`` always runs one of these, whatever its text
(``pipeline_name`` defaults to ``selling``).  Keywords in the first message choose the variant:

=================  ======================================================================================
``quick``          pipeline_started, one step with thinking and text, pipeline_completed (early exit).
``fail``           one step, then a batch [step_failed, pipeline_failed] that ends TASK_STATE_FAILED.
(anything else)    the full story, four interrupts:
                   1. ``intent_parsing``: thinking, three text deltas, a doc-search tool, usage, then an
                      ``ask_user_question`` (answered with a region label as text).
                   2. ``architecture``: two parallel candidates ``cand-0``/``cand-1`` whose text interleaves,
                      partly in batches, with a replayed ``candidate_started`` (same eventId) and a replayed
                      text delta inside a later batch; cand-1's ``ros_deploy`` then waits on a *sideband*
                      permission (``pendingPermissions``, ``scope: candidate``).
                   3. The permission answer (SendMessage only) is acknowledged at once; the work goes on in
                      the background once a SubscribeToTask stream follows the task: candidates complete,
                      then a ``candidate_selection`` (answer: the option label or id).  A ``diagram_shown``
                      envelope is logged after it but never sent: only ``/iac-code/pipeline/state`` has it.
                   4. ``deploy``: stack_progress / stack_instances_progress of a preview stack, then a
                      ``deployment_confirmation`` (answer: the JSON ``{"kind":"deployment_confirmation",
                      "action":...,"parameter_overrides":{...}}`` or an option label).
                   5. confirm/adjust: the stack is created, the preview cleaned up (cleanup_*),
                      step_completed, pipeline_completed, TASK_STATE_COMPLETED.  cancel: cleanup and
                      completion without a deployment.  reselect: back to the candidate selection.
=================  ======================================================================================

Switches for the full story (any combination): ``no-question`` (step 1 does not ask), ``no-candidates``
(no architecture step: cand-0 is deployed), ``no-deploy`` (the pipeline completes after the selection),
``detach`` (the stream of each text answer closes right after ``input_received``; the rest only reaches a
SubscribeToTask stream, as the real runtime sometimes does).  Background work waits up to
``FOLLOWER_WAIT`` seconds for that subscriber, so nothing is produced while nobody can see it.

``eager`` models a client that comes back late: background work never waits for a follower.  The
sideband ack is held until the task parks again, and with ``detach`` the answer's stream stays open and
silent until the turn is over.  Either way everything in between happened while nobody was subscribed,
so a client only gets it from ``/iac-code/pipeline/state``.
"""
import json
import re
import uuid
from typing import Any, Dict, Optional, Tuple

from iaccode_agui.demo import tools
from iaccode_agui.demo.pipeline_events import PipelineRun, pipeline_state
from iaccode_agui.demo.scenarios import SCENARIOS, Scenario
from iaccode_agui.demo.turns import FIRST_CALL_USAGE, FOLLOW_UP_USAGE, Turn, new_error_id

DEFAULT_PIPELINE = "selling"
STEPS = ("intent_parsing", "architecture", "deploy")
FLAGS = ("no-question", "no-candidates", "no-deploy", "detach", "eager")
FOLLOWER_WAIT = 10.0

REGIONS = [{"id": "cn-hangzhou", "label": "Hangzhou"}, {"id": "cn-beijing", "label": "Beijing"}]
CANDIDATES = (
    {"id": "cand-0", "name": "Plan A: SLB + ECS + RDS", "text": ("Candidate A: ", "SLB + ECS + RDS. "),
     "summary": "Two ECS instances behind an SLB with an RDS MySQL database.", "totalMonthlyCost": 1280.5,
     "costItems": [{"name": "ECS", "spec": "ecs.g7.large x2", "monthlyCost": 820.0},
                   {"name": "RDS", "spec": "mysql.n2.medium.1", "monthlyCost": 460.5}]},
    {"id": "cand-1", "name": "Plan B: ACK + PolarDB", "text": ("Candidate B: ", "ACK + PolarDB. "),
     "summary": "A managed Kubernetes cluster with a PolarDB cluster.", "totalMonthlyCost": 1650.0,
     "costItems": [{"name": "ACK", "spec": "3 worker nodes", "monthlyCost": 1100.0},
                   {"name": "PolarDB", "spec": "polar.mysql.x4.medium", "monthlyCost": 550.0}]},
)
CANDIDATE_STEP = "template_generating"
DEPLOY_OPTIONS = [{"id": "confirm", "label": "Deploy now", "action": "confirm"},
                  {"id": "adjust", "label": "Deploy with my parameters", "action": "adjust"},
                  {"id": "reselect", "label": "Choose another architecture", "action": "reselect"},
                  {"id": "cancel", "label": "Cancel the deployment", "action": "cancel"}]
ACTIONS = tuple(option["action"] for option in DEPLOY_OPTIONS)


def _usage(counts: Tuple[int, int, int]) -> Dict[str, Any]:
    inp, out, cached = counts
    return {"provider": "openai", "model": "other", "inputTokens": inp, "outputTokens": out,
            "totalTokens": inp + out, "cachedInputTokens": cached}


def _projection(run: PipelineRun, kind: str, input_id: str, **fields: Any) -> Dict[str, Any]:
    """The ``metadata.iac_code.input`` of a non-permission wait (dialect 1.9), Struct numbers included."""
    value = {"schemaVersion": 1.0, "kind": kind, "inputId": input_id,
             "requestTaskId": run.turn.task.id, "contextId": run.turn.task.context_id, "required": True}
    value.update(fields)
    return value


def _new_id(prefix: str) -> str:
    return "%s-%s" % (prefix, uuid.uuid4().hex[:16])


class PipelineScenario(Scenario):
    """Common ground: the state endpoint answers from the pipeline log."""

    def pipeline_state(self, turn_state: Dict[str, Any], after_sequence: int) -> Optional[Dict[str, Any]]:
        return pipeline_state(turn_state, after_sequence)

    def begin(self, turn: Turn) -> PipelineRun:
        return PipelineRun.begin(turn, turn.state.get("pipelineName", DEFAULT_PIPELINE), "selling", STEPS)


class QuickPipeline(PipelineScenario):
    name = "pipeline quick"
    description = "run_mode pipeline: one step with text, then pipeline_completed (early exit), COMPLETED"
    pattern = r"\bquick\b"

    def start(self, turn: Turn) -> None:
        run = self.begin(turn)
        run.open_step("intent_parsing")
        run.emit("thinking_delta", {"type": "raw_thinking", "text": "This is not an infrastructure request. "})
        for text in ("Nothing to deploy ", "for this request."):
            run.emit("text_delta", {"text": text})
        run.emit("usage", _usage(FIRST_CALL_USAGE))
        run.close_step({"conclusion": {"is_infra_intent": False}})
        run.finish({"totalSteps": len(STEPS), "earlyExit": True})


class FailingPipeline(PipelineScenario):
    name = "pipeline fail"
    description = "run_mode pipeline: one step, then a batch [step_failed, pipeline_failed], FAILED"
    pattern = r"\bfail\b"

    def start(self, turn: Turn) -> None:
        run = self.begin(turn)
        run.open_step("intent_parsing")
        run.emit("text_delta", {"text": "Analysing the request. "})
        error_id = new_error_id()
        failed = run.envelope("step_failed", {"error": "No conclusion extracted",
                                              "errorDetails": {"type": "StepFailed", "errorId": error_id}},
                              status="failed")
        ended = run.envelope("pipeline_failed", {"error": "Step intent_parsing failed"}, scope="pipeline",
                             status="failed")
        error = {"retryable": False, "errorId": error_id}
        run.send(failed, ended, iac={"error": error}, iac_set={"error": error})


class SellingPipeline(PipelineScenario):
    name = "pipeline"
    description = ("run_mode pipeline: question, parallel candidates with a sideband permission, candidate "
                   "selection, deployment confirmation, cleanup, COMPLETED")

    def start(self, turn: Turn) -> None:
        run = self.begin(turn)
        run.open_step("intent_parsing")
        run.emit("thinking_delta", {"type": "raw_thinking", "text": "The user wants a web shop deployed. "})
        for text in ("Let me ", "understand ", "your request. "):
            run.emit("text_delta", {"text": text})
        search_id = tools.new_tool_use_id()
        query = {"query": "web shop reference architecture"}
        run.emit("tool_started", {"toolName": "aliyun_doc_search", "toolUseId": search_id, "input": query})
        run.emit("tool_result", {"toolName": "aliyun_doc_search", "toolUseId": search_id, "isError": False,
                                 "input": query, "result": "3 reference architectures found"})
        run.emit("usage", _usage(FIRST_CALL_USAGE))
        if self._flag(turn, "no-question"):
            self._finish_intent(run, REGIONS[0]["label"])
            return
        question_id = tools.new_tool_use_id()
        run.emit("tool_started", {"toolName": "ask_user_question", "toolUseId": question_id,
                                  "input": {"question": "Which region?", "options": REGIONS}})
        run.ask(_projection(run, "ask_user_question", "ask-" + question_id, toolUseId=question_id, prompt="Which region?",
                            options=[dict(o) for o in REGIONS], allowFreeText=True))

    def resume(self, turn: Turn, pending: Dict[str, Any], answer: str, decision: Optional[str]) -> None:
        run = PipelineRun(turn)
        kind = pending.get("kind")
        if kind == "permission":
            self._after_permission(run, pending, decision or "deny")
        elif kind == "ask_user_question":
            self._after_question(run, pending, answer)
        elif kind == "candidate_selection":
            self._after_selection(run, pending, answer)
        else:
            self._after_confirmation(run, pending, answer)

    # --- 1. intent parsing ----------------------------------------------------------------------------
    @staticmethod
    def _flag(turn: Turn, flag: str) -> bool:
        return flag in turn.state.get("flags", ())

    def holds_ack(self, turn_state: Dict[str, Any]) -> bool:
        return "eager" in turn_state.get("flags", ())

    def _detach(self, run: PipelineRun) -> None:
        if not self._flag(run.turn, "detach"):
            return
        eager = self._flag(run.turn, "eager")
        run.turn.detach(hold=eager)
        if not eager:
            run.turn.wait_for_follower(FOLLOWER_WAIT)

    def _after_question(self, run: PipelineRun, pending: Dict[str, Any], answer: str) -> None:
        run.received(pending, {"answer": answer})
        run.emit("tool_result", {"toolName": "ask_user_question", "toolUseId": pending.get("toolUseId"),
                                 "isError": False, "result": answer})
        self._detach(run)
        self._finish_intent(run, answer)

    def _finish_intent(self, run: PipelineRun, region: str) -> None:
        run.turn.state["region"] = region
        run.emit("text_delta", {"text": "Region %s noted. " % region})
        run.close_step({"conclusion": {"is_infra_intent": True, "region": region}})
        if self._flag(run.turn, "no-candidates"):
            self._deploy(run, CANDIDATES[0])
        else:
            self._architecture(run)

    # --- 2. parallel candidates -----------------------------------------------------------------------
    @staticmethod
    def _candidate(run: PipelineRun, index: int) -> Tuple[Dict[str, Any], Dict[str, Any]]:
        """The ``candidate`` and ``candidateStep`` blocks of candidate ``index`` (context of its envelopes)."""
        spec = CANDIDATES[index]
        candidate = {"id": spec["id"], "runId": "%s-r1" % spec["id"], "index": index, "name": spec["name"]}
        step = {"id": CANDIDATE_STEP, "runId": "%s-%s-1" % (spec["id"], CANDIDATE_STEP)}
        return candidate, step

    def _architecture(self, run: PipelineRun) -> None:
        run.open_step("architecture")
        run.emit("text_delta", {"text": "I will design two candidate architectures in parallel. "})
        (c0, s0), (c1, s1) = self._candidate(run, 0), self._candidate(run, 1)
        both = ((c0, s0, CANDIDATES[0]), (c1, s1, CANDIDATES[1]))
        started = [run.envelope("candidate_started", {"name": spec["name"]}, scope="candidate", candidate=c)
                   for c, _, spec in both]
        run.send(*started)
        run.send(*[run.envelope("candidate_step_started", {"name": CANDIDATE_STEP}, scope="candidate_step",
                                candidate=c, candidate_step=s) for c, s, _ in both])
        in_c0 = dict(scope="candidate_step", candidate=c0, candidate_step=s0)
        in_c1 = dict(scope="candidate_step", candidate=c1, candidate_step=s1)
        run.emit("text_delta", {"text": CANDIDATES[0]["text"][0]}, **in_c0)
        head_b = run.envelope("text_delta", {"text": CANDIDATES[1]["text"][0]}, **in_c1)
        tail_a = run.envelope("text_delta", {"text": CANDIDATES[0]["text"][1]}, **in_c0)
        run.send(head_b, tail_a)
        run.send(started[1])  # replayed: same eventId and sequence as in the first batch
        run.emit("thinking_delta", {"type": "raw_thinking", "text": "A managed cluster scales better. "}, **in_c1)
        run.send(tail_a, run.envelope("text_delta", {"text": CANDIDATES[1]["text"][1]}, **in_c1))
        deploy_id = tools.new_tool_use_id()
        preview = {"stackName": "preview-cand-1", "templateId": "tpl-cand-1", "mode": "preview"}
        run.emit("tool_started", {"toolName": "ros_deploy", "toolUseId": deploy_id, "input": preview}, **in_c1)
        run.turn.state["preview"] = {"toolUseId": deploy_id, "input": preview}
        permission = tools.permission_envelope(
            task_id=run.turn.task.id, context_id=run.turn.task.context_id, tool_name="ros_deploy",
            tool_use_id=deploy_id, effect="cloud_change", target="preview stack preview-cand-1",
            tool_input=preview, language=run.turn.task.language)
        permission.update(scope="candidate", subPipelineId=c1["id"])
        run.ask_sideband(permission, **in_c1)

    def _after_permission(self, run: PipelineRun, pending: Dict[str, Any], decision: str) -> None:
        if not self._flag(run.turn, "eager"):
            run.turn.wait_for_follower(FOLLOWER_WAIT)  # the answer got its ack; nobody streams this yet
        (c0, s0), (c1, s1) = self._candidate(run, 0), self._candidate(run, 1)
        in_c0 = dict(scope="candidate_step", candidate=c0, candidate_step=s0)
        in_c1 = dict(scope="candidate_step", candidate=c1, candidate_step=s1)
        run.received(pending, {"decision": decision})
        preview = run.turn.state["preview"]
        if decision == "allow_once":
            run.turn.executed(preview["toolUseId"])
            result, failed, note = "Preview stack preview-cand-1 validated (12 resources).", False, "Validated. "
        else:
            result, failed, note = tools.DENIAL_RESULT, True, "Validation skipped. "
        run.emit("tool_result", {"toolName": "ros_deploy", "toolUseId": preview["toolUseId"], "isError": failed,
                                 "input": preview["input"], "result": result}, **in_c1)
        run.send(run.envelope("text_delta", {"text": "About %.0f CNY a month. " % CANDIDATES[0]["totalMonthlyCost"]},
                              **in_c0),
                 run.envelope("text_delta", {"text": note}, **in_c1))
        run.send(run.envelope("candidate_step_completed", {}, **in_c0),
                 run.envelope("candidate_step_completed", {}, **in_c1))
        run.send(*[run.envelope("candidate_completed", self._offer(spec), scope="candidate", candidate=c)
                   for c, spec in ((c0, CANDIDATES[0]), (c1, CANDIDATES[1]))])
        run.emit("usage", _usage(FOLLOW_UP_USAGE))
        run.emit("text_delta", {"text": "Both candidates are ready. "})
        self._ask_selection(run)
        run.hide("diagram_shown", {"candidateId": c0["id"], "format": "mermaid",
                                   "diagram": "graph LR; SLB-->ECS; ECS-->RDS"}, scope="candidate", candidate=c0)

    @staticmethod
    def _offer(spec: Dict[str, Any]) -> Dict[str, Any]:
        return {"name": spec["name"], "summary": spec["summary"], "totalMonthlyCost": spec["totalMonthlyCost"],
                "costItems": [dict(item) for item in spec["costItems"]]}

    def _ask_selection(self, run: PipelineRun) -> None:
        options = []
        for spec in CANDIDATES:
            option = {"id": spec["id"], "label": spec["name"]}
            option.update(self._offer(spec))
            del option["name"]
            options.append(option)
        run.ask(_projection(run, "candidate_selection", _new_id("select"), prompt="Which architecture should I deploy?",
                            options=options, allowFreeText=False))

    # --- 3. selection ---------------------------------------------------------------------------------
    def _after_selection(self, run: PipelineRun, pending: Dict[str, Any], answer: str) -> None:
        wanted = answer.strip().lower()
        chosen = next((spec for spec in CANDIDATES if wanted in (spec["id"].lower(), spec["name"].lower())), None)
        run.received(pending, {"answer": answer, "candidateId": chosen["id"] if chosen else None})
        self._detach(run)
        if chosen is None:
            run.emit("text_delta", {"text": "I could not match that to a candidate. "})
            self._ask_selection(run)
            return
        candidate, _ = self._candidate(run, CANDIDATES.index(chosen))
        run.emit("candidate_selected", {"candidateId": chosen["id"], "name": chosen["name"]}, scope="candidate",
                 candidate=candidate)
        run.close_step({"selectedCandidate": chosen["id"]})
        if self._flag(run.turn, "no-deploy"):
            run.finish({"totalSteps": len(STEPS), "earlyExit": True, "deployed": False})
            return
        self._deploy(run, chosen)

    # --- 4. deployment --------------------------------------------------------------------------------
    def _deploy(self, run: PipelineRun, chosen: Dict[str, Any]) -> None:
        run.open_step("deploy")
        stack = {"stackId": "stack-" + uuid.uuid4().hex[:12], "stackName": "selling-" + chosen["id"],
                 "regionId": "cn-hangzhou"}
        run.turn.state["stack"] = stack
        run.turn.state["chosen"] = chosen["id"]
        run.emit("text_delta", {"text": "Preparing a preview of %s. " % chosen["name"]})
        run.emit("stack_progress", dict(stack, phase="preview", status="CREATE_IN_PROGRESS", progress=0.5))
        run.send(run.envelope("stack_instances_progress", dict(stack, instances=[
                     {"regionId": "cn-hangzhou", "status": "CURRENT", "progress": 1.0}])),
                 run.envelope("stack_progress", dict(stack, phase="preview", status="PREVIEW_COMPLETE",
                                                     progress=1.0)))
        self._ask_confirmation(run, chosen)

    def _ask_confirmation(self, run: PipelineRun, chosen: Dict[str, Any]) -> None:
        summary = {"candidateId": chosen["id"], "stackName": run.turn.state["stack"]["stackName"],
                   "regionId": "cn-hangzhou", "totalMonthlyCost": chosen["totalMonthlyCost"]}
        run.ask(_projection(run, "deployment_confirmation", _new_id("confirm"), prompt="Deploy %s now?" % chosen["name"],
                            deploymentSummary=summary, options=[dict(o) for o in DEPLOY_OPTIONS]))

    def _after_confirmation(self, run: PipelineRun, pending: Dict[str, Any], answer: str) -> None:
        action, overrides = parse_confirmation(answer)
        run.received(pending, {"action": action})
        self._detach(run)
        chosen = next(spec for spec in CANDIDATES if spec["id"] == run.turn.state.get("chosen"))
        if action is None:
            run.emit("text_delta", {"text": "Please confirm, adjust, reselect or cancel. "})
            self._ask_confirmation(run, chosen)
            return
        if action == "reselect":
            run.close_step({"outcome": "reselect"})
            run.open_step("architecture")
            run.emit("text_delta", {"text": "Let us choose again. "})
            self._ask_selection(run)
            return
        stack = run.turn.state["stack"]
        if action in ("confirm", "adjust"):
            run.emit("stack_progress", dict(stack, phase="deploy", status="CREATE_IN_PROGRESS", progress=0.2,
                                            parameters=overrides))
            run.send(run.envelope("stack_instances_progress", dict(stack, instances=[
                         {"regionId": "cn-hangzhou", "status": "CURRENT", "progress": 1.0}])),
                     run.envelope("stack_progress", dict(stack, phase="deploy", status="CREATE_COMPLETE",
                                                         progress=1.0)))
        run.emit("cleanup_started", {"reason": "preview stack", "resources": 1})
        run.emit("cleanup_progress", {"deleted": 1, "total": 1})
        run.emit("cleanup_completed", {"deleted": 1})
        deployed = action != "cancel"
        run.emit("text_delta", {"text": "Deployment complete. " if deployed else "Nothing was deployed. "})
        run.emit("usage", _usage(FOLLOW_UP_USAGE))
        run.close_step({"outcome": action})
        run.finish({"totalSteps": len(STEPS), "earlyExit": False, "deployed": deployed})


def parse_confirmation(answer: str) -> Tuple[Optional[str], Dict[str, Any]]:
    """``(action, parameter_overrides)`` of a confirmation answer: the JSON encoding, or an option label/id."""
    try:
        value = json.loads(answer)
    except ValueError:
        value = None
    if isinstance(value, dict) and value.get("kind") == "deployment_confirmation":
        action = value.get("action")
        overrides = value.get("parameter_overrides")
        return (action if action in ACTIONS else None), (overrides if isinstance(overrides, dict) else {})
    wanted = answer.strip().lower()
    for option in DEPLOY_OPTIONS:
        if wanted in (option["id"], option["label"].lower()):
            return option["action"], {}
    return None, {}


QUICK = QuickPipeline()
FAILING = FailingPipeline()
SELLING = SellingPipeline()
PLAYBOOK = (QUICK, FAILING)
# Listed with the normal-mode scenarios (agent card skills, ``--help``).
SCENARIOS.update((s.name, s.description) for s in (SELLING, QUICK, FAILING))


def select(text: str, iac: Optional[Dict[str, Any]] = None) -> Tuple[Scenario, Dict[str, Any]]:
    """The pipeline scenario a new task runs (pipeline run mode), with its name and switches."""
    name = (iac or {}).get("pipeline_name")
    params: Dict[str, Any] = {"pipelineName": name if isinstance(name, str) and name else DEFAULT_PIPELINE}
    for scenario in PLAYBOOK:
        if scenario.match(text) is not None:
            return scenario, params
    params["flags"] = [flag for flag in FLAGS if re.search(r"(?<![\w-])%s(?![\w-])" % flag, text, re.IGNORECASE)]
    return SELLING, params

"""The pipeline kernel of the scripted runtime: numbered envelopes, their log, and the state endpoint.

In pipeline mode iac-code sends everything as ``iac-code.pipeline.v1`` envelopes, one per
status update in ``metadata.iac_code.pipeline`` or several in ``pipelineBatch.events``.  Every envelope is
kept in the task's log, because the runtime answers ``/iac-code/pipeline/state`` from it: that endpoint,
not the live stream, is the authority a client recovers from.  ``PipelineRun`` is what a pipeline scenario
talks to during one turn; the scenario decides *what* happens, this module decides how it looks.

Two deliberate wire faults exist so clients can prove they handle them:
- ``send`` of an envelope that was already sent repeats it unchanged (same eventId and sequence), the
  way a reconnecting runtime replays; its id is recorded in ``replayed``.
- ``hide`` numbers and logs an envelope without sending it, a gap only the state endpoint fills; its id
  is recorded in ``hidden``.
"""
import uuid
from typing import Any, Dict, List, Optional, Sequence, Tuple

from iaccode_agui.demo import wire
from iaccode_agui.demo.tasks import COMPLETED, FAILED, INPUT_REQUIRED, WORKING
from iaccode_agui.demo.turns import Turn

EXTENSION_URI = "urn:iac-code:a2a:pipeline-events:v1"
SCHEMA_VERSION = "1.0"
# The key of the pipeline's memory inside the task's scenario state.
STATE_KEY = "pipeline"

# Envelope status -> A2A task state of the update that carries it (dialect 1.8).
_STATES = {"input_required": INPUT_REQUIRED, "waiting_input": INPUT_REQUIRED, "failed": FAILED,
           "completed": COMPLETED, "canceled": "TASK_STATE_CANCELED"}
# What a task waits on, dropped from the task's metadata once the pipeline ends.
_WAITING_KEYS = ("input", "pendingPermissions", "permission")

Envelope = Dict[str, Any]


def task_state_for(status: str) -> str:
    return _STATES.get(status, WORKING)


class PipelineRun:
    """The pipeline of one task, seen from the turn that is currently producing it."""

    def __init__(self, turn: Turn) -> None:
        self.turn = turn
        self.memory: Dict[str, Any] = turn.state[STATE_KEY]

    @classmethod
    def begin(cls, turn: Turn, name: str, pipeline_type: str, steps: Sequence[str]) -> "PipelineRun":
        """Create the pipeline memory of a new task and announce it with ``pipeline_started``."""
        turn.state[STATE_KEY] = {
            "runId": "prun-" + uuid.uuid4().hex[:12], "name": name, "steps": list(steps),
            "taskId": turn.task.id, "contextId": turn.task.context_id, "sessionId": turn.task.session_id,
            "sequence": 0, "log": [], "sent": set(), "replayed": [], "hidden": [],
            "attempts": {}, "current": None, "inputs": {},
        }
        run = cls(turn)
        run.emit("pipeline_started", {"pipelineType": pipeline_type, "totalSteps": len(steps),
                                      "userRequest": turn.user_text, "stepNames": list(steps)}, scope="pipeline")
        return run

    # --- envelopes ------------------------------------------------------------------------------------
    def step(self, step_id: Optional[str] = None) -> Optional[Dict[str, Any]]:
        """The ``step`` block of the current (or named) step at its current attempt."""
        step_id = step_id or self.memory["current"]
        if step_id is None:
            return None
        attempt = self.memory["attempts"].get(step_id, 1)
        steps = self.memory["steps"]
        return {"id": step_id, "runId": "step-%s-%d" % (step_id, attempt), "attempt": attempt,
                "index": steps.index(step_id) + 1 if step_id in steps else 0, "total": len(steps)}

    def envelope(self, event_type: str, data: Optional[Dict[str, Any]] = None, *, scope: str = "step",
                 status: str = "working", candidate: Optional[Dict[str, Any]] = None,
                 candidate_step: Optional[Dict[str, Any]] = None) -> Envelope:
        """Number and log a new envelope (not sent yet); pipeline-scoped envelopes name no step."""
        memory = self.memory
        memory["sequence"] += 1
        envelope: Envelope = {
            "schemaVersion": SCHEMA_VERSION, "extensionUri": EXTENSION_URI, "sequence": memory["sequence"],
            "eventId": "evt-" + uuid.uuid4().hex, "eventType": event_type, "scope": scope, "status": status,
            "pipelineName": memory["name"], "pipelineRunId": memory["runId"], "taskId": memory["taskId"],
            "contextId": memory["contextId"], "iacCodeSessionId": memory["sessionId"],
            "createdAt": wire.utc_timestamp(),
        }
        step = self.step() if scope != "pipeline" else None
        if step is not None:
            envelope["step"] = step
        if candidate is not None:
            envelope["candidate"] = dict(candidate)
        if candidate_step is not None:
            envelope["candidateStep"] = dict(candidate_step)
        envelope["data"] = dict(data or {})
        memory["log"].append(envelope)
        return envelope

    def send(self, *envelopes: Envelope, iac: Optional[Dict[str, Any]] = None,
             iac_set: Optional[Dict[str, Any]] = None, iac_drop: Tuple[str, ...] = ()) -> None:
        """One status update: a single envelope, or a batch; the task state follows the last one."""
        sent = self.memory["sent"]
        for envelope in envelopes:
            if envelope["eventId"] in sent:
                self.memory["replayed"].append(envelope["eventId"])
            sent.add(envelope["eventId"])
        metadata: Dict[str, Any] = dict(iac or {})
        if len(envelopes) == 1:
            metadata["pipeline"] = wire.as_struct(envelopes[0])
        else:
            metadata["pipelineBatch"] = {"schemaVersion": SCHEMA_VERSION, "extensionUri": EXTENSION_URI,
                                         "events": [wire.as_struct(e) for e in envelopes]}
        state = task_state_for(envelopes[-1]["status"])
        if state in (COMPLETED, FAILED):
            iac_drop = tuple(iac_drop) + _WAITING_KEYS
        self.turn.signal(state, metadata, iac_set=iac_set, iac_drop=iac_drop,
                         timestamp=state != WORKING)

    def emit(self, event_type: str, data: Optional[Dict[str, Any]] = None, **context: Any) -> Envelope:
        """Create one envelope and send it on its own."""
        envelope = self.envelope(event_type, data, **context)
        self.send(envelope)
        return envelope

    def hide(self, event_type: str, data: Optional[Dict[str, Any]] = None, **context: Any) -> Envelope:
        """Log an envelope that no stream will ever carry (the gap)."""
        envelope = self.envelope(event_type, data, **context)
        self.memory["hidden"].append(envelope["eventId"])
        return envelope

    # --- steps ----------------------------------------------------------------------------------------
    def open_step(self, step_id: str) -> None:
        """``step_started`` for a new attempt of ``step_id``, which becomes the current step."""
        attempts = self.memory["attempts"]
        attempts[step_id] = attempts.get(step_id, 0) + 1
        self.memory["current"] = step_id
        self.emit("step_started", {"name": step_id})

    def close_step(self, data: Optional[Dict[str, Any]] = None) -> None:
        self.emit("step_completed", data)

    # --- inputs ---------------------------------------------------------------------------------------
    def ask(self, projection: Dict[str, Any], **context: Any) -> None:
        """Park on an input: an ``input_required`` envelope plus the projection at ``iac_code.input``."""
        envelope = self.envelope("input_required", dict(projection), status="input_required", **context)
        self._remember(projection, envelope)
        self.send(envelope, iac={"input": projection}, iac_set={"input": projection})

    def ask_sideband(self, projection: Dict[str, Any], **context: Any) -> None:
        """Park on a candidate permission, listed in ``pendingPermissions`` (answered with SendMessage)."""
        envelope = self.envelope("input_required", dict(projection), status="input_required", **context)
        self._remember(projection, envelope)
        pending = [projection]
        self.send(envelope, iac={"pendingPermissions": pending}, iac_set={"pendingPermissions": pending})

    def _remember(self, projection: Dict[str, Any], envelope: Envelope) -> None:
        context = {key: envelope[key] for key in ("scope", "candidate", "candidateStep") if key in envelope}
        context["stepId"] = self.memory["current"]
        self.memory["inputs"][projection["inputId"]] = context

    def received(self, pending: Dict[str, Any], data: Dict[str, Any]) -> Envelope:
        """``input_received`` in the scope (step or candidate step) of the input it answers."""
        context = dict(self.memory["inputs"].get(pending["inputId"], {}))
        step_id = context.pop("stepId", None)
        if step_id is not None:
            self.memory["current"] = step_id
        body = {"kind": pending.get("kind"), "inputId": pending.get("inputId")}
        if pending.get("toolUseId"):
            body["toolUseId"] = pending["toolUseId"]
        body.update(data)
        return self.emit("input_received", body, scope=context.get("scope", "step"),
                         candidate=context.get("candidate"), candidate_step=context.get("candidateStep"))

    def finish(self, data: Dict[str, Any]) -> None:
        self.emit("pipeline_completed", data, scope="pipeline", status="completed")


# --- the state endpoint ---------------------------------------------------------------------------------
def pipeline_state(turn_state: Dict[str, Any], after_sequence: int) -> Optional[Dict[str, Any]]:
    """The ``/iac-code/pipeline/state`` body: a snapshot folded from the log, and the events after the cursor."""
    memory = turn_state.get(STATE_KEY)
    if not memory:
        return None
    log: List[Envelope] = list(memory["log"])
    last = max((envelope["sequence"] for envelope in log), default=0)
    display, history = _fold(log, memory["steps"])
    snapshot = {"schemaVersion": SCHEMA_VERSION, "pipelineRunId": memory["runId"], "pipelineName": memory["name"],
                "taskId": memory["taskId"], "contextId": memory["contextId"], "lastSequence": last,
                "display": display, "control": {"inputHistory": history}}
    events = sorted((e for e in log if e["sequence"] > after_sequence), key=lambda e: e["sequence"])
    return {"snapshot": snapshot, "events": events}


def _fold_progress(kind: str, data: Dict[str, Any], step_id: Any, candidate_id: Any, display: Dict[str, Any],
                   by_step: Dict[str, Dict[str, Any]], candidates: Dict[str, Dict[str, Any]]) -> None:
    """The steps and candidates part of ``_fold``."""
    if kind == "step_started" and step_id in by_step:
        by_step[step_id]["status"] = "running"
        display["currentStep"] = step_id
    elif kind in ("step_completed", "step_failed") and step_id in by_step:
        by_step[step_id]["status"] = "completed" if kind == "step_completed" else "failed"
    elif kind == "candidate_started":
        candidates[candidate_id] = {"id": candidate_id, "name": data.get("name"), "status": "running"}
        display["candidates"].append(candidates[candidate_id])
    elif kind == "candidate_completed" and candidate_id in candidates:
        candidates[candidate_id].update(status="completed", totalMonthlyCost=data.get("totalMonthlyCost"))
    elif kind == "candidate_selected":
        display["selectedCandidate"] = data.get("candidateId")


def _fold(log: List[Envelope], steps: List[str]) -> Tuple[Dict[str, Any], List[Dict[str, Any]]]:
    """What a UI would show now (status, steps, candidates, pending input), and every input asked so far."""
    display: Dict[str, Any] = {"status": "running", "currentStep": None,
                               "steps": [{"id": step_id, "status": "pending"} for step_id in steps],
                               "candidates": [], "selectedCandidate": None, "pendingInput": None}
    by_step = {item["id"]: item for item in display["steps"]}
    candidates: Dict[str, Dict[str, Any]] = {}
    history: List[Dict[str, Any]] = []
    for envelope in log:
        kind, data = envelope["eventType"], envelope["data"]
        step_id = (envelope.get("step") or {}).get("id")
        candidate_id = (envelope.get("candidate") or {}).get("id")
        if kind.startswith(("step_", "candidate_")):
            _fold_progress(kind, data, step_id, candidate_id, display, by_step, candidates)
        elif kind == "input_required":
            display["pendingInput"] = {"kind": data.get("kind"), "inputId": data.get("inputId")}
            display["status"] = "waiting_input"
            history.append({"inputId": data.get("inputId"), "kind": data.get("kind"), "status": "pending"})
        elif kind == "input_received":
            display["pendingInput"] = None
            display["status"] = "running"
            for item in history:
                if item["inputId"] == data.get("inputId"):
                    item["status"] = "answered"
        elif kind == "pipeline_completed":
            display["status"] = "completed"
        elif kind == "pipeline_failed":
            display["status"] = "failed"
    return display, history

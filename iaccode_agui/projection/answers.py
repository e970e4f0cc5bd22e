"""How each validated answer reaches the runtime, and what it shows as a tool result (pure).

Every pending answer is delivered, in pending order, each as its own upstream call (the reference
implementation sends only the first).  ``answer_for`` describes one call; ``answers_for`` numbers the text
answers of one resume so their message ids stay unique (the first keeps the plain ``agui-resume-<runId>``).
"""
import json
from dataclasses import dataclass
from typing import Any, Collection, Dict, List, Optional, Tuple

from iaccode_agui.projection.interrupts import DEPLOYMENT_KIND, PERMISSION_KIND, RESOURCE_KIND, find_option

# The runtime recognises a resource-selection answer by this prefix before the JSON body.  The reference's
# constant is not known to us; this value is ours and is the one our demo runtime understands.
RESOURCE_SELECTION_QUERY_PREFIX = "[iac-code:cloud_resource_selection] "

RESOLVED = "resolved"
CANCELLED = "cancelled"

MODE_PERMISSION = "permission"   # streamed SendStreamingMessage with one data part
MODE_SIDEBAND = "sideband"       # non-streaming SendMessage with the same data part
MODE_TEXT = "text"               # streamed SendStreamingMessage with one text part
MODE_CANCEL = "cancel"           # CancelTask; nothing is sent as a message


def _compact(value: Any) -> str:
    """Insertion order kept on purpose: the runtime reads these bodies, and their field order is ours."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class UpstreamAnswer:
    """One upstream call that delivers one answer; ``parts`` are A2A message parts.

    For ``cancel`` nothing is sent as a message (the caller calls CancelTask), so ``parts`` is empty and
    ``message_id`` is ``""``.
    """
    interrupt_id: str
    mode: str
    parts: List[Dict[str, Any]]
    message_id: str


def _selected_id(payload: Dict[str, Any]) -> Any:
    return payload.get("selectedId", payload.get("selected_id"))


def _free_text(payload: Dict[str, Any]) -> Optional[str]:
    text = payload.get("freeText", payload.get("free_text"))
    return text if isinstance(text, str) else None


def _chosen_title(value: Dict[str, Any], payload: Dict[str, Any]) -> Optional[str]:
    """The text a question answer stands for: free text, else the chosen option's label/name/title/id."""
    text = _free_text(payload)
    if text is not None:
        return text
    selected = _selected_id(payload)
    if selected is None:
        return None
    found = find_option(value, selected)
    return found[0] if found else str(selected)


def _resource_answer(value: Dict[str, Any], entry: Dict[str, Any]) -> Dict[str, Any]:
    """The JSON body of a resource-selection answer; shape from the dialect doc, field order ours."""
    selector = value.get("selector") if isinstance(value.get("selector"), dict) else {}
    body: Dict[str, Any] = {
        "schemaVersion": 1,
        "kind": RESOURCE_KIND,
        "status": "selected" if entry.get("status") == RESOLVED else "canceled",
        "requestTaskId": value.get("requestTaskId"),
        "contextId": value.get("contextId"),
        "inputId": value.get("inputId"),
        "toolUseId": value.get("toolUseId"),
        "selectorId": selector.get("id"),
    }
    if body["status"] == "canceled":
        body["optionsEmpty"] = not value.get("options")
        return body
    payload = entry.get("payload") or {}
    free_text = _free_text(payload)
    if free_text is not None:
        body.update(value=free_text, label=free_text, source="free_text")
    else:
        body["value"] = payload.get("value")
        label = payload.get("label")
        body["label"] = label if isinstance(label, str) and label else payload.get("value")
        if isinstance(selector.get("source"), str):
            body["source"] = selector["source"]
    return body


def _deployment_answer(value: Dict[str, Any], payload: Dict[str, Any]) -> Dict[str, Any]:
    """Our encoding of a deployment confirmation; the reference's exact encoding is unknown to us."""
    action = payload.get("action")
    if action is None:
        found = find_option(value, _selected_id(payload))
        if found and isinstance(found[1], dict):
            action = found[1].get("action")
    overrides = payload.get("parameter_overrides")
    return {"kind": DEPLOYMENT_KIND, "action": action,
            "parameter_overrides": overrides if isinstance(overrides, dict) else {}}


def answer_for(value: Dict[str, Any], entry: Dict[str, Any], *, run_id: str, task_id: str, sideband: bool,
               text_ordinal: int = 1) -> UpstreamAnswer:
    """How one validated answer reaches the runtime.

    ``sideband`` only matters for permissions.  ``text_ordinal`` is the 1-based position of this answer
    among the text answers of the same resume; the second and later get a ``-<n>`` message-id suffix.
    """
    interrupt_id = entry["interruptId"]
    kind = value.get("kind")
    resolved = entry.get("status") == RESOLVED
    payload = entry.get("payload") if resolved and isinstance(entry.get("payload"), dict) else {}

    if kind == PERMISSION_KIND:
        input_id = value.get("inputId") or interrupt_id
        data = {
            "schemaVersion": 1,
            "kind": PERMISSION_KIND,
            "requestTaskId": task_id,
            "inputId": input_id,
            "toolUseId": str(value.get("toolUseId") or ""),
            "decision": payload.get("decision", "deny") if resolved else "deny",
        }
        message_id = ("agui-resume-%s" % input_id) if sideband else ("agui-resume-%s-%s" % (run_id, input_id))
        return UpstreamAnswer(interrupt_id, MODE_SIDEBAND if sideband else MODE_PERMISSION,
                              [{"data": data, "mediaType": "application/json"}], message_id)

    if not resolved and kind != RESOURCE_KIND:
        return UpstreamAnswer(interrupt_id, MODE_CANCEL, [], "")

    if kind == RESOURCE_KIND:
        text = RESOURCE_SELECTION_QUERY_PREFIX + _compact(_resource_answer(value, entry))
    elif kind == DEPLOYMENT_KIND:
        text = _compact(_deployment_answer(value, payload))
    else:
        text = _chosen_title(value, payload) or ""
    message_id = "agui-resume-%s" % run_id
    if text_ordinal > 1:
        message_id += "-%d" % text_ordinal
    return UpstreamAnswer(interrupt_id, MODE_TEXT, [{"text": text}], message_id)


def answers_for(pending: Dict[str, Dict[str, Any]], to_apply: List[Tuple[str, Dict[str, Any]]], *,
                run_id: str, task_id: str, sideband_ids: Collection[str] = ()) -> List[UpstreamAnswer]:
    """Every upstream call of one resume, in pending order.

    Permissions go sideband only when every permission answered here is sideband (a mixed set is
    streamed, as the reference does); text answers are numbered for unique message ids.
    """
    permission_ids = [i for i, _ in to_apply if pending[i].get("kind") == PERMISSION_KIND]
    sideband = bool(permission_ids) and all(i in sideband_ids for i in permission_ids)
    answers: List[UpstreamAnswer] = []
    ordinal = 0
    for interrupt_id, entry in to_apply:
        value = pending[interrupt_id]
        is_permission = value.get("kind") == PERMISSION_KIND
        if not is_permission:
            ordinal += 1
        answers.append(answer_for(value, entry, run_id=run_id, task_id=task_id,
                                  sideband=sideband and is_permission, text_ordinal=max(ordinal, 1)))
    return answers


def answer_text_for_tool_result(value: Dict[str, Any], entry: Dict[str, Any]) -> Optional[str]:
    """The human answer shown as the result of the question's tool call; None when there is none.

    None for permissions (the runtime reports the real tool result), for cancelled answers, and for
    inputs without a ``toolUseId`` (no tool span to close).  Resource and deployment answers show what
    the user picked, not the machine encoding sent upstream.
    """
    kind = value.get("kind")
    if kind == PERMISSION_KIND or entry.get("status") != RESOLVED:
        return None
    if not isinstance(value.get("toolUseId"), str) or not value["toolUseId"]:
        return None
    payload = entry.get("payload") if isinstance(entry.get("payload"), dict) else {}
    if kind == RESOURCE_KIND:
        free_text = _free_text(payload)
        if free_text is not None:
            return free_text
        label = payload.get("label")
        return label if isinstance(label, str) and label else payload.get("value")
    if kind == DEPLOYMENT_KIND and payload.get("action") is not None:
        return str(payload["action"])
    return _chosen_title(value, payload)

"""Resume rules: which answers to apply, whether they are valid, and how each one goes upstream (pure).

Everything that can reject a resume is decided by ``plan_resume`` before the caller sends anything, so a
rejected resume leaves every interrupt pending and retryable.

Decision 3 (ours, the reference differs): every pending answer is delivered, in pending order, each as its
own upstream call.  ``answer_for`` describes one call; ``answers_for`` numbers the text answers of one
resume so their message ids stay unique (the first keeps the reference's ``agui-resume-<runId>``).
"""
import functools
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Callable, Collection, Dict, List, Optional, Tuple

from iaccode_agui.errors import (
    MSG_DUPLICATE_RESUME_IDS,
    MSG_INCOMPLETE_RESUME,
    MSG_RESUME_ALREADY_APPLIED,
    MSG_RESUME_INVALID,
    MSG_RESUME_PAYLOAD_INVALID,
    MSG_RESUME_PAYLOAD_MISSING,
    MSG_UNKNOWN_INTERRUPT,
    AguiError,
)
from iaccode_agui.projection.interrupts import (
    DEPLOYMENT_KIND,
    PERMISSION_KIND,
    RESOURCE_KIND,
    find_option,
    response_schema,
)

# The runtime recognises a resource-selection answer by this prefix before the JSON body.  The reference's
# constant is not known to us; this value is ours and is the one our demo runtime understands.
RESOURCE_SELECTION_QUERY_PREFIX = "[iac-code:cloud_resource_selection] "

RESOLVED = "resolved"
CANCELLED = "cancelled"

MODE_PERMISSION = "permission"   # streamed SendStreamingMessage with one data part
MODE_SIDEBAND = "sideband"       # non-streaming SendMessage with the same data part
MODE_TEXT = "text"               # streamed SendStreamingMessage with one text part
MODE_CANCEL = "cancel"           # CancelTask; nothing is sent as a message

_CANCELLED_PERMISSION_PAYLOAD = {"decision": "deny"}


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def resume_digest(entry: Dict[str, Any]) -> str:
    """What makes two answers "the same" for idempotency: status and payload, never run ids or metadata."""
    body = {"status": entry.get("status"), "payload": entry.get("payload")}
    return hashlib.sha256(_canonical(body).encode("utf-8")).hexdigest()


@functools.lru_cache(maxsize=256)
def _validator(schema_json: str) -> Any:
    from jsonschema import Draft202012Validator

    return Draft202012Validator(json.loads(schema_json))


def validate_payload(value: Dict[str, Any], entry: Dict[str, Any]) -> None:
    """Raise ``RESUME_PAYLOAD_INVALID`` unless ``entry`` is an acceptable answer to ``value``."""
    status = entry.get("status")
    if status == CANCELLED:
        if value.get("kind") != PERMISSION_KIND:
            return
        payload: Any = _CANCELLED_PERMISSION_PAYLOAD
    elif status == RESOLVED:
        payload = entry.get("payload")
        if payload is None:
            raise AguiError("RESUME_PAYLOAD_INVALID", MSG_RESUME_PAYLOAD_MISSING)
    else:
        raise AguiError("RESUME_PAYLOAD_INVALID", MSG_RESUME_PAYLOAD_INVALID)
    schema = response_schema(value)
    if schema is None or not _validator(_canonical(schema)).is_valid(payload):
        raise AguiError("RESUME_PAYLOAD_INVALID", MSG_RESUME_PAYLOAD_INVALID)


@dataclass(frozen=True)
class ResumePlan:
    """The outcome of checking one resume: what to send, what was already sent, or a pure re-announce.

    ``stale`` lists pending ids that this execution already applied (a stale projection kept them
    pending); the caller drops them from its pending set.
    """
    to_apply: List[Tuple[str, Dict[str, Any]]]
    skipped: List[str]
    discovery: bool
    stale: List[str] = field(default_factory=list)


def _entry_id(entry: Any) -> str:
    if not isinstance(entry, dict) or not isinstance(entry.get("interruptId"), str) or not entry["interruptId"]:
        raise AguiError("INVALID_INPUT", MSG_RESUME_INVALID)
    return entry["interruptId"]


def plan_resume(pending: Dict[str, Dict[str, Any]], entries: List[Dict[str, Any]],
                applied: Callable[[str], Optional[str]], newly_discovered: Collection[str] = ()) -> ResumePlan:
    """Check a resume against the pending interrupts; raise ``AguiError`` or return what to send.

    Errors, in this order: malformed entry, duplicate ids, a changed answer to something already applied,
    an unknown id, a pending id left unanswered, an invalid payload.  A resume whose every entry was
    already applied with the same payload is ``RESUME_ALREADY_APPLIED`` too: nothing would reach the
    runtime, and the client must not mistake the replay for a new run.  When the only unanswered ids were
    discovered by this very resume, nothing is applied (``discovery``) and payloads are not checked yet:
    the client gets every interrupt again and answers them all together.
    """
    ids = [_entry_id(entry) for entry in entries]
    if len(set(ids)) != len(ids):
        raise AguiError("INCOMPLETE_RESUME", MSG_DUPLICATE_RESUME_IDS)
    supplied = dict(zip(ids, entries))

    stale = [interrupt_id for interrupt_id in pending if applied(interrupt_id) is not None]
    open_ids = [interrupt_id for interrupt_id in pending if interrupt_id not in stale]

    skipped: List[str] = []
    for interrupt_id, entry in supplied.items():
        if interrupt_id in open_ids:
            continue
        digest = applied(interrupt_id)
        if digest is None:
            raise AguiError("UNKNOWN_INTERRUPT", MSG_UNKNOWN_INTERRUPT)
        if digest != resume_digest(entry):
            raise AguiError("RESUME_ALREADY_APPLIED", MSG_RESUME_ALREADY_APPLIED)
        skipped.append(interrupt_id)

    missing = [interrupt_id for interrupt_id in open_ids if interrupt_id not in supplied]
    if missing:
        discovered = set(newly_discovered)
        replay_only = bool(skipped) and len(skipped) == len(supplied)
        if replay_only or all(interrupt_id in discovered for interrupt_id in missing):
            # Either the snapshot showed inputs the client never saw, or the client re-sent an answer that
            # was applied before a crash and has not seen what came next: show it every pending interrupt.
            return ResumePlan(to_apply=[], skipped=skipped, discovery=True, stale=stale)
        raise AguiError("INCOMPLETE_RESUME", MSG_INCOMPLETE_RESUME)

    to_apply = [(interrupt_id, supplied[interrupt_id]) for interrupt_id in open_ids]
    for interrupt_id, entry in to_apply:
        validate_payload(pending[interrupt_id], entry)
    if not to_apply:
        raise AguiError("RESUME_ALREADY_APPLIED", MSG_RESUME_ALREADY_APPLIED)
    return ResumePlan(to_apply=to_apply, skipped=skipped, discovery=False, stale=stale)


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
    """How one validated answer reaches the runtime (dialect §1.4).

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

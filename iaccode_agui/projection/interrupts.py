"""Input projections from the A2A runtime turned into AG-UI interrupts (pure, no I/O).

The runtime announces what it waits for in ``metadata.iac_code.input`` and ``pendingPermissions``.  What
we persist and show is an allowlisted copy, because the raw projection may carry tool inputs or secrets.
The ``responseSchema`` we publish is also the contract ``resume.validate_payload`` enforces, so the two
modules share the option rules below (standard ids, titles, deployment actions).

Choices made here:
- ``sanitize_input`` never invents ids; ``read_required_inputs`` gives an id-less projection the
  deterministic id ``input-<sha256 of its canonical JSON>``, so a re-discovered projection maps to the same
  interrupt (a random id would create a new one each time the runtime repeats itself).
- Whole floats (protobuf Struct numbers) are coerced to ints everywhere except the top-level
  ``schemaVersion``, which is kept exactly as the runtime sent it (the reference shows ``1.0``).
- An ``option-N`` fallback id is 1-based.
"""
import hashlib
from typing import Any, Dict, List, Optional, Tuple

from iaccode_agui.canonical import canonical_json, coerce_numbers
from iaccode_agui.errors import MSG_INPUT_REQUIRED, MSG_PERMISSION_REQUIRED
from iaccode_agui.state.model import iso_utc

PERMISSION_KIND = "permission"
QUESTION_KIND = "ask_user_question"
CANDIDATE_KIND = "candidate_selection"
RESOURCE_KIND = "cloud_resource_selection"
DEPLOYMENT_KIND = "deployment_confirmation"
# Plain A2A agents (not iac-code) only say "input-required" with some text: this kind stands for that.
GENERIC_KIND = "a2a_input_required"

PERMISSION_DECISIONS: Tuple[str, ...] = ("allow_once", "deny")
DEPLOYMENT_ACTIONS: Tuple[str, ...] = ("confirm", "adjust", "reselect", "cancel")
MAX_DEPLOYMENT_OPTION_ID = 200

ALLOWED_INPUT_FIELDS: Tuple[str, ...] = (
    "schemaVersion", "kind", "requestTaskId", "contextId", "inputId", "toolUseId", "toolName", "title",
    "purpose", "effect", "target", "isReadOnly", "prompt", "safeSummary", "options", "language",
    "deploymentSummary", "scope", "subPipelineId", "operation", "displayParameters", "allowFreeText",
    "freeTextPrompt", "required", "selector",
)

_FREE_TEXT_BRANCH: Dict[str, Any] = {
    "type": "object",
    "properties": {"freeText": {"type": "string", "minLength": 1}},
    "required": ["freeText"],
    "additionalProperties": False,
}


def sanitize_input(raw: Dict[str, Any]) -> Dict[str, Any]:
    """Keep only allowlisted, non-null fields: this copy is persisted and exposed, the raw one never is.

    Pure on purpose: no id is generated here (see ``derive_input_id``), so sanitising twice is stable.
    """
    clean: Dict[str, Any] = {}
    for key in ALLOWED_INPUT_FIELDS:
        if key not in raw or raw[key] is None:
            continue
        clean[key] = raw[key] if key == "schemaVersion" else coerce_numbers(raw[key])
    return clean


def derive_input_id(value: Dict[str, Any]) -> str:
    """The interrupt id: ``inputId`` when usable, else a stable hash of the sanitised projection."""
    input_id = value.get("inputId")
    if isinstance(input_id, str) and input_id:
        return input_id
    canonical = canonical_json(coerce_numbers(sanitize_input(value)))
    return "input-" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:32]


def is_sideband(value: Dict[str, Any], from_pending_permissions: bool) -> bool:
    """Candidate / sub-pipeline waits are answered with a non-streaming SendMessage, not a stream."""
    if from_pending_permissions:
        return True
    return value.get("scope") == "candidate" or isinstance(value.get("subPipelineId"), str)


def read_required_inputs(iac_code: Dict[str, Any]) -> List[Tuple[Dict[str, Any], bool]]:
    """Required inputs of one ``metadata.iac_code`` as ``(sanitised value, sideband)``, first seen first.

    A projection that appears twice (e.g. in ``input`` and ``pendingPermissions``) is kept once and is
    sideband if any occurrence is.
    """
    if not isinstance(iac_code, dict):
        return []
    sources: List[Tuple[Any, bool]] = []
    single = iac_code.get("input")
    if isinstance(single, list):
        sources.extend((item, False) for item in single)
    elif single is not None:
        sources.append((single, False))
    pending = iac_code.get("pendingPermissions")
    if isinstance(pending, list):
        sources.extend((item, True) for item in pending)

    found: List[Tuple[Dict[str, Any], bool]] = []
    index: Dict[str, int] = {}
    for raw, from_pending in sources:
        if not isinstance(raw, dict) or not raw.get("required"):
            continue
        value = sanitize_input(raw)
        value["inputId"] = derive_input_id(value)
        sideband = is_sideband(value, from_pending)
        position = index.get(value["inputId"])
        if position is None:
            index[value["inputId"]] = len(found)
            found.append((value, sideband))
        elif sideband and not found[position][1]:
            found[position] = (found[position][0], True)
    return found


def _option_id_source(option: Dict[str, Any], position: int) -> Any:
    for key in ("id", "candidate_index"):
        if option.get(key) is not None:
            return option[key]
    return position


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else str(coerce_numbers(value))


def option_entries(options: Any) -> List[Tuple[str, str, Any]]:
    """``(standard id, title, raw option)`` per usable option; the single source of option identity."""
    if not isinstance(options, list):
        return []
    entries: List[Tuple[str, str, Any]] = []
    used = set()
    for position, option in enumerate(options):
        if isinstance(option, str):
            base, title = option, option
        elif isinstance(option, dict):
            base = _as_text(_option_id_source(option, position))
            title = ""
            for key in ("label", "name", "title"):
                if option.get(key) is not None and _as_text(option[key]):
                    title = _as_text(option[key])
                    break
        elif isinstance(option, (int, float)) and not isinstance(option, bool):
            base = title = _as_text(option)
        else:
            continue
        if not base:
            base = "option-%d" % (position + 1)
        option_id, suffix = base, 2
        while option_id in used:
            option_id = "%s-%d" % (base, suffix)
            suffix += 1
        used.add(option_id)
        entries.append((option_id, title or base, option))
    return entries


def standard_options(options: Any) -> List[Dict[str, str]]:
    """Client-friendly ``[{"id","title"}]`` whatever shape the runtime used for its options."""
    return [{"id": option_id, "title": title} for option_id, title, _ in option_entries(options)]


def find_option(value: Dict[str, Any], option_id: Any) -> Optional[Tuple[str, Any]]:
    """``(title, raw option)`` of the option whose standard id is ``option_id``, if any."""
    for candidate_id, title, raw in option_entries(value.get("options")):
        if candidate_id == option_id:
            return title, raw
    return None


def _object(properties: Dict[str, Any], required: List[str]) -> Dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


def _selected_branch(option_id: str, title: str, extra: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    properties: Dict[str, Any] = {"selectedId": {"type": "string", "const": option_id, "title": title}}
    properties.update(extra or {})
    return _object(properties, ["selectedId"])


def deployment_actions(value: Dict[str, Any]) -> Optional[List[str]]:
    """The actions a deployment confirmation offers, in option order; None if the options are unusable.

    Ids must be non-empty, at most 200 characters and unique, and every option must carry a known action:
    an answer we could not map back to an action must never be offered.
    """
    options = value.get("options")
    if not isinstance(options, list) or not options:
        return None
    seen_ids = set()
    actions: List[str] = []
    for option in options:
        if not isinstance(option, dict):
            return None
        option_id = option.get("id")
        if not isinstance(option_id, str) or not option_id or len(option_id) > MAX_DEPLOYMENT_OPTION_ID:
            return None
        if option_id in seen_ids or option.get("action") not in DEPLOYMENT_ACTIONS:
            return None
        seen_ids.add(option_id)
        if option["action"] not in actions:
            actions.append(option["action"])
    return actions


def response_schema(value: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """The JSON Schema a resume payload must satisfy; None when the projection cannot be answered."""
    kind = value.get("kind")
    if kind == PERMISSION_KIND:
        return _object({"decision": {"type": "string", "enum": list(PERMISSION_DECISIONS)}}, ["decision"])
    if kind == GENERIC_KIND:
        return _object({"freeText": {"type": "string", "minLength": 1}}, ["freeText"])
    if kind == RESOURCE_KIND:
        chosen = _object({"value": {"type": "string", "minLength": 1}, "label": {"type": "string"}}, ["value"])
        return {"oneOf": [chosen, dict(_FREE_TEXT_BRANCH)]}
    if kind == DEPLOYMENT_KIND:
        actions = deployment_actions(value)
        if actions is None:
            return None
        overrides = {"parameter_overrides": {"type": "object"}}
        branches = [_selected_branch(option_id, title, overrides)
                    for option_id, title, _ in option_entries(value.get("options"))]
        branches.append(_object({"action": {"type": "string", "enum": actions}, **overrides}, ["action"]))
        return {"oneOf": branches}
    entries = option_entries(value.get("options"))
    branches = [_selected_branch(option_id, title) for option_id, title, _ in entries]
    if value.get("allowFreeText") or not entries:
        branches.append(dict(_FREE_TEXT_BRANCH))
    return {"oneOf": branches}


def _language_for(value: Dict[str, Any], language: str) -> str:
    """The input's own language wins: it is the language the runtime wrote the prompt in."""
    from iaccode_agui.i18n import normalize_tag

    own = value.get("language")
    tag = normalize_tag(own) if isinstance(own, str) else None
    return tag or language


def _text(value: Any) -> Optional[str]:
    return value if isinstance(value, str) and value.strip() else None


def interrupt_message(value: Dict[str, Any], language: str) -> str:
    """One human sentence per interrupt, with the options listed so a text-only client can still answer."""
    from iaccode_agui.i18n import translate

    target = _language_for(value, language)
    if value.get("kind") == PERMISSION_KIND:
        return _text(value.get("prompt")) or _text(value.get("title")) or translate(MSG_PERMISSION_REQUIRED, target)
    lines = [_text(value.get("prompt")) or translate(MSG_INPUT_REQUIRED, target)]
    lines.extend("- %s: %s" % (option["id"], option["title"]) for option in standard_options(value.get("options")))
    return "\n".join(lines)


def build_interrupt(value: Dict[str, Any], expires_at: Optional[str], language: str) -> Optional[Dict[str, Any]]:
    """The AG-UI ``Interrupt`` for one stored projection; None when it cannot be answered (no schema)."""
    schema = response_schema(value)
    if schema is None:
        return None
    metadata: Dict[str, Any] = {"schemaVersion": 1}
    metadata.update(sanitize_input(value))
    metadata["inputId"] = derive_input_id(value)
    metadata["standardOptions"] = standard_options(value.get("options"))
    interrupt: Dict[str, Any] = {
        "id": metadata["inputId"],
        "reason": "tool_call" if value.get("kind") == PERMISSION_KIND else "input_required",
        "message": interrupt_message(value, language),
    }
    tool_use_id = value.get("toolUseId")
    if isinstance(tool_use_id, str) and tool_use_id:
        interrupt["toolCallId"] = tool_use_id
    interrupt["responseSchema"] = schema
    if expires_at is not None:
        interrupt["expiresAt"] = expires_at
    interrupt["metadata"] = metadata
    return interrupt


def generic_input(task_id: str, prompt_text: Optional[str]) -> Dict[str, Any]:
    """The stored projection for a plain A2A agent's input-required (it has no iac-code projection)."""
    value: Dict[str, Any] = {"schemaVersion": 1, "kind": GENERIC_KIND, "requestTaskId": task_id,
                             "inputId": "input-%s" % task_id, "required": True}
    if _text(prompt_text):
        value["prompt"] = prompt_text.strip()
    return value


def build_generic_interrupt(task_id: str, prompt_text: Optional[str], language: str,
                            expires_at: Optional[str] = None) -> Dict[str, Any]:
    """A free-text interrupt for a plain A2A agent: the agent's own words, else "Input required"."""
    interrupt = build_interrupt(generic_input(task_id, prompt_text), expires_at, language)
    assert interrupt is not None  # the generic schema always exists
    return interrupt


def expires_at(now_epoch: float, ttl: float) -> Optional[str]:
    """When an interrupt made now stops being answerable; None when expiry is disabled (ttl 0).

    The spelling (ISO-8601 UTC, milliseconds, ``Z``) is the state model's, which also reads it back.
    """
    if ttl <= 0:
        return None
    return iso_utc(now_epoch + ttl)

"""The rules of a resume: which answers to apply, whether they are valid, and what counts as a replay (pure).

Everything that can reject a resume is decided by ``plan_resume`` before anything is sent, so a rejected
resume leaves every interrupt pending and retryable.
"""
import functools
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Callable, Collection, Dict, List, Optional, Tuple

from iaccode_agui import errors
from iaccode_agui.canonical import canonical_json
from iaccode_agui.errors import AguiError
from iaccode_agui.projection.answers import CANCELLED, RESOLVED
from iaccode_agui.projection.interrupts import PERMISSION_KIND, response_schema

_CANCELLED_PERMISSION_PAYLOAD = {"decision": "deny"}
MAX_SHOWN = 400     # characters of the ids or answer shapes an error message lists before it is cut


def _cut(text: str) -> str:
    return text if len(text) <= MAX_SHOWN else text[:MAX_SHOWN] + "…"


def _value_shape(schema: Dict[str, Any]) -> str:
    if "const" in schema:
        return json.dumps(schema["const"], ensure_ascii=False)
    if "enum" in schema:
        return " | ".join(json.dumps(value, ensure_ascii=False) for value in schema["enum"])
    if schema.get("type") == "string":
        return '"<text>"' if schema.get("minLength") else '"<text or empty>"'
    return "{…}" if schema.get("type") == "object" else "<any>"


def allowed_answers(schema: Dict[str, Any]) -> str:
    """The payloads a response schema accepts, one ``{"key": values}`` shape per branch (``?`` marks an
    optional key); branches that differ only in a constant are merged, and the text is cut at ``MAX_SHOWN``."""
    shapes: Dict[Tuple[Tuple[str, bool], ...], List[List[str]]] = {}
    for branch in schema.get("oneOf", [schema]):
        properties, required = branch.get("properties", {}), branch.get("required", [])
        keys = tuple((key, key in required) for key in properties)
        values = [_value_shape(properties[key]) for key, _ in keys]
        shapes.setdefault(keys, [[] for _ in keys])
        for seen, value in zip(shapes[keys], values):
            if value not in seen:
                seen.append(value)
    texts = ["{%s}" % ", ".join('"%s"%s: %s' % (key, "" if needed else "?", " | ".join(values))
                                for (key, needed), values in zip(keys, merged))
             for keys, merged in shapes.items()]
    return _cut(" | ".join(texts))


def _invalid_payload(entry: Dict[str, Any], schema: Optional[Dict[str, Any]]) -> AguiError:
    if schema is None:
        return AguiError("RESUME_PAYLOAD_INVALID", errors.MSG_RESUME_PAYLOAD_INVALID)
    return AguiError("RESUME_PAYLOAD_INVALID", errors.MSG_RESUME_PAYLOAD_ALLOWED,
                     params={"interrupt": _cut(str(entry.get("interruptId"))), "allowed": allowed_answers(schema)})


def resume_digest(entry: Dict[str, Any]) -> str:
    """What makes two answers "the same" for idempotency: status and payload, never run ids or metadata."""
    body = {"status": entry.get("status"), "payload": entry.get("payload")}
    return hashlib.sha256(canonical_json(body).encode("utf-8")).hexdigest()


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
            raise AguiError("RESUME_PAYLOAD_INVALID", errors.MSG_RESUME_PAYLOAD_MISSING)
    else:
        raise AguiError("RESUME_PAYLOAD_INVALID", errors.MSG_RESUME_PAYLOAD_INVALID)
    schema = response_schema(value)
    if schema is None or not _validator(canonical_json(schema)).is_valid(payload):
        raise _invalid_payload(entry, schema)


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
        raise AguiError("INVALID_INPUT", errors.MSG_RESUME_INVALID)
    return entry["interruptId"]


def _supplied(entries: List[Dict[str, Any]]) -> Dict[str, Dict[str, Any]]:
    ids = [_entry_id(entry) for entry in entries]
    if len(set(ids)) != len(ids):
        raise AguiError("INCOMPLETE_RESUME", errors.MSG_DUPLICATE_RESUME_IDS)
    return dict(zip(ids, entries))


def _replayed(supplied: Dict[str, Dict[str, Any]], open_ids: List[str],
              applied: Callable[[str], Optional[str]]) -> List[str]:
    """Supplied ids that are not open: each must repeat, unchanged, an answer already applied."""
    skipped: List[str] = []
    for interrupt_id, entry in supplied.items():
        if interrupt_id in open_ids:
            continue
        digest = applied(interrupt_id)
        if digest is None:
            if not open_ids:
                raise AguiError("UNKNOWN_INTERRUPT", errors.MSG_NOTHING_PENDING)
            raise AguiError("UNKNOWN_INTERRUPT", errors.MSG_UNKNOWN_INTERRUPT_PENDING,
                            params={"pending": _cut(", ".join("`%s`" % pending for pending in open_ids))})
        if digest != resume_digest(entry):
            raise AguiError("RESUME_ALREADY_APPLIED", errors.MSG_RESUME_ALREADY_APPLIED)
        skipped.append(interrupt_id)
    return skipped


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
    supplied = _supplied(entries)
    stale = [interrupt_id for interrupt_id in pending if applied(interrupt_id) is not None]
    open_ids = [interrupt_id for interrupt_id in pending if interrupt_id not in stale]
    skipped = _replayed(supplied, open_ids, applied)
    missing = [interrupt_id for interrupt_id in open_ids if interrupt_id not in supplied]
    if missing:
        replay_only = bool(skipped) and len(skipped) == len(supplied)
        if replay_only or set(missing) <= set(newly_discovered):
            # Either the snapshot showed inputs the client never saw, or the client re-sent an answer that
            # was applied before a crash and has not seen what came next: show it every pending interrupt.
            return ResumePlan(to_apply=[], skipped=skipped, discovery=True, stale=stale)
        raise AguiError("INCOMPLETE_RESUME", errors.MSG_INCOMPLETE_RESUME)
    to_apply = [(interrupt_id, supplied[interrupt_id]) for interrupt_id in open_ids]
    for interrupt_id, entry in to_apply:
        validate_payload(pending[interrupt_id], entry)
    if not to_apply:
        raise AguiError("RESUME_ALREADY_APPLIED", errors.MSG_RESUME_ALREADY_APPLIED)
    return ResumePlan(to_apply=to_apply, skipped=skipped, discovery=False, stale=stale)

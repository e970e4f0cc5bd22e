"""Incoming A2A messages: validation, the iac_code metadata, and the strict permission-answer check.

The checks are as strict as the real runtime's on purpose: the demo is where an adapter learns that it
sent a seventh key in a permission answer, not production.
"""
from typing import Any, Dict, List, Optional, Tuple

from iaccode_agui.demo import wire

_CONTENT_FIELDS = ("text", "raw", "url", "data")
PERMISSION_KEYS = frozenset(["schemaVersion", "kind", "requestTaskId", "inputId", "toolUseId", "decision"])
DECISIONS = ("allow_once", "deny")
INVALID_PERMISSION = "Invalid permission response"


def _violation(field: str, description: str) -> wire.RpcError:
    return wire.RpcError(wire.INVALID_PARAMS, "Validation failed", [(field, description)])


def validate_message(params: Dict[str, Any]) -> Dict[str, Any]:
    """The ``message`` of a send request, checked like the SDK's proto parsing would."""
    message = params.get("message")
    if not isinstance(message, dict):
        raise _violation("message", "Field is required.")
    if not isinstance(message.get("messageId"), str) or not message["messageId"]:
        raise _violation("message.messageId", "Field is required.")
    if message.get("role") != "ROLE_USER":
        raise wire.RpcError(wire.INVALID_PARAMS, "message.role: Field is required.",
                            [("message.role", "Field is required.")])
    _validate_parts(message.get("parts"))
    for name in ("taskId", "contextId"):
        if name in message and message[name] is not None and not isinstance(message[name], str):
            raise _violation("message." + name, "Must be a string.")
    metadata = message.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise _violation("message.metadata", "Must be an object.")
    if isinstance(metadata, dict) and metadata.get("iac_code") is not None \
            and not isinstance(metadata.get("iac_code"), dict):
        raise _violation("message.metadata.iac_code", "Must be an object.")
    return message


def _validate_parts(parts: Any) -> None:
    if not isinstance(parts, list) or not parts:
        raise _violation("message.parts", "Field must contain at least one element.")
    for index, part in enumerate(parts):
        if not isinstance(part, dict):
            raise _violation("message.parts[%d]" % index, "Must be an object.")
        if sum(1 for name in _CONTENT_FIELDS if name in part) > 1:
            raise wire.RpcError(wire.INVALID_PARAMS, 'Part should not have multiple "content" oneof fields',
                                [("message.parts[%d]" % index, "Only one content field is allowed.")])
        if "text" in part and not isinstance(part["text"], str):
            raise _violation("message.parts[%d].text" % index, "Must be a string.")


def iac_metadata(message: Dict[str, Any]) -> Dict[str, Any]:
    metadata = message.get("metadata") or {}
    return metadata.get("iac_code") or {}


def user_text(message: Dict[str, Any]) -> str:
    return "".join(part["text"] for part in message["parts"] if isinstance(part.get("text"), str))


def echo_user_message(message: Dict[str, Any], task_id: str, context_id: str) -> Dict[str, Any]:
    """The user message as the runtime stores it in the new task's history (numbers through Struct)."""
    echoed: Dict[str, Any] = {"messageId": message["messageId"], "contextId": context_id, "taskId": task_id,
                              "role": "ROLE_USER", "parts": [_echo_part(part) for part in message["parts"]]}
    if message.get("metadata"):
        echoed["metadata"] = wire.as_struct(message["metadata"])
    return echoed


def _echo_part(part: Dict[str, Any]) -> Dict[str, Any]:
    echoed = dict(part)
    if "data" in echoed:
        echoed["data"] = wire.as_struct(echoed["data"])
    if "metadata" in echoed:
        echoed["metadata"] = wire.as_struct(echoed["metadata"])
    return echoed


def looks_like_permission(message: Dict[str, Any]) -> bool:
    """Whether a message tries to answer a permission (so it must not be taken as chat text)."""
    return any(isinstance(part.get("data"), dict) and part["data"].get("kind") == "permission"
               for part in message["parts"])


def permission_decision(message: Dict[str, Any], task_id: str, pending: Dict[str, Any]) -> str:
    """The decision of a permission answer, which must match the pending request exactly."""
    parts: List[Dict[str, Any]] = message["parts"]
    if len(parts) != 1:
        raise wire.RpcError(wire.INVALID_PARAMS, INVALID_PERMISSION)
    part = parts[0]
    data = part.get("data")
    if set(part) != {"data", "mediaType"} or part.get("mediaType") != "application/json" \
            or not isinstance(data, dict) or set(data) != PERMISSION_KEYS:
        raise wire.RpcError(wire.INVALID_PARAMS, INVALID_PERMISSION)
    if data["kind"] != "permission" or _number(data["schemaVersion"]) != 1 or data["requestTaskId"] != task_id \
            or data["decision"] not in DECISIONS:
        raise wire.RpcError(wire.INVALID_PARAMS, INVALID_PERMISSION)
    if data["inputId"] != pending.get("inputId") or data["toolUseId"] != pending.get("toolUseId"):
        raise wire.RpcError(wire.INVALID_PARAMS, INVALID_PERMISSION)
    return data["decision"]


def _number(value: Any) -> Optional[float]:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def answered_input(iac: Dict[str, Any], message: Dict[str, Any], text: str,
                   task_id: str) -> Tuple[Optional[Dict[str, Any]], Optional[str], bool]:
    """``(pending projection, permission decision, sideband)`` that ``message`` answers.

    A task waits either on ``input`` (one projection, answered on a stream) or on ``pendingPermissions``
    (candidate permissions of a pipeline, answered sideband).  ``(None, None, False)`` means the task
    waits for nothing and the message is plain chat.  Raises ``RpcError`` for an answer that fits nothing.
    """
    single = iac.get("input")
    sideband = [entry for entry in iac.get("pendingPermissions") or [] if isinstance(entry, dict)]
    if looks_like_permission(message):
        candidates = ([(single, False)] if isinstance(single, dict) and single.get("kind") == "permission" else [])
        candidates += [(entry, True) for entry in sideband]
        wanted = _answered_input_id(message)
        chosen = next(((entry, side) for entry, side in candidates if entry.get("inputId") == wanted), None)
        if chosen is None:
            raise wire.RpcError(wire.INVALID_PARAMS, INVALID_PERMISSION)
        return chosen[0], permission_decision(message, task_id, chosen[0]), chosen[1]
    if isinstance(single, dict):
        if single.get("kind") == "permission":
            permission_decision(message, task_id, single)  # always raises: a text cannot answer it
        if not text:
            raise wire.RpcError(wire.INVALID_PARAMS, "A text answer is required.")
        return single, None, False
    if sideband:
        raise wire.RpcError(wire.INVALID_PARAMS, "Task %s is waiting for a permission answer." % task_id)
    return None, None, False


def _answered_input_id(message: Dict[str, Any]) -> Any:
    for part in message["parts"]:
        data = part.get("data")
        if isinstance(data, dict) and data.get("kind") == "permission":
            return data.get("inputId")
    return None

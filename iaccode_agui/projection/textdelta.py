"""The shape of a streamed text delta, the frame nearly every event of a run comes from.

The projection answers such a frame without its general rules once the run's own state allows it (see
``RunProjector._text_delta``); this module only recognises the shape, from the frame alone.
"""
from typing import Any, Optional, Tuple

from iaccode_agui.a2a import dialect

# A text delta, as the runtime frames it: result, status update, status, message, parts, the part, its text
# and the message id, of these types (compared in one go).
_DELTA_SHAPE = (dict, dict, dict, dict, list, dict, str, str)


def delta_fields(result: Any) -> Optional[Tuple[Any, Any, Any, Any, str, str]]:
    """(task id, context id, ``iac_code`` metadata, raw state, text, message id) of a frame shaped like a
    streamed text delta (a status update only, one non-empty text part of an agent message with an id),
    else None.  A missing key is no delta: the general path decides what such a frame means."""
    try:
        obj = result["statusUpdate"]
        status = obj["status"]
        message = status["message"]
        parts = message["parts"]
        text = parts[0]["text"]
        source_id = message["messageId"]
        shape = (result.__class__, obj.__class__, status.__class__, message.__class__, parts.__class__,
                 parts[0].__class__, text.__class__, source_id.__class__)
        fields = (obj["taskId"], obj["contextId"], obj["metadata"]["iac_code"], status["state"], text, source_id)
    except (KeyError, IndexError, TypeError):
        return None
    if shape != _DELTA_SHAPE or len(parts) != 1 or "task" in result or not text or not source_id \
            or message.get("role") not in dialect.AGENT_ROLES:
        return None
    return fields

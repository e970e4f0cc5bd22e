"""The AgentCore request shapes that ``POST /`` does not have: attach, stop and the session header.

Pure checks of parsed JSON; every refusal is an ``AguiError`` with the AgentCore code, raised before
anything runs.
"""
import dataclasses
from typing import Any, Mapping, Optional, Tuple

from iaccode_agui import errors
from iaccode_agui.web import inputs
from iaccode_agui.errors import AguiError

SESSION_HEADER = "X-AgentCore-Session-ID"
MAX_SAFE_INTEGER = 2 ** 53 - 1      # the largest integer a JavaScript client can hold exactly


@dataclasses.dataclass(frozen=True)
class AttachRequest:
    thread_id: str
    run_id: str
    after_sequence: int


def body_thread_id(body: Any) -> Optional[str]:
    thread_id = body.get("threadId") if isinstance(body, dict) else None
    return thread_id if isinstance(thread_id, str) else None


def check_session_header(headers: Mapping[str, str], body: Any) -> None:
    """An ``X-AgentCore-Session-ID`` header, when sent, names the body's thread (a router may rely on it)."""
    supplied = headers.get(SESSION_HEADER)
    if supplied is not None and supplied != body_thread_id(body):
        raise AguiError("SESSION_ID_MISMATCH")


def attach_request(body: Any) -> Optional[AttachRequest]:
    """The attach a body asks for, or None when it is an ordinary run request."""
    props = body.get("forwardedProps") if isinstance(body, dict) else None
    agentcore = props.get("agentcore") if isinstance(props, dict) else None
    if agentcore is None or (isinstance(agentcore, dict) and "attach" not in agentcore):
        return None
    inputs.check_envelope(body)
    if not isinstance(agentcore, dict):
        raise AguiError("INVALID_ATTACH")
    attach = agentcore["attach"]
    after = attach.get("afterSequence") if isinstance(attach, dict) else None
    # bool is an int in Python and 12.0 a float: neither is a sequence number a client may send.
    if type(after) is not int or not 0 <= after <= MAX_SAFE_INTEGER or set(attach) != {"afterSequence"}:
        raise AguiError("INVALID_ATTACH")
    if body["messages"]:
        raise AguiError("INVALID_ATTACH", errors.MSG_ATTACH_MESSAGES)
    return AttachRequest(thread_id=body["threadId"], run_id=body["runId"], after_sequence=after)


def stop_request(body: Any) -> Tuple[str, str]:
    """(threadId, runId) of a stop; the same identifier rules as a run request."""
    if not isinstance(body, dict):
        raise AguiError("INVALID_STOP")
    ids = (body.get("threadId"), body.get("runId"))
    if not all(inputs.is_identifier(value) for value in ids):
        raise AguiError("INVALID_STOP")
    return ids[0], ids[1]

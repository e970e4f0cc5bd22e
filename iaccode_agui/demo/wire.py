"""Byte-level shapes of the A2A 1.0 JSON-RPC/SSE wire, as the iac-code runtime writes them.

The demo keeps its own tiny framing code instead of importing ``iaccode_agui.a2a``: the runtime exists to
test that client, so sharing its encoder would let one bug hide another.
"""
import json
from datetime import datetime, timezone
from typing import Any, Dict, List, Optional, Tuple

# JSON-RPC 2.0 error codes and the A2A 1.0 task error codes the runtime answers with.
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
TASK_NOT_FOUND = -32001
TASK_NOT_CANCELABLE = -32002
UNSUPPORTED_OPERATION = -32004
VERSION_NOT_SUPPORTED = -32009

_REASONS = {
    INVALID_REQUEST: "INVALID_REQUEST",
    INVALID_PARAMS: "INVALID_PARAMS",
    TASK_NOT_FOUND: "TASK_NOT_FOUND",
    TASK_NOT_CANCELABLE: "TASK_NOT_CANCELABLE",
    UNSUPPORTED_OPERATION: "UNSUPPORTED_OPERATION",
    VERSION_NOT_SUPPORTED: "VERSION_NOT_SUPPORTED",
}

SSE_CONTENT_TYPE = "text/event-stream; charset=utf-8"
JSON_CONTENT_TYPE = "application/json"


class RpcError(Exception):
    """A JSON-RPC error raised anywhere in dispatch and rendered once, at the edge."""

    def __init__(self, code: int, message: str, violations: Optional[List[Tuple[str, str]]] = None,
                 with_info: bool = True) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.violations = violations or []
        self.with_info = with_info

    def to_error(self) -> Dict[str, Any]:
        """The ``error`` member, with ErrorInfo (and BadRequest) details the way the SDK attaches them."""
        error: Dict[str, Any] = {"code": self.code, "message": self.message}
        reason = _REASONS.get(self.code)
        if self.with_info and reason:
            data: List[Dict[str, Any]] = [{
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": reason, "domain": "a2a-protocol.org", "metadata": {},
            }]
            if self.violations:
                data.append({
                    "@type": "type.googleapis.com/google.rpc.BadRequest",
                    "fieldViolations": [{"field": f, "description": d} for f, d in self.violations],
                })
            error["data"] = data
        return error


def as_struct(value: Any) -> Any:
    """Mimic protobuf Struct: every JSON number comes back as a double (``1`` -> ``1.0``)."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return float(value)
    if isinstance(value, dict):
        return {k: as_struct(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [as_struct(v) for v in value]
    return value


def utc_timestamp() -> str:
    """Status timestamps as the SDK prints them (microseconds, ``Z``)."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def ping_comment() -> bytes:
    """The sse-starlette keepalive comment, CRLF framed."""
    return (": ping - %s\r\n\r\n" % datetime.now(timezone.utc)).encode("utf-8")


def dumps_sse(value: Any) -> str:
    """SSE payloads use Python's default separators and raw UTF-8, like the SDK server."""
    return json.dumps(value, ensure_ascii=False)


def dumps_body(value: Any) -> bytes:
    """Unary bodies are compact."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def rpc_id_json(rpc_id: Any) -> str:
    """The request id as it is echoed inside every frame (int stays int, string stays string)."""
    return json.dumps(rpc_id, ensure_ascii=False)


def data_frame(result_json: str, id_json: str) -> bytes:
    """One stream event; the result is serialized once and shared by every subscriber."""
    return ('data: {"result": %s, "id": %s, "jsonrpc": "2.0"}\r\n\r\n' % (result_json, id_json)).encode("utf-8")


def error_frame(error: Dict[str, Any], id_json: str) -> bytes:
    """A mid-stream JSON-RPC error (``event: error``), after which the stream ends."""
    return ('event: error\r\ndata: {"error": %s, "id": %s, "jsonrpc": "2.0"}\r\n\r\n'
            % (dumps_sse(error), id_json)).encode("utf-8")


def result_body(result: Any, rpc_id: Any) -> bytes:
    """A unary JSON-RPC success, keys in the SDK's order."""
    return dumps_body({"result": result, "id": rpc_id, "jsonrpc": "2.0"})


def error_body(error: Dict[str, Any], rpc_id: Any) -> bytes:
    """A unary JSON-RPC error (always HTTP 200)."""
    return dumps_body({"error": error, "id": rpc_id, "jsonrpc": "2.0"})

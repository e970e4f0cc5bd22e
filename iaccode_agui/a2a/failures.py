"""What can go wrong talking to the A2A runtime, folded into a few exception types.

The run worker decides between "the runtime said no" (``A2ARpcError``), "the runtime is not usable right
now" (``A2AUnavailable``) and the session-restore outcomes without knowing about sockets or HTTP
libraries; a JSON-RPC response and a stream's error frame fold into them by the same rules.
"""
from typing import Any, Dict


class A2AError(Exception):
    """Base class of every failure reported by this client."""


class A2AUnavailable(A2AError):
    """The runtime could not be reached or answered with something that is not usable A2A."""


class A2ATimeout(A2AUnavailable):
    """The runtime sent nothing for longer than the read timeout (a silent, possibly hung runtime)."""


class A2ARpcError(A2AError):
    """The runtime answered with a JSON-RPC error object (up front, or mid-stream)."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__("JSON-RPC error %s: %s" % (code, message))
        self.code = code
        self.message = message
        self.data = data


class SessionLost(A2AError):
    """The runtime has no trace of the iac-code session: it cannot be restored."""


class SessionBackupNotReady(A2AError):
    """The session backup is still being written; retrying later may succeed."""


def rpc_error(error: Any) -> A2AError:
    """Map a JSON-RPC ``error`` member to an exception; a shapeless one means a broken peer."""
    if isinstance(error, dict) and isinstance(error.get("code"), int) and not isinstance(error.get("code"), bool):
        message = error.get("message")
        return A2ARpcError(error["code"], message if isinstance(message, str) else "", error.get("data"))
    return A2AUnavailable("the A2A runtime sent a malformed JSON-RPC error: %r" % (error,))


def rpc_result(body: Any, rpc_id: str, what: str) -> Dict[str, Any]:
    """Extract ``result`` from a JSON-RPC response, raising the matching exception otherwise."""
    if not isinstance(body, dict):
        raise A2AUnavailable("%s: the A2A runtime sent a JSON value that is not a JSON-RPC response" % what)
    if "error" in body:
        raise rpc_error(body["error"])
    result = body.get("result")
    if not isinstance(result, dict):
        raise A2AUnavailable("%s: the JSON-RPC response has no result object" % what)
    echoed = body.get("id")
    if echoed is not None and echoed != rpc_id:
        raise A2AUnavailable("%s: the JSON-RPC response id %r does not match the request" % (what, echoed))
    return result

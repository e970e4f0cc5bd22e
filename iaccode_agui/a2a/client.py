"""Synchronous A2A 1.0 JSON-RPC client over ``requests``; the only module that opens sockets to the runtime.

Its failures are the exception types of ``iaccode_agui.a2a.failures`` (re-exported here); a streaming call
returns an ``A2AStream`` (``iaccode_agui.a2a.call``), which reads the body event by event.
"""
import json
import uuid
from typing import Any, Dict, Optional, Tuple

import requests
from requests.adapters import HTTPAdapter

from iaccode_agui.a2a.failures import (A2AError, A2ARpcError, A2ATimeout, A2AUnavailable, SessionBackupNotReady,
                                     SessionLost, rpc_result)
from iaccode_agui.a2a.call import STREAM_ERRORS, A2AStream, body_reader
from iaccode_agui.version import __version__

__all__ = [
    "A2AError",
    "A2AUnavailable",
    "A2ARpcError",
    "SessionLost",
    "SessionBackupNotReady",
    "A2ATimeout",
    "A2AClient",
    "A2AStream",
    "body_reader",
    "unreachable",
]

_JSON_TYPES = ("application/json", "application/a2a+json")


def _media_type(resp: requests.Response) -> str:
    return resp.headers.get("Content-Type", "").split(";", 1)[0].strip().lower()


def _json_of(resp: requests.Response, what: str) -> Any:
    try:
        return json.loads(resp.content)
    except STREAM_ERRORS as exc:
        # ValueError covers JSONDecodeError and UnicodeDecodeError; the rest is a body cut short.
        if isinstance(exc, ValueError) and not isinstance(exc, requests.RequestException):
            raise A2AUnavailable("%s: the A2A runtime sent a body that is not JSON" % what) from exc
        raise A2AUnavailable("%s: the A2A runtime response body broke off: %s" % (what, exc)) from exc


def _status_error(resp: requests.Response, what: str) -> A2AUnavailable:
    if resp.status_code == 401:
        return A2AUnavailable("%s: the A2A runtime answered HTTP 401 unauthorized (check the token)" % what)
    return A2AUnavailable("%s: the A2A runtime answered HTTP %d" % (what, resp.status_code))


def unreachable(exc: BaseException) -> bool:
    """The call got no HTTP answer at all (refused, timed out, cut off), as opposed to an answer we refuse."""
    return isinstance(exc.__cause__, requests.RequestException)


class A2AClient:
    """JSON-RPC and side-endpoint client bound to one runtime base URL; safe to share between threads."""

    def __init__(
        self,
        base_url: str,
        token: Optional[str] = None,
        *,
        connect_timeout: float = 5.0,
        read_timeout: float = 3600.0,
        pool_size: int = 64,
        quick_timeout: float = 30.0,
    ) -> None:
        self.base_url = base_url.rstrip("/") + "/"
        self._timeout = (connect_timeout, read_timeout)
        # Lookups and cancels answer at once on a healthy runtime; they must never hold a caller (or a
        # thread's admission lock) for the long streaming read timeout.
        self._quick = (connect_timeout, min(read_timeout, quick_timeout))
        session = requests.Session()
        # The runtime is local: proxy variables and ~/.netrc must not reroute the call or replace our
        # Authorization header, which requests does when trust_env is on.
        session.trust_env = False
        adapter = HTTPAdapter(pool_connections=4, pool_maxsize=pool_size, max_retries=0)
        session.mount("http://", adapter)
        session.mount("https://", adapter)
        session.headers["A2A-Version"] = "1.0"
        session.headers["User-Agent"] = "iaccode-agui/%s" % __version__
        if token:
            session.headers["Authorization"] = "Bearer %s" % token
        self._session = session

    # -- JSON-RPC ---------------------------------------------------------------------------------------

    def send_streaming_message(self, params: Dict[str, Any]) -> A2AStream:
        return self._stream("SendStreamingMessage", params)

    def subscribe_to_task(self, task_id: str) -> A2AStream:
        return self._stream("SubscribeToTask", {"id": task_id})

    def send_message(self, params: Dict[str, Any]) -> Dict[str, Any]:
        return self._call("SendMessage", params)

    def get_task(self, task_id: str, history_length: int = 100) -> Dict[str, Any]:
        return self._call("GetTask", {"id": task_id, "historyLength": history_length}, quick=True)

    def cancel_task(self, task_id: str) -> Dict[str, Any]:
        return self._call("CancelTask", {"id": task_id}, quick=True)

    @staticmethod
    def _envelope(method: str, params: Dict[str, Any]) -> Tuple[str, bytes]:
        rpc_id = str(uuid.uuid4())
        body = {"jsonrpc": "2.0", "id": rpc_id, "method": method, "params": params}
        return rpc_id, json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")

    def _call(self, method: str, params: Dict[str, Any], quick: bool = False) -> Dict[str, Any]:
        rpc_id, payload = self._envelope(method, params)
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        resp = self._request("POST", self.base_url, method, data=payload, headers=headers, quick=quick)
        with resp:
            if resp.status_code != 200:
                raise _status_error(resp, method)
            return rpc_result(_json_of(resp, method), rpc_id, method)

    def _stream(self, method: str, params: Dict[str, Any]) -> A2AStream:
        rpc_id, payload = self._envelope(method, params)
        headers = {
            "Content-Type": "application/json",
            "Accept": "text/event-stream",
            "Accept-Encoding": "identity",
            "Cache-Control": "no-store",
        }
        resp = self._request("POST", self.base_url, method, data=payload, headers=headers, stream=True)
        try:
            if resp.status_code != 200:
                raise _status_error(resp, method)
            media_type = _media_type(resp)
            if media_type in _JSON_TYPES:
                # Failures detected before the stream starts come back as one plain JSON-RPC response.
                result = rpc_result(_json_of(resp, method), rpc_id, method)
                resp.close()
                return A2AStream(None, rpc_id, method, preset=[result])
            if media_type != "text/event-stream":
                raise A2AUnavailable("%s: the A2A runtime answered with content type %r" % (method, media_type))
            return A2AStream(resp, rpc_id, method)
        except BaseException:
            resp.close()
            raise

    # -- side endpoints ---------------------------------------------------------------------------------

    def ensure_session_restored(self, cwd: str, session_id: str, task_id: Optional[str]) -> str:
        """Ask the runtime to bring the iac-code session back before resuming; returns its status."""
        what = "session restore"
        url = self.base_url + "iac-code/session/ensure-restored"
        body = {"cwd": cwd, "sessionId": session_id, "taskId": task_id}
        with self._request("POST", url, what, json=body, quick=True) as resp:
            if resp.status_code == 404:
                raise SessionLost("the A2A runtime no longer has session %s" % session_id)
            if resp.status_code == 409:
                payload = _json_of(resp, what)
                if _backup_not_ready(payload):
                    raise SessionBackupNotReady("the backup of session %s is not ready yet" % session_id)
                raise A2AUnavailable("%s: the A2A runtime answered HTTP 409" % what)
            if resp.status_code != 200:
                raise _status_error(resp, what)
            payload = _json_of(resp, what)
        status = payload.get("status") if isinstance(payload, dict) else None
        if status not in ("current", "restored"):
            raise A2AUnavailable("%s: unexpected restore status %r" % (what, status))
        return status

    def get_pipeline_state(self, task_id: str, after_sequence: int) -> Optional[Dict[str, Any]]:
        """Fetch pipeline events after ``after_sequence``; None when the task has no pipeline state."""
        what = "pipeline state"
        url = self.base_url + "iac-code/pipeline/state"
        params = {"taskId": task_id, "afterSequence": str(after_sequence)}
        with self._request("GET", url, what, params=params, quick=True) as resp:
            if resp.status_code == 404:
                return None
            return self._object(resp, what)

    def health(self) -> Dict[str, Any]:
        with self._request("GET", self.base_url + "health", "health", quick=True) as resp:
            return self._object(resp, "health")

    def agent_card(self) -> Dict[str, Any]:
        with self._request("GET", self.base_url + ".well-known/agent-card.json", "agent card", quick=True) as resp:
            return self._object(resp, "agent card")

    def close(self) -> None:
        self._session.close()

    def __enter__(self) -> "A2AClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- plumbing ---------------------------------------------------------------------------------------

    def _request(self, http_method: str, url: str, what: str, quick: bool = False, **kwargs: Any) -> requests.Response:
        try:
            return self._session.request(http_method, url, timeout=self._quick if quick else self._timeout, **kwargs)
        except requests.RequestException as exc:
            raise A2AUnavailable("%s: cannot reach the A2A runtime at %s: %s" % (what, self.base_url, exc)) from exc

    @staticmethod
    def _object(resp: requests.Response, what: str) -> Dict[str, Any]:
        if resp.status_code != 200:
            raise _status_error(resp, what)
        payload = _json_of(resp, what)
        if not isinstance(payload, dict):
            raise A2AUnavailable("%s: the A2A runtime sent JSON that is not an object" % what)
        return payload


def _backup_not_ready(payload: Any) -> bool:
    if not isinstance(payload, dict):
        return False
    error = payload.get("error")
    scopes = [error, payload] if isinstance(error, dict) else [payload]
    code = next((s["code"] for s in scopes if "code" in s), None)
    retryable = next((s["retryable"] for s in scopes if "retryable" in s), None)
    return code == "SESSION_BACKUP_NOT_READY" and retryable is True

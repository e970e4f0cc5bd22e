"""Synchronous A2A 1.0 JSON-RPC client over ``requests``; the only module that opens sockets to the runtime.

Everything the runtime can do wrong is folded into a few exception types so the run worker can decide
between "the runtime said no" (``A2ARpcError``), "the runtime is not usable right now"
(``A2AUnavailable``) and the session-restore outcomes, without knowing about sockets or HTTP libraries.

Streams are read with ``raw.read1()`` into our own SSE decoder rather than ``iter_lines()``: ``read1``
returns as soon as any bytes arrive whatever the body framing, so each upstream event is forwarded
immediately, and it keeps text decoding (and its ISO-8859-1 guess for ``text/event-stream``) out of
``requests``' hands.
"""
import json
import socket
import threading
import uuid
from collections import deque
from http.client import HTTPException
from typing import Any, Callable, Deque, Dict, Iterator, List, Optional, Tuple

import requests
from requests.adapters import HTTPAdapter
from urllib3.exceptions import HTTPError as Urllib3HTTPError
from urllib3.exceptions import ReadTimeoutError

from iaccode_agui.version import __version__
from iaccode_agui.a2a.sse import SSEDecodeError, SSEDecoder

__all__ = [
    "A2AError",
    "A2AUnavailable",
    "A2ARpcError",
    "SessionLost",
    "SessionBackupNotReady",
    "A2AClient",
    "A2AStream",
]

_READ_SIZE = 65536
_loads = json.JSONDecoder().decode   # json.loads minus its per-call type checks and keyword handling
# A stream the caller stops reading is drained this far (bytes, seconds) so that its connection can go back
# to the pool: the end of the body normally arrives with the last event, so this almost never waits.
_DRAIN_BYTES = 65536
_DRAIN_SECONDS = 0.02
_JSON_TYPES = ("application/json", "application/a2a+json")
# Everything a broken or timed-out body read can raise, across requests/urllib3/http.client versions.
_STREAM_ERRORS = (requests.RequestException, Urllib3HTTPError, HTTPException, OSError, ValueError)


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


def _rpc_error(error: Any) -> A2AError:
    """Map a JSON-RPC ``error`` member to an exception; a shapeless one means a broken peer."""
    if isinstance(error, dict) and isinstance(error.get("code"), int) and not isinstance(error.get("code"), bool):
        message = error.get("message")
        return A2ARpcError(error["code"], message if isinstance(message, str) else "", error.get("data"))
    return A2AUnavailable("the A2A runtime sent a malformed JSON-RPC error: %r" % (error,))


def _rpc_result(body: Any, rpc_id: str, what: str) -> Dict[str, Any]:
    """Extract ``result`` from a JSON-RPC response, raising the matching exception otherwise."""
    if not isinstance(body, dict):
        raise A2AUnavailable("%s: the A2A runtime sent a JSON value that is not a JSON-RPC response" % what)
    if "error" in body:
        raise _rpc_error(body["error"])
    result = body.get("result")
    if not isinstance(result, dict):
        raise A2AUnavailable("%s: the JSON-RPC response has no result object" % what)
    echoed = body.get("id")
    if echoed is not None and echoed != rpc_id:
        raise A2AUnavailable("%s: the JSON-RPC response id %r does not match the request" % (what, echoed))
    return result


def _media_type(resp: requests.Response) -> str:
    return resp.headers.get("Content-Type", "").split(";", 1)[0].strip().lower()


def _json_of(resp: requests.Response, what: str) -> Any:
    try:
        return json.loads(resp.content)
    except _STREAM_ERRORS as exc:
        # ValueError covers JSONDecodeError and UnicodeDecodeError; the rest is a body cut short.
        if isinstance(exc, ValueError) and not isinstance(exc, requests.RequestException):
            raise A2AUnavailable("%s: the A2A runtime sent a body that is not JSON" % what) from exc
        raise A2AUnavailable("%s: the A2A runtime response body broke off: %s" % (what, exc)) from exc


def _status_error(resp: requests.Response, what: str) -> A2AUnavailable:
    if resp.status_code == 401:
        return A2AUnavailable("%s: the A2A runtime answered HTTP 401 unauthorized (check the token)" % what)
    return A2AUnavailable("%s: the A2A runtime answered HTTP %d" % (what, resp.status_code))


def _shutdown_socket(resp: Any) -> bool:
    """Shut down the socket under a streaming response so a read blocked in another thread returns now.

    ``Response.close()`` from another thread does not wake a blocked read (and races with it); a socket
    shutdown does.  The http.client response is consulted first because it drops its socket reference as
    soon as the body ends, *before* urllib3 hands the connection back to the pool, so a stream that has
    already ended never shuts down a pooled connection another request may be using.  Returns whether a
    socket was shut down; never raises.
    """
    raw = getattr(resp, "raw", resp)
    try:
        fp_resp = getattr(raw, "_fp", None)  # http.client.HTTPResponse (urllib3 1.26 and 2.x)
        if fp_resp is not None and hasattr(fp_resp, "fp"):
            buffered = fp_resp.fp
            if buffered is None:
                return False  # body already ended; the connection may belong to the pool now
            sock = getattr(getattr(buffered, "raw", None), "_sock", None)
            if sock is None:
                return False
            return _shutdown(sock)
        conn = getattr(raw, "_connection", None) or getattr(raw, "connection", None)
        sock = getattr(conn, "sock", None)
        if sock is not None:
            return _shutdown(sock)
        public = getattr(raw, "shutdown", None)  # urllib3 >= 2.3
        if callable(public):
            public()
            return True
    except Exception:  # private attributes may change shape; the public API raises once released
        return False
    return False


def _shutdown(sock: Any) -> bool:
    try:
        sock.shutdown(socket.SHUT_RDWR)
        return True
    except (OSError, AttributeError):
        return False


def body_reader(raw: Any, size: int) -> Callable[[], bytes]:
    """Return a callable giving the next bytes of the body as soon as any arrive (b"" at the end).

    ``iter_content`` would hold bytes back until EOF on a close-delimited (HTTP/1.0) body; this never does.
    """
    read1 = getattr(raw, "read1", None)
    if callable(read1):
        return lambda: read1(size, decode_content=True)
    # urllib3 < 2 has no read1: iterate chunks of a chunked body, or read1 the http.client response.
    if getattr(raw, "chunked", False) and raw.supports_chunked_reads():
        chunks = raw.read_chunked(size, decode_content=True)
        return lambda: next(chunks, b"")
    return lambda: raw._fp.read1(size)


class A2AStream:
    """Iterator over the ``result`` objects of one streaming JSON-RPC call.

    After ``abort()`` (from any thread) iteration simply stops: the caller asked for it, so the broken read
    it causes is not an error; ``aborted`` tells the two endings apart.  Any other break raises
    ``A2AUnavailable``; an error frame raises ``A2ARpcError``; both end the stream.
    """

    def __init__(
        self,
        resp: Optional[requests.Response],
        rpc_id: str,
        method: str,
        *,
        preset: Optional[List[Dict[str, Any]]] = None,
        read_size: int = _READ_SIZE,
    ) -> None:
        self._resp = resp
        self._rpc_id = rpc_id
        self._method = method
        self._lock = threading.Lock()
        self._aborted = False
        self._done = resp is None
        self._results: Deque[Dict[str, Any]] = deque(preset or ())
        self._events: Deque[Any] = deque()
        self._decoder = SSEDecoder()
        self._read = body_reader(resp.raw, read_size) if resp is not None else None
        self.frames = len(self._results)

    @property
    def aborted(self) -> bool:
        return self._aborted

    @property
    def comments(self) -> int:
        """Keep-alive comments seen so far (the runtime pings every 15 s)."""
        return self._decoder.comments

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        return self

    def __enter__(self) -> "A2AStream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __next__(self) -> Dict[str, Any]:
        while True:
            if self._aborted:
                self._finish()
                raise StopIteration
            if self._results:
                return self._results.popleft()
            if self._events:
                result = self._frame(self._events.popleft())
                if result is not None:
                    return result
                continue
            if self._done:
                raise StopIteration
            self._fill()

    def _fill(self) -> None:
        try:
            chunk = self._read()
        except _STREAM_ERRORS as exc:
            self._finish()
            if self._aborted:
                raise StopIteration from None
            if isinstance(exc, (ReadTimeoutError, socket.timeout, requests.Timeout)) or "timed out" in str(exc):
                raise A2ATimeout("%s: read timeout while streaming from the A2A runtime" % self._method) from exc
            raise A2AUnavailable("%s: the A2A stream broke off: %s" % (self._method, exc)) from exc
        if not chunk:
            truncated = self._decoder.has_pending
            self._decoder.close()
            self._finish()
            if truncated and not self._aborted:
                raise A2AUnavailable("%s: the A2A stream ended in the middle of an event" % self._method)
            raise StopIteration
        try:
            self._events.extend(self._decoder.feed(chunk))
        except SSEDecodeError as exc:
            self._finish()
            raise A2AUnavailable("%s: the A2A stream is not valid SSE: %s" % (self._method, exc)) from exc

    def _frame(self, event: Any) -> Optional[Dict[str, Any]]:
        """Turn one SSE event into a result, raising (and ending the stream) on an error frame."""
        if event.event not in ("message", "error"):
            return None  # not an A2A frame type; SSE consumers ignore event types they do not listen to
        self.frames += 1
        try:
            body = _loads(event.data)
        except ValueError as exc:
            self._finish()
            raise A2AUnavailable("%s: the A2A stream sent a frame that is not JSON" % self._method) from exc
        if body.__class__ is dict and event.event == "message" and "error" not in body:
            # The common frame, checked inline: a result object with our id (or none).
            result = body.get("result")
            echoed = body.get("id")
            if result.__class__ is dict and (echoed is None or echoed == self._rpc_id):
                return result
        if event.event == "error" or (isinstance(body, dict) and "error" in body):
            self._finish()
            error = body.get("error") if isinstance(body, dict) else None
            if error is None:
                raise A2AUnavailable("%s: the A2A stream sent an error event without an error" % self._method)
            raise _rpc_error(error)
        try:
            return _rpc_result(body, self._rpc_id, self._method)
        except A2AError:
            self._finish()
            raise

    def abort(self) -> None:
        """Stop the stream from any thread, waking a read blocked in the owner thread.

        Only the socket is touched here; releasing the response stays with the owner thread, because
        closing it concurrently with a read corrupts urllib3's state.  The upstream task keeps running:
        cancelling it is a separate ``CancelTask``.
        """
        with self._lock:  # serialised with _finish(), so the socket is never shut down after release
            if self._aborted:
                return
            self._aborted = True
            if not self._done and self._resp is not None:
                _shutdown_socket(self._resp)

    def close(self) -> None:
        """Release the response (owner thread only; use ``abort()`` from other threads).

        A stream read up to its last event but not to the end of its body still holds a connection that
        could serve the next call: when the rest of the body is already there (or arrives within a few
        milliseconds), it is read and the connection goes back to the pool instead of being closed, which
        spares the next run a TCP connect and the runtime an accept.
        """
        if not self._done and not self._aborted and self._resp is not None:
            self._drain_for_reuse(self._resp)
        self._finish()

    def _drain_for_reuse(self, resp: requests.Response) -> None:
        raw = resp.raw
        body = getattr(raw, "_fp", None)               # the http.client response under urllib3's
        sock = getattr(getattr(getattr(body, "fp", None), "raw", None), "_sock", None)
        read1 = getattr(body, "read1", None)
        if sock is None or not callable(read1) or not callable(getattr(raw, "release_conn", None)) \
                or getattr(body, "will_close", True):
            return                                       # the server closes this connection anyway
        try:
            previous = sock.gettimeout()
            sock.settimeout(_DRAIN_SECONDS)
            try:
                left = _DRAIN_BYTES
                while left > 0 and not body.isclosed():
                    chunk = read1(min(left, _READ_SIZE))
                    if not chunk:
                        break
                    left -= len(chunk)
            finally:
                sock.settimeout(previous)
        except (OSError, HTTPException, ValueError):
            return                                       # not at its end in time: it will be closed
        with self._lock:
            if body.isclosed() and not self._aborted:
                raw.release_conn()                       # the body ended cleanly; the socket is reusable

    def _finish(self) -> None:
        with self._lock:
            self._done = True
            resp, self._resp = self._resp, None
        self._events.clear()
        if resp is not None:
            try:
                resp.close()
            except Exception:  # pragma: no cover - closing a broken response must not mask the real error
                pass


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
            return _rpc_result(_json_of(resp, method), rpc_id, method)

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
                result = _rpc_result(_json_of(resp, method), rpc_id, method)
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

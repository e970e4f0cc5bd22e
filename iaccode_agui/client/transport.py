"""HTTP and SSE for the terminal client, with no knowledge of how anything is shown.

Kept apart from rendering so the loop can be driven by another transport in tests and so the wire rules
(headers, the JSON error envelope, SSE framing) live in one place.  Errors before the SSE body starts come
back as ``HttpError`` carrying the adapter's ``{"error": {"code", "message"}}``; a body that ends before a
terminal event raises ``StreamBroken`` so the caller can tell a cut connection from a finished run.
"""
import json
from typing import Any, Dict, Iterator, Optional, Tuple
from urllib.parse import quote

import requests
import urllib3

from iaccode_agui.a2a.client import body_reader
from iaccode_agui.sse.codec import SSEDecodeError, SSEDecoder

CANCEL_PATH = "extensions/iac-code/v1/executions/%s/cancel"
# Every request of a thread names it in this header: a load balancer in front of several hosts hashes it
# so the thread's runs, resumes, re-attaches and cancels all reach the host that holds its state.  A thread
# id outside printable ASCII cannot travel in a header unchanged (HTTP carries header bytes as Latin-1 and
# the adapter compares the header with the body's id), so such a thread goes without it.
SESSION_HEADER = "X-AgentCore-Session-ID"


def session_header(thread_id: Any) -> Dict[str, str]:
    """The session header naming ``thread_id``, or nothing when the id cannot be sent as a header."""
    if isinstance(thread_id, str) and thread_id and all(" " <= c <= "~" for c in thread_id):
        return {SESSION_HEADER: thread_id}
    return {}
TERMINAL_EVENTS = ("RUN_FINISHED", "RUN_ERROR")
DEFAULT_TIMEOUT: Tuple[float, float] = (10.0, 120.0)

Event = Dict[str, Any]


class HttpError(Exception):
    """A request the adapter (or the network) refused before any event was streamed."""

    def __init__(self, code: str, message: str, status: Optional[int] = None) -> None:
        super().__init__("%s: %s" % (code, message))
        self.code = code
        self.message = message
        self.status = status


class StreamBroken(Exception):
    """The event stream stopped before RUN_FINISHED or RUN_ERROR arrived."""


def _error_from(response: requests.Response) -> HttpError:
    try:
        body = response.json()
        error = body["error"]
        return HttpError(str(error["code"]), str(error.get("message", "")), response.status_code)
    except (ValueError, KeyError, TypeError):
        text = (response.text or response.reason or "").strip()
        return HttpError("HTTP_%d" % response.status_code, text[:500], response.status_code)


def _chunks(response: requests.Response) -> Iterator[bytes]:
    """The body's bytes as they arrive, also from servers that close-delimit the body (no chunking)."""
    read = body_reader(response.raw, 65536)
    while True:
        chunk = read()
        if not chunk:
            return
        yield chunk


def _drain(chunks: Iterator[bytes]) -> None:
    """Read the body to its end after the terminal event.

    The adapter releases the thread only once it has finished the response, so a client that hangs up
    right after RUN_FINISHED and resumes at once could meet ``THREAD_BUSY``.  The body ends right after the
    terminal event, so this costs one read.
    """
    try:
        for _ in chunks:
            pass
    except (requests.RequestException, urllib3.exceptions.HTTPError, OSError):
        pass


class RunStream:
    """The events of one run, decoded lazily as the bytes arrive.

    Iteration stops after the terminal event; ``close()`` drops the connection at any time, which is how a
    client leaves a run (the adapter treats the disconnect like its own cancel).  Iteration never closes
    the connection itself, not even on KeyboardInterrupt: the owner decides, so it can call the cancel
    extension while still attached.
    """

    def __init__(self, response: requests.Response) -> None:
        self.response = response
        self.last_event_id: Optional[str] = None
        self.finished = False

    def __iter__(self) -> Iterator[Event]:
        decoder = SSEDecoder()
        chunks = _chunks(self.response)
        try:
            for chunk in chunks:
                for item in decoder.feed(chunk):
                    self.last_event_id = item.id
                    try:
                        event = json.loads(item.data)
                    except ValueError:
                        raise StreamBroken("the adapter sent an event that is not JSON") from None
                    if not isinstance(event, dict):
                        continue
                    if event.get("type") in TERMINAL_EVENTS:
                        self.finished = True
                        _drain(chunks)
                        yield event
                        return
                    yield event
        except SSEDecodeError as exc:
            raise StreamBroken(str(exc)) from None
        except (requests.RequestException, urllib3.exceptions.HTTPError, OSError) as exc:
            raise StreamBroken("the connection broke: %s" % exc) from None
        raise StreamBroken("the stream ended before the run finished")

    def close(self) -> None:
        self.response.close()


class AguiTransport:
    """Talks to one adapter: starts runs (SSE) and calls the cancel extension (JSON)."""

    def __init__(self, base_url: str, token: Optional[str] = None, language: Optional[str] = None,
                 timeout: Tuple[float, float] = DEFAULT_TIMEOUT,
                 session: Optional[requests.Session] = None) -> None:
        self.base_url = base_url if base_url.endswith("/") else base_url + "/"
        self.token = token
        self.language = language
        self.timeout = timeout
        self.session = session or requests.Session()

    def _headers(self, accept: str) -> Dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": accept}
        if self.token:
            headers["Authorization"] = "Bearer " + self.token
        if self.language:
            headers["Accept-Language"] = self.language
        return headers

    def _post(self, path: str, body: Dict[str, Any], accept: str, stream: bool,
              extra_headers: Optional[Dict[str, str]] = None) -> requests.Response:
        url = self.base_url + path
        headers = self._headers(accept)
        headers.update(session_header(body.get("threadId")))
        headers.update(extra_headers or {})
        try:
            return self.session.post(url, data=json.dumps(body), headers=headers, stream=stream,
                                     timeout=self.timeout)
        except requests.Timeout:
            raise HttpError("TIMEOUT", "no answer from %s" % url) from None
        except requests.RequestException as exc:
            raise HttpError("CONNECTION_FAILED", "cannot reach %s (%s)" % (url, type(exc).__name__)) from None

    def start_run(self, body: Dict[str, Any], last_event_id: Optional[str] = None) -> RunStream:
        """POST a RunAgentInput; the returned stream is already past the HTTP status.

        With ``last_event_id`` the identical request re-attaches to the live run and replays what came
        after that event (the adapter's reconnect extension).
        """
        extra = {"Last-Event-ID": last_event_id} if last_event_id is not None else None
        response = self._post("", body, "text/event-stream", stream=True, extra_headers=extra)
        content_type = response.headers.get("Content-Type", "")
        if response.status_code != 200 or not content_type.startswith("text/event-stream"):
            try:
                raise _error_from(response)
            finally:
                response.close()
        return RunStream(response)

    def cancel(self, execution_id: str, thread_id: str, ros_invocation_id: str) -> Dict[str, Any]:
        """Ask the adapter to cancel an execution; returns its JSON answer (``status`` is the news)."""
        response = self._post(CANCEL_PATH % quote(execution_id, safe=""),
                              {"threadId": thread_id, "rosInvocationId": ros_invocation_id},
                              "application/json", stream=False)
        if response.status_code != 200:
            raise _error_from(response)
        try:
            answer = response.json()
        except ValueError:
            raise HttpError("HTTP_%d" % response.status_code, "the cancel answer is not JSON") from None
        return answer if isinstance(answer, dict) else {}

    def history(self, thread_id: str) -> Dict[str, Any]:
        """The thread's stored conversation (``GET /threads/{threadId}/messages``)."""
        url = self.base_url + "threads/%s/messages" % quote(thread_id, safe="")
        headers = self._headers("application/json")
        del headers["Content-Type"]
        headers.update(session_header(thread_id))
        try:
            response = self.session.get(url, headers=headers, timeout=self.timeout)
        except requests.Timeout:
            raise HttpError("TIMEOUT", "no answer from %s" % url) from None
        except requests.RequestException as exc:
            raise HttpError("CONNECTION_FAILED", "cannot reach %s (%s)" % (url, type(exc).__name__)) from None
        if response.status_code != 200:
            raise _error_from(response)
        try:
            answer = response.json()
        except ValueError:
            raise HttpError("HTTP_200", "the history answer is not JSON") from None
        return answer if isinstance(answer, dict) else {}

    def close(self) -> None:
        self.session.close()

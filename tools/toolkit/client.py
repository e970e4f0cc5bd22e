"""The benchmark client: one streamed POST read with http.client and timed per chunk.

The client does the same, minimal work on every path (direct A2A, raw relay, adapter, peer): it splits the
bytes at the last complete SSE event, pulls the runtime's ``~<i>@<ns>`` stamps out with one regex and notes
a few markers.  It never JSON-decodes, so the client costs the same whichever server is being measured.
All times are ``time.time_ns()``, the clock the runtime stamps deltas with.
"""
import http.client
import json
import re
import time
import uuid
from typing import Callable, Dict, List, Optional, Sequence, Tuple
from urllib.parse import urlsplit

STAMP = re.compile(rb"~(\d+)@(\d+) ")
HEARTBEAT = b": heartbeat"


class StreamResult:
    """What one stream looked like from the client's side."""

    def __init__(self) -> None:
        self.status = 0
        self.error: Optional[str] = None
        self.t_sent = 0
        self.t_first_frame: Optional[int] = None
        self.t_run_started: Optional[int] = None
        self.t_first_delta: Optional[int] = None
        self.t_last_delta: Optional[int] = None
        self.t_end = 0
        self.deltas = 0
        self.bytes = 0
        self.latencies_ns: List[int] = []
        self.heartbeats = 0
        self.marks: List[Tuple[int, bool]] = []  # (arrival, is_heartbeat) per chunk, when traced
        self.finished = False
        self.run_error = False
        self.client_cpu = 0.0  # seconds of the reading thread, to show the client is not the bottleneck

    @property
    def ok(self) -> bool:
        return self.error is None and self.status == 200 and self.finished and not self.run_error

    def seconds_to(self, stamp: Optional[int]) -> Optional[float]:
        return None if stamp is None else (stamp - self.t_sent) / 1e9

    def heartbeat_lateness(self, interval: float, since: int = 0) -> Optional[float]:
        """Worst delay of a heartbeat past ``interval`` after the previous write (None: no heartbeat);
        ``since`` (time_ns) counts only gaps that start then or later."""
        worst: Optional[float] = None
        for (before, _), (after, is_heartbeat) in zip(self.marks, self.marks[1:]):
            if is_heartbeat and before >= since:
                late = (after - before) / 1e9 - interval
                worst = late if worst is None else max(worst, late)
        return worst


def post_stream(url: str, body: bytes, headers: Dict[str, str], *, trace: bool = False,
                finished_marker: bytes = b'"RUN_FINISHED"', timeout: float = 120.0,
                on_first_data: Optional[Callable[[int], None]] = None) -> StreamResult:
    """POST ``body`` and read the SSE response to its end, timing every chunk on arrival."""
    parts = urlsplit(url)
    result = StreamResult()
    cpu_started = time.thread_time()
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    try:
        result.t_sent = time.time_ns()
        conn.request("POST", parts.path or "/", body=body, headers=headers)
        resp = conn.getresponse()
        result.status = resp.status
        if resp.status != 200:
            result.error = "HTTP %d: %s" % (resp.status, resp.read(300).decode("utf-8", "replace"))
            return result
        _read_events(resp, result, trace, finished_marker, on_first_data)
    except (OSError, http.client.HTTPException) as exc:
        result.error = "%s: %s" % (type(exc).__name__, exc)
    finally:
        result.t_end = time.time_ns()
        result.client_cpu = time.thread_time() - cpu_started
        conn.close()
    return result


def _read_events(resp: http.client.HTTPResponse, result: StreamResult, trace: bool, finished_marker: bytes,
                 on_first_data: Optional[Callable[[int], None]]) -> None:
    reader = EventReader(result, trace, finished_marker, on_first_data)
    read1 = resp.read1
    while True:
        chunk = read1(65536)
        now = time.time_ns()
        if not chunk:
            break
        reader.feed(chunk, now)


class EventReader:
    """Splits a response body into complete SSE events and notes stamps, heartbeats and markers.

    Both clients (one blocking connection, many connections on one selector) feed it the body bytes as they
    arrive with their arrival time, so every path is timed by the same code.
    """

    def __init__(self, result: StreamResult, trace: bool, finished_marker: bytes,
                 on_first_data: Optional[Callable[[int], None]]) -> None:
        self.result = result
        self.trace = trace
        self.finished_marker = finished_marker
        self.on_first_data = on_first_data
        self.pending = b""
        self.last_index = -1

    def feed(self, chunk: bytes, now: int) -> None:
        result = self.result
        result.bytes += len(chunk)
        data = self.pending + chunk
        end = _complete_end(data)
        if end < 0:
            self.pending = data
            return
        done, self.pending = data[:end], data[end:]
        beats = done.count(HEARTBEAT)
        if beats:
            result.heartbeats += beats
        has_data = b"data:" in done
        if self.trace:
            result.marks.append((now, not has_data and beats > 0))
        if has_data:
            self._data(done, now)

    def _data(self, done: bytes, now: int) -> None:
        result = self.result
        if result.t_first_frame is None:
            result.t_first_frame = now
            if self.on_first_data is not None:
                self.on_first_data(now)
        if result.t_run_started is None and b'"RUN_STARTED"' in done:
            result.t_run_started = now
        latencies = result.latencies_ns
        for match in STAMP.finditer(done):
            index = int(match.group(1))
            if index > self.last_index:  # a frame may repeat a delta (e.g. an aggregate); count each once
                self.last_index = index
                latencies.append(now - int(match.group(2)))
                result.deltas += 1
                result.t_last_delta = now
                if result.t_first_delta is None:
                    result.t_first_delta = now
        if self.finished_marker in done:
            result.finished = True
        if b'"RUN_ERROR"' in done:
            result.run_error = True


def _complete_end(data: bytes) -> int:
    """Offset just past the last complete SSE event (LF or CRLF blank line), or -1."""
    lf = data.rfind(b"\n\n")
    crlf = data.rfind(b"\r\n\r\n")
    if crlf >= 0 and crlf + 4 > lf + 2:
        return crlf + 4
    return lf + 2 if lf >= 0 else -1


# ---- request bodies --------------------------------------------------------------------------------------

def agui_request(text: str, cwd: str) -> Tuple[bytes, Dict[str, str]]:
    """A fresh-thread AG-UI run (a new thread each time, so every run starts a NEW upstream task)."""
    tag = uuid.uuid4().hex[:12]
    body = {"threadId": "bench-" + tag, "runId": "run-" + tag, "state": {},
            "messages": [{"id": "m-" + tag, "role": "user", "content": text}], "tools": [], "context": [],
            "forwardedProps": {"iacCode": {"schemaVersion": 1, "rosInvocationId": "inv-" + tag, "cwd": cwd}}}
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    return json.dumps(body).encode("utf-8"), headers


def a2a_request(text: str, cwd: str, token: str) -> Tuple[bytes, Dict[str, str]]:
    """SendStreamingMessage for a NEW task, as the adapter would send it."""
    tag = uuid.uuid4().hex[:12]
    message = {"messageId": "m-" + tag, "role": "ROLE_USER", "parts": [{"text": text}], "contextId": "ctx-" + tag,
               "metadata": {"iac_code": {"cwd": cwd, "preferredLanguage": "en", "cleanupOnly": False}}}
    body = {"jsonrpc": "2.0", "id": tag, "method": "SendStreamingMessage",
            "params": {"message": message, "configuration": {"acceptedOutputModes": ["text/plain"]}}}
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream", "A2A-Version": "1.0",
               "Authorization": "Bearer " + token}
    return json.dumps(body).encode("utf-8"), headers


# The direct and relay paths see A2A frames: the end of a turn is the INPUT_REQUIRED status frame.
A2A_FINISHED = b"TASK_STATE_INPUT_REQUIRED"


def percentile(values: Sequence[float], fraction: float) -> Optional[float]:
    if not values:
        return None
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, int(round(fraction * (len(ordered) - 1)))))
    return ordered[index]

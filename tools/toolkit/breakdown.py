"""Where the milliseconds of one tiny run go: a per-phase timeline measured inside a traced adapter.

The adapter runs in this process (the same code the CLI serves, on waitress) against the bench's runtime,
and a handful of its functions are wrapped with timers for the duration of the measurement: request
parsing, schema validation, the admission transaction and the state journal's append and shared
fdatasync inside it (with any fsync, on the request path or in the journal's checkpoint thread), the agent card, the
upstream connect, the upstream call and its first frame, and the publication of ``RUN_STARTED``.  The
client (in this process too, so one clock serves both sides) notes when the first byte, ``RUN_STARTED``
and the first ``TEXT_MESSAGE_CONTENT`` arrive.  Each phase is reported as its start offset from the POST
and its duration, as medians over warm runs, plus the first (cold) run on its own.
"""
import http.client
import os
import statistics
import stat
import tempfile
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple
from urllib.parse import urlsplit

Span = Tuple[str, int, int]


class Tracer:
    """Wraps callables with timers; ``spans`` collects (label, start_ns, end_ns) until ``undo()``."""

    def __init__(self) -> None:
        self.spans: List[Span] = []
        self._undo: List[Tuple[Any, str, Any]] = []

    def wrap(self, owner: Any, attr: str, label: str,
             classify: Optional[Callable[..., str]] = None) -> None:
        original = owner.__dict__[attr] if isinstance(owner, type) else getattr(owner, attr)
        func = original.__func__ if isinstance(original, staticmethod) else original
        spans = self.spans
        clock = time.perf_counter_ns

        def traced(*args: Any, **kwargs: Any) -> Any:
            name = classify(*args) if classify is not None else label
            started = clock()
            try:
                return func(*args, **kwargs)
            finally:
                spans.append((name, started, clock()))

        setattr(owner, attr, staticmethod(traced) if isinstance(original, staticmethod) else traced)
        self._undo.append((owner, attr, original))

    def undo(self) -> None:
        while self._undo:
            owner, attr, original = self._undo.pop()
            setattr(owner, attr, original)


def _fsync_kind(fd: int) -> str:
    if threading.current_thread().name == "state-journal":
        return "checkpoint fsync (off the request path)"
    try:
        return "fsync (directory)" if stat.S_ISDIR(os.fstat(fd).st_mode) else "fsync (file)"
    except OSError:
        return "fsync (file)"


def _fdatasync_kind(fd: int) -> str:
    if threading.current_thread().name == "state-journal":
        return "checkpoint fsync (off the request path)"
    return "journal fdatasync"


def _install(tracer: Tracer) -> None:
    import urllib3.connection

    from iaccode_agui.web import app as app_module
    from iaccode_agui.web import inputs
    from iaccode_agui.a2a.client import A2AClient, A2AStream
    from iaccode_agui.sse.channel import RunChannel
    from iaccode_agui.runs.manager import RunManager
    from iaccode_agui.runs.worker import RunWorker
    from iaccode_agui.state.journal import Journal
    from iaccode_agui.state.store import ThreadStore

    tracer.wrap(app_module.AguiApp, "__call__", "app called")
    tracer.wrap(app_module.AguiApp, "_read_json", "body read + JSON parse")
    tracer.wrap(inputs, "parse_run_request", "schema + cwd checks")
    tracer.wrap(RunManager, "_admit", "admission transaction")
    tracer.wrap(ThreadStore, "_write_atomic", "  state file write")
    tracer.wrap(Journal, "commit", "    journal append + group sync")
    tracer.wrap(os, "fdatasync", "fdatasync", classify=_fdatasync_kind)
    tracer.wrap(os, "fsync", "fsync", classify=_fsync_kind)
    tracer.wrap(A2AClient, "agent_card", "agent card GET")
    tracer.wrap(RunWorker, "start", "worker thread start")
    tracer.wrap(RunChannel, "publish", "event published")
    tracer.wrap(urllib3.connection.HTTPConnection, "connect", "upstream TCP connect")
    tracer.wrap(A2AClient, "_stream", "upstream POST -> response headers")
    tracer.wrap(A2AStream, "__next__", "upstream frame read")


class _Arrivals:
    def __init__(self) -> None:
        self.sent = 0
        self.first_byte: Optional[int] = None
        self.run_started: Optional[int] = None
        self.first_content: Optional[int] = None
        self.finished = False


def _post(url: str, body: bytes, headers: Dict[str, str]) -> _Arrivals:
    parts = urlsplit(url)
    out = _Arrivals()
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        out.sent = time.perf_counter_ns()
        conn.request("POST", "/", body=body, headers=headers)
        resp = conn.getresponse()
        seen = b""
        while True:
            chunk = resp.read1(65536)
            now = time.perf_counter_ns()
            if not chunk:
                break
            if out.first_byte is None:
                out.first_byte = now
            seen += chunk
            if out.run_started is None and b'"RUN_STARTED"' in seen:
                out.run_started = now
            if out.first_content is None and b'"TEXT_MESSAGE_CONTENT"' in seen:
                out.first_content = now
            if b'"RUN_FINISHED"' in seen or b'"RUN_ERROR"' in seen:
                out.finished = b'"RUN_FINISHED"' in seen
                break
            seen = seen[-64:]
    finally:
        conn.close()
    return out


def _timeline(spans: List[Span], arrivals: _Arrivals) -> Dict[str, Tuple[float, float]]:
    """Label -> (start ms after the POST, total duration ms) for one run; repeated labels add up."""
    base = arrivals.sent
    out: Dict[str, Tuple[float, float]] = {}
    firsts: Dict[str, int] = {}
    for label, start, end in spans:
        if label == "event published":
            label = "RUN_STARTED published" if "RUN_STARTED published" not in firsts else "later events published"
        if label == "upstream frame read":
            label = "first upstream frame" if "first upstream frame" not in firsts else "later upstream frames"
        firsts.setdefault(label, start)
        offset, total = out.get(label, ((start - base) / 1e6, 0.0))
        out[label] = (offset, total + (end - start) / 1e6)
    for label, stamp in (("first byte at the client", arrivals.first_byte),
                         ("RUN_STARTED at the client", arrivals.run_started),
                         ("first TEXT_MESSAGE_CONTENT at the client", arrivals.first_content)):
        if stamp is not None:
            out[label] = ((stamp - base) / 1e6, 0.0)
    return out


ORDER = ("app called", "body read + JSON parse", "schema + cwd checks", "agent card GET", "admission transaction",
         "  state file write", "    journal append + group sync", "journal fdatasync", "fsync (file)",
         "fsync (directory)", "checkpoint fsync (off the request path)", "worker thread start", "RUN_STARTED published",
         "first byte at the client", "RUN_STARTED at the client", "upstream TCP connect",
         "upstream POST -> response headers", "first upstream frame", "first TEXT_MESSAGE_CONTENT at the client")


def _bare_app(environ: Dict[str, Any], start_response: Callable[..., Any]) -> Any:
    """The least a WSGI app can do for one run: read the body, stream three SSE frames as three chunks."""
    length = int(environ.get("CONTENT_LENGTH") or 0)
    environ["wsgi.input"].read(length)
    start_response("200 OK", [("Content-Type", "text/event-stream; charset=utf-8"), ("Cache-Control", "no-cache")])
    return iter([b'data: {"type":"RUN_STARTED"}\n\n', b'data: {"type":"TEXT_MESSAGE_CONTENT"}\n\n',
                 b'data: {"type":"RUN_FINISHED"}\n\n'])


def bare_server(runs: int, body: bytes, headers: Dict[str, str]) -> Dict[str, Any]:
    """The server's own share: a trivial app on the same ``ServerThread`` settings, the same client and body.

    Its first byte is what waitress and loopback cost before any code of ours runs (request parsing, the
    hand-over to a worker thread, the response head and the first chunk); its second chunk is the cost of
    one more chunk written at once.  Medians over ``runs`` warm runs, after one cold one.
    """
    from iaccode_agui.server.serving import ServerThread

    server = ServerThread(_bare_app, "127.0.0.1", 0, threads=8)
    first, second = [], []
    try:
        for index in range(runs + 1):
            arrivals = _post(server.url, body, headers)
            if index and arrivals.first_byte is not None and arrivals.first_content is not None:
                first.append((arrivals.first_byte - arrivals.sent) / 1e6)
                second.append((arrivals.first_content - arrivals.sent) / 1e6)
    finally:
        server.stop()
    return {"runs": len(first), "first_byte_ms": statistics.median(first) if first else None,
            "second_chunk_ms": statistics.median(second) if second else None}


def measure(runtime_url: str, token: str, cwd: str, runs: int = 15, text: str = "firehose 1",
            extra_settings: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """One cold run, then ``runs`` warm ones, each on a fresh thread; medians of the warm timelines."""
    from . import client
    from iaccode_agui.web.app import AguiApp
    from iaccode_agui.config import Settings
    from iaccode_agui.server.serving import ServerThread

    state = tempfile.mkdtemp(prefix="bench-breakdown-")
    settings = Settings(a2a_url=runtime_url, a2a_token=token, state_dir=state,
                        allowed_cwds=(os.path.dirname(cwd),), **(extra_settings or {}))
    tracer = Tracer()
    app = AguiApp(settings)
    server = ServerThread(app, "127.0.0.1", 0, threads=8)
    timelines: List[Dict[str, Tuple[float, float]]] = []
    counts: Dict[str, List[int]] = {}
    failures = 0
    try:
        _install(tracer)
        for _ in range(runs + 1):
            del tracer.spans[:]
            body, headers = client.agui_request(text, cwd)
            arrivals = _post(server.url, body, headers)
            time.sleep(0.02)  # the worker's end-of-run writes land outside the next run's timeline
            if not arrivals.finished:
                failures += 1
            spans = list(tracer.spans)
            timelines.append(_timeline(spans, arrivals))
            for label in ("journal fdatasync", "fsync (file)", "fsync (directory)", "upstream TCP connect"):
                before_first = [s for s in spans if s[0] == label and (arrivals.run_started is None
                                                                       or s[2] <= arrivals.run_started)]
                counts.setdefault(label + " before RUN_STARTED", []).append(len(before_first))
                counts.setdefault(label + " per run", []).append(sum(1 for s in spans if s[0] == label))
    finally:
        tracer.undo()
        server.stop()
        app.close(2.0)
    cold, warm = timelines[0], timelines[1:]
    rows = []
    for label in ORDER:
        offsets = [t[label][0] for t in warm if label in t]
        durations = [t[label][1] for t in warm if label in t]
        rows.append({"phase": label, "cold_at_ms": cold.get(label, (None, None))[0],
                     "cold_ms": cold.get(label, (None, None))[1],
                     "at_ms": statistics.median(offsets) if offsets else None,
                     "ms": statistics.median(durations) if durations else None,
                     "runs_with": len(offsets)})
    body, headers = client.agui_request(text, cwd)
    return {"runs": runs, "text": text, "failures": failures, "phases": rows, "bare": bare_server(runs, body, headers),
            "counts": {k: statistics.median(v[1:]) if len(v) > 1 else v[0] for k, v in counts.items()}}

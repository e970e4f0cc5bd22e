"""The benchmark's measurements, one function per section of the table.

Each function takes the running services and returns plain dicts of figures (medians over repetitions),
so ``bench.py`` only orchestrates and prints.  Paths are measured interleaved (direct, relay, adapter,
peer, then again) so a noisy neighbour hurts every path alike rather than one of them.
"""
import http.client
import os
import statistics
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional, Tuple
from urllib.parse import urlsplit

from . import client
from . import many as bench_many
from . import floor as bench_floor
from . import procs
from .procs import Service

Request = Tuple[bytes, Dict[str, str]]


class Path:
    """One way of reading the firehose: where to POST, what to send, what ends it, whose CPU to charge."""

    def __init__(self, name: str, url: str, make: Callable[[str], Request], finished: bytes,
                 service: Optional[Service]) -> None:
        self.name = name
        self.url = url
        self.make = make
        self.finished = finished
        self.service = service

    def run(self, text: str, **kwargs: Any) -> client.StreamResult:
        body, headers = self.make(text)
        return client.post_stream(self.url, body, headers, finished_marker=self.finished, **kwargs)


def build_paths(runtime: Service, relay: Service, adapter: Service, peer: Optional[Service], token: str,
                cwd: str) -> List[Path]:
    a2a = lambda text: client.a2a_request(text, cwd, token)  # noqa: E731
    agui = lambda text: client.agui_request(text, cwd)  # noqa: E731
    paths = [Path("direct", runtime.url, a2a, client.A2A_FINISHED, runtime),
             Path("relay", relay.url, a2a, client.A2A_FINISHED, relay),
             Path("adapter", adapter.url, agui, b'"RUN_FINISHED"', adapter)]
    if peer is not None:
        paths.append(Path("peer", peer.url, agui, b'"RUN_FINISHED"', peer))
    return paths


def _median(values: List[float]) -> Optional[float]:
    clean = [v for v in values if v is not None]
    return statistics.median(clean) if clean else None


def _ms(ns: Optional[float]) -> Optional[float]:
    return None if ns is None else ns / 1e6


# ---- 1 + 2: throughput and latency under load --------------------------------------------------------

def throughput(paths: List[Path], runtime: Service, deltas: int, reps: int,
               between: Optional[Callable[[], None]] = None) -> Dict[str, Dict[str, Any]]:
    """Firehose runs, paths interleaved; ``between`` (the floor's passes) runs before each rep and after the last."""
    for path in paths:  # warm-up: imports, pools, first-request caches
        path.run("firehose 200")
    raw: Dict[str, List[Dict[str, float]]] = {p.name: [] for p in paths}
    errors: Dict[str, List[str]] = {p.name: [] for p in paths}
    for _ in range(reps):
        if between is not None:
            between()
        for path in paths:
            server_cpu = path.service.cpu() if path.service is not runtime else 0.0
            runtime_cpu = runtime.cpu()
            result = path.run("firehose %d" % deltas)
            server_cpu = (path.service.cpu() - server_cpu) if path.service is not runtime else 0.0
            runtime_cpu = runtime.cpu() - runtime_cpu
            if result.deltas != deltas or not result.finished or result.error:
                errors[path.name].append(result.error or "%d/%d deltas, finished=%s"
                                         % (result.deltas, deltas, result.finished))
                continue
            seconds = (result.t_last_delta - result.t_sent) / 1e9
            raw[path.name].append({
                "events_per_s": deltas / seconds, "seconds": seconds,
                "p50_ms": _ms(client.percentile(result.latencies_ns, 0.5)),
                "p99_ms": _ms(client.percentile(result.latencies_ns, 0.99)),
                "server_us_per_event": server_cpu / deltas * 1e6,
                "runtime_us_per_event": runtime_cpu / deltas * 1e6,
                "client_us_per_event": result.client_cpu / deltas * 1e6,
                "bytes_per_event": result.bytes / deltas})
    if between is not None:
        between()
    out: Dict[str, Dict[str, Any]] = {}
    for name, runs in raw.items():
        figures = {key: _median([run[key] for run in runs]) for key in (runs[0] if runs else {})}
        figures["server_us_runs"] = [run["server_us_per_event"] for run in runs]
        figures["runs"] = len(runs)
        figures["errors"] = errors[name]
        out[name] = figures
    return out


# ---- 2 + 3: unloaded latency and time to first event ------------------------------------------------

def latency(paths: List[Path], text: str, runs: int, reps: int) -> Dict[str, Dict[str, Any]]:
    """Small runs one at a time: stamp-to-arrival without queueing, and time to the first events."""
    per_rep: Dict[str, List[Dict[str, float]]] = {p.name: [] for p in paths}
    cpu: Dict[str, List[float]] = {p.name: [] for p in paths}
    firsts: Dict[str, List[Tuple[Optional[float], Optional[float]]]] = {p.name: [] for p in paths}
    errors: Dict[str, int] = {p.name: 0 for p in paths}
    for _ in range(reps):
        samples: Dict[str, List[int]] = {p.name: [] for p in paths}
        for _ in range(runs):
            for path in paths:
                before = path.service.cpu() if path.service is not None else 0.0
                result = path.run(text)
                if path.service is not None:
                    cpu[path.name].append(path.service.cpu() - before)
                if not result.finished or result.error:
                    errors[path.name] += 1
                    continue
                samples[path.name].extend(result.latencies_ns)
                firsts[path.name].append((result.seconds_to(result.t_run_started or result.t_first_frame),
                                          result.seconds_to(result.t_first_delta)))
        for name, values in samples.items():
            per_rep[name].append({"p50_ms": _ms(client.percentile(values, 0.5)),
                                  "p99_ms": _ms(client.percentile(values, 0.99))})
    out: Dict[str, Dict[str, Any]] = {}
    for name, reps_ in per_rep.items():
        out[name] = {
            "p50_ms": _median([r["p50_ms"] for r in reps_]), "p99_ms": _median([r["p99_ms"] for r in reps_]),
            "first_event_ms": _median([f[0] * 1000 for f in firsts[name] if f[0] is not None]),
            "first_delta_ms": _median([f[1] * 1000 for f in firsts[name] if f[1] is not None]),
            "server_cpu_ms_per_run": sum(cpu[name]) / len(cpu[name]) * 1000 if cpu[name] else None,
            "runs": len(firsts[name]), "errors": errors[name]}
    return out


# ---- 4: concurrency -----------------------------------------------------------------------------------

# The adapter's warning when its stall sweep closes responses (serving.py): counted per concurrency run,
# so an IncompleteRead in the table can be told apart from a crash or a client-side timeout.
STALL_WARNING = "(--stall-timeout)"


def idle_for(streams: int, minimum: float) -> float:
    """Silence long enough that every stream is open before the first one ends (the ramp grows with N),
    so the CPU window really sees nothing but heartbeats."""
    return max(minimum, 1.5 + streams / 50.0)


def concurrency(path: Path, cwd: str, streams: int, idle: float, heartbeat: Optional[float],
                timeout: Optional[float] = None) -> Dict[str, Any]:
    """``streams`` runs at once, each silent for ``idle`` s upstream; CPU is read while all are idle.

    ``timeout`` is the client's socket read timeout: a stream silent that long (no heartbeat, no event)
    counts as an error rather than stalling the bench."""
    timeout = timeout if timeout is not None else idle + 30.0
    service = path.service
    assert service is not None
    requests = [path.make("sleep %g" % idle) for _ in range(streams)]
    runner = bench_many.Concurrent(path.url, requests, trace=True, timeout=timeout, finished_marker=path.finished)
    idle_cpu: Optional[float] = None
    idle_window = 0.0
    all_open: Optional[int] = None
    stalled_before = service.log_count(STALL_WARNING)
    started = time.monotonic()
    with procs.Sampler(service.pid) as sampler:
        runner.start()
        if runner.all_started.wait(timeout):
            ramp = time.monotonic() - started
            all_open = time.time_ns()
            window_start = time.time_ns() + 100_000_000
            window_end = (runner.earliest_data or 0) + int((idle - 0.15) * 1e9)
            if window_end - window_start >= 300_000_000:
                time.sleep(max(0.0, (window_start - time.time_ns()) / 1e9))
                cpu0 = service.cpu()
                time.sleep(max(0.0, (window_end - time.time_ns()) / 1e9))
                idle_cpu = service.cpu() - cpu0
                idle_window = (window_end - window_start) / 1e9
        else:
            ramp = None
        results = runner.join()
    failures = [r for r in results if not r.ok]
    lateness = [r.heartbeat_lateness(heartbeat) for r in results] if heartbeat else []
    lateness_known = [v for v in lateness if v is not None]
    # The same, counting only silences that began once every stream was open: what an open stream sees
    # when the server is not also admitting a thousand others.
    steady = [r.heartbeat_lateness(heartbeat, all_open) for r in results] if heartbeat and all_open else []
    steady_known = [v for v in steady if v is not None]
    durations = [(r.t_end - r.t_sent) / 1e9 for r in results if r.t_sent]
    return {
        "streams": streams, "completed": sum(1 for r in results if r.ok), "errors": len(failures),
        "error_samples": sorted({(r.error or ("RUN_ERROR" if r.run_error else "unfinished"))[:160]
                                 for r in failures})[:3],
        "ramp_s": ramp, "heartbeats": sum(r.heartbeats for r in results),
        "streams_with_heartbeat": sum(1 for r in results if r.heartbeats), "heartbeat_interval_s": heartbeat,
        "stream_s_p50": client.percentile(durations, 0.5), "stream_s_max": max(durations) if durations else None,
        "heartbeat_late_max_ms": max(lateness_known) * 1000 if lateness_known else None,
        "heartbeat_late_p99_ms": (client.percentile(lateness_known, 0.99) or 0) * 1000 if lateness_known else None,
        "heartbeat_late_p50_ms": (client.percentile(lateness_known, 0.5) or 0) * 1000 if lateness_known else None,
        "steady_late_p99_ms": (client.percentile(steady_known, 0.99) or 0) * 1000 if steady_known else None,
        "peak_rss_mb": sampler.peak_rss_kb / 1024.0, "peak_threads": sampler.peak_threads,
        "idle_cpu_s": idle_cpu, "idle_window_s": idle_window, "idle_s": idle,
        "idle_cpu_pct": (idle_cpu / idle_window * 100) if idle_cpu is not None and idle_window else None,
        "client_cpu_s": runner.client_cpu, "wall_s": time.monotonic() - started, "stall_closes": service.log_count(STALL_WARNING) - stalled_before}


def merge_concurrency(runs: List[Dict[str, Any]]) -> Dict[str, Any]:
    """Repetitions of one concurrency level: errors add up, peaks take the max, the rest the median."""
    merged: Dict[str, Any] = {"reps": len(runs), "streams": runs[0]["streams"], "idle_s": runs[0]["idle_s"],
                              "heartbeat_interval_s": runs[0]["heartbeat_interval_s"]}
    merged["completed"] = sum(r["completed"] for r in runs)
    merged["errors"] = sum(r["errors"] for r in runs)
    merged["error_samples"] = sorted({s for r in runs for s in r["error_samples"]})[:3]
    merged["crash"] = next((r["crash"] for r in runs if r.get("crash")), None)
    merged["stall_closes"] = sum(r.get("stall_closes", 0) for r in runs)
    merged["runtime_busy_at_start"] = max(r.get("runtime_busy_at_start", 0) for r in runs)
    for key in ("peak_rss_mb", "peak_threads", "heartbeat_late_max_ms", "stream_s_max"):
        values = [r[key] for r in runs if r[key] is not None]
        merged[key] = max(values) if values else None
    for key in ("steady_late_p99_ms", "client_cpu_s", "ramp_s", "heartbeats", "streams_with_heartbeat", "heartbeat_late_p99_ms", "heartbeat_late_p50_ms", "idle_cpu_s",
                "idle_window_s", "idle_cpu_pct", "wall_s", "stream_s_p50"):
        merged[key] = _median([r.get(key) for r in runs])
    return merged


# ---- 5: start-up and idle -----------------------------------------------------------------------------

def startup(start: Callable[[], Service], reps: int, settle: float = 1.0, idle_window: float = 2.0) -> Dict[str, Any]:
    """Fresh processes: seconds to a 200 from /health, then RSS, threads and CPU while nothing happens."""
    seconds, rss, threads, idle = [], [], [], []
    for _ in range(reps):
        service = start()
        try:
            seconds.append(service.startup_seconds)
            time.sleep(settle)
            cpu0 = service.cpu()
            time.sleep(idle_window)
            idle.append(service.cpu() - cpu0)
            found = service.status()
            rss.append(found.get("rss_kb", 0) / 1024.0)
            threads.append(found.get("threads", 0))
        finally:
            service.stop()
    return {"startup_s": _median(seconds), "startup_min_s": min(seconds), "idle_rss_mb": _median(rss),
            "idle_threads": _median(threads), "idle_cpu_s": _median(idle), "idle_window_s": idle_window}


# ---- 6: floor -----------------------------------------------------------------------------------------

def capture(url: str, request: Request) -> bytes:
    """The raw bytes of one stream, read in-process (the floor's input)."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=120)
    try:
        conn.request("POST", parts.path or "/", body=request[0], headers=request[1])
        return conn.getresponse().read()
    finally:
        conn.close()


def floor_frames(runtime: Service, token: str, cwd: str, deltas: int) -> List[bytes]:
    """The frames of one firehose as the runtime sends them: the floor's input."""
    return bench_floor.split_frames(capture(runtime.url, client.a2a_request("firehose %d" % deltas, cwd, token)))


def floor(runtime: Service, token: str, cwd: str, deltas: int, reps: int) -> Dict[str, float]:
    frames = floor_frames(runtime, token, cwd, deltas)
    return bench_floor.summary([bench_floor.one_pass(frames) for _ in range(max(3, reps))], len(frames))


def workspace() -> str:
    """A run cwd the adapter (and peer) accept by default: a directory under the temp dir."""
    return tempfile.mkdtemp(prefix="bench-cwd-", dir=os.path.realpath(tempfile.gettempdir()))

"""Profile the adapter's hot path: one firehose run through an in-process adapter, under cProfile.

    python tools/bench.py --section profile [--deltas 20000] [--top 25] [--sort tottime]

cProfile follows one thread, so each thread that works on the run gets its own profiler (the run worker:
socket read, SSE decode, JSON decode, projection, encoding; the waitress task: the SSE body and its
writes; the waitress loop: socket sends) and the statistics are merged at the end.  The runtime runs in
its own process, as in ``bench.py``, so its work never shows up here.  Profiling slows Python code down
several times: read the shares, not the absolute times.

Then, without a profiler, the thread CPU time per upstream frame of the floor (``toolkit/floor.py``) and of the
adapter's own stages on the same captured stream, in one process, interleaved pass by pass: SSE and
frame decoding alone, plus the projection, plus the worker, the channel and the run log.  Thread CPU
time is the figure a shared machine disturbs least: it counts only what this thread ran.
"""
import argparse
import cProfile
import io
import json
import os
import pstats
import statistics
import sys
import tempfile
import threading
import time
import uuid
from typing import Any, Callable, Dict, List, Optional

from . import client
from . import phases
from . import procs


class _Profilers:
    def __init__(self) -> None:
        self.done: List[cProfile.Profile] = []
        self._lock = threading.Lock()
        self._undo: List[Any] = []

    def around(self, owner: Any, attr: str) -> None:
        """Run every call of ``owner.attr`` (a thread's main function) under its own profiler."""
        original = getattr(owner, attr)
        profilers = self

        def profiled(*args: Any, **kwargs: Any) -> Any:
            prof = cProfile.Profile()
            prof.enable()
            try:
                return original(*args, **kwargs)
            finally:
                prof.disable()
                with profilers._lock:
                    profilers.done.append(prof)

        setattr(owner, attr, profiled)
        self._undo.append((owner, attr, original))

    def undo(self) -> None:
        while self._undo:
            owner, attr, original = self._undo.pop()
            setattr(owner, attr, original)

    def stats(self) -> pstats.Stats:
        stream = io.StringIO()
        stats = pstats.Stats(self.done[0], stream=stream)
        for prof in self.done[1:]:
            stats.add(prof)
        return stats


def _profiled(runtime_url: str, token: str, cwd: str, warm: List[str], texts: List[str],
              check: Callable[[Any], None]) -> pstats.Stats:
    """An in-process adapter: ``warm`` runs unprofiled, then ``texts`` under the worker and waitress profilers."""
    from waitress.task import WSGITask

    from iaccode_agui.web.app import AguiApp
    from iaccode_agui.config import Settings
    from iaccode_agui.runs.worker import RunWorker
    from iaccode_agui.server.serving import ServerThread

    state = tempfile.mkdtemp(prefix="bench-profile-")
    settings = Settings(a2a_url=runtime_url, a2a_token=token, state_dir=state, allowed_cwds=(os.path.dirname(cwd),))
    app = AguiApp(settings)
    profilers = _Profilers()
    server = ServerThread(app, "127.0.0.1", 0, threads=8)
    try:
        for text in warm:
            client.post_stream(server.url, *client.agui_request(text, cwd))
        profilers.around(RunWorker, "_main")
        profilers.around(WSGITask, "service")
        for text in texts:
            check(client.post_stream(server.url, *client.agui_request(text, cwd)))
            time.sleep(0.02 if len(texts) > 1 else 0.2)   # the run's end-of-run writes land before the next
    finally:
        profilers.undo()
        server.stop()
        app.close(2.0)
    return profilers.stats()


def profile(runtime_url: str, token: str, cwd: str, deltas: int) -> pstats.Stats:
    def check(result: Any) -> None:
        if result.deltas != deltas or not result.finished:
            raise RuntimeError("profiled run incomplete: %d/%d deltas, error %s" % (result.deltas, deltas, result.error))
    return _profiled(runtime_url, token, cwd, ["firehose 200"], ["firehose %d" % deltas], check)


def profile_tiny(runtime_url: str, token: str, cwd: str, runs: int) -> pstats.Stats:
    """``runs`` tiny runs (one delta each), each on a fresh thread: where admission and a run's close go.

    The request's own thread (parse, schema, admission, run log, the first writes) is the waitress task;
    the run's thread does the upstream call and the end-of-run writes.
    """
    def check(result: Any) -> None:
        if not result.finished:
            raise RuntimeError("profiled run incomplete: error %s" % (result.error,))
    return _profiled(runtime_url, token, cwd, ["firehose 1"] * 3, ["firehose 1"] * runs, check)


def top(stats: pstats.Stats, count: int, sort: str) -> str:
    stream = io.StringIO()
    stats.stream = stream
    stats.sort_stats(sort).print_stats(count)
    lines = stream.getvalue().splitlines()
    start = next((i for i, line in enumerate(lines) if "ncalls" in line), 0)
    total = next((line.strip() for line in lines if "function calls" in line), "")
    return "\n".join([total] + lines[start:start + count + 1])



# ---- in-process CPU per event: the floor and the adapter's own stages on the same bytes ----------------

class _Body:
    """The raw side of a streamed response, fed from captured bytes (what ``A2AStream`` reads)."""

    def __init__(self, data: bytes, size: int) -> None:
        self._data = data
        self._size = size
        self._at = 0
        self._fp = None

    def read1(self, size: int, decode_content: bool = True) -> bytes:
        chunk = self._data[self._at:self._at + min(size, self._size)]
        self._at += len(chunk)
        return chunk


class _Response:
    def __init__(self, data: bytes, size: int) -> None:
        self.raw = _Body(data, size)

    def close(self) -> None:
        pass


class _Recorder:
    """The state writes a run makes (task and session binding): not per event, so not measured here."""

    thread_id = "bench-thread"

    def bind(self, **kwargs: Any) -> None:
        pass

    def release(self, **kwargs: Any) -> None:
        pass


def _context_id(raw: bytes) -> str:
    import re
    found = re.search(rb'"contextId"\s*:\s*"([^"]+)"', raw)
    return found.group(1).decode("utf-8") if found else "ctx"


def _stages(raw: bytes, rpc_id: str, read_size: int, log_dir: str) -> Dict[str, Callable[[], int]]:
    """One callable per stage; each makes one pass over the captured stream and returns its frame count."""
    from iaccode_agui.a2a.call import A2AStream
    from iaccode_agui.projection.context import RunContext
    from iaccode_agui.projection.projector import RunProjector
    from iaccode_agui.sse.channel import RunChannel
    from iaccode_agui.runlog.logfiles import RunLogStore
    from iaccode_agui.runs.worker import RunWorker
    from . import floor as bench_floor

    context_id = _context_id(raw)
    frames = bench_floor.split_frames(raw)
    logs = RunLogStore(log_dir, ttl=3600.0, max_bytes=0, fsync=False)
    counter = [0]

    def stream() -> A2AStream:
        return A2AStream(_Response(raw, read_size), rpc_id, "SendStreamingMessage", read_size=read_size)

    def projector() -> RunProjector:
        counter[0] += 1
        ctx = RunContext(thread_id="bench-thread", run_id="run-%d" % counter[0], execution_id="exec",
                         context_id=context_id, ros_invocation_id="inv")
        return RunProjector(ctx)

    def floor() -> int:
        return bench_floor.decode_encode(frames)

    def decode() -> int:
        return sum(1 for _ in stream())

    def project() -> int:
        proj = projector()
        count = 0
        for result in stream():
            proj.feed(result)
            count += 1
        return count

    def adapter(with_log: bool = True) -> int:
        proj = projector()
        run_log = logs.create("bench-thread", proj.ctx.run_id,
                              {"threadId": "bench-thread", "runId": proj.ctx.run_id}) if with_log else None
        channel = RunChannel(max_buffer=1000, run_log=run_log)
        worker = RunWorker(client=None, projector=proj, channel=channel, recorder=_Recorder(),  # type: ignore
                           driver=lambda w: None, on_end=lambda w: None)
        worker.consume(stream)
        channel.close("success")
        if run_log is not None:
            os.unlink(run_log.path)
        return channel.events_published

    return {"floor": floor, "decode": decode, "decode+projection": project, "adapter in-process": adapter,
            "  same, no run log": lambda: adapter(with_log=False)}


def cpu_per_event(raw: bytes, rpc_id: str, passes: int, read_size: int) -> Dict[str, List[float]]:
    """Thread CPU µs per upstream frame of each stage, one list of ``passes`` values per stage.

    The stages run interleaved (floor, decode, ..., then again), so a noisy neighbour slows them alike.
    """
    log_dir = tempfile.mkdtemp(prefix="bench-profile-logs-")
    stages = _stages(raw, rpc_id, read_size, log_dir)
    frames = stages["decode"]()
    for run in stages.values():     # warm-up: imports, caches
        run()
    out: Dict[str, List[float]] = {name: [] for name in stages}
    for _ in range(passes):
        for name, run in stages.items():
            started = time.thread_time()
            run()
            out[name].append((time.thread_time() - started) / frames * 1e6)
    return out


def render_cpu(figures: Dict[str, List[float]], frames: int) -> str:
    floor = statistics.median(figures["floor"])
    lines = ["in-process thread CPU per upstream frame (%d frames, %d passes each, interleaved): "
             "median [min - max] us, ratio to the floor's median" % (frames, len(figures["floor"]))]
    for name, values in figures.items():
        median = statistics.median(values)
        lines.append("  %-20s %6.2f [%6.2f - %6.2f]  %.2fx" % (name, median, min(values), max(values), median / floor))
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python tools/bench.py --section profile", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--deltas", type=int, default=20000)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--sort", default="tottime", help="pstats sort key (tottime, cumulative, ...)")
    parser.add_argument("--cpu", type=int, default=7, metavar="PASSES",
                        help="passes of the in-process CPU measurement per stage (0: skip it)")
    parser.add_argument("--no-profile", action="store_true", help="skip the cProfile of the server")
    parser.add_argument("--tiny", type=int, default=0, metavar="RUNS",
                        help="instead: profile RUNS tiny runs (admission and a run's close, not events)")
    parser.add_argument("--read-size", type=int, default=65536, help="bytes per upstream read in-process")
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    token = "bench-" + uuid.uuid4().hex[:12]
    runtime = procs.start_runtime(token, threads=16)
    cwd = tempfile.mkdtemp(prefix="bench-cwd-", dir=os.path.realpath(tempfile.gettempdir()))
    try:
        if args.tiny > 0:
            stats = profile_tiny(runtime.url, token, cwd, args.tiny)
            print("cProfile of %d tiny runs (worker + waitress task threads), top %d by %s"
                  % (args.tiny, args.top, args.sort))
            print("%.0f function calls per run" % (stats.total_calls / args.tiny))  # type: ignore[attr-defined]
            print(top(stats, args.top, args.sort))
            return 0
        request = client.a2a_request("firehose %d" % args.deltas, cwd, token)
        raw = phases.capture(runtime.url, request) if args.cpu > 0 else b""
        stats = None if args.no_profile else profile(runtime.url, token, cwd, args.deltas)
    finally:
        runtime.stop()
    if stats is not None:
        print("cProfile of one firehose %d run (worker + waitress task threads), top %d by %s"
              % (args.deltas, args.top, args.sort))
        print("%.1f function calls per delta" % (stats.total_calls / args.deltas))  # type: ignore[attr-defined]
        print(top(stats, args.top, args.sort))
    if raw:
        figures = cpu_per_event(raw, json.loads(request[0])["id"], args.cpu, args.read_size)
        print(render_cpu(figures, args.deltas))
    return 0

if __name__ == "__main__":
    sys.exit(main())

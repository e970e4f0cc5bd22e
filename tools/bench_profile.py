#!/usr/bin/env python3
"""Profile the adapter's hot path: one firehose run through an in-process adapter, under cProfile.

    python tools/bench_profile.py [--deltas 20000] [--top 25] [--sort tottime]

cProfile follows one thread, so each thread that works on the run gets its own profiler (the run worker:
socket read, SSE decode, JSON decode, projection, encoding; the waitress task: the SSE body and its
writes; the waitress loop: socket sends) and the statistics are merged at the end.  The runtime runs in
its own process, as in ``bench.py``, so its work never shows up here.  Profiling slows Python code down
several times: read the shares, not the absolute times.
"""
import argparse
import cProfile
import io
import os
import pstats
import sys
import tempfile
import threading
import time
import uuid
from typing import Any, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.dirname(HERE))

import bench_client as client  # noqa: E402
import bench_procs as procs  # noqa: E402


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


def profile(runtime_url: str, token: str, cwd: str, deltas: int) -> pstats.Stats:
    from waitress.task import WSGITask

    from iaccode_agui.app import AguiApp
    from iaccode_agui.config import Settings
    from iaccode_agui.runs.worker import RunWorker
    from iaccode_agui.serving import ServerThread

    state = tempfile.mkdtemp(prefix="bench-profile-")
    settings = Settings(a2a_url=runtime_url, a2a_token=token, state_dir=state, allowed_cwds=(os.path.dirname(cwd),))
    app = AguiApp(settings)
    profilers = _Profilers()
    server = ServerThread(app, "127.0.0.1", 0, threads=8)
    try:
        client.post_stream(server.url, *client.agui_request("firehose 200", cwd))  # warm-up, unprofiled
        profilers.around(RunWorker, "_main")
        profilers.around(WSGITask, "service")
        result = client.post_stream(server.url, *client.agui_request("firehose %d" % deltas, cwd))
        time.sleep(0.2)
        if result.deltas != deltas or not result.finished:
            raise RuntimeError("profiled run incomplete: %d/%d deltas, error %s" % (result.deltas, deltas, result.error))
    finally:
        profilers.undo()
        server.stop()
        app.close(2.0)
    return profilers.stats()


def top(stats: pstats.Stats, count: int, sort: str) -> str:
    stream = io.StringIO()
    stats.stream = stream
    stats.sort_stats(sort).print_stats(count)
    lines = stream.getvalue().splitlines()
    start = next((i for i, line in enumerate(lines) if "ncalls" in line), 0)
    total = next((line.strip() for line in lines if "function calls" in line), "")
    return "\n".join([total] + lines[start:start + count + 1])


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python tools/bench_profile.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--deltas", type=int, default=20000)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--sort", default="tottime", help="pstats sort key (tottime, cumulative, ...)")
    args = parser.parse_args(argv)
    token = "bench-" + uuid.uuid4().hex[:12]
    runtime = procs.start_runtime(token, threads=16)
    cwd = tempfile.mkdtemp(prefix="bench-cwd-", dir=os.path.realpath(tempfile.gettempdir()))
    try:
        stats = profile(runtime.url, token, cwd, args.deltas)
    finally:
        runtime.stop()
    print("cProfile of one firehose %d run (worker + waitress task threads), top %d by %s"
          % (args.deltas, args.top, args.sort))
    print(top(stats, args.top, args.sort))
    return 0


if __name__ == "__main__":
    sys.exit(main())

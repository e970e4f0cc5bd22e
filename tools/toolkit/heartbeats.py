"""CPU per heartbeat and heartbeat lateness of N idle SSE streams, measured thread by thread in one process.

    python tools/bench.py --section heartbeats [--streams 1000] [--seconds 8] [--busy 0] [--tree DIR]

The streams are the adapter's own SSE bodies (``runs/stream.SSEBody`` on the process's heartbeat timer)
served by ``serving.ServerThread`` (waitress), with nothing to say, so every write is a heartbeat
(interval 0.5 s, as ``bench.py`` runs the adapter).  The epoll bench client reads them from a thread of
the same process.  Thread CPU comes from ``/proc/self/task/*/schedstat`` (nanoseconds on the CPU, not the
10 ms ticks of ``stat``, which miss threads that run for microseconds at a time), grouped by thread name:
the server's share per heartbeat is the figure a loaded machine disturbs least.  ``--busy N`` adds N
threads that only compute, the way an admission does, to show what the interpreter lock costs the
heartbeats.  ``--tree`` imports the package from another checkout (e.g. main) to compare the two in the
same minutes.  The client shares the interpreter lock here, so lateness with ``--busy`` includes its own
delay; ``bench.py`` measures lateness with the client in a process of its own.
"""
import argparse
import os
import sys
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

from . import ROOT


def thread_cpu() -> Dict[int, float]:
    """Seconds on the CPU of every thread of this process, by native thread id."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open("/proc/self/task/%s/schedstat" % tid) as handle:
                out[int(tid)] = int(handle.read().split()[0]) / 1e9
        except (OSError, ValueError, IndexError):
            pass
    return out


def group_of(name: str) -> str:
    if name.startswith("waitress-") and name != "waitress-loop":
        return "stream workers"
    return {"heartbeats": "timer", "waitress-loop": "waitress loop", "bench-many": "client", "busy": "busy"}.get(
        name, "other")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python tools/bench.py --section heartbeats", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=8.0, help="measuring window once all are open")
    parser.add_argument("--busy", type=int, default=0, help="threads that only compute, meanwhile")
    parser.add_argument("--tree", help="import iaccode_agui from this checkout instead")
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    root = os.path.abspath(args.tree) if args.tree else ROOT
    sys.path.insert(0, root)   # before the first import of the package
    from . import many as bench_many
    from iaccode_agui.sse.channel import END, Subscription
    from iaccode_agui.sse import response as stream
    from iaccode_agui.server.serving import ServerThread

    subs = []

    def app(environ, start_response):
        sub = Subscription(None, [b'data: {"type":"RUN_STARTED"}\n\n'], maxsize=64)
        subs.append(sub)
        body = stream.SSEBody(sub, heartbeat=0.5, poll=1.0, client_gone=stream.client_disconnect_probe(environ))
        start_response("200 OK", [("Content-Type", "text/event-stream")])
        return body

    server = ServerThread(app, threads=args.streams + 8, stall_timeout=30.0)
    runner = bench_many.Concurrent(server.url, [(b"{}", {}) for _ in range(args.streams)], trace=True, timeout=60)
    stop = threading.Event()
    try:
        runner.start()
        if not runner.all_started.wait(120):
            print("not every stream opened within 120 s")
            return 1
        for _ in range(args.busy):
            threading.Thread(target=_spin, args=(stop,), name="busy", daemon=True).start()
        time.sleep(1.0)
        names = {thread.native_id: thread.name for thread in threading.enumerate()}
        cpu0, beats0, wall0 = thread_cpu(), sum(r.heartbeats for r in runner.results), time.monotonic()
        since = time.time_ns()
        time.sleep(args.seconds)
        cpu1, beats1, wall1 = thread_cpu(), sum(r.heartbeats for r in runner.results), time.monotonic()
    finally:
        stop.set()
        for sub in subs:
            sub.queue.put_final(END)
        runner.join()
        server.stop()
    _report(root, args, runner, names, (cpu0, beats0, wall0), (cpu1, beats1, wall1), since)
    return 0


def _report(root: str, args: Any, runner: Any, names: Dict[int, str], start: Tuple[Dict[int, float], int, float],
            end: Tuple[Dict[int, float], int, float], since: int) -> None:
    """Print the CPU per heartbeat by thread group and the lateness of the window between two samples."""
    (cpu0, beats0, wall0), (cpu1, beats1, wall1) = start, end
    groups: Dict[str, float] = {}
    for tid, seconds in cpu1.items():
        key = group_of(names.get(tid, ""))
        groups[key] = groups.get(key, 0.0) + seconds - cpu0.get(tid, 0.0)
    beats, window = max(1, beats1 - beats0), wall1 - wall0
    server_cpu = sum(v for k, v in groups.items() if k not in ("client", "busy"))
    late = sorted(v for v in (r.heartbeat_lateness(0.5, since) for r in runner.results) if v is not None)
    print("%s: %d streams, %d busy thread(s), load average %.1f" % (root, args.streams, args.busy, os.getloadavg()[0]))
    print("  heartbeats/s %.0f; server CPU %.1f %% of a core, %.1f us per heartbeat" % (
        beats / window, server_cpu / window * 100, server_cpu / beats * 1e6))
    print("  us per heartbeat by thread: " + ", ".join("%s %.1f" % (k, v / beats * 1e6) for k, v in
                                                       sorted(groups.items(), key=lambda kv: -kv[1])))
    if late:
        print("  lateness p99 / max ms: %.1f / %.1f" % (late[int(len(late) * 0.99)] * 1000, late[-1] * 1000))


def _spin(stop: threading.Event) -> None:
    count = 0
    while not stop.is_set():
        count += 1

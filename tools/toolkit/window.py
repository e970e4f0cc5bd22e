"""Per-run latency on one thread over many runs with maximum-length run ids: flat once the window is full.

Usage: ``python tools/bench.py --section window [--runs 10000] [--window 256]``.  Runs the scripted demo runtime
and the adapter app in this process (the app is called as WSGI, so no HTTP server noise), posts ``--runs``
sequential runs on one thread, each with a distinct 1,024-character run id, and prints the mean latency
of the first and the last 100 runs (the first 100 are the baseline measured in the same run), their
ratio, and the size of the thread's state file at the end next to what it would be without the window.
"""
import argparse
import json
import os
import statistics
import tempfile
import time
from typing import List, Optional

from werkzeug.test import Client

from iaccode_agui.web.app import AguiApp
from iaccode_agui.config import DEFAULT_RUN_ID_WINDOW, Settings
from iaccode_agui.demo import DemoServer


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python tools/bench.py --section window",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=10000)
    parser.add_argument("--window", type=int, default=DEFAULT_RUN_ID_WINDOW)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    demo = DemoServer.start(token="bench-token", ping_interval=5.0)
    with tempfile.TemporaryDirectory() as root:
        root = os.path.realpath(root)
        app = AguiApp(Settings(a2a_url=demo.url, a2a_token=demo.token, state_dir=os.path.join(root, "state"),
                               allowed_cwds=(root,), run_id_window=args.window))
        client = Client(app)
        latencies = []
        try:
            for index in range(args.runs):
                run_id = ("run-%06d-" % index).ljust(1024, "x")
                body = {"threadId": "one-thread", "runId": run_id, "state": {}, "tools": [], "context": [],
                        "messages": [{"id": "m%d" % index, "role": "user", "content": "hello"}],
                        "forwardedProps": {"iacCode": {"schemaVersion": 1, "rosInvocationId": "inv", "cwd": root}}}
                started = time.perf_counter()
                response = client.post("/", data=json.dumps(body), content_type="application/json", buffered=True)
                if response.status_code != 200 or b"RUN_FINISHED" not in response.data:
                    print("run %d failed: %s %r" % (index, response.status_code, response.data[-300:]))
                    return 1
                latencies.append(time.perf_counter() - started)
                app.manager.wait_idle(5)
            first = statistics.mean(latencies[:100])
            last = statistics.mean(latencies[-100:])
            size = os.path.getsize(app.store.path_for("one-thread"))
            per_run = size / min(args.runs, args.window)
            print("runs on one thread:        %d (run ids of 1,024 characters, window %d)" % (args.runs, args.window))
            print("mean latency first 100:    %.1f ms" % (first * 1e3))
            print("mean latency last 100:     %.1f ms" % (last * 1e3))
            print("ratio last/first:          %.2f" % (last / first))
            print("state file at the end:     %.0f kB (without the window: ~%.0f kB)" % (
                size / 1024, per_run * args.runs / 1024))
        finally:
            app.close(5)
            demo.stop()
    return 0

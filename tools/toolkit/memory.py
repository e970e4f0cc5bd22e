"""How much memory finished runs keep, and whether it comes back (bounded: a fixed number of runs).

    python tools/bench.py --section memory [--runs 120] [--deltas 10000] [--wait 20] [--adapter-arg ...]

Starts the scripted runtime and an adapter as their own processes, reads the adapter's idle RSS, runs
``--runs`` × ``firehose --deltas`` in sequence (each read to its end), reads RSS right after, waits
``--wait`` seconds (the housekeeping timer runs every 2 s) and reads it again.  Prints the three figures
and the difference to idle; the target is "after the wait, within 50 MB of idle".
"""
import argparse
import os
import shutil
import tempfile
import time
import uuid
from typing import List, Optional

import requests

from . import procs


def _body(cwd: str, text: str) -> dict:
    return {"threadId": "mem-" + uuid.uuid4().hex[:8], "runId": "run-" + uuid.uuid4().hex[:8], "state": {},
            "tools": [], "context": [], "messages": [{"id": "m1", "role": "user", "content": text}],
            "forwardedProps": {"iacCode": {"schemaVersion": 1, "rosInvocationId": "inv", "cwd": cwd}}}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python tools/bench.py --section memory",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=120)
    parser.add_argument("--deltas", type=int, default=10000)
    parser.add_argument("--wait", type=float, default=20.0)
    parser.add_argument("--adapter-arg", action="append", default=[])
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    token = "mem-" + uuid.uuid4().hex[:8]
    tmp = tempfile.mkdtemp(prefix="iaccode-mem-")
    cwd = tempfile.mkdtemp(prefix="mem-cwd-", dir=os.path.realpath(tempfile.gettempdir()))
    runtime = procs.start_runtime(token, threads=16, log_dir=tmp)
    adapter = None
    try:
        adapter = procs.start_adapter(runtime, token, os.path.join(tmp, "state"), extra=args.adapter_arg,
                                      log_dir=tmp)
        session = requests.Session()
        session.post(adapter.url, json=_body(cwd, "hello"), timeout=60).content    # warm the code paths
        time.sleep(1.0)
        idle = procs.rss_mb(adapter.pid)
        for _ in range(args.runs):
            response = session.post(adapter.url, json=_body(cwd, "firehose %d" % args.deltas), timeout=600)
            assert response.status_code == 200 and b"RUN_FINISHED" in response.content[-2000:]
        loaded = procs.rss_mb(adapter.pid)
        time.sleep(args.wait)
        after = procs.rss_mb(adapter.pid)
        print("runs %d x firehose %d" % (args.runs, args.deltas))
        print("RSS idle          %7.1f MB" % idle)
        print("RSS after load    %7.1f MB  (+%.1f)" % (loaded, loaded - idle))
        print("RSS after %4.0f s  %7.1f MB  (+%.1f)  target: within 50 MB of idle -> %s"
              % (args.wait, after, after - idle, "ok" if after - idle <= 50 else "MISSED"))
        return 0 if after - idle <= 50 else 1
    finally:
        if adapter is not None:
            adapter.stop()
        runtime.stop()
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(cwd, ignore_errors=True)

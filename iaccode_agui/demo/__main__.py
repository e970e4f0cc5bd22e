"""``python -m iaccode_agui.demo``: run the scripted runtime alone, e.g. to point an adapter at it."""
import argparse
import signal
import sys
import threading
from typing import List, Optional

from iaccode_agui.demo.scenarios import scenario_lines
from iaccode_agui.demo.server import DemoServer


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m iaccode_agui.demo",
        description="Scripted iac-code A2A 1.0 runtime (loopback). Scenarios, chosen by keyword:\n  "
                    + "\n  ".join(scenario_lines()),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--token", default=None, help="require 'Authorization: Bearer <token>'")
    parser.add_argument("--ping-interval", type=float, default=15.0)
    parser.add_argument("--slow-interval", type=float, default=1.0)
    parser.add_argument("--allowed-cwd", action="append", default=[], dest="allowed_cwds",
                        help="workspace root a task's cwd must lie under (repeatable)")
    args = parser.parse_args(argv)
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        parser.error("the demo runtime only listens on loopback")
    server = DemoServer.start(host=args.host, port=args.port, token=args.token,
                              ping_interval=args.ping_interval, slow_interval=args.slow_interval,
                              allowed_cwds=args.allowed_cwds)
    print(server.url, flush=True)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    try:
        while not done.wait(1.0):
            pass
    except KeyboardInterrupt:
        pass
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

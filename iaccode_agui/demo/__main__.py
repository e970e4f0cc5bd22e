"""``python -m iaccode_agui.demo``: run the scripted runtime alone, e.g. to point an adapter at it."""
import argparse
import signal
import sys
import threading
from typing import List, Optional, Tuple

from iaccode_agui.demo.scenarios import scenario_lines
from iaccode_agui.demo.server import DemoServer


class _PrintedLog(list):
    """One of the runtime's records, each entry also printed as it is added."""

    def __init__(self, prefix: str, items: List[Tuple[str, Optional[str]]]) -> None:
        super().__init__(items)
        self.prefix = prefix

    def append(self, item: Tuple[str, Optional[str]]) -> None:
        super().append(item)
        print("%s %s %s" % (self.prefix, item[0], item[1] or "-"), flush=True)


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
    parser.add_argument("--log-requests", action="store_true",
                        help="print one line per JSON-RPC call ('a2a <method> <task id>') and per tool run "
                             "('tool <task id> <tool use id>'), to watch the runtime from outside")
    args = parser.parse_args(argv)
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        parser.error("the demo runtime only listens on loopback")
    server = DemoServer.start(host=args.host, port=args.port, token=args.token,
                              ping_interval=args.ping_interval, slow_interval=args.slow_interval,
                              allowed_cwds=args.allowed_cwds)
    if args.log_requests:
        server.runtime.requests_log = _PrintedLog("a2a", server.runtime.requests_log)
        server.runtime.tool_executions = _PrintedLog("tool", server.runtime.tool_executions)
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

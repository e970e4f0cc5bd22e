"""Server processes the benchmark starts: the scripted runtime and the raw byte relay.

``python -m toolkit.servers runtime ...`` is the demo runtime with a thread pool sized for the
concurrency test (the demo CLI has no ``--threads``).  ``python -m toolkit.servers relay ...`` is the
baseline the adapter is compared with: the least a synchronous WSGI front on waitress can do, i.e. POST
the body upstream with ``requests`` and copy the response bytes back as they arrive, without parsing them.
"""
import argparse
import json
import signal
import sys
import threading
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional

import requests
from requests.adapters import HTTPAdapter

BUSY_PATH = "/__bench/busy"   # the runtime's load, for the bench to wait on between rows
_FORWARDED = (("HTTP_AUTHORIZATION", "Authorization"), ("HTTP_A2A_VERSION", "A2A-Version"),
              ("CONTENT_TYPE", "Content-Type"), ("HTTP_ACCEPT", "Accept"))


class _Pipe:
    """The relay's response body: upstream bytes as soon as any arrive; closes upstream when done."""

    def __init__(self, resp: requests.Response) -> None:
        self._resp = resp
        read1 = getattr(resp.raw, "read1", None)
        if callable(read1):
            self._read: Callable[[], bytes] = lambda: read1(65536)
        else:  # urllib3 < 2
            chunks = resp.iter_content(chunk_size=None)
            self._read = lambda: next(chunks, b"")

    def __iter__(self) -> Iterator[bytes]:
        return self

    def __next__(self) -> bytes:
        chunk = self._read()
        if not chunk:
            raise StopIteration
        return chunk

    def close(self) -> None:
        self._resp.close()


class RawRelay:
    """A trivial WSGI app that forwards POST / to ``upstream`` and pipes the bytes back unchanged."""

    def __init__(self, upstream: str, pool: int) -> None:
        self.upstream = upstream
        self.session = requests.Session()
        self.session.trust_env = False
        adapter = HTTPAdapter(pool_connections=4, pool_maxsize=pool, max_retries=0)
        self.session.mount("http://", adapter)

    def __call__(self, environ: Dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO") == "/health":
            start_response("200 OK", [("Content-Type", "text/plain")])
            return [b"ok"]
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        headers = {name: environ[key] for key, name in _FORWARDED if environ.get(key)}
        resp = self.session.post(self.upstream, data=body, headers=headers, stream=True, timeout=(5, 3600))
        start_response("%d %s" % (resp.status_code, resp.reason or "OK"),
                       [("Content-Type", resp.headers.get("Content-Type", "application/octet-stream")),
                        ("Cache-Control", "no-store")])
        return _Pipe(resp)


def _wait_for_sigterm() -> None:
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    while not done.wait(1.0):
        pass


def _install_paced_scenario() -> None:
    """Add ``pace N MS`` to this runtime process only: N stamped deltas MS ms apart, after a short pause.

    The firehose measures throughput, but its per-event latency is mostly queueing behind the burst, and
    its first deltas wait behind the adapter's start-of-run state writes.  Spaced deltas that start once
    the run is settled measure what each event costs on its way through, which is what "added latency"
    means.  It is registered here, not in the demo, because only the benchmark needs it.
    """
    import re
    import time

    from iaccode_agui.demo import scenarios
    from iaccode_agui.demo.turns import FIRST_CALL_USAGE

    class Paced(scenarios.Scenario):
        name = "pace"
        description = "N deltas '~<i>@<time_ns> ' every MS ms after a 0.2 s pause (benchmark only)"
        pattern = r"\bpace\s+(\d+)\s+(\d+)"

        def match(self, text: str) -> Optional[Dict[str, Any]]:
            found = re.search(self.pattern, text, re.IGNORECASE)
            return None if found is None else {"arg": found.group(1), "gap": found.group(2)}

        def start(self, turn: Any) -> None:
            count, gap = int(turn.state["arg"]), int(turn.state["gap"]) / 1000.0
            turn.sleep(0.2)
            for index in range(count):
                if index:
                    turn.sleep(gap)
                turn.text("~%d@%d " % (index, time.time_ns()))
            turn.usage(FIRST_CALL_USAGE)
            turn.final("pace: %d deltas" % count)
            turn.end_turn()

    scenarios.PLAYBOOK = (Paced(),) + tuple(scenarios.PLAYBOOK)


def _serve_runtime(port: int, token: str, threads: int, ping_interval: float) -> int:
    """The demo runtime as ``DemoServer`` builds it, plus a connection limit sized for the thread pool
    (waitress' default of 100 connections would stall the 500-stream test in the runtime, not the adapter)."""
    from waitress.server import create_server

    from iaccode_agui.demo.runtime import ScriptedRuntime

    _install_paced_scenario()
    runtime = ScriptedRuntime(token, ping_interval=ping_interval)
    holder: List[Any] = []

    def app(environ: Dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        # The bench asks how busy the runtime still is before each concurrency row (threads running a
        # request besides this one, requests queued for a thread).
        if environ.get("PATH_INFO") == BUSY_PATH:
            dispatcher = holder[0].task_dispatcher
            body = json.dumps({"busy": dispatcher.active_count - 1, "queued": len(dispatcher.queue)}).encode()
            start_response("200 OK", [("Content-Type", "application/json")])
            return [body]
        return runtime(environ, start_response)

    server = create_server(app, host="127.0.0.1", port=port, threads=threads, connection_limit=threads + 64,
                           channel_request_lookahead=8, asyncore_use_poll=True, ident="iac-code-demo")
    holder.append(server)
    threading.Thread(target=server.run, name="runtime-loop", daemon=True).start()
    print("http://127.0.0.1:%d/" % port, flush=True)
    _wait_for_sigterm()
    runtime.shutdown(2.0)
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m toolkit.servers")
    sub = parser.add_subparsers(dest="what", required=True)
    runtime = sub.add_parser("runtime", help="the scripted A2A runtime")
    runtime.add_argument("--port", type=int, required=True)
    runtime.add_argument("--token", required=True)
    runtime.add_argument("--threads", type=int, default=96)
    runtime.add_argument("--ping-interval", type=float, default=15.0)
    relay = sub.add_parser("relay", help="the raw byte relay")
    relay.add_argument("--port", type=int, required=True)
    relay.add_argument("--upstream", required=True)
    relay.add_argument("--threads", type=int, default=64)
    args = parser.parse_args(argv)
    if args.what == "runtime":
        return _serve_runtime(args.port, args.token, args.threads, args.ping_interval)
    from iaccode_agui.server.serving import ServerThread

    app = RawRelay(args.upstream, pool=args.threads)
    served = ServerThread(app, "127.0.0.1", args.port, threads=args.threads, connection_limit=args.threads + 64)
    print(served.url, flush=True)
    _wait_for_sigterm()
    served.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

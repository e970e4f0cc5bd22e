"""Bounded connection-flood load against a real adapter process: idle sockets and slowloris heads.

Usage: ``python tools/hostile_load.py [--idle 1000] [--slow 200] [--seconds 20] [--header-timeout 5]``.
Starts the scripted demo runtime and ``python -m iaccode_agui`` as child processes on loopback
(port chosen here, state in a temporary directory), opens ``--idle`` sockets that never send a byte and
``--slow`` sockets that send a request head one byte per second, and meanwhile measures ``/health`` and
complete runs.  Prints the latencies, how many flood sockets the server closed (and after how long), and
the same ``/health`` latency measured before the flood as the baseline.  Everything is stopped at the end.
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from typing import Any, Dict, List, Optional

import requests

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from iaccode_agui.upstream import free_loopback_port  # noqa: E402

SLOW_HEAD = b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nX-Pad: " + b"x" * 4096


class Flood:
    """``idle`` silent sockets and ``slow`` sockets dribbling a head, kept at that count: each socket the
    server closes is recorded (with its age) and replaced, as a persistent attacker would do."""

    def __init__(self, port: int, idle: int, slow: int, interval: float = 1.0) -> None:
        self.port = port
        self.opened = 0
        self.refused = 0
        self.closed_after: List[float] = []
        self._sockets: List[Any] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        for index in range(idle + slow):
            try:
                sock = socket.create_connection(("127.0.0.1", port), timeout=5)
            except OSError:
                self.refused += 1
                continue
            sock.setblocking(False)
            self._sockets.append((sock, index >= idle, time.monotonic()))
            self.opened += 1
        self._thread = threading.Thread(target=self._drive, args=(interval,), daemon=True)
        self._thread.start()

    def _drive(self, interval: float) -> None:
        """Every ``interval``: one more head byte per slow socket; a socket the server closed is reopened."""
        position = 0
        live = list(self._sockets)
        while live and not self._stop.wait(interval):
            still = []
            for sock, slow, opened in live:
                if slow and not self._server_closed(sock):
                    offset = position % len(SLOW_HEAD)
                    try:
                        sock.send(SLOW_HEAD[offset:offset + 1])
                    except OSError:
                        pass
                if self._server_closed(sock):
                    with self._lock:
                        self.closed_after.append(time.monotonic() - opened)
                    sock.close()
                    try:
                        sock = socket.create_connection(("127.0.0.1", self.port), timeout=5)
                        sock.setblocking(False)
                        opened = time.monotonic()
                    except OSError:
                        self.refused += 1
                        continue
                still.append((sock, slow, opened))
            live = still
            self._sockets = live
            position += 1

    @staticmethod
    def _server_closed(sock: Any) -> bool:
        try:
            return sock.recv(4096) == b""
        except BlockingIOError:
            return False
        except OSError:
            return True

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        for sock, _, _ in list(self._sockets):
            sock.close()


def silent_clients(port: int, count: int, body: bytes) -> List[Any]:
    """``count`` clients that POST ``body`` with a tiny receive buffer and never read the answer."""
    made = []
    head = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
    for _ in range(count):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        try:
            sock.connect(("127.0.0.1", port))
            sock.sendall(head % len(body) + body)
        except OSError:
            sock.close()
            continue
        made.append(sock)
    return made


def rss_mib(pid: int) -> float:
    with open("/proc/%d/status" % pid) as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def health_latencies(url: str, count: int, timeout: float = 5.0) -> List[Optional[float]]:
    """``count`` fresh-connection GET /health timings; None for one not answered within ``timeout``."""
    result: List[Optional[float]] = []
    for _ in range(count):
        started = time.monotonic()
        try:
            ok = requests.get(url + "health", timeout=timeout).status_code == 200
        except requests.RequestException:
            ok = False
        result.append(time.monotonic() - started if ok else None)
    return result


def run_seconds(url: str, workspace: str, token: Optional[str] = None, timeout: float = 10.0) -> Optional[float]:
    """Seconds for one complete run (POST to RUN_FINISHED) on a fresh connection; None if it failed."""
    body = {"threadId": "load-" + uuid.uuid4().hex[:8], "runId": "run-" + uuid.uuid4().hex[:8], "state": {},
            "messages": [{"id": "m1", "role": "user", "content": "hello"}], "tools": [], "context": [],
            "forwardedProps": {"iacCode": {"schemaVersion": 1, "rosInvocationId": "inv", "cwd": workspace}}}
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = "Bearer " + token
    started = time.monotonic()
    try:
        response = requests.post(url, data=json.dumps(body), headers=headers, timeout=timeout)
    except requests.RequestException:
        return None
    if response.status_code != 200 or b"RUN_FINISHED" not in response.content:
        return None
    return time.monotonic() - started


def summary(values: List[Optional[float]]) -> Dict[str, Any]:
    answered = sorted(v for v in values if v is not None)
    if not answered:
        return {"answered": "0/%d" % len(values)}
    p99 = answered[min(len(answered) - 1, int(round(0.99 * (len(answered) - 1))))]
    return {"answered": "%d/%d" % (len(answered), len(values)), "p50_ms": round(statistics.median(answered) * 1e3, 1),
            "p99_ms": round(p99 * 1e3, 1), "max_ms": round(answered[-1] * 1e3, 1)}


class DemoProcess:
    """The scripted runtime as its own process, so its streaming does not compete with the load generator."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.process = subprocess.Popen([sys.executable, "-m", "iaccode_agui.demo", "--token", token,
                                         "--ping-interval", "0.5"], stdout=subprocess.PIPE,
                                        stderr=subprocess.DEVNULL, text=True)
        self.url = self.process.stdout.readline().strip()

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(30)


def _start_adapter(demo: Any, root: str, args: argparse.Namespace) -> Any:
    port = free_loopback_port()
    command = [sys.executable, "-m", "iaccode_agui", "--a2a-url", demo.url, "--a2a-token", demo.token,
               "--port", str(port), "--state-dir", os.path.join(root, "state"), "--threads", str(args.threads),
               "--header-timeout", str(args.header_timeout), "--stall-timeout", str(args.stall_timeout)]
    env = dict(os.environ, IAC_CODE_AGUI_ALLOWED_CWDS=root)
    child = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = "http://127.0.0.1:%d/" % port
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if health_latencies(url, 1, 1.0)[0] is not None:
            return child, url
        time.sleep(0.1)
    child.kill()
    raise SystemExit("the adapter did not start")


def _silent_scenario(url: str, root: str, pid: int, args: argparse.Namespace) -> int:
    port = int(url.rsplit(":", 1)[1].strip("/"))
    idle_rss = rss_mib(pid)
    sockets = []
    for index in range(args.silent):
        body = {"threadId": "silent-%d" % index, "runId": "run-" + uuid.uuid4().hex[:8], "state": {},
                "messages": [{"id": "m1", "role": "user", "content": "firehose 24000"}], "tools": [], "context": [],
                "forwardedProps": {"iacCode": {"schemaVersion": 1, "rosInvocationId": "inv", "cwd": root}}}
        sockets += silent_clients(port, 1, json.dumps(body).encode())
    print("silent clients connected: %d" % len(sockets))
    health: List[Optional[float]] = []
    peak = idle_rss
    deadline = time.monotonic() + args.seconds
    while time.monotonic() < deadline:
        health += health_latencies(url, 5)
        peak = max(peak, rss_mib(pid))
        time.sleep(0.2)
    print("while they stay /health:", summary(health), "RSS idle %.0f MiB, peak %.0f MiB" % (idle_rss, peak))
    for sock in sockets:
        sock.close()
    gone = time.monotonic()
    normal = None
    while time.monotonic() - gone < 30:
        if run_seconds(url, root, timeout=5) is not None and None not in health_latencies(url, 3, 1.0):
            normal = time.monotonic() - gone
            break
    print("after they go: normal again in %s; /health" % ("%.2f s" % normal if normal is not None else "> 30 s"),
          summary(health_latencies(url, 20)), "RSS %.0f MiB" % rss_mib(pid))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--idle", type=int, default=1000)
    parser.add_argument("--slow", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=20.0, help="how long the flood is held open")
    parser.add_argument("--threads", type=int, default=32)
    parser.add_argument("--header-timeout", type=float, default=5.0)
    parser.add_argument("--silent", type=int, default=0,
                        help="instead of the socket flood: this many clients post 'firehose 24000' and never read")
    parser.add_argument("--stall-timeout", type=float, default=30.0)
    args = parser.parse_args()
    demo = DemoProcess("load-token")
    with tempfile.TemporaryDirectory() as root:
        root = os.path.realpath(root)
        child, url = _start_adapter(demo, root, args)
        try:
            print("baseline /health:", summary(health_latencies(url, 20)))
            print("baseline run:", summary([run_seconds(url, root) for _ in range(5)]))
            if args.silent:
                return _silent_scenario(url, root, child.pid, args)
            flood = Flood(int(url.rsplit(":", 1)[1].strip("/")), args.idle, args.slow)
            print("flood: %d sockets open (%d refused): %d idle, %d slowloris" % (
                flood.opened, flood.refused, args.idle, args.slow))
            health: List[Optional[float]] = []
            runs: List[Optional[float]] = []
            deadline = time.monotonic() + args.seconds
            while time.monotonic() < deadline:
                health += health_latencies(url, 5)
                runs.append(run_seconds(url, root))
            print("under flood /health:", summary(health))
            print("under flood run:", summary(runs))
            closed = sorted(flood.closed_after)
            print("flood sockets closed by the server: %d/%d, after %.1f-%.1f s" % (
                len(closed), flood.opened, closed[0] if closed else 0, closed[-1] if closed else 0))
            flood.close()
            print("after flood /health:", summary(health_latencies(url, 20)))
        finally:
            child.terminate()
            child.wait(30)
            demo.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Bounded hostile load against a real adapter process: idle sockets, slowloris heads, or silent clients.

Usage: ``python tools/hostile_load.py [--idle 1000] [--slow 200] [--seconds 20] [--header-timeout 5] [--sample]``
or ``python tools/hostile_load.py --silent 500 [--sample]``.
Starts the scripted demo runtime and ``python -m iaccode_agui`` as child processes on loopback
(port chosen here, state in a temporary directory).  The flood opens ``--idle`` sockets that never send a
byte and ``--slow`` sockets that send a request head one byte per second, and meanwhile measures
``/health`` and new runs (time to ``RUN_STARTED`` and to ``RUN_FINISHED``), with the same figures measured
before the flood as the baseline; it also prints how many flood sockets the server closed (and after how
long).  ``--silent N`` instead has N clients post ``firehose 24000`` and never read.  ``--sample`` adds a
per-second series of the CPU used by the adapter and by the runtime, the adapter's runnable threads and
its run gauges.  Everything is stopped at the end.
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
from typing import Any, Dict, List, Optional, Sequence, Tuple

import requests

from toolkit.procs import cpu_seconds, free_port, rss_mb

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


def thread_states(pid: int) -> Dict[str, int]:
    """How many of a process's threads are in each scheduler state (R = runnable or running)."""
    states: Dict[str, int] = {}
    try:
        tasks = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return states
    for task in tasks:
        try:
            with open("/proc/%d/task/%s/stat" % (pid, task)) as handle:
                state = handle.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        states[state] = states.get(state, 0) + 1
    return states


def scraped(url: str, names: Sequence[str]) -> Dict[str, float]:
    """Selected unlabelled values from ``/metrics`` (empty when it does not answer in time)."""
    try:
        text = requests.get(url + "metrics", timeout=2).text
    except requests.RequestException:
        return {}
    values = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in names:
            values[name] = float(value)
    return values


class Sampler:
    """Every ``interval``: CPU used by the adapter and by the runtime, the adapter's runnable threads and
    its thread count, and the run/stream gauges; ``report()`` prints the time series and the totals."""

    METRICS = ("agui_active_runs", "agui_open_streams", "agui_events_sent_total")

    def __init__(self, url: str, adapter: int, runtime: int, interval: float = 1.0) -> None:
        self.url, self.pids, self.interval = url, (adapter, runtime), interval
        self.rows: List[Dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        started = time.monotonic()
        last = [cpu_seconds(pid) for pid in self.pids]
        runnable: List[int] = []
        next_row = started + self.interval
        while not self._stop.wait(0.05):
            states = thread_states(self.pids[0])
            runnable.append(states.get("R", 0))
            if time.monotonic() < next_row:
                continue
            now = [cpu_seconds(pid) for pid in self.pids]
            row = {"t": round(time.monotonic() - started, 1), "threads": sum(states.values()),
                   "runnable_avg": round(sum(runnable) / len(runnable), 1), "runnable_max": max(runnable),
                   "adapter_cpu": round((now[0] - last[0]) / self.interval, 2),
                   "runtime_cpu": round((now[1] - last[1]) / self.interval, 2)}
            row.update(scraped(self.url, self.METRICS))
            self.rows.append(row)
            last, runnable = now, []
            next_row += self.interval

    def report(self) -> None:
        self._stop.set()
        self._thread.join(5)
        for row in self.rows:
            print("  sample", row)
        if self.rows:
            print("  CPU over the window: adapter %.2f cores, runtime %.2f cores, runnable adapter threads avg %.1f" % (
                statistics.mean(r["adapter_cpu"] for r in self.rows),
                statistics.mean(r["runtime_cpu"] for r in self.rows),
                statistics.mean(r["runnable_avg"] for r in self.rows)))


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
    return run_timings(url, workspace, token, timeout)[1]


def run_timings(url: str, workspace: str, token: Optional[str] = None,
                timeout: float = 10.0) -> Tuple[Optional[float], Optional[float]]:
    """(seconds to RUN_STARTED, seconds to RUN_FINISHED) for one run on a fresh connection; None if not reached."""
    body = {"threadId": "load-" + uuid.uuid4().hex[:8], "runId": "run-" + uuid.uuid4().hex[:8], "state": {},
            "messages": [{"id": "m1", "role": "user", "content": "hello"}], "tools": [], "context": [],
            "forwardedProps": {"iacCode": {"schemaVersion": 1, "rosInvocationId": "inv", "cwd": workspace}}}
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = "Bearer " + token
    started = time.monotonic()
    first: Optional[float] = None
    seen = b""
    try:
        with requests.post(url, data=json.dumps(body), headers=headers, timeout=timeout, stream=True) as response:
            if response.status_code != 200:
                return None, None
            for chunk in response.iter_content(None):
                seen += chunk
                if first is None and b"RUN_STARTED" in seen:
                    first = time.monotonic() - started
    except requests.RequestException:
        return first, None
    return first, (time.monotonic() - started if b"RUN_FINISHED" in seen else None)


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
    port = free_port()
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


def _silent_scenario(url: str, root: str, pid: int, args: argparse.Namespace, runtime_pid: int = 0) -> int:
    port = int(url.rsplit(":", 1)[1].strip("/"))
    idle_rss = rss_mb(pid)
    sockets = []
    for index in range(args.silent):
        body = {"threadId": "silent-%d" % index, "runId": "run-" + uuid.uuid4().hex[:8], "state": {},
                "messages": [{"id": "m1", "role": "user", "content": "firehose 24000"}], "tools": [], "context": [],
                "forwardedProps": {"iacCode": {"schemaVersion": 1, "rosInvocationId": "inv", "cwd": root}}}
        sockets += silent_clients(port, 1, json.dumps(body).encode())
    print("silent clients connected: %d" % len(sockets))
    sampler = Sampler(url, pid, runtime_pid) if args.sample else None
    health: List[Optional[float]] = []
    early: List[Optional[float]] = []
    peak = idle_rss
    started = time.monotonic()
    deadline = started + args.seconds
    while time.monotonic() < deadline:
        (early if time.monotonic() - started < 5 else health).extend(health_latencies(url, 5))
        peak = max(peak, rss_mb(pid))
        time.sleep(0.2)
    print("while they stay /health:", summary(early + health), "RSS idle %.0f MiB, peak %.0f MiB" % (idle_rss, peak))
    print("  first 5 s (runs fill the buffers of their silent clients):", summary(early))
    print("  after that:", summary(health))
    if sampler is not None:
        sampler.report()
    for sock in sockets:
        sock.close()
    gone = time.monotonic()
    normal = None
    while time.monotonic() - gone < 30:
        if run_seconds(url, root, timeout=5) is not None and None not in health_latencies(url, 3, 1.0):
            normal = time.monotonic() - gone
            break
    print("after they go: normal again in %s; /health" % ("%.2f s" % normal if normal is not None else "> 30 s"),
          summary(health_latencies(url, 20)), "RSS %.0f MiB" % rss_mb(pid))
    return 0


def _flood_scenario(url: str, root: str, pid: int, args: argparse.Namespace, runtime_pid: int) -> int:
    before = [run_timings(url, root) for _ in range(args.baseline_runs)]
    print("baseline new run to RUN_STARTED:", summary([first for first, _ in before]))
    print("baseline run to RUN_FINISHED:", summary([whole for _, whole in before]))
    flood = Flood(int(url.rsplit(":", 1)[1].strip("/")), args.idle, args.slow)
    sampler = Sampler(url, pid, runtime_pid) if args.sample else None
    print("flood: %d sockets open (%d refused): %d idle, %d slowloris" % (
        flood.opened, flood.refused, args.idle, args.slow))
    health: List[Optional[float]] = []
    runs: List[Optional[float]] = []
    started: List[Optional[float]] = []
    deadline = time.monotonic() + args.seconds
    while time.monotonic() < deadline:
        health += health_latencies(url, 5)
        first, whole = run_timings(url, root)
        started.append(first)
        runs.append(whole)
    print("under flood /health:", summary(health))
    print("under flood new run to RUN_STARTED:", summary(started))
    print("under flood run to RUN_FINISHED:", summary(runs))
    closed = sorted(flood.closed_after)
    print("flood sockets closed by the server: %d/%d, after %.1f-%.1f s" % (
        len(closed), flood.opened, closed[0] if closed else 0, closed[-1] if closed else 0))
    if sampler is not None:
        sampler.report()
    flood.close()
    print("after flood /health:", summary(health_latencies(url, 20)))
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
    parser.add_argument("--baseline-runs", type=int, default=30,
                        help="runs measured before the flood, the baseline its figures compare with")
    parser.add_argument("--sample", action="store_true",
                        help="print a per-second series of CPU (adapter, runtime), runnable threads and run gauges")
    args = parser.parse_args()
    demo = DemoProcess("load-token")
    with tempfile.TemporaryDirectory() as root:
        root = os.path.realpath(root)
        child, url = _start_adapter(demo, root, args)
        try:
            print("baseline /health:", summary(health_latencies(url, 20)))
            if args.silent:
                print("baseline run:", summary([run_seconds(url, root) for _ in range(5)]))
                return _silent_scenario(url, root, child.pid, args, demo.process.pid)
            return _flood_scenario(url, root, child.pid, args, demo.process.pid)
        finally:
            child.terminate()
            child.wait(30)
            demo.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

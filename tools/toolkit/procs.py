"""Processes of the tools: start each server in its own process, read its CPU, RSS and threads from /proc, stop it.

Every server under test runs in a separate process so the client's Python work never mixes with the
figures of the process being measured; /proc is read directly so the tools need no extra package.  The
process plumbing every tool shares (``free_port``, ``child_env``, ``cpu_seconds``, ``rss_mb``,
``stop_process``, ``wait_in_log``) is written here once.
"""
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Dict, List, Optional, Sequence

import requests

from . import ROOT

TOOLS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def free_port() -> int:
    """A port the OS just handed out; CLIs that refuse ``--port 0`` need a concrete one.  The tools import
    no module of the package at load time, so that a bench section can import it from another checkout."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    """User + system CPU of one process (all its threads), from /proc/<pid>/stat."""
    with open("/proc/%d/stat" % pid, "rb") as handle:
        raw = handle.read()
    # The command name may contain spaces or parentheses: fields start after the last ')'.
    fields = raw[raw.rindex(b")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / float(CLK_TCK)


def status(pid: int) -> Dict[str, int]:
    """VmRSS / VmHWM in KiB and Threads, from /proc/<pid>/status."""
    wanted = {b"VmRSS": "rss_kb", b"VmHWM": "hwm_kb", b"Threads": "threads"}
    found: Dict[str, int] = {}
    with open("/proc/%d/status" % pid, "rb") as handle:
        for line in handle:
            key, _, value = line.partition(b":")
            if key in wanted:
                found[wanted[key]] = int(value.split()[0])
    return found


def rss_mb(pid: int) -> float:
    return status(pid).get("rss_kb", 0) / 1024.0


class Sampler:
    """Polls one process's RSS and thread count in the background and keeps the peaks."""

    def __init__(self, pid: int, interval: float = 0.05) -> None:
        self.pid = pid
        self.interval = interval
        self.peak_rss_kb = 0
        self.peak_threads = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)

    def __enter__(self) -> "Sampler":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(2)
        self._sample()

    def _sample(self) -> None:
        try:
            found = status(self.pid)
        except OSError:
            return
        self.peak_rss_kb = max(self.peak_rss_kb, found.get("rss_kb", 0))
        self.peak_threads = max(self.peak_threads, found.get("threads", 0))

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()


class Service:
    """One server process under test: its URL, its pid and how long it took to answer /health."""

    def __init__(self, name: str, argv: Sequence[str], url: str, *, env: Optional[Dict[str, str]] = None,
                 health_path: str = "health", timeout: float = 60.0, log_dir: Optional[str] = None,
                 headers: Optional[Dict[str, str]] = None) -> None:
        self.name = name
        self.url = url
        self.argv = list(argv)
        log_dir = log_dir or tempfile.gettempdir()
        fd, self.log_path = tempfile.mkstemp(prefix="bench-%s-" % name, suffix=".log", dir=log_dir)
        self._log = os.fdopen(fd, "wb")
        started = time.monotonic()
        self.proc = subprocess.Popen(self.argv, env=env, stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, cwd=ROOT)
        self.pid = self.proc.pid
        self.startup_seconds = self._await_health(health_path, started, timeout, headers or {})

    def _await_health(self, path: str, started: float, timeout: float, headers: Dict[str, str]) -> float:
        session = requests.Session()
        session.trust_env = False
        session.headers.update(headers)
        try:
            while time.monotonic() - started < timeout:
                if self.proc.poll() is not None:
                    raise RuntimeError("%s exited with %s:\n%s" % (self.name, self.proc.returncode, self.log_tail()))
                try:
                    if session.get(self.url + path, timeout=1.0).status_code == 200:
                        return time.monotonic() - started
                except requests.RequestException:
                    pass
                time.sleep(0.005)
        finally:
            session.close()
        self.stop()
        raise RuntimeError("%s did not answer %s within %.0f s:\n%s" % (self.name, path, timeout, self.log_tail()))

    def log_errors(self, lines: int = 8) -> str:
        """The log's error lines (exceptions, ERROR records), which a flood of access lines would bury."""
        self._log.flush()
        try:
            with open(self.log_path, "rb") as handle:
                text = handle.read().decode("utf-8", "replace").splitlines()
        except OSError:
            return ""
        marks = ("Error", "Exception", "Traceback", " ERROR ", " CRITICAL ")
        found = [line for line in text if "iaccode_agui.access" not in line and any(m in line for m in marks)]
        return "\n".join(found[-lines:])

    def log_count(self, needle: str) -> int:
        """How many lines of the log so far contain ``needle`` (e.g. a warning the bench reports)."""
        self._log.flush()
        try:
            with open(self.log_path, "rb") as handle:
                return sum(1 for line in handle if needle.encode("utf-8") in line)
        except OSError:
            return 0

    def log_tail(self, lines: int = 20) -> str:
        self._log.flush()
        try:
            with open(self.log_path, "rb") as handle:
                return b"\n".join(handle.read().splitlines()[-lines:]).decode("utf-8", "replace")
        except OSError:
            return "(no log at %s)" % self.log_path

    def cpu(self) -> float:
        return cpu_seconds(self.pid)

    def status(self) -> Dict[str, int]:
        return status(self.pid)

    def stop(self, timeout: float = 15.0) -> None:
        stop_process(self.proc, timeout)
        self._log.close()


def python_argv(*args: str) -> List[str]:
    return [sys.executable, *args]


def child_env(extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """This interpreter's environment with the checkout and ``tools/`` importable, without adapter settings
    (``IAC_CODE_AGUI_*``: only what a tool passes applies) and with proxies out of the way (all on loopback)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("IAC_CODE_AGUI_")}
    env["PYTHONPATH"] = os.pathsep.join([ROOT, TOOLS] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        env.pop(name, None)
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    env.update(extra or {})
    return env


def stop_process(proc: subprocess.Popen, timeout: float = 20.0) -> Optional[int]:
    """SIGTERM, then the exit status; None when it had to be killed after ``timeout`` seconds."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
            return None
    return proc.returncode


def wait_in_log(proc: subprocess.Popen, path: str, pattern: bytes, timeout: float) -> "re.Match[bytes]":
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(path, "rb") as handle:
            found = re.search(pattern, handle.read())
        if found:
            return found
        if proc.poll() is not None:
            break
        time.sleep(0.02)
    with open(path, "rb") as handle:
        tail = handle.read()[-2000:].decode("utf-8", "replace")
    raise RuntimeError("%r not seen in %s (exit %s):\n%s" % (pattern, path, proc.poll(), tail))


def start_runtime(token: str, threads: int, ping_interval: float = 15.0, log_dir: Optional[str] = None) -> Service:
    port = free_port()
    argv = python_argv("-m", "toolkit.servers", "runtime", "--port", str(port), "--token", token,
                       "--threads", str(threads), "--ping-interval", str(ping_interval))
    return Service("runtime", argv, "http://127.0.0.1:%d/" % port, env=child_env(),
                   headers={"Authorization": "Bearer " + token}, log_dir=log_dir)


def start_relay(upstream: str, threads: int, log_dir: Optional[str] = None) -> Service:
    port = free_port()
    argv = python_argv("-m", "toolkit.servers", "relay", "--port", str(port),
                       "--upstream", upstream, "--threads", str(threads))
    return Service("relay", argv, "http://127.0.0.1:%d/" % port, env=child_env(), log_dir=log_dir)


def start_adapter(runtime: Service, token: str, state_dir: str, *, threads: Optional[int] = None,
                  heartbeat: float = 15.0, extra: Sequence[str] = (), log_dir: Optional[str] = None) -> Service:
    port = free_port()
    argv = python_argv("-m", "iaccode_agui", "--a2a-url", runtime.url, "--a2a-token", token, "--port", str(port),
                       "--state-dir", state_dir, "--heartbeat-interval", str(heartbeat), *extra)
    if threads is not None:
        argv += ["--threads", str(threads)]
    env = child_env({"IAC_CODE_CONFIG_DIR": state_dir})
    return Service("adapter", argv, "http://127.0.0.1:%d/" % port, env=env, log_dir=log_dir)


def start_peer(template: str, runtime: Service, token: str, config_dir: str,
               log_dir: Optional[str] = None) -> Service:
    """The peer command line with ``{port}`` / ``{a2a_url}`` filled in; token and config dir by environment."""
    import shlex

    port = free_port()
    argv = [part.format(port=port, a2a_url=runtime.url, token=token) for part in shlex.split(template)]
    env = child_env({"IAC_CODE_AGUI_A2A_TOKEN": token, "IAC_CODE_CONFIG_DIR": config_dir})
    return Service("peer", argv, "http://127.0.0.1:%d/" % port, env=env, log_dir=log_dir)


def runtime_busy(runtime: "Service") -> Dict[str, int]:
    """The bench runtime's own count of requests running and of requests queued for a thread."""
    from .servers import BUSY_PATH

    with requests.Session() as session:
        session.trust_env = False     # loopback: never through a proxy from the environment
        return session.get(runtime.url.rstrip("/") + BUSY_PATH, timeout=5).json()


def wait_drained(runtime: "Service", timeout: float) -> int:
    """Wait until the runtime runs no request any more (at most ``timeout`` s); the count still running.

    A row's streams must not start while the previous row's are still held by the runtime: a slow path
    (the peer ends its 1,000 streams minutes after their silence) would otherwise hold the runtime's
    threads and connections, and the next row's streams would wait for them, measuring the previous row."""
    deadline = time.monotonic() + timeout
    while True:
        load = runtime_busy(runtime)
        left = load["busy"] + load["queued"]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.5)

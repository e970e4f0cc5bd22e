"""Real deployments as processes: the scripted runtime, gunicorn over the recipe, nginx over its template.

Used by the deployment tests and the worker crash soak.  Every process binds loopback port 0 (or a port
read back from its own log), logs to a file of its own and is stopped by its handle.  ``PinnedConnection``
is one HTTP/1.1 connection that never silently reconnects, so a test knows which gunicorn worker serves
each of its requests: the test config adds a ``pre_request`` hook that logs the worker pid next to the
request's ``X-Probe`` header (nothing of this reaches the adapter's API).
"""
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from typing import Any, Dict, Iterator, List, Optional, Sequence

from . import ROOT
from .procs import child_env, stop_process, wait_in_log
DEPLOY = os.path.join(ROOT, "iaccode_agui", "deploy")
RECIPE = os.path.join(DEPLOY, "gunicorn.conf.py")
NGINX_TEMPLATE = os.path.join(DEPLOY, "nginx.conf")

PROBE_HOOK = '''
exec(compile(open(%(recipe)r).read(), %(recipe)r, "exec"))


def pre_request(worker, req):
    probe = next((value for name, value in req.headers if name == "X-PROBE"), None)
    if probe:
        worker.log.info("probe %%s pid %%d", probe, worker.pid)
'''


class Process:
    """A child process with its own log file; ``stop`` sends SIGTERM and returns the exit status."""

    def __init__(self, command: Sequence[str], log_path: str, env: Optional[Dict[str, str]] = None) -> None:
        self.command, self.log_path = list(command), log_path
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT, env=env or child_env(),
                                         cwd=ROOT)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait_for(self, pattern: bytes, timeout: float = 20.0) -> "re.Match[bytes]":
        return wait_in_log(self.proc, self.log_path, pattern, timeout)

    def log(self) -> str:
        with open(self.log_path, "rb") as handle:
            return handle.read().decode("utf-8", "replace")

    def stop(self, timeout: float = 20.0) -> Optional[int]:
        return stop_process(self.proc, timeout)


class RuntimeProcess(Process):
    """``python -m iaccode_agui.demo``: the scripted A2A runtime, alone in its process."""

    def __init__(self, log_dir: str, token: str, slow_interval: float = 0.2, ping_interval: float = 0.5,
                 allowed_cwds: Sequence[str] = ()) -> None:
        self.token = token
        command = [sys.executable, "-m", "iaccode_agui.demo", "--port", "0", "--token", token, "--log-requests",
                   "--slow-interval", str(slow_interval), "--ping-interval", str(ping_interval)]
        for root in allowed_cwds:
            command += ["--allowed-cwd", root]
        super().__init__(command, os.path.join(log_dir, "runtime-%s.log" % uuid.uuid4().hex[:6]))
        self.url = self.wait_for(rb"(http://127\.0\.0\.1:\d+/)").group(1).decode()

    def calls(self, method: str, task_id: str) -> int:
        """How many times the runtime was asked ``method`` on ``task_id`` (from its printed request log)."""
        return self.log().count("a2a %s %s\n" % (method, task_id))

    def get_task(self, task_id: str) -> Dict[str, Any]:
        from iaccode_agui.a2a.client import A2AClient
        client = A2AClient(self.url, self.token)
        try:
            return client.get_task(task_id)
        finally:
            client.close()


class GunicornProcess(Process):
    """gunicorn over ``iaccode_agui/deploy/gunicorn.conf.py`` plus the pid-probe hook, on 127.0.0.1 port 0."""

    def __init__(self, log_dir: str, env: Dict[str, str], workers: int = 2, args: Sequence[str] = (),
                 config: Optional[str] = None, boot_timeout: float = 30.0, wait: bool = True) -> None:
        self.config = config or os.path.join(log_dir, "gunicorn-test.conf.py")
        if config is None:
            with open(self.config, "w") as handle:
                handle.write(PROBE_HOOK % {"recipe": RECIPE})
        command = [sys.executable, "-m", "gunicorn", "-c", self.config, "--bind", "127.0.0.1:0",
                   "--workers", str(workers)] + list(args)
        super().__init__(command, os.path.join(log_dir, "gunicorn-%s.log" % uuid.uuid4().hex[:6]), child_env(env))
        self.workers = workers
        if wait:
            found = self.wait_for(rb"Listening at: http://127\.0\.0\.1:(\d+)", boot_timeout)
            self.port = int(found.group(1))
            self.url = "http://127.0.0.1:%d/" % self.port
            self.wait_booted(boot_timeout)

    def worker_pids(self) -> List[int]:
        """Live worker processes (the arbiter's children), from /proc."""
        try:
            with open("/proc/%d/task/%d/children" % (self.pid, self.pid)) as handle:
                pids = [int(item) for item in handle.read().split()]
        except OSError:
            return []
        return [pid for pid in pids if _alive(pid)]

    def wait_booted(self, timeout: float = 30.0) -> List[int]:
        """Wait until every worker has loaded the app (each answers ``/health``)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pids = self.worker_pids()
            booted = set(int(p) for p in re.findall(r"worker (\d+): A2A runtime", self.log()))
            if len(pids) == self.workers and set(pids) <= booted:
                return pids
            time.sleep(0.05)
        raise RuntimeError("gunicorn workers did not boot:\n" + self.log()[-3000:])

    def pid_of(self, probe: str, timeout: float = 5.0) -> int:
        return int(self.wait_for(rb"probe " + probe.encode() + rb" pid (\d+)", timeout).group(1))


def _alive(pid: int) -> bool:
    try:
        with open("/proc/%d/stat" % pid) as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class NginxProcess(Process):
    """A real nginx, ``daemon off``, with its own prefix, config (rendered from the template) and pid file."""

    def __init__(self, prefix: str, listen_port: int, upstreams: Sequence[str],
                 binary: Optional[str] = None) -> None:
        binary = binary or nginx_binary()
        if binary is None:
            raise RuntimeError("nginx is not installed")
        for name in ("logs", "temp"):
            os.makedirs(os.path.join(prefix, name), exist_ok=True)
        self.conf = os.path.join(prefix, "nginx.conf")
        with open(self.conf, "w") as handle:
            handle.write(render_nginx_conf(listen="127.0.0.1:%d" % listen_port, upstreams=upstreams))
        self.url = "http://127.0.0.1:%d/" % listen_port
        self.error_log = os.path.join(prefix, "logs", "error.log")
        pid_file = os.path.join(prefix, "logs", "nginx.pid")
        globals_ = "daemon off; pid %s;%s" % (pid_file, " user root;" if os.geteuid() == 0 else "")
        super().__init__([binary, "-p", prefix + "/", "-e", os.path.join(prefix, "logs", "error.log"),
                          "-c", self.conf, "-g", globals_], os.path.join(prefix, "logs", "stdout.log"))
        deadline = time.monotonic() + 10
        while not os.path.exists(pid_file) and time.monotonic() < deadline and self.proc.poll() is None:
            time.sleep(0.02)
        if not os.path.exists(pid_file):
            with open(os.path.join(prefix, "logs", "error.log")) as handle:
                errors = handle.read()[-2000:]
            raise RuntimeError("nginx did not start (exit %s): %s" % (self.proc.poll(), errors))

    def upstream_failures(self) -> List[str]:
        """The error-log lines where nginx gave up on an upstream; a failover would hide a mis-pinned thread."""
        with open(self.error_log, errors="replace") as handle:
            return [line.rstrip() for line in handle if "upstream" in line and "[error]" in line]

    def stop(self, timeout: float = 10.0) -> Optional[int]:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)   # graceful shutdown for nginx
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(5)


def nginx_binary() -> Optional[str]:
    return shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx", "/usr/local/sbin/nginx")
                                          if os.access(p, os.X_OK)), None)


def render_nginx_conf(listen: str, upstreams: Sequence[str]) -> str:
    """The template with its two placeholders filled, as ``envsubst`` does (nginx's own ``$`` names stay)."""
    with open(NGINX_TEMPLATE) as handle:
        text = handle.read()
    servers = "\n        ".join("server %s max_fails=0;" % address for address in upstreams)
    return text.replace("${AGUI_LISTEN}", listen).replace("${AGUI_UPSTREAMS}", servers)


# ---- one pinned HTTP connection --------------------------------------------------------------------------

class PinnedConnection:
    """One keep-alive connection; a request on it after the server closed it fails instead of reconnecting."""

    def __init__(self, url: str, timeout: float = 30.0) -> None:
        match = re.match(r"http://([^:/]+):(\d+)/", url)
        assert match, url
        self.conn = http.client.HTTPConnection(match.group(1), int(match.group(2)), timeout=timeout)
        self.conn.connect()
        self._sock = self.conn.sock
        self.pid: Optional[int] = None

    def request(self, method: str, path: str, body: Any = None,
                headers: Optional[Dict[str, str]] = None) -> http.client.HTTPResponse:
        if self.conn.sock is None or self.conn.sock is not self._sock:
            raise ConnectionError("the pinned connection was closed by the server")
        data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        sent = {"Content-Type": "application/json", "Accept": "text/event-stream"} if data is not None else {}
        sent.update(headers or {})
        self.conn.request(method, path, body=data, headers=sent)
        return self.conn.getresponse()

    def identify(self, server: GunicornProcess) -> int:
        """Which worker owns this connection (a /health request carrying a probe id)."""
        probe = uuid.uuid4().hex
        response = self.request("GET", "/health", headers={"X-Probe": probe})
        response.read()
        assert response.status == 200, response.status
        self.pid = server.pid_of(probe)
        return self.pid

    def close(self) -> None:
        sock = self.conn.sock
        if sock is not None:
            try:
                sock.shutdown(2)
            except OSError:
                pass
        self.conn.close()


def connections_on_every_worker(server: GunicornProcess, timeout: float = 60.0) -> Dict[int, PinnedConnection]:
    """One identified connection per live worker pid: new connections until each worker accepted one.

    Which worker accepts a connection is the kernel's and the scheduler's choice; on a loaded machine one
    worker can win many times in a row.  So this waits for the condition (every live worker seen), with a
    short pause between tries that lets a descheduled worker reach its ``accept``, not a fixed count.
    """
    found: Dict[int, PinnedConnection] = {}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        live = set(server.worker_pids())
        for pid in [pid for pid in found if pid not in live]:
            found.pop(pid).close()                # a worker that was replaced meanwhile
        if len(found) == server.workers:
            return found
        conn = PinnedConnection(server.url)
        pid = conn.identify(server)
        if pid in found or pid not in live:
            conn.close()
            time.sleep(0.02)
        else:
            found[pid] = conn
    for conn in found.values():
        conn.close()
    raise AssertionError("only workers %s accepted a connection within %.0f s" % (sorted(found), timeout))


def sse_events(response: http.client.HTTPResponse, on_event: Any = None) -> Iterator[Dict[str, Any]]:
    """Parsed SSE events of a streamed response; ``_id`` holds the SSE id, comments come as ``{"type": ":"}``."""
    event_id: Optional[int] = None
    data: List[bytes] = []
    while True:
        line = response.readline()
        if not line:
            return
        line = line.rstrip(b"\r\n")
        if line.startswith(b":"):
            yield {"type": ":", "comment": line[1:].strip().decode()}
        elif line.startswith(b"id:"):
            event_id = int(line[3:].strip())
        elif line.startswith(b"data:"):
            data.append(line[5:].strip())
        elif not line and data:
            event = json.loads(b"\n".join(data))
            event["_id"] = event_id
            data = []
            yield event

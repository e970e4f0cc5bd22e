"""Choosing and owning the A2A runtime behind the adapter: an existing URL, the demo, or a managed child.

A managed ``iac-code a2a`` child is started the way the reference adapter does it (loopback, a free port,
a random bearer token, full thinking exposure, allowed roots passed on) and is stopped with the adapter.
"""
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from typing import List, Mapping, Optional

import requests

from iaccode_agui.config import ConfigError


class Upstream:
    """What the adapter talks to; ``close()`` stops whatever it started."""

    def __init__(self, url: str, token: Optional[str], description: str) -> None:
        self.url = url
        self.token = token
        self.description = description

    def close(self) -> None:
        pass


class DemoUpstream(Upstream):
    """The scripted runtime; with ``state_dir`` its sessions and tasks survive a restart like the real one's."""

    def __init__(self, state_dir: Optional[str] = None) -> None:
        from iaccode_agui.demo.server import DemoServer
        token = secrets.token_urlsafe(32)
        try:
            self._server = DemoServer.start(host="127.0.0.1", port=0, token=token, state_dir=state_dir)
        except OSError as exc:
            raise ConfigError("cannot use %s for the demo runtime's sessions: %s" % (state_dir, exc))
        super().__init__(self._server.url, token, "built-in scripted runtime (--demo) at %s" % self._server.url)

    def close(self) -> None:
        self._server.stop()


def free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# iac-code imports a large application before it answers /health: seconds on an idle machine, far more on
# a loaded one.  The wait ends as soon as the child answers or exits; this only bounds a hung start.
CHILD_STARTUP_TIMEOUT = 60.0


class ManagedChild(Upstream):
    """``iac-code a2a`` as a child process, ready once ``GET /health`` answers with the token."""

    def __init__(self, command: List[str], env: Mapping[str, str],
                 startup_timeout: float = CHILD_STARTUP_TIMEOUT) -> None:
        port = free_loopback_port()
        token = secrets.token_urlsafe(32)
        child_env = dict(env)
        child_env["IACCODE_A2A_HTTP_TOKEN"] = token
        if child_env.get("IAC_CODE_AGUI_ALLOWED_CWDS") and not child_env.get("IACCODE_A2A_ALLOWED_CWDS"):
            child_env["IACCODE_A2A_ALLOWED_CWDS"] = child_env["IAC_CODE_AGUI_ALLOWED_CWDS"]
        argv = list(command) + ["a2a", "--host", "127.0.0.1", "--port", str(port), "--thinking-exposure", "all"]
        # The child's own output goes to our stderr (the log), never into our stdout banner.
        self.process = subprocess.Popen(argv, env=child_env, start_new_session=True, stdin=subprocess.DEVNULL,
                                        stdout=sys.stderr.fileno(), stderr=sys.stderr.fileno())
        url = "http://127.0.0.1:%d/" % port
        super().__init__(url, token, "managed child `%s` at %s" % (" ".join(argv), url))
        try:
            self._wait_ready(startup_timeout)
        except Exception:
            self.close()
            raise

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        headers = {"Authorization": "Bearer %s" % self.token}
        while time.monotonic() < deadline:
            code = self.process.poll()
            if code is not None:
                raise ConfigError("the managed A2A runtime exited during start-up with code %s" % code)
            try:
                if requests.get(self.url + "health", headers=headers, timeout=0.5).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.1)
        raise ConfigError("the managed A2A runtime did not become ready within %.0f s (--a2a-startup-timeout)"
                          % timeout)

    def close(self) -> None:
        if self.process.poll() is not None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
        except OSError:
            self.process.terminate()
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except OSError:
                self.process.kill()
            self.process.wait(5)


def iac_code_command() -> Optional[List[str]]:
    path = shutil.which("iac-code")
    return [path] if path else None


def choose_upstream(*, a2a_url: Optional[str], a2a_token: Optional[str], demo: bool,
                    env: Mapping[str, str], demo_dir: Optional[str] = None,
                    startup_timeout: float = CHILD_STARTUP_TIMEOUT) -> Upstream:
    if a2a_url and demo:
        raise ConfigError("--demo and --a2a-url are mutually exclusive")
    if a2a_url:
        return Upstream(a2a_url, a2a_token, "A2A runtime at %s" % a2a_url)
    if demo:
        return DemoUpstream(demo_dir)
    command = iac_code_command()
    if command is not None:
        return ManagedChild(command, env, startup_timeout)
    raise ConfigError("no A2A runtime: pass --a2a-url URL (or IAC_CODE_AGUI_A2A_URL) for a running "
                      "`iac-code a2a`, install iac-code so it can be started as a managed child, or use --demo "
                      "for the built-in scripted runtime")

"""Start the genuine `iac-code a2a` 0.16.0 runtime, offline, once per test session.

The adapter is written against a dialect observed on the wire; these fixtures keep that
dialect honest by running the real runtime behind a scripted LLM. A missing venv or a
runtime that does not come up is a test FAILURE, never a skip: a silently skipped interop
suite would let CI go green without ever proving compatibility.
"""

import os
import secrets
import signal
import subprocess
import sys
import time
from typing import Any, Dict, Iterator, List, Optional

import pytest
import requests

from iaccode_agui.server.upstream import free_loopback_port
from tests.tools_loader import load_tool

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from fake_llm import FakeLLM  # noqa: E402  (needs the sys.path entry above)

HEALTH_TIMEOUT = 60.0
TERMINATE_GRACE = 5.0
# Variables from the caller's shell that would steer the runtime away from the fake LLM.
_SCRUBBED_PREFIXES = ("IAC_CODE_", "IACCODE_", "OPENAI_", "ALIBABA_CLOUD_", "DASHSCOPE_")


def _load_env_tool() -> Any:
    return load_tool("toolkit.iaccode_env")


def pytest_collection_modifyitems(config: Any, items: List[Any]) -> None:
    """Mark every test under tests/interop so `-m "not interop"` can leave them out."""
    prefix = HERE + os.sep
    for item in items:
        path = item.path if hasattr(item, "path") else item.fspath
        if str(path).startswith(prefix):
            item.add_marker(pytest.mark.interop)


def _tail(path: str, lines: int = 60) -> str:
    try:
        with open(path, "r", encoding="utf-8", errors="replace") as handle:
            return "".join(handle.readlines()[-lines:])
    except OSError as exc:
        return "(no log: %s)" % exc


class RealRuntime:
    """What a test needs to drive the running runtime and inspect its LLM traffic."""

    def __init__(self, url: str, token: str, workspace: str, fake_llm: FakeLLM,
                 proc: "subprocess.Popen[bytes]", log_path: str, config_dir: str,
                 start_seconds: float) -> None:
        self.url = url
        self.token = token
        self.workspace = workspace
        self.fake_llm = fake_llm
        self.proc = proc
        self.log_path = log_path
        self.config_dir = config_dir
        self.start_seconds = start_seconds

    def headers(self, extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
        """The headers every call to the runtime needs (A2A 1.0 plus the bearer)."""
        result = {"Authorization": "Bearer " + self.token, "A2A-Version": "1.0",
                  "Content-Type": "application/json"}
        if extra:
            result.update(extra)
        return result

    def log_tail(self, lines: int = 60) -> str:
        return _tail(self.log_path, lines)


def _runtime_env(llm: FakeLLM, config_dir: str, workspace: str, token: str) -> Dict[str, str]:
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(_SCRUBBED_PREFIXES)}
    env.update({
        "IAC_CODE_CONFIG_DIR": config_dir,
        "IAC_CODE_PROVIDER": "OpenAI Compatible",
        # Must not start with a known model prefix, or the runtime applies that vendor's rules.
        "IAC_CODE_MODEL": "fake-model",
        "IAC_CODE_BASE_URL": llm.base_url,
        "IAC_CODE_API_KEY": "sk-fake",
        "DISABLE_TELEMETRY": "1",
        "IAC_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "OTEL_SDK_DISABLED": "true",
        "IACCODE_A2A_ALLOWED_CWDS": workspace,
        "IACCODE_A2A_HTTP_TOKEN": token,
        "PYTHONUNBUFFERED": "1",
    })
    return env


def _stop(proc: "subprocess.Popen[bytes]") -> None:
    """Stop the runtime's whole process group: it may have spawned tool subprocesses."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=TERMINATE_GRACE)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=TERMINATE_GRACE)


def _wait_healthy(url: str, token: str, proc: "subprocess.Popen[bytes]", log_path: str) -> None:
    deadline = time.monotonic() + HEALTH_TIMEOUT
    last_error = "no attempt"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail("iac-code a2a exited with code %s before becoming healthy; log tail:\n%s"
                        % (proc.returncode, _tail(log_path)), pytrace=False)
        try:
            response = requests.get(url + "health", timeout=2,
                                    headers={"Authorization": "Bearer " + token})
            if response.status_code == 200:
                return
            last_error = "HTTP %d %s" % (response.status_code, response.text[:200])
        except requests.RequestException as exc:
            last_error = str(exc)
        time.sleep(0.2)
    pytest.fail("iac-code a2a not healthy after %.0f s (%s); log tail:\n%s"
                % (HEALTH_TIMEOUT, last_error, _tail(log_path)), pytrace=False)


@pytest.fixture(scope="session")
def real_a2a(tmp_path_factory: Any) -> Iterator[RealRuntime]:
    """The real runtime on a free loopback port, with its scripted LLM and a workspace."""
    env_tool = _load_env_tool()
    try:
        executable = env_tool.iaccode_executable()
    except Exception as exc:  # any build failure must fail the run, loudly
        pytest.fail("could not build the iac-code %s venv: %s"
                    % (env_tool.IACCODE_VERSION, exc), pytrace=False)

    base = tmp_path_factory.mktemp("iaccode-a2a")
    workspace = str(base / "workspace")
    config_dir = str(base / "config")
    os.makedirs(workspace)
    os.makedirs(config_dir)
    log_path = str(base / "runtime.log")
    token = secrets.token_urlsafe(24)
    port = free_loopback_port()
    url = "http://127.0.0.1:%d/" % port

    llm = FakeLLM().start()
    started = time.monotonic()
    log_file = open(log_path, "wb")
    proc = subprocess.Popen(
        [executable, "a2a", "--host", "127.0.0.1", "--port", str(port),
         "--thinking-exposure", "all"],
        cwd=workspace, env=_runtime_env(llm, config_dir, workspace, token),
        stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
        start_new_session=True)
    try:
        _wait_healthy(url, token, proc, log_path)
        runtime = RealRuntime(url, token, workspace, llm, proc, log_path, config_dir,
                              time.monotonic() - started)
        sys.stderr.write("[interop] iac-code a2a healthy at %s after %.1f s (log %s)\n"
                         % (url, runtime.start_seconds, log_path))
        yield runtime
    finally:
        _stop(proc)
        log_file.close()
        llm.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: Any, call: Any) -> Iterator[None]:
    """Attach the runtime's log tail to a failing interop test: the cause is often there."""
    outcome = yield
    report = outcome.get_result()
    if report.when != "call" or not report.failed:
        return
    runtime = item.funcargs.get("real_a2a") if hasattr(item, "funcargs") else None
    if isinstance(runtime, RealRuntime):
        report.sections.append(("iac-code a2a log tail", runtime.log_tail()))

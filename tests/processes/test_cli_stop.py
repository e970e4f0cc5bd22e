"""Stopping ``python -m iaccode_agui`` as an operator does: a first Ctrl-C or SIGTERM drains and says so, a second
one stops at once (the active runs cancelled cleanly, the state written, exit status 0)."""
import os
import signal
import time

import pytest
import requests

from iaccode_agui.state.store import ThreadStore
from iaccode_agui.server.upstream import free_loopback_port
from tests.adapter_process import post_run, run_body, start_cli
from tests.harness import SSEReader, wait_for


def _log(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as handle:
        return handle.read()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_second_signal_cancels_the_drain_and_stops_at_once(tmp_path, workspace, signum):
    state_dir, log_path = str(tmp_path / "state"), str(tmp_path / "adapter.log")
    env = dict(os.environ, IAC_CODE_CONFIG_DIR=str(tmp_path / "cfg"), IAC_CODE_AGUI_ALLOWED_CWDS=workspace)
    proc, port = start_cli(["--demo", "--state-dir", state_dir, "--drain-timeout", "60"], env, log_path)
    url = "http://127.0.0.1:%d/" % port
    try:
        reader = SSEReader(post_run(url, run_body(workspace, "slow please", "drained")))
        reader.until("TEXT_MESSAGE_CONTENT")
        proc.send_signal(signum)
        assert wait_for(lambda: "draining 1 active run(s)" in _log(log_path), 10), _log(log_path)
        assert requests.get(url + "health", timeout=5).json()["status"] == "draining"
        (line,) = [line for line in _log(log_path).splitlines() if "stopping (" in line]
        assert "(%s)" % signum.name in line and "again" in line and "--drain-timeout" in line, line
        assert proc.poll() is None                      # the first signal drains: the slow run goes on
        second = time.monotonic()
        proc.send_signal(signum)
        events = reader.until("RUN_ERROR", limit=15)
        assert proc.wait(15) == 0, _log(log_path)
        took = time.monotonic() - second
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
    print("stopped %.2f s after the second signal" % took)
    assert took < 10, took
    assert events[-1]["type"] == "RUN_ERROR", events[-1]
    assert "stopping now: cancelling 1 active run(s)" in _log(log_path)
    assert "Traceback" not in _log(log_path)
    state = ThreadStore(state_dir).load("drained")
    assert state is not None and state.active_run is None     # the cancelled run was written down as ended
    assert "iaccode_agui stopped" in proc.stdout.read().decode()


def test_a_runtime_that_does_not_answer_at_start_up_is_one_warning(tmp_path):
    """The server still starts (the runtime may come later); one line names the URL and ``/ready``."""
    silent = "http://127.0.0.1:%d/" % free_loopback_port()
    log_path = str(tmp_path / "adapter.log")
    env = dict(os.environ, IAC_CODE_CONFIG_DIR=str(tmp_path / "cfg"))
    proc, port = start_cli(["--a2a-url", silent, "--state-dir", str(tmp_path / "state")], env, log_path)
    try:
        assert wait_for(lambda: "WARNING" in _log(log_path), 10), _log(log_path)
        assert requests.get("http://127.0.0.1:%d/health" % port, timeout=5).status_code == 200
        ready = requests.get("http://127.0.0.1:%d/ready" % port, timeout=5)
        assert ready.status_code == 503 and ready.json()["failing"] == ["runtime"]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
    (warning,) = [line for line in _log(log_path).splitlines() if "WARNING" in line]
    assert silent in warning and "/ready" in warning and "Connection refused" in warning, warning

"""Without --a2a-url, an installed `iac-code` is started as a managed child (one command runs everything)
and stopped on exit."""
import os
import re
import signal
import subprocess
import sys
import time

import requests

from iaccode_agui.upstream import free_loopback_port
from tests.agui_checker import check_stream
from tests.interop.conftest import _load_env_tool, _runtime_env
from tests.interop.fake_llm import FakeLLM


def test_managed_iac_code_child(tmp_path):
    executable = _load_env_tool().iaccode_executable()
    workspace = str(tmp_path / "ws")
    os.makedirs(workspace)
    llm = FakeLLM().start()
    env = _runtime_env(llm, str(tmp_path / "cfg"), workspace, "unused")
    del env["IACCODE_A2A_HTTP_TOKEN"]           # the adapter makes its own random token for the child
    env["PATH"] = os.path.dirname(executable) + os.pathsep + env.get("PATH", "")
    port = free_loopback_port()
    log = open(str(tmp_path / "adapter.log"), "wb")   # the child logs a lot: a pipe could fill up and block it
    proc = subprocess.Popen([sys.executable, "-m", "iaccode_agui", "--port", str(port)], env=env,
                            stdout=subprocess.PIPE, stderr=log, start_new_session=True)
    try:
        assert "listening on http://127.0.0.1:%d/" % port in proc.stdout.readline().decode()
        upstream_line = proc.stdout.readline().decode()
        assert "managed child" in upstream_line and "--thinking-exposure all" in upstream_line
        child_url = re.search(r"at (http://127\.0\.0\.1:\d+/)", upstream_line).group(1)
        assert requests.get(child_url + "health", timeout=5).status_code == 401   # protected by its token
        body = {"threadId": "managed", "runId": "r1", "state": {}, "tools": [], "context": [],
                "messages": [{"id": "m1", "role": "user", "content": "hello managed child"}],
                "forwardedProps": {"iacCode": {"schemaVersion": 1, "rosInvocationId": "i", "cwd": workspace}}}
        response = requests.post("http://127.0.0.1:%d/" % port, json=body, timeout=120)
        events = check_stream(response.content)
        assert events[-1]["type"] == "RUN_FINISHED"
        assert "Your message was: hello managed child" in "".join(
            e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                requests.get(child_url + "health", timeout=1)
            except requests.ConnectionError:
                break
            time.sleep(0.2)
        else:
            raise AssertionError("the managed child is still serving after the adapter exited")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)
        llm.stop()
        log.close()

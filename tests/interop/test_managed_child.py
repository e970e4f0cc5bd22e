"""Without --a2a-url, an installed `iac-code` is started as a managed child (one command runs everything)
and stopped on exit."""
import os
import re
import signal
from typing import List

import requests

from tests.adapter_process import start_cli
from tests.agui_checker import check_stream
from tests.interop.conftest import _load_env_tool, _runtime_env
from tests.interop.fake_llm import FakeLLM
from tests.tools_loader import load_tool


def test_managed_iac_code_child(tmp_path):
    executable = _load_env_tool().iaccode_executable()
    workspace = str(tmp_path / "ws")
    os.makedirs(workspace)
    llm = FakeLLM().start()
    env = _runtime_env(llm, str(tmp_path / "cfg"), workspace, "unused")
    del env["IACCODE_A2A_HTTP_TOKEN"]           # the adapter makes its own random token for the child
    env["PATH"] = os.path.dirname(executable) + os.pathsep + env.get("PATH", "")
    # The child's start-up is a wait for its /health (or its exit); on a loaded machine it takes long.
    env["IAC_CODE_AGUI_A2A_STARTUP_TIMEOUT"] = "300"
    # The child logs a lot: a pipe could fill up and block it, so its output goes to a file.
    proc, port = start_cli([], env, str(tmp_path / "adapter.log"), start_new_session=True)
    try:
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
        children = _children(proc.pid)
        assert len(children) == 1, children
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
        # The adapter stops and reaps its child before it exits.  (Probing the child's port instead would
        # race with any other process that gets that port once it is free.)
        assert not load_tool("toolkit.deploy")._alive(children[0]), "the managed child outlived the adapter"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)
        llm.stop()


def _children(pid: int) -> List[int]:
    found: List[int] = []
    for task in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/children" % (pid, task)) as handle:
                found.extend(int(item) for item in handle.read().split())
        except FileNotFoundError:
            continue        # a thread that ended meanwhile has no children to report
    return found



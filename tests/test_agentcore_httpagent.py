"""The official ``@ag-ui/client`` HttpAgent (Node) against ``/ag-ui/agent``, with no forwardedProps at all.

The package is test-only: ``.ci/run`` installs it into ``~/.cache/iaccode_agui/npm`` and this module's
fixture does the same when it is missing.  Only a machine without ``node`` skips, saying so.
"""
import json
import os
import shutil
import subprocess

import pytest

from tests.harness import wait_for

HERE = os.path.dirname(os.path.abspath(__file__))
NODE_DIR = os.path.join(HERE, "node")
CACHE = os.path.join(os.path.expanduser("~"), ".cache", "iaccode_agui", "npm")


def _pinned_version() -> str:
    with open(os.path.join(NODE_DIR, "package.json"), encoding="utf-8") as handle:
        return json.load(handle)["dependencies"]["@ag-ui/client"]


def _installed_version() -> str:
    try:
        with open(os.path.join(CACHE, "node_modules", "@ag-ui", "client", "package.json"), encoding="utf-8") as handle:
            return json.load(handle).get("version", "")
    except (OSError, ValueError):
        return ""


@pytest.fixture(scope="session")
def ag_ui_client_dir() -> str:
    if shutil.which("node") is None:
        pytest.skip("node is not installed: the @ag-ui/client HttpAgent test needs Node.js 18+")
    if _installed_version() != _pinned_version():
        npm = shutil.which("npm")
        assert npm is not None, "node is installed but npm is not: cannot install @ag-ui/client"
        os.makedirs(CACHE, exist_ok=True)
        shutil.copy(os.path.join(NODE_DIR, "package.json"), os.path.join(CACHE, "package.json"))
        done = subprocess.run([npm, "install", "--no-audit", "--no-fund", "--silent"], cwd=CACHE,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, "npm install of @ag-ui/client failed:\n%s%s" % (done.stdout, done.stderr)
    assert _installed_version() == _pinned_version()
    return CACHE


def test_httpagent_completes_a_run_and_an_interrupt_resume(ag_ui_client_dir, adapter_factory, workspace):
    adapter = adapter_factory(default_cwd=workspace, auth_token="node-key")
    env = dict(os.environ, NODE_PATH=os.path.join(ag_ui_client_dir, "node_modules"),
               SUPPRESS_TRANSFORMATION_WARNINGS="true")
    done = subprocess.run(["node", os.path.join(NODE_DIR, "httpagent_check.cjs"), adapter.url + "ag-ui/agent",
                           "node-key"], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    plain = report["plain"]
    assert plain["types"][0] == "RUN_STARTED" and plain["types"][-2:] == ["CUSTOM", "RUN_FINISHED"]
    assert "You said: hello from node" in plain["text"]
    assert plain["secondTypes"][-1] == "RUN_FINISHED" and "You said: and once more" in plain["secondText"]
    assert "assistant" in plain["messageRoles"]
    interrupt = report["interrupt"]
    assert interrupt["outcome"] == "interrupt" and interrupt["reason"] == "tool_call"
    assert interrupt["resumedTypes"][-1] == "RUN_FINISHED" and interrupt["resumedOutcome"] == {"type": "success"}
    assert interrupt["pendingAfter"] == 0
    assert os.path.exists(os.path.join(workspace, "hello.txt"))


def test_httpagent_stops_by_dropping_the_stream_or_by_the_documented_subclass(ag_ui_client_dir, adapter_factory,
                                                                               workspace, demo):
    """abortRun() of a stock HttpAgent only drops the stream: the next message on the thread stops the run
    (before: 409 SESSION_UNAVAILABLE until the run ended).  The subclass of docs/resume-and-stop.rst also
    posts the stop route, and the run ends at once."""
    adapter = adapter_factory(default_cwd=workspace, auth_token="node-key")
    env = dict(os.environ, NODE_PATH=os.path.join(ag_ui_client_dir, "node_modules"),
               SUPPRESS_TRANSFORMATION_WARNINGS="true")
    done = subprocess.run(["node", os.path.join(NODE_DIR, "stop_check.cjs"), adapter.url + "ag-ui/agent", "node-key"],
                          capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["plain"]["next"][0] == "RUN_STARTED" and report["plain"]["next"][-1] == "RUN_FINISHED"
    plain = adapter.app.manager.find_run("node-stop-plain", "node-run-plain")
    assert plain.worker.finished and plain.worker.error_code == "CANCELLED"
    assert report["stopping"]["stopStatus"] == 204
    stopped = adapter.app.manager.find_run("node-stop-route", "node-run-stopping")
    assert wait_for(lambda: stopped.worker.finished, 10) and stopped.worker.error_code == "CANCELLED"
    assert len([call for call in demo.runtime.requests_log if call[0] == "CancelTask"]) == 2
    with open(os.path.join(HERE, "..", "docs", "resume-and-stop.rst"), encoding="utf-8") as handle:
        documented = handle.read()
    with open(os.path.join(NODE_DIR, "stop_check.cjs"), encoding="utf-8") as handle:
        script = handle.read()
    subclass = script[script.index("class StoppingHttpAgent"):script.index("\n}\n") + 2]
    assert all(line.strip() in documented for line in subclass.splitlines() if line.strip())

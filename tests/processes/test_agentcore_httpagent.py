"""The official ``@ag-ui/client`` HttpAgent (Node) against ``/ag-ui/agent``, with no forwardedProps at all.

The package is test-only: ``.ci/run`` installs it into ``~/.cache/iaccode_agui/npm`` and the
``ag_ui_client_modules`` fixture (``tests/processes/conftest.py``) does the same when it is missing.  Only a
machine without ``node`` skips, saying so.
"""
import json
import os
import subprocess

from tests.harness import wait_for
from tests.node_packages import NODE_DIR, node_env


def test_httpagent_completes_a_run_and_an_interrupt_resume(ag_ui_client_modules, adapter_factory, workspace):
    adapter = adapter_factory(default_cwd=workspace, auth_token="node-key")
    env = node_env(ag_ui_client_modules)
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


def test_httpagent_stops_by_dropping_the_stream_or_by_the_documented_subclass(ag_ui_client_modules, adapter_factory,
                                                                               workspace, demo):
    """abortRun() of a stock HttpAgent only drops the stream: the next message on the thread stops the run
    (before: 409 SESSION_UNAVAILABLE until the run ended).  The subclass of docs/resume-and-stop.rst also
    posts the stop route, and the run ends at once."""
    adapter = adapter_factory(default_cwd=workspace, auth_token="node-key")
    env = node_env(ag_ui_client_modules)
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
    with open(os.path.join(NODE_DIR, "..", "..", "docs", "resume-and-stop.rst"), encoding="utf-8") as handle:
        documented = handle.read()
    with open(os.path.join(NODE_DIR, "stop_check.cjs"), encoding="utf-8") as handle:
        script = handle.read()
    subclass = script[script.index("class StoppingHttpAgent"):script.index("\n}\n") + 2]
    assert all(line.strip() in documented for line in subclass.splitlines() if line.strip())

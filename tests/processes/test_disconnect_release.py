"""A client that drops its stream and posts again: quick release, Retry-After on THREAD_BUSY, one log line."""
import os
import signal
import subprocess
import sys
import time

import requests

from iaccode_agui.errors import AguiError
from iaccode_agui.server.upstream import free_loopback_port
from tests.harness import SSEReader, wait_for


def test_thread_busy_tells_the_client_when_to_retry(adapter):
    assert AguiError("THREAD_BUSY").headers["Retry-After"] == "1"
    response = adapter.post(adapter.body("sleep 3", thread="busy"), stream=True)
    reader = SSEReader(response)
    reader.until("RUN_STARTED")
    try:
        busy = adapter.post(adapter.body("hello", thread="busy"))
        assert busy.status_code == 409 and busy.json()["error"]["code"] == "THREAD_BUSY"
        assert busy.headers["Retry-After"] == "1"
    finally:
        reader.close()


def test_a_new_run_right_after_a_disconnect_is_admitted(adapter_factory, demo):
    # A slow poll: the lost connection would otherwise be noticed only seconds later.
    adapter = adapter_factory(disconnect_poll=5.0)
    response = adapter.post(adapter.body("sleep 10", thread="again"), stream=True)
    reader = SSEReader(response)
    reader.until("CUSTOM")
    old = adapter.app.manager.live_runs()[0]
    reader.close()
    assert wait_for(lambda: old.channel.client_gone(), 2)   # the server saw the socket close
    started = time.monotonic()
    events = adapter.run(adapter.body("hello", thread="again"))
    assert events[-1]["type"] == "RUN_FINISHED"
    assert time.monotonic() - started < 3
    assert wait_for(lambda: old.worker.finished, 5)
    assert old.worker.error_code == "CANCELLED"


def test_a_disconnect_with_a_reconnect_grace_still_waits_for_the_re_attach(adapter_factory):
    adapter = adapter_factory(disconnect_poll=0.1, reconnect_grace=30)
    response = adapter.post(adapter.body("sleep 10", thread="grace"), stream=True)
    reader = SSEReader(response)
    reader.until("CUSTOM")
    reader.close()
    time.sleep(0.5)
    busy = adapter.post(adapter.body("hello", thread="grace"))
    assert busy.status_code == 409 and busy.headers["Retry-After"] == "1"
    adapter.app.manager.cancel_all()


def test_one_client_disconnected_line_per_disconnect(tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    port = free_loopback_port()
    env = dict(os.environ, IAC_CODE_CONFIG_DIR=str(tmp_path / "cfg"), IAC_CODE_AGUI_ALLOWED_CWDS=str(workspace))
    proc = subprocess.Popen([sys.executable, "-m", "iaccode_agui", "--demo", "--port", str(port)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        proc.stdout.readline()
        url = "http://127.0.0.1:%d/" % port
        body = {"threadId": "d", "runId": "r", "state": {}, "tools": [], "context": [],
                "messages": [{"id": "m", "role": "user", "content": "slow"}],
                "forwardedProps": {"iacCode": {"schemaVersion": 1, "rosInvocationId": "i", "cwd": str(workspace)}}}
        response = requests.post(url, json=body, stream=True, timeout=30)
        SSEReader(response).until("TEXT_MESSAGE_CONTENT")
        response.close()
        time.sleep(2.0)   # both servers have noticed and logged by now
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    assert err.count("Client disconnected") == 1, err

"""Beyond the reference: re-attach with Last-Event-ID, capacity, drain on SIGTERM, metrics and access log."""
import json
import logging
import os
import signal
import subprocess
import sys
import time

import requests

from iaccode_agui.server.upstream import free_loopback_port
from tests.agui_checker import check_sequence, parse_sse
from tests.harness import SSEReader, wait_for


def test_reattach_replays_after_last_event_id(adapter_factory):
    adapter = adapter_factory(reconnect_grace=5.0)
    body = adapter.body("sleep 3", thread="re")   # longer than a re-attach's wait for a takeover
    reader = SSEReader(adapter.post(body, stream=True))
    reader.until("RUN_STARTED")
    _, first_ids, _ = parse_sse(reader.raw)
    reader.close()
    time.sleep(0.2)
    without_header = adapter.post(body)
    assert without_header.status_code == 409 and without_header.json()["error"]["code"] == "DUPLICATE_RUN_ID"
    second = adapter.post(body, headers={"Last-Event-ID": str(first_ids[-1])}, stream=True)
    assert second.status_code == 200
    again = adapter.post(body, headers={"Last-Event-ID": "0"})
    assert again.status_code == 409 and again.json()["error"]["code"] == "RUN_ALREADY_ATTACHED"
    raw = second.content
    events, ids, _ = parse_sse(raw)
    assert ids[0] == first_ids[-1] + 1
    assert events[-1]["type"] == "RUN_FINISHED"
    full = [{"type": "RUN_STARTED", "threadId": "re", "runId": body["runId"]}] + events
    check_sequence(full)
    changed = dict(body, messages=[{"id": "m-x", "role": "user", "content": "different"}])
    conflict = adapter.post(changed, headers={"Last-Event-ID": "0"})
    assert conflict.status_code == 409 and conflict.json()["error"]["code"] == "RUN_ID_CONFLICT"


def test_reattach_after_restart_replays_from_the_run_log(adapter_factory, tmp_path):
    state_dir = str(tmp_path / "st")
    first = adapter_factory(state_dir=state_dir)
    body = first.body("hi", thread="rt")
    whole = first.post(body).content
    first.stop()
    second = adapter_factory(state_dir=state_dir)
    answer = second.post(body, headers={"Last-Event-ID": "3"})
    assert answer.status_code == 200
    _, ids, _ = parse_sse(answer.content)
    assert ids[0] == 4 and answer.content == whole[whole.index(b"id: 4\n"):]
    bad = second.post(body, headers={"Last-Event-ID": "abc"})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "INVALID_INPUT"


def test_reattach_after_restart_without_a_run_log_is_terminal(adapter_factory, tmp_path):
    state_dir = str(tmp_path / "st")
    first = adapter_factory(state_dir=state_dir, run_log_max_mb=0)
    body = first.body("hi", thread="rt")
    first.run(body)
    first.stop()
    second = adapter_factory(state_dir=state_dir, run_log_max_mb=0)
    answer = second.post(body, headers={"Last-Event-ID": "3"})
    assert answer.status_code == 409 and answer.json()["error"]["code"] == "RUN_ALREADY_TERMINAL"


def test_disconnect_within_grace_lets_the_run_finish(adapter_factory, demo):
    adapter = adapter_factory(reconnect_grace=2.0)
    reader = SSEReader(adapter.post(adapter.body("sleep 1", thread="g"), stream=True))
    reader.until("RUN_STARTED")
    reader.close()
    assert wait_for(lambda: adapter.app.manager.active_count() == 0, 5)
    assert not any(method == "CancelTask" for method, _ in demo.runtime.requests_log)
    assert adapter.app.store.load("g").active_run is None


def test_capacity_limit_answers_429(adapter_factory):
    adapter = adapter_factory(max_active_runs=1)
    reader = SSEReader(adapter.post(adapter.body("slow", thread="cap1"), stream=True))
    reader.until("TEXT_MESSAGE_CONTENT")
    full = adapter.post(adapter.body("hi", thread="cap2"))
    assert full.status_code == 429 and full.json()["error"]["code"] == "RUNTIME_CAPACITY_EXCEEDED"
    assert full.headers["Retry-After"] == "1"
    reader.close()
    assert wait_for(lambda: adapter.app.manager.active_count() == 0, 5)
    assert adapter.run(adapter.body("hi", thread="cap2"))[-1]["type"] == "RUN_FINISHED"


def test_metrics_and_access_log(adapter, caplog):
    caplog.set_level(logging.INFO, logger="iaccode_agui.access")
    adapter.run(adapter.body("hi", thread="m1", run="run-m1"))
    adapter.run(adapter.body("please fail", thread="m2"))
    adapter.post(b"{", headers={"Content-Type": "application/json"})
    text = requests.get(adapter.url + "metrics", timeout=5).text
    assert "agui_runs_started_total 2" in text
    assert 'agui_runs_finished_total{outcome="success"} 1' in text
    assert 'agui_runs_errored_total{code="A2A_EXECUTION_FAILED"} 1' in text
    assert 'agui_admission_rejections_total{code="INVALID_JSON"} 1' in text
    assert "agui_active_runs 0" in text
    assert 'agui_upstream_errors_total{code="A2A_EXECUTION_FAILED"} 1' in text
    sent = int(next(line.split()[-1] for line in text.splitlines() if line.startswith("agui_events_sent_total")))
    assert sent >= 10
    lines = [json.loads(record.getMessage()) for record in caplog.records if record.name == "iaccode_agui.access"]
    run_line = next(line for line in lines if line.get("run") == "run-m1")
    assert run_line["status"] == 200 and run_line["outcome"] == "success" and run_line["thread"] == "m1"
    assert any(line["status"] == 400 for line in lines)


def test_cli_demo_drains_on_sigterm(tmp_path):
    port = free_loopback_port()
    workspace = tmp_path / "ws"
    workspace.mkdir()
    env = dict(os.environ, IAC_CODE_CONFIG_DIR=str(tmp_path / "cfg"), IAC_CODE_AGUI_ALLOWED_CWDS=str(workspace))
    proc = subprocess.Popen([sys.executable, "-m", "iaccode_agui", "--demo", "--port", str(port),
                             "--drain-timeout", "10"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        banner = proc.stdout.readline().decode()
        assert "listening on http://127.0.0.1:%d/" % port in banner
        assert "scripted runtime" in proc.stdout.readline().decode()
        url = "http://127.0.0.1:%d/" % port
        assert requests.get(url + "health", timeout=5).json()["status"] == "ok"
        body = {"threadId": "d", "runId": "r", "state": {}, "tools": [], "context": [],
                "messages": [{"id": "m", "role": "user", "content": "sleep 1"}],
                "forwardedProps": {"iacCode": {"schemaVersion": 1, "rosInvocationId": "i", "cwd": str(workspace)}}}
        response = requests.post(url, json=body, stream=True, timeout=30)
        reader = SSEReader(response)
        reader.until("RUN_STARTED")
        proc.send_signal(signal.SIGTERM)
        assert wait_for(lambda: requests.get(url + "health", timeout=2).json()["status"] == "draining", 5)
        refused = requests.post(url, json=dict(body, threadId="other", runId="r2"), timeout=5)
        assert refused.status_code == 503 and refused.json()["error"]["code"] == "RUNTIME_DRAINING"
        assert refused.headers["Retry-After"]
        events = reader.until("RUN_FINISHED")
        assert events[-1]["type"] == "RUN_FINISHED"
        assert proc.wait(20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)


def test_cli_refuses_non_loopback_and_missing_upstream(tmp_path):
    env = dict(os.environ, IAC_CODE_CONFIG_DIR=str(tmp_path / "cfg"), PATH="/nonexistent")
    bad = subprocess.run([sys.executable, "-m", "iaccode_agui", "--a2a-url", "http://127.0.0.1.example.com/"],
                         env=env, capture_output=True, timeout=30)
    assert bad.returncode == 2 and b"loopback" in bad.stderr
    none = subprocess.run([sys.executable, "-m", "iaccode_agui"], env=env, capture_output=True, timeout=30)
    assert none.returncode == 2 and b"--a2a-url" in none.stderr and b"--demo" in none.stderr
    helped = subprocess.run([sys.executable, "-m", "iaccode_agui", "--help"], capture_output=True, timeout=30)
    assert helped.returncode == 0
    for needle in (b"--a2a-url", b"--state-dir", b"IAC_CODE_AGUI_AUTH_TOKEN", b"IAC_CODE_AGUI_ALLOWED_CWDS",
                   b"--heartbeat-interval", b"--threads", b"--demo", b"--interrupt-ttl"):
        assert needle in helped.stdout


def test_cli_idle_shutdown(tmp_path):
    env = dict(os.environ, IAC_CODE_CONFIG_DIR=str(tmp_path / "cfg"))
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "iaccode_agui", "--demo", "--port", str(free_loopback_port()),
                           "--idle-shutdown", "1"], env=env, capture_output=True, timeout=30)
    assert done.returncode == 0 and b"stopped" in done.stdout
    assert time.monotonic() - started < 15

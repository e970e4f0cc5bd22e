"""A restarted demo runtime continues the threads the adapter remembers, like a restarted iac-code."""
import json
import os
import signal

import pytest
import requests

from iaccode_agui.demo import DemoServer
from tests.adapter_process import start_cli
from tests.harness import Adapter, interrupt_of, session_of


@pytest.fixture
def restartable(tmp_path, workspace):
    """(start, adapter state dir): ``start()`` brings up demo + adapter on the same two directories."""
    running = []
    runtime_dir = str(tmp_path / "demo-runtime")

    def start():
        for item in reversed(running):
            item.stop()
        running.clear()
        demo = DemoServer.start(token="demo-token", ping_interval=0.5, slow_interval=0.2, state_dir=runtime_dir)
        adapter = Adapter(demo.url, demo.token, str(tmp_path / "state"), workspace)
        running.extend([demo, adapter])
        return demo, adapter

    yield start
    for item in reversed(running):
        item.stop()


def test_a_new_turn_after_a_restart_continues_the_thread(restartable):
    _, adapter = restartable()
    first = adapter.run(adapter.body("hello", thread="kept"))
    _, adapter = restartable()
    again = adapter.run(adapter.body("hello again", thread="kept"))
    assert again[-1]["type"] == "RUN_FINISHED", again[-1]
    assert session_of(again)["sessionId"] == session_of(first)["sessionId"]


def test_an_interrupt_survives_a_restart_of_both(restartable, workspace):
    _, adapter = restartable()
    interrupt = interrupt_of(adapter.run(adapter.body("please write a file", thread="int")))
    _, adapter = restartable()
    resumed = adapter.run(adapter.body(None, thread="int", resume=[
        {"interruptId": interrupt["id"], "status": "resolved", "payload": {"decision": "allow_once"}}]))
    assert resumed[-1]["type"] == "RUN_FINISHED" and resumed[-1]["outcome"]["type"] == "success", resumed[-1]
    assert os.path.exists(os.path.join(workspace, "hello.txt"))
    assert adapter.run(adapter.body("hello", thread="int"))[-1]["type"] == "RUN_FINISHED"


def test_a_turn_cut_by_the_restart_fails_and_the_thread_goes_on(restartable):
    _, adapter = restartable()
    response = adapter.post(adapter.body("sleep 30", thread="cut"), stream=True)
    for line in response.iter_lines():
        if b"sessionId" in line:
            break
    response.close()
    task_id = adapter.app.store.load("cut").execution.task_id
    demo, adapter = restartable()
    assert demo.runtime.store.get(task_id).terminal
    events = adapter.run(adapter.body("hello", thread="cut"))
    assert events[-1]["type"] == "RUN_FINISHED", events[-1]


def test_runtime_files_are_private_and_bounded(tmp_path):
    from iaccode_agui.demo.persistence import RuntimeDisk
    disk = RuntimeDisk(str(tmp_path / "rt"), max_tasks=5)
    for number in range(12):
        disk.save_task({"id": "task-%02d" % number})
        os.utime(os.path.join(disk.tasks_dir, "task-%02d.json" % number), (number, number))
    assert len(disk.load_tasks()) == 5
    assert (os.stat(disk.directory).st_mode & 0o777) == 0o700
    disk.save_task({"id": "../escape"})
    assert not os.path.exists(str(tmp_path / "escape.json"))
    assert os.stat(os.path.join(disk.tasks_dir, "task-11.json")).st_mode & 0o777 == 0o600


def test_the_cli_demo_keeps_its_runtime_next_to_its_state(tmp_path, workspace):
    state_dir = tmp_path / "state"
    env = dict(os.environ, IAC_CODE_CONFIG_DIR=str(tmp_path / "cfg"), IAC_CODE_AGUI_ALLOWED_CWDS=workspace)
    log_path = str(tmp_path / "adapter.log")

    def one_life(run_id):
        proc, port = start_cli(["--demo", "--state-dir", str(state_dir)], env, log_path)
        try:
            body = {"threadId": "t1", "runId": run_id, "state": {}, "tools": [], "context": [],
                    "messages": [{"id": "m-" + run_id, "role": "user", "content": "hello"}],
                    "forwardedProps": {"iacCode": {"schemaVersion": 1, "rosInvocationId": "inv-1", "cwd": workspace}}}
            response = requests.post("http://127.0.0.1:%d/" % port, json=body, timeout=60)
            events = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: ")]
            return response.status_code, events[-1]["type"] if events else response.text
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.communicate(timeout=60)

    assert one_life("r1") == (200, "RUN_FINISHED")
    assert one_life("r2") == (200, "RUN_FINISHED")
    assert os.path.isdir(state_dir / "demo-runtime" / "tasks")


def test_a_task_saved_mid_turn_comes_back_failed(tmp_path):
    import time

    from iaccode_agui.demo.persistence import RuntimeDisk
    from iaccode_agui.demo.tasks import FAILED, RESTARTED_TEXT, TaskStore
    disk = RuntimeDisk(str(tmp_path / "rt"))
    disk.save_sessions({"ctx": "sess"})
    disk.save_task({"id": "task-1", "contextId": "ctx", "sessionId": "sess", "status": {"state": "TASK_STATE_WORKING"},
                    "iac": {"iacCodeSessionId": "sess"}, "scenario": "slow"})
    store = TaskStore(time.monotonic, disk=disk, scenario_named=lambda name: None)
    task = store.get("task-1")
    assert task.state == FAILED and task.status["message"]["parts"][0]["text"] == RESTARTED_TEXT
    assert store.knows_session("sess") and store.create("ctx").session_id == "sess"

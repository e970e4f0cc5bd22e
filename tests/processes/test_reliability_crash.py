"""Crashes: ``kill -9`` of the adapter process at random and at chosen points, restart on the same state dir.

The soak (``tools/crash_soak.py``) runs here with a CI-sized kill count.  The full variant is one command::

    IACCODE_AGUI_SOAK_KILLS=50 python -m pytest tests/processes/test_reliability_crash.py -m soak
    # or, with the printed table:  python tools/crash_soak.py --kills 50

The focused tests pin the kill to one moment each, so a regression names its cause instead of hiding in
the soak's randomness.
"""
import os
import time
import uuid
from typing import Any, Dict, List, Optional

import pytest
import requests

from iaccode_agui.state.store import ThreadStore
from tests.harness import wait_for
from tests.tools_loader import load_tool





soak = load_tool("crash_soak")


@pytest.mark.soak
def test_crash_soak_loses_nothing():
    kills = int(os.environ.get("IACCODE_AGUI_SOAK_KILLS", "10"))
    seed = os.environ.get("IACCODE_AGUI_SOAK_SEED")
    report = soak.run_soak(kills, int(seed) if seed else None)
    text = soak.render(report)
    print(text)
    assert report["ok"], text
    assert not report["known_bugs"], text
    counts = report["counts"]
    assert report["kills"] == kills and report["lost_count"] == 0 and report["double_executions"] == 0
    # The soak must really have exercised what it claims to check.
    assert counts["interrupts announced"] > 0 and counts["resumed ok"] > 0, text
    # A stream cut by a kill is either re-attached to its end (as the terminal client does) or left cut.
    cut = counts.get("streams cut by a kill", 0) + counts.get("cut streams completed by a re-attach", 0)
    assert cut > 0 and counts["kills aimed at a slow answer"] >= 1, text
    assert counts["run ids re-posted after restart"] > 0 and counts["state files checked"] > 0, text
    assert counts["threads usable at the end"] > 0, text


# ---- focused kills ------------------------------------------------------------------------------------


class Client:
    """An AG-UI client of an adapter process that keeps every body it sent."""

    def __init__(self, adapter: Any, workspace: str) -> None:
        self.adapter = adapter
        self.workspace = workspace
        self.session = requests.Session()

    def body(self, thread: str, text: Optional[str], resume: Optional[List[Dict[str, Any]]] = None) -> Dict[str, Any]:
        messages = [] if text is None else [{"id": "m-" + uuid.uuid4().hex[:8], "role": "user", "content": text}]
        body: Dict[str, Any] = {"threadId": thread, "runId": "run-" + uuid.uuid4().hex[:10], "state": {},
                                "messages": messages, "tools": [], "context": [], "forwardedProps": {"iacCode": {
                                    "schemaVersion": 1, "rosInvocationId": "inv-1", "cwd": self.workspace}}}
        if resume is not None:
            body["resume"] = resume
        return body

    def run(self, body: Dict[str, Any], on_event: Any = None) -> Any:
        return soak.post_run(self.session, self.adapter.url, body, on_event)


@pytest.fixture
def adapter_proc(demo, tmp_path, workspace):
    proc = soak.AdapterProcess(demo.url, str(tmp_path / "state"), workspace, str(tmp_path), token=demo.token)
    proc.start()
    yield proc
    if proc.proc is not None and proc.proc.poll() is None:
        proc.proc.kill()
        proc.proc.wait(5)


def _allow(interrupt_id: str) -> List[Dict[str, Any]]:
    return [{"interruptId": interrupt_id, "status": "resolved", "payload": {"decision": "allow_once"}}]


def test_orphan_of_a_kill_during_a_slow_answer_is_cancelled_when_the_thread_is_next_used(
        adapter_proc, demo, workspace):
    client = Client(adapter_proc, workspace)
    store = ThreadStore(adapter_proc.state_dir)
    seen: Dict[str, Any] = {}
    delta = []

    def watch(event: Dict[str, Any]) -> None:
        soak.remember_session(event, seen)
        if event["type"] == "TEXT_MESSAGE_CONTENT" and not delta:
            delta.append(event)
            adapter_proc.kill()   # from inside the stream: the adapter dies mid-answer

    cut_body = client.body("orphan", "slow please")
    cut = client.run(cut_body, on_event=watch)
    assert cut.dropped and delta and seen.get("taskId")
    task_id, execution_id = seen["taskId"], seen["executionId"]
    state = store.load("orphan")
    assert state.active_run is not None and state.execution.task_id == task_id
    assert not store.run_lease_is_held("orphan"), "the kernel must have dropped the dead owner's lease"
    assert not demo.runtime.store.get(task_id).terminal, "the orphaned task should still be running upstream"

    adapter_proc.start()
    time.sleep(0.5)   # recovery is lazy: a restart alone must not touch the orphan
    assert ("CancelTask", task_id) not in demo.runtime.requests_log

    after = client.run(client.body("orphan", "hello again"))
    assert after.status == 200 and after.final["type"] == "RUN_FINISHED", (after.status, after.code, after.events)
    assert after.final["outcome"] == {"type": "success"}
    assert ("CancelTask", task_id) in demo.runtime.requests_log
    assert wait_for(lambda: demo.runtime.store.get(task_id).terminal, 5)
    state = store.load("orphan")
    assert execution_id in state.terminal_execution_ids and state.active_run is None
    assert state.execution.execution_id != execution_id
    assert after.session()["executionId"] == state.execution.execution_id
    # The cut run's id stays used after the restart.
    reused = client.run(cut_body)
    assert reused.status == 409 and reused.code == "DUPLICATE_RUN_ID"
    assert adapter_proc.terminate() == 0


def test_interrupt_announced_before_a_kill_resumes_after_restart(adapter_proc, demo, workspace):
    client = Client(adapter_proc, workspace)
    first = client.run(client.body("announced", "please write"))
    assert len(first.interrupts) == 1
    interrupt = first.interrupts[0]
    adapter_proc.kill()
    adapter_proc.start()
    first_body = client.body("announced", None, _allow(interrupt["id"]))
    again = client.run(first_body)
    assert again.final["type"] == "RUN_FINISHED" and again.final["outcome"] == {"type": "success"}
    assert [tool for _, tool in demo.runtime.tool_executions] == [interrupt["toolCallId"]]
    adapter_proc.kill()
    adapter_proc.start()
    replay = client.run(client.body("announced", None, _allow(interrupt["id"])))
    assert replay.final["type"] == "RUN_ERROR" and replay.final["code"] == "RESUME_ALREADY_APPLIED"
    duplicate = client.run(first_body)
    assert duplicate.status == 409 and duplicate.code == "DUPLICATE_RUN_ID"
    assert len(demo.runtime.tool_executions) == 1


def test_answer_accepted_upstream_just_before_a_kill_leaves_the_thread_usable(adapter_proc, demo, workspace,
                                                                              monkeypatch):
    """Kill the adapter after the runtime took the answer (and ran the tool) but before any byte came back.

    Nothing was committed, so the interrupt is still pending on disk, while upstream it is gone.  A client
    retrying its answer must get a definite, documented outcome (the answer was applied, or the execution
    is lost) and the thread must then take a new turn.
    """
    client = Client(adapter_proc, workspace)
    interrupts = client.run(client.body("accepted", "please write")).interrupts
    if len(interrupts) != 1:
        pytest.fail("no interrupt announced")
    interrupt = interrupts[0]
    original = demo.runtime._methods["SendStreamingMessage"]

    def kill_after_acceptance(environ: Any, start_response: Any, rpc_id: Any, params: Dict[str, Any]) -> Any:
        body = original(environ, start_response, rpc_id, params)
        if params.get("message", {}).get("taskId"):
            wait_for(lambda: len(demo.runtime.tool_executions) == 1, 5)
            adapter_proc.kill()
        return body

    monkeypatch.setitem(demo.runtime._methods, "SendStreamingMessage", kill_after_acceptance)
    answer = _allow(interrupt["id"])
    cut = client.run(client.body("accepted", None, answer))
    monkeypatch.undo()
    if not cut.dropped or [tool for _, tool in demo.runtime.tool_executions] != [interrupt["toolCallId"]]:
        pytest.fail("the kill did not land after the runtime accepted the answer")
    adapter_proc.start()

    retry = client.run(client.body("accepted", None, answer))
    assert retry.status == 200 and retry.final is not None
    outcome = retry.final.get("code") or retry.final["outcome"]["type"]
    assert outcome in ("success", "RESUME_ALREADY_APPLIED", "EXECUTION_LOST"), retry.final
    following = client.run(client.body("accepted", "next turn"))
    assert following.status == 200, (following.status, following.code)
    assert len(demo.runtime.tool_executions) == 1


def test_orphan_still_cancelled_when_the_recovering_adapter_dies_too(adapter_proc, demo, workspace, monkeypatch):
    """Orphan a slow answer, then kill the recovering adapter just as it is about to cancel the orphan."""
    from iaccode_agui.demo import wire

    client = Client(adapter_proc, workspace)
    seen: Dict[str, Any] = {}

    def kill_on_first_delta(event: Dict[str, Any]) -> None:
        soak.remember_session(event, seen)
        if event["type"] == "TEXT_MESSAGE_CONTENT" and adapter_proc.proc.poll() is None:
            adapter_proc.kill()

    if not client.run(client.body("twice", "slow please"), on_event=kill_on_first_delta).dropped:
        pytest.fail("the first kill did not cut the slow answer")
    orphan = seen["taskId"]
    adapter_proc.start()
    original = demo.runtime._methods["CancelTask"]
    fired: List[bool] = []

    def die_before_cancelling(environ: Any, start_response: Any, rpc_id: Any, params: Dict[str, Any]) -> Any:
        if params.get("id") == orphan and not fired:
            fired.append(True)
            adapter_proc.kill()   # the recovering adapter dies; its CancelTask never takes effect
            raise wire.RpcError(wire.INTERNAL_ERROR, "dropped by the test", with_info=False)
        return original(environ, start_response, rpc_id, params)

    monkeypatch.setitem(demo.runtime._methods, "CancelTask", die_before_cancelling)
    client.run(client.body("twice", "hello again"))
    if not fired or demo.runtime.store.get(orphan).terminal:
        pytest.fail("the second kill did not land before the orphan was cancelled")
    adapter_proc.start()
    after = client.run(client.body("twice", "third message"))
    assert after.status == 200 and after.final["type"] == "RUN_FINISHED", (after.status, after.code)
    assert wait_for(lambda: demo.runtime.store.get(orphan).terminal, 10), "the orphaned task is still running"

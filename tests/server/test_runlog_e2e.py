"""The run log end to end: replay beyond memory, observers, and re-attach served by another process.

Two ``AguiApp`` instances on one state directory stand for two processes: every lock they share is an
``flock`` on its own open file description, which excludes a second descriptor of the same process
exactly as it excludes another process.
"""
import threading
import time
from typing import Any, Dict, List

import pytest

from iaccode_agui.demo import DemoServer
from tests.agui_checker import check_sequence, parse_sse
from tests.harness import SSEReader, session_of, text_of, wait_for


@pytest.fixture
def quick_demo():
    server = DemoServer.start(token="demo-token", ping_interval=0.5, slow_interval=0.04)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def pair(adapter_factory, quick_demo, tmp_path):
    """Two adapters ("processes") sharing one state dir and one runtime."""
    def make(**settings: Any):
        state_dir = str(tmp_path / "shared")
        common = dict(state_dir=state_dir, upstream_url=quick_demo.url, upstream_token=quick_demo.token)
        common.update(settings)
        return adapter_factory(**common), adapter_factory(**common)
    return make


def _observe(adapter, execution_id: str, body: Dict[str, Any], **extra: Any):
    identity = {"threadId": body["threadId"], "runId": body["runId"],
                "rosInvocationId": body["forwardedProps"]["iacCode"]["rosInvocationId"]}
    identity.update(extra)
    return adapter.post(identity, path="extensions/iac-code/v1/executions/%s/subscribe" % execution_id,
                        stream=True)


def _terminals(events: List[Dict[str, Any]]) -> int:
    return sum(1 for e in events if e["type"] in ("RUN_FINISHED", "RUN_ERROR"))


def test_reattach_at_an_id_older_than_memory_is_served_from_the_log(adapter_factory):
    adapter = adapter_factory(replay_buffer_events=50, reconnect_grace=5.0)
    body = adapter.body("firehose 600", thread="deep")
    whole = adapter.post(body).content
    _, ids, _ = parse_sse(whole)
    assert ids == list(range(len(ids))) and len(ids) > 600
    again = adapter.post(body, headers={"Last-Event-ID": "1"})
    assert again.status_code == 200
    assert again.content == whole[whole.index(b"id: 2\n"):]


@pytest.mark.slow
def test_observers_stream_a_live_run_without_taking_it_over(pair):
    owner, other = pair()
    body = owner.body("slow", thread="obs")
    reader = SSEReader(owner.post(body, stream=True))
    events = reader.until("TEXT_MESSAGE_CONTENT")
    execution = session_of(events)["executionId"]
    results: List[bytes] = []

    def watch(adapter, **extra):
        response = _observe(adapter, execution, body, **extra)
        assert response.status_code == 200, response.text
        results.append(response.content)
    threads = [threading.Thread(target=watch, args=(adapter,)) for adapter in (owner, other, other)]
    threads.append(threading.Thread(target=watch, args=(other,), kwargs={"afterSequence": 3}))
    for thread in threads:
        thread.start()
    reader.until("RUN_FINISHED", limit=20)
    for thread in threads:
        thread.join(20)
    assert len(results) == 4
    full = reader.raw
    for raw in results:
        observed, ids, _ = parse_sse(raw)
        assert _terminals(observed) == 1 and observed[-1]["type"] == "RUN_FINISHED"
        if ids[0] == 0:
            assert raw == full
            check_sequence(observed)
        else:
            assert ids[0] == 4 and raw == full[full.index(b"id: 4\n"):]
    finished = _observe(other, execution, body)
    assert finished.status_code == 200 and finished.content == full


@pytest.mark.slow
def test_an_observer_leaving_never_cancels_the_run(adapter):
    body = adapter.body("sleep 1", thread="obs-leave")
    reader = SSEReader(adapter.post(body, stream=True))
    execution = session_of(reader.until("CUSTOM"))["executionId"]
    observer = SSEReader(_observe(adapter, execution, body))
    observer.until("RUN_STARTED")
    observer.close()
    events = reader.until("RUN_FINISHED", limit=10)
    assert events[-1]["type"] == "RUN_FINISHED" and events[-1]["outcome"]["type"] == "success"


def test_observer_identity_errors_use_the_json_error_shape(adapter):
    body = adapter.body("hi", thread="obs-err")
    events = adapter.run(body)
    execution = session_of(events)["executionId"]
    for wrong in ({"rosInvocationId": "other"}, {"runId": "run-unknown"}, {"threadId": "nobody"}):
        response = _observe(adapter, execution, body, **wrong)
        assert response.status_code == 404 and response.json()["error"]["code"] == "EXECUTION_NOT_FOUND"
    response = _observe(adapter, "exec-unknown", body)
    assert response.status_code == 404 and response.json()["error"]["code"] == "EXECUTION_NOT_FOUND"
    for bad in ({"afterSequence": -1}, {"afterSequence": "3"}, {"extra": 1}, {"runId": ""}):
        response = _observe(adapter, execution, body, **bad)
        assert response.status_code == 400 and response.json()["error"]["code"] == "INVALID_INPUT"
    assert "afterSequence" in _observe(adapter, execution, body, afterSequence=True).json()["error"]["message"]


@pytest.mark.slow
def test_reattach_on_another_process_follows_the_owner_live_with_heartbeats(pair):
    owner, other = pair(reconnect_grace=0.3, heartbeat_interval=0.02)   # shorter than the gaps between deltas
    body = owner.body("slow", thread="xproc")
    first = SSEReader(owner.post(body, stream=True))
    first.until("TEXT_MESSAGE_CONTENT")
    _, seen, _ = parse_sse(first.raw[:first.raw.rindex(b"\n\n") + 2])
    follow = other.post(body, headers={"Last-Event-ID": str(seen[-1])}, stream=True)
    assert follow.status_code == 200
    second = SSEReader(follow)
    second.until("TEXT_MESSAGE_CONTENT")
    first.close()                 # the owner's own client goes; the one elsewhere keeps the run alive
    time.sleep(1.0)               # well past the owner's reconnect grace
    assert owner.app.manager.active_count() == 1
    events = second.until("RUN_FINISHED", limit=20)
    _, ids, heartbeats = parse_sse(second.raw)
    assert ids == list(range(seen[-1] + 1, ids[-1] + 1)) and heartbeats >= 1
    assert events[-1]["outcome"]["type"] == "success" and _terminals(events) == 1
    whole = other.post(body, headers={"Last-Event-ID": "0"}).content
    assert text_of(parse_sse(whole)[0]) == "".join("slow-%d " % i for i in range(60))


@pytest.mark.slow
def test_the_owner_cancels_once_the_client_elsewhere_leaves(pair):
    owner, other = pair(reconnect_grace=0.2)
    body = owner.body("slow", thread="xleave")
    first = SSEReader(owner.post(body, stream=True))
    first.until("TEXT_MESSAGE_CONTENT")
    second = SSEReader(other.post(body, headers={"Last-Event-ID": "0"}, stream=True))
    second.until("TEXT_MESSAGE_CONTENT")
    first.close()
    time.sleep(0.6)
    assert owner.app.manager.active_count() == 1
    second.close()
    assert wait_for(lambda: bool(owner.app.manager.finished_runs()), 5)
    run = owner.app.manager.finished_runs()[-1]
    assert run.worker.error_code == "CANCELLED"


@pytest.mark.slow
def test_finished_runs_release_replay_memory_on_the_timer(adapter_factory):
    adapter = adapter_factory(replay_memory_mb=0.25)
    manager = adapter.app.manager
    for index in range(4):
        adapter.run(adapter.body("firehose 3000", thread="mem-%d" % index))
    manager.housekeeper.run_once()
    assert manager.budget.used <= manager.budget.max_bytes
    assert all(run.channel.memory_bytes == 0 for run in manager.finished_runs())

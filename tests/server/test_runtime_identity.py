"""Processes on one state directory with different A2A runtimes: a clear error, not EXECUTION_LOST or 502."""
import os

from iaccode_agui.demo import DemoServer
from iaccode_agui.state.keys import thread_file_stem
from iaccode_agui.state.model import ThreadState
from iaccode_agui.state.peers import ProcessRegistry
from tests.harness import interrupt_of


def test_registry_sees_live_processes_and_forgets_dead_ones(tmp_path):
    first = ProcessRegistry(str(tmp_path), "host:1:a", "http://127.0.0.1:1/")
    second = ProcessRegistry(str(tmp_path), "host:2:b", "http://127.0.0.1:2/")
    first.register()
    second.register()
    assert first.live_runtimes() == {"http://127.0.0.1:1/", "http://127.0.0.1:2/"}
    assert first.conflicts_with("http://127.0.0.1:2/") and not first.conflicts_with("http://127.0.0.1:1/")
    assert not first.conflicts_with(None)
    os.close(second._fd)          # the process dies: its lock goes, its entry stays behind
    second._fd = None             # (and nothing closes that number a second time)
    assert first.live_runtimes() == {"http://127.0.0.1:1/"}
    assert sorted(os.listdir(first.directory)) == [thread_file_stem("host:1:a") + ".json"]
    assert not first.conflicts_with("http://127.0.0.1:2/")
    first.close()
    assert os.listdir(first.directory) == []


def test_the_runtime_is_recorded_per_thread(adapter):
    adapter.run(adapter.body("hi", thread="rt-rec"))
    state = adapter.app.store.load("rt-rec")
    assert state.runtime == adapter.settings.a2a_url
    document = state.to_document()
    assert document["runtime"] == adapter.settings.a2a_url
    assert ThreadState.from_document(document, "rt-rec").runtime == adapter.settings.a2a_url
    del document["runtime"]                       # documents written before the field still load
    assert ThreadState.from_document(document, "rt-rec").runtime is None


def test_two_runtimes_on_one_state_dir_are_refused_clearly(adapter_factory, demo, tmp_path):
    other_runtime = DemoServer.start(token="other-token")
    try:
        state_dir = str(tmp_path / "shared")
        first = adapter_factory(state_dir=state_dir)
        second = adapter_factory(state_dir=state_dir, upstream_url=other_runtime.url, upstream_token="other-token")
        body = first.body("please write a file", thread="two-rt")
        interrupt = interrupt_of(first.run(body))
        resume = first.body(None, thread="two-rt", resume=[{"interruptId": interrupt["id"], "status": "resolved",
                                                           "payload": {"decision": "allow_once"}}])
        for request in (resume, second.body("hello again", thread="two-rt")):
            answer = second.post(request)
            assert answer.status_code == 503, answer.text
            error = answer.json()["error"]
            assert error["code"] == "RUNTIME_MISMATCH" and "same runtime" in error["message"]
        translated = second.post(resume, headers={"Accept-Language": "de"})
        assert "Laufzeit" in translated.json()["error"]["message"]
        execution = first.app.store.load("two-rt").execution
        cancel = second.cancel(execution.execution_id, "two-rt", "inv-1")
        assert cancel.status_code == 503 and cancel.json()["error"]["code"] == "RUNTIME_MISMATCH"
        events = first.run(resume)                # the right process still serves the thread
        assert events[-1]["type"] == "RUN_FINISHED"
        second.run(second.body("a thread of its own", thread="two-rt-b"))
    finally:
        other_runtime.stop()


def test_a_thread_moves_on_when_its_old_runtime_is_gone(adapter_factory, demo, tmp_path):
    state_dir = str(tmp_path / "moved")
    first = adapter_factory(state_dir=state_dir)
    first.run(first.body("hi", thread="moved"))
    first.stop()
    first.app.manager.registry.close()
    other_runtime = DemoServer.start(token="other-token")
    try:
        second = adapter_factory(state_dir=state_dir, upstream_url=other_runtime.url, upstream_token="other-token")
        answer = second.post(second.body("hello", thread="moved"))
        # Admitted: what the new runtime makes of the old session is the runtime's answer, not ours.
        assert answer.status_code == 200 and b"RUNTIME_MISMATCH" not in answer.content
        assert second.app.store.load("moved").runtime == second.settings.a2a_url
    finally:
        other_runtime.stop()


def test_one_runtime_spelt_two_ways_is_not_a_mismatch(tmp_path):
    from iaccode_agui.state.peers import runtime_key, same_runtime

    spellings = ["http://127.0.0.1:8765/", "http://localhost:8765", "http://LOCALHOST:8765/", "http://[::1]:8765/",
                 "http://[0:0:0:0:0:0:0:1]:8765/", "http://localhost.:8765/"]
    assert len({runtime_key(url) for url in spellings}) == 1
    assert same_runtime("http://127.0.0.1/", "http://localhost:80/")
    # A different port, scheme, path or loopback address is another runtime.
    for other in ("http://127.0.0.1:8766/", "https://127.0.0.1:8765/", "http://127.0.0.1:8765/other",
                  "http://127.0.0.2:8765/"):
        assert not same_runtime("http://localhost:8765/", other), other
    first = ProcessRegistry(str(tmp_path), "host:1:a", "http://127.0.0.1:8765/")
    second = ProcessRegistry(str(tmp_path), "host:2:b", "http://localhost:8765")
    third = ProcessRegistry(str(tmp_path), "host:3:c", "http://127.0.0.1:9999/")
    for registry in (first, second, third):
        registry.register()
    try:
        assert not first.conflicts_with("http://localhost:8765")      # recorded by the second process
        assert not second.conflicts_with("http://127.0.0.1:8765/")
        assert first.conflicts_with("http://localhost:9999/")         # the third one's runtime: a real mismatch
    finally:
        for registry in (first, second, third):
            registry.close()


def test_two_processes_spelling_one_runtime_differently_share_its_threads(adapter_factory, demo, tmp_path):
    state_dir = str(tmp_path / "spelt")
    first = adapter_factory(state_dir=state_dir)
    assert "127.0.0.1" in demo.url
    second = adapter_factory(state_dir=state_dir, upstream_url=demo.url.replace("127.0.0.1", "localhost"))
    body = first.body("please write a file", thread="spelt")
    interrupt = interrupt_of(first.run(body))
    resume = second.body(None, thread="spelt", resume=[{"interruptId": interrupt["id"], "status": "resolved",
                                                        "payload": {"decision": "allow_once"}}])
    answer = second.post(resume)
    assert answer.status_code == 200 and b"RUNTIME_MISMATCH" not in answer.content, answer.text[:300]
    assert b"RUN_FINISHED" in answer.content

"""Races: concurrent admission on one thread, two adapter processes on one state dir, independent threads.

The contract is that a thread has at most one run at a time whoever asks (many requests of one process, or
several processes sharing the state directory), that losers get a documented 409 and never a 5xx, and that
the per-thread locks really are per thread: a stuck write on one thread never holds another one up.
"""
import collections
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, List, Tuple

import pytest
import requests

from iaccode_agui.sse.channel import RunChannel
from iaccode_agui.state.keys import thread_file_stem
from iaccode_agui.state.store import ThreadStore
from tests.tools_loader import load_tool
from tests.harness import Adapter

LOSER_CODES = {"THREAD_BUSY", "DUPLICATE_RUN_ID", "RUN_ID_CONFLICT"}


def _fire(adapters: List[Adapter], bodies: List[Dict[str, Any]]) -> List[Tuple[int, str]]:
    """POST every body at the same instant (a barrier), each on its own connection; (status, code) each."""
    barrier = threading.Barrier(len(bodies))

    def one(index: int) -> Tuple[int, str]:
        adapter = adapters[index % len(adapters)]
        session = requests.Session()
        barrier.wait(10)
        response = session.post(adapter.url, json=bodies[index], timeout=30,
                                headers={"Accept": "text/event-stream"})
        if response.status_code == 200:
            assert b"RUN_FINISHED" in response.content or b"RUN_ERROR" in response.content
            return 200, "SSE"
        return response.status_code, response.json()["error"]["code"]

    with ThreadPoolExecutor(len(bodies)) as pool:
        return list(pool.map(one, range(len(bodies))))


def _check_one_admitted(results: List[Tuple[int, str]]) -> collections.Counter:
    assert all(status < 500 for status, _ in results), results
    admitted = [r for r in results if r[0] == 200]
    assert len(admitted) == 1, results
    others = [r for r in results if r[0] != 200]
    assert all(status == 409 and code in LOSER_CODES for status, code in others), others
    return collections.Counter(code for _, code in results)


@pytest.mark.parametrize("existing", [False, True], ids=["new-thread", "thread-with-history"])
def test_fifty_parallel_posts_admit_exactly_one(adapter, existing):
    thread = "race-%s" % ("old" if existing else "new")
    if existing:
        assert adapter.run(adapter.body("hello", thread=thread))[-1]["type"] == "RUN_FINISHED"
    distinct = [adapter.body("sleep 1", thread=thread) for _ in range(40)]
    duplicate = adapter.body("sleep 1", thread=thread, run="run-dup")
    conflicting = adapter.body("sleep 1 but different", thread=thread, run="run-dup")
    bodies = distinct + [duplicate] * 7 + [conflicting] * 3
    counts = _check_one_admitted(_fire([adapter], bodies))
    assert counts["THREAD_BUSY"] >= 39
    state = adapter.app.store.load(thread)
    assert state.active_run is None and adapter.app.manager.active_count() == 0
    # Only the admitted run id is recorded; the dup id is used only if one of its copies won.
    assert ("run-dup" in state.run_digests) == (counts["DUPLICATE_RUN_ID"] + counts["RUN_ID_CONFLICT"] > 0)


def test_parallel_reposts_of_one_run_id_admit_it_once(adapter):
    body = adapter.body("sleep 1", thread="race-same-id", run="run-same")
    counts = _check_one_admitted(_fire([adapter], [body] * 30))
    assert counts["DUPLICATE_RUN_ID"] + counts["THREAD_BUSY"] == 29
    again = adapter.post(body)
    assert again.status_code == 409 and again.json()["error"]["code"] == "DUPLICATE_RUN_ID"




class _Process:
    """An adapter process (``python -m iaccode_agui``) with the harness' request-body builder."""

    body = Adapter.body

    def __init__(self, demo: Any, state_dir: str, workspace: str, log_dir: str) -> None:
        self.proc = load_tool("crash_soak").AdapterProcess(demo.url, state_dir, workspace, log_dir, token=demo.token)
        self.url = self.proc.start()
        self.workspace = workspace


def _fire_and_hold(adapters: List[Any], bodies: List[Dict[str, Any]]) -> List[Tuple[int, str]]:
    """POST every body at once; the admitted run (a long ``sleep``) stays live until every other request
    has its answer, then its client leaves (the adapter cancels it).  No loser can arrive after the
    winner ended, however slow the machine: the winner ends only once all of them were answered."""
    barrier = threading.Barrier(len(bodies))

    def one(index: int) -> Any:
        session = requests.Session()
        barrier.wait(30)
        return session.post(adapters[index % len(adapters)].url, json=bodies[index], timeout=60, stream=True,
                            headers={"Accept": "text/event-stream"})

    with ThreadPoolExecutor(len(bodies)) as pool:
        responses = list(pool.map(one, range(len(bodies))))
    results: List[Tuple[int, str]] = []
    for response in responses:
        if response.status_code == 200:
            assert b"RUN_STARTED" in next(response.iter_content(4096))
            results.append((200, "SSE"))
        else:
            results.append((response.status_code, response.json()["error"]["code"]))
        response.close()
    return results


def _wait_thread_free(state_dir: str, thread_id: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = ThreadStore(state_dir).load(thread_id)
        if state is not None and state.active_run is None:
            return
        time.sleep(0.05)
    raise AssertionError("the cancelled run never released thread %s" % thread_id)


def test_two_adapter_processes_never_both_admit(demo, tmp_path, workspace):
    state_dir = str(tmp_path / "shared-state")
    procs: List[_Process] = []
    try:
        for index in range(2):
            os.makedirs(str(tmp_path / ("logs-%d" % index)))
            procs.append(_Process(demo, state_dir, workspace, str(tmp_path / ("logs-%d" % index))))
        tally: collections.Counter = collections.Counter()
        for _ in range(12):
            # Each round: three requests per process on the same thread, released together; the winner's
            # run is held until every loser was answered.
            bodies = [procs[i % 2].body("sleep 120", thread="two-procs") for i in range(6)]
            tally.update(_check_one_admitted(_fire_and_hold(procs, bodies)))
            _wait_thread_free(state_dir, "two-procs")
        assert tally["SSE"] == 12 and tally["THREAD_BUSY"] == 60
        state = ThreadStore(state_dir).load("two-procs")
        assert state.active_run is None and len(state.run_digests) == 12
    finally:
        codes = [proc.proc.terminate() for proc in procs]
    assert codes == [0, 0]


def test_a_run_between_its_admission_and_its_streams_attach_is_not_taken_for_abandoned(adapter, monkeypatch):
    """A second request on the thread while the admitted run is still attaching its stream gets THREAD_BUSY
    and leaves that run alone: its client is there, the attach just has not happened yet.

    Before the fix the run's worker was visible before its stream was attached, so "no subscriber" read as
    "client gone" and the second request cancelled the run (and, when the cancelled run was released
    within a second, was admitted itself: two 200s on one thread, seen once under load)."""
    in_window, second_answered = threading.Event(), threading.Event()
    original = RunChannel.attach

    def attach(self: RunChannel, *args: Any, **kwargs: Any) -> Any:
        if not in_window.is_set():           # the first run's own attach, right after its admission
            in_window.set()
            second_answered.wait(10)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(RunChannel, "attach", attach)
    first: Dict[str, Any] = {}
    runner = threading.Thread(target=lambda: first.update(
        events=adapter.run(adapter.body("hello", thread="admitting"))))
    runner.start()
    try:
        assert in_window.wait(10), "the first run never reached its stream's attach"
        second = requests.post(adapter.url, json=adapter.body("hello", thread="admitting"), timeout=30,
                               headers={"Accept": "text/event-stream"})
    finally:
        second_answered.set()
        runner.join(30)
    assert second.status_code == 409 and second.json()["error"]["code"] == "THREAD_BUSY", second.text
    assert first["events"][-1]["type"] == "RUN_FINISHED", first["events"][-1]
    assert first["events"][-1]["outcome"] == {"type": "success"}


@pytest.mark.parametrize("blocked_write", [1, 2], ids=["admission-write", "in-run-write"])
def test_a_stuck_write_on_one_thread_never_delays_another(adapter, monkeypatch, blocked_write):
    """Thread A's n-th state write hangs until released; a whole run on thread B completes meanwhile."""
    store_cls = type(adapter.app.store)
    original = store_cls._write_atomic
    a_file = thread_file_stem("slow-a") + ".json"
    writes = collections.Counter()
    entered, release = threading.Event(), threading.Event()

    def write_atomic(self: ThreadStore, name: str, payload: bytes) -> None:
        if name == a_file:
            writes[name] += 1
            if writes[name] == blocked_write:
                entered.set()
                release.wait(20)
        original(self, name, payload)

    monkeypatch.setattr(store_cls, "_write_atomic", write_atomic)
    a_result: Dict[str, Any] = {}
    a_body = adapter.body("hello", thread="slow-a")
    runner = threading.Thread(target=lambda: a_result.update(events=adapter.run(a_body)))
    runner.start()
    try:
        assert entered.wait(10), "thread A never reached its state write"
        started = time.monotonic()
        b_events = adapter.run(adapter.body("hello", thread="fast-b"), timeout=10)
        b_seconds = time.monotonic() - started
        assert b_events[-1]["type"] == "RUN_FINISHED" and b_events[-1]["outcome"] == {"type": "success"}
        assert not release.is_set() and runner.is_alive(), "thread A was not held while B ran"
        assert b_seconds < 5, b_seconds
    finally:
        release.set()
        runner.join(20)
    assert a_result["events"][-1]["type"] == "RUN_FINISHED"

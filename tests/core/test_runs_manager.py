"""``RunManager``: admission and its rollback, the active-run cap, re-attach grace, the cancel extension,
and what a finished run keeps."""
import threading
from typing import Any, List

import pytest

from iaccode_agui.errors import AguiError
from iaccode_agui.web.inputs import parse_run_request
from iaccode_agui.sse.channel import END
from iaccode_agui.runs.manager import RunManager
from tests.agui_checker import check_stream
from tests.run_harness import (THREAD, ManualTimer, QuietClient, allow, body, finish, interrupt_ids, make_manager,
                               permission, run_events, start, status, task_frame)
from tests.run_harness import client, manager  # noqa: F401  (pytest fixtures)


def test_cancel_extension_wins_over_an_interrupt_committed_afterwards(manager, client):
    blocked, go = threading.Event(), threading.Event()

    def upstream_latency() -> None:
        blocked.set()
        go.wait(5)

    # The permission frame was already on the wire when the runtime processed CancelTask.
    client.streams.append([task_frame("submitted"), status("working", "Writing."), upstream_latency,
                           status("input-required", iac={"input": permission("perm-1", "tool-perm-1")})])
    run, sub = start(manager, body(manager, "write please", run="run-1"))
    assert blocked.wait(5)
    answer = manager.cancel(run.execution_id, THREAD, "inv-1")
    assert answer == {"executionId": run.execution_id, "status": "cancelled"}
    go.set()
    events = check_stream(finish(manager, run, sub))
    state = manager.store.load(THREAD)
    assert events[-1]["type"] == "RUN_ERROR" or events[-1]["outcome"]["type"] != "interrupt", events[-1]
    assert state.execution.pending == {}, sorted(state.execution.pending)


def test_finished_runs_do_not_retain_their_request_images(tmp_path):
    import base64
    import gc
    import os
    import tracemalloc

    quiet = QuietClient()
    manager = make_manager(tmp_path, quiet)
    image = base64.b64encode(b"\x89PNG\r\n\x1a\n" + os.urandom(2 * 1024 * 1024)).decode("ascii")
    try:
        for index in range(2):       # warm-up: imports, caches, the first state file
            quiet.streams.append([task_frame("submitted"), status("input-required", "ok")])
            run_events(manager, body(manager, "warm-up", run="warm-%d" % index))
        tracemalloc.start()
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        for index in range(4):
            doc = body(manager, None, run="img-%d" % index)
            doc["messages"] = [{"id": "m-img-%d" % index, "role": "user", "content": [
                {"type": "text", "text": "what is in this picture?"},
                {"type": "image", "source": {"type": "data", "value": image, "mimeType": "image/png"}}]}]
            quiet.streams.append([task_frame("submitted"), status("input-required", "A picture.")])
            run_events(manager, doc)
            del doc
        gc.collect()
        retained = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
        manager.stop()
    assert manager.active_count() == 0
    # Each finished run is kept for re-attach; its request (2.7 MiB of base64 here) must not be.
    assert retained < 2 * 1024 * 1024, "%.1f MiB retained after the runs ended" % (retained / 1048576.0)


@pytest.mark.slow
def test_active_run_cap_holds_under_concurrent_admission(tmp_path, client, monkeypatch):
    manager = make_manager(tmp_path, client, max_active_runs=1)
    both_checked = threading.Barrier(2)
    real_admit = RunManager._admit

    def admit_after_both_checked(self, req, *rest):   # the scheduler interleaves the two requests here
        try:
            both_checked.wait(2)
        except threading.BrokenBarrierError:      # a fixed manager refused the other request earlier
            pass
        return real_admit(self, req, *rest)

    monkeypatch.setattr(RunManager, "_admit", admit_after_both_checked)
    gate = threading.Event()
    for _ in range(2):
        client.streams.append([gate.wait])        # both runs stay live until the gate opens
    outcomes: List[Any] = []

    def post(thread: str) -> None:
        try:
            outcomes.append(start(manager, body(manager, run="run-" + thread, thread=thread)))
        except AguiError as exc:
            outcomes.append(exc.code)

    posters = [threading.Thread(target=post, args=(name,)) for name in ("cap-a", "cap-b")]
    try:
        for poster in posters:
            poster.start()
        for poster in posters:
            poster.join(5)
        admitted = manager.active_count()
    finally:
        gate.set()
        for item in outcomes:
            if not isinstance(item, str):
                finish(manager, *item)
        manager.stop()
    assert admitted <= 1 and "RUNTIME_CAPACITY_EXCEEDED" in outcomes, (admitted, outcomes)


def test_immediate_resume_at_the_cap_is_not_refused(tmp_path, client, monkeypatch):
    from iaccode_agui.sse.channel import RunChannel

    manager = make_manager(tmp_path, client, max_active_runs=1)
    worker_descheduled, resume_done = threading.Event(), threading.Event()
    real_close = RunChannel.close

    def close_late(self):     # the worker thread loses the CPU right after publishing RUN_FINISHED
        if not worker_descheduled.is_set():
            worker_descheduled.set()
            resume_done.wait(5)
        real_close(self)

    monkeypatch.setattr(RunChannel, "close", close_late)
    client.streams.append([task_frame("submitted"),
                           status("input-required", iac={"input": permission("perm-1", "tool-perm-1")})])
    run, sub = start(manager, body(manager, "write please", run="run-1"))
    try:
        assert worker_descheduled.wait(5)
        seen = check_stream(b"".join(list(sub.replay) + [f for f in sub.queue.take(1.0) if f is not END]))
        assert interrupt_ids(seen) == ["perm-1"]          # the client has its interrupt and answers at once
        client.tasks.append(task_frame("input-required", iac={"input": permission("perm-1", "tool-perm-1")}))
        client.streams.append([status("working", "Done."), status("input-required")])
        try:
            resumed = start(manager, body(manager, None, run="run-2", resume=allow("perm-1")))
        except AguiError as exc:
            resumed = None
            refused = exc.code
        else:
            refused = None
    finally:
        resume_done.set()
        run.worker.thread.join(5)
        manager.stop()
    if resumed is not None:
        finish(manager, *resumed)
    assert refused is None, refused


def test_each_disconnect_gets_its_full_reconnect_grace(tmp_path, client, monkeypatch):
    from iaccode_agui.runs import manager as manager_module
    from iaccode_agui.sse.response import SSEBody

    ManualTimer.made = []
    monkeypatch.setattr(manager_module.threading, "Timer", ManualTimer)
    manager = make_manager(tmp_path, client, reconnect_grace=30.0)
    gate = threading.Event()
    client.streams.append([task_frame("submitted"), status("working", "Working."), gate.wait,
                           status("input-required", "Done.")])
    doc = body(manager, "long job", run="run-1")
    run, sub = start(manager, doc)

    def response(subscription: Any) -> SSEBody:
        return SSEBody(subscription, heartbeat=15.0, poll=0.05, on_close=run.client_closed)

    try:
        first = response(sub)
        next(first)                                      # RUN_STARTED reached the client, then it vanished
        first.close()                                    # t = 0: disconnect #1, grace until t = 30
        req = parse_run_request(doc, manager.settings.allowed_cwds)
        _, sub2 = manager.start(req, "en", last_event_id=0)      # t = 20: re-attached with Last-Event-ID
        second = response(sub2)
        next(second)
        second.close()                                   # t = 25: disconnect #2, grace until t = 55
        ManualTimer.made[0].fire()                       # t = 30: disconnect #1's timer
        assert not run.worker.cancel_requested, "cancelled 5 s into a 30 s grace period"
    finally:
        gate.set()
        run.worker.thread.join(5)
        manager.stop()


# ---- admission rollback ---------------------------------------------------------------------------------
def test_a_run_that_cannot_start_gives_back_everything_its_admission_took(manager, client, monkeypatch):
    from iaccode_agui.runs.worker import RunWorker

    def no_thread(self: Any) -> None:
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(RunWorker, "start", no_thread)
    doc = body(manager, "hello", run="run-1")
    with pytest.raises(RuntimeError):
        start(manager, doc)
    assert manager.active_count() == 0, "the capacity slot is still held"
    assert manager.runs._live == {} and manager.runs._by_execution == {}, "the run is still listed as live"
    lease = manager.store.try_run_lease(THREAD)
    assert lease is not None, "the run lease is still held"
    lease.release()
    state = manager.store.load(THREAD)
    assert state.active_run is None and "run-1" not in state.run_digests
    # Nothing of the failed start is left over: the very same request is admitted and runs.
    monkeypatch.undo()
    client.streams.append([task_frame("submitted"), status("completed", "Hello.")])
    assert run_events(manager, doc)[-1]["type"] == "RUN_FINISHED"

"""Finished runs kept for re-attach as small summaries once their log holds every event (``runs.finished``).

Each test drives a real ``RunManager`` (scripted upstream, real state store and run log) and ticks the
housekeeper by hand, so what is checked is what a re-attach, an AgentCore attach or a stop sees after the
swap: the same events, the same refusals and the same bounds as with the whole run kept.
"""
import gc
import json
import weakref

import pytest

from iaccode_agui.agentcore.stop import stop_run
from iaccode_agui.errors import AguiError
from iaccode_agui.web.inputs import parse_run_request
from iaccode_agui.runs import kept as kept_module
from iaccode_agui.runs.finished import EndedWorker, FinishedRun
from iaccode_agui.runs.liverun import LiveRun
from iaccode_agui.runs.run import Run
from tests.run_harness import QuietClient, body, drain, finish, make_manager, start, status, task_frame


def _frames(raw: bytes):
    """(id, event) of every SSE frame in ``raw``."""
    out = []
    for block in raw.decode("utf-8").split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "data" in lines:
            out.append((int(lines["id"]) if "id" in lines else None, json.loads(lines["data"])))
    return out


def _manager(tmp_path, **settings):
    quiet = QuietClient()
    manager = make_manager(tmp_path, quiet, **settings)
    manager.housekeeper.stop()       # the tests tick it themselves
    return manager, quiet


def _finished_run(manager, quiet, run_id, text="Hello there, a few words."):
    quiet.streams.append([task_frame("submitted"), status("working", text), status("completed", "done")])
    run, sub = start(manager, body(manager, "hi", run=run_id))
    raw = finish(manager, run, sub)
    sub.detach()                     # the client's stream closed
    return run, _frames(raw)


def _kept(manager, run_id):
    return next(item for item in manager.finished_runs() if item.run_id == run_id)


def test_a_finished_run_with_a_complete_log_is_kept_as_a_summary_and_its_graph_is_freed(tmp_path):
    manager, quiet = _manager(tmp_path)
    try:
        run, frames = _finished_run(manager, quiet, "run-1")
        graph = weakref.ref(run.worker.projector)
        assert isinstance(_kept(manager, "run-1"), LiveRun) and isinstance(run, Run)
        del run
        manager.housekeeper.run_once(sweep_logs=False)
        kept = _kept(manager, "run-1")
        assert isinstance(kept, FinishedRun) and isinstance(kept, Run) and isinstance(kept.worker, EndedWorker)
        assert kept.channel.closed and kept.channel.memory_bytes == 0 and not kept.channel.attached
        assert kept.worker.finished and kept.worker.outcome == "success" and kept.worker.error_code is None
        gc.collect()
        assert graph() is None, "the finished run's projector outlived its summary"
        assert manager.runs.kept.summarise() == 0      # a summary is not summarised again
    finally:
        manager.stop()


@pytest.mark.parametrize("after", [None, 0, 2])
def test_a_reattach_to_a_summarised_run_replays_the_same_tail_from_the_log(tmp_path, after):
    manager, quiet = _manager(tmp_path)
    try:
        _, frames = _finished_run(manager, quiet, "run-1")
        assert len(frames) > 3 and frames[-1][1]["type"] == "RUN_FINISHED"
        manager.housekeeper.run_once(sweep_logs=False)
        doc = body(manager, "hi", run="run-1")
        req = parse_run_request(doc, manager.settings.allowed_cwds)
        if after is None:        # an AgentCore attach has no Last-Event-ID: everything from the start
            run, sub = manager.attach(req.thread_id, "run-1", None)   # type: ignore[arg-type]
        else:
            run, sub = manager.start(req, "en", last_event_id=after)
        assert isinstance(run, FinishedRun)
        replayed = _frames(drain(sub))
        wanted = frames if after is None else [item for item in frames if item[0] > after]
        assert replayed == wanted
        sub.detach()
        run.client_closed(True)
    finally:
        manager.stop()


def test_a_summarised_run_refuses_what_the_whole_run_refused(tmp_path):
    manager, quiet = _manager(tmp_path)
    try:
        _, frames = _finished_run(manager, quiet, "run-1")
        manager.housekeeper.run_once(sweep_logs=False)
        last = frames[-1][0]
        req = parse_run_request(body(manager, "hi", run="run-1"), manager.settings.allowed_cwds)
        with pytest.raises(AguiError) as seen:          # it already saw the terminal event
            manager.start(req, "en", last_event_id=last)
        assert seen.value.code == "RUN_ALREADY_TERMINAL"
        other = parse_run_request(body(manager, "something else", run="run-1"), manager.settings.allowed_cwds)
        with pytest.raises(AguiError) as seen:          # the same run id with another body
            manager.start(other, "en", last_event_id=0)
        assert seen.value.code == "RUN_ID_CONFLICT"
        run, sub = manager.start(req, "en", last_event_id=0)
        with pytest.raises(AguiError) as seen:          # one client at a time, as before the swap
            run.channel.attach(0)
        assert seen.value.code == "RUN_ALREADY_ATTACHED"
        sub.detach()
        again = run.channel.attach(0)
        assert _frames(drain(again)) == [item for item in frames if item[0] > 0]
        again.detach()
    finally:
        manager.stop()


def test_a_stop_of_a_summarised_run_reaches_its_execution(tmp_path, monkeypatch):
    manager, quiet = _manager(tmp_path)
    try:
        run, _ = _finished_run(manager, quiet, "run-1")
        execution, ros = run.execution_id, run.ros_invocation_id
        manager.housekeeper.run_once(sweep_logs=False)
        assert isinstance(manager.find_run(run.thread_id, "run-1"), FinishedRun)
        asked = []
        monkeypatch.setattr(manager, "cancel", lambda *args: asked.append(args) or {"status": "not_running"})
        stop_run(manager, run.thread_id, "run-1")
        assert asked == [(execution, run.thread_id, ros)]
    finally:
        manager.stop()


def test_runs_that_still_need_their_graph_are_not_summarised(tmp_path):
    manager, quiet = _manager(tmp_path)
    try:
        quiet.streams.append([task_frame("submitted"), status("working", "Hi."), status("completed", "done")])
        run, sub = start(manager, body(manager, "hi", run="attached"))
        finish(manager, run, sub)               # ended, but its client has not closed its stream yet
        manager.housekeeper.run_once(sweep_logs=False)
        assert _kept(manager, "attached") is run
        sub.detach()
        manager.housekeeper.run_once(sweep_logs=False)
        assert isinstance(_kept(manager, "attached"), FinishedRun)
    finally:
        manager.stop()
    # Without a run log the frames in memory are the only copy of the events.
    (tmp_path / "nolog").mkdir()
    manager, quiet = _manager(tmp_path / "nolog", run_log_max_mb=0)
    try:
        run, frames = _finished_run(manager, quiet, "no-log")
        manager.housekeeper.run_once(sweep_logs=False)
        assert _kept(manager, "no-log") is run
        req = parse_run_request(body(manager, "hi", run="no-log"), manager.settings.allowed_cwds)
        again, sub = manager.start(req, "en", last_event_id=0)
        assert again is run and _frames(drain(sub)) == [item for item in frames if item[0] > 0]
    finally:
        manager.stop()


def test_the_finished_run_bound_holds_for_summaries(tmp_path, monkeypatch):
    monkeypatch.setattr(kept_module, "FINISHED_KEEP", 3)
    manager, quiet = _manager(tmp_path)
    try:
        for index in range(5):
            _finished_run(manager, quiet, "run-%d" % index)
            manager.housekeeper.run_once(sweep_logs=False)
        kept = manager.finished_runs()
        assert [item.run_id for item in kept] == ["run-2", "run-3", "run-4"]
        assert all(isinstance(item, FinishedRun) for item in kept)
        req = parse_run_request(body(manager, "hi", run="run-0"), manager.settings.allowed_cwds)
        assert manager.find_run(req.thread_id, "run-0") is None      # past the bound: the log serves it
        followed, sub = manager.start(req, "en", last_event_id=0)
        assert not isinstance(followed, FinishedRun) and isinstance(followed, Run)
        assert _frames(drain(sub))[-1][1]["type"] == "RUN_FINISHED"
        sub.detach()
    finally:
        manager.stop()

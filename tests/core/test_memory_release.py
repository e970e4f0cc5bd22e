"""Finished runs are freed after runs end: the housekeeper collects the cycles they leave, once when the
last run ends and every N ended runs under load, never per request.  Counted calls, not RSS figures (those
are the bench's job)."""
import gc
import weakref
from typing import List

import pytest

from iaccode_agui.server import cli
from iaccode_agui.server.allocator import MemoryReleaser
from iaccode_agui.config import Settings
from iaccode_agui.runs import kept as kept_module
from tests.run_harness import QuietClient, body, finish, make_manager, start, status, task_frame


class Counted:
    def __init__(self) -> None:
        self.calls: List[tuple] = []

    def __call__(self, *args: object) -> int:
        self.calls.append(args)
        return 0


def releaser(every_runs: int = 4):
    collect = Counted()
    return MemoryReleaser(every_runs, collect=collect), collect  # type: ignore[arg-type]


def test_a_release_follows_the_last_run_ending_and_nothing_else():
    memory, collect = releaser()
    assert not memory.note(0, 0)                    # idle, nothing ended: nothing to collect
    assert not memory.note(2, 1)                    # two ended, one still live, below every_runs
    assert memory.note(0, 0)                        # the last one ended: collect now
    assert len(collect.calls) == 1
    assert not memory.note(0, 0)                    # once per burst, not per tick
    assert len(collect.calls) == 1


def test_under_steady_load_a_release_comes_every_n_ended_runs():
    memory, collect = releaser(every_runs=4)
    decisions = [memory.note(1, 3) for _ in range(12)]   # one run ends per tick, three stay live
    assert decisions == [False, False, False, True] * 3
    assert len(collect.calls) == 3


def test_zero_turns_releases_off():
    memory, collect = releaser(every_runs=0)
    assert not any(memory.note(100, 0) for _ in range(3))
    assert collect.calls == []


def test_the_housekeeper_releases_after_runs_end_and_the_finished_runs_are_freed(tmp_path, monkeypatch):
    monkeypatch.setattr(kept_module, "FINISHED_KEEP", 0)     # forgotten at once: only cycles hold them
    quiet = QuietClient()
    manager = make_manager(tmp_path, quiet, memory_release_runs=64)
    manager.housekeeper.stop()                                  # the test ticks it itself
    housekeeper = manager.housekeeper
    releases = housekeeper.releaser.releases
    gc.disable()
    try:
        runs, threads = [], []
        for index in range(3):
            quiet.streams.append([task_frame("submitted"), status("input-required", "ok")])
            run, sub = start(manager, body(manager, "hello", run="run-%d" % index))
            finish(manager, run, sub)
            runs.append(weakref.ref(run))
            threads.append(run.worker.thread)
            del run, sub
        for thread in threads:                  # a run's thread holds it until the thread is gone
            thread.join(5)
        assert manager.runs.ended_total == 3
        housekeeper.run_once(sweep_logs=False)
        assert housekeeper.releaser.releases == releases + 1
        assert [ref() for ref in runs] == [None, None, None], "finished runs outlived the collection"
        housekeeper.run_once(sweep_logs=False)                  # nothing ended since: no second collection
        assert housekeeper.releaser.releases == releases + 1
    finally:
        gc.enable()
        manager.stop()


def test_the_release_interval_is_a_setting():
    assert Settings(a2a_url="http://127.0.0.1:9/").memory_release_runs == 256
    with pytest.raises(ValueError):
        Settings(a2a_url="http://127.0.0.1:9/", memory_release_runs=-1)
    args = cli.build_parser().parse_args(["--memory-release-runs", "10"])
    assert cli.settings_from(args, {}, "http://127.0.0.1:9/", None, "/tmp/x").memory_release_runs == 10
    args = cli.build_parser().parse_args([])
    env = {"IAC_CODE_AGUI_MEMORY_RELEASE_RUNS": "0"}
    assert cli.settings_from(args, env, "http://127.0.0.1:9/", None, "/tmp/x").memory_release_runs == 0

"""Memory goes back after runs end: the housekeeper collects the cycles finished runs leave and trims
malloc, once when the last run ends and every N ended runs under load, never per request; the CLI server
caps glibc's malloc arenas.  Counted calls, not RSS figures (those are the bench's job)."""
import gc
import weakref
from typing import List

import pytest

from iaccode_agui import allocator, cli
from iaccode_agui.allocator import MemoryReleaser
from iaccode_agui.config import Settings
from iaccode_agui.runs import kept as kept_module
from tests.run_harness import QuietClient, body, finish, make_manager, start, status, task_frame


class Counted:
    def __init__(self) -> None:
        self.calls: List[tuple] = []

    def __call__(self, *args: object) -> int:
        self.calls.append(args)
        return 0


def releaser(every_runs: int = 4, **kwargs: object):
    collect, trim = Counted(), Counted()
    return MemoryReleaser(every_runs, trim=trim, collect=collect, **kwargs), collect, trim  # type: ignore[arg-type]


def test_a_release_follows_the_last_run_ending_and_nothing_else():
    memory, collect, trim = releaser()
    assert not memory.note(0, 0, 0)                 # idle, nothing ended: nothing to give back
    assert not memory.note(0, 2, 1)                 # two ended, one still live, below every_runs
    assert memory.note(0, 0, 0)                     # the last one ended: release now
    assert (len(collect.calls), trim.calls) == (1, [(0,)])
    assert not memory.note(0, 0, 0)                 # once per burst, not per tick
    assert len(trim.calls) == 1


def test_under_steady_load_a_release_comes_every_n_ended_runs():
    memory, collect, trim = releaser(every_runs=4)
    decisions = [memory.note(0, 1, 3) for _ in range(12)]   # one run ends per tick, three stay live
    assert decisions == [False, False, False, True] * 3
    assert len(collect.calls) == len(trim.calls) == 3


def test_a_large_replay_release_trims_at_most_once_per_interval():
    memory, collect, trim = releaser(threshold=1000, interval=3600.0)
    assert memory.note(1500, 0, 5)
    assert not memory.note(1500, 0, 5)              # within the interval
    assert len(trim.calls) == 1


def test_zero_turns_releases_off():
    memory, collect, trim = releaser(every_runs=0)
    assert not any(memory.note(10 ** 9, 100, 0) for _ in range(3))
    assert collect.calls == trim.calls == []


def test_without_malloc_trim_the_collection_still_happens():
    collect = Counted()
    memory = MemoryReleaser(2, trim=None, collect=collect)
    assert memory.note(0, 2, 0)
    assert len(collect.calls) == 1


def test_the_housekeeper_releases_after_runs_end_and_the_finished_runs_are_freed(tmp_path, monkeypatch):
    monkeypatch.setattr(kept_module, "FINISHED_KEEP", 0)     # forgotten at once: only cycles hold them
    quiet = QuietClient()
    manager = make_manager(tmp_path, quiet, memory_release_runs=64)
    manager.housekeeper.stop()                                  # the test ticks it itself
    housekeeper = manager.housekeeper
    trim = Counted()
    housekeeper.releaser._trim = trim
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
        assert manager.ended_total == 3
        housekeeper.run_once(sweep_logs=False)
        assert trim.calls == [(0,)]
        assert [ref() for ref in runs] == [None, None, None], "finished runs outlived the release"
        housekeeper.run_once(sweep_logs=False)                  # nothing ended since: no second release
        assert trim.calls == [(0,)]
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


@pytest.mark.parametrize("argv, env, wanted", [
    ([], {}, 2),
    (["--malloc-arena-max", "4"], {}, 4),
    ([], {"IAC_CODE_AGUI_MALLOC_ARENA_MAX": "0"}, 0),
    ([], {"MALLOC_ARENA_MAX": "8"}, 0),                                  # glibc's own variable is left alone
    (["--malloc-arena-max", "3"], {"MALLOC_ARENA_MAX": "8"}, 3),          # ... unless the flag asks
])
def test_the_cli_server_caps_malloc_arenas(monkeypatch, argv, env, wanted):
    asked: List[int] = []
    monkeypatch.setattr(cli, "limit_arenas", lambda count: asked.append(count) or bool(count))
    cli.limit_malloc_arenas(cli.build_parser().parse_args(argv), env)
    assert asked == [wanted]


def test_limit_arenas_zero_changes_nothing_and_glibc_accepts_a_cap(monkeypatch):
    called: List[tuple] = []
    monkeypatch.setattr(allocator, "_glibc_function", lambda name: lambda *args: called.append(args) or 1)
    assert not allocator.limit_arenas(0) and called == []
    assert allocator.limit_arenas(2) and called == [(allocator.M_ARENA_MAX, 2)]
    monkeypatch.setattr(allocator, "_glibc_function", lambda name: None)    # musl, macOS: skipped
    assert not allocator.limit_arenas(2)


class _Node:
    """A reference cycle, as every run leaves one."""

    def __init__(self) -> None:
        self.me = self


def test_the_start_up_objects_leave_the_collections_and_later_cycles_are_still_freed():
    """A full collection walks every tracked object while every thread waits (heartbeats of all open
    streams included); what the server built before listening is walked no more, what came later is."""
    built = _Node()
    try:
        assert allocator.freeze_startup_objects() > 0
        assert not any(obj is built for obj in gc.get_objects())   # out of every generation walked
        later = _Node()
        gone = weakref.ref(later)
        del later
        gc.collect()
        assert gone() is None                                      # a run's cycle is still freed
    finally:
        gc.unfreeze()


def _serve_until_listen(tmp_path, monkeypatch, order: List[str]) -> None:
    """Runs ``cli.serve`` with the freeze recorded and the server replaced by one that stops at once."""
    monkeypatch.setattr(cli, "freeze_startup_objects", lambda: order.append("freeze") or 1)

    def no_server(*args, **kwargs):
        order.append("listen")
        raise cli.ConfigError("stop here")

    monkeypatch.setattr(cli, "start_server", no_server)
    args = cli.build_parser().parse_args(["--demo"])
    settings = cli.settings_from(args, {}, "http://127.0.0.1:9/", None, str(tmp_path / "state"))
    with pytest.raises(cli.ConfigError):
        cli.serve(settings, "127.0.0.1", 0, args, "test")


def test_the_cli_server_freezes_its_start_up_objects_before_it_listens(tmp_path, monkeypatch):
    order: List[str] = []
    _serve_until_listen(tmp_path, monkeypatch, order)
    assert order == ["freeze", "listen"]


def test_the_cli_freezes_before_the_app_can_start_adopting_runs(tmp_path, monkeypatch):
    """Building the app starts the start-up take-over scan on the manager's thread; a run adopted while the
    freeze collects would land in the permanent generation and never be freed, so the freeze comes first."""
    import iaccode_agui.app as app_module

    order: List[str] = []

    class App:
        def __init__(self, settings):
            order.append("app")

        def close(self, *args, **kwargs):
            pass

    monkeypatch.setattr(app_module, "AguiApp", App)
    _serve_until_listen(tmp_path, monkeypatch, order)
    assert order == ["freeze", "app", "listen"]

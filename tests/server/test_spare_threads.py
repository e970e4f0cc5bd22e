"""Run threads come from spare threads that wait for the next run (runs.spare), not one new thread per run.

Checked by thread identity, names, counts and weak references, never by timing.
"""
import gc
import os
import threading
import weakref

import pytest

from iaccode_agui.runs.spare import IDLE_NAME, RunThread, SpareThreads
from tests.harness import read_sse_until, wait_for


def _run(spares, target, name="agui-run-t"):
    job = RunThread(spares, target, name)
    job.start()
    job.join(5)
    assert not job.is_alive()
    return job


def _seen(into):
    return lambda: into.append((threading.get_ident(), threading.current_thread().name))


def test_an_ended_runs_thread_drives_the_next_run_without_a_new_thread(monkeypatch):
    spares = SpareThreads(keep=2, idle_seconds=10)
    seen = []
    try:
        first = _run(spares, _seen(seen), "agui-run-one")
        assert wait_for(lambda: spares.waiting == 1, 5)
        created = []
        original = threading.Thread.start
        monkeypatch.setattr(threading.Thread, "start", lambda self: (created.append(self.name), original(self)))
        second = _run(spares, _seen(seen), "agui-run-two")
        assert created == []                               # handed over, nothing started
        assert seen[0][0] == seen[1][0] == first.ident == second.ident
        assert [name for _, name in seen] == ["agui-run-one", "agui-run-two"]   # the run's name while it runs
        assert wait_for(lambda: spares.waiting == 1, 5)
        idle = [t for t in threading.enumerate() if t.ident == first.ident]
        assert idle and idle[0].name == IDLE_NAME          # not an agui-run-* thread while it waits
    finally:
        spares.close()


def test_runs_at_once_each_get_a_thread_and_at_most_keep_spares_wait():
    spares = SpareThreads(keep=2, idle_seconds=10)
    gate = threading.Event()
    jobs = [RunThread(spares, gate.wait, "agui-run-%d" % i) for i in range(5)]
    try:
        for job in jobs:
            job.start()
        assert wait_for(lambda: len({job.ident for job in jobs} - {None}) == 5, 5)   # none waits for another
        assert all(job.is_alive() for job in jobs)
        gate.set()
        for job in jobs:
            job.join(5)
        assert wait_for(lambda: spares.waiting == 2, 5)
        assert wait_for(lambda: sum(1 for t in threading.enumerate() if t.ident in {j.ident for j in jobs}) == 2, 5)
    finally:
        spares.close()


def test_a_spare_exits_after_its_idle_time_and_all_exit_on_close():
    spares = SpareThreads(keep=4, idle_seconds=0.05)
    job = _run(spares, lambda: None)
    assert wait_for(lambda: not any(t.ident == job.ident for t in threading.enumerate()), 5)
    assert spares.waiting == 0
    kept = SpareThreads(keep=4, idle_seconds=60)
    job = _run(kept, lambda: None)
    assert wait_for(lambda: kept.waiting == 1, 5)
    kept.close()
    assert wait_for(lambda: not any(t.ident == job.ident for t in threading.enumerate()), 5)
    assert kept.waiting == 0
    after = _run(kept, lambda: None)                        # still works, only nothing is kept any more
    assert wait_for(lambda: not any(t.ident == after.ident for t in threading.enumerate()), 5)


def test_keep_zero_is_a_new_thread_per_run():
    spares = SpareThreads(keep=0)
    first, second = _run(spares, lambda: None), _run(spares, lambda: None)
    assert spares.waiting == 0
    assert wait_for(lambda: not any(t.ident in (first.ident, second.ident) for t in threading.enumerate()), 5)


def test_a_waiting_spare_keeps_nothing_of_the_run_it_drove():
    class Run:
        def drive(self):
            pass

    spares = SpareThreads(keep=1, idle_seconds=10)
    run = Run()
    ref = weakref.ref(run)
    job = _run(spares, run.drive)
    assert wait_for(lambda: spares.waiting == 1, 5)
    del run
    gc.collect()
    try:
        assert ref() is None
        assert job._target is None
    finally:
        spares.close()


def test_no_thread_to_be_had_raises_and_leaves_the_run_thread_dead(monkeypatch):
    spares = SpareThreads(keep=1)

    def refuse(self):
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(threading.Thread, "start", refuse)
    job = RunThread(spares, lambda: None, "agui-run-x")
    with pytest.raises(RuntimeError):
        job.start()
    assert not job.is_alive()
    job.join(0)                                             # returns at once
    with pytest.raises(RuntimeError):
        job.start()                                         # once only, as threading.Thread


def test_join_before_start_is_refused_like_a_thread():
    with pytest.raises(RuntimeError):
        RunThread(SpareThreads(), lambda: None, "agui-run-y").join(0)


def test_a_run_that_raises_ends_its_thread_instead_of_returning_it(monkeypatch):
    spares = SpareThreads(keep=2, idle_seconds=10)
    caught = []
    monkeypatch.setattr(threading, "excepthook", lambda args: caught.append(args.exc_type))

    def boom():
        raise KeyError("x")

    job = _run(spares, boom)
    try:
        assert wait_for(lambda: not any(t.ident == job.ident for t in threading.enumerate()), 5)
        assert caught == [KeyError] and spares.waiting == 0
    finally:
        spares.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_forked_child_does_not_hand_runs_to_the_parents_spares():
    spares = SpareThreads(keep=2, idle_seconds=10)
    try:
        _run(spares, lambda: None)
        assert wait_for(lambda: spares.waiting == 1, 5)
        pid = os.fork()
        if pid == 0:                                        # the child: the parent's spare does not exist here
            code = 1
            try:
                done = []
                job = RunThread(spares, lambda: done.append(1), "agui-run-child")
                job.start()
                job.join(5)
                code = 0 if done == [1] else 2
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
        assert spares.waiting == 1                          # the parent's spare is still its own
    finally:
        spares.close()


def test_the_manager_reuses_an_ended_runs_thread_for_the_next_run(adapter_factory):
    adapter = adapter_factory()
    manager = adapter.app.manager
    assert adapter.run(adapter.body("hello", thread="spare-1"))[-1]["type"] == "RUN_FINISHED"
    assert wait_for(lambda: manager.spares.waiting == 1, 5)
    first = manager.finished_runs()[-1].worker.thread.ident
    assert adapter.run(adapter.body("hello", thread="spare-2"))[-1]["type"] == "RUN_FINISHED"
    assert manager.finished_runs()[-1].worker.thread.ident == first


def _launched_threads(manager):
    """The ``threading.Thread`` each of the manager's runs is launched on, recorded as it is started."""
    threads = []
    original = manager.spares.launch

    def launch(job):
        original(job)
        threads.extend(t for t in threading.enumerate() if t.ident == job.ident and t not in threads)
    manager.spares.launch = launch
    return threads


@pytest.mark.parametrize("keep", [1, 0])
def test_the_spare_run_threads_setting_bounds_the_threads_ended_runs_leave_waiting(adapter_factory, keep):
    adapter = adapter_factory(spare_run_threads=keep)
    manager = adapter.app.manager
    threads = _launched_threads(manager)
    held = adapter.post(adapter.body("slow", thread="spare-held"), stream=True)
    reader, _ = read_sse_until(held, "TEXT_MESSAGE_CONTENT")         # its thread stays busy until it is closed
    assert adapter.run(adapter.body("hello", thread="spare-quick"))[-1]["type"] == "RUN_FINISHED"
    reader.close()                                                   # the client is gone: the held run is cancelled
    assert wait_for(lambda: not manager.live_runs(), 10)
    assert len(threads) == 2                                         # two runs at once: two threads
    assert wait_for(lambda: sum(thread.is_alive() for thread in threads) == keep, 20)
    assert manager.spares.waiting == keep


def test_the_spare_run_thread_idle_setting_ends_a_waiting_spare(adapter_factory):
    adapter = adapter_factory(spare_run_thread_idle=0.2)
    manager = adapter.app.manager
    threads = _launched_threads(manager)
    assert adapter.run(adapter.body("hello", thread="spare-idle"))[-1]["type"] == "RUN_FINISHED"
    assert len(threads) == 1
    assert wait_for(lambda: not threads[0].is_alive(), 20)            # the default would keep it 30 s
    assert manager.spares.waiting == 0


def test_the_spare_run_thread_settings_come_from_flags_and_variables():
    from iaccode_agui.server import cli
    from iaccode_agui.config import ConfigError, Settings

    defaults = Settings(a2a_url="http://127.0.0.1:9/")
    assert (defaults.spare_run_threads, defaults.spare_run_thread_idle) == (4, 30.0)
    for bad in (dict(spare_run_threads=-1), dict(spare_run_thread_idle=0)):
        with pytest.raises(ConfigError):
            Settings(a2a_url="http://127.0.0.1:9/", **bad)

    def settings(argv, env):
        return cli.settings_from(cli.build_parser().parse_args(argv), env, "http://127.0.0.1:9/", None, "/tmp/x")
    chosen = settings(["--spare-run-threads", "1", "--spare-run-thread-idle", "2.5"], {})
    assert (chosen.spare_run_threads, chosen.spare_run_thread_idle) == (1, 2.5)
    env = {"IAC_CODE_AGUI_SPARE_RUN_THREADS": "0", "IAC_CODE_AGUI_SPARE_RUN_THREAD_IDLE": "7"}
    chosen = settings([], env)
    assert (chosen.spare_run_threads, chosen.spare_run_thread_idle) == (0, 7.0)
    assert settings(["--spare-run-threads", "2"], env).spare_run_threads == 2      # the flag wins
    for name, raw, needle in (("IAC_CODE_AGUI_SPARE_RUN_THREADS", "-1", ">= 0"),
                              ("IAC_CODE_AGUI_SPARE_RUN_THREAD_IDLE", "soon", "> 0")):
        with pytest.raises(ConfigError, match=name + ".*" + needle):
            settings([], {name: raw})

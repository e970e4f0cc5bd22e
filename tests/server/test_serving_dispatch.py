"""Which worker serves a request: the one that went idle last, and it keeps nothing of it.

waitress's own pool wakes the worker that has waited longest, so requests one after another cycle through
every worker, and each of them keeps its grown stack and its malloc cache: memory that grew with the
number of workers touched, up to all of them.
"""
import gc
import threading
import weakref

import requests

from iaccode_agui.server.dispatch import NewestFirstPool
from iaccode_agui.server.serving import ServerThread


def _recording_app(served):
    def app(environ, start_response):
        served.append(threading.get_ident())
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "2")])
        return [b"ok"]
    return app


def test_requests_one_after_another_are_served_by_few_workers():
    served = []
    server = ServerThread(_recording_app(served), threads=16, slice_seconds=0.05)
    try:
        with requests.Session() as session:
            session.trust_env = False
            for _ in range(40):
                assert session.post(server.url + "x", data=b"{}", timeout=10).status_code == 200
                session.close()         # a new connection each time, as a streamed run's is
    finally:
        server.stop()
    assert len(served) == 40
    assert len(set(served)) <= 4, "%d of 16 workers served 40 sequential requests" % len(set(served))


class _Task:
    def __init__(self, service=lambda: None):
        self.service = service
        self.cancelled = False

    def cancel(self):
        self.cancelled = True


def test_an_idle_worker_keeps_nothing_of_the_task_it_served():
    pool = NewestFirstPool(2, "test-pool")
    tasks = []
    try:
        done = threading.Semaphore(0)
        for _ in range(4):
            task = _Task(done.release)
            tasks.append(weakref.ref(task))
            pool.add_task(task)
            del task
        for _ in range(4):
            assert done.acquire(timeout=10)
        for _ in range(50):
            gc.collect()
            if all(ref() is None for ref in tasks):
                break
            threading.Event().wait(0.02)
        assert [ref() for ref in tasks] == [None] * 4
    finally:
        pool.shutdown(timeout=5)


def test_the_newest_idle_worker_takes_the_next_task_and_shutdown_cancels_what_waits():
    pool = NewestFirstPool(3, "test-pool")
    served = []
    try:
        for _ in range(10):
            finished = threading.Event()
            pool.add_task(_Task(lambda: (served.append(threading.current_thread().name), finished.set())))
            assert finished.wait(10)
            threading.Event().wait(0.01)          # the worker is back among the idle ones
        assert len(set(served)) == 1, served
    finally:
        pool.shutdown(timeout=5)
    assert not any(thread.is_alive() for thread in pool.threads)
    late = _Task()
    pool.add_task(late)                  # nobody serves it any more
    pool.shutdown(timeout=1)
    assert late.cancelled

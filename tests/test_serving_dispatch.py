"""Which waitress worker serves a request: the one that went idle last, and it keeps nothing of it.

waitress's own pool wakes the worker that has waited longest, so requests one after another cycle through
every worker, and each of them keeps its grown stack, its malloc cache and the connection it served last:
memory that grew with the number of workers touched, up to all of them.
"""
import gc
import threading
import weakref

import requests

from iaccode_agui.dispatch import NewestFirstCondition, NewestFirstDispatcher
from iaccode_agui.serving import ServerThread


def _recording_app(served):
    def app(environ, start_response):
        served.append(threading.get_ident())
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "2")])
        return [b"ok"]
    return app


def test_requests_one_after_another_are_served_by_one_worker():
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


def test_an_idle_worker_keeps_nothing_of_the_connection_it_served():
    channels = []

    class Task:
        def service(self):
            pass

        def cancel(self):
            pass

    dispatcher = NewestFirstDispatcher()
    dispatcher.set_thread_count(2)
    try:
        done = threading.Semaphore(0)
        for _ in range(4):
            task = Task()
            task.service = done.release
            channels.append(weakref.ref(task))
            dispatcher.add_task(task)
            del task
        for _ in range(4):
            assert done.acquire(timeout=10)
        with dispatcher.lock:      # every worker is back waiting
            pass
        for _ in range(50):
            gc.collect()
            if all(ref() is None for ref in channels):
                break
            threading.Event().wait(0.02)
        assert [ref() for ref in channels] == [None] * 4
    finally:
        dispatcher.shutdown(timeout=5)


def test_the_condition_wakes_the_newest_waiter_first_and_all_of_them_on_notify_all():
    lock = threading.Lock()
    condition = NewestFirstCondition(lock)
    woken = []
    ready = threading.Semaphore(0)

    def wait(name):
        with lock:
            ready.release()
            condition.wait()
            woken.append(name)

    threads = []
    for name in ("first", "second", "third"):
        thread = threading.Thread(target=wait, args=(name,), daemon=True)
        thread.start()
        assert ready.acquire(timeout=5)
        threads.append(thread)
        with lock:     # the waiter has released the lock inside wait(): it is registered
            pass
    with lock:
        condition.notify()
    threads[2].join(5)
    assert woken == ["third"]
    with lock:
        condition.notify_all()
    for thread in threads:
        thread.join(5)
    assert sorted(woken) == ["first", "second", "third"] and not any(t.is_alive() for t in threads)

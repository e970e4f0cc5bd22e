"""The first byte of a run does not wait for the run's thread: RUN_STARTED is queued by the request thread and
the run's thread starts once the server asks for the second chunk (i.e. has sent the first).

These tests drive the WSGI app directly, chunk by chunk, as a server would, so they can look between
chunks; they check order and outcomes, never timings.
"""
import json
import threading

from werkzeug.test import EnvironBuilder

from tests.agui_checker import check_stream
from tests.harness import wait_for


def _call(adapter, text="firehose 3", thread="fb-1"):
    body = json.dumps(adapter.body(text, thread=thread)).encode("utf-8")
    environ = EnvironBuilder(method="POST", path="/", data=body,
                             headers={"Content-Type": "application/json", "Accept": "text/event-stream"}).get_environ()
    started = []
    response = adapter.app(environ, lambda status, headers, exc_info=None: started.append(status))
    assert started == ["200 OK"]
    return response


def _types(chunks):
    return [event["type"] for event in check_stream(b"".join(chunks))]


def test_run_started_is_the_first_chunk_and_the_thread_starts_after_it(adapter_factory):
    adapter = adapter_factory()
    response = _call(adapter)
    worker = adapter.app.manager.live_runs()[0].worker
    first = next(response)
    assert b'"RUN_STARTED"' in first
    assert not worker.thread.is_alive() and worker.thread.ident is None   # not even created yet
    rest = list(response)
    response.close()
    assert worker.thread.ident is not None
    assert _types([first] + rest)[-1] == "RUN_FINISHED"
    assert wait_for(lambda: adapter.app.manager.active_count() == 0, 5)


def test_a_response_closed_after_its_first_chunk_still_runs_and_ends_the_run(adapter_factory):
    adapter = adapter_factory()
    response = _call(adapter, "sleep 0.3", thread="fb-2")
    worker = adapter.app.manager.live_runs()[0].worker
    assert b'"RUN_STARTED"' in next(response)
    response.close()                      # the client left before the second chunk
    assert wait_for(lambda: worker.finished, 10)
    assert worker.error_code == "CANCELLED"
    assert wait_for(lambda: adapter.app.manager.active_count() == 0, 5)
    assert adapter.run(adapter.body("hello", thread="fb-2"))[-1]["type"] == "RUN_FINISHED"


def test_no_thread_for_the_run_ends_it_with_run_error_in_the_response(adapter_factory, monkeypatch):
    adapter = adapter_factory()
    original = threading.Thread.start

    def refuse(self):
        if self.name.startswith("agui-run-"):
            raise RuntimeError("can't start new thread")
        return original(self)

    monkeypatch.setattr(threading.Thread, "start", refuse)
    response = _call(adapter, thread="fb-3")
    chunks = list(response)
    response.close()
    events = check_stream(b"".join(chunks))
    assert [e["type"] for e in events] == ["RUN_STARTED", "RUN_ERROR"]
    assert events[-1]["code"] == "A2A_UNAVAILABLE"
    assert wait_for(lambda: adapter.app.manager.active_count() == 0, 5)
    monkeypatch.setattr(threading.Thread, "start", original)
    assert adapter.run(adapter.body("hello", thread="fb-3"))[-1]["type"] == "RUN_FINISHED"

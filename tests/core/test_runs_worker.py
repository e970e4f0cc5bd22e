"""``RunWorker``: effects durable before the events they guard, and a balanced stream when a write fails."""
from iaccode_agui.runs.recorder import StateRecorder
from iaccode_agui.state.store import StateWriteFailed
from tests.agui_checker import check_stream
from tests.run_harness import TASK, body, finish, start, status, task_frame
from tests.run_harness import client, manager  # noqa: F401  (pytest fixtures)


def test_bind_write_failure_keeps_the_stream_balanced(manager, client, monkeypatch):
    # No session id on the first frames (a generic A2A agent, or iac-code before the session is known):
    # the held task binding is flushed by the first *event*, here TEXT_MESSAGE_START.
    def refuse(self, task_id=None, session_id=None):
        raise StateWriteFailed("disk full")

    monkeypatch.setattr(StateRecorder, "bind", refuse)
    client.streams.append([task_frame("submitted", session=False), status("working", "Hello there", session=False),
                           status("completed", session=False)])
    run, sub = start(manager, body(manager, run="run-1"))
    raw = finish(manager, run, sub)
    assert b"STATE_PERSISTENCE_FAILED" in raw and ("CancelTask", TASK) in client.calls
    check_stream(raw)   # TEXT_MESSAGE_CONTENT/END of a message whose TEXT_MESSAGE_START was never sent


def test_events_held_for_one_write_go_out_before_the_worker_waits_for_the_runtime(manager, client):
    # The worker logs what one upstream read brought in one write; it must flush before it blocks on the
    # next read, or a client would not see text the runtime sent until the runtime sent more.
    import threading

    from iaccode_agui.sse.framequeue import END

    seen = threading.Event()
    client.streams.append([task_frame("submitted"), status("working", "Hello there"),
                           lambda: seen.wait(10), status("completed")])
    run, sub = start(manager, body(manager, run="run-1"))
    frames = list(sub.replay)
    try:
        for _ in range(40):
            frames.extend(item for item in sub.queue.take(0.05) if item is not END)
            if b"Hello there" in b"".join(frames):
                break
        assert b"Hello there" in b"".join(frames)
    finally:
        seen.set()
    check_stream(b"".join(frames) + finish(manager, run, sub))

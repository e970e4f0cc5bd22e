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

"""A new turn on a thread whose session the runtime has forgotten: a specific code, a clear message, a log line."""
import logging
import socket

from iaccode_agui import errors, i18n
from tests.harness import interrupt_of, session_of, wait_for


def _forget_everything(demo):
    """What a runtime restarted without its session store looks like to the adapter."""
    store = demo.runtime.store
    with store._lock:
        store._sessions.clear()
        store._tasks.clear()


def test_a_forgotten_session_on_a_new_turn_says_so(adapter, demo, caplog):
    caplog.set_level(logging.WARNING, logger="iaccode_agui.runs")
    first = adapter.run(adapter.body("hello", thread="forgotten"))
    old_session = session_of(first)["sessionId"]
    _forget_everything(demo)
    events = adapter.run(adapter.body("hello again", thread="forgotten"),
                         headers={"Accept-Language": "fr"})
    assert events[-1]["type"] == "RUN_ERROR"
    assert events[-1]["code"] == "CONVERSATION_LOST"
    assert events[-1]["message"] == i18n.translate(errors.MSG_CONVERSATION_LOST, "fr")
    assert "interrupted" not in errors.MSG_CONVERSATION_LOST
    lines = [record.getMessage() for record in caplog.records if "no longer has session" in record.getMessage()]
    assert lines and "forgotten" in lines[0] and old_session in lines[0]
    # the task the runtime opened for the lost turn is not left running
    new_tasks = list(demo.runtime.store._tasks.values())
    assert new_tasks and wait_for(lambda: all(task.terminal for task in new_tasks), 5)


def test_a_new_thread_after_the_loss_works(adapter, demo):
    adapter.run(adapter.body("hello", thread="lost-2"))
    _forget_everything(demo)
    assert adapter.run(adapter.body("hello", thread="lost-2"))[-1]["code"] == "CONVERSATION_LOST"
    assert adapter.run(adapter.body("hello", thread="fresh"))[-1]["type"] == "RUN_FINISHED"


def test_a_pending_interrupt_the_runtime_forgot_is_no_dead_end(adapter, demo):
    """Runtime restarted without its state while an interrupt waited: the resume settles the thread."""
    interrupt = interrupt_of(adapter.run(adapter.body("write", thread="lost-3")))
    _forget_everything(demo)
    answer = [{"interruptId": interrupt["id"], "status": "resolved", "payload": {"decision": "allow_once"}}]
    events = adapter.run(adapter.body(None, thread="lost-3", resume=answer), headers={"Accept-Language": "fr"})
    assert events[-1]["type"] == "RUN_ERROR" and events[-1]["code"] == "CONVERSATION_LOST"
    assert events[-1]["message"] == i18n.translate(errors.MSG_CONVERSATION_LOST, "fr")
    assert not adapter.app.store.load("lost-3").execution.pending
    # the next request on the thread is a turn the runtime answers for what it is, never RESUME_REQUIRED
    follow = adapter.post(adapter.body("hello", thread="lost-3"))
    assert follow.status_code == 200, follow.text
    # an interrupt that was cancelled the same way gets the same answer
    interrupt = interrupt_of(adapter.run(adapter.body("write", thread="lost-4")))
    _forget_everything(demo)
    cancelled = [{"interruptId": interrupt["id"], "status": "cancelled"}]
    assert adapter.run(adapter.body(None, thread="lost-4", resume=cancelled))[-1]["code"] == "CONVERSATION_LOST"


def test_an_unreachable_runtime_settles_nothing(adapter_factory, demo, tmp_path):
    state_dir = str(tmp_path / "shared-state")
    first = adapter_factory(state_dir=state_dir)
    interrupt = interrupt_of(first.run(first.body("write", thread="lost-5")))
    first.stop()
    with socket.socket() as probe:            # a port nobody listens on: the runtime is down, not amnesic
        probe.bind(("127.0.0.1", 0))
        dead = "http://127.0.0.1:%d/" % probe.getsockname()[1]
    down = adapter_factory(state_dir=state_dir, upstream_url=dead, connect_timeout=1.0)
    answer = [{"interruptId": interrupt["id"], "status": "resolved", "payload": {"decision": "allow_once"}}]
    assert down.run(down.body(None, thread="lost-5", resume=answer))[-1]["code"] == "A2A_UNAVAILABLE"
    assert list(down.app.store.load("lost-5").execution.pending) == [interrupt["id"]]
    blocked = down.post(down.body("new turn", thread="lost-5"))
    assert blocked.status_code == 409 and blocked.json()["error"]["code"] == "RESUME_REQUIRED"


def test_the_code_is_in_the_table_and_every_catalog():
    assert errors.ERRORS["CONVERSATION_LOST"] == (409, errors.MSG_CONVERSATION_LOST)
    for language in ("zh", "fr", "ja", "de", "es", "pt"):
        assert i18n.translate(errors.MSG_CONVERSATION_LOST, language) != errors.MSG_CONVERSATION_LOST

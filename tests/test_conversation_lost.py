"""A new turn on a thread whose session the runtime has forgotten: a specific code, a clear message, a log line."""
import logging

from iaccode_agui import errors, i18n
from tests.harness import session_of, wait_for


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


def test_the_code_is_in_the_table_and_every_catalog():
    assert errors.ERRORS["CONVERSATION_LOST"] == (409, errors.MSG_CONVERSATION_LOST)
    for language in ("zh", "fr", "ja", "de", "es", "pt"):
        assert i18n.translate(errors.MSG_CONVERSATION_LOST, language) != errors.MSG_CONVERSATION_LOST

"""Behaviour docs/migration.rst lists as a deliberate difference from ``iac-code agui``, pinned end to end."""
from tests.harness import interrupt_of


def test_an_empty_resume_list_is_no_resume(adapter):
    events = adapter.run(adapter.body("hello", thread="empty-1", resume=[]))
    assert events[-1]["type"] == "RUN_FINISHED" and events[-1]["outcome"]["type"] == "success"
    without_message = adapter.post(adapter.body(None, thread="empty-2", resume=[]))
    assert without_message.status_code == 400 and without_message.json()["error"]["code"] == "INVALID_INPUT"


def test_an_empty_resume_list_on_a_waiting_thread_asks_for_the_answers(adapter):
    interrupt_of(adapter.run(adapter.body("please write a file", thread="empty-3")))
    response = adapter.post(adapter.body("hello", thread="empty-3", resume=[]))
    assert response.status_code == 409 and response.json()["error"]["code"] == "RESUME_REQUIRED"


def test_a_tool_call_ends_the_text_before_it_and_the_answer_is_a_new_message(adapter):
    events = adapter.run(adapter.body("tool", thread="boundary-1"))
    kinds = [e["type"] for e in events]
    call = kinds.index("TOOL_CALL_START")
    assert kinds[call - 1] == "TEXT_MESSAGE_END" and events[call]["parentMessageId"] == events[call - 1]["messageId"]
    starts = [e["messageId"] for e in events if e["type"] == "TEXT_MESSAGE_START"]
    assert len(starts) == 2 and starts[0] != starts[1] and kinds.index("TEXT_MESSAGE_START", call) > call


def test_a_resume_under_the_interrupted_run_id_continues_that_run(adapter):
    first = adapter.body("please write a file", thread="same-id", run="r1")
    interrupt = interrupt_of(adapter.run(first))
    resume = [{"interruptId": interrupt["id"], "status": "resolved", "payload": {"decision": "allow_once"}}]
    events = adapter.run(dict(first, messages=[], resume=resume))
    assert events[0]["runId"] == "r1" and events[-1]["outcome"] == {"type": "success"}

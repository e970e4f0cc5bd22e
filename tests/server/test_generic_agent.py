"""The adapter in front of a generic A2A 1.0 agent built with the official a2a-sdk.

The agent (tests/generic_agent.py) is the SDK's own server stack under uvicorn, so these tests check the
adapter against real SDK wire output rather than our reading of the spec.  Skipped when the test-only
``a2a-sdk[http-server]`` / ``uvicorn`` dependencies are not installed.
"""
import hashlib
import time
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pytest
import requests

pytest.importorskip("a2a.server.request_handlers", reason="needs the a2a-sdk[http-server] test extra")
pytest.importorskip("uvicorn", reason="needs uvicorn (test extra) to serve the a2a-sdk agent")

from tests.agui_checker import types  # noqa: E402
from tests.generic_agent import (ARTIFACT_CHUNKS, ARTIFACT_ID, CRASH_PREFACE, ECHO_CHUNKS,  # noqa: E402
                                 FAILURE_TEXT, PLAIN_REPLY, QUESTION, GenericAgentServer, first_text)
from tests.harness import Adapter, interrupt_of, text_of, wait_for  # noqa: E402


@pytest.fixture
def agent() -> Iterator[GenericAgentServer]:
    server = GenericAgentServer.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def generic(agent, tmp_path, workspace) -> Iterator[Adapter]:
    adapter = Adapter(agent.url, None, str(tmp_path / "state"), workspace, upstream_kind="auto")
    # The card is asked in the background and a run never waits for it: these runs come once it is in.
    assert wait_for(lambda: adapter.app.manager.kind.settled)
    try:
        yield adapter
    finally:
        adapter.stop()


def context_id_of(thread: str) -> str:
    return "agui-" + hashlib.sha256(thread.encode("utf-8")).hexdigest()[:40]


def customs(events, name):
    return [e["value"] for e in events if e["type"] == "CUSTOM" and e["name"] == name]


# ---- detection ---------------------------------------------------------------------------------------
def test_agent_card_without_iac_code_extensions_is_generic(generic):
    assert generic.app.manager.upstream_is_generic() is True


def test_iac_code_runtime_card_is_not_generic(adapter_factory):
    adapter = adapter_factory(upstream_kind="auto")
    assert wait_for(lambda: adapter.app.manager.kind.settled)
    assert adapter.app.manager.upstream_is_generic() is False


# ---- behaviours --------------------------------------------------------------------------------------
def test_streamed_status_text_and_chunked_artifact(generic, agent):
    events = generic.run(generic.body("echo", thread="g-echo"))
    kinds = types(events)
    assert kinds[0] == "RUN_STARTED" and events[-1]["type"] == "RUN_FINISHED"
    assert events[-1]["outcome"] == {"type": "success"}
    assert text_of(events) == "".join(ECHO_CHUNKS)
    # each status update carries its own agent message: two text messages, in order
    contents = [e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT"]
    assert contents == list(ECHO_CHUNKS)
    assert kinds.count("TEXT_MESSAGE_START") == 2 and kinds.count("TEXT_MESSAGE_END") == 2
    artifacts = customs(events, "iac-code.artifact.v1")
    assert [(a["schemaVersion"], a["artifactId"], a["name"]) for a in artifacts] == [(1, ARTIFACT_ID, "echo.txt")] * 2
    assert [a["parts"] for a in artifacts] == [[{"text": chunk}] for chunk in ARTIFACT_CHUNKS]
    # the adapter's context and iac_code metadata reach the agent, which simply ignores them
    (sent,) = agent.messages()
    assert sent["contextId"] == context_id_of("g-echo") and sent["role"] == "ROLE_USER"
    assert first_text(sent) == "echo" and sent["metadata"]["iac_code"]["cwd"] == generic.workspace


def test_message_only_reply_is_text_and_success(generic):
    events = generic.run(generic.body("msg", thread="g-msg"))
    assert text_of(events) == PLAIN_REPLY
    assert events[-1]["type"] == "RUN_FINISHED" and events[-1]["outcome"] == {"type": "success"}


def test_failed_task_is_run_error(generic):
    events = generic.run(generic.body("boom", thread="g-boom"))
    assert text_of(events) == FAILURE_TEXT       # the agent's own words on the FAILED status are kept
    assert events[-1]["type"] == "RUN_ERROR" and events[-1]["code"] == "A2A_EXECUTION_FAILED"


def test_agent_exception_mid_stream_is_run_error(generic):
    events = generic.run(generic.body("crash", thread="g-crash"))
    assert text_of(events) == CRASH_PREFACE
    assert events[-1]["type"] == "RUN_ERROR" and events[-1]["code"] == "A2A_UNAVAILABLE"
    task_id = generic.app.store.load("g-crash").execution.task_id
    assert generic.app.client.get_task(task_id)["status"]["state"] == "TASK_STATE_FAILED"


def ask_name(adapter: Adapter, thread: str, run: Optional[str] = None) -> Tuple[List[Dict[str, Any]], Dict[str, Any]]:
    """Start the ``ask`` turn: its events and its (single) interrupt."""
    events = adapter.run(adapter.body("ask", thread=thread, run=run))
    return events, interrupt_of(events)


def answer(interrupt, **entry):
    return [dict({"interruptId": interrupt["id"], "status": "resolved"}, **entry)]


def test_input_required_is_a_free_text_interrupt_answered_on_the_same_task(generic, agent):
    first, interrupt = ask_name(generic, "g-ask", run="ask-1")
    assert text_of(first) == QUESTION
    task_id = generic.app.store.load("g-ask").execution.task_id
    assert task_id and interrupt["id"] == "input-%s" % task_id
    assert interrupt["reason"] == "input_required" and interrupt["message"] == QUESTION
    assert interrupt["responseSchema"]["required"] == ["freeText"]
    assert "toolCallId" not in interrupt and interrupt["metadata"]["inputId"] == interrupt["id"]
    state = generic.app.store.load("g-ask")
    assert list(state.execution.pending) == [interrupt["id"]] and state.active_run is None

    resumed = generic.run(generic.body(None, thread="g-ask", run="ask-2",
                                       resume=answer(interrupt, payload={"freeText": "Ada"})))
    assert resumed[-1]["type"] == "RUN_FINISHED" and resumed[-1]["outcome"] == {"type": "success"}
    assert text_of(resumed) == "Hello, Ada!"
    question, reply = agent.messages()
    assert reply["taskId"] == question["taskId"] == task_id
    assert reply["contextId"] == question["contextId"] == context_id_of("g-ask")
    assert reply["role"] == "ROLE_USER" and [p["text"] for p in reply["parts"]] == ["Ada"]
    assert reply["messageId"] != question["messageId"] and "iac_code" in reply["metadata"]
    assert generic.app.store.load("g-ask").execution.pending == {}
    # the thread goes on: a new turn is a new task in the same context
    generic.run(generic.body("echo", thread="g-ask", run="ask-3"))
    third = agent.messages()[2]
    assert third["contextId"] == context_id_of("g-ask") and third["taskId"] != task_id


def test_invalid_free_text_answer_is_refused_before_reaching_the_agent(generic, agent):
    _, interrupt = ask_name(generic, "g-bad")
    refused = generic.run(generic.body(None, thread="g-bad", resume=answer(interrupt, payload={"freeText": ""})))
    assert refused[-1]["type"] == "RUN_ERROR" and refused[-1]["code"] == "RESUME_PAYLOAD_INVALID"
    assert len(agent.messages()) == 1
    assert list(generic.app.store.load("g-bad").execution.pending) == [interrupt["id"]]


def test_cancelled_free_text_answer_cancels_the_agent_task(generic, agent):
    _, interrupt = ask_name(generic, "g-cancel")
    task_id = generic.app.store.load("g-cancel").execution.task_id
    cancelled = generic.run(generic.body(None, thread="g-cancel",
                                         resume=[{"interruptId": interrupt["id"], "status": "cancelled"}]))
    assert cancelled[-1]["type"] == "RUN_ERROR" and cancelled[-1]["code"] == "CANCELLED"
    assert generic.app.client.get_task(task_id)["status"]["state"] == "TASK_STATE_CANCELED"
    assert len(agent.messages()) == 1          # a cancel is CancelTask, never a message
    assert generic.app.store.load("g-cancel").execution.pending == {}


def test_message_only_reply_leaves_the_thread_usable(generic, agent):
    generic.run(generic.body("msg", thread="g-msg2"))
    assert generic.app.store.load("g-msg2").execution.task_id is None
    assert generic.run(generic.body("echo", thread="g-msg2"))[-1]["outcome"] == {"type": "success"}
    assert [m["contextId"] for m in agent.messages()] == [context_id_of("g-msg2")] * 2


# ---- adapter bugs found with this agent -----------------------------------------------------------
def test_chunked_artifact_keeps_append_and_last_chunk(generic):
    """A generic agent streams one artifact in chunks; without ``append`` a client cannot tell a chunk that
    extends the artifact from one that replaces it (A2A: ``append:false`` with the same id replaces)."""
    artifacts = customs(generic.run(generic.body("echo", thread="g-chunks")), "iac-code.artifact.v1")
    assert [a.get("append", False) for a in artifacts] == [False, True]
    assert [a.get("lastChunk", False) for a in artifacts] == [False, True]


def test_resume_sent_the_moment_the_body_ends(generic, monkeypatch):
    """A client that resumes as soon as the interrupted run's body ends must be admitted.

    The worker's end-of-run bookkeeping is slowed down here only to make the race deterministic: whatever
    it takes, the body must not end before the run lease is released (found with this agent: the lease
    used to be released only after the channel closed).
    """
    manager = generic.app.manager
    original = manager.run_ended

    def slow_ended(run):
        time.sleep(0.3)
        original(run)

    monkeypatch.setattr(manager, "run_ended", slow_ended)
    interrupt = interrupt_of(generic.run(generic.body("ask", thread="g-race")))
    resumed = generic.run(generic.body(None, thread="g-race", resume=answer(interrupt, payload={"freeText": "Bo"})))
    assert text_of(resumed) == "Hello, Bo!"


def test_a_generic_agents_conversation_is_kept_and_a_resume_opens_with_it(generic):
    first, interrupt = ask_name(generic, "g-history")
    resumed = generic.run(generic.body(None, thread="g-history", resume=answer(interrupt, payload={"freeText": "Ada"})))
    snapshot = next(event for event in resumed if event["type"] == "MESSAGES_SNAPSHOT")
    assert resumed.index(snapshot) == 1 and snapshot["messages"][-1]["content"]["interrupt"] == interrupt
    stored = requests.get(generic.url + "threads/g-history/messages", timeout=10).json()["messages"]
    assert [m["role"] for m in stored][0] == "user" and stored[0]["content"] == "ask"
    asked = next(m for m in stored if m["role"] == "activity")
    assert asked["content"]["answer"] == {"status": "resolved", "payload": {"freeText": "Ada"}}
    assert "".join(m.get("content") or "" for m in stored if m["role"] == "assistant") == QUESTION + "Hello, Ada!"

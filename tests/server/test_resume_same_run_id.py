"""A resume that carries the interrupted run's id (CopilotKit's ``useInterrupt``), on both routes, end to end.

It continues that run: admitted like a resume with a fresh id, its events a new segment of the run's SSE ids
(the n-th continuation from ``n * SEGMENT_SPAN``), so an attach or ``Last-Event-ID`` to the run id reads the
latest segment.  Each of these failed before: the resume was refused (``409 RUN_ID_CONFLICT`` /
``RUN_ALREADY_EXISTS``).
"""
import json
import os
import uuid

import pytest

from iaccode_agui.runs.admission import SEGMENT_SPAN
from tests.agentcore_helpers import ac_body, ac_post, attach_body, error_of
from tests.agui_checker import check_sequence, parse_sse
from tests.harness import interrupt_of


def allow(interrupt_id, decision="allow_once"):
    return [{"interruptId": interrupt_id, "status": "resolved", "payload": {"decision": decision}}]


def copilotkit_resume(first_body, interrupt, resume, tool_content=None):
    """What ``useInterrupt`` sends: the interrupted run's id, its history plus a ``tool`` message, ``resume``."""
    answer = resume[0].get("payload", {"status": resume[0]["status"]})
    tool = {"id": str(uuid.uuid4()), "role": "tool", "toolCallId": interrupt["toolCallId"],
            "content": json.dumps(answer if tool_content is None else tool_content)}
    return dict(first_body, messages=first_body["messages"] + [tool], resume=resume)


class Route:
    """One route family: how to build a body, post it, and read the ids and events of a stream."""

    def __init__(self, adapter, agentcore):
        self.adapter, self.agentcore = adapter, agentcore

    def body(self, text, thread, run=None, resume=None):
        if self.agentcore:
            return ac_body(text, thread=thread, run=run, resume=resume)
        return self.adapter.body(text, thread=thread, run=run, resume=resume)

    def post(self, body, **kwargs):
        return ac_post(self.adapter, body, **kwargs) if self.agentcore else self.adapter.post(body, **kwargs)

    def stream(self, body, **kwargs):
        response = self.post(body, **kwargs)
        assert response.status_code == 200, response.text
        events, ids, _ = parse_sse(response.content)
        return events, ids

    def refusal(self, response, plain_code):
        code = {"DUPLICATE_RUN_ID": "RUN_ALREADY_EXISTS", "RUN_ID_CONFLICT": "RUN_ALREADY_EXISTS"}.get(plain_code)
        return error_of(response)[:2] == (409, code if self.agentcore and code else plain_code)


@pytest.fixture(params=["post-root", "agentcore"])
def route(request, adapter_factory, workspace):
    agentcore = request.param == "agentcore"
    return Route(adapter_factory(default_cwd=workspace) if agentcore else adapter_factory(), agentcore)


def test_a_resume_with_the_interrupted_run_id_continues_that_run(route, workspace, demo):
    first_body = route.body("please write a file", thread="same-1", run="r1")
    first, first_ids = route.stream(first_body)
    interrupt = interrupt_of(first)
    assert first_ids == list(range(len(first)))
    body = copilotkit_resume(first_body, interrupt, allow(interrupt["id"]))
    events, ids = route.stream(body)
    check_sequence(events)
    assert events[0]["type"] == "RUN_STARTED" and events[0]["runId"] == "r1"
    assert events[-1]["type"] == "RUN_FINISHED" and events[-1]["outcome"] == {"type": "success"}
    assert ids == list(range(SEGMENT_SPAN, SEGMENT_SPAN + len(events)))     # a new segment of r1's ids
    assert os.path.exists(os.path.join(workspace, "hello.txt")) and len(demo.runtime.tool_executions) == 1
    state = route.adapter.app.store.load("same-1")
    assert state.execution.interrupted_run_id == "r1" and state.execution.continuations == 1
    # Replay protection as documented: the same request again, another request under r1, the same answer
    # under a fresh id.
    assert route.refusal(route.post(body), "DUPLICATE_RUN_ID")
    assert route.refusal(route.post(route.body("hello", thread="same-1", run="r1")), "RUN_ID_CONFLICT")
    replay, _ = route.stream(route.body(None, thread="same-1", resume=allow(interrupt["id"])))
    assert replay[-1]["type"] == "RUN_ERROR" and replay[-1]["code"] == "RESUME_ALREADY_APPLIED"
    # The answer again under r1 in another body (CopilotKit makes a new tool message id each time): admitted
    # as the next continuation, told the answer was applied; the tool never runs twice.
    again, again_ids = route.stream(copilotkit_resume(first_body, interrupt, allow(interrupt["id"])))
    assert again[-1]["type"] == "RUN_ERROR" and again[-1]["code"] == "RESUME_ALREADY_APPLIED"
    assert again_ids[0] == 2 * SEGMENT_SPAN and len(demo.runtime.tool_executions) == 1


def test_a_run_id_other_than_the_interrupted_one_is_still_refused(route):
    route.stream(route.body("hello", thread="same-2", run="r0"))
    first_body = route.body("please write a file", thread="same-2", run="r1")
    interrupt = interrupt_of(route.stream(first_body)[0])
    # r0 ran on this thread but did not end in these interrupts.
    assert route.refusal(route.post(route.body(None, thread="same-2", run="r0", resume=allow(interrupt["id"]))),
                         "RUN_ID_CONFLICT")
    assert route.adapter.app.store.load("same-2").execution.pending     # nothing was applied


def test_a_continuation_that_interrupts_again_is_continued_in_the_next_segment(route, demo):
    first_body = route.body("write twice", thread="same-3", run="r1")
    interrupt = interrupt_of(route.stream(first_body)[0])
    second, ids = route.stream(copilotkit_resume(first_body, interrupt, allow(interrupt["id"])))
    following = interrupt_of(second)
    assert following["id"] != interrupt["id"] and ids[0] == SEGMENT_SPAN
    third, ids = route.stream(copilotkit_resume(first_body, following, allow(following["id"])))
    assert third[-1]["outcome"] == {"type": "success"} and ids[0] == 2 * SEGMENT_SPAN
    assert len(demo.runtime.tool_executions) == 2


def test_the_run_id_names_its_latest_segment_for_re_attach(route):
    first_body = route.body("please write a file", thread="same-4", run="r1")
    first, first_ids = route.stream(first_body)
    interrupt = interrupt_of(first)
    body = copilotkit_resume(first_body, interrupt, allow(interrupt["id"]))
    events, ids = route.stream(body)

    def attach(after):
        if route.agentcore:
            return ac_post(route.adapter, attach_body("same-4", "r1", after))
        return route.adapter.post(body, headers={"Last-Event-ID": str(after)})
    # An id of the interrupted segment (even its last one) asks for the continuation from its start.
    for after in (0, first_ids[-1]):
        response = attach(after)
        assert response.status_code == 200, response.text
        assert parse_sse(response.content)[1] == ids
    tail = attach(ids[-2])
    assert parse_sse(tail.content)[1] == [ids[-1]]
    assert error_of(attach(ids[-1]))[:2] == (409, "RUN_ALREADY_TERMINAL")


def test_the_resume_entries_win_over_a_tool_message_that_disagrees(route, workspace, demo):
    first_body = route.body("please write a file", thread="same-5", run="r1")
    interrupt = interrupt_of(route.stream(first_body)[0])
    body = copilotkit_resume(first_body, interrupt, allow(interrupt["id"]), tool_content={"decision": "deny"})
    events, _ = route.stream(body)
    assert events[-1]["outcome"] == {"type": "success"}
    assert os.path.exists(os.path.join(workspace, "hello.txt")) and len(demo.runtime.tool_executions) == 1


def test_a_tool_message_without_resume_is_told_to_send_resume(route):
    first_body = route.body("please write a file", thread="same-6", run="r1")
    interrupt = interrupt_of(route.stream(first_body)[0])
    body = copilotkit_resume(first_body, interrupt, allow(interrupt["id"]))
    del body["resume"]
    body["runId"] = "r2"
    status, code, message = error_of(route.post(body))
    assert (status, code) == (409, "RESUME_REQUIRED") and "send the answer in resume" in message
    assert route.adapter.app.store.load("same-6").execution.pending      # still waiting, nothing sent


def test_a_continuation_admitted_elsewhere_is_what_the_run_id_names_everywhere(adapter_factory, tmp_path):
    """Two adapters on one state directory stand for two processes (``test_runlog_e2e``): the interrupted
    segment is kept by one, its continuation runs on the other; a re-attach through the first must read the
    continuation (from its log), not the segment it keeps in memory."""
    shared = str(tmp_path / "shared")
    first_process, second_process = adapter_factory(state_dir=shared), adapter_factory(state_dir=shared)
    first_body = first_process.body("please write a file", thread="same-x", run="r1")
    interrupt = interrupt_of(first_process.run(first_body))
    body = copilotkit_resume(first_body, interrupt, allow(interrupt["id"]))
    response = second_process.post(body)
    events, ids, _ = parse_sse(response.content)
    assert events[-1]["outcome"] == {"type": "success"} and ids[0] == SEGMENT_SPAN
    assert first_process.app.manager.find_run("same-x", "r1") is not None     # the old segment, kept there
    again = first_process.post(body, headers={"Last-Event-ID": "0"})
    assert again.status_code == 200, again.text
    assert parse_sse(again.content)[1] == ids

"""Review findings about runs started on ``/ag-ui/agent``, which a closed connection alone does not stop.

A new run on the same thread while such a run goes on with no client attached is the stop of a client that
never calls the stop route (CopilotKit's stop only drops the stream): the detached run is cancelled and the
new one admitted.  A run with a client attached keeps the thread busy (``409 SESSION_UNAVAILABLE``).

This test used to pin the opposite (a review finding of the time: the run the client was told would go on
must never be cancelled, ``409`` instead); the behaviour changed on purpose (issue: stop by disconnect).
"""
from tests.agentcore_helpers import ac_body, ac_post, attach_body, error_of
from tests.agui_checker import parse_sse
from tests.harness import SSEReader, wait_for


def test_a_new_run_cancels_a_disconnected_agentcore_run_and_is_admitted(adapter_factory, workspace, demo):
    ac = adapter_factory(default_cwd=workspace)
    reader = SSEReader(ac_post(ac, ac_body("slow", thread="s-kept", run="r-kept"), stream=True))
    seen = reader.until("TEXT_MESSAGE_CONTENT")
    reader.close()
    run = ac.app.manager.find_run("s-kept", "r-kept")
    assert run is not None and run.keep_without_client
    assert wait_for(lambda: run.channel.client_gone(), 10)      # the server has seen the disconnect
    second = ac_post(ac, ac_body("hello", thread="s-kept", run="r-next"))
    assert second.status_code == 200, (second.status_code, second.text[-300:])
    assert parse_sse(second.content)[0][-1]["type"] == "RUN_FINISHED"
    task_id = run.worker.projector.task_id
    assert [call for call in demo.runtime.requests_log if call[0] == "CancelTask"] == [("CancelTask", task_id)]
    attached = ac_post(ac, attach_body("s-kept", "r-kept", len(seen) - 1), timeout=30)
    rest, _, _ = parse_sse(attached.content)
    assert rest[-1]["type"] == "RUN_ERROR" and rest[-1]["code"] == "RUN_CANCELLED", rest[-1]


def test_a_new_run_never_cancels_an_agentcore_run_with_a_client_attached(adapter_factory, workspace, demo):
    ac = adapter_factory(default_cwd=workspace)
    reader = SSEReader(ac_post(ac, ac_body("slow", thread="s-held", run="r-held"), stream=True))
    reader.until("TEXT_MESSAGE_CONTENT")
    second = ac_post(ac, ac_body("hello", thread="s-held", run="r-next"))
    assert error_of(second)[:2] == (409, "SESSION_UNAVAILABLE")   # THREAD_BUSY, as this route spells it
    assert not any(call[0] == "CancelTask" for call in demo.runtime.requests_log)
    run = ac.app.manager.find_run("s-held", "r-held")
    assert run.worker is not None and not run.worker.cancel_requested
    reader.close()

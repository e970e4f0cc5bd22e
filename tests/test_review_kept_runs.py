"""Review findings about runs started on ``/ag-ui/agent``, which a closed connection does not stop.

README (AgentCore, Disconnects): "A closed connection does not stop the run: it goes on to its end or its
interrupt and its events are kept for attach. Stop a run explicitly."  A new run on the same thread while
such a run goes on must therefore answer ``409 THREAD_BUSY`` (``SESSION_UNAVAILABLE`` on that route) (as it does for an adopted run a client may
still attach to), never cancel the run the client was told would go on.
"""
from tests.agentcore_helpers import ac_body, ac_post, attach_body, error_of
from tests.agui_checker import parse_sse
from tests.harness import SSEReader, wait_for


def test_a_new_run_never_cancels_a_disconnected_agentcore_run(adapter_factory, workspace, demo):
    """REVIEW DEFECT (pre-existing, runs/manager.py _free_abandoned): it ignores ``keep_without_client``.

    Before the fix the second POST cancelled the kept run (CancelTask sent, RUN_ERROR on attach) and was
    admitted itself."""
    ac = adapter_factory(default_cwd=workspace)
    reader = SSEReader(ac_post(ac, ac_body("slow", thread="s-kept", run="r-kept"), stream=True))
    seen = reader.until("TEXT_MESSAGE_CONTENT")
    reader.close()
    run = ac.app.manager.find_run("s-kept", "r-kept")
    assert run is not None and run.keep_without_client
    assert wait_for(lambda: run.channel.client_gone(), 10)      # the server has seen the disconnect
    second = ac_post(ac, ac_body("hello", thread="s-kept", run="r-next"))
    assert second.status_code == 409, (second.status_code, second.text[-300:])
    assert error_of(second)[:2] == (409, "SESSION_UNAVAILABLE")   # THREAD_BUSY, as this route spells it
    assert not any(call[0] == "CancelTask" for call in demo.runtime.requests_log)
    assert run.worker is not None and not run.worker.cancel_requested
    attached = ac_post(ac, attach_body("s-kept", "r-kept", len(seen) - 1), stream=True, timeout=90)
    assert attached.status_code == 200
    rest, _, _ = parse_sse(attached.content)
    assert rest[-1]["type"] == "RUN_FINISHED", rest[-1]

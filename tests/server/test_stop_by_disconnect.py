"""Stop by disconnect on ``/ag-ui/agent``: a new message on the thread, or ``--detached-run-timeout``.

Stock clients (CopilotKit) stop a run by dropping its stream and never call the stop route.  A new request
on the thread then cancels the run when no client is attached to it anywhere (here, or through another
process on the state directory); a run with a client attached keeps the thread busy.  Two adapters on one
state directory stand for two processes (see ``test_runlog_e2e``).
"""
import threading
import time

import pytest

from iaccode_agui.config import ConfigError, Settings
from iaccode_agui.runs.admission import DETACHED_RUN_YIELDS, detached_run_yields
from iaccode_agui.sse.channel import RunChannel
from tests.agentcore_helpers import ac_body, ac_post, attach_body, error_of
from tests.agui_checker import parse_sse
from tests.harness import SSEReader, wait_for


def cancels(demo):
    return [call for call in demo.runtime.requests_log if call[0] == "CancelTask"]


def start_slow(adapter, thread, run="r-slow"):
    reader = SSEReader(ac_post(adapter, ac_body("slow", thread=thread, run=run), stream=True))
    seen = reader.until("TEXT_MESSAGE_CONTENT")
    return reader, seen


def end_of(adapter, thread, run, after=0):
    events, _, _ = parse_sse(ac_post(adapter, attach_body(thread, run, after), timeout=60).content)
    return events[-1]


# --- the rule (pure) --------------------------------------------------------------------------------------

def test_which_detached_runs_yield_to_a_new_request():
    assert DETACHED_RUN_YIELDS == {(False, False): True, (False, True): False, (True, False): True,
                                   (True, True): True}
    assert detached_run_yields(True, 30.0) and detached_run_yields(False, 0.0)
    assert not detached_run_yields(False, 30.0)


def test_the_cancel_decision_and_an_attach_never_interleave():
    """``cancel_if_detached`` decides and cancels under the lock that attaches clients: an attach that
    arrives meanwhile waits for the decision and then reads the run's end; one that came first wins."""
    channel = RunChannel(10, 100)
    attached_meanwhile = []

    def cancel():
        racer = threading.Thread(target=lambda: attached_meanwhile.append(channel.attach()))
        racer.start()
        racer.join(0.3)
        assert racer.is_alive() and not attached_meanwhile       # the attach waits for the decision
        cancel.racer = racer
    assert channel.cancel_if_detached(cancel)
    cancel.racer.join(5)
    assert attached_meanwhile and channel.attached
    assert not channel.cancel_if_detached(lambda: pytest.fail("a client is attached"))


# --- a new message on the thread ----------------------------------------------------------------------------

def test_a_run_dropped_twice_is_still_cancelled_once(adapter_factory, workspace, demo):
    ac = adapter_factory(default_cwd=workspace)
    reader, seen = start_slow(ac, "d-1")
    reader.close()
    run = ac.app.manager.find_run("d-1", "r-slow")
    assert wait_for(lambda: run.channel.client_gone(), 10)
    answers = []
    posts = [threading.Thread(target=lambda: answers.append(ac_post(ac, ac_body("hello", thread="d-1"))))
             for _ in range(2)]
    for post in posts:
        post.start()
    for post in posts:
        post.join(60)
    codes = sorted(answer.status_code for answer in answers)
    assert codes in ([200, 200], [200, 409]), [answer.text[-200:] for answer in answers]
    assert len(cancels(demo)) == 1
    final = end_of(ac, "d-1", "r-slow", len(seen) - 1)
    assert final["type"] == "RUN_ERROR" and final["code"] == "RUN_CANCELLED"


def test_a_run_followed_through_another_process_keeps_the_thread_busy(adapter_factory, workspace, tmp_path, demo):
    shared = str(tmp_path / "shared")
    owner = adapter_factory(default_cwd=workspace, state_dir=shared)
    other = adapter_factory(default_cwd=workspace, state_dir=shared)
    reader, seen = start_slow(owner, "d-2")
    reader.close()
    follower = SSEReader(ac_post(other, attach_body("d-2", "r-slow", len(seen) - 1), stream=True))
    follower.until("TEXT_MESSAGE_CONTENT")
    run = owner.app.manager.find_run("d-2", "r-slow")
    assert wait_for(lambda: run.channel.client_gone(), 10)
    for adapter in (owner, other):
        assert error_of(ac_post(adapter, ac_body("hello", thread="d-2")))[:2] == (409, "SESSION_UNAVAILABLE")
    assert cancels(demo) == []
    follower.close()
    assert ac_post(owner, {"threadId": "d-2", "runId": "r-slow"}, path="ag-ui/agent/stop").status_code == 204


def test_a_new_message_reaching_another_process_cancels_the_detached_run(adapter_factory, workspace, tmp_path,
                                                                         demo):
    """The owner marks a run whose client left on the run's ``.detached`` file; with it (and without a
    follower) the other process cancels the run through the shared state and is admitted.  Before: 409."""
    shared = str(tmp_path / "shared")
    owner = adapter_factory(default_cwd=workspace, state_dir=shared)
    other = adapter_factory(default_cwd=workspace, state_dir=shared)
    reader, seen = start_slow(owner, "d-3")
    # While the owner's client is attached there is no mark: the other process refuses.
    assert error_of(ac_post(other, ac_body("hello", thread="d-3")))[:2] == (409, "SESSION_UNAVAILABLE")
    assert cancels(demo) == []
    reader.close()
    run = owner.app.manager.find_run("d-3", "r-slow")
    assert wait_for(lambda: not run.channel.attached, 10)       # the owner noticed the disconnect
    assert wait_for(lambda: owner.app.manager.runlogs.watched("d-3", "r-slow", ".detached"), 10)
    second = ac_post(other, ac_body("hello", thread="d-3", run="r-next"), timeout=60)
    assert second.status_code == 200, second.text[-300:]
    assert parse_sse(second.content)[0][-1]["type"] == "RUN_FINISHED"
    assert len(cancels(demo)) == 1
    final = end_of(owner, "d-3", "r-slow", len(seen) - 1)
    assert final["type"] == "RUN_ERROR" and final["code"] == "RUN_CANCELLED"


@pytest.mark.slow
def test_a_post_root_run_with_a_reconnect_grace_still_waits_for_its_client(adapter_factory, demo):
    adapter = adapter_factory(reconnect_grace=30.0)
    reader = SSEReader(adapter.post(adapter.body("slow", thread="d-4"), stream=True))
    reader.until("TEXT_MESSAGE_CONTENT")
    reader.close()
    time.sleep(1.5)                       # past the disconnect poll: the server knows the client is gone
    second = adapter.post(adapter.body("hello", thread="d-4"))
    assert second.status_code == 409 and second.json()["error"]["code"] == "THREAD_BUSY"
    assert cancels(demo) == []
    adapter.app.manager.cancel_all()


# --- --detached-run-timeout --------------------------------------------------------------------------------

@pytest.mark.slow
def test_a_run_nobody_is_attached_to_is_cancelled_after_the_timeout(adapter_factory, workspace, demo):
    ac = adapter_factory(default_cwd=workspace, detached_run_timeout=1.0)
    reader, seen = start_slow(ac, "t-1")
    reader.close()
    run = ac.app.manager.find_run("t-1", "r-slow")
    # A re-attach within the timeout keeps the run; its own disconnect starts the timeout again.
    time.sleep(0.5)
    again = SSEReader(ac_post(ac, attach_body("t-1", "r-slow", len(seen) - 1), stream=True))
    again.until("TEXT_MESSAGE_CONTENT")
    time.sleep(1.0)
    assert not run.worker.finished and cancels(demo) == []
    again.close()
    started = time.monotonic()
    assert wait_for(lambda: run.worker.finished, 15)
    assert 0.5 < time.monotonic() - started < 10
    assert len(cancels(demo)) == 1 and run.worker.error_code == "CANCELLED"
    final = end_of(ac, "t-1", "r-slow")
    assert final["type"] == "RUN_ERROR" and final["code"] == "RUN_CANCELLED"


@pytest.mark.slow
def test_by_default_a_detached_run_goes_on_to_its_end(adapter_factory, workspace, demo):
    ac = adapter_factory(default_cwd=workspace)
    reader, _ = start_slow(ac, "t-2")
    reader.close()
    run = ac.app.manager.find_run("t-2", "r-slow")
    assert run.detached_wait() is None
    time.sleep(1.5)
    assert not run.worker.finished and cancels(demo) == []
    ac.app.manager.cancel_all()


@pytest.mark.parametrize("value", [-1.0, 2e9, float("nan")])
def test_the_timeout_is_bounded(value, tmp_path):
    with pytest.raises(ConfigError):
        Settings(state_dir=str(tmp_path), detached_run_timeout=value)


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

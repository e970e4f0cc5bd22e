"""No upstream call that is not needed: the agent card is asked once per process and never before
``RUN_STARTED``; a resume asks for pipeline state only when its execution runs a pipeline.

Each test counts the calls a real adapter makes to the scripted runtime behind a counting wrapper.
"""
import time

import pytest
import requests

from iaccode_agui.a2a.agent_kind import UpstreamKind
from iaccode_agui.a2a.client import A2AUnavailable
from iaccode_agui.demo.runtime import ScriptedRuntime
from tests.harness import Adapter, interrupt_of, wait_for
from tests.upstream_fakes import CountingRuntime, serve_wsgi

CARD = "/.well-known/agent-card.json"
TOKEN = "counting-token"


@pytest.fixture
def counted(request, tmp_path, workspace):
    """(wrapper, adapter): an adapter (upstream kind "auto") in front of the counted scripted runtime."""
    card_status, card_delay = getattr(request, "param", (None, 0.0))
    runtime = CountingRuntime(ScriptedRuntime(TOKEN, ping_interval=0.5, slow_interval=0.2), card_status, card_delay)
    with serve_wsgi(runtime) as url:
        adapter = Adapter(url, TOKEN, str(tmp_path / "state"), workspace, upstream_kind="auto")
        try:
            yield runtime, adapter
        finally:
            adapter.stop()
            runtime.runtime.shutdown()


@pytest.mark.parametrize("counted", [("404 Not Found", 0.0)], indirect=True)
def test_a_runtime_without_an_agent_card_is_asked_for_it_once(counted):
    runtime, adapter = counted
    for n in range(3):
        events = adapter.run(adapter.body("hello", thread="card-%d" % n))
        assert events[-1]["type"] == "RUN_FINISHED"
    assert wait_for(lambda: adapter.app.manager.kind.settled)
    assert runtime.count(CARD) == 1
    assert adapter.app.manager.upstream_is_generic() is False      # a runtime without a card is iac-code


@pytest.mark.slow
@pytest.mark.parametrize("counted", [("404 Not Found", 3.0)], indirect=True)
def test_run_started_never_waits_for_the_agent_card(counted):
    runtime, adapter = counted
    started = time.monotonic()
    events = adapter.run(adapter.body("hello", thread="no-wait"))
    assert events[0]["type"] == "RUN_STARTED" and events[-1]["type"] == "RUN_FINISHED"
    # The card answers after 3 s; the whole run was over long before.
    assert time.monotonic() - started < 2.0
    assert not adapter.app.manager.kind.settled


def test_an_iac_code_card_is_asked_once_for_many_runs(counted):
    runtime, adapter = counted
    for n in range(3):
        adapter.run(adapter.body("hello", thread="iac-%d" % n))
    assert wait_for(lambda: adapter.app.manager.kind.settled)
    assert runtime.count(CARD) == 1 and adapter.app.manager.upstream_is_generic() is False


def allow(interrupt_id):
    return [{"interruptId": interrupt_id, "status": "resolved", "payload": {"decision": "allow_once"}}]


def test_a_normal_resume_never_asks_for_pipeline_state(counted):
    runtime, adapter = counted
    first = adapter.run(adapter.body("please write a file", thread="normal", runMode="normal"))
    interrupt = interrupt_of(first)
    runtime.calls.clear()
    # A client that repeats its forwardedProps (here with another runMode) does not change the execution.
    resumed = adapter.run(adapter.body(None, thread="normal", runMode="pipeline", resume=allow(interrupt["id"])),
                          timeout=10)
    assert resumed[-1]["outcome"] == {"type": "success"}
    assert [call[1:] for call in runtime.calls if call[1] != CARD] == [
        ("/iac-code/session/ensure-restored", None), ("/", "GetTask"), ("/", "SendStreamingMessage")]


def test_the_run_mode_an_execution_started_with_is_kept_in_its_state(counted):
    runtime, adapter = counted
    interrupt_of(adapter.run(adapter.body("please write a file", thread="kept", runMode="pipeline")))
    assert adapter.app.store.load("kept").execution.run_mode == "pipeline"
    interrupt_of(adapter.run(adapter.body("please write a file", thread="plain")))
    assert adapter.app.store.load("plain").execution.run_mode is None


# ---- the kind itself, with a scripted client -----------------------------------------------------------
class ScriptedCardClient:
    def __init__(self, *answers):
        self.answers = list(answers)
        self.asked = 0

    def agent_card(self):
        self.asked += 1
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, BaseException):
            raise answer
        return answer


def refused():
    try:
        raise requests.ConnectionError("connection refused")
    except requests.ConnectionError as cause:
        try:
            raise A2AUnavailable("agent card: cannot reach the A2A runtime") from cause
        except A2AUnavailable as exc:
            return exc


def test_only_a_failed_connection_leaves_the_kind_open_and_is_asked_again():
    client = ScriptedCardClient(refused(), refused(), {"name": "plain agent"})
    kind = UpstreamKind("auto", client, retry=0.01)
    assert kind.is_generic() is False and not kind.settled       # open: handled as iac-code, nobody waits
    kind.start()
    assert wait_for(lambda: kind.settled)
    assert kind.is_generic() is True and client.asked == 3
    time.sleep(0.05)
    assert client.asked == 3                                      # settled: never asked again


@pytest.mark.parametrize("answer, generic", [
    (A2AUnavailable("agent card: the A2A runtime answered HTTP 404"), False),
    (A2AUnavailable("agent card: the A2A runtime answered HTTP 500"), False),
    ({"name": "iac-code", "capabilities": {"extensions": [{"uri": "urn:iac-code:a2a:pipeline-events:v1"}]}}, False),
    ({"name": "plain agent"}, True),
])
def test_any_answer_settles_the_kind_at_the_first_ask(answer, generic):
    client = ScriptedCardClient(answer)
    kind = UpstreamKind("auto", client)
    assert kind.ask() is True and kind.settled and kind.is_generic() is generic


@pytest.mark.parametrize("setting", ["iac-code", "generic"])
def test_a_pinned_kind_never_asks(setting):
    client = ScriptedCardClient({"name": "plain agent"})
    kind = UpstreamKind(setting, client)
    kind.start()
    assert kind.settled and kind.is_generic() is (setting == "generic") and client.asked == 0


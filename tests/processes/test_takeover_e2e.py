"""Take-over after a crash: the adapter process is killed with SIGKILL in the middle of a streamed run.

The runtime (the scripted one, in this test process) goes on with the task; a new adapter process on the
same state directory adopts the run, and the client that re-attaches with its last id gets the rest: the
whole text exactly once, ids without a gap, one terminal event.
"""
import threading
import time
from typing import Any

import pytest
import requests

from iaccode_agui.demo import DemoServer
from iaccode_agui.web.inputs import canonical_digest
from iaccode_agui.projection.projector import message_scope
from iaccode_agui.runlog import encoding as logformat
from tests.adapter_process import AdapterProcess, post_run, reattach_rest, read_then_kill, run_body
from tests.agui_checker import check_sequence, conversation, parse_sse, rebuild_messages
from tests.harness import SSEReader, session_of, text_of, wait_for

SLOW_TEXT = "".join("slow-%d " % i for i in range(60))


class PausableClock:
    """The scripted runtime's clock, stopped on demand: a ``slow`` turn then produces nothing more.

    The successor must act while the orphaned task still runs; at 0.05 s per delta its rest takes under
    3 s, less than a loaded machine may need to start the successor, so the tests that need the task
    alive stop its clock right after the kill instead of racing it.
    """

    def __init__(self) -> None:
        self._paused_at = None
        self._offset = 0.0

    def __call__(self) -> float:
        return (time.monotonic() if self._paused_at is None else self._paused_at) - self._offset

    def pause(self) -> None:
        self._paused_at = time.monotonic()

    def resume(self) -> None:
        self._offset += time.monotonic() - self._paused_at
        self._paused_at = None


@pytest.fixture
def quick_demo():
    server = DemoServer.start(token="demo-token", ping_interval=0.5, slow_interval=0.05)
    server.runtime.store.clock = PausableClock()
    try:
        yield server
    finally:
        server.stop()


def _crash_mid_run(quick_demo, tmp_path, workspace, thread: str):
    state_dir = str(tmp_path / "state")
    owner = AdapterProcess(quick_demo.url, quick_demo.token, state_dir, workspace, str(tmp_path / "owner.log"))
    body = run_body(workspace, "slow", thread)
    seen, ids = read_then_kill(owner, post_run(owner.url, body), b"slow-", 8)
    assert ids == list(range(len(ids))) and text_of(seen).count("slow-") >= 8
    return state_dir, body, seen, ids


def test_a_killed_owner_s_run_is_adopted_and_the_reattach_gets_the_rest(adapter_factory, quick_demo, tmp_path,
                                                                          workspace):
    state_dir, body, seen, ids = _crash_mid_run(quick_demo, tmp_path, workspace, "crash-1")
    successor = adapter_factory(state_dir=state_dir, upstream_url=quick_demo.url, upstream_token=quick_demo.token)
    whole = reattach_rest(successor, body, seen, ids)
    assert text_of(whole) == SLOW_TEXT
    assert [e["type"] for e in whole].count("RUN_FINISHED") == 1 and whole[-1]["type"] == "RUN_FINISHED"
    assert wait_for(lambda: successor.app.manager.active_count() == 0, 5)
    assert successor.app.store.load("crash-1").active_run is None
    assert "agui_takeovers_total 1" in successor.app.metrics.render()
    execution = session_of(whole)["executionId"]
    observed = successor.post({"threadId": "crash-1", "runId": body["runId"], "rosInvocationId": "inv-1"},
                              path="extensions/iac-code/v1/executions/%s/subscribe" % execution)
    assert text_of(parse_sse(observed.content)[0]) == SLOW_TEXT
    follow_up = successor.run(successor.body("hello", thread="crash-1"))
    assert follow_up[-1]["type"] == "RUN_FINISHED"


def test_an_adopted_run_without_a_client_is_cancelled_after_the_takeover_grace(adapter_factory, quick_demo,
                                                                               tmp_path, workspace):
    state_dir, body, seen, ids = _crash_mid_run(quick_demo, tmp_path, workspace, "crash-2")
    quick_demo.runtime.store.clock.pause()            # the orphaned task stays alive until cancelled
    successor = adapter_factory(state_dir=state_dir, upstream_url=quick_demo.url, upstream_token=quick_demo.token,
                                takeover_grace=0.3)
    manager = successor.app.manager
    assert wait_for(lambda: bool(manager.finished_runs()), 10)     # adopted at start-up, then cancelled
    run = manager.finished_runs()[-1]
    assert run.worker.error_code == "CANCELLED"
    replay = successor.post(body, headers={"Last-Event-ID": str(ids[-1])})
    rest = parse_sse(replay.content)[0]
    assert rest[-1]["type"] == "RUN_ERROR" and rest[-1]["code"] == "CANCELLED"
    check_sequence(seen + rest)
    assert successor.app.store.load("crash-2").active_run is None


def test_a_new_message_after_the_crash_cancels_the_unfollowed_adopted_run(adapter_factory, quick_demo, tmp_path,
                                                                          workspace):
    state_dir, body, seen, ids = _crash_mid_run(quick_demo, tmp_path, workspace, "crash-3")
    quick_demo.runtime.store.clock.pause()            # the orphaned task stays alive until cancelled
    successor = adapter_factory(state_dir=state_dir, upstream_url=quick_demo.url, upstream_token=quick_demo.token)
    events = successor.run(successor.body("next", thread="crash-3"))
    assert events[-1]["type"] == "RUN_FINISHED"
    answer = successor.post(body, headers={"Last-Event-ID": str(ids[-1])})
    rest = parse_sse(answer.content)[0]
    check_sequence(seen + rest)                  # what ran meanwhile was kept, then the run was cancelled
    assert rest[-1]["type"] == "RUN_ERROR" and rest[-1]["code"] == "CANCELLED"
    assert text_of(seen + rest) == SLOW_TEXT[:len(text_of(seen + rest))]


def test_a_new_message_during_the_adoption_waits_for_it_then_cancels_the_adopted_run(
        adapter_factory, quick_demo, tmp_path, workspace, monkeypatch):
    """A new message that lands while the start-up scan is adopting the run must find the adopted run whole.

    Before the fix the run was visible while still being built: a request that saw it without its worker
    neither cancelled it nor waited for it, and answered 409 THREAD_BUSY (a retry right after a restart got
    that once under load).  The adoption is held inside that stretch until the request has looked."""
    from iaccode_agui.runs.profile import ProfileRegistry
    from iaccode_agui.runs.takeover import Takeover

    state_dir, body, seen, ids = _crash_mid_run(quick_demo, tmp_path, workspace, "crash-5")
    quick_demo.runtime.store.clock.pause()            # the orphaned task stays alive until cancelled
    in_adoption, request_looked = threading.Event(), threading.Event()
    rebuild, adopt = ProfileRegistry.rebuild, Takeover.adopt

    def held_rebuild(self: ProfileRegistry, header: Any) -> Any:      # called while the run is being built
        in_adoption.set()
        request_looked.wait(20)
        return rebuild(self, header)

    def noted_adopt(self: Takeover, thread_id: str, run_id: str) -> bool:
        if threading.current_thread().name.startswith("waitress"):    # the request, not a scan
            request_looked.set()
        return adopt(self, thread_id, run_id)

    monkeypatch.setattr(ProfileRegistry, "rebuild", held_rebuild)
    monkeypatch.setattr(Takeover, "adopt", noted_adopt)
    successor = adapter_factory(state_dir=state_dir, upstream_url=quick_demo.url, upstream_token=quick_demo.token)
    assert in_adoption.wait(20), "the start-up scan never adopted the run"
    try:
        response = requests.post(successor.url, json=successor.body("next", thread="crash-5"), timeout=60,
                                 headers={"Accept": "text/event-stream"})
    finally:
        request_looked.set()
    assert response.status_code == 200, response.text
    assert parse_sse(response.content)[0][-1]["type"] == "RUN_FINISHED"
    rest = parse_sse(successor.post(body, headers={"Last-Event-ID": str(ids[-1])}).content)[0]
    assert rest[-1]["type"] == "RUN_ERROR" and rest[-1]["code"] == "CANCELLED"


def test_a_followed_adopted_run_keeps_its_thread_busy(adapter_factory, quick_demo, tmp_path, workspace):
    state_dir, body, seen, ids = _crash_mid_run(quick_demo, tmp_path, workspace, "crash-4")
    quick_demo.runtime.store.clock.pause()            # the orphaned task stays alive until resumed
    successor = adapter_factory(state_dir=state_dir, upstream_url=quick_demo.url, upstream_token=quick_demo.token)
    answers = []
    # With the task stopped no byte may come before the heartbeat, so the re-attach (which returns at its
    # first byte) runs aside and the test waits for the run to be followed.
    attach = threading.Thread(target=lambda: answers.append(
        successor.post(body, headers={"Last-Event-ID": str(ids[-1])}, stream=True)), daemon=True)
    attach.start()
    manager = successor.app.manager
    # The re-attach may land before the start-up scan adopted the run (it then follows the run from its
    # log) or after (it attaches to the adopted run's channel): either way the run is followed.
    assert wait_for(lambda: any(run.channel.attached or run.followed_elsewhere()
                                for run in manager.live_runs()), 20)
    refused = successor.post(successor.body("next", thread="crash-4"))
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "THREAD_BUSY"
    quick_demo.runtime.store.clock.resume()
    attach.join(30)
    follow = SSEReader(answers[0])
    rest = follow.until("RUN_FINISHED", limit=30)
    assert text_of(seen + rest) == SLOW_TEXT


def _cut_log_before_its_end(path: str) -> int:
    """Rewrite a finished run's log as a crash right before its terminal event would leave it."""
    with open(path, "rb") as handle:
        data = handle.read()
    records, _ = logformat.parse(data, logformat.check_magic(data))
    kept = [r for r in records[1:] if r.kind == logformat.KIND_EVENT and not r.terminal]
    with open(path, "wb") as handle:
        handle.write(logformat.encode_start(records[0].fields))
        for record in kept:
            handle.write(logformat.encode_event(record.seq, record.event_type, record.frame))
    return kept[-1].seq


def test_a_run_whose_interrupt_was_durable_but_never_shown_ends_with_it(adapter):
    """The owner committed the interrupt and freed the thread, then died before the terminal event."""
    body = adapter.body("please write a file", thread="durable-int")
    events = adapter.run(body)
    interrupt = events[-1]["outcome"]["interrupts"][0]
    assert wait_for(lambda: bool(adapter.app.manager.finished_runs()), 5)    # its log is closed
    last = _cut_log_before_its_end(adapter.app.manager.runlogs.path_for("durable-int", body["runId"]))
    assert adapter.app.manager.takeover.adopt("durable-int", body["runId"])
    again = parse_sse(adapter.post(body, headers={"Last-Event-ID": str(last)}).content)[0]
    assert [e["type"] for e in again][-1] == "RUN_FINISHED"
    assert again[-1]["outcome"]["interrupts"][0]["id"] == interrupt["id"]
    check_sequence(events[:-1] + again)


def test_an_agentcore_run_ended_from_its_thread_state_is_shaped_as_its_owner_shaped_it(adapter_factory,
                                                                                         workspace):
    """The owner made the interrupt durable, then died before its last batch (``agentcore.usage`` and the
    terminal event) reached the log: the adopter writes that end through the run's AgentCore shaping, with
    the totals the owner had noted."""
    from tests.agentcore_helpers import AGENT, ac_body, ac_stream, attach_body
    adapter = adapter_factory(default_cwd=workspace)
    body = ac_body("please write a file", thread="ac-durable-int")
    events, _ = ac_stream(adapter, body)
    assert events[-1]["type"] == "RUN_FINISHED" and events[-1]["outcome"]["type"] == "interrupt"
    assert [e.get("name") for e in events[-2:]] == ["agentcore.usage", None]
    assert wait_for(lambda: bool(adapter.app.manager.finished_runs()), 5)
    path = adapter.app.manager.runlogs.path_for(body["threadId"], body["runId"])
    with open(path, "rb") as handle:
        data = handle.read()
    records, _ = logformat.parse(data, logformat.check_magic(data))
    usage_seq = next(r.seq for r in records if r.kind == logformat.KIND_EVENT and b"agentcore.usage" in r.frame)
    with open(path, "wb") as handle:        # cut as a crash right before the owner's last batch was written
        handle.write(logformat.encode_start(records[0].fields))
        for record in records[1:]:
            if record.kind == logformat.KIND_EVENT and record.seq < usage_seq:
                handle.write(logformat.encode_event(record.seq, record.event_type, record.frame))
            elif record.kind == logformat.KIND_USAGE:
                handle.write(logformat.encode_usage(record.fields["usage"]))
    last = usage_seq - 1
    assert adapter.app.manager.takeover.adopt(body["threadId"], body["runId"])
    answer = adapter.post(attach_body(body["threadId"], body["runId"], last), path=AGENT,
                          headers={"X-AgentCore-Session-ID": body["threadId"]})
    assert answer.status_code == 200, answer.text
    again = parse_sse(answer.content)[0]
    assert [e.get("name") or e["type"] for e in again][-2:] == ["agentcore.usage", "RUN_FINISHED"]
    assert again[-1]["outcome"]["interrupts"][0]["id"] == events[-1]["outcome"]["interrupts"][0]["id"]
    assert again[-2]["value"] == events[-2]["value"]          # the owner's totals, not zeros
    check_sequence(events[:-2] + again)


class _GatedReplies:
    """Hold every closing LLM reply of the scripted runtime until released, then note that it was sent.

    A resumed ``write`` turn shows the tool's result, then its reply; holding the reply lets the test kill the
    owner at a known point of the resumed turn, and waiting for the reply lets it adopt after the turn ended
    upstream (the adopter can then only recover the turn's text from what the task keeps).
    """

    def __init__(self, monkeypatch) -> None:
        from iaccode_agui.demo import turns
        self.release, self.sent = threading.Event(), threading.Event()
        original = turns.Turn.reply

        def reply(turn, *args, **kwargs):
            self.release.wait(30)
            original(turn, *args, **kwargs)
            self.sent.set()

        monkeypatch.setattr(turns.Turn, "reply", reply)


def _resume_body(body, interrupts):
    return dict(body, runId="run-resume-" + body["runId"][-6:], messages=[],
                resume=[{"interruptId": i["id"], "status": "resolved", "payload": {"decision": "allow_once"}}
                        for i in interrupts])


@pytest.mark.parametrize("adopt_after_the_turn", [True, False])
def test_a_resumed_turn_killed_before_its_text_is_adopted_with_the_whole_text(
        adapter_factory, quick_demo, tmp_path, workspace, monkeypatch, adopt_after_the_turn):
    from iaccode_agui.demo.scenarios import Write
    state_dir = str(tmp_path / "state")
    owner = AdapterProcess(quick_demo.url, quick_demo.token, state_dir, workspace, str(tmp_path / "owner.log"))
    body = run_body(workspace, "please write a file", "resumed-1")
    first = parse_sse(post_run(owner.url, body).content)[0]
    interrupts = first[-1]["outcome"]["interrupts"]
    gate = _GatedReplies(monkeypatch)
    resume = _resume_body(body, interrupts)
    seen, ids = read_then_kill(owner, post_run(owner.url, resume), b"TOOL_CALL_RESULT", 1)
    assert "TOOL_CALL_RESULT" in [e["type"] for e in seen] and text_of(seen) == ""
    gate.release.set()
    if adopt_after_the_turn:
        assert gate.sent.wait(10)            # the turn is over upstream before anyone adopts it
    successor = adapter_factory(state_dir=state_dir, upstream_url=quick_demo.url, upstream_token=quick_demo.token)
    answer = successor.post(resume, headers={"Last-Event-ID": str(ids[-1])}, timeout=30)
    assert answer.status_code == 200, answer.text
    rest, rest_ids, _ = parse_sse(answer.content)
    whole = seen + rest
    check_sequence(whole)
    assert rest_ids == list(range(ids[-1] + 1, ids[-1] + 1 + len(rest)))
    assert text_of(whole) == Write.done_text
    assert [e["type"] for e in whole].count("RUN_FINISHED") == 1 and whole[-1]["type"] == "RUN_FINISHED"
    assert quick_demo.runtime.tool_executions and len(quick_demo.runtime.tool_executions) == 1
    # The adopter scopes the reply's message as the owner would have: a new message, below the tool's result.
    scope = "@" + message_scope(True, canonical_digest(resume))
    assert [e["messageId"].split("~")[0][-len(scope):] for e in rest if e["type"] == "TEXT_MESSAGE_START"] == [scope]
    turns = conversation(rebuild_messages(first + whole))
    call = (interrupts[0]["toolCallId"],)
    assert turns == [("assistant", "I'll create hello.txt for you.", call), ("tool", turns[1][1], call),
                     ("assistant", Write.done_text, ())]


def _as_if_the_acceptance_was_never_recorded(state_dir: str, thread: str, run_id: str, pending, answer) -> int:
    """Rewrite the dead owner's state and log as a death right after the runtime took the answer.

    The answer is pending again with its in-flight record, and the log ends where the answer went out:
    nothing the answer caused was shown, since its acceptance is recorded before anything it causes is.
    """
    import dataclasses

    from iaccode_agui.projection.resume_plan import resume_digest
    from iaccode_agui.runlog.logfiles import RunLogStore
    from iaccode_agui.state.store import ThreadStore
    store = ThreadStore(state_dir)
    with store.transaction(thread) as txn:
        draft = txn.state.copy()
        draft.execution.pending = {key: dataclasses.replace(item, answer_digest=resume_digest(answer))
                                   for key, item in pending.items()}
        draft.applied_resume_digests = [d for d in draft.applied_resume_digests if d.interrupt_id not in pending]
        txn.save(draft)
    path = RunLogStore(state_dir, ttl=600, max_bytes=1 << 20).path_for(thread, run_id)
    with open(path, "rb") as handle:
        data = handle.read()
    records, _ = logformat.parse(data, logformat.check_magic(data))
    with open(path, "wb") as handle:
        handle.write(logformat.encode_start(records[0].fields))
        first = records[1]
        handle.write(logformat.encode_event(first.seq, first.event_type, first.frame))
    return first.seq


def test_an_owner_dead_between_the_answer_s_acceptance_and_its_commit_leaves_nothing_to_resend(
        adapter_factory, quick_demo, tmp_path, workspace, monkeypatch):
    from iaccode_agui.demo.scenarios import Write
    from iaccode_agui.state.store import ThreadStore
    state_dir = str(tmp_path / "state")
    owner = AdapterProcess(quick_demo.url, quick_demo.token, state_dir, workspace, str(tmp_path / "owner.log"))
    body = run_body(workspace, "please write a file", "inflight-1")
    first = parse_sse(post_run(owner.url, body).content)[0]
    interrupts = first[-1]["outcome"]["interrupts"]
    pending = dict(ThreadStore(state_dir).load("inflight-1").execution.pending)
    gate = _GatedReplies(monkeypatch)
    resume = _resume_body(body, interrupts)
    read_then_kill(owner, post_run(owner.url, resume), b"TOOL_CALL_RESULT", 1)
    gate.release.set()
    assert gate.sent.wait(10)                    # the turn the answer started is over upstream
    sends_before = len(quick_demo.runtime.requests_log)
    last = _as_if_the_acceptance_was_never_recorded(state_dir, "inflight-1", resume["runId"], pending,
                                                    resume["resume"][0])
    successor = adapter_factory(state_dir=state_dir, upstream_url=quick_demo.url, upstream_token=quick_demo.token)
    rest = parse_sse(successor.post(resume, headers={"Last-Event-ID": str(last)}, timeout=30).content)[0]
    assert rest[-1]["type"] == "RUN_FINISHED" and text_of(rest) == Write.done_text
    sent_again = [m for m, _ in quick_demo.runtime.requests_log[sends_before:]
                  if m in ("SendMessage", "SendStreamingMessage")]
    assert sent_again == []
    state = successor.app.store.load("inflight-1")
    assert not state.execution.pending
    assert [d.interrupt_id for d in state.applied_resume_digests] == list(pending)
    retried = successor.run(dict(resume, runId="run-retry-1"))      # the client retries: nothing is resent
    assert retried[-1]["type"] == "RUN_ERROR" and retried[-1]["code"] == "RESUME_ALREADY_APPLIED"
    assert successor.run(successor.body("hello", thread="inflight-1"))[-1]["type"] == "RUN_FINISHED"
    assert len(quick_demo.runtime.tool_executions) == 1


def test_an_adopted_run_s_usage_includes_what_the_dead_owner_counted(adapter_factory, quick_demo, tmp_path,
                                                                     workspace, monkeypatch):
    from iaccode_agui.demo import turns
    from iaccode_agui.runlog.logfiles import RunLogReader, RunLogStore
    release = threading.Event()
    original = turns.Turn.final
    monkeypatch.setattr(turns.Turn, "final", lambda turn, text: (release.wait(30), original(turn, text)))
    state_dir = str(tmp_path / "state")
    owner = AdapterProcess(quick_demo.url, quick_demo.token, state_dir, workspace, str(tmp_path / "owner.log"))
    body = run_body(workspace, "slow", "usage-1")
    response = post_run(owner.url, body)
    path = RunLogStore(state_dir, ttl=600, max_bytes=1 << 20).path_for("usage-1", body["runId"])

    def usage_noted():
        reader = RunLogReader.open(path)
        try:
            return reader is not None and any(r.kind == logformat.KIND_USAGE for r in reader.read_new())
        finally:
            if reader is not None:
                reader.close()
    assert wait_for(usage_noted, 30)         # the owner counted the turn's LLM call, then dies
    seen, ids = read_then_kill(owner, response, b"slow-59 ", 1)
    release.set()
    successor = adapter_factory(state_dir=state_dir, upstream_url=quick_demo.url, upstream_token=quick_demo.token)
    rest = parse_sse(successor.post(body, headers={"Last-Event-ID": str(ids[-1])}, timeout=30).content)[0]
    assert rest[-1]["type"] == "RUN_FINISHED" and text_of(seen + rest) == SLOW_TEXT
    inp, out, _ = turns.FIRST_CALL_USAGE
    assert rest[-1]["usage"] == [{"provider": "openai", "model": "other", "inputTokens": inp, "outputTokens": out,
                                  "totalTokens": inp + out, "cachedInputTokens": 0}]


def test_an_adopted_agentcore_run_keeps_its_agentcore_shaping(adapter_factory, quick_demo, tmp_path, workspace,
                                                               monkeypatch):
    """The successor rebuilds the run's AgentCore shaping from its log header: the re-attached client still
    gets ``agentcore.usage`` right before ``RUN_FINISHED`` (once), and the whole text."""
    from tests.agentcore_helpers import AGENT, ac_body, attach_body
    monkeypatch.setenv("IAC_CODE_AGUI_DEFAULT_CWD", workspace)
    state_dir = str(tmp_path / "state")
    owner = AdapterProcess(quick_demo.url, quick_demo.token, state_dir, workspace, str(tmp_path / "owner.log"))
    body = ac_body("slow", thread="ac-crash-1")
    headers = {"X-AgentCore-Session-ID": body["threadId"]}
    seen, ids = read_then_kill(owner, post_run(owner.url + AGENT, body, headers), b"slow-", 8)
    assert ids == list(range(len(ids))) and text_of(seen).count("slow-") >= 8
    successor = adapter_factory(state_dir=state_dir, upstream_url=quick_demo.url, upstream_token=quick_demo.token,
                                default_cwd=workspace)
    answer = successor.post(attach_body(body["threadId"], body["runId"], ids[-1]), path=AGENT, headers=headers,
                            timeout=30)
    assert answer.status_code == 200, answer.text
    rest, rest_ids, _ = parse_sse(answer.content)
    assert rest_ids == list(range(ids[-1] + 1, ids[-1] + 1 + len(rest)))
    whole = seen + rest
    assert text_of(whole) == SLOW_TEXT
    names = [e.get("name") if e["type"] == "CUSTOM" else e["type"] for e in whole]
    assert names.count("agentcore.usage") == 1 and names.count("RUN_FINISHED") == 1
    assert names[-2:] == ["agentcore.usage", "RUN_FINISHED"]
    assert "agui_takeovers_total 1" in successor.app.metrics.render()


def test_a_new_message_cancels_an_adopted_agentcore_run_nobody_follows(adapter_factory, quick_demo, tmp_path,
                                                                       workspace, monkeypatch):
    """Stop by disconnect holds for a run adopted after its owner died too: a new message on the thread cancels
    it (one CancelTask, its log ends with RUN_CANCELLED) and is admitted.  Before: 409 SESSION_UNAVAILABLE."""
    from tests.agentcore_helpers import AGENT, ac_body, attach_body
    monkeypatch.setenv("IAC_CODE_AGUI_DEFAULT_CWD", workspace)
    state_dir = str(tmp_path / "state")
    owner = AdapterProcess(quick_demo.url, quick_demo.token, state_dir, workspace, str(tmp_path / "owner.log"))
    body = ac_body("slow", thread="ac-crash-2")
    _, ids = read_then_kill(owner, post_run(owner.url + AGENT, body), b"slow-", 4)
    successor = adapter_factory(state_dir=state_dir, upstream_url=quick_demo.url, upstream_token=quick_demo.token,
                                default_cwd=workspace)
    answer = successor.post(ac_body("hello", thread="ac-crash-2"), path=AGENT, timeout=60)
    assert answer.status_code == 200, answer.text
    assert parse_sse(answer.content)[0][-1]["type"] == "RUN_FINISHED"
    assert len([call for call in quick_demo.runtime.requests_log if call[0] == "CancelTask"]) == 1
    rest = parse_sse(successor.post(attach_body("ac-crash-2", body["runId"], ids[-1]), path=AGENT,
                                    timeout=30).content)[0]
    assert rest[-1]["type"] == "RUN_ERROR" and rest[-1]["code"] == "RUN_CANCELLED", rest[-1]


def test_the_conversation_of_an_adopted_run_is_saved_when_it_ends(adapter_factory, quick_demo, tmp_path, workspace):
    state_dir, body, seen, ids = _crash_mid_run(quick_demo, tmp_path, workspace, "crash-history")
    successor = adapter_factory(state_dir=state_dir, upstream_url=quick_demo.url, upstream_token=quick_demo.token)
    whole = reattach_rest(successor, body, seen, ids)
    assert whole[-1]["type"] == "RUN_FINISHED"
    assert wait_for(lambda: successor.app.manager.active_count() == 0, 5)
    answer = requests.get(successor.url + "threads/crash-history/messages", timeout=10).json()
    user, assistant = answer["messages"]
    assert user == body["messages"][0]                # from the log header: the stream never carried it
    assert assistant["role"] == "assistant" and assistant["content"] == SLOW_TEXT

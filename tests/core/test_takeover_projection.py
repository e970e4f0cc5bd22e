"""The projection of an adopted run, driven with plain lists of dicts: it continues, never repeats."""
from typing import Any, Dict, List

import pytest

from iaccode_agui.projection.adopt import AdoptedProjector, history_text, missing_text, strip_shown
from iaccode_agui.projection.effects import is_event
from iaccode_agui.projection.projector import RunContext, RunProjector
from iaccode_agui.projection.textreplay import digests_of
from tests.agui_checker import check_sequence

CTX = RunContext(thread_id="t", run_id="r", execution_id="e", context_id="agui-ctx", ros_invocation_id="i",
                 task_id="task-1", session_id="s-1")


FRESH = RunContext(thread_id="t", run_id="r", execution_id="e", context_id="agui-ctx", ros_invocation_id="i")


def _delta(text: str) -> Dict[str, Any]:
    return {"statusUpdate": {"taskId": "task-1", "contextId": "agui-ctx", "status": {
        "state": "TASK_STATE_WORKING", "message": {"messageId": "task-1-message", "role": "ROLE_AGENT",
                                                  "parts": [{"text": text}]}},
        "metadata": {"iac_code": {"iacCodeSessionId": "s-1"}}}}


def _final(text: str) -> Dict[str, Any]:
    frame = _delta(text)
    frame["statusUpdate"]["status"]["message"]["messageId"] = "task-1-2"
    frame["statusUpdate"]["metadata"]["iac_code"]["assistantFinal"] = {"complete": True}
    return frame


def _completed() -> Dict[str, Any]:
    return {"statusUpdate": {"taskId": "task-1", "contextId": "agui-ctx", "status": {"state": "TASK_STATE_COMPLETED"}}}


def _events(outputs: List[Any]) -> List[Dict[str, Any]]:
    return [item for item in outputs if is_event(item)]


def _text(events: List[Dict[str, Any]]) -> str:
    return "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")


def _before_crash(count: int) -> List[Dict[str, Any]]:
    projector = RunProjector(FRESH)          # the task and session get bound (and announced) on the way
    sent = _events(projector.start())
    for index in range(count):
        sent += _events(projector.feed(_delta("d%d " % index)))
    return sent


def test_missing_text_is_what_follows_the_shown_text():
    assert missing_text("abcdef", "abc", new_turn=True) == "def"
    assert missing_text("abc", "abc", new_turn=True) == ""
    assert missing_text("abcdef", "", new_turn=True) == "abcdef"
    assert missing_text("abcdef", "", new_turn=False) == ""
    assert missing_text("xx cd yy", "cd", new_turn=False) == " yy"
    assert missing_text("something else", "abc", new_turn=True) == ""
    assert missing_text("", "abc", new_turn=True) == ""


def test_history_text_keeps_the_turn_and_drops_a_consolidated_copy():
    agent = lambda text: {"role": "ROLE_AGENT", "messageId": "m", "parts": [{"text": text}]}
    task = {"task": {"id": "task-1", "history": [{"role": "ROLE_USER", "parts": [{"text": "hi"}]},
                                                 agent("a"), agent("b")]}}
    assert history_text(task) == "ab"
    task["task"]["history"].append(agent("ab"))
    assert history_text(task) == "ab"


def test_adopted_run_continues_spans_and_recovers_missed_text():
    sent = _before_crash(3)                       # RUN_STARTED, session, TEXT_MESSAGE_START, 3 deltas
    assert any(e["type"] == "CUSTOM" for e in sent)
    adopted = AdoptedProjector(CTX, sent)
    assert adopted.start() == []
    snapshot = {"task": {"id": "task-1", "contextId": "agui-ctx", "status": {"state": "TASK_STATE_WORKING"},
                         "history": [{"role": "ROLE_AGENT", "messageId": "task-1-message",
                                      "parts": [{"text": "d%d " % i}]} for i in range(5)]}}
    after = _events(adopted.check_identity(snapshot)) + _events(adopted.catch_up(snapshot))
    after += _events(adopted.feed(snapshot, with_text=False))
    for index in range(5, 7):
        after += _events(adopted.feed(_delta("d%d " % index)))
    after += _events(adopted.feed(_final("".join("d%d " % i for i in range(8)))))
    after += _events(adopted.feed(_completed()))
    whole = sent + after
    check_sequence(whole)                        # one RUN_STARTED, balanced spans, one terminal event
    assert [e["type"] for e in after].count("TEXT_MESSAGE_START") == 0
    assert not any(e["type"] == "CUSTOM" for e in after)
    assert _text(whole) == "".join("d%d " % i for i in range(8))
    assert whole[-1]["type"] == "RUN_FINISHED"


def test_adopted_run_with_nothing_missed_shows_nothing_twice():
    sent = _before_crash(4)
    adopted = AdoptedProjector(CTX, sent)
    after = _events(adopted.feed(_final("d0 d1 d2 d3 "))) + _events(adopted.feed(_completed()))
    assert _text(after) == "" and after[-2]["type"] == "TEXT_MESSAGE_END"
    check_sequence(sent + after)


def test_spans_replay_rebuilds_tools_steps_and_closed_messages():
    projector = RunProjector(FRESH)
    sent = _events(projector.start())
    sent += _events(projector.feed(_delta("before ")))
    tool = {"statusUpdate": {"taskId": "task-1", "contextId": "agui-ctx", "status": {"state": "TASK_STATE_WORKING"},
                             "metadata": {"iac_code": {"tool": {"toolUseId": "tool-1", "name": "bash",
                                                                "status": "started"}}}}}
    sent += _events(projector.feed(tool))
    adopted = AdoptedProjector(CTX, sent)
    done = dict(tool)
    done["statusUpdate"] = dict(tool["statusUpdate"], metadata={"iac_code": {"tool": {
        "toolUseId": "tool-1", "name": "bash", "status": "completed", "result": "ok"}}})
    after = _events(adopted.feed(done)) + _events(adopted.feed(_delta("after"))) + _events(adopted.feed(_completed()))
    types = [e["type"] for e in after]
    assert "TOOL_CALL_START" not in types and types.count("TOOL_CALL_RESULT") == 1
    check_sequence(sent + after)
    assert _text(sent + after) == "before after"


def _history(*texts: str) -> Dict[str, Any]:
    return {"task": {"id": "task-1", "contextId": "agui-ctx", "status": {"state": "TASK_STATE_INPUT_REQUIRED"},
                     "history": [{"role": "ROLE_AGENT", "messageId": "task-1-message", "parts": [{"text": text}]}
                                 for text in texts]}}


def _resumed(*shown_before: str) -> RunContext:
    """The context of a resumed run: the execution's earlier runs showed ``shown_before``."""
    import dataclasses
    return dataclasses.replace(CTX, resume=True, text_digests=frozenset(digests_of(shown_before)))


def _resumed_run_started() -> List[Dict[str, Any]]:
    return _events(RunProjector(_resumed()).start())


def test_strip_shown_peels_the_earlier_runs_text_off_the_history():
    known = digests_of(["I'll write it.", "Now the second."])
    assert strip_shown("I'll write it.Now the second.Done.", known) == "Done."
    assert strip_shown("I'll write it.Done.", known) == "Done."
    assert strip_shown("Unknown text.Done.", known) == "Unknown text.Done."
    assert strip_shown("I'll write it.", known) == ""


def test_a_resumed_run_adopted_before_its_text_recovers_the_turn_from_the_history():
    sent = _resumed_run_started()
    adopted = AdoptedProjector(_resumed("I'll create hello.txt for you."), sent)
    snapshot = _history("I'll create hello.txt for you.", "Done: hello.txt was written.")
    after = _events(adopted.check_identity(snapshot)) + _events(adopted.catch_up(snapshot))
    after += _events(adopted.feed(snapshot, with_text=False)) + _events(adopted.end_of_stream())
    check_sequence(sent + after)
    assert _text(after) == "Done: hello.txt was written."


def test_a_resumed_run_after_two_answers_recovers_only_its_own_turn():
    adopted = AdoptedProjector(_resumed("First. ", "Second. "), _resumed_run_started())
    assert _text(_events(adopted.catch_up(_history("First. ", "Second. ", "Third.")))) == "Third."


def test_a_resumed_run_whose_earlier_text_is_not_recognised_shows_nothing_twice():
    adopted = AdoptedProjector(_resumed("Something else."), _resumed_run_started())
    assert _text(_events(adopted.catch_up(_history("I'll create it.", "Done.")))) == ""


def test_a_resumed_run_shows_the_final_text_of_its_turn_when_nothing_of_it_was_shown():
    adopted = AdoptedProjector(_resumed("I'll create hello.txt for you."), _resumed_run_started())
    assert _text(_events(adopted.feed(_final("Done: hello.txt was written.")))) == "Done: hello.txt was written."


def _usage_frame(inp: int, out: int) -> Dict[str, Any]:
    return {"statusUpdate": {"taskId": "task-1", "contextId": "agui-ctx", "status": {"state": "TASK_STATE_WORKING"},
                             "metadata": {"iac_code": {"usage": {"inputTokens": float(inp), "outputTokens": float(out),
                                                                 "totalTokens": float(inp + out),
                                                                 "model": "m", "provider": "p"}}}}}


def test_an_adopted_run_s_usage_includes_what_its_dead_owner_had_counted(tmp_path):
    from iaccode_agui.sse.channel import RunChannel
    from iaccode_agui.runlog.logfiles import RunLogStore
    from iaccode_agui.runs.takeover import _logged_usage
    owner = RunProjector(FRESH)
    sent = _events(owner.start()) + _events(owner.feed(_delta("before ")))
    owner.feed(_usage_frame(100, 20))
    store = RunLogStore(str(tmp_path), ttl=600, max_bytes=1 << 20)
    channel = RunChannel(100, 100, run_log=store.create("t", "r", {}))
    for event in sent:
        channel.publish(event)
    channel.note_usage(owner.usage.summary())          # what the owner's worker writes as usage changes
    reader = store.open_reader("t", "r")
    noted = _logged_usage(reader.read_new())
    reader.close()
    adopted = AdoptedProjector(CTX, sent)
    adopted.usage.restore(noted)
    after = _events(adopted.feed(_usage_frame(7, 3))) + _events(adopted.feed(_completed()))
    assert after[-1]["type"] == "RUN_FINISHED"
    assert after[-1]["usage"] == [{"provider": "p", "model": "m", "inputTokens": 107, "outputTokens": 23,
                                   "totalTokens": 130}]


def _tool_frame(status: str, **fields: Any) -> Dict[str, Any]:
    return {"statusUpdate": {"taskId": "task-1", "contextId": "agui-ctx", "status": {"state": "TASK_STATE_WORKING"},
                             "metadata": {"iac_code": {"tool": dict(fields, toolUseId="tool-1", name="read_file",
                                                                    status=status)}}}}


@pytest.mark.parametrize("resumed", [False, True])
def test_an_adopted_run_gives_its_messages_the_ids_its_owner_would_have(resumed):
    # Cut anywhere in text, tool call, result, more text: the adopter's events are the rest of the owner's,
    # ids included (the message the tool call ended, the new message after the result, a resume's scope).
    import dataclasses
    ctx = dataclasses.replace(CTX, resume=True, message_scope="d1g3st") if resumed else CTX
    frames = [_delta("Let me look."), _tool_frame("started"), _tool_frame("completed", result="ok"),
              _delta("It is "), _delta("fine."), _completed()]
    owner = RunProjector(ctx)
    marks, whole = [], _events(owner.start()) + _events(owner.accept())
    for frame in frames:
        marks.append(len(whole))
        whole += _events(owner.feed(frame))
    check_sequence(whole)
    scope = "@d1g3st" if resumed else ""
    assert [e["messageId"] for e in whole if e["type"] == "TEXT_MESSAGE_START"] == [
        "task-1-message" + scope, "task-1-message%s~2" % scope]
    for cut, mark in enumerate(marks):
        adopted = AdoptedProjector(ctx, whole[:mark])
        rest = [event for frame in frames[cut:] for event in _events(adopted.feed(frame))]
        assert whole[:mark] + rest == whole, cut

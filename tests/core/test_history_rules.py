"""The stored conversation's pure core: the fold of a run's events, the bounds, the redaction, the snapshot rule."""
import json
from typing import Any, Dict, List

import pytest
from ag_ui.core import Message
from pydantic import TypeAdapter

from iaccode_agui.credentials import REDACTED
from iaccode_agui.projection import events as ev
from iaccode_agui.projection import history_rules as rules
from iaccode_agui.projection.history_reducer import INTERRUPT_ACTIVITY, Conversation, RunEvents, user_message

MESSAGES = TypeAdapter(List[Message])


def mark(size: int) -> str:
    return "[cut %d]" % size


def fold(stored: List[Dict[str, Any]], events: List[Dict[str, Any]], cap: int = 10 ** 6) -> Conversation:
    recorded = RunEvents(cap, lambda text, size: rules.cut_text(text, size, cap, mark))
    for event in events:
        recorded.add(event)
    conversation = Conversation(stored)
    for event in recorded.events():
        conversation.apply(event)
    MESSAGES.validate_python(conversation.messages)
    return conversation


def tool_turn(text_id: str, after_id: str) -> List[Dict[str, Any]]:
    """Text, a tool call, its result, more text: with the boundaries that end a text before its tool call."""
    return [ev.text_start(text_id), ev.text_content(text_id, "Let me "), ev.text_content(text_id, "look."),
            ev.text_end(text_id), ev.tool_start("c1", "read_file", text_id), ev.tool_args("c1", '{"pa'),
            ev.tool_args("c1", 'th":"a"}'), ev.tool_end("c1"), ev.tool_result("c1", "# A"),
            ev.reasoning_start("r1"), ev.text_start(after_id), ev.text_content(after_id, "It is A."),
            ev.text_end(after_id)]


def test_a_tool_turn_folds_into_user_assistant_tool_assistant_with_the_stream_ids():
    conversation = fold([{"id": "u1", "role": "user", "content": "hi"}], tool_turn("m1", "m2"))
    assert conversation.messages == [
        {"id": "u1", "role": "user", "content": "hi"},
        {"id": "m1", "role": "assistant", "content": "Let me look.",
         "toolCalls": [{"id": "c1", "type": "function",
                        "function": {"name": "read_file", "arguments": '{"path":"a"}'}}]},
        {"id": "tool-result-c1", "role": "tool", "toolCallId": "c1", "content": "# A"},
        {"id": "m2", "role": "assistant", "content": "It is A."}]


def test_one_message_id_kept_across_a_tool_call_folds_as_a_stock_client_folds_it():
    events = tool_turn("m1", "m1")
    conversation = fold([], events)
    assert [m["id"] for m in conversation.messages] == ["m1", "tool-result-c1"]
    assert conversation.messages[0]["content"] == "Let me look.It is A."


def test_a_resume_run_answers_a_call_made_by_an_earlier_run_in_place():
    first = fold([{"id": "u1", "role": "user", "content": "write"}],
                 [ev.text_start("m1"), ev.text_content("m1", "Writing."), ev.tool_start("c9", "write_file", "m1"),
                  ev.tool_end("c9"), ev.text_end("m1")])
    first.note_interrupt({"id": "p1", "reason": "tool_call", "message": "Allow?", "toolCallId": "c9"})
    resumed = fold(first.messages, [ev.tool_result("c9", "written"), ev.text_start("m2"),
                                    ev.text_content("m2", "Done."), ev.text_end("m2")])
    resumed.note_answer({"interruptId": "p1", "status": "resolved", "payload": {"decision": "allow_once"}})
    assert [m["id"] for m in resumed.messages] == ["u1", "m1", "tool-result-c9", "interrupt-p1", "m2"]
    activity = resumed.find("interrupt-p1")
    assert activity["activityType"] == INTERRUPT_ACTIVITY
    assert activity["content"] == {"interrupt": {"id": "p1", "reason": "tool_call", "message": "Allow?",
                                                 "toolCallId": "c9"},
                                   "answer": {"status": "resolved", "payload": {"decision": "allow_once"}}}
    MESSAGES.validate_python(resumed.messages)


def test_activity_snapshots_keep_their_place_and_their_latest_content():
    conversation = fold([], [ev.activity_snapshot("p", "iac-code.pipeline.v1", {"n": 1}),
                             ev.text_start("m"), ev.text_content("m", "x"), ev.text_end("m"),
                             ev.activity_snapshot("p", "iac-code.pipeline.v1", {"n": 2})])
    assert conversation.messages[0] == {"id": "p", "role": "activity", "activityType": "iac-code.pipeline.v1",
                                        "content": {"n": 2}}


def test_reasoning_and_snapshots_are_not_folded():
    conversation = fold([], [ev.reasoning_message_start("r"), ev.reasoning_content("r", "hmm"),
                             ev.messages_snapshot([{"id": "x", "role": "user", "content": "y"}])])
    assert conversation.messages == []


def test_a_text_past_the_cap_is_cut_with_its_size():
    conversation = fold([], [ev.text_start("m")] + [ev.text_content("m", "abcdefghij")] * 100, cap=64)
    content = conversation.messages[0]["content"]
    assert content.endswith("[cut 1000]") and len(content.encode()) <= 64 and content.startswith("abcdefghij")


def test_a_user_message_names_its_images_and_keeps_no_data():
    parts = [{"text": "look"}, {"data": {"filename": "cat.png", "bytes": "iVBORw0KGgo="}, "mediaType": "image/png"}]
    message = user_message("u", parts, lambda name, kind: "[image %s %s]" % (name, kind))
    assert message == {"id": "u", "role": "user", "content": [{"type": "text", "text": "look"},
                                                              {"type": "text", "text": "[image cat.png image/png]"}]}
    assert "iVBORw0KGgo" not in json.dumps(message)
    MESSAGES.validate_python([message])


def test_clean_redacts_credential_keys_and_the_runs_own_credentials():
    secret = "sk-live-0123456789"
    message = {"id": "a", "role": "assistant", "content": "key " + secret, "toolCalls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": json.dumps(
            {"accessKeySecret": "plain", "x": {"llm_api_key": "v"}, "y": 1})}}]}
    cleaned = rules.clean(message, 1000, mark, [secret])
    assert cleaned["content"] == "key " + REDACTED
    assert json.loads(cleaned["toolCalls"][0]["function"]["arguments"]) == \
        {"accessKeySecret": REDACTED, "x": {"llm_api_key": REDACTED}, "y": 1}
    tool = rules.clean({"id": "t", "role": "tool", "toolCallId": "c", "content": '{"securityToken": "abc"}'},
                       1000, mark)
    assert json.loads(tool["content"]) == {"securityToken": REDACTED}
    activity = rules.clean({"id": "i", "role": "activity", "activityType": "t",
                            "content": {"answer": {"payload": {"freeText": secret}}}}, 1000, mark, [secret])
    assert activity["content"]["answer"]["payload"]["freeText"] == REDACTED
    assert message["content"] == "key " + secret      # the input is left alone


def conversation_of(count: int, size: int = 10) -> List[Dict[str, Any]]:
    return [{"id": "m%d" % i, "role": "user" if i % 2 == 0 else "assistant", "content": "x" * size}
            for i in range(count)]


def test_bound_keeps_the_newest_within_both_limits_and_says_so():
    messages = conversation_of(10)
    assert rules.bound(messages, 10, 10 ** 6) == (messages, False)
    kept, dropped = rules.bound(messages, 4, 10 ** 6)
    assert [m["id"] for m in kept] == ["m6", "m7", "m8", "m9"] and dropped
    last_three = sum(len(json.dumps(m, separators=(",", ":"))) + 1 for m in messages[-3:])
    kept, dropped = rules.bound(messages, 100, last_three)
    assert [m["id"] for m in kept] == ["m7", "m8", "m9"] and dropped


def test_bound_never_leaves_a_result_whose_call_went():
    messages = [{"id": "a", "role": "assistant", "toolCalls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": ""}}]},
        {"id": "t", "role": "tool", "toolCallId": "c", "content": "r"},
        {"id": "b", "role": "assistant", "content": "done"}]
    kept, dropped = rules.bound(messages, 2, 10 ** 6)
    assert [m["id"] for m in kept] == ["b"] and dropped


@pytest.mark.parametrize("mode,resume,input_ids,wanted", [
    ("auto", True, {"m9"}, True), ("auto", True, set(), True),
    ("auto", False, {"m9", "new"}, False), ("auto", False, {"new"}, True),
    ("resume", True, set(), True), ("resume", False, {"new"}, False),
    ("off", True, set(), False), ("off", False, {"new"}, False),
])
def test_the_snapshot_rule(mode, resume, input_ids, wanted):
    stored = conversation_of(10) + [{"id": "i", "role": "activity", "activityType": "t", "content": {}}]
    assert rules.wants_snapshot(mode, resume, stored, frozenset(input_ids)) is wanted


def test_no_snapshot_for_a_thread_without_a_conversation():
    assert not rules.wants_snapshot("auto", True, [], frozenset())
    assert not rules.wants_snapshot("auto", False, [], frozenset({"new"}))


def test_an_out_of_sync_snapshot_ends_with_the_runs_user_message_once():
    stored = conversation_of(2)
    user = {"id": "u", "role": "user", "content": "now"}
    assert rules.snapshot_messages(stored, user) == stored + [user]
    assert rules.snapshot_messages(stored + [user], user) == stored + [user]


def test_fit_messages_keeps_the_newest_that_fit():
    messages = conversation_of(10, size=100)
    kept, dropped = rules.fit_messages(messages, 500)
    assert dropped and kept == messages[-len(kept):] and len(json.dumps(kept)) <= 500

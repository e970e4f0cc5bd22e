"""What each validated answer sends upstream, and what it shows as the result of its tool call."""
import json

import pytest

from iaccode_agui.projection import answers as enc
from tests.core.test_interrupts import ASK
from tests.core.test_resume_rules import CAND, DEP, GEN, PERM_B, PERM_W, Q, RES, UNK, cancelled, resolved, stored


# --- answer_for ------------------------------------------------------------------------------------------------

def test_permission_answer_is_one_data_part_with_six_keys():
    answer = enc.answer_for(PERM_W, resolved(PERM_W["inputId"], {"decision": "allow_once"}),
                           run_id="r2", task_id="e20d-task", sideband=False)
    assert answer == enc.UpstreamAnswer(
        interrupt_id="permission-0b3940d14277410e80462d5e3c5a1ba4", mode="permission",
        parts=[{"data": {"schemaVersion": 1, "kind": "permission", "requestTaskId": "e20d-task",
                         "inputId": "permission-0b3940d14277410e80462d5e3c5a1ba4", "toolUseId": "call_fake_4",
                         "decision": "allow_once"}, "mediaType": "application/json"}],
        message_id="agui-resume-r2-permission-0b3940d14277410e80462d5e3c5a1ba4")
    assert len(answer.parts) == 1 and len(answer.parts[0]["data"]) == 6
    assert isinstance(answer.parts[0]["data"]["schemaVersion"], int)


@pytest.mark.parametrize("entry, decision", [
    (resolved("perm-8c1e", {"decision": "deny"}), "deny"),
    (cancelled("perm-8c1e"), "deny"),
])
def test_denied_and_cancelled_permissions_send_deny(entry, decision):
    answer = enc.answer_for(PERM_B, entry, run_id="r9", task_id="task-1", sideband=False)
    assert answer.mode == "permission"
    assert answer.parts[0]["data"]["decision"] == decision


def test_sideband_permission():
    answer = enc.answer_for(PERM_B, resolved("perm-8c1e", {"decision": "allow_once"}),
                           run_id="r9", task_id="task-1", sideband=True)
    assert (answer.mode, answer.message_id) == ("sideband", "agui-resume-perm-8c1e")
    assert answer.parts[0]["data"]["requestTaskId"] == "task-1"


@pytest.mark.parametrize("value, payload, text", [
    (Q, {"selectedId": "cn-hangzhou"}, "Hangzhou"),
    (Q, {"selected_id": "cn-beijing"}, "Beijing"),
    (Q, {"freeText": "Shanghai"}, "Shanghai"),
    (Q, {"free_text": "Wuhan"}, "Wuhan"),
    (CAND, {"selectedId": "1"}, "HA pair"),
    (UNK, {"selectedId": "a"}, "Alpha"),
    (UNK, {"selectedId": "b"}, "b"),
    (stored(dict(ASK, options=["red", "red"])), {"selectedId": "red-2"}, "red"),
    (GEN, {"freeText": "yes"}, "yes"),
])
def test_question_answers_are_text(value, payload, text):
    answer = enc.answer_for(value, resolved(value["inputId"], payload), run_id="r2", task_id="t", sideband=True)
    assert answer == enc.UpstreamAnswer(value["inputId"], "text", [{"text": text}], "agui-resume-r2")


def test_text_ordinal_suffix():
    entry = resolved("ask-call_fake_1", {"freeText": "x"})
    assert enc.answer_for(Q, entry, run_id="r2", task_id="t", sideband=False, text_ordinal=1).message_id == "agui-resume-r2"
    assert enc.answer_for(Q, entry, run_id="r2", task_id="t", sideband=False, text_ordinal=3).message_id == \
        "agui-resume-r2-3"


@pytest.mark.parametrize("value", [Q, CAND, UNK, DEP, GEN])
def test_cancelled_non_permission_cancels_the_task(value):
    answer = enc.answer_for(value, cancelled(value["inputId"]), run_id="r2", task_id="t", sideband=False)
    assert (answer.mode, answer.parts, answer.interrupt_id) == ("cancel", [], value["inputId"])


def _resource_body(answer):
    assert answer.mode == "text" and answer.message_id == "agui-resume-r2"
    text = answer.parts[0]["text"]
    assert text.startswith(enc.RESOURCE_SELECTION_QUERY_PREFIX)
    body_text = text[len(enc.RESOURCE_SELECTION_QUERY_PREFIX):]
    body = json.loads(body_text)
    assert body_text == json.dumps(body, separators=(",", ":"), ensure_ascii=False)  # compact JSON
    return body


def test_resource_selection_answer():
    body = _resource_body(enc.answer_for(RES, resolved(RES["inputId"], {"value": "vpc-123", "label": "main VPC"}),
                                        run_id="r2", task_id="task-p", sideband=False))
    assert body == {"schemaVersion": 1, "kind": "cloud_resource_selection", "status": "selected",
                    "requestTaskId": "task-p", "contextId": "agui-p", "inputId": RES["inputId"], "toolUseId": "call_r",
                    "selectorId": "sel-1", "value": "vpc-123", "label": "main VPC", "source": "ros"}
    body = _resource_body(enc.answer_for(RES, resolved(RES["inputId"], {"value": "vpc-9"}),
                                        run_id="r2", task_id="task-p", sideband=False))
    assert body["label"] == "vpc-9"
    body = _resource_body(enc.answer_for(RES, resolved(RES["inputId"], {"freeText": "the default one"}),
                                        run_id="r2", task_id="task-p", sideband=False))
    assert (body["value"], body["label"], body["source"]) == ("the default one", "the default one", "free_text")


def test_cancelled_resource_selection_is_sent_not_cancelled():
    body = _resource_body(enc.answer_for(RES, cancelled(RES["inputId"]), run_id="r2", task_id="task-p", sideband=False))
    assert body["status"] == "canceled" and body["optionsEmpty"] is True
    assert "value" not in body and "label" not in body


@pytest.mark.parametrize("payload, expected", [
    ({"selectedId": "go"}, {"kind": "deployment_confirmation", "action": "confirm", "parameter_overrides": {}}),
    ({"selectedId": "tune", "parameter_overrides": {"Size": 2}},
     {"kind": "deployment_confirmation", "action": "adjust", "parameter_overrides": {"Size": 2}}),
    ({"action": "cancel"}, {"kind": "deployment_confirmation", "action": "cancel", "parameter_overrides": {}}),
])
def test_deployment_confirmation_answer(payload, expected):
    answer = enc.answer_for(DEP, resolved("deploy-1", payload), run_id="r2", task_id="t", sideband=False)
    assert answer.mode == "text"
    assert answer.parts == [{"text": json.dumps(expected, separators=(",", ":"))}]


def test_answers_for_numbers_text_answers_and_streams_mixed_permissions():
    pending = {"perm-8c1e": PERM_B, "perm-cand": dict(PERM_B, inputId="perm-cand"), "ask-call_fake_1": Q, "pick-1": UNK}
    to_apply = [("perm-8c1e", resolved("perm-8c1e", {"decision": "allow_once"})),
                ("perm-cand", cancelled("perm-cand")),
                ("ask-call_fake_1", resolved("ask-call_fake_1", {"freeText": "x"})),
                ("pick-1", resolved("pick-1", {"selectedId": "a"}))]
    answers = enc.answers_for(pending, to_apply, run_id="r5", task_id="t", sideband_ids={"perm-cand"})
    assert [(a.interrupt_id, a.mode, a.message_id) for a in answers] == [
        ("perm-8c1e", "permission", "agui-resume-r5-perm-8c1e"),
        ("perm-cand", "permission", "agui-resume-r5-perm-cand"),
        ("ask-call_fake_1", "text", "agui-resume-r5"),
        ("pick-1", "text", "agui-resume-r5-2"),
    ]
    all_sideband = enc.answers_for(pending, to_apply, run_id="r5", task_id="t", sideband_ids={"perm-cand", "perm-8c1e"})
    assert [a.mode for a in all_sideband] == ["sideband", "sideband", "text", "text"]


# --- synthetic tool result text --------------------------------------------------------------------------------

@pytest.mark.parametrize("value, entry, text", [
    (Q, resolved("q", {"selectedId": "cn-hangzhou"}), "Hangzhou"),
    (Q, resolved("q", {"freeText": "Shanghai"}), "Shanghai"),
    (CAND, resolved("c", {"selectedId": "0"}), "Single ECS"),
    (RES, resolved("r", {"value": "vpc-1", "label": "main VPC"}), "main VPC"),
    (RES, resolved("r", {"value": "vpc-1"}), "vpc-1"),
    (RES, resolved("r", {"freeText": "any"}), "any"),
    (DEP, resolved("d", {"selectedId": "go"}), "Deploy now"),
    (DEP, resolved("d", {"action": "cancel"}), "cancel"),
    (PERM_W, resolved("p", {"decision": "allow_once"}), None),
    (Q, cancelled("q"), None),
    (RES, cancelled("r"), None),
    (GEN, resolved("g", {"freeText": "hi"}), None),
    (dict(Q, toolUseId=None), resolved("q", {"freeText": "x"}), None),
])
def test_answer_text_for_tool_result(value, entry, text):
    assert enc.answer_text_for_tool_result(value, entry) == text

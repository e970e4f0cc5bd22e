"""Resume rules: digests, payload validation, the resume plan, and what each answer sends upstream."""
import hashlib
import json

import pytest

from iaccode_agui.errors import (
    MSG_DUPLICATE_RESUME_IDS,
    MSG_INCOMPLETE_RESUME,
    MSG_RESUME_ALREADY_APPLIED,
    MSG_RESUME_PAYLOAD_INVALID,
    MSG_RESUME_PAYLOAD_MISSING,
    MSG_UNKNOWN_INTERRUPT,
    AguiError,
)
from iaccode_agui.projection import interrupts as ip
from iaccode_agui.projection import resume as rs
from tests.test_interrupts import ASK, CANDIDATE, DEPLOY, PERMISSION_BASH, PERMISSION_WRITE, RESOURCE, UNKNOWN


def stored(raw):
    return ip.read_required_inputs({"input": raw})[0][0]


PERM_W = stored(PERMISSION_WRITE)
PERM_B = stored(PERMISSION_BASH)
Q = stored(ASK)
CAND = stored(CANDIDATE)
RES = stored(RESOURCE)
DEP = stored(DEPLOY)
UNK = stored(UNKNOWN)
GEN = ip.generic_input("task-g", "Anything else?")


def resolved(interrupt_id, payload):
    return {"interruptId": interrupt_id, "status": "resolved", "payload": payload}


def cancelled(interrupt_id):
    return {"interruptId": interrupt_id, "status": "cancelled"}


# --- digest --------------------------------------------------------------------------------------------------

def test_digest_is_sha256_of_canonical_status_and_payload():
    entry = resolved("q", {"freeText": "Hangzhou 杭州", "b": [1, 2]})
    canonical = '{"payload":{"b":[1,2],"freeText":"Hangzhou 杭州"},"status":"resolved"}'
    assert rs.resume_digest(entry) == hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def test_digest_ignores_key_order_ids_and_metadata_but_not_content():
    a = {"interruptId": "x", "status": "resolved", "payload": {"a": 1, "b": {"c": 2, "d": 3}}}
    b = {"payload": {"b": {"d": 3, "c": 2}, "a": 1}, "status": "resolved", "interruptId": "y", "metadata": {"m": 1}}
    assert rs.resume_digest(a) == rs.resume_digest(b)
    assert rs.resume_digest(a) != rs.resume_digest(dict(a, status="cancelled"))
    assert rs.resume_digest(a) != rs.resume_digest(dict(a, payload={"a": 2, "b": {"c": 2, "d": 3}}))
    assert rs.resume_digest(cancelled("x")) == rs.resume_digest(dict(cancelled("x"), payload=None))


# --- payload validation ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("value, entry", [
    (PERM_W, resolved("p", {"decision": "allow_once"})),
    (PERM_W, cancelled("p")),
    (PERM_W, dict(cancelled("p"), payload={"decision": "bogus"})),
    (Q, resolved("q", {"selectedId": "cn-beijing"})),
    (Q, resolved("q", {"freeText": "Shanghai"})),
    (Q, cancelled("q")),
    (CAND, resolved("c", {"selectedId": "0"})),
    (RES, resolved("r", {"value": "vpc-1", "label": "main"})),
    (RES, cancelled("r")),
    (DEP, resolved("d", {"action": "cancel"})),
    (dict(DEP, options=[]), cancelled("d")),
    (GEN, resolved("g", {"freeText": "no"})),
])
def test_valid_payloads(value, entry):
    rs.validate_payload(value, entry)


@pytest.mark.parametrize("value, entry, message", [
    (PERM_W, resolved("p", {"decision": "yes please"}), MSG_RESUME_PAYLOAD_INVALID),
    (PERM_W, {"interruptId": "p", "status": "resolved"}, MSG_RESUME_PAYLOAD_MISSING),
    (PERM_W, resolved("p", None), MSG_RESUME_PAYLOAD_MISSING),
    (Q, resolved("q", {"selectedId": "cn-shanghai"}), MSG_RESUME_PAYLOAD_INVALID),
    (Q, resolved("q", "Hangzhou"), MSG_RESUME_PAYLOAD_INVALID),
    (Q, {"interruptId": "q", "status": "maybe", "payload": {"freeText": "x"}}, MSG_RESUME_PAYLOAD_INVALID),
    (RES, resolved("r", {"value": ""}), MSG_RESUME_PAYLOAD_INVALID),
    (DEP, resolved("d", {"action": "reselect"}), MSG_RESUME_PAYLOAD_INVALID),
    (dict(DEP, options=[{"id": "x", "action": "explode"}]), resolved("d", {"action": "confirm"}),
     MSG_RESUME_PAYLOAD_INVALID),
    (GEN, resolved("g", {"freeText": ""}), MSG_RESUME_PAYLOAD_INVALID),
])
def test_invalid_payloads(value, entry, message):
    with pytest.raises(AguiError) as caught:
        rs.validate_payload(value, entry)
    assert caught.value.code == "RESUME_PAYLOAD_INVALID"
    assert caught.value.message == message


def test_validators_are_cached_per_schema():
    rs._validator.cache_clear()
    for _ in range(3):
        rs.validate_payload(Q, resolved("q", {"freeText": "x"}))
    rs.validate_payload(PERM_W, resolved("p", {"decision": "deny"}))
    info = rs._validator.cache_info()
    assert (info.misses, info.hits) == (2, 2)


# --- plan_resume -----------------------------------------------------------------------------------------------

def applied_map(mapping):
    return lambda interrupt_id: mapping.get(interrupt_id)


PENDING = {"perm-8c1e": PERM_B, "ask-call_fake_1": Q}


def raises(code, message, pending, entries, applied=None, newly=()):
    with pytest.raises(AguiError) as caught:
        rs.plan_resume(pending, entries, applied_map(applied or {}), newly)
    assert (caught.value.code, caught.value.message) == (code, message)


def test_plan_applies_every_pending_answer_in_pending_order():
    entries = [resolved("ask-call_fake_1", {"freeText": "x"}), resolved("perm-8c1e", {"decision": "deny"})]
    plan = rs.plan_resume(PENDING, entries, applied_map({}))
    assert plan.to_apply == [("perm-8c1e", entries[1]), ("ask-call_fake_1", entries[0])]
    assert (plan.skipped, plan.discovery, plan.stale) == ([], False, [])


def test_plan_duplicate_ids():
    entry = resolved("perm-8c1e", {"decision": "deny"})
    raises("INCOMPLETE_RESUME", MSG_DUPLICATE_RESUME_IDS, PENDING, [entry, entry, resolved("ask-call_fake_1", {})])


def test_plan_unknown_interrupt():
    raises("UNKNOWN_INTERRUPT", MSG_UNKNOWN_INTERRUPT, {"perm-8c1e": PERM_B},
           [resolved("perm-8c1e", {"decision": "deny"}), resolved("nope", {"decision": "deny"})])


def test_plan_missing_pending_answer_is_incomplete():
    raises("INCOMPLETE_RESUME", MSG_INCOMPLETE_RESUME, PENDING, [resolved("perm-8c1e", {"decision": "deny"})])
    raises("INCOMPLETE_RESUME", MSG_INCOMPLETE_RESUME, PENDING, [resolved("perm-8c1e", {"decision": "deny"})],
           newly=["something-else"])


def test_plan_discovery_when_only_new_ids_are_missing():
    entries = [resolved("perm-8c1e", {"decision": "not even valid"})]
    plan = rs.plan_resume(PENDING, entries, applied_map({}), newly_discovered={"ask-call_fake_1"})
    assert plan == rs.ResumePlan(to_apply=[], skipped=[], discovery=True, stale=[])


def test_plan_idempotent_replay_is_skipped_alongside_new_answers():
    old = resolved("perm-old", {"decision": "allow_once"})
    entries = [old, resolved("perm-8c1e", {"decision": "deny"})]
    plan = rs.plan_resume({"perm-8c1e": PERM_B}, entries, applied_map({"perm-old": rs.resume_digest(old)}))
    assert plan.skipped == ["perm-old"]
    assert plan.to_apply == [("perm-8c1e", entries[1])]


def test_plan_changed_replay_is_already_applied():
    old = resolved("perm-old", {"decision": "allow_once"})
    raises("RESUME_ALREADY_APPLIED", MSG_RESUME_ALREADY_APPLIED, {"perm-8c1e": PERM_B},
           [resolved("perm-old", {"decision": "deny"}), resolved("perm-8c1e", {"decision": "deny"})],
           applied={"perm-old": rs.resume_digest(old)})


def test_plan_only_replays_is_already_applied():
    old = resolved("perm-old", {"decision": "allow_once"})
    raises("RESUME_ALREADY_APPLIED", MSG_RESUME_ALREADY_APPLIED, {}, [old],
           applied={"perm-old": rs.resume_digest(old)})
    raises("RESUME_ALREADY_APPLIED", MSG_RESUME_ALREADY_APPLIED, {}, [])


def test_plan_stale_pending_entry_already_applied():
    old = resolved("perm-8c1e", {"decision": "allow_once"})
    applied = {"perm-8c1e": rs.resume_digest(old)}
    # the stale permission is not required any more; the question alone is applied
    entry = resolved("ask-call_fake_1", {"selectedId": "cn-hangzhou"})
    plan = rs.plan_resume(PENDING, [entry], applied_map(applied))
    assert plan.to_apply == [("ask-call_fake_1", entry)] and plan.stale == ["perm-8c1e"]
    # replaying it identically is skipped; a changed answer is refused
    plan = rs.plan_resume(PENDING, [old, entry], applied_map(applied))
    assert plan.skipped == ["perm-8c1e"]
    raises("RESUME_ALREADY_APPLIED", MSG_RESUME_ALREADY_APPLIED, PENDING,
           [resolved("perm-8c1e", {"decision": "deny"}), entry], applied=applied)


def test_plan_old_answer_replayed_while_a_new_input_is_pending_rediscovers_it():
    """The client re-sent an applied answer and never saw what came next: show it, apply nothing."""
    old = resolved("cand-1", {"selectedId": "0"})
    plan = rs.plan_resume({"deploy-1": DEP}, [old], {"cand-1": rs.resume_digest(old)}.get)
    assert plan.discovery and plan.to_apply == [] and plan.skipped == ["cand-1"]
    changed = resolved("cand-1", {"selectedId": "1"})
    raises("RESUME_ALREADY_APPLIED", MSG_RESUME_ALREADY_APPLIED, {"deploy-1": DEP}, [changed],
           applied={"cand-1": rs.resume_digest(old)})


def test_plan_validates_every_payload_before_returning():
    calls = []

    def applied(interrupt_id):
        calls.append(interrupt_id)
        return None

    entries = [resolved("perm-8c1e", {"decision": "allow_once"}), resolved("ask-call_fake_1", {"selectedId": "nope"})]
    with pytest.raises(AguiError) as caught:
        rs.plan_resume(PENDING, entries, applied)
    assert caught.value.code == "RESUME_PAYLOAD_INVALID"
    raises("RESUME_PAYLOAD_INVALID", MSG_RESUME_PAYLOAD_MISSING, PENDING,
           [{"interruptId": "perm-8c1e", "status": "resolved"}, resolved("ask-call_fake_1", {"freeText": "x"})])


@pytest.mark.parametrize("entries", [[{"status": "resolved"}], [{"interruptId": ""}], ["perm-8c1e"]])
def test_plan_rejects_malformed_entries(entries):
    with pytest.raises(AguiError) as caught:
        rs.plan_resume(PENDING, entries, applied_map({}))
    assert caught.value.code == "INVALID_INPUT"


# --- answer_for ------------------------------------------------------------------------------------------------

def test_permission_answer_is_one_data_part_with_six_keys():
    answer = rs.answer_for(PERM_W, resolved(PERM_W["inputId"], {"decision": "allow_once"}),
                           run_id="r2", task_id="e20d-task", sideband=False)
    assert answer == rs.UpstreamAnswer(
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
    answer = rs.answer_for(PERM_B, entry, run_id="r9", task_id="task-1", sideband=False)
    assert answer.mode == "permission"
    assert answer.parts[0]["data"]["decision"] == decision


def test_sideband_permission():
    answer = rs.answer_for(PERM_B, resolved("perm-8c1e", {"decision": "allow_once"}),
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
    answer = rs.answer_for(value, resolved(value["inputId"], payload), run_id="r2", task_id="t", sideband=True)
    assert answer == rs.UpstreamAnswer(value["inputId"], "text", [{"text": text}], "agui-resume-r2")


def test_text_ordinal_suffix():
    entry = resolved("ask-call_fake_1", {"freeText": "x"})
    assert rs.answer_for(Q, entry, run_id="r2", task_id="t", sideband=False, text_ordinal=1).message_id == "agui-resume-r2"
    assert rs.answer_for(Q, entry, run_id="r2", task_id="t", sideband=False, text_ordinal=3).message_id == \
        "agui-resume-r2-3"


@pytest.mark.parametrize("value", [Q, CAND, UNK, DEP, GEN])
def test_cancelled_non_permission_cancels_the_task(value):
    answer = rs.answer_for(value, cancelled(value["inputId"]), run_id="r2", task_id="t", sideband=False)
    assert (answer.mode, answer.parts, answer.interrupt_id) == ("cancel", [], value["inputId"])


def _resource_body(answer):
    assert answer.mode == "text" and answer.message_id == "agui-resume-r2"
    text = answer.parts[0]["text"]
    assert text.startswith(rs.RESOURCE_SELECTION_QUERY_PREFIX)
    body_text = text[len(rs.RESOURCE_SELECTION_QUERY_PREFIX):]
    body = json.loads(body_text)
    assert body_text == json.dumps(body, separators=(",", ":"), ensure_ascii=False)  # compact JSON
    return body


def test_resource_selection_answer():
    body = _resource_body(rs.answer_for(RES, resolved(RES["inputId"], {"value": "vpc-123", "label": "main VPC"}),
                                        run_id="r2", task_id="task-p", sideband=False))
    assert body == {"schemaVersion": 1, "kind": "cloud_resource_selection", "status": "selected",
                    "requestTaskId": "task-p", "contextId": "agui-p", "inputId": RES["inputId"], "toolUseId": "call_r",
                    "selectorId": "sel-1", "value": "vpc-123", "label": "main VPC", "source": "ros"}
    body = _resource_body(rs.answer_for(RES, resolved(RES["inputId"], {"value": "vpc-9"}),
                                        run_id="r2", task_id="task-p", sideband=False))
    assert body["label"] == "vpc-9"
    body = _resource_body(rs.answer_for(RES, resolved(RES["inputId"], {"freeText": "the default one"}),
                                        run_id="r2", task_id="task-p", sideband=False))
    assert (body["value"], body["label"], body["source"]) == ("the default one", "the default one", "free_text")


def test_cancelled_resource_selection_is_sent_not_cancelled():
    body = _resource_body(rs.answer_for(RES, cancelled(RES["inputId"]), run_id="r2", task_id="task-p", sideband=False))
    assert body["status"] == "canceled" and body["optionsEmpty"] is True
    assert "value" not in body and "label" not in body


@pytest.mark.parametrize("payload, expected", [
    ({"selectedId": "go"}, {"kind": "deployment_confirmation", "action": "confirm", "parameter_overrides": {}}),
    ({"selectedId": "tune", "parameter_overrides": {"Size": 2}},
     {"kind": "deployment_confirmation", "action": "adjust", "parameter_overrides": {"Size": 2}}),
    ({"action": "cancel"}, {"kind": "deployment_confirmation", "action": "cancel", "parameter_overrides": {}}),
])
def test_deployment_confirmation_answer(payload, expected):
    answer = rs.answer_for(DEP, resolved("deploy-1", payload), run_id="r2", task_id="t", sideband=False)
    assert answer.mode == "text"
    assert answer.parts == [{"text": json.dumps(expected, separators=(",", ":"))}]


def test_answers_for_numbers_text_answers_and_streams_mixed_permissions():
    pending = {"perm-8c1e": PERM_B, "perm-cand": dict(PERM_B, inputId="perm-cand"), "ask-call_fake_1": Q, "pick-1": UNK}
    to_apply = [("perm-8c1e", resolved("perm-8c1e", {"decision": "allow_once"})),
                ("perm-cand", cancelled("perm-cand")),
                ("ask-call_fake_1", resolved("ask-call_fake_1", {"freeText": "x"})),
                ("pick-1", resolved("pick-1", {"selectedId": "a"}))]
    answers = rs.answers_for(pending, to_apply, run_id="r5", task_id="t", sideband_ids={"perm-cand"})
    assert [(a.interrupt_id, a.mode, a.message_id) for a in answers] == [
        ("perm-8c1e", "permission", "agui-resume-r5-perm-8c1e"),
        ("perm-cand", "permission", "agui-resume-r5-perm-cand"),
        ("ask-call_fake_1", "text", "agui-resume-r5"),
        ("pick-1", "text", "agui-resume-r5-2"),
    ]
    all_sideband = rs.answers_for(pending, to_apply, run_id="r5", task_id="t", sideband_ids={"perm-cand", "perm-8c1e"})
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
    assert rs.answer_text_for_tool_result(value, entry) == text

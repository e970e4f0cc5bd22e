"""Resume rules: digests, payload validation and the resume plan."""
import hashlib

import pytest

from iaccode_agui.errors import (
    MSG_DUPLICATE_RESUME_IDS,
    MSG_INCOMPLETE_RESUME,
    MSG_RESUME_ALREADY_APPLIED,
    MSG_RESUME_PAYLOAD_ALLOWED,
    MSG_RESUME_PAYLOAD_INVALID,
    MSG_RESUME_PAYLOAD_MISSING,
    MSG_NOTHING_PENDING,
    MSG_UNKNOWN_INTERRUPT_PENDING,
    AguiError,
)
from iaccode_agui.projection import interrupts as ip
from iaccode_agui.projection import resume_plan as rs
from tests.core.test_interrupts import ASK, CANDIDATE, DEPLOY, PERMISSION_BASH, PERMISSION_WRITE, RESOURCE, UNKNOWN


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
    (PERM_W, resolved("p", {"decision": "yes please"}), MSG_RESUME_PAYLOAD_ALLOWED),
    (PERM_W, {"interruptId": "p", "status": "resolved"}, MSG_RESUME_PAYLOAD_MISSING),
    (PERM_W, resolved("p", None), MSG_RESUME_PAYLOAD_MISSING),
    (Q, resolved("q", {"selectedId": "cn-shanghai"}), MSG_RESUME_PAYLOAD_ALLOWED),
    (Q, resolved("q", "Hangzhou"), MSG_RESUME_PAYLOAD_ALLOWED),
    (Q, {"interruptId": "q", "status": "maybe", "payload": {"freeText": "x"}}, MSG_RESUME_PAYLOAD_INVALID),
    (RES, resolved("r", {"value": ""}), MSG_RESUME_PAYLOAD_ALLOWED),
    (DEP, resolved("d", {"action": "reselect"}), MSG_RESUME_PAYLOAD_ALLOWED),
    (dict(DEP, options=[{"id": "x", "action": "explode"}]), resolved("d", {"action": "confirm"}),
     MSG_RESUME_PAYLOAD_INVALID),
    (GEN, resolved("g", {"freeText": ""}), MSG_RESUME_PAYLOAD_ALLOWED),
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


def test_plan_unknown_interrupt_names_the_pending_ids():
    with pytest.raises(AguiError) as caught:
        rs.plan_resume(PENDING, [resolved("perm-8c1e", {"decision": "deny"}), resolved("nope", {"decision": "deny"})],
                       applied_map({}))
    assert (caught.value.code, caught.value.message) == ("UNKNOWN_INTERRUPT", MSG_UNKNOWN_INTERRUPT_PENDING)
    assert caught.value.render(str) == ("The resume references an unknown interrupt; the pending interrupts are "
                                        "`perm-8c1e`, `ask-call_fake_1`.")


def test_plan_unknown_interrupt_when_every_pending_one_was_applied_says_nothing_is_pending():
    raises("UNKNOWN_INTERRUPT", MSG_NOTHING_PENDING, {"perm-8c1e": PERM_B}, [resolved("nope", {"decision": "deny"})],
           applied={"perm-8c1e": "digest"})


def test_unknown_interrupt_lists_at_most_a_bounded_text():
    pending = {"ask-%03d-%s" % (n, "x" * 40): Q for n in range(50)}
    with pytest.raises(AguiError) as caught:
        rs.plan_resume(pending, [resolved("nope", {"freeText": "x"})], applied_map({}))
    shown = caught.value.params["pending"]
    assert len(shown) <= rs.MAX_SHOWN + 1 and shown.endswith("…") and shown.startswith("`ask-000-")


@pytest.mark.parametrize("value, allowed", [
    (PERM_W, '{"decision": "allow_once" | "deny"}'),
    (GEN, '{"freeText": "<text>"}'),
    (RES, '{"value": "<text>", "label"?: "<text or empty>"} | {"freeText": "<text>"}'),
])
def test_invalid_payload_says_what_the_interrupt_accepts(value, allowed):
    with pytest.raises(AguiError) as caught:
        rs.validate_payload(value, resolved("i-1", {"nope": 1}))
    assert caught.value.render(str) == (
        "The interrupt response payload is invalid: interrupt `i-1` accepts %s." % allowed)


def test_allowed_answers_merge_options_and_stay_bounded():
    options = [{"id": "opt-%d" % n, "label": "Option %d" % n} for n in range(3)]
    schema = ip.response_schema({"kind": "question", "options": options, "allowFreeText": True})
    assert rs.allowed_answers(schema) == '{"selectedId": "opt-0" | "opt-1" | "opt-2"} | {"freeText": "<text>"}'
    many = ip.response_schema({"kind": "question", "options": [{"id": "o" * 30 + str(n)} for n in range(100)]})
    assert len(rs.allowed_answers(many)) == rs.MAX_SHOWN + 1


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

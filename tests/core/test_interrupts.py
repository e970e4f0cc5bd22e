"""Interrupt projection: allowlist, option rules, response schemas, messages, the AG-UI Interrupt shape."""
import copy
import json

import pytest
from ag_ui.core import Interrupt
from jsonschema import Draft202012Validator

from iaccode_agui.errors import MSG_INPUT_REQUIRED, MSG_PERMISSION_REQUIRED
from iaccode_agui.projection import interrupts as ip
from iaccode_agui.state.model import PendingInterrupt, parse_iso_utc

# --- realistic projections, shaped like the runtime's (numbers as protobuf floats) ----------------------

PERMISSION_WRITE = {
    "kind": "permission", "schemaVersion": 1.0, "inputId": "permission-0b3940d14277410e80462d5e3c5a1ba4",
    "requestTaskId": "e20d-task", "contextId": "agui-c444", "toolName": "write_file", "toolUseId": "call_fake_4",
    "isReadOnly": False, "required": True, "effect": "file_change", "target": "hello.txt",
    "title": "Change a workspace file", "prompt": "Change a workspace file Allow once?",
    "purpose": "Write a file needed for the requested infrastructure task.", "language": "en",
    "safeSummary": "write_file: {\"content\":{\"fingerprint\":\"sha256:f7bfed9be43cbc03\",\"length\":20,\"type\":\"str\"},"
                   "\"path\":\"hello.txt\"}",
    "options": [{"label": "Allow once", "id": "allow_once"}, {"label": "Deny", "id": "deny"}],
    # never exposed:
    "toolInput": {"path": "hello.txt", "content": "hello from fake llm\n"},
    "credentials": {"accessKeySecret": "s3cret"},
}

PERMISSION_BASH = {
    "schemaVersion": 1, "kind": "permission", "requestTaskId": "task-1", "contextId": "agui-x", "inputId": "perm-8c1e",
    "toolUseId": "toolu_01", "toolName": "bash", "title": "Run a local shell command",
    "purpose": "Execute a local command needed for the requested infrastructure task.",
    "effect": "local_execution", "target": "the current local workspace; command: pwd", "isReadOnly": False,
    "safeSummary": "bash: {\"command\":\"pwd\"}",
    "options": [{"id": "allow_once", "label": "Allow once"}, {"id": "deny", "label": "Deny"}],
    "language": "en", "required": True,
    "deploymentSummary": {"candidateName": "c1", "action": "create", "region": "cn-hangzhou", "resources": [{"n": 2.0}]},
}

ASK = {
    "schemaVersion": 1.0, "kind": "ask_user_question", "requestTaskId": "task-p", "contextId": "agui-p",
    "inputId": "ask-call_fake_1", "prompt": "Which region?", "allowFreeText": True, "required": True,
    "toolUseId": "call_fake_1",
    "options": [{"id": "cn-hangzhou", "label": "Hangzhou"}, {"id": "cn-beijing", "label": "Beijing"}],
}

CANDIDATE = {
    "schemaVersion": 1.0, "kind": "candidate_selection", "inputId": "cand-1", "requestTaskId": "task-p",
    "toolUseId": "call_c", "prompt": "Pick an architecture", "required": True,
    "options": [
        {"candidate_index": 0.0, "name": "Single ECS", "summary": "one box", "architectureDiagram": "graph TD; A-->B",
         "totalMonthlyCost": 120.0, "costItems": [{"name": "ECS", "spec": "ecs.g7.large", "monthlyCost": 100.0},
                                                   {"name": "EIP", "spec": "5Mbps", "monthlyCost": 20.5}]},
        {"candidate_index": 1.0, "name": "HA pair", "totalMonthlyCost": 240.0, "costItems": []},
    ],
}

RESOURCE = {
    "schemaVersion": 1.0, "kind": "cloud_resource_selection", "inputId": "resource-" + "a" * 32,
    "requestTaskId": "task-p", "contextId": "agui-p", "toolUseId": "call_r", "prompt": "Choose a VPC", "required": True,
    "selector": {"id": "sel-1", "associationProperty": "ALIYUN::ECS::VPC::VPCId", "outputKind": "id",
                 "associationPropertyMetadata": {"RegionId": "cn-hangzhou"}, "source": "ros", "profileHash": "sha256:1"},
}

DEPLOY = {
    "schemaVersion": 1.0, "kind": "deployment_confirmation", "inputId": "deploy-1", "requestTaskId": "task-p",
    "toolUseId": "call_d", "prompt": "Deploy the stack?", "required": True,
    "options": [{"id": "go", "name": "Deploy now", "action": "confirm"},
                {"id": "tune", "label": "Adjust parameters", "action": "adjust"},
                {"id": "stop", "label": "Cancel", "action": "cancel"}],
}

UNKNOWN = {"kind": "region_picker", "inputId": "pick-1", "prompt": "Pick", "required": True,
           "options": [{"id": "a", "title": "Alpha"}, {"id": "b"}]}


def _deploy_with(options):
    value = copy.deepcopy(DEPLOY)
    value["options"] = options
    return value


def _walk_objects(schema):
    if isinstance(schema, dict):
        if schema.get("type") == "object" and "properties" in schema:
            yield schema
        for item in schema.values():
            yield from _walk_objects(item)
    elif isinstance(schema, list):
        for item in schema:
            yield from _walk_objects(item)


def _valid(schema, payload):
    return Draft202012Validator(schema).is_valid(payload)


# --- numbers and the allowlist ---------------------------------------------------------------------------

def test_sanitize_keeps_only_allowlisted_fields_and_drops_secrets():
    clean = ip.sanitize_input(PERMISSION_WRITE)
    assert set(clean) <= set(ip.ALLOWED_INPUT_FIELDS)
    assert "toolInput" not in clean and "credentials" not in clean
    assert "s3cret" not in json.dumps(clean)
    assert clean["toolUseId"] == "call_fake_4"
    assert clean["isReadOnly"] is False


def test_sanitize_keeps_schema_version_as_given_but_coerces_the_rest():
    clean = ip.sanitize_input(dict(CANDIDATE, extra=1))
    assert isinstance(clean["schemaVersion"], float) and clean["schemaVersion"] == 1
    assert clean["options"][0]["candidate_index"] == 0 and isinstance(clean["options"][0]["candidate_index"], int)
    assert clean["options"][0]["costItems"][0]["monthlyCost"] == 100
    assert clean["options"][0]["costItems"][1]["monthlyCost"] == 20.5


def test_sanitize_drops_nulls_and_never_invents_an_id():
    clean = ip.sanitize_input({"kind": "ask_user_question", "freeTextPrompt": None, "prompt": "Q", "required": True})
    assert clean == {"kind": "ask_user_question", "prompt": "Q", "required": True}


def test_allowlist_is_the_documented_one():
    assert ip.ALLOWED_INPUT_FIELDS == (
        "schemaVersion", "kind", "requestTaskId", "contextId", "inputId", "toolUseId", "toolName", "title",
        "purpose", "effect", "target", "isReadOnly", "prompt", "safeSummary", "options", "language",
        "deploymentSummary", "scope", "subPipelineId", "operation", "displayParameters", "allowFreeText",
        "freeTextPrompt", "required", "selector")


# --- reading pending inputs ------------------------------------------------------------------------------

def test_read_required_inputs_from_input_and_pending_permissions():
    candidate_perm = dict(PERMISSION_BASH, inputId="perm-cand", scope="candidate", subPipelineId="cand-0")
    iac_code = {
        "input": PERMISSION_WRITE,
        "pendingPermissions": [candidate_perm, dict(PERMISSION_BASH, inputId="perm-optional", required=False), "junk"],
        "permission": {"pending": True},
    }
    found = ip.read_required_inputs(iac_code)
    assert [(value["inputId"], sideband) for value, sideband in found] == [
        ("permission-0b3940d14277410e80462d5e3c5a1ba4", False), ("perm-cand", True)]
    assert "toolInput" not in found[0][0]


def test_read_required_inputs_dedups_and_upgrades_to_sideband():
    found = ip.read_required_inputs({"input": PERMISSION_BASH, "pendingPermissions": [PERMISSION_BASH]})
    assert len(found) == 1
    assert found[0][0]["inputId"] == "perm-8c1e" and found[0][1] is True


@pytest.mark.parametrize("iac_code", [
    {}, {"input": None}, {"input": {"kind": "ask_user_question", "prompt": "Q"}},
    {"input": dict(ASK, required=False)}, {"pendingPermissions": "nope"}, "not a dict",
])
def test_read_required_inputs_ignores_what_is_not_required(iac_code):
    assert ip.read_required_inputs(iac_code) == []


def test_missing_input_id_gets_a_stable_derived_id():
    raw = {"kind": "ask_user_question", "prompt": "Name?", "required": True, "secret": "x"}
    first = ip.read_required_inputs({"input": raw})
    again = ip.read_required_inputs({"input": dict(reversed(list(raw.items())), secret="y")})
    other = ip.read_required_inputs({"input": dict(raw, prompt="Other?")})
    assert first[0][0]["inputId"].startswith("input-") and len(first[0][0]["inputId"]) == len("input-") + 32
    assert first[0][0]["inputId"] == again[0][0]["inputId"] != other[0][0]["inputId"]
    twice = ip.read_required_inputs({"input": raw, "pendingPermissions": [raw]})
    assert len(twice) == 1


@pytest.mark.parametrize("value, from_pending, expected", [
    (PERMISSION_BASH, False, False),
    (PERMISSION_BASH, True, True),
    (dict(PERMISSION_BASH, scope="candidate"), False, True),
    (dict(PERMISSION_BASH, scope="pipeline"), False, False),
    (dict(PERMISSION_BASH, subPipelineId="cand-0"), False, True),
    (dict(PERMISSION_BASH, subPipelineId=3), False, False),
])
def test_is_sideband(value, from_pending, expected):
    assert ip.is_sideband(value, from_pending) is expected


# --- standard options --------------------------------------------------------------------------------------

@pytest.mark.parametrize("options, expected", [
    (PERMISSION_WRITE["options"], [{"id": "allow_once", "title": "Allow once"}, {"id": "deny", "title": "Deny"}]),
    (CANDIDATE["options"], [{"id": "0", "title": "Single ECS"}, {"id": "1", "title": "HA pair"}]),
    (["red", "green"], [{"id": "red", "title": "red"}, {"id": "green", "title": "green"}]),
    ([{"label": "No id"}, {"name": "Also none"}], [{"id": "0", "title": "No id"}, {"id": "1", "title": "Also none"}]),
    ([{"id": "", "label": "Empty"}, "", {"id": "x"}],
     [{"id": "option-1", "title": "Empty"}, {"id": "option-2", "title": "option-2"}, {"id": "x", "title": "x"}]),
    ([{"id": "a", "label": "A1"}, {"id": "a", "label": "A2"}, "a", {"id": "a-2"}],
     [{"id": "a", "title": "A1"}, {"id": "a-2", "title": "A2"}, {"id": "a-3", "title": "a"},
      {"id": "a-2-2", "title": "a-2"}]),
    ([{"id": "t", "title": "By title"}, {"id": "n", "name": "By name", "title": "ignored"},
      {"id": "l", "label": "By label", "name": "ignored"}, {"id": "e", "label": ""}],
     [{"id": "t", "title": "By title"}, {"id": "n", "title": "By name"}, {"id": "l", "title": "By label"},
      {"id": "e", "title": "e"}]),
    ([{"id": 7.0, "label": "Seven"}, 3.0, None, ["nested"]], [{"id": "7", "title": "Seven"}, {"id": "3", "title": "3"}]),
    (None, []), ("abc", []), ({"id": "x"}, []),
])
def test_standard_options(options, expected):
    assert ip.standard_options(options) == expected


# --- response schemas --------------------------------------------------------------------------------------

def test_permission_schema_is_exact():
    assert ip.response_schema(PERMISSION_WRITE) == {
        "type": "object", "properties": {"decision": {"type": "string", "enum": ["allow_once", "deny"]}},
        "required": ["decision"], "additionalProperties": False}


def test_question_schema_with_options_and_free_text():
    free = {"type": "object", "properties": {"freeText": {"type": "string", "minLength": 1}},
            "required": ["freeText"], "additionalProperties": False}
    assert ip.response_schema(ASK) == {"oneOf": [
        {"type": "object", "properties": {"selectedId": {"type": "string", "const": "cn-hangzhou", "title": "Hangzhou"}},
         "required": ["selectedId"], "additionalProperties": False},
        {"type": "object", "properties": {"selectedId": {"type": "string", "const": "cn-beijing", "title": "Beijing"}},
         "required": ["selectedId"], "additionalProperties": False},
        free]}
    assert ip.response_schema(dict(ASK, allowFreeText=False))["oneOf"][-1]["properties"].keys() == {"selectedId"}
    assert ip.response_schema(dict(ASK, options=[], allowFreeText=False)) == {"oneOf": [free]}


def test_resource_schema():
    assert ip.response_schema(RESOURCE) == {"oneOf": [
        {"type": "object", "properties": {"value": {"type": "string", "minLength": 1}, "label": {"type": "string"}},
         "required": ["value"], "additionalProperties": False},
        {"type": "object", "properties": {"freeText": {"type": "string", "minLength": 1}},
         "required": ["freeText"], "additionalProperties": False}]}


def test_deployment_schema():
    overrides = {"parameter_overrides": {"type": "object"}}
    schema = ip.response_schema(DEPLOY)
    assert schema["oneOf"][0] == {
        "type": "object", "properties": {"selectedId": {"type": "string", "const": "go", "title": "Deploy now"}, **overrides},
        "required": ["selectedId"], "additionalProperties": False}
    assert [branch["properties"]["selectedId"]["const"] for branch in schema["oneOf"][:3]] == ["go", "tune", "stop"]
    assert schema["oneOf"][3] == {
        "type": "object", "properties": {"action": {"type": "string", "enum": ["confirm", "adjust", "cancel"]}, **overrides},
        "required": ["action"], "additionalProperties": False}


@pytest.mark.parametrize("options", [
    [{"id": "", "label": "x", "action": "confirm"}],
    [{"id": "x" * 201, "action": "confirm"}],
    [{"id": "a", "action": "confirm"}, {"id": "a", "action": "cancel"}],
    [{"id": "a", "action": "deploy"}],
    [{"id": "a"}],
    [{"id": 1, "action": "confirm"}],
    ["confirm"],
    [],
    None,
])
def test_deployment_with_unusable_options_has_no_schema_and_no_interrupt(options):
    value = _deploy_with(options)
    assert ip.response_schema(value) is None
    assert ip.build_interrupt(value, None, "en") is None


def test_deployment_option_id_of_exactly_200_chars_is_fine():
    assert ip.response_schema(_deploy_with([{"id": "x" * 200, "action": "confirm"}])) is not None


@pytest.mark.parametrize("value", [PERMISSION_WRITE, ASK, dict(ASK, options=[]), CANDIDATE, RESOURCE, DEPLOY, UNKNOWN,
                                   ip.generic_input("t-1", "Say something")])
def test_every_schema_is_valid_2020_12_and_closes_every_object(value):
    schema = ip.response_schema(value)
    Draft202012Validator.check_schema(schema)
    objects = list(_walk_objects(schema))
    assert objects
    assert all(obj.get("additionalProperties") is False for obj in objects)


@pytest.mark.parametrize("value, payload, ok", [
    (PERMISSION_WRITE, {"decision": "allow_once"}, True),
    (PERMISSION_WRITE, {"decision": "deny"}, True),
    (PERMISSION_WRITE, {"decision": "yes please"}, False),
    (PERMISSION_WRITE, {"decision": "deny", "note": "x"}, False),
    (PERMISSION_WRITE, {}, False),
    (ASK, {"selectedId": "cn-hangzhou"}, True),
    (ASK, {"selectedId": "cn-shanghai"}, False),
    (ASK, {"freeText": "Shanghai"}, True),
    (ASK, {"freeText": ""}, False),
    (ASK, {"selectedId": "cn-hangzhou", "freeText": "x"}, False),
    (dict(ASK, allowFreeText=False), {"freeText": "Shanghai"}, False),
    (CANDIDATE, {"selectedId": "1"}, True),
    (CANDIDATE, {"selectedId": 1}, False),
    (CANDIDATE, {"freeText": "neither"}, False),
    (RESOURCE, {"value": "vpc-123"}, True),
    (RESOURCE, {"value": "vpc-123", "label": "main VPC"}, True),
    (RESOURCE, {"value": ""}, False),
    (RESOURCE, {"freeText": "the default one"}, True),
    (RESOURCE, {"value": "vpc-1", "freeText": "x"}, False),
    (DEPLOY, {"selectedId": "go"}, True),
    (DEPLOY, {"selectedId": "tune", "parameter_overrides": {"InstanceType": "ecs.g7.xlarge"}}, True),
    (DEPLOY, {"action": "adjust", "parameter_overrides": {}}, True),
    (DEPLOY, {"action": "reselect"}, False),
    (DEPLOY, {"selectedId": "go", "action": "confirm"}, False),
    (DEPLOY, {"selectedId": "go", "parameter_overrides": "x"}, False),
    (UNKNOWN, {"selectedId": "b"}, True),
    (UNKNOWN, {"freeText": "c"}, False),
    (ip.generic_input("t-1", None), {"freeText": "hi"}, True),
    (ip.generic_input("t-1", None), {"freeText": ""}, False),
    (ip.generic_input("t-1", None), {"text": "hi"}, False),
])
def test_schemas_accept_good_and_reject_bad_payloads(value, payload, ok):
    assert _valid(ip.response_schema(value), payload) is ok


# --- messages ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("value, expected", [
    (PERMISSION_WRITE, "Change a workspace file Allow once?"),
    (dict(PERMISSION_WRITE, prompt=None), "Change a workspace file"),
    (dict(PERMISSION_WRITE, prompt="  ", title=""), "Permission required"),
    ({"kind": "permission"}, "Permission required"),
    (ASK, "Which region?\n- cn-hangzhou: Hangzhou\n- cn-beijing: Beijing"),
    (dict(ASK, prompt=None), "Input required\n- cn-hangzhou: Hangzhou\n- cn-beijing: Beijing"),
    (CANDIDATE, "Pick an architecture\n- 0: Single ECS\n- 1: HA pair"),
    (RESOURCE, "Choose a VPC"),
    (DEPLOY, "Deploy the stack?\n- go: Deploy now\n- tune: Adjust parameters\n- stop: Cancel"),
    (UNKNOWN, "Pick\n- a: Alpha\n- b: b"),
    ({"kind": "ask_user_question", "title": "ignored for questions"}, "Input required"),
])
def test_interrupt_message(value, expected):
    assert ip.interrupt_message(value, "en") == expected


@pytest.fixture
def fake_translate(monkeypatch):
    import iaccode_agui.i18n as i18n

    calls = []

    def translate(message, language):
        calls.append((message, language))
        return "<%s:%s>" % (language, message)

    monkeypatch.setattr(i18n, "translate", translate)
    return calls


@pytest.mark.parametrize("value, request_language, expected", [
    ({"kind": "permission"}, "fr", "<fr:%s>" % MSG_PERMISSION_REQUIRED),
    ({"kind": "permission", "language": "zh-CN"}, "fr", "<zh:%s>" % MSG_PERMISSION_REQUIRED),
    ({"kind": "ask_user_question", "language": "ja_JP"}, "en", "<ja:%s>" % MSG_INPUT_REQUIRED),
    ({"kind": "ask_user_question", "language": "tlh"}, "de", "<de:%s>" % MSG_INPUT_REQUIRED),
    ({"kind": "ask_user_question", "language": 5}, "pt", "<pt:%s>" % MSG_INPUT_REQUIRED),
])
def test_fallback_messages_use_the_inputs_own_language_first(fake_translate, value, request_language, expected):
    assert ip.interrupt_message(value, request_language) == expected


def test_runtime_prompts_are_never_translated(fake_translate):
    assert ip.interrupt_message(dict(ASK, language="zh"), "fr").startswith("Which region?\n")
    assert fake_translate == []


# --- the AG-UI Interrupt -------------------------------------------------------------------------------------

def _conforms(interrupt):
    model = Interrupt.model_validate(interrupt)
    assert model.model_dump(by_alias=True, exclude_none=True, mode="json") == json.loads(json.dumps(interrupt))


def test_permission_interrupt_exact_shape():
    interrupt = ip.build_interrupt(ip.sanitize_input(PERMISSION_WRITE), "2026-11-30T11:31:09.670Z", "en")
    expected_metadata = {key: value for key, value in PERMISSION_WRITE.items()
                         if key not in ("toolInput", "credentials")}
    expected_metadata["standardOptions"] = [{"id": "allow_once", "title": "Allow once"}, {"id": "deny", "title": "Deny"}]
    assert interrupt == {
        "id": "permission-0b3940d14277410e80462d5e3c5a1ba4",
        "reason": "tool_call",
        "message": "Change a workspace file Allow once?",
        "toolCallId": "call_fake_4",
        "responseSchema": ip.response_schema(PERMISSION_WRITE),
        "expiresAt": "2026-11-30T11:31:09.670Z",
        "metadata": expected_metadata,
    }
    assert list(interrupt) == ["id", "reason", "message", "toolCallId", "responseSchema", "expiresAt", "metadata"]
    assert isinstance(interrupt["metadata"]["schemaVersion"], float)
    _conforms(interrupt)


@pytest.mark.parametrize("value, reason", [
    (PERMISSION_BASH, "tool_call"), (ASK, "input_required"), (CANDIDATE, "input_required"),
    (RESOURCE, "input_required"), (DEPLOY, "input_required"), (UNKNOWN, "input_required"),
])
def test_every_kind_builds_a_conforming_interrupt(value, reason):
    stored = ip.read_required_inputs({"input": value})[0][0]
    interrupt = ip.build_interrupt(stored, None, "en")
    _conforms(interrupt)
    assert interrupt["id"] == value["inputId"]
    assert interrupt["reason"] == reason
    assert "expiresAt" not in interrupt
    assert interrupt["metadata"]["standardOptions"] == ip.standard_options(value.get("options"))
    assert set(interrupt["metadata"]) - {"standardOptions"} <= set(ip.ALLOWED_INPUT_FIELDS)
    assert interrupt["metadata"]["kind"] == value["kind"]


def test_candidate_metadata_keeps_rich_option_fields():
    interrupt = ip.build_interrupt(ip.sanitize_input(CANDIDATE), None, "en")
    first = interrupt["metadata"]["options"][0]
    assert first["architectureDiagram"] == "graph TD; A-->B"
    assert first["totalMonthlyCost"] == 120 and first["costItems"][1] == {"name": "EIP", "spec": "5Mbps",
                                                                         "monthlyCost": 20.5}
    assert interrupt["toolCallId"] == "call_c"


def test_resource_metadata_keeps_the_selector():
    interrupt = ip.build_interrupt(ip.sanitize_input(RESOURCE), None, "en")
    assert interrupt["metadata"]["selector"]["associationProperty"] == "ALIYUN::ECS::VPC::VPCId"
    assert interrupt["metadata"]["standardOptions"] == []


def test_interrupt_without_tool_use_id_or_schema_version_omits_and_defaults():
    interrupt = ip.build_interrupt({"kind": "ask_user_question", "inputId": "q-1", "prompt": "Name?"}, None, "en")
    assert "toolCallId" not in interrupt
    assert interrupt["metadata"]["schemaVersion"] == 1
    assert None not in interrupt.values()
    _conforms(interrupt)


def test_generic_interrupt():
    interrupt = ip.build_generic_interrupt("task-9", "  What is your name?  ", "en")
    assert interrupt["id"] == "input-task-9"
    assert interrupt["reason"] == "input_required"
    assert interrupt["message"] == "What is your name?"
    assert interrupt["responseSchema"] == {
        "type": "object", "properties": {"freeText": {"type": "string", "minLength": 1}},
        "required": ["freeText"], "additionalProperties": False}
    assert interrupt["metadata"]["requestTaskId"] == "task-9"
    assert "toolCallId" not in interrupt
    _conforms(interrupt)
    with_expiry = ip.build_generic_interrupt("task-9", "", "en", expires_at="2026-01-01T00:00:00.000Z")
    assert with_expiry["message"] == "Input required"
    assert with_expiry["expiresAt"] == "2026-01-01T00:00:00.000Z"


def test_generic_interrupt_fallback_is_translated(fake_translate):
    assert ip.build_generic_interrupt("t", None, "es")["message"] == "<es:%s>" % MSG_INPUT_REQUIRED


# --- expiry --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("now, ttl, expected", [
    (1796038329.6701, 540, "2026-11-30T11:41:09.670Z"),
    (0, 1, "1970-01-01T00:00:01.000Z"),
    (1796038329.0, 0, None),
])
def test_expires_at(now, ttl, expected):
    assert ip.expires_at(now, ttl) == expected


def test_expires_at_is_read_back_by_the_state_model():
    # One spelling: what the projection writes is what the state model parses and expires by.
    stamp = ip.expires_at(1000.0, 540)
    assert parse_iso_utc(stamp) == 1540.0
    pending = PendingInterrupt({"inputId": "i"}, expires_at=stamp)
    assert pending.is_expired(1539.999) is False
    assert pending.is_expired(1540.0) is True
    assert PendingInterrupt({"inputId": "i"}).is_expired(10 ** 12) is False


@pytest.mark.parametrize("bad", ["", "tomorrow", "2026-13-01T00:00:00Z", "1970-01-01T00:25:40+00:00", 5])
def test_expiry_rejects_garbage(bad):
    with pytest.raises(ValueError):
        PendingInterrupt({"inputId": "i"}, expires_at=bad).is_expired(0.0)

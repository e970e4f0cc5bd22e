"""Errors that say what to fix: the field and the problem of an input refusal (with its JSON pointer), in every
language; the allowed-roots setting of a refused ``cwd``; the pending ids, allowed answers and "nothing pending"
of a refused resume; a created workspace announced; and the error table of the documentation."""
import json
import logging
import os
import re

import pytest
from werkzeug.test import Client

from iaccode_agui import errors, i18n
from iaccode_agui.web.app import AguiApp
from iaccode_agui.config import Settings
from iaccode_agui.web.input_errors import PROBLEMS
from iaccode_agui.web.inputs import parse_run_request
from tests import ROOT
from tests.agentcore_helpers import ac_body
from tests.harness import interrupt_of, session_of
from tests.inputs_helpers import english, make_body, root, with_props  # noqa: F401  (root: a fixture)

DOCS = os.path.join(ROOT, "docs", "errors.rst")
SCHEMAS = os.path.join(os.path.dirname(errors.__file__), "schemas")


@pytest.fixture
def client(tmp_path, workspace):
    app = AguiApp(Settings(a2a_url="http://127.0.0.1:9/", state_dir=str(tmp_path / "state"),
                           allowed_cwds=(workspace,), default_cwd=workspace))
    yield Client(app)
    app.close(0)


def refusal(client, body, path="/", language=None):
    headers = {"Accept-Language": language} if language else {}
    response = client.post(path, data=json.dumps(body), headers=headers, content_type="application/json")
    return response.status_code, response.get_json()["error"]


def iac_body(workspace, **props):
    body = ac_body()
    body["forwardedProps"] = {"iacCode": dict({"schemaVersion": 1, "rosInvocationId": "i", "cwd": workspace}, **props)}
    return body


# ---- the field and the problem ------------------------------------------------------------------------------

def test_the_envelope_and_props_examples(client, workspace):
    no_run = ac_body()
    del no_run["runId"]
    assert refusal(client, no_run) == (400, {
        "code": "INVALID_INPUT", "field": "/runId",
        "message": "Invalid AG-UI RunAgentInput envelope: `runId` is required."})
    assert refusal(client, iac_body(workspace, cwd="relative/dir")) == (400, {
        "code": "INVALID_INPUT", "field": "/forwardedProps/iacCode/cwd",
        "message": "Invalid iac-code forwarded properties: `cwd` must be an absolute path."})
    assert refusal(client, no_run, path="/ag-ui/agent") == (400, {
        "code": "INVALID_AG_UI_REQUEST", "field": "/runId",
        "message": "Invalid AG-UI RunAgentInput envelope: `runId` is required."})


@pytest.mark.parametrize("language", i18n.SUPPORTED)
def test_the_field_and_problem_are_translated(client, workspace, language):
    no_run = ac_body()
    del no_run["runId"]
    status, error = refusal(client, no_run, language=language)
    head = i18n.translate(errors.MSG_INVALID_ENVELOPE_AT, language).split("{problem}")[0]
    problem = i18n.translate(errors.MSG_FIELD_REQUIRED, language).format(field="runId")
    assert (status, error["field"], error["message"]) == (400, "/runId", head + problem)
    assert "{" not in error["message"]
    assert (error["message"] == "Invalid AG-UI RunAgentInput envelope: `runId` is required.") == (language == "en")


@pytest.mark.parametrize("change,field,problem", [
    ({"schemaVersion": 2}, "/forwardedProps/iacCode/schemaVersion", "`schemaVersion` must be 1."),
    ({"runMode": "fast"}, "/forwardedProps/iacCode/runMode", '`runMode` must be one of "normal" | "pipeline".'),
    ({"bogus": 1}, "/forwardedProps/iacCode/bogus", "`bogus` is not a known field."),
    ({"model": 5}, "/forwardedProps/iacCode/model", "`model` must be of JSON type string."),
    ({"thinking": {"budget": 0}}, "/forwardedProps/iacCode/thinking/budget", "`thinking.budget` must be at least 1."),
    ({"rosInvocationId": "x" * 257}, "/forwardedProps/iacCode/rosInvocationId",
     "`rosInvocationId` must be at most 256 characters long."),
    ({"guidanceId": ""}, "/forwardedProps/iacCode/guidanceId", "`guidanceId` must not be empty."),
    ({"cwd": "/tmp/a\u0000b"}, "/forwardedProps/iacCode/cwd", "`cwd` must not contain control characters."),
])
def test_props_problems_come_from_the_failing_keyword(root, change, field, problem):
    with pytest.raises(errors.AguiError) as caught:
        parse_run_request(with_props(root, **change), [root])
    assert (caught.value.field, english(caught.value)) == (
        field, "Invalid iac-code forwarded properties: " + problem)


@pytest.mark.parametrize("change,field,problem", [
    ({"threadId": "a\nb"}, "/threadId", "`threadId` must not contain control characters."),
    ({"threadId": "t" * 1025}, "/threadId", "`threadId` must be at most 1024 characters long."),
    ({"messages": [{"id": "m", "role": "user", "content": [{"type": "text"}]}]}, "/messages/0/content/0/text",
     "`messages[0].content[0].text` is required."),
    ({"messages": [{"id": "m", "role": "user", "content": 5}]}, "/messages/0/content",
     "`messages[0].content` must be of JSON type string | array."),
    ({"messages": [{"role": "assistant"}, {"id": "m", "role": "user", "content": "x"}]}, "/messages/0/id",
     "`messages[0].id` is required."),
    ({"resume": [{"interruptId": "i", "status": "later"}]}, "/resume/0/status",
     '`resume[0].status` must be one of "resolved" | "cancelled".'),
])
def test_envelope_problems_name_the_nested_field(root, change, field, problem):
    with pytest.raises(errors.AguiError) as caught:
        parse_run_request(make_body(root, **change), [root])
    head = "The resume entries are invalid: " if "resume" in change else "Invalid AG-UI RunAgentInput envelope: "
    assert (caught.value.field, english(caught.value)) == (field, head + problem)


def test_a_long_unknown_key_is_cut_in_the_message_and_the_pointer(root):
    with pytest.raises(errors.AguiError) as caught:
        parse_run_request(with_props(root, **{"k" * 5000: 1}), [root])
    assert len(english(caught.value)) < 200 and len(caught.value.field) < 120


# Draft 2020-12 keywords that can fail a validation.  ``pattern`` is exempt: the request schemas use it only
# inside ``not``, which fails as a whole (``not`` is in the table).
VALIDATION = {"type", "enum", "const", "required", "additionalProperties", "minLength", "maxLength", "minimum",
              "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "minItems", "maxItems", "uniqueItems",
              "minProperties", "maxProperties", "not", "oneOf", "anyOf", "allOf", "contains", "propertyNames",
              "dependentRequired", "dependentSchemas", "prefixItems", "unevaluatedProperties", "unevaluatedItems"}


def _keywords(schema, found):
    if isinstance(schema, dict):
        found.update(key for key in schema if key in VALIDATION)
        for key, value in schema.items():
            if key == "properties":
                for sub in value.values():
                    _keywords(sub, found)
            else:
                _keywords(value, found)
    elif isinstance(schema, list):
        for value in schema:
            _keywords(value, found)
    return found


def test_every_failing_keyword_of_the_request_schemas_has_a_problem():
    used = set()
    for name in os.listdir(SCHEMAS):
        with open(os.path.join(SCHEMAS, name), encoding="utf-8") as handle:
            used |= _keywords(json.load(handle), set())
    assert "required" in used and used <= set(PROBLEMS), used - set(PROBLEMS)


# ---- cwd ---------------------------------------------------------------------------------------------------

def test_cwd_outside_the_roots_names_the_setting_and_the_log_names_the_roots(client, workspace, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="iaccode_agui.workspace")
    outside = str(tmp_path)
    status, error = refusal(client, iac_body(workspace, cwd=outside))
    assert (status, error["field"]) == (400, "/forwardedProps/iacCode/cwd")
    assert "IAC_CODE_AGUI_ALLOWED_CWDS" in error["message"] and workspace not in error["message"]
    logged = [r.getMessage() for r in caplog.records if r.name == "iaccode_agui.workspace"]
    assert any(workspace in line and os.path.realpath(outside) in line for line in logged), logged


def test_a_created_workspace_is_announced_in_the_session_event(adapter, caplog):
    caplog.set_level(logging.INFO, logger="iaccode_agui.workspace")
    typo = os.path.join(adapter.workspace, "projcet")
    created = session_of(adapter.run(adapter.body("hi", thread="new-ws", cwd=typo)))
    assert created["workspaceCreated"] is True and os.path.isdir(typo)
    assert any("created workspace " + typo in r.getMessage() for r in caplog.records)
    again = session_of(adapter.run(adapter.body("again", thread="new-ws", cwd=typo)))
    assert "workspaceCreated" not in again
    existing = session_of(adapter.run(adapter.body("hi", thread="old-ws")))
    assert "workspaceCreated" not in existing


# ---- resume -------------------------------------------------------------------------------------------------

def test_resume_errors_say_what_to_send(adapter):
    interrupt = interrupt_of(adapter.run(adapter.body("write", thread="r1", ros="inv")))
    iid = interrupt["id"]
    unknown = adapter.run(adapter.body(None, thread="r1", ros="inv", resume=[
        {"interruptId": "nope", "status": "resolved", "payload": {"decision": "deny"}}]))[-1]
    assert (unknown["code"], unknown["message"]) == (
        "UNKNOWN_INTERRUPT", "The resume references an unknown interrupt; the pending interrupts are `%s`." % iid)
    bad = adapter.run(adapter.body(None, thread="r1", ros="inv", resume=[
        {"interruptId": iid, "status": "resolved", "payload": {"decision": "yes please"}}]))[-1]
    assert (bad["code"], bad["message"]) == (
        "RESUME_PAYLOAD_INVALID", 'The interrupt response payload is invalid: interrupt `%s` accepts '
                                  '{"decision": "allow_once" | "deny"}.' % iid)
    french = adapter.run(adapter.body(None, thread="r1", ros="inv", preferredLanguage="fr", resume=[
        {"interruptId": "nope", "status": "resolved", "payload": {"decision": "deny"}}]))[-1]
    assert french["message"] == "La reprise fait référence à une interruption inconnue ; les interruptions en " \
                                "attente sont `%s`." % iid


def test_a_resume_with_nothing_pending_says_so(adapter):
    assert adapter.run(adapter.body("hi", thread="done", ros="inv"))[-1]["type"] == "RUN_FINISHED"
    answer = adapter.run(adapter.body(None, thread="done", ros="inv", resume=[
        {"interruptId": "old", "status": "resolved", "payload": {"decision": "deny"}}]))[-1]
    assert (answer["type"], answer["code"], answer["message"]) == ("RUN_ERROR", "EXECUTION_LOST",
                                                                   errors.MSG_NOTHING_PENDING)


# ---- the documented table ---------------------------------------------------------------------------------

def test_every_error_code_is_documented_with_its_status():
    with open(DOCS, encoding="utf-8") as handle:
        rows = dict(re.findall(r"^``([A-Z0-9_]+)``\s+(\d{3})\s", handle.read(), re.MULTILINE))
    assert rows == {code: str(status) for code, (status, _) in errors.ERRORS.items()}

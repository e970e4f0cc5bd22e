"""The compiled schema predicates must agree with jsonschema on every document, valid or not.

The predicate decides alone when it says "valid", so one wrong yes would let a bad request through; a
wrong no would only cost time, but ``not`` and ``if`` turn a wrong no into a wrong yes further up.  So
the check is exact agreement, on mutations of real requests (which reach the deep branches) and on
arbitrary JSON.
"""
import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from iaccode_agui.web import inputs
from iaccode_agui.web.jsoncheck import compile_schema

VALIDATORS = {"envelope": inputs._ENVELOPE, "props": inputs._PROPS, "resume": inputs._RESUME,
              "cancel": inputs._CANCEL, "subscribe": inputs._SUBSCRIBE}

_PROPS = {"iacCode": {"schemaVersion": 1, "rosInvocationId": "inv-1", "cwd": "/tmp/w", "model": "m",
                      "llmHeaders": {"x": "y"}, "thinking": {"enabled": True, "effort": "high", "budget": 3},
                      "runMode": "pipeline", "candidatePresentation": "rich", "cleanupOnly": False,
                      "alibabaCloud": {"regionId": "cn-hangzhou"}, "guidanceId": "g", "executionFence": {}}}
_BODY = {"threadId": "t-1", "runId": "r-1", "parentRunId": None, "state": {}, "tools": [], "context": [],
         "messages": [{"id": "m0", "role": "assistant"},
                      {"id": "m1", "role": "user", "content": [{"type": "text", "text": "hi"},
                                                               {"type": "image", "source": {}}]},
                      {"id": "m2", "role": "user", "content": "hello"}],
         "forwardedProps": _PROPS, "resume": [{"interruptId": "i", "status": "resolved", "payload": 1}]}
_RESUME = [{"interruptId": "i-1", "status": "resolved", "payload": {"a": 1}, "metadata": {}},
           {"interruptId": "i-2", "status": "cancelled"}]
BASES = {"envelope": _BODY, "props": _PROPS, "resume": _RESUME, "cancel": {"threadId": "t", "rosInvocationId": "r"},
         "subscribe": {"threadId": "t", "runId": "r", "rosInvocationId": "i", "afterSequence": 3}}

# Values and keys that the schemas care about, so that mutations land on the interesting edges.
_SPECIAL = st.sampled_from([None, True, False, 0, 1, 1.0, 2, 1.5, -1, 2 ** 53 - 1, 2 ** 53, float(2 ** 53), "", "x", "user", "text", "resolved",
                            "cancelled", "rich", "pipeline", "\x00", "a\x1fb", "\x7f", "\u009f", "x" * 257,
                            "x" * 1025, [], {}, [{}], {"type": "text"}, {"role": "user"}])
_KEYS = st.sampled_from(["threadId", "runId", "role", "content", "type", "text", "id", "iacCode", "schemaVersion",
                         "rosInvocationId", "cwd", "budget", "enabled", "interruptId", "status", "payload",
                         "metadata", "unknown", "llmHeaders", "regionId", "rosInvocationId", "force",
                         "afterSequence"])
_JSON = st.recursive(st.none() | st.booleans() | st.integers(-3, 3) | st.floats(allow_nan=False, allow_infinity=False)
                     | st.text(max_size=5) | _SPECIAL,
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_KEYS | st.text(max_size=3), inner,
                                                                                 max_size=3),
                     max_leaves=6)


def _slots(value, out):
    """Every (container, key) in ``value``: where a mutation can land."""
    if isinstance(value, dict):
        for key in list(value):
            out.append((value, key))
            _slots(value[key], out)
    elif isinstance(value, list):
        for index in range(len(value)):
            out.append((value, index))
            _slots(value[index], out)
    return out


def _mutate(doc, ops):
    doc = copy.deepcopy(doc)
    for where, action, key, value in ops:
        value = copy.deepcopy(value)     # strategies hand out shared objects: never insert one twice
        slots = _slots(doc, [])
        if not slots:
            return value
        container, slot = slots[where % len(slots)]
        if action == "set":
            container[slot] = value
        elif action == "delete":
            del container[slot]
        elif isinstance(container[slot], dict):
            container[slot][key] = value
        elif isinstance(container[slot], list):
            container[slot].append(value)
    return doc


_OPS = st.lists(st.tuples(st.integers(0, 200), st.sampled_from(["set", "delete", "add"]), _KEYS, _JSON),
                min_size=1, max_size=3)


@pytest.mark.parametrize("name", sorted(VALIDATORS))
def test_the_unmutated_requests_are_valid_both_ways(name):
    validator = VALIDATORS[name]
    assert validator.accepts(BASES[name]) and validator.full.is_valid(BASES[name])


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(VALIDATORS))
@settings(max_examples=400, deadline=None)
@given(ops=_OPS)
def test_compiled_agrees_with_jsonschema_on_mutated_requests(name, ops):
    validator = VALIDATORS[name]
    doc = _mutate(BASES[name], ops)
    assert validator.accepts(doc) == validator.full.is_valid(doc), doc


@pytest.mark.parametrize("name", sorted(VALIDATORS))
@settings(max_examples=150, deadline=None)
@given(doc=_JSON)
def test_compiled_agrees_with_jsonschema_on_any_json(name, doc):
    validator = VALIDATORS[name]
    assert validator.accepts(doc) == validator.full.is_valid(doc), doc


@pytest.mark.parametrize("value, valid", [(1, True), (1.0, True), (True, False), ("1", False), (2, False)])
def test_integer_const_follows_json_equality(value, valid):
    props = copy.deepcopy(_PROPS)
    props["iacCode"]["schemaVersion"] = value
    assert inputs._PROPS.accepts(props) is valid
    assert inputs._PROPS.full.is_valid(props) is valid


@pytest.mark.parametrize("schema", [{"format": "email"}, {"patternProperties": {}}, {"oneOf": [True]},
                                    {"$ref": "https://example.com/s"}, {"enum": [[1]]}, {"type": "whatever"},
                                    {"then": True}])
def test_keywords_without_a_compiled_form_refuse_to_compile(schema):
    with pytest.raises((ValueError, KeyError)):
        compile_schema(schema)

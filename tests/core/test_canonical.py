"""The shared JSON normalisations: one spelling for digests, whole floats back to ints."""
import json

import pytest

from iaccode_agui.canonical import canonical_json, coerce_numbers


@pytest.mark.parametrize("raw, expected", [
    (1.0, 1), (102.0, 102), (-3.0, -3), (1.5, 1.5), (True, True), (False, False), ("1.0", "1.0"), (None, None),
    ({"a": 2.0, "b": [1.0, {"c": 0.0}]}, {"a": 2, "b": [1, {"c": 0}]}),
    ({"a": 1.0, "b": [2.5, 3.0], "c": True}, {"a": 1, "b": [2.5, 3], "c": True}),
])
def test_coerce_numbers(raw, expected):
    result = coerce_numbers(raw)
    assert result == expected
    assert json.dumps(result) == json.dumps(expected)


def test_coerce_numbers_leaves_nan_and_infinity():
    assert coerce_numbers(float("inf")) == float("inf")
    nan = coerce_numbers(float("nan"))
    assert nan != nan


def test_canonical_json_ignores_key_order_and_keeps_non_ascii():
    assert canonical_json({"b": 1, "a": "Zürich"}) == canonical_json({"a": "Zürich", "b": 1}) == '{"a":"Zürich","b":1}'

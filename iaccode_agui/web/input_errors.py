"""The one shape of an input refusal: ``INVALID_INPUT`` whose message names the field and the problem, with the
JSON pointer of that field (``AguiError.field``).

A schema failure is described from what jsonschema reports (the path and the keyword that failed), never from
the validator's own text (it can echo secrets); a table maps each keyword to one problem template, so every
field of every schema is covered by a handful of translated sentences.
"""
import json
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from iaccode_agui import errors
from iaccode_agui.errors import AguiError, Text

Problem = Tuple[str, Dict[str, Any]]     # a problem template (``errors.MSG_FIELD_*``) and its parameters
MAX_KEY_SHOWN = 64                      # a longer key is cut in messages and pointers (it is client text)

# A field named under one of these heads is shown relative to the object the head is about.
_BASES: Dict[str, Tuple[str, ...]] = {errors.MSG_INVALID_PROPS: ("forwardedProps", "iacCode")}


def _key(part: Any) -> str:
    text = str(part)
    return text if len(text) <= MAX_KEY_SHOWN else text[:MAX_KEY_SHOWN] + "…"


def json_pointer(parts: Sequence[Any]) -> str:
    return "".join("/" + _key(part).replace("~", "~0").replace("/", "~1") for part in parts)


def field_name(parts: Sequence[Any], base: Sequence[Any] = ()) -> str:
    """How a message names a field (``messages[2].content``), relative to ``base`` when inside it."""
    if len(parts) > len(base) and tuple(parts[:len(base)]) == tuple(base):
        parts = parts[len(base):]
    shown = ""
    for part in parts:
        shown += "[%d]" % part if isinstance(part, int) else ("." if shown else "") + _key(part)
    return shown


def invalid_input(message: str, path: Sequence[Any] = (), params: Optional[Dict[str, Any]] = None,
                  problem: Optional[Problem] = None) -> AguiError:
    """``INVALID_INPUT`` about the field at ``path``; with a ``problem``, ``message`` is a head of
    ``errors.PROBLEM_HEADS`` and the sentence says what is wrong with which field."""
    if problem is not None:
        template, extra = problem
        params = {"problem": Text(template, dict(extra, field=field_name(path, _BASES.get(message, ()))))}
        message = errors.PROBLEM_HEADS[message]
    return AguiError("INVALID_INPUT", message, params=params, field=json_pointer(path))


def wrong_type(expected: str) -> Problem:
    return errors.MSG_FIELD_TYPE, {"expected": expected}


def missing_or_wrong(container: Dict[str, Any], key: str, expected: str) -> Problem:
    """The problem of a member that a hand-written check found absent or of the wrong type."""
    return (errors.MSG_FIELD_REQUIRED, {}) if key not in container else wrong_type(expected)


def _alternatives(values: Any, show: Callable[[Any], str] = str) -> str:
    return " | ".join(show(value) for value in (values if isinstance(values, list) else [values]))


def _as_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


# The keyword that failed -> (its value, the schema holding it) -> the problem.  ``not`` holds only
# control-character patterns in the request schemas; anything the table lacks is "invalid".
PROBLEMS: Dict[str, Callable[[Any, Dict[str, Any]], Problem]] = {
    "required": lambda value, schema: (errors.MSG_FIELD_REQUIRED, {}),
    "additionalProperties": lambda value, schema: (errors.MSG_FIELD_UNKNOWN, {}),
    "type": lambda value, schema: wrong_type(_alternatives(value)),
    "enum": lambda value, schema: (errors.MSG_FIELD_ONE_OF, {"expected": _alternatives(value, _as_json)}),
    "const": lambda value, schema: (errors.MSG_FIELD_EQUALS, {"expected": _as_json(value)}),
    "minLength": lambda value, schema: (errors.MSG_FIELD_EMPTY if value == 1 else errors.MSG_FIELD_INVALID, {}),
    "maxLength": lambda value, schema: (errors.MSG_FIELD_TOO_LONG, {"limit": value}),
    "minimum": lambda value, schema: (errors.MSG_FIELD_TOO_SMALL, {"limit": value}),
    "maximum": lambda value, schema: (errors.MSG_FIELD_TOO_BIG, {"limit": value}),
    "not": lambda value, schema: (errors.MSG_FIELD_CONTROL if set(value) == {"pattern"} else errors.MSG_FIELD_INVALID,
                                  {}),
}


def _offending_key(error: Any) -> Optional[str]:
    """Name the missing or unexpected key, which the schema error's path alone does not show."""
    instance = error.instance
    if not isinstance(instance, dict):
        return None
    if error.validator == "required":
        missing = [key for key in error.validator_value if key not in instance]
        return missing[0] if missing else None
    if error.validator == "additionalProperties" and error.validator_value is False:
        known = error.schema.get("properties", {})
        extra = sorted(key for key in instance if key not in known)
        return extra[0] if extra else None
    return None


def schema_problem(error: Any) -> Tuple[List[Any], Problem]:
    """The path of the field a jsonschema ``error`` is about, and what is wrong with it."""
    path = list(error.absolute_path)
    key = _offending_key(error)
    if key is not None:
        path.append(key)
    describe = PROBLEMS.get(error.validator)
    return path, describe(error.validator_value, error.schema) if describe else (errors.MSG_FIELD_INVALID, {})

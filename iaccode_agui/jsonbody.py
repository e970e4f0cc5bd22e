"""Strict JSON for request bodies: one meaning per document, bounded nesting, finite numbers.

Python's ``json`` accepts things that JSON peers read differently: a repeated key (the last one wins
here, the first one in some other parsers, so a policy check could pass on one copy while another
component acts on the other), ``NaN``/``Infinity`` and numbers like ``1e400`` that become infinities and
could only be re-sent as non-JSON.  It also recurses once per nesting level, so a deep body costs stack
and later makes schema validation recurse too.  The nesting depth is therefore measured on the raw bytes
*before* parsing, with byte operations that run in C (no Python loop per character).
"""
import itertools
import json
import math
import operator
from typing import Any, Dict, List, Tuple

from iaccode_agui import errors
from iaccode_agui.config import DEFAULT_MAX_JSON_DEPTH
from iaccode_agui.errors import AguiError

# Only quotes and brackets matter for the depth; brackets become "(" and ")".
_BRACKETS = bytes.maketrans(b"[{]}", b"(())")
_NOT_STRUCTURE = bytes(code for code in range(256) if code not in b'"[]{}')
_LEAF_PASSES = 4


class _DuplicateKey(ValueError):
    pass


class _NonFinite(ValueError):
    pass


def nesting_depth(raw: bytes) -> int:
    """The deepest bracket nesting of ``raw`` outside string literals (exact for valid JSON).

    Every step is a C-level bytes operation.  Escapes go first (``\\\\`` before ``\\"``, so an escaped
    backslash before a closing quote is read correctly); then only quotes and brackets are kept.  Adjacent
    quotes are dropped (an empty string, or two strings with nothing structural between them, so what lies
    outside strings is unchanged); any quotes left delimit strings that hold brackets, and only the
    even-numbered pieces between them are outside.  A few passes remove empty ``()`` leaves, each lowering
    the depth by exactly one (the deepest containers are always leaves), which shrinks typical bodies to
    almost nothing; on what is left, the depth after the k-th ")" run is the openers so far minus k.
    """
    unescaped = raw.replace(b"\\\\", b"").replace(b'\\"', b"")
    structure = unescaped.translate(None, _NOT_STRUCTURE).replace(b'""', b"")
    if b'"' in structure:
        structure = b"".join(structure.split(b'"')[::2])
    brackets = structure.translate(_BRACKETS)
    removed = 0
    while brackets and removed < _LEAF_PASSES:
        brackets = brackets.replace(b"()", b"")
        removed += 1
    if not brackets:
        return removed
    runs = brackets.split(b")")
    return removed + max(map(operator.sub, itertools.accumulate(map(len, runs)), itertools.count()))


def _unique_object(pairs: List[Tuple[str, Any]]) -> Dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        raise _DuplicateKey()
    return result


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise _NonFinite()
    return value


def _no_constant(name: str) -> Any:
    raise _NonFinite()


def loads(raw: bytes, max_depth: int = DEFAULT_MAX_JSON_DEPTH) -> Any:
    """Parse a request body or raise ``AguiError("INVALID_JSON", ...)`` saying what is wrong with it."""
    if nesting_depth(raw) > max_depth:
        raise AguiError("INVALID_JSON", errors.MSG_JSON_TOO_DEEP, params={"limit": max_depth})
    try:
        text = raw.decode("utf-8")
        return json.loads(text, object_pairs_hook=_unique_object, parse_float=_finite_float,
                          parse_constant=_no_constant)
    except _DuplicateKey:
        raise AguiError("INVALID_JSON", errors.MSG_JSON_DUPLICATE_KEY) from None
    except _NonFinite:
        raise AguiError("INVALID_JSON", errors.MSG_JSON_NOT_FINITE) from None
    except (UnicodeError, ValueError, RecursionError):
        raise AguiError("INVALID_JSON") from None

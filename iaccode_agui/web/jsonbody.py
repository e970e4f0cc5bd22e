"""Strict JSON for request bodies: one meaning per document, bounded nesting, finite numbers.

Python's ``json`` accepts things that JSON peers read differently: a repeated key (the last one wins
here, the first one in some other parsers, so a policy check could pass on one copy while another
component acts on the other), ``NaN``/``Infinity`` and numbers like ``1e400`` that become infinities and
could only be re-sent as non-JSON.  It also recurses once per nesting level, so a deep body costs stack
and later makes schema validation recurse too.  The nesting depth is therefore measured on the raw bytes
*before* parsing, with byte operations that run in C (no Python loop per character).

The same pass counts the values outside string literals (arrays, objects, and the commas and colons
between their parts).  Parsing costs a fraction of a microsecond per value and about a microsecond per
object, so a body made of nothing but brackets (``[[]]`` repeated) or keys takes seconds to parse at the
body size limit; counting first refuses it in milliseconds.  The bound is a count of values, not of
bytes: a large legitimate body (a long text, a base64 image, a long history of ordinary messages) has few
values per megabyte, and what lies inside strings is not counted.
"""
import itertools
import json
import math
import operator
from typing import Any, Dict, List, Tuple

from iaccode_agui import errors
from iaccode_agui.config import DEFAULT_MAX_JSON_VALUES, DEFAULT_MAX_JSON_DEPTH
from iaccode_agui.errors import AguiError

# Only quotes, brackets, commas and colons matter for the depth and the value count; brackets become "(" and ")".
_BRACKETS = bytes.maketrans(b"[{]}", b"(())")
_NOT_STRUCTURE = bytes(code for code in range(256) if code not in b'"[]{},:')
_LEAF_PASSES = 4


class _DuplicateKey(ValueError):
    pass


class _NonFinite(ValueError):
    pass


def nesting_depth(raw: bytes) -> int:
    """The deepest bracket nesting of ``raw`` outside string literals (exact for valid JSON)."""
    return _depth(_outside_strings(raw).translate(None, b",:"))


def value_count(raw: bytes) -> int:
    """Arrays and objects plus the commas and colons between their parts, outside string literals.

    For valid JSON this is at least the number of values and keys the parser builds, give or take the
    first element of each container, so it bounds the parser's work whatever the bytes look like.
    """
    return _count(_outside_strings(raw))


def _count(structure: bytes) -> int:
    return structure.count(b"(") + structure.count(b",") + structure.count(b":")


def _outside_strings(raw: bytes) -> bytes:
    """The brackets, commas and colons of ``raw`` outside string literals, openers as "(", closers as ")".

    Every step is a C-level bytes operation.  Escapes go first (``\\\\`` before ``\\"``, so an escaped
    backslash before a closing quote is read correctly); then only quotes and structural characters are
    kept.  Adjacent quotes are dropped (an empty string, or two strings with nothing structural between
    them, so what lies outside strings is unchanged); any quotes left delimit strings that hold structural
    characters, and only the even-numbered pieces between them are outside.
    """
    unescaped = raw.replace(b"\\\\", b"").replace(b'\\"', b"")
    structure = unescaped.translate(None, _NOT_STRUCTURE).replace(b'""', b"")
    if b'"' in structure:
        structure = b"".join(structure.split(b'"')[::2])
    return structure.translate(_BRACKETS)


def _depth(brackets: bytes) -> int:
    """Nesting depth of a "(" / ")" string.

    A few passes remove empty ``()`` leaves, each lowering the depth by exactly one (the deepest containers
    are always leaves), which shrinks typical bodies to almost nothing; on what is left, the depth after
    the k-th ")" run is the openers so far minus k.
    """
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


def loads(raw: bytes, max_depth: int = DEFAULT_MAX_JSON_DEPTH,
          max_values: int = DEFAULT_MAX_JSON_VALUES) -> Any:
    """Parse a request body or raise ``AguiError`` saying what is wrong with it.

    ``INVALID_JSON`` (400) for what is not strict JSON or nests too deep; ``REQUEST_TOO_LARGE`` (413) for
    more values than ``max_values`` (see ``value_count``), refused before anything is parsed.
    """
    structure = _outside_strings(raw)
    if _count(structure) > max_values:      # first: it is the cheap answer to a flood of tiny values
        raise AguiError("REQUEST_TOO_LARGE", errors.MSG_JSON_TOO_MANY_VALUES, params={"limit": max_values})
    if _depth(structure.translate(None, b",:")) > max_depth:
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

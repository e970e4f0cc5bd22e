"""The two JSON normalisations every layer must agree on (pure).

A digest, a deduplication key or a tool-argument string is only stable if the JSON behind it is written
the same way everywhere, and numbers that crossed protobuf ``Struct`` (every number a double) compare
equal to the integers the runtime meant.  Both rules live here so no module grows a variant.
"""
import json
from typing import Any


def canonical_json(value: Any) -> str:
    """Sorted keys, no whitespace, non-ASCII kept as is: the one spelling digests are taken over."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def encoded_size(value: Any) -> int:
    """Bytes of ``value`` as compact JSON in UTF-8, the way events and stored documents are written."""
    return len(_COMPACT(value).encode("utf-8", "surrogatepass"))


_COMPACT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def coerce_numbers(value: Any) -> Any:
    """Whole floats back to ints, recursively (``1.0`` from a protobuf Struct means 1); booleans untouched."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {key: coerce_numbers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [coerce_numbers(item) for item in value]
    return value

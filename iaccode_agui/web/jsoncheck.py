"""The JSON Schema keywords the request schemas use, compiled once into plain Python predicates.

Every run request is validated against the envelope and the forwarded-props schemas before admission, on
the way to the client's first byte; a general validator spends a few hundred microseconds there walking
the schema.  A predicate compiled from the same schema answers the common question, "is this valid?",
in a few microseconds.  The general validator stays for what it does best: when the predicate says no,
it finds the error to report, so the messages never change.

The predicate must agree exactly with Draft 2020-12 (``not`` and ``if`` flip a wrong answer into a wrong
acceptance), so only the keywords below compile, each with the specification's meaning (``integer``
includes 2.0, ``true`` is not 1), and any other keyword refuses to compile rather than being ignored.
"""
import re
from typing import Any, Callable, Dict, List, Optional

Check = Callable[[Any], bool]

# Keywords with no effect on validity (annotations, and $defs, which only holds targets of $ref).
_ANNOTATIONS = frozenset({"$schema", "$id", "$comment", "$defs", "title", "description", "examples", "default"})

_TYPES: Dict[str, Check] = {
    "array": lambda v: isinstance(v, list),
    "boolean": lambda v: isinstance(v, bool),
    "integer": lambda v: (isinstance(v, int) and not isinstance(v, bool)) or (isinstance(v, float) and v.is_integer()),
    "null": lambda v: v is None,
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "object": lambda v: isinstance(v, dict),
    "string": lambda v: isinstance(v, str),
}


class SchemaCompiler:
    """Compiles one schema document; ``$ref`` targets (``#/$defs/<name>``) compile once, on first use."""

    def __init__(self, root: Any) -> None:
        self.root = root
        self._refs: Dict[str, Check] = {}

    def compile(self, schema: Any) -> Check:
        if schema is True:
            return lambda value: True
        if schema is False:
            return lambda value: False
        if not isinstance(schema, dict):
            raise ValueError("not a schema: %r" % (schema,))
        unknown = set(schema) - _ANNOTATIONS - set(_KEYWORDS)
        if unknown:
            raise ValueError("keywords without a compiled form: %s" % ", ".join(sorted(unknown)))
        checks = [_KEYWORDS[key](self, schema) for key in _KEYWORD_ORDER if key in schema]
        return _all_of([check for check in checks if check is not None])

    def ref(self, target: str) -> Check:
        if not target.startswith("#/$defs/") or "/" in target[len("#/$defs/"):]:
            raise ValueError("only local #/$defs/<name> references compile: %r" % target)
        if target not in self._refs:
            self._refs[target] = lambda value: False   # a placeholder while compiling (recursion)
            compiled = self.compile(self.root["$defs"][target[len("#/$defs/"):]])
            self._refs[target] = compiled
        refs = self._refs
        return lambda value: refs[target](value)


def _all_of(checks: List[Check]) -> Check:
    """The conjunction, without a generator per call (these run once per keyword per request)."""
    if not checks:
        return lambda value: True
    if len(checks) == 1:
        return checks[0]
    if len(checks) == 2:
        first, second = checks
        return lambda value: first(value) and second(value)

    def check(value: Any) -> bool:
        for one in checks:
            if not one(value):
                return False
        return True
    return check


# Types that one isinstance() decides (bool is an int in Python, but no name here admits int).
_PLAIN_TYPES = {"array": list, "boolean": bool, "object": dict, "string": str}


def _type(c: SchemaCompiler, schema: Dict[str, Any]) -> Check:
    names = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
    unknown = [name for name in names if name not in _TYPES]
    if unknown:
        raise ValueError("unknown type %r" % unknown[0])
    if all(name in _PLAIN_TYPES or name == "null" for name in names):
        classes = tuple(_PLAIN_TYPES[name] for name in names if name != "null")
        if "null" in names:
            return lambda value: value is None or isinstance(value, classes)
        return lambda value: isinstance(value, classes)
    tests = [_TYPES[name] for name in names]
    return lambda value: any(test(value) for test in tests)


def _properties(c: SchemaCompiler, schema: Dict[str, Any]) -> Check:
    props = {key: c.compile(sub) for key, sub in schema["properties"].items()}
    get = props.get

    def check(value: Any) -> bool:
        if not isinstance(value, dict):
            return True
        for key, item in value.items():       # requests name few of the known keys: walk theirs
            sub = get(key)
            if sub is not None and not sub(item):
                return False
        return True
    return check


def _additional(c: SchemaCompiler, schema: Dict[str, Any]) -> Check:
    if "patternProperties" in schema:
        raise ValueError("patternProperties does not compile")
    known = frozenset(schema.get("properties", ()))
    sub = c.compile(schema["additionalProperties"])

    def check(value: Any) -> bool:
        if not isinstance(value, dict):
            return True
        for key, item in value.items():
            if key not in known and not sub(item):
                return False
        return True
    return check


def _required(c: SchemaCompiler, schema: Dict[str, Any]) -> Check:
    keys = list(schema["required"])
    return lambda value: not isinstance(value, dict) or all(key in value for key in keys)


def _items(c: SchemaCompiler, schema: Dict[str, Any]) -> Check:
    if "prefixItems" in schema:
        raise ValueError("prefixItems does not compile")
    sub = c.compile(schema["items"])

    def check(value: Any) -> bool:
        if not isinstance(value, list):
            return True
        for item in value:
            if not sub(item):
                return False
        return True
    return check


def _min_length(c: SchemaCompiler, schema: Dict[str, Any]) -> Check:
    limit = schema["minLength"]
    return lambda value: not isinstance(value, str) or len(value) >= limit


def _max_length(c: SchemaCompiler, schema: Dict[str, Any]) -> Check:
    limit = schema["maxLength"]
    return lambda value: not isinstance(value, str) or len(value) <= limit


def _pattern(c: SchemaCompiler, schema: Dict[str, Any]) -> Check:
    search = re.compile(schema["pattern"]).search
    return lambda value: not isinstance(value, str) or search(value) is not None


def _minimum(c: SchemaCompiler, schema: Dict[str, Any]) -> Check:
    limit = schema["minimum"]
    number = _TYPES["number"]
    return lambda value: not number(value) or value >= limit


def _maximum(c: SchemaCompiler, schema: Dict[str, Any]) -> Check:
    limit = schema["maximum"]
    number = _TYPES["number"]
    return lambda value: not number(value) or value <= limit


def _not(c: SchemaCompiler, schema: Dict[str, Any]) -> Check:
    sub = c.compile(schema["not"])
    return lambda value: not sub(value)


def _equals(expected: Any) -> Check:
    """JSON equality as the specification has it for the scalars a schema here may name."""
    if isinstance(expected, str):
        return lambda value: isinstance(value, str) and value == expected
    if expected is None:
        return lambda value: value is None
    if isinstance(expected, bool):
        return lambda value: value is expected
    if isinstance(expected, (int, float)):
        return lambda value: isinstance(value, (int, float)) and not isinstance(value, bool) and value == expected
    raise ValueError("only scalar const/enum values compile: %r" % (expected,))


def _const(c: SchemaCompiler, schema: Dict[str, Any]) -> Check:
    return _equals(schema["const"])


def _enum(c: SchemaCompiler, schema: Dict[str, Any]) -> Check:
    tests = [_equals(item) for item in schema["enum"]]
    return lambda value: any(test(value) for test in tests)


def _if(c: SchemaCompiler, schema: Dict[str, Any]) -> Check:
    condition = c.compile(schema["if"])
    then = c.compile(schema.get("then", True))
    otherwise = c.compile(schema.get("else", True))
    return lambda value: then(value) if condition(value) else otherwise(value)


def _ref(c: SchemaCompiler, schema: Dict[str, Any]) -> Check:
    return c.ref(schema["$ref"])


def _part_of_if(c: SchemaCompiler, schema: Dict[str, Any]) -> Optional[Check]:
    if "if" not in schema:
        raise ValueError("then/else without if")
    return None     # compiled together with ``if``


_KEYWORDS: Dict[str, Callable[[SchemaCompiler, Dict[str, Any]], Optional[Check]]] = {
    "type": _type, "required": _required, "properties": _properties, "additionalProperties": _additional,
    "items": _items, "minLength": _min_length, "maxLength": _max_length, "pattern": _pattern,
    "minimum": _minimum, "maximum": _maximum, "not": _not, "const": _const, "enum": _enum, "if": _if, "then": _part_of_if,
    "else": _part_of_if, "$ref": _ref,
}
# Cheap checks first: a wrong type fails before any walk into the members.
_KEYWORD_ORDER: List[str] = ["type", "const", "enum", "required", "minLength", "maxLength", "minimum", "maximum",
                             "pattern", "$ref", "properties", "additionalProperties", "items", "not", "if", "then",
                             "else"]


def compile_schema(schema: Any, root: Any = None) -> Check:
    """A predicate that is True exactly when ``schema`` (part of document ``root``) accepts the value."""
    return SchemaCompiler(schema if root is None else root).compile(schema)

"""Keep ``iaccode_agui`` importable on Python 3.9, checked from whatever newer interpreter runs the tests.

On-prem hosts run older interpreters, but development happens on newer ones, where 3.10+ syntax and
stdlib names work silently.  ``ast.parse(..., feature_version=(3, 9))`` catches the grammar (``match``,
``except*``, PEP 695); the walk below catches what parses fine but fails on 3.9 at import or call time:
stdlib names added later, ``X | Y`` evaluated as a type, 3.10+ keyword arguments, and imports outside the
stdlib and the four declared dependencies.  It is a denylist of the likely mistakes, not a proof; the
tests also compile the package with a real 3.9 interpreter when one is installed.

Usage: ``python tools/check_py39.py [PATH ...]`` (default: the ``iaccode_agui`` package); exit 1 on findings.
"""
import argparse
import ast
import glob
import io
import os
import shutil
import subprocess
import sys
import tokenize
from typing import Dict, Iterator, List, NamedTuple, Optional, Sequence, Set, Tuple

TARGET = (3, 9)
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_PATHS = (os.path.join(REPO, "iaccode_agui"),)

DECLARED_DEPENDENCIES = frozenset({"werkzeug", "requests", "jsonschema", "waitress"})
# Not declared but always installed with a declared one; a2a/call.py catches urllib3's read errors, which
# requests lets through on raw body reads.
TRANSITIVE_DEPENDENCIES = frozenset({"urllib3"})
FIRST_PARTY = frozenset({"iaccode_agui"})

# Modules that do not exist on 3.9 (the version that added them).
NEW_MODULES: Dict[str, str] = {"tomllib": "3.11", "wsgiref.types": "3.11", "_typeshed": "never at run time"}

# module -> {name: version}: attributes and ``from`` imports that 3.9's stdlib lacks.
NEW_NAMES: Dict[str, Dict[str, str]] = {
    "typing": {},
    "datetime": {"UTC": "3.11"},
    "enum": {"StrEnum": "3.11", "ReprEnum": "3.11", "verify": "3.11", "member": "3.11", "nonmember": "3.11",
             "global_enum": "3.11", "EnumCheck": "3.11", "FlagBoundary": "3.11"},
    "itertools": {"pairwise": "3.10", "batched": "3.12"},
    "contextlib": {"aclosing": "3.10", "chdir": "3.11"},
    "dataclasses": {"KW_ONLY": "3.10"},
    "asyncio": {"TaskGroup": "3.11", "timeout": "3.11", "timeout_at": "3.11", "Runner": "3.11",
                "Barrier": "3.11"},
    "hashlib": {"file_digest": "3.11"},
    "inspect": {"get_annotations": "3.10", "markcoroutinefunction": "3.12"},
    "math": {"cbrt": "3.11", "exp2": "3.11", "sumprod": "3.12"},
    "operator": {"call": "3.11"},
    "sys": {"orig_argv": "3.10", "stdlib_module_names": "3.10", "exception": "3.11"},
    "os": {"eventfd": "3.10", "splice": "3.10", "login_tty": "3.11"},
    "logging": {"getLevelNamesMapping": "3.11", "getHandlerByName": "3.12"},
    "types": {"EllipsisType": "3.10", "NoneType": "3.10", "NotImplementedType": "3.10", "UnionType": "3.10"},
    "http": {"HTTPMethod": "3.11"},
    "re": {"NOFLAG": "3.11"},
    "queue": {"ShutDown": "3.13"},
    "threading": {"gettrace": "3.10", "getprofile": "3.10"},
}
for _version, _names in (
        ("3.10", ("ParamSpec", "ParamSpecArgs", "ParamSpecKwargs", "Concatenate", "TypeAlias", "TypeGuard",
                  "is_typeddict")),
        ("3.11", ("Self", "Never", "LiteralString", "Required", "NotRequired", "TypeVarTuple", "Unpack",
                  "assert_never", "assert_type", "reveal_type", "dataclass_transform", "get_overloads",
                  "clear_overloads")),
        ("3.12", ("override", "TypeAliasType")),
        ("3.13", ("ReadOnly", "TypeIs", "NoDefault", "get_protocol_members", "is_protocol"))):
    NEW_NAMES["typing"].update(dict.fromkeys(_names, _version))

NEW_BUILTINS: Dict[str, str] = {"aiter": "3.10", "anext": "3.10", "EncodingWarning": "3.10",
                                "ExceptionGroup": "3.11", "BaseExceptionGroup": "3.11"}
# Method names that exist on built-in types only from a later version; rare enough as names of our own.
NEW_METHODS: Dict[str, str] = {"bit_count": "3.10 (int)", "add_note": "3.11 (exceptions)"}

# Keyword arguments that 3.9 rejects: callee name -> {keyword: version}.
NEW_KEYWORDS: Dict[str, Dict[str, str]] = {
    "zip": {"strict": "3.10"},
    "dataclass": {"slots": "3.10", "kw_only": "3.10", "match_args": "3.10", "weakref_slot": "3.11"},
    "field": {"kw_only": "3.10"},
    "make_dataclass": {"slots": "3.10", "kw_only": "3.10", "match_args": "3.10"},
    "bisect": {"key": "3.10"}, "bisect_left": {"key": "3.10"}, "bisect_right": {"key": "3.10"},
    "insort": {"key": "3.10"}, "insort_left": {"key": "3.10"}, "insort_right": {"key": "3.10"},
    "TemporaryDirectory": {"ignore_cleanup_errors": "3.10", "delete": "3.12"},
    "NamedTemporaryFile": {"delete_on_close": "3.12"},
    "Popen": {"pipesize": "3.10", "process_group": "3.11"},
    "glob": {"include_hidden": "3.11"},
    "rmtree": {"onexc": "3.12"},
}

# A name that, in ``A | B``, is almost certainly a type rather than an integer or a set.
TYPE_NAMES = frozenset({"int", "str", "bytes", "float", "bool", "list", "dict", "tuple", "set", "frozenset",
                        "type", "object", "complex", "bytearray", "memoryview", "Any", "List", "Dict", "Tuple",
                        "Set", "FrozenSet", "Optional", "Union", "Callable", "Iterable", "Iterator", "Sequence",
                        "Mapping", "Type"})


class Finding(NamedTuple):
    path: str
    line: int
    message: str

    def __str__(self) -> str:
        return "%s:%d: %s" % (self.path, self.line, self.message)


def stdlib_modules() -> Set[str]:
    """Top-level stdlib module names (3.10+ knows them; on 3.9 fall back to what the stdlib dir holds)."""
    names = getattr(sys, "stdlib_module_names", None)
    if names:
        return set(names)
    import sysconfig
    stdlib = sysconfig.get_paths()["stdlib"]
    found = set(sys.builtin_module_names)
    for entry in os.listdir(stdlib):
        base = entry.split(".", 1)[0]
        if entry.endswith(".py") or os.path.isdir(os.path.join(stdlib, entry)):
            found.add(base)
    dynload = os.path.join(stdlib, "lib-dynload")
    if os.path.isdir(dynload):
        found.update(entry.split(".", 1)[0] for entry in os.listdir(dynload))
    return found


def default_allowed_imports() -> Set[str]:
    return stdlib_modules() | DECLARED_DEPENDENCIES | TRANSITIVE_DEPENDENCIES | FIRST_PARTY | {"__future__"}


class _Checker(ast.NodeVisitor):
    def __init__(self, path: str, tree: ast.Module, source: str, allowed_imports: Set[str]) -> None:
        self.path = path
        self.source = source
        self.allowed_imports = allowed_imports
        self.findings: List[Finding] = []
        self.postponed = any(isinstance(node, ast.ImportFrom) and node.module == "__future__"
                             and any(alias.name == "annotations" for alias in node.names) for node in tree.body)
        # local alias -> module for ``import typing as t`` / ``import datetime``
        self.module_aliases: Dict[str, str] = {}
        self.function_depth = 0

    def add(self, node: ast.AST, message: str) -> None:
        self.findings.append(Finding(self.path, getattr(node, "lineno", 0), message))

    # ---- imports ------------------------------------------------------------------------------
    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._check_module(node, alias.name)
            self.module_aliases[alias.asname or alias.name.split(".")[0]] = \
                alias.name if alias.asname else alias.name.split(".")[0]
        self.generic_visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level == 0 and node.module:
            self._check_module(node, node.module)
            added = NEW_NAMES.get(node.module, {})
            for alias in node.names:
                if alias.name in added:
                    self.add(node, "%s.%s is new in Python %s" % (node.module, alias.name, added[alias.name]))
                full = "%s.%s" % (node.module, alias.name)
                if full in NEW_MODULES:
                    self.add(node, "module %s is new in Python %s" % (full, NEW_MODULES[full]))
        self.generic_visit(node)

    def _check_module(self, node: ast.AST, module: str) -> None:
        if module in NEW_MODULES:
            self.add(node, "module %s is new in Python %s" % (module, NEW_MODULES[module]))
        top = module.split(".")[0]
        if top not in self.allowed_imports:
            self.add(node, "import of %s: not the stdlib and not a declared dependency (%s)"
                     % (module, ", ".join(sorted(DECLARED_DEPENDENCIES))))

    # ---- names and attributes ------------------------------------------------------------------
    def visit_Attribute(self, node: ast.Attribute) -> None:
        if isinstance(node.value, ast.Name):
            module = self.module_aliases.get(node.value.id)
            added = NEW_NAMES.get(module or "", {})
            if node.attr in added:
                self.add(node, "%s.%s is new in Python %s" % (module, node.attr, added[node.attr]))
        if node.attr in NEW_METHODS and isinstance(node.ctx, ast.Load):
            self.add(node, ".%s() is new in Python %s" % (node.attr, NEW_METHODS[node.attr]))
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in NEW_BUILTINS and isinstance(node.ctx, ast.Load):
            self.add(node, "builtin %s is new in Python %s" % (node.id, NEW_BUILTINS[node.id]))

    def visit_Call(self, node: ast.Call) -> None:
        callee = node.func.id if isinstance(node.func, ast.Name) else \
            node.func.attr if isinstance(node.func, ast.Attribute) else None
        added = NEW_KEYWORDS.get(callee or "", {})
        for keyword in node.keywords:
            if keyword.arg in added:
                self.add(node, "%s(%s=...) is new in Python %s" % (callee, keyword.arg, added[keyword.arg]))
        if callee in ("isinstance", "issubclass") and len(node.args) == 2 and _is_union(node.args[1]):
            self.add(node, "%s() with an X | Y union needs Python 3.10" % callee)
        self.generic_visit(node)

    # ---- annotations evaluated at run time ----------------------------------------------------
    def _check_annotation(self, annotation: Optional[ast.AST]) -> None:
        if annotation is None or self.postponed:
            return
        for node in ast.walk(annotation):
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
                self.add(node, "X | Y in an annotation is evaluated on import and needs Python 3.10 "
                               "(use typing.Optional/Union)")
                return

    def _visit_function(self, node: ast.AST) -> None:
        args = node.args  # type: ignore[attr-defined]
        for arg in args.posonlyargs + args.args + args.kwonlyargs + [args.vararg, args.kwarg]:
            if arg is not None:
                self._check_annotation(arg.annotation)
        self._check_annotation(node.returns)  # type: ignore[attr-defined]
        self.function_depth += 1
        self.generic_visit(node)
        self.function_depth -= 1

    visit_FunctionDef = _visit_function
    visit_AsyncFunctionDef = _visit_function

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        # Annotations of local variables are never evaluated; module and class level ones are.
        if self.function_depth == 0:
            self._check_annotation(node.annotation)
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        if self.function_depth == 0 and _is_union(node.value):
            self.add(node, "a type alias built with X | Y needs Python 3.10")
        self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        index = node.slice
        elements = index.elts if isinstance(index, ast.Tuple) else [index]
        if any(isinstance(element, ast.Starred) for element in elements):
            self.add(node, "a starred expression in a subscript (x[*a]) needs Python 3.11")
        self.generic_visit(node)


def _is_union(node: ast.AST) -> bool:
    """``A | B`` whose operands look like types (None, a builtin or typing name, a subscripted generic)."""
    if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr)):
        return False

    def typish(operand: ast.AST) -> bool:
        if isinstance(operand, ast.Constant) and operand.value is None:
            return True
        if isinstance(operand, ast.Name):
            return operand.id in TYPE_NAMES
        if isinstance(operand, ast.Attribute):
            return operand.attr in TYPE_NAMES
        if isinstance(operand, ast.Subscript):
            return typish(operand.value)
        return _is_union(operand)

    return typish(node.left) or typish(node.right)


def _fstring_quote_reuse(source: str, path: str) -> List[Finding]:
    """Python 3.12 (PEP 701) lets an f-string reuse its own quote inside ``{}``; 3.9 ends the string there.

    Only a 3.12+ tokenizer can read such code at all (older ones fail in ``ast.parse`` already), and only
    it reports f-strings as FSTRING_START/END tokens, so this runs on 3.12+ only.
    """
    start_type = getattr(tokenize, "FSTRING_START", None)
    if start_type is None:
        return []
    findings = []
    quotes: List[str] = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        text = token.string.lstrip("rRbBfFuUtT")
        if token.type in (tokenize.STRING, start_type) and any(quote in text for quote in quotes):
            findings.append(Finding(path, token.start[0],
                                    "an f-string that reuses its quote inside {} needs Python 3.12"))
        if token.type == start_type:
            quotes.append(text)
        elif token.type == tokenize.FSTRING_END:  # type: ignore[attr-defined]
            quotes.pop()
    return findings


def check_source(source: str, path: str = "<string>", allowed_imports: Optional[Set[str]] = None) -> List[Finding]:
    """Every 3.9 incompatibility found in one module's source."""
    try:
        tree = ast.parse(source, filename=path, feature_version=TARGET)
    except SyntaxError as exc:
        return [Finding(path, exc.lineno or 0, "not Python 3.9 syntax: %s" % exc.msg)]
    if allowed_imports is None:
        allowed_imports = default_allowed_imports()
    checker = _Checker(path, tree, source, allowed_imports)
    checker.visit(tree)
    return checker.findings + _fstring_quote_reuse(source, path)


def python_files(paths: Sequence[str]) -> Iterator[str]:
    for path in paths:
        if os.path.isfile(path):
            yield path
            continue
        for root, dirs, files in os.walk(path):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                if name.endswith(".py"):
                    yield os.path.join(root, name)


def check_paths(paths: Sequence[str] = DEFAULT_PATHS) -> Tuple[int, List[Finding]]:
    """(number of files checked, findings) for every ``.py`` file under ``paths``."""
    allowed = default_allowed_imports()
    findings: List[Finding] = []
    count = 0
    for path in python_files(paths):
        count += 1
        with open(path, encoding="utf-8") as handle:
            source = handle.read()
        findings.extend(check_source(source, os.path.relpath(path, REPO), allowed))
    return count, findings


def find_python39() -> Optional[str]:
    """A working CPython 3.9 interpreter, if this machine has one (``IACCODE_AGUI_PYTHON39`` wins)."""
    candidates = [os.environ.get("IACCODE_AGUI_PYTHON39", ""), shutil.which("python3.9") or ""]
    roots = [os.environ.get("PYENV_ROOT", ""), os.path.expanduser("~/.pyenv")]
    for root in filter(None, roots):
        candidates.extend(sorted(glob.glob(os.path.join(root, "versions", "3.9*", "bin", "python3.9")), reverse=True))
    for candidate in filter(None, candidates):
        try:
            probe = subprocess.run([candidate, "-c", "import sys, venv; print('%d.%d' % sys.version_info[:2])"],
                                   capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            continue
        if probe.returncode == 0 and probe.stdout.strip() == "3.9":
            return candidate
    return None


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description="Check that the package stays Python 3.9 compatible.")
    parser.add_argument("paths", nargs="*", default=list(DEFAULT_PATHS), help="files or directories to check")
    args = parser.parse_args(argv)
    count, findings = check_paths(args.paths)
    for finding in findings:
        print(finding)
    print("%d file(s) checked, %d Python 3.9 problem(s)" % (count, len(findings)))
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())

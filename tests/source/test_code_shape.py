"""The shape the design asks of the code, checked so that it stays that way.

Short functions, short modules and low branching keep each rule readable on its own; the pure core (``projection/``)
stays testable with lists of dicts only while it imports nothing that does I/O; and the projector's state
changes only through its own methods, so every rule about pending interrupts lives in one module.
"""
import ast
import pathlib
from typing import Dict, Iterator, List, Tuple

import pytest
from radon.complexity import cc_visit

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "iaccode_agui"
CORE = ("runs", "projection", "state", "sse", "runlog")       # the run core: the strictest limit
CORE_COMPLEXITY = 15
OTHER_COMPLEXITY = 20
MAX_FUNCTION_LINES = 60
MAX_MODULE_LINES = 500

# Modules a pure projection must never import: network, files, processes, threads, the shell layers.
IO_MODULES = frozenset({
    "socket", "ssl", "select", "selectors", "asyncio", "http", "urllib", "requests", "werkzeug", "waitress",
    "subprocess", "os", "shutil", "tempfile", "pathlib", "io", "threading", "multiprocessing", "logging",
    "iaccode_agui.runs", "iaccode_agui.runlog", "iaccode_agui.sse", "iaccode_agui.a2a.client", "iaccode_agui.a2a.call",
    "iaccode_agui.state.store", "iaccode_agui.web", "iaccode_agui.server", "iaccode_agui.client", "iaccode_agui.demo",
})
PROJECTOR_MUTATORS = frozenset({"clear", "update", "pop", "popitem", "add", "discard", "append", "extend",
                                "remove", "setdefault", "insert"})


def modules(under: pathlib.Path = PACKAGE) -> Iterator[pathlib.Path]:
    return iter(sorted(under.rglob("*.py")))


def relative(path: pathlib.Path) -> str:
    return path.relative_to(PACKAGE).as_posix()


def test_cyclomatic_complexity_stays_within_the_limits():
    over: List[Tuple[str, str, int, int]] = []
    for path in modules():
        limit = CORE_COMPLEXITY if relative(path).split("/")[0] in CORE else OTHER_COMPLEXITY
        for block in cc_visit(path.read_text(encoding="utf-8")):
            if block.complexity > limit:
                over.append((relative(path), block.fullname, block.complexity, limit))
    assert not over, "functions over their complexity limit (file, function, complexity, limit): %r" % over


def test_no_function_is_longer_than_sixty_lines():
    long = []
    for path in modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    long.append((relative(path), node.name, length))
    assert not long, "functions over %d lines: %r" % (MAX_FUNCTION_LINES, long)


def test_no_module_is_longer_than_five_hundred_lines():
    # A module past this holds more than one concept: split it along a seam instead of raising the limit.
    long = [(relative(path), n) for path in modules()
            for n in [len(path.read_text(encoding="utf-8").splitlines())] if n > MAX_MODULE_LINES]
    assert not long, "modules over %d lines: %r" % (MAX_MODULE_LINES, long)


def _reaches_projector(node: ast.AST) -> bool:
    """True for ``projector.x``, ``worker.projector.x``, ``self.projector.x.y`` and subscripts of them."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
        if isinstance(node, ast.Attribute) and node.attr == "projector":
            return True
        if isinstance(node, ast.Name) and node.id == "projector":
            return True
    return False


def projector_writes(source: str) -> List[Tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(source)):
        targets: List[ast.AST] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.Delete)):
            targets = list(node.targets) if isinstance(node, ast.Delete) else [node.target]
        for target in targets:
            if isinstance(target, (ast.Attribute, ast.Subscript)) and _reaches_projector(target):
                found.append((node.lineno, ast.dump(target)[:80]))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in PROJECTOR_MUTATORS and _reaches_projector(node.func.value) \
                and isinstance(node.func.value, (ast.Attribute, ast.Subscript)):
            found.append((node.lineno, node.func.attr))
    return found


def test_the_projector_detector_finds_every_kind_of_write():
    # A check that cannot fail is no check: each of these is a write it must see.
    writes = projector_writes("\n".join([
        "worker.projector.pending.clear()", "projector.answering = set()", "self.projector.pending[k]['d'] = 1",
        "projector.spans.text_buffers.clear()", "projector.done += 1", "del worker.projector.pending[k]",
    ]))
    assert sorted(line for line, _ in writes) == [1, 2, 3, 4, 5, 6]
    assert projector_writes("projector.note_in_flight(k, d)\nx = projector.pending\nprojector.drop_pending()") == []


def test_only_the_projection_module_changes_the_projectors_state():
    writers = {}
    for path in modules():
        if relative(path) == "projection/projector.py":
            continue
        found = projector_writes(path.read_text(encoding="utf-8"))
        if found:
            writers[relative(path)] = found
    assert not writers, "projector state written outside projection/projector.py: %r" % writers


def imported_names(source: str) -> List[str]:
    names = []
    for node in ast.walk(ast.parse(source)):       # lazy imports inside functions count too
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


def test_the_projection_imports_nothing_that_does_io():
    offending = {}
    for path in modules(PACKAGE / "projection"):
        bad = [name for name in imported_names(path.read_text(encoding="utf-8"))
               if any(name == io or name.startswith(io + ".") for io in IO_MODULES)]
        if bad:
            offending[relative(path)] = bad
    assert not offending, offending
    assert imported_names("import socket\nfrom iaccode_agui.runs import worker") == ["socket", "iaccode_agui.runs"]


# ---- no private internals of a dependency -------------------------------------------------------------
# A release of a dependency may move what it does not publish (``setup.cfg`` accepts a range of versions).
DEPENDENCIES = ("waitress", "werkzeug", "requests", "urllib3", "jsonschema", "http.client", "socket", "ssl")
# Spelt without an underscore, but waitress's and urllib3's inner workings all the same; and the names of
# every private use the package once made, so a new one is caught by name even where it looks public.
KNOWN_PRIVATE = frozenset({
    "outbuf_lock", "total_outbufs_len", "write_soon", "outbufs", "current_outbuf_count", "_flush_some", "_map",
    "_get_conn", "_put_conn", "_fp", "_sock", "_connection", "_dispatcher", "_sock_shutdown", "_original_response",
})
FORBIDDEN_MODULES = ("ctypes", "_ctypes")
FORBIDDEN_CALLS = frozenset({("gc", "freeze"), ("gc", "unfreeze")})


def _dependency_private_names() -> frozenset:
    """The single-underscore names the dependencies give their objects: methods, class attributes and the
    attributes their code assigns (read from their installed sources, nothing is imported)."""
    import importlib.util

    names = set()
    for top in DEPENDENCIES:
        spec = importlib.util.find_spec(top)
        if spec is None or spec.origin is None:
            continue
        origin = pathlib.Path(spec.origin)
        files = sorted(origin.parent.rglob("*.py")) if origin.name == "__init__.py" else [origin]
        for path in files:
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8", errors="replace"))):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    names.add(node.name)
                elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                    names.add(node.attr)
    return frozenset(name for name in names if name.startswith("_") and not name.startswith("__"))


def _own_names() -> frozenset:
    """Every name the package itself defines (functions, classes, attributes it assigns, parameters)."""
    own = set()
    for path in modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                own.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                own.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                own.add(node.id)
            elif isinstance(node, ast.arg):
                own.add(node.arg)
    return frozenset(own)


def _is_self(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and node.id in ("self", "cls")


def private_uses(source: str, private: frozenset, own: frozenset) -> List[Tuple[int, str]]:
    """Where ``source`` uses ``ctypes``, ``gc.freeze`` or a private attribute of a dependency.

    ``private``: dependency attribute names the package does not define itself (a name it defines, say its
    own ``_lock``, is its own); ``KNOWN_PRIVATE`` names are refused on any object but ``self``.  Also
    refused: a ``_name`` passed to ``getattr``/``hasattr``/``setattr`` that the package never defines, a
    ``_keyword=`` argument (waitress's test shims), and overriding a private method of a dependency class.
    """
    found: List[Tuple[int, str]] = []
    tree = ast.parse(source)
    imported_classes = {alias.asname or alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                        and node.module and node.module.split(".")[0] in {d.split(".")[0] for d in DEPENDENCIES}
                        for alias in node.names}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] in FORBIDDEN_MODULES for a in node.names):
            found.append((node.lineno, "import ctypes"))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in FORBIDDEN_MODULES:
            found.append((node.lineno, "from ctypes"))
        elif isinstance(node, ast.Attribute):
            if isinstance(node.value, ast.Name) and (node.value.id, node.attr) in FORBIDDEN_CALLS:
                found.append((node.lineno, "%s.%s" % (node.value.id, node.attr)))
            elif not _is_self(node.value) and (node.attr in KNOWN_PRIVATE or (node.attr in private
                                                                             and node.attr not in own)):
                found.append((node.lineno, "." + node.attr))
        elif isinstance(node, ast.Call):
            found.extend((node.lineno, "%s=" % kw.arg) for kw in node.keywords
                         if kw.arg and kw.arg.startswith("_"))
            if isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr", "setattr") \
                    and len(node.args) > 1 and isinstance(node.args[1], ast.Constant) \
                    and isinstance(node.args[1].value, str) and node.args[1].value.startswith("_") \
                    and not node.args[1].value.startswith("__") \
                    and (node.args[1].value in KNOWN_PRIVATE or node.args[1].value not in own):
                found.append((node.lineno, "%s(..., %r)" % (node.func.id, node.args[1].value)))
        elif isinstance(node, ast.ClassDef) and any(isinstance(base, ast.Name) and base.id in imported_classes
                                                    or isinstance(base, ast.Attribute) for base in node.bases):
            found.extend((item.lineno, "overrides %s" % item.name) for item in node.body
                         if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
                         and (item.name in KNOWN_PRIVATE or item.name in private))
    return found


def test_the_private_use_detector_finds_every_kind_of_use():
    # A check that cannot fail is no check: each line below is a use it must see.
    private = frozenset({"_map", "_pool_internal", "_flush_some"})
    source = "\n".join([
        "import ctypes", "from ctypes import util", "gc.freeze()", "n = len(server._map)",
        "conn = pool._get_conn(timeout=0)", "sock = getattr(raw, '_fp', None)", "create_server(app, _dispatcher=d)",
        "channel.total_outbufs_len", "x = thing._pool_internal",
        "from waitress.channel import HTTPChannel",
        "class C(HTTPChannel):\n    def _flush_some(self, do_close=True):\n        pass",
    ])
    assert sorted(line for line, _ in private_uses(source, private, frozenset())) == list(range(1, 10)) + [12]
    # The package's own underscore names on its own objects are not a dependency's (another test's concern).
    own_source = "self._map(envelope)\nmanager._lock\ngetattr(self, '_ready', None)\nself.total_outbufs_len"
    assert private_uses(own_source, private, frozenset({"_lock", "_ready"})) == []


@pytest.mark.slow
def test_the_package_uses_no_private_internals_of_its_dependencies():
    private, own = _dependency_private_names(), _own_names()
    assert {"_map", "_get_conn", "_flush_some"} <= private      # the introspection sees what it must
    offending = {}
    for path in modules():
        found = private_uses(path.read_text(encoding="utf-8"), private, own)
        if found:
            offending[relative(path)] = found
    assert not offending, "private internals of a dependency (file: [(line, use)]): %r" % offending


# ---- modules of the package keep their underscore names, and import each other without a cycle -----------------
def _class_private_names(tree: ast.AST) -> frozenset:
    """The underscore attributes the module's own classes define: methods, class attributes, ``self._x = ``."""
    names = set()
    for cls in (node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)):
        for item in cls.body:
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names.add(item.name)
            elif isinstance(item, (ast.Assign, ast.AnnAssign)):
                targets = item.targets if isinstance(item, ast.Assign) else [item.target]
                names.update(target.id for target in targets if isinstance(target, ast.Name))
        names.update(node.attr for node in ast.walk(cls) if isinstance(node, ast.Attribute)
                     and isinstance(node.ctx, ast.Store) and _is_self(node.value))
    return frozenset(name for name in names if name.startswith("_"))


def _single_underscore(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def foreign_private_uses(source: str) -> List[Tuple[int, str]]:
    """Where a module reaches into another module's underscore names.

    The rule: ``x._name`` (one leading underscore, ``x`` anything but ``self`` or ``cls``) is allowed only
    when a class of the same module defines ``_name`` (a method, a class attribute or a ``self._name`` /
    ``cls._name`` assignment): a class may use the private parts of its own kind, as ``__eq__`` does.  And
    ``from iaccode_agui... import _name`` (relative imports included) is never allowed.  A name another
    module needs is a public method or attribute of the class that owns it.
    """
    tree = ast.parse(source)
    own = _class_private_names(tree)
    found: List[Tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _single_underscore(node.attr) and not _is_self(node.value) \
                and node.attr not in own:
            found.append((node.lineno, "." + node.attr))
        elif isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").split(".")[0] == PACKAGE.name):
            found.extend((node.lineno, "import " + alias.name) for alias in node.names
                         if _single_underscore(alias.name))
    return found


def test_the_foreign_private_detector_finds_every_kind_of_reach():
    source = "\n".join([
        "from iaccode_agui.runs.manager import _helper", "from .kept import _prune", "manager._context(req)",
        "worker._cancel_task_if_unprotected()", "module._CONSTANT", "class Own:\n    def _mine(self):\n        pass",
        "other._mine()", "self._anything", "cls._anything", "x.__class__", "from os import _exit",
    ])
    assert sorted(line for line, _ in foreign_private_uses(source)) == [1, 2, 3, 4, 5]


def test_no_module_reaches_into_another_modules_underscore_names():
    offending = {relative(path): found for path in modules()
                 for found in [foreign_private_uses(path.read_text(encoding="utf-8"))] if found}
    assert not offending, "underscore names used outside their module (file: [(line, use)]): %r" % offending


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_imports(path: pathlib.Path, known: frozenset) -> frozenset:
    """The package modules ``path`` imports, anywhere in it (``TYPE_CHECKING`` blocks and functions too).

    ``from a.b import c`` counts as importing ``a.b.c`` when that is a module, else ``a.b``; the packages
    a dotted import passes through (their ``__init__``) are not counted.
    """
    name = _module_name(path)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in known)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[:len(package) - node.level + 1] + ([base] if base else []))
            for alias in node.names:
                full = base + "." + alias.name
                found.add(full if full in known else base)
    return frozenset(found & known - {name})


def import_cycle(graph: dict) -> List[str]:
    """One cycle of ``graph`` (module -> modules it imports), as the modules around it; [] when none."""
    state: dict = {}        # module -> "open" while on the current path, "done" once all it reaches is seen
    path: List[str] = []

    def visit(module: str) -> List[str]:
        state[module] = "open"
        path.append(module)
        for target in sorted(graph[module]):
            if state.get(target) == "open":
                return path[path.index(target):] + [target]
            if target not in state:
                cycle = visit(target)
                if cycle:
                    return cycle
        path.pop()
        state[module] = "done"
        return []

    for module in sorted(graph):
        cycle = [] if module in state else visit(module)
        if cycle:
            return cycle
    return []


def test_the_cycle_finder_finds_a_cycle():
    assert import_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert import_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) == []


def test_the_package_modules_import_each_other_without_a_cycle():
    paths = list(modules())
    known = frozenset(_module_name(path) for path in paths)
    graph = {_module_name(path): package_imports(path, known) for path in paths}
    assert graph["iaccode_agui.runs.manager"] >= {"iaccode_agui.runs.worker", "iaccode_agui.sse.channel"}
    assert not import_cycle(graph), "an import cycle: %s" % " -> ".join(import_cycle(graph))


def test_no_two_modules_share_a_name():
    """A module is found from its name alone: ``resume.py`` in two packages would make every grep and every
    traceback ambiguous.  (``__init__`` and the ``python -m`` entry points are the exceptions.)"""
    places: Dict[str, List[str]] = {}
    for path in modules():
        if path.stem not in ("__init__", "__main__") and "deploy" not in path.parts:
            places.setdefault(path.stem, []).append(relative(path))
    assert {name: where for name, where in places.items() if len(where) > 1} == {}

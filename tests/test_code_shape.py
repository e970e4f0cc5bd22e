"""The shape the design asks of the code, checked so that it stays that way.

Short functions, short modules and low branching keep each rule readable on its own; the pure core (``projection/``)
stays testable with lists of dicts only while it imports nothing that does I/O; and the projector's state
changes only through its own methods, so every rule about pending interrupts lives in one module.
"""
import ast
import pathlib
from typing import Iterator, List, Tuple

from radon.complexity import cc_visit

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "iaccode_agui"
CORE = ("runs", "projection", "state")       # the run core: the strictest limit
CORE_COMPLEXITY = 15
OTHER_COMPLEXITY = 20
MAX_FUNCTION_LINES = 60
MAX_MODULE_LINES = 500

# Modules a pure projection must never import: network, files, processes, threads, the shell layers.
IO_MODULES = frozenset({
    "socket", "ssl", "select", "selectors", "asyncio", "http", "urllib", "requests", "werkzeug", "waitress",
    "subprocess", "os", "shutil", "tempfile", "pathlib", "io", "threading", "multiprocessing", "logging",
    "iaccode_agui.runs", "iaccode_agui.a2a.client", "iaccode_agui.a2a.stream", "iaccode_agui.a2a.sse",
    "iaccode_agui.state.store",
    "iaccode_agui.app", "iaccode_agui.serving", "iaccode_agui.cli", "iaccode_agui.client", "iaccode_agui.demo",
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
        if relative(path) == "projection/run.py":
            continue
        found = projector_writes(path.read_text(encoding="utf-8"))
        if found:
            writers[relative(path)] = found
    assert not writers, "projector state written outside projection/run.py: %r" % writers


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

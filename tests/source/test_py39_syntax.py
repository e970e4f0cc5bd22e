"""The package stays Python 3.9 compatible: the static check passes, and the check itself catches the
3.10+ constructs a newer interpreter accepts silently.  With a real 3.9 interpreter on the machine the
package is also byte-compiled by it (the check's blind spots are then covered for syntax)."""
import os
import subprocess
import sys

import pytest

from tests import ROOT

sys.path.insert(0, os.path.join(ROOT, "tools"))
import check_py39  # noqa: E402

PACKAGE = check_py39.DEFAULT_PATHS[0]


def test_package_has_no_python39_problems():
    count, findings = check_py39.check_paths()
    assert count >= 30, "the check found only %d files under %s" % (count, PACKAGE)
    assert findings == [], "\n".join(str(finding) for finding in findings)


FLAGGED = {
    "match statement": ("match x:\n    case 1:\n        pass\n", "3.9 syntax"),
    "except star": ("try:\n    pass\nexcept* ValueError:\n    pass\n", "3.9 syntax"),
    "pep 695 alias": ("type Alias = int\n", "3.9 syntax"),
    "datetime.UTC": ("import datetime\nnow = datetime.datetime.now(datetime.UTC)\n", "datetime.UTC"),
    "from datetime import UTC": ("from datetime import UTC\n", "datetime.UTC"),
    "aliased module": ("import datetime as dt\nx = dt.UTC\n", "datetime.UTC"),
    "typing.Self": ("from typing import Self\n", "typing.Self"),
    "typing attribute": ("import typing\nT = typing.TypeAlias\n", "typing.TypeAlias"),
    "tomllib": ("import tomllib\n", "tomllib"),
    "wsgiref.types": ("from wsgiref.types import WSGIApplication\n", "wsgiref.types"),
    "zip strict": ("pairs = list(zip(a, b, strict=True))\n", "zip(strict"),
    "dataclass slots": ("import dataclasses\n@dataclasses.dataclass(slots=True)\nclass A:\n    x: int\n",
                        "dataclass(slots"),
    "dataclass kw_only": ("from dataclasses import dataclass\n@dataclass(kw_only=True)\nclass A:\n    x: int\n",
                          "dataclass(kw_only"),
    "field kw_only": ("import dataclasses\nx = dataclasses.field(kw_only=True)\n", "field(kw_only"),
    "union in parameter": ("def f(x: int | None) -> None:\n    pass\n", "X | Y in an annotation"),
    "union in return": ("from typing import List\ndef f() -> List[int] | None:\n    pass\n", "annotation"),
    "union at class level": ("class A:\n    x: str | None = None\n", "annotation"),
    "union isinstance": ("ok = isinstance(v, int | str)\n", "isinstance()"),
    "union alias": ("Number = int | float\n", "type alias"),
    "itertools.pairwise": ("from itertools import pairwise\n", "itertools.pairwise"),
    "bit_count": ("n = (5).bit_count()\n", "bit_count"),
    "anext builtin": ("async def f(it):\n    return await anext(it)\n", "anext"),
    "ExceptionGroup": ("raise ExceptionGroup('x', [ValueError()])\n", "ExceptionGroup"),
    "starred subscript": ("x = d[*a]\n", "starred"),
    "bisect key": ("import bisect\ni = bisect.bisect_left(a, 3, key=len)\n", "bisect_left(key"),
    # a SyntaxError before 3.12, a PEP 701 finding from 3.12 on
    "f-string reusing its quote": ("x = f\"{d[\"a\"]}\"\n", "Python 3."),
    "undeclared dependency": ("import yaml\n", "not the stdlib and not a declared dependency"),
}


@pytest.mark.parametrize("name", sorted(FLAGGED))
def test_flags_constructs_newer_than_39(name):
    source, expected = FLAGGED[name]
    try:
        compile(source, "snippet.py", "exec", dont_inherit=True)
    except SyntaxError:  # older than the construct: the interpreter running the check cannot even parse it
        expected = "not Python 3.9 syntax"
    findings = check_py39.check_source(source, "snippet.py")
    assert findings, "%s was not flagged" % name
    assert any(expected in str(finding) for finding in findings), findings


ACCEPTED = {
    "walrus": "if (n := len(a)) > 2:\n    pass\n",
    "removeprefix": "s = 'abc'.removeprefix('a')\n",
    "builtin generics": "x: list = []\ny = list[int]\ndef f(a: dict[str, int]) -> tuple[int, ...]:\n    pass\n",
    "postponed annotations": "from __future__ import annotations\ndef f(x: int | None) -> str | None:\n    pass\n",
    "local annotation": "def f():\n    x: int | None = None\n    return x\n",
    "integer bit ops": "FLAGS = 1 | 2\nmask = a | b\n",
    "dict merge": "merged = left | right\nmerged |= other\n",
    "typing names of 3.9": "from typing import Optional, Union, List, Dict, Tuple, Annotated, Literal, Final\n",
    "zoneinfo and graphlib": "import zoneinfo\nimport graphlib\n",
    "plain dataclass": "import dataclasses\n@dataclasses.dataclass(frozen=True)\nclass A:\n    x: int = 0\n",
    "zip without strict": "pairs = list(zip(a, b))\n",
    "declared dependencies": "import werkzeug\nimport requests\nimport jsonschema\nimport waitress\n",
    "f-string with other quotes": "x = f\"{d['a']} and {y!r:>{w}}\"\n",
    "concatenated f-strings": "z = f'{b}' f\"{c}\" '{d}'\n",
    "quote inside a triple-quoted f-string": "w = f\"\"\"{d[\"a\"]}\"\"\"\n",
    "relative import": "from . import errors\nfrom .a2a import client\n",
}


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_accepts_what_39_supports(name):
    assert check_py39.check_source(ACCEPTED[name], "snippet.py") == []


def test_cli_exit_codes(tmp_path):
    good = tmp_path / "good.py"
    good.write_text("import json\nprint(json.dumps({}))\n")
    bad = tmp_path / "bad.py"
    bad.write_text("import datetime\nprint(datetime.UTC)\n")
    assert check_py39.main([str(good)]) == 0
    assert check_py39.main([str(tmp_path)]) == 1


PYTHON39 = check_py39.find_python39()
needs_39 = pytest.mark.skipif(PYTHON39 is None, reason="no CPython 3.9 interpreter on this machine")


@needs_39
def test_real_python39_compiles_the_package(tmp_path):
    """Byte-compile every module with 3.9 itself (into a scratch dir: the tree stays clean)."""
    script = ("import os, py_compile, sys\n"
              "failed = []\n"
              "for root, dirs, files in os.walk(sys.argv[1]):\n"
              "    for name in (n for n in files if n.endswith('.py')):\n"
              "        try:\n"
              "            py_compile.compile(os.path.join(root, name), cfile=os.path.join(sys.argv[2], 'x.pyc'),\n"
              "                               doraise=True)\n"
              "        except py_compile.PyCompileError as exc:\n"
              "            failed.append(str(exc))\n"
              "print('\\n'.join(failed))\n"
              "sys.exit(1 if failed else 0)\n")
    result = subprocess.run([PYTHON39, "-c", script, PACKAGE, str(tmp_path)], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


@needs_39
def test_the_check_itself_runs_on_python39():
    result = subprocess.run([PYTHON39, os.path.join(os.path.dirname(PACKAGE), "tools", "check_py39.py")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 Python 3.9 problem(s)" in result.stdout

"""Load a module of ``tools/``: an entry point by path (``tools`` is too generic a name to import as a package),
a helper by its name in the ``toolkit`` package (``load_tool("toolkit.deploy")``)."""
import importlib
import importlib.util
import os
import sys
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOLS = os.path.join(ROOT, "tools")


def load_tool(name: str) -> Any:
    if TOOLS not in sys.path:   # where the entry points find their helpers, as when they run as scripts
        sys.path.append(TOOLS)
    if name.startswith("toolkit."):
        return importlib.import_module(name)
    spec = importlib.util.spec_from_file_location("iaccode_agui_tools_" + name, os.path.join(TOOLS, name + ".py"))
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module

"""Load a script from ``tools/`` by path: ``tools`` is too generic a name to import as a package."""
import importlib.util
import os
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_tool(name: str) -> Any:
    spec = importlib.util.spec_from_file_location("iaccode_agui_tools_" + name,
                                                  os.path.join(ROOT, "tools", name + ".py"))
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module

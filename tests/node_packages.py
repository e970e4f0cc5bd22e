"""The test-only Node packages pinned in ``tests/node/package.json``, installed into ``~/.cache/iaccode_agui/npm``.

``.ci/run`` installs them before the suite; a test that needs them calls ``node_modules()``, which installs them
itself when the cache does not hold exactly the pinned versions.
"""
import json
import os
import shutil
import subprocess
from typing import Dict

HERE = os.path.dirname(os.path.abspath(__file__))
NODE_DIR = os.path.join(HERE, "node")
CACHE = os.path.join(os.path.expanduser("~"), ".cache", "iaccode_agui", "npm")


class Unavailable(Exception):
    """The packages cannot be had on this machine (no node, no npm, or the install failed); the reason."""


def _pinned() -> Dict[str, str]:
    with open(os.path.join(NODE_DIR, "package.json"), encoding="utf-8") as handle:
        return json.load(handle)["dependencies"]


def _installed(name: str) -> str:
    try:
        with open(os.path.join(CACHE, "node_modules", name, "package.json"), encoding="utf-8") as handle:
            return json.load(handle).get("version", "")
    except (OSError, ValueError):
        return ""


def node_modules(node_major: int = 18) -> str:
    """The ``node_modules`` directory holding every pinned package at its pinned version (installing them once),
    for a test that needs Node.js ``node_major`` or later."""
    if shutil.which("node") is None:
        raise Unavailable("node is not installed: this test needs Node.js %d+" % node_major)
    version = subprocess.run(["node", "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    if int(version.lstrip("v").split(".")[0] or 0) < node_major:
        raise Unavailable("node %s is installed: this test needs Node.js %d+" % (version, node_major))
    pinned = _pinned()
    if any(_installed(name) != version for name, version in pinned.items()):
        npm = shutil.which("npm")
        if npm is None:
            raise Unavailable("node is installed but npm is not: cannot install %s" % ", ".join(pinned))
        os.makedirs(CACHE, exist_ok=True)
        shutil.copy(os.path.join(NODE_DIR, "package.json"), os.path.join(CACHE, "package.json"))
        # SCARF_ANALYTICS: one of CopilotKit's dependencies reports installs over the network unless told not to.
        done = subprocess.run([npm, "install", "--no-audit", "--no-fund", "--silent"], cwd=CACHE,
                              capture_output=True, text=True, timeout=600,
                              env=dict(os.environ, SCARF_ANALYTICS="false"))
        if done.returncode != 0:
            raise Unavailable("npm install of %s failed:\n%s%s" % (", ".join(pinned), done.stdout, done.stderr))
    wrong = {name: _installed(name) for name, version in pinned.items() if _installed(name) != version}
    if wrong:
        raise Unavailable("npm installed other versions than tests/node/package.json pins: %r" % wrong)
    return os.path.join(CACHE, "node_modules")


def node_env(modules: str) -> Dict[str, str]:
    """The environment of a test's ``node`` child: the cache on its require path, no deprecation nagging."""
    return dict(os.environ, NODE_PATH=modules, SUPPRESS_TRANSFORMATION_WARNINGS="true")

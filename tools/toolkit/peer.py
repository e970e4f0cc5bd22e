"""The peer for ``--peer auto``: the real ``iac-code agui`` 0.16, in its own cached venv.

The interoperability venv (``tools/toolkit/iaccode_env.py``) installs ``iac-code[a2a]`` only, and ``iac-code agui``
refuses to start without its ``agui`` extra; adding packages to that shared venv behind its back would make
its readiness marker lie, so the bench keeps a sibling venv with both extras and the same a2a-sdk pin.
"""
import fcntl
import json
import os
import subprocess
import sys
import time
from typing import List, Optional

from . import iaccode_env

REQUIREMENTS: List[str] = ["iac-code[a2a,agui]==%s" % iaccode_env.IACCODE_VERSION,
                           "a2a-sdk[http-server,signing]==1.1.5"]
MARKER = ".iaccode_agui_bench_peer.json"
PEER_ARGS = "agui --host 127.0.0.1 --port {port} --a2a-url {a2a_url}"


def peer_venv_dir() -> str:
    return iaccode_env.default_cache_dir() + "-agui"


def _ready(venv: str) -> bool:
    try:
        with open(os.path.join(venv, MARKER), "r", encoding="utf-8") as handle:
            return json.load(handle).get("requirements") == REQUIREMENTS
    except (OSError, ValueError):
        return False


def ensure_peer(venv: Optional[str] = None) -> str:
    """Build the venv once (under a lock, like iaccode_env) and return the ``iac-code`` script path."""
    venv = venv or peer_venv_dir()
    script = os.path.join(venv, "bin", "iac-code")
    if _ready(venv) and os.path.exists(script):
        return script
    os.makedirs(os.path.dirname(venv), exist_ok=True)
    with open(venv + ".lock", "a+") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            if not (_ready(venv) and os.path.exists(script)):
                started = time.monotonic()
                sys.stderr.write("[bench] building the peer venv in %s (about a minute, once)\n" % venv)
                python = os.path.join(venv, "bin", "python")
                subprocess.run([iaccode_env.base_python(), "-m", "venv", "--clear", venv], check=True,
                               stdout=sys.stderr)
                subprocess.run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
                               + REQUIREMENTS, check=True, stdout=sys.stderr)
                with open(os.path.join(venv, MARKER), "w", encoding="utf-8") as handle:
                    json.dump({"requirements": REQUIREMENTS, "build_seconds": time.monotonic() - started}, handle)
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)
    return script


def peer_command(spec: str) -> str:
    """``auto`` -> the cached real iac-code; anything else is the user's own template, used as given."""
    if spec != "auto":
        return spec
    return "%s %s" % (ensure_peer(), PEER_ARGS)

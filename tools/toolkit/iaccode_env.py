"""Build (once) the isolated venv that holds the real `iac-code a2a` 0.16.0 runtime.

The interoperability tests must talk to the genuine runtime, but it cannot live in the
project's own environment: it pulls a large dependency tree and needs a2a-sdk pinned below
1.2 (newer releases removed a symbol it imports). A separate, cached venv keeps both
worlds apart and makes the second and later test sessions start in about a second.

Usage from the command line: ``python tools/toolkit/iaccode_env.py`` builds it and prints the
interpreter path.
"""

import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from typing import List, Optional

IACCODE_VERSION = "0.16.0"
REQUIREMENTS: List[str] = [
    "iac-code[a2a]==%s" % IACCODE_VERSION,
    # a2a-sdk >= 1.2 drops `encode_page_token`, which iac-code 0.16 imports at start-up.
    "a2a-sdk[http-server,signing]==1.1.5",
]
CACHE_ENV_VAR = "IACCODE_AGUI_INTEROP_VENV"
PYTHON_ENV_VAR = "IACCODE_AGUI_INTEROP_PYTHON"
# iac-code 0.16 declares Requires-Python >=3.10, while this project still supports 3.9.
MIN_PYTHON = (3, 10)
FALLBACK_PYTHONS = ("python3.13", "python3.12", "python3.11", "python3.10")
MARKER_NAME = ".iaccode_agui_ready.json"
LOCK_NAME = ".iaccode_agui_build.lock"
# Importing these proves the pinned pair works together (the a2a-sdk mismatch fails here).
SMOKE_IMPORT = "import iac_code.a2a.app, iac_code.a2a.task_store"


def default_cache_dir() -> str:
    """The venv location: overridable so CI can point it at a persistent cache."""
    configured = os.environ.get(CACHE_ENV_VAR)
    if configured:
        return os.path.abspath(os.path.expanduser(configured))
    return os.path.join(os.path.expanduser("~"), ".cache", "iaccode_agui",
                        "iaccode-%s" % IACCODE_VERSION)


def base_python() -> str:
    """The interpreter that creates the venv: ours when recent enough, else a newer one."""
    configured = os.environ.get(PYTHON_ENV_VAR)
    if configured:
        return configured
    if sys.version_info[:2] >= MIN_PYTHON:
        return sys.executable
    for name in FALLBACK_PYTHONS:
        found = shutil.which(name)
        if found:
            return found
    raise RuntimeError("iac-code %s needs Python >= %d.%d; none found on PATH (set %s)"
                       % (IACCODE_VERSION, MIN_PYTHON[0], MIN_PYTHON[1], PYTHON_ENV_VAR))


def _python_path(venv_dir: str) -> str:
    return os.path.join(venv_dir, "bin", "python")


def _log(message: str) -> None:
    sys.stderr.write("[iaccode_env] %s\n" % message)
    sys.stderr.flush()


def _marker_matches(venv_dir: str) -> bool:
    """A venv counts as ready only if a completed build recorded the same requirements."""
    marker = os.path.join(venv_dir, MARKER_NAME)
    try:
        with open(marker, "r", encoding="utf-8") as handle:
            recorded = json.load(handle)
    except (OSError, ValueError):
        return False
    return (recorded.get("requirements") == REQUIREMENTS
            and os.path.exists(_python_path(venv_dir)))


def _run(cmd: List[str]) -> None:
    """Run a build step, streaming its output to stderr so a slow install is visible."""
    _log("$ " + " ".join(cmd))
    completed = subprocess.run(cmd, stdout=sys.stderr, stderr=sys.stderr)
    if completed.returncode != 0:
        raise RuntimeError("command failed with exit code %d: %s"
                           % (completed.returncode, " ".join(cmd)))


def _build(venv_dir: str) -> None:
    started = time.monotonic()
    _log("building the iac-code %s venv in %s" % (IACCODE_VERSION, venv_dir))
    # --clear: a half-built venv from an interrupted run must not be trusted.
    _run([base_python(), "-m", "venv", "--clear", venv_dir])
    python = _python_path(venv_dir)
    _run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
         + REQUIREMENTS)
    _run([python, "-c", SMOKE_IMPORT])
    elapsed = time.monotonic() - started
    marker = os.path.join(venv_dir, MARKER_NAME)
    with open(marker + ".tmp", "w", encoding="utf-8") as handle:
        json.dump({"requirements": REQUIREMENTS, "build_seconds": round(elapsed, 1),
                   "built_at": time.time()}, handle)
    os.replace(marker + ".tmp", marker)
    _log("venv ready in %.1f s" % elapsed)


def ensure_iaccode_venv(cache_dir: Optional[str] = None) -> str:
    """Return the venv's interpreter, building the venv first if no completed build exists.

    Safe to call from parallel pytest workers: the build runs under an exclusive file lock
    and the others reuse its result once the lock is released.
    """
    venv_dir = os.path.abspath(cache_dir) if cache_dir else default_cache_dir()
    if _marker_matches(venv_dir):
        return _python_path(venv_dir)
    parent = os.path.dirname(venv_dir)
    os.makedirs(parent, exist_ok=True)
    lock_path = os.path.join(parent, os.path.basename(venv_dir) + LOCK_NAME)
    with open(lock_path, "a+") as lock_file:
        fcntl.flock(lock_file.fileno(), fcntl.LOCK_EX)
        try:
            if not _marker_matches(venv_dir):
                _build(venv_dir)
        finally:
            fcntl.flock(lock_file.fileno(), fcntl.LOCK_UN)
    return _python_path(venv_dir)


def iaccode_executable(cache_dir: Optional[str] = None) -> str:
    """Return the `iac-code` console script of the venv, building the venv if needed."""
    python = ensure_iaccode_venv(cache_dir)
    script = os.path.join(os.path.dirname(python), "iac-code")
    if not os.path.exists(script):
        raise RuntimeError("the venv at %s has no iac-code console script"
                           % os.path.dirname(os.path.dirname(python)))
    return script


def main(argv: Optional[List[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    cache_dir = args[0] if args else None
    try:
        print(ensure_iaccode_venv(cache_dir))
    except (OSError, RuntimeError) as exc:
        _log("failed: %s" % exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The workspace directory of a run: located and checked against the allowed roots first, created last.

Containment is decided on the fully resolved path, so a symlink inside a root cannot lead outside it, and
nothing is created until the whole request has passed validation (a refused request leaves no directory).
"""
import logging
import os
from typing import Sequence

from iaccode_agui import errors
from iaccode_agui.errors import AguiError
from iaccode_agui.web.input_errors import invalid_input

log = logging.getLogger("iaccode_agui.workspace")

_CWD_PATH = ("forwardedProps", "iacCode", "cwd")


def _invalid(problem: str) -> AguiError:
    return invalid_input(errors.MSG_INVALID_PROPS, _CWD_PATH, problem=(problem, {}))


def _outside(real: str, allowed_roots: Sequence[str]) -> AguiError:
    """The client learns which setting lists the roots; only the server's log names them."""
    log.info("refused workspace %s: outside the allowed workspace roots %s", real, os.pathsep.join(allowed_roots))
    return _invalid(errors.MSG_CWD_NOT_ALLOWED)


def resolve_cwd(cwd: str, allowed_roots: Sequence[str]) -> str:
    """The real workspace path, created if missing, refused unless inside an allowed root."""
    return create_cwd(locate_cwd(cwd, allowed_roots), allowed_roots)


def locate_cwd(cwd: str, allowed_roots: Sequence[str]) -> str:
    """The real workspace path, checked but not created: a request refused later leaves no directory behind.

    Containment is decided on the fully resolved path so a symlink inside a root cannot lead outside it,
    and the resolved path (not the client's spelling) is what gets bound and sent upstream.
    """
    # ``~`` is expanded, environment variables deliberately are not: a client must not be able to make the
    # server write the value of one of its own variables into a path the agent can read.
    expanded = os.path.expanduser(cwd)
    if not os.path.isabs(expanded):
        raise _invalid(errors.MSG_CWD_NOT_ABSOLUTE)
    try:
        real = os.path.realpath(expanded)
        if not _inside_roots(real, allowed_roots):
            raise _outside(real, allowed_roots)
        if os.path.lexists(real) and not os.path.isdir(real):
            raise _invalid(errors.MSG_CWD_NOT_DIRECTORY)
    except (OSError, ValueError) as exc:
        if isinstance(exc, AguiError):
            raise
        raise _invalid(errors.MSG_CWD_UNUSABLE) from None
    return real


def create_cwd(real: str, allowed_roots: Sequence[str]) -> str:
    """Create a located workspace if missing; the last step of validation, after everything else passed.

    A missing directory is created (``mkdir -p``, as ``iac-code agui`` does), logged here and announced to the
    client in the run's session event (``workspaceCreated``), so a mistyped path does not go unnoticed.
    """
    try:
        if not os.path.lexists(real):
            os.makedirs(real, exist_ok=True)
            log.info("created workspace %s", real)
        # A symlink swapped in during creation must not move the workspace out of bounds.
        if not _inside_roots(os.path.realpath(real), allowed_roots):
            raise _outside(os.path.realpath(real), allowed_roots)
        if not os.path.isdir(real):
            raise _invalid(errors.MSG_CWD_NOT_DIRECTORY)
        if not os.access(real, os.R_OK | os.X_OK):
            raise _invalid(errors.MSG_CWD_UNUSABLE)
    except (OSError, ValueError):
        raise _invalid(errors.MSG_CWD_UNUSABLE) from None
    return real


def _inside_roots(real: str, roots: Sequence[str]) -> bool:
    for root in roots:
        if not root or not os.path.isabs(root):
            continue
        root = os.path.normpath(root)
        try:
            if os.path.commonpath([root, real]) == root:
                return True
        except ValueError:
            continue
    return False

"""AG-UI (HTTP POST + SSE) front for the iac-code A2A 1.0 execution kernel, in synchronous Python."""
from typing import Any

from iaccode_agui.version import __version__

__all__ = ["__version__", "create_app", "Settings"]


def create_app(settings: Any = None) -> Any:
    """Return the plain WSGI application for ``settings`` (an ``iaccode_agui.config.Settings``)."""
    from iaccode_agui.web.app import create_app as _create_app
    return _create_app(settings)


def __getattr__(name: str) -> Any:
    if name == "Settings":
        from iaccode_agui.config import Settings
        return Settings
    raise AttributeError(name)

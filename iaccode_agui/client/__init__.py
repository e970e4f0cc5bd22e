"""A terminal client for the AG-UI adapter (``python -m iaccode_agui.client``).

It exists so an operator can exercise a deployment end to end (streaming, interrupts, resume, cancel)
without writing a front end.  The HTTP/SSE side (``transport``) is kept apart from the terminal side
(``render``, ``prompt``) and the loop (``session``) so each can be replaced or tested alone.
"""
from iaccode_agui.client.command import build_parser, main
from iaccode_agui.client.session import ClientOptions, TerminalClient
from iaccode_agui.client.transport import AguiTransport, HttpError, StreamBroken

__all__ = ["main", "build_parser", "ClientOptions", "TerminalClient", "AguiTransport", "HttpError",
           "StreamBroken"]

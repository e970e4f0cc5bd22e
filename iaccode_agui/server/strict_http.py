"""waitress's HTTP handling made strict where it is lenient: framing, refused heads, anonymous uploads, slow heads.

waitress parses requests in its event loop; these subclasses add the refusals it does not make itself and
answer them in the adapter's JSON error shape, and ``close_slow_heads`` extends its maintenance pass so a
connection that is slow to send a request head does not hold a socket for the general inactivity timeout.
"""
import hmac
import http.client
import json
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from waitress.channel import HTTPChannel
from waitress.parser import HTTPRequestParser, ParsingError
from waitress.utilities import Error, RequestEntityTooLarge

from iaccode_agui import errors, i18n


class _Refusal(Error):
    """A refusal made from the request head, in the adapter's JSON error shape (waitress then closes)."""

    def __init__(self, code: str, message: str, language: str, headers: Tuple[Tuple[str, str], ...] = ()):
        self.code = errors.ERRORS[code][0]          # waitress reads ``code`` as the HTTP status
        self.reason = http.client.responses.get(self.code, "Error")
        self.body = json.dumps(errors.error_body(code, i18n.translate(message, language)), ensure_ascii=False)
        self.extra_headers = list(headers)

    def to_response(self, ident: Optional[str] = None) -> Tuple[str, List[Tuple[str, str]], bytes]:
        headers = [("Content-Type", "application/json; charset=utf-8")] + self.extra_headers
        return "%d %s" % (self.code, self.reason), headers, self.body.encode("utf-8")


class _AmbiguousFraming(ParsingError):
    pass


class StrictRequestParser(HTTPRequestParser):
    """waitress's parser with three refusals it does not make itself, each answered at once and closed.

    - ``Content-Length`` together with ``Transfer-Encoding``, or ``Transfer-Encoding`` on HTTP/1.0: the
      two framings disagree about where the body ends, so the bytes after it could be read as a second,
      smuggled request (RFC 9112 section 6.1 asks for 400 and a close).
    - A head that is already refused (for example a ``Content-Length`` over the limit) never gets
      ``100 Continue``: waitress would send it and then wait for a body that it has already refused.
    - With an auth token, a request that carries a body but no matching credential (``Authorization:
      Bearer`` or ``x-api-key``) is refused before its body is read, so an anonymous client cannot make the
      server receive and spool a large upload.  This is only a pre-filter: the app still decides each route.
    """

    auth_token: Optional[str] = None
    default_language = i18n.SOURCE_LANGUAGE
    _framing_refused = False

    def __init__(self, adj: Any) -> None:
        super().__init__(adj)
        self.started = time.monotonic()

    def parse_header(self, header_plus: bytes) -> None:
        names = _field_names(header_plus)
        super().parse_header(header_plus)
        if b"transfer-encoding" in names and (b"content-length" in names or self.version != "1.1"):
            self._framing_refused = True
            raise _AmbiguousFraming("ambiguous message framing")

    def received(self, data: bytes) -> int:
        consumed = super().received(data)
        if self.error is not None and not isinstance(self.error, _Refusal):
            self.error = self._refusal_for(self.error)
        elif self.headers_finished and not self.completed and self._lacks_credentials():
            # The AgentCore routes also take an API key: say so, as the application's own refusal does.
            message = errors.MSG_UNAUTHORIZED_API_KEY if self.path.startswith("/ag-ui/") else errors.MSG_UNAUTHORIZED
            self.error = _Refusal("UNAUTHORIZED", message, self._language(), (("WWW-Authenticate", "Bearer"),))
            self.completed = True
        if self.error is not None:
            self.expect_continue = False
        return consumed

    def _refusal_for(self, error: Error) -> Error:
        if self._framing_refused:
            return _Refusal("INVALID_INPUT", errors.MSG_AMBIGUOUS_FRAMING, self._language())
        if isinstance(error, RequestEntityTooLarge):
            return _Refusal("REQUEST_TOO_LARGE", errors.MSG_REQUEST_TOO_LARGE, self._language())
        return error

    def _lacks_credentials(self) -> bool:
        token = self.auth_token
        if not token or self.path == "/health":
            return False
        scheme, _, bearer = self.headers.get("AUTHORIZATION", "").partition(" ")
        offered = [bearer.strip() if scheme.lower() == "bearer" else "", self.headers.get("X_API_KEY", "").strip()]
        # Both are compared, so the time taken does not tell which header was close.
        matches = [hmac.compare_digest(value.encode("utf-8"), token.encode("utf-8")) for value in offered]
        return not any(matches)

    def _language(self) -> str:
        return i18n.negotiate(self.headers.get("ACCEPT_LANGUAGE"), self.default_language)


def _field_names(header_plus: bytes) -> set:
    lines = header_plus.split(b"\n")[1:]
    return {line.split(b":", 1)[0].strip().lower() for line in lines if b":" in line}


class StrictChannel(HTTPChannel):
    """Remembers whether the connection has completed a request (which decides its idle timeout)."""

    answered = False

    def received(self, data: bytes) -> bool:
        result = super().received(data)
        if self.requests:
            self.answered = True
        return result


def close_stalled(server: Any, stall_timeout: float, now: float) -> int:
    """Close responses that have output waiting and have sent nothing for ``stall_timeout`` seconds.

    A client that stops reading holds a worker thread for as long as waitress waits to write to it, and
    waitress never gives up on a response by itself.  Closing the connection (from the event loop's
    thread) makes the blocked write fail, so the response ends and its worker is free again.  ``now`` is
    wall-clock time, as waitress's ``last_activity`` (moved by every send that made progress).  Returns
    how many were closed.
    """
    closed = 0
    for channel in list(server.active_channels.values()):
        if channel.requests and channel.writable() and now - channel.last_activity >= stall_timeout:
            channel.handle_close()
            closed += 1
    return closed


def strict_channel(auth_token: Optional[str] = None, default_language: str = i18n.SOURCE_LANGUAGE) -> type:
    """A waitress channel class whose requests go through ``StrictRequestParser`` with these settings."""
    parser = type("ConfiguredRequestParser", (StrictRequestParser,),
                  {"auth_token": auth_token, "default_language": default_language})
    return type("ConfiguredChannel", (StrictChannel,), {"parser_class": parser})


def close_slow_heads(server: Any, maintenance: Callable[[float], None], header_timeout: float, now: float) -> None:
    """waitress's maintenance, plus: close connections that have not sent a request head in time.

    A connection counts from its creation until its first request completes, and each later request from
    its first byte; connections with a request queued or being served (an SSE stream) are never touched.
    """
    maintenance(now)
    started_before = time.monotonic() - header_timeout
    for channel in list(server.active_channels.values()):
        if channel.requests or channel.will_close:
            continue
        request = channel.request
        if request is None:
            slow = not getattr(channel, "answered", True) and channel.creation_time < now - header_timeout
        else:
            slow = not request.headers_finished and getattr(request, "started", 0.0) < started_before
        if slow:
            channel.will_close = True




ACCEPTS_PER_WAKEUP = 64


def accept_many(server: Any, handle_accept: Callable[[], None], socket_map: Dict[int, Any]) -> None:
    """Accept up to ``ACCEPTS_PER_WAKEUP`` pending connections per wake-up instead of one.

    waitress accepts one connection per pass of its event loop, and a pass over thousands of sockets takes
    milliseconds, so after a wave of reconnects a new client (``/health``) waited seconds in the backlog.
    ``socket_map`` is the map the server was created with (``create_server(map=...)``).
    """
    for _ in range(ACCEPTS_PER_WAKEUP):
        before = len(socket_map)
        if before >= server.adj.connection_limit:
            return
        handle_accept()
        if len(socket_map) == before:
            return

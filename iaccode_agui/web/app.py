"""The WSGI application: routing, auth, body limits, JSON errors and the SSE response.

Everything a client can get wrong is answered here before any SSE byte, as ``{"error":{"code","message"}}``
with the status from ``errors.ERRORS`` and a message in the request's language.  Once a run is admitted
the response is an ``SSEBody`` that the WSGI server iterates in its own thread.
"""
import contextlib
import hmac
import json
import logging
import re
import time
from typing import Any, Callable, Dict, Iterable, Optional, Tuple

from werkzeug.exceptions import HTTPException, MethodNotAllowed, NotFound, RequestEntityTooLarge
from werkzeug.routing import Map, PathConverter, Rule
from werkzeug.wrappers import Request, Response

from iaccode_agui import errors, i18n
from iaccode_agui.web import inputs
from iaccode_agui.web import jsonbody
from iaccode_agui.web.console import make_console
from iaccode_agui.a2a.client import A2AClient
from iaccode_agui.agentcore.requests import check_session_header
from iaccode_agui.agentcore.routes import AgentCoreRoutes
from iaccode_agui.config import Settings
from iaccode_agui.errors import AguiError
from iaccode_agui.metrics import Level, Metrics
from iaccode_agui.projection.events import PROTOCOL_VERSION
from iaccode_agui.web.readiness import Readiness, probe_client, ready_response
from iaccode_agui.sse.channel import Subscription
from iaccode_agui.runs.manager import RunManager
from iaccode_agui.runs.run import Run
from iaccode_agui.sse.response import SSEBody, client_disconnect_probe
from iaccode_agui.state.store import StateError, ThreadStore

log = logging.getLogger("iaccode_agui.app")
access_log = logging.getLogger("iaccode_agui.access")

SSE_HEADERS = [("Content-Type", "text/event-stream; charset=utf-8"), ("Cache-Control", "no-cache"),
               ("X-Accel-Buffering", "no")]
# The version of the AG-UI event models (the ``ag-ui-protocol`` package) every stream is checked against;
# monitors written for ``iac-code agui`` read it from /health.
AGUI_PACKAGE_VERSION = "1.0.0"
# The liveness and readiness probes and the console's static files carry no data, so they are served without a
# token (a load balancer's or an orchestrator's probe carries no credentials).
PUBLIC_ENDPOINTS = frozenset({"health", "ready", "console_page", "console_asset"})

StartResponse = Callable[..., Any]
# Endpoints of the AgentCore-compatible family: they also take the API key as ``x-api-key``.
API_KEY_ENDPOINTS = frozenset(["agentcore_run", "agentcore_stop", "capabilities", "file", "agentcore_thread_messages"])
HISTORY_ROUTE = "/threads/<thread_id:thread_id>/messages"


class ThreadIdConverter(PathConverter):
    """A thread id in a path: any characters, slashes included (a client percent-encodes them)."""
    regex = ".+?"
    part_isolating = False


_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


_CODING_SHOWN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,40}")


def _refuse_content_coding(header: Optional[str]) -> None:
    """Only ``identity`` is accepted: a coded body would otherwise be parsed as if it were plain JSON.

    The coding is named in the message when it is a plain token; anything else is shown as ``?`` so a
    header never travels back verbatim.
    """
    if header is None:
        return
    codings = [item.strip().lower() for item in header.split(",") if item.strip()]
    for coding in codings:
        if coding != "identity":
            shown = coding if _CODING_SHOWN.fullmatch(coding) else "?"
            raise AguiError("UNSUPPORTED_MEDIA_TYPE", errors.MSG_CONTENT_ENCODING, params={"coding": shown})


class AguiApp:
    def __init__(self, settings: Settings, *, client: Optional[A2AClient] = None,
                 store: Optional[ThreadStore] = None, metrics: Optional[Metrics] = None) -> None:
        self.settings = settings
        self.metrics = metrics or Metrics()
        self._heartbeats = self.metrics.tally("agui_heartbeats_total")   # bumped by every stream: no lock
        self.client = client or A2AClient(settings.a2a_url, settings.a2a_token,
                                          connect_timeout=settings.connect_timeout,
                                          read_timeout=settings.upstream_idle_timeout,
                                          pool_size=max(64, settings.max_active_runs or 0))
        self.store = store or ThreadStore(settings.state_dir)
        with contextlib.suppress(StateError):  # logged by the store; the first request retries it
            self.store.recover()  # a dead adapter's journal is applied and removed at start, not on a request
        self.manager = RunManager(settings, self.store, self.client, self.metrics)
        self._streams = Level()
        self.metrics.add_gauge("agui_active_runs", self.manager.active_count)
        self.metrics.add_gauge("agui_open_streams", lambda: self._streams.value)
        self.console = make_console(settings.console)
        self.readiness = Readiness(self.store, probe_client(settings), lambda: self.manager.draining)
        rules = [
            Rule("/health", endpoint="health", methods=["GET"]),
            Rule("/ready", endpoint="ready", methods=["GET"]),
            Rule("/", endpoint="run", methods=["POST"]),
            Rule("/extensions/iac-code/v1/executions/<execution_id>/cancel", endpoint="cancel", methods=["POST"]),
            Rule("/extensions/iac-code/v1/executions/<execution_id>/subscribe", endpoint="subscribe",
                 methods=["POST"]),
            Rule("/metrics", endpoint="metrics", methods=["GET"]),
            Rule("/ag-ui/agent", endpoint="agentcore_run", methods=["POST"]),
            Rule("/ag-ui/agent/stop", endpoint="agentcore_stop", methods=["POST"]),
            Rule("/ag-ui/agent/capabilities", endpoint="capabilities", methods=["GET"]),
            Rule("/capabilities", endpoint="capabilities", methods=["GET"]),
            Rule("/ag-ui/files/<token>", endpoint="file", methods=["GET"]),
            Rule(HISTORY_ROUTE, endpoint="thread_messages", methods=["GET"]),
            Rule("/ag-ui/agent" + HISTORY_ROUTE, endpoint="agentcore_thread_messages", methods=["GET"]),
        ]
        if self.console is not None:
            rules += [Rule("/console/", endpoint="console_page", methods=["GET"]),
                      Rule("/console/<name>", endpoint="console_asset", methods=["GET"])]
        self.url_map = Map(rules, strict_slashes=False, merge_slashes=False,
                           converters={"thread_id": ThreadIdConverter})
        self.input_policy = inputs.InputPolicy(default_cwd=settings.default_cwd,
                                               max_image_bytes=settings.max_image_bytes,
                                               max_images_bytes=settings.max_images_bytes,
                                               client_tools=settings.client_tools)
        self.agentcore = AgentCoreRoutes(self)

    # ---- WSGI entry -------------------------------------------------------------------------
    @property
    def open_streams(self) -> int:
        return self._streams.value

    def close(self, timeout: float = 10.0, cancel_wait: float = 5.0) -> None:
        """The one stop sequence (embedder, CLI, test harness): refuse new runs, let active ones finish
        up to ``timeout``, cancel the rest and wait ``cancel_wait`` for them, then let go of the upstream."""
        self.manager.shutdown(timeout, cancel_wait)
        self.client.close()
        self.readiness.close()
        self.store.close()

    def __call__(self, environ: Dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        started = time.monotonic()
        if not environ.get("PATH_INFO"):
            environ["PATH_INFO"] = "/"   # mounted under a prefix and called without the trailing slash
        request = Request(environ)
        language = i18n.negotiate(request.headers.get("Accept-Language"), self.settings.default_language)
        info: Dict[str, Any] = {"route": "unknown"}
        try:
            endpoint, args = self.url_map.bind_to_environ(environ).match()
            info["route"] = endpoint
            if endpoint not in PUBLIC_ENDPOINTS:
                self._authorize(request, endpoint in API_KEY_ENDPOINTS)
            handler = getattr(self, "on_" + endpoint)
            result = handler(request, info, **args)
        except AguiError as exc:
            info["code"] = exc.code
            result = self._error_response(exc, info.get("language", language))
        except NotFound:
            info["code"] = "NOT_FOUND"
            result = self._error_response(AguiError("NOT_FOUND"), language)
        except MethodNotAllowed as exc:
            info["code"] = "METHOD_NOT_ALLOWED"
            result = self._error_response(AguiError("METHOD_NOT_ALLOWED", headers={
                "Allow": ", ".join(exc.valid_methods or [])}), language)
        except HTTPException:
            # Routing redirects and the like: this API has exactly one spelling per resource.
            info["code"] = "NOT_FOUND"
            result = self._error_response(AguiError("NOT_FOUND"), language)
        except Exception:
            log.exception("unhandled error on %s %s", request.method, request.path)
            info["code"] = "INTERNAL_ERROR"
            result = self._error_response(AguiError("INTERNAL_ERROR"), language)
        if isinstance(result, SSEBody):
            start_response("200 OK", list(SSE_HEADERS) + result.headers)
            return result
        status = result.status_code
        self.metrics.inc("agui_http_requests_total", route=info["route"], status=str(status))
        self._access(request, status, started, info)
        return result(environ, start_response)

    def _access(self, request: Request, status: int, started: float, info: Dict[str, Any]) -> None:
        if access_log.isEnabledFor(logging.INFO):
            line = {"method": request.method, "path": request.path, "status": status,
                    "thread": info.get("thread"), "run": info.get("run"),
                    "durationMs": round((time.monotonic() - started) * 1000, 1),
                    "outcome": info.get("outcome"), "code": info.get("code")}
            if info.get("clientToolsIgnored"):
                line["clientToolsIgnored"] = info["clientToolsIgnored"]
            access_log.info(json.dumps(line, ensure_ascii=False))

    @staticmethod
    def note_run_request(info: Dict[str, Any], run_request: inputs.RunRequest) -> None:
        """What the access log records of an admitted request (both route families)."""
        info["thread"], info["run"] = run_request.thread_id, run_request.run_id
        info["clientToolsIgnored"] = run_request.ignored_tools

    # ---- helpers ----------------------------------------------------------------------------
    def _authorize(self, request: Request, api_key: bool = False) -> None:
        expected = self.settings.auth_token
        if not expected:
            return
        header = request.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        supplied = token.strip() if scheme.lower() == "bearer" else ""
        wanted = expected.encode("utf-8")
        # Both spellings are compared in constant time, whichever the client used.
        bearer_ok = hmac.compare_digest(supplied.encode("utf-8"), wanted)
        key_ok = api_key and hmac.compare_digest(request.headers.get("x-api-key", "").strip().encode("utf-8"), wanted)
        if not (bearer_ok or key_ok):
            raise AguiError("UNAUTHORIZED", errors.MSG_UNAUTHORIZED_API_KEY if api_key else None,
                            headers={"WWW-Authenticate": "Bearer"})

    def read_json(self, request: Request, limit: int) -> Any:
        return self._read_json(request, limit)

    def _read_json(self, request: Request, limit: int) -> Any:
        if request.mimetype != "application/json":
            raise AguiError("UNSUPPORTED_MEDIA_TYPE")
        _refuse_content_coding(request.headers.get("Content-Encoding"))
        # One byte over the limit: werkzeug truncates a body without Content-Length at the limit, so
        # reading limit + 1 is what tells an oversized chunked body from one that fits exactly.
        request.max_content_length = limit + 1
        try:
            raw = request.get_data(cache=False)
        except RequestEntityTooLarge:
            raise AguiError("REQUEST_TOO_LARGE")
        if len(raw) > limit:
            raise AguiError("REQUEST_TOO_LARGE")
        value = jsonbody.loads(raw, self.settings.max_json_depth, self.settings.max_json_values)
        # JSON may spell lone surrogates (\ud800) that no UTF-8 file, header or upstream can carry.
        # Only an escaped surrogate can produce one, so the full re-encoding check runs only then.
        if _SURROGATE_ESCAPE.search(raw):
            try:
                json.dumps(value, ensure_ascii=False).encode("utf-8")
            except UnicodeError:
                raise AguiError("INVALID_JSON") from None
        return value

    def _error_response(self, exc: AguiError, language: str) -> Response:
        body = errors.error_body(exc.code, exc.render(lambda message: i18n.translate(message, language)), exc.field)
        response = Response(json.dumps(body, ensure_ascii=False), status=exc.status,
                            content_type="application/json; charset=utf-8")
        for name, value in exc.headers.items():
            response.headers[name] = value
        if exc.code not in ("NOT_FOUND", "METHOD_NOT_ALLOWED"):
            self.metrics.inc("agui_admission_rejections_total", code=exc.code)
        return response

    @staticmethod
    def json_response(value: Any, status: int = 200) -> Response:
        return AguiApp._json(value, status)

    @staticmethod
    def _json(value: Any, status: int = 200) -> Response:
        return Response(json.dumps(value, ensure_ascii=False), status=status,
                        content_type="application/json; charset=utf-8")

    # ---- endpoints ----------------------------------------------------------------------------
    def on_health(self, request: Request, info: Dict[str, Any]) -> Response:
        return self._json({"status": "draining" if self.manager.draining else "ok", "protocol": "ag-ui",
                           "protocolVersion": PROTOCOL_VERSION, "protocolPackageVersion": AGUI_PACKAGE_VERSION,
                           "executionKernel": "a2a-1.0",
                           "serverVersion": self.settings.server_version})

    def on_ready(self, request: Request, info: Dict[str, Any]) -> Response:
        return ready_response(self.readiness)

    def on_metrics(self, request: Request, info: Dict[str, Any]) -> Response:
        return Response(self.metrics.render(), content_type="text/plain; version=0.0.4; charset=utf-8")

    def on_console_page(self, request: Request, info: Dict[str, Any]) -> Response:
        assert self.console is not None
        return self.console.page(request)

    def on_console_asset(self, request: Request, info: Dict[str, Any], name: str) -> Response:
        assert self.console is not None
        return self.console.asset(request, name)

    def on_cancel(self, request: Request, info: Dict[str, Any], execution_id: str) -> Response:
        body = self._read_json(request, min(self.settings.max_request_bytes, self.settings.max_cancel_bytes))
        info["language"] = inputs.request_language(body, request.headers.get("Accept-Language"),
                                                   self.settings.default_language)
        thread_id, ros_invocation_id = inputs.parse_cancel_request(body)
        info["thread"] = thread_id
        return self._json(self.manager.cancel(execution_id, thread_id, ros_invocation_id))

    def on_subscribe(self, request: Request, info: Dict[str, Any], execution_id: str) -> Any:
        """A read-only observer of a live or recently finished run, served from its log."""
        body = self._read_json(request, min(self.settings.max_request_bytes, self.settings.max_cancel_bytes))
        language = inputs.request_language(body, request.headers.get("Accept-Language"),
                                           self.settings.default_language)
        info["language"] = language
        ask = inputs.parse_subscribe_request(body)
        info["thread"], info["run"] = ask.thread_id, ask.run_id
        self._reserve_stream()
        try:
            run, sub = self.manager.log_attach.observe(execution_id, ask.thread_id, ask.run_id,
                                                       ask.ros_invocation_id, ask.after_sequence, language)
        except BaseException:
            self._streams.add(-1)
            raise
        return self._stream(request, info, run, sub, route="subscribe")

    def on_run(self, request: Request, info: Dict[str, Any]) -> Any:
        body = self._read_json(request, self.settings.max_request_bytes)
        language = inputs.request_language(body, request.headers.get("Accept-Language"),
                                           self.settings.default_language)
        info["language"] = language
        check_session_header(request.headers, body)
        run_request = inputs.parse_run_request(body, self.settings.allowed_cwds, self.input_policy,
                                               self.settings.max_messages)
        self.note_run_request(info, run_request)
        last_event_id = _last_event_id(request)
        self._reserve_stream()
        try:
            # The run's thread starts once RUN_STARTED (already queued) has been handed to the server, so the
            # first byte does not wait for a thread to be created.
            run, sub = self.manager.start(run_request, language, last_event_id, start_thread=False)
        except BaseException:
            self._streams.add(-1)
            raise
        return self._stream(request, info, run, sub, route="run")

    def on_agentcore_run(self, request: Request, info: Dict[str, Any]) -> Any:
        return self.agentcore.run(request, info)

    def on_agentcore_stop(self, request: Request, info: Dict[str, Any]) -> Response:
        return self.agentcore.stop(request, info)

    def on_capabilities(self, request: Request, info: Dict[str, Any]) -> Response:
        return self.agentcore.capabilities(request, info)

    def on_thread_messages(self, request: Request, info: Dict[str, Any], thread_id: str) -> Response:
        return self._json(self.thread_messages(request, info, thread_id))

    def on_agentcore_thread_messages(self, request: Request, info: Dict[str, Any], thread_id: str) -> Response:
        return self.agentcore.thread_messages(request, info, thread_id)

    def thread_messages(self, request: Request, info: Dict[str, Any], thread_id: str) -> Dict[str, Any]:
        """A thread's stored conversation (both route families): 404 for a thread with neither state nor one."""
        info["thread"] = thread_id
        if not inputs.is_identifier(thread_id):
            raise AguiError("INVALID_INPUT", errors.MSG_THREAD_ID_INVALID)
        check_session_header(request.headers, {"threadId": thread_id})
        try:
            history = self.manager.history.load(thread_id)
            if history is None and self.store.load(thread_id) is None:
                raise AguiError("THREAD_NOT_FOUND")
        except StateError:
            raise AguiError("STATE_UNAVAILABLE")
        return {"threadId": thread_id, "messages": history.messages if history is not None else [],
                "truncated": history is not None and history.truncated}

    def on_file(self, request: Request, info: Dict[str, Any], token: str) -> Response:
        return self.agentcore.file(request, info, token)

    def stream_response(self, request: Request, info: Dict[str, Any], run: Run, sub: Subscription,
                        headers: Iterable[Tuple[str, str]] = ()) -> SSEBody:
        """The SSE body of an admitted (or re-attached) run, for the AgentCore route family.

        The caller took the stream slot first (``reserve_stream``); closing the body gives it back.
        """
        return self._stream(request, info, run, sub, route=info["route"], headers=headers)

    def reserve_stream(self) -> None:
        self._reserve_stream()

    def release_stream(self) -> None:
        """Give back a slot ``reserve_stream`` took for a stream that never started."""
        self._streams.add(-1)

    def _reserve_stream(self) -> None:
        """Take a stream slot or answer 429.

        A stream holds a server worker until its last byte is written, even after its run ended, so open
        streams count against the same cap as active runs: past it a client gets 429, not a hang.
        """
        if not self._streams.add_below(1, self.settings.max_active_runs):
            raise AguiError("RUNTIME_CAPACITY_EXCEEDED", headers={"Retry-After": "1"})

    def _stream(self, request: Request, info: Dict[str, Any], run: Run, sub: Subscription, route: str,
                headers: Iterable[Tuple[str, str]] = ()) -> SSEBody:
        """The SSE response for a stream whose slot ``_reserve_stream`` took; closing it gives the slot back."""
        started = time.monotonic()

        def on_close(finished: bool) -> None:
            self._streams.add(-1)
            worker = run.worker
            info["outcome"] = worker.outcome if worker is not None and worker.finished else "disconnected"
            info["code"] = worker.error_code if worker is not None else None
            self._access(request, 200, started, info)
            run.client_closed(finished)

        self.metrics.inc("agui_http_requests_total", route=route, status="200")
        sub.gone = client_disconnect_probe(request.environ)
        return SSEBody(sub, heartbeat=self.settings.heartbeat_interval, poll=self.settings.disconnect_poll,
                       client_gone=sub.gone, on_close=on_close,
                       on_heartbeat=self._heartbeats.bump,
                       after_first_write=run.worker.start_or_fail if run.worker is not None else None,
                       headers=list(headers))


def _last_event_id(request: Request) -> Optional[int]:
    raw = request.headers.get("Last-Event-ID")
    if raw is None:
        return None
    raw = raw.strip()
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 15:
        raise AguiError("INVALID_INPUT", errors.MSG_LAST_EVENT_ID)
    return int(raw)


def create_app(settings: Optional[Settings] = None, **kwargs: Any) -> AguiApp:
    """The WSGI application for ``settings`` (defaults read from the environment)."""
    return AguiApp(settings or Settings(), **kwargs)

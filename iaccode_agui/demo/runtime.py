"""``ScriptedRuntime``: a WSGI application that speaks A2A 1.0 JSON-RPC the way ``iac-code a2a`` 0.16 does.

It exists so the adapter, its tests and its benchmarks can run against a real HTTP peer without an LLM.
Routing, auth and the JSON-RPC envelope live here; what a turn says lives in ``scenarios``; task state and
fan-out live in ``tasks``; the SSE body lives in ``streams``.
"""
import hmac
import json
import os
import threading
import time
import uuid
from typing import Any, Callable, Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple
from urllib.parse import parse_qs

from iaccode_agui.demo import scenarios, tools, wire
from iaccode_agui.demo import pipelines as pipeline
from iaccode_agui.demo.messages import (answered_input, echo_user_message, iac_metadata, user_text,
                                        validate_message)
from iaccode_agui.demo.persistence import open_disk
from iaccode_agui.demo.streams import EventStream
from iaccode_agui.demo.tasks import ABORT, END, ERROR, SUBMITTED, WORKING, Subscriber, TaskRecord, TaskStore
from iaccode_agui.demo.turns import Turn, start_producer

MAX_BODY = 32 * 1024 * 1024
EXTENSIONS = (
    {"uri": "urn:iac-code:a2a:artifact-metadata:v1"},
    {"uri": "urn:iac-code:a2a:execution-control:v1",
     "params": {"sessionRestoreEndpoint": "/iac-code/session/ensure-restored"}},
    {"uri": "urn:iac-code:a2a:thinking-exposure:v1", "params": {"enabledTypes": ["raw_thinking", "tool_trace"]}},
    {"uri": "urn:iac-code:a2a:pipeline-events:v1",
     "params": {"stateEndpoint": "/iac-code/pipeline/state",
                "eventBatchMetadataPath": "metadata.iac_code.pipelineBatch.events"}},
)
# run_mode -> scenario chooser(user text, iac_code metadata).
Chooser = Callable[[str, Dict[str, Any]], Tuple[scenarios.Scenario, Dict[str, Any]]]
RUN_MODES: Dict[str, Chooser] = {"normal": scenarios.select, "pipeline": pipeline.select}
SIDEBAND_ONLY = "Candidate permissions are answered with SendMessage."
# Every scenario by name, for tasks loaded back from disk (names are unique across run modes).
_BY_NAME: Dict[str, scenarios.Scenario] = {
    item.name: item for item in scenarios.PLAYBOOK + (scenarios.DEFAULT,) + pipeline.PLAYBOOK + (pipeline.SELLING,)}


def scenario_named(name: Optional[str]) -> Optional[scenarios.Scenario]:
    return _BY_NAME.get(name) if isinstance(name, str) else None

StartResponse = Callable[..., Any]


class ScriptedRuntime:
    """The WSGI callable; one instance holds every task of one demo server."""

    def __init__(self, token: Optional[str] = None, *, ping_interval: float = 15.0, slow_interval: float = 1.0,
                 allowed_cwds: Sequence[str] = (), state_dir: Optional[str] = None) -> None:
        """``state_dir``: where sessions and tasks are kept across restarts (None: in memory only)."""
        if ping_interval <= 0 or slow_interval < 0:
            raise ValueError("ping_interval must be positive and slow_interval non-negative")
        self.token = token
        self.ping_interval = ping_interval
        self.slow_interval = slow_interval
        self.allowed_cwds = [os.path.realpath(os.path.expanduser(root)) for root in allowed_cwds]
        self.store = TaskStore(time.monotonic, disk=open_disk(state_dir), scenario_named=scenario_named)
        self.tool_executions: List[Tuple[str, str]] = []
        self.requests_log: List[Tuple[str, Optional[str]]] = []
        self.http_log: List[Tuple[str, str]] = []
        self._producers: List[threading.Thread] = []
        self._streams_lock = threading.Lock()
        self._open_streams = 0
        self._routes: Dict[str, Dict[str, Callable[..., Iterable[bytes]]]] = {
            "/": {"POST": self._rpc},
            "/health": {"GET": self._health},
            "/.well-known/agent-card.json": {"GET": self._agent_card},
            "/iac-code/session/ensure-restored": {"POST": self._ensure_restored},
            "/iac-code/pipeline/state": {"GET": self._pipeline_state},
        }
        self._methods = {
            "SendStreamingMessage": self._send_streaming, "SendMessage": self._send_message,
            "GetTask": self._get_task, "CancelTask": self._cancel_task, "SubscribeToTask": self._subscribe,
        }

    # --- WSGI -------------------------------------------------------------------------------------------
    def __call__(self, environ: Dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        method = environ.get("REQUEST_METHOD", "GET")
        path = environ.get("PATH_INFO") or "/"
        self.http_log.append((method, path))
        if not self._authorized(environ):
            return _json(start_response, "401 Unauthorized", {"error": "Unauthorized"})
        handlers = self._routes.get(path)
        if handlers is None:
            return _text(start_response, "404 Not Found", "Not Found")
        handler = handlers.get(method)
        if handler is None:
            return _text(start_response, "405 Method Not Allowed", "Method Not Allowed")
        return handler(environ, start_response)

    @property
    def open_streams(self) -> int:
        """SSE bodies not yet closed by the server (tests use it to see a disconnect noticed)."""
        with self._streams_lock:
            return self._open_streams

    @property
    def active_turns(self) -> int:
        """Producer threads still running a scripted turn."""
        return sum(1 for thread in list(self._producers) if thread.is_alive())

    def shutdown(self, timeout: float = 5.0) -> None:
        """Stop every producer and open stream promptly (used by ``DemoServer.stop``)."""
        self.store.stop()
        deadline = time.monotonic() + timeout
        for thread in list(self._producers):
            thread.join(max(0.0, deadline - time.monotonic()))

    def _authorized(self, environ: Dict[str, Any]) -> bool:
        if not self.token:
            return True
        header = environ.get("HTTP_AUTHORIZATION", "")
        expected = "Bearer " + self.token
        return hmac.compare_digest(header.encode("utf-8"), expected.encode("utf-8"))

    # --- side endpoints ---------------------------------------------------------------------------------
    def _health(self, environ: Dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        return _json(start_response, "200 OK", {"status": "healthy", "version": "demo", "mode": "normal"})

    def _agent_card(self, environ: Dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        host = environ.get("HTTP_HOST") or "%s:%s" % (environ.get("SERVER_NAME"), environ.get("SERVER_PORT"))
        base = "%s://%s/" % (environ.get("wsgi.url_scheme", "http"), host)
        card = {
            "name": "iac-code (scripted demo)",
            "description": "Scripted stand-in for the iac-code A2A runtime; no LLM, no cloud calls.",
            "supportedInterfaces": [{"url": base, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
            "version": "demo",
            "capabilities": {"streaming": True, "pushNotifications": False, "extensions": list(EXTENSIONS)},
            "securitySchemes": {"bearerAuth": {"httpAuthSecurityScheme": {"scheme": "Bearer"}}},
            "defaultInputModes": ["text/plain", "application/json"],
            "defaultOutputModes": ["text/plain", "application/json"],
            "skills": [{"id": name.replace(" ", "-"), "name": name, "description": text, "tags": ["demo"]}
                       for name, text in scenarios.SCENARIOS.items()],
        }
        return _json(start_response, "200 OK", card)

    def _ensure_restored(self, environ: Dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        try:
            body = json.loads(_read_body(environ) or b"null")
        except ValueError:
            body = None
        if not isinstance(body, dict) or not isinstance(body.get("sessionId"), str):
            return _json(start_response, "400 Bad Request", {"error": "Invalid session restore request"})
        session_id = body["sessionId"]
        task = self.store.get(body.get("taskId"))
        known = self.store.knows_session(session_id)
        if body.get("taskId") is not None and (task is None or task.session_id != session_id):
            known = False
        if not known:
            return _json(start_response, "404 Not Found", {"error": "A2A session not found"})
        return _json(start_response, "200 OK", {"status": "current"})

    def _pipeline_state(self, environ: Dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        query = parse_qs(environ.get("QUERY_STRING", ""))
        task = self.store.get((query.get("taskId") or [None])[0])
        try:
            after = int((query.get("afterSequence") or ["0"])[0])
        except ValueError:
            after = 0
        state = None
        if task is not None and task.scenario is not None:
            state = task.scenario.pipeline_state(task.scenario_state, after)
        if state is None:
            return _json(start_response, "404 Not Found", {"error": "A2A pipeline state not found"})
        return _json(start_response, "200 OK", state)

    # --- JSON-RPC ---------------------------------------------------------------------------------------
    def _rpc(self, environ: Dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        body = _read_body(environ)
        if body is None:
            return _json(start_response, "413 Request Entity Too Large", {"error": "Request body too large"})
        try:
            request = json.loads(body)
        except ValueError as exc:
            return _rpc_error(start_response, wire.RpcError(wire.PARSE_ERROR, str(exc), with_info=False), None)
        rpc_id = request.get("id") if isinstance(request, dict) else None
        try:
            method, params = self._envelope(request, environ)
            return self._methods[method](environ, start_response, rpc_id, params)
        except wire.RpcError as error:
            if error.code == wire.INVALID_REQUEST:
                rpc_id = rpc_id if _valid_id(rpc_id) else None
            return _rpc_error(start_response, error, rpc_id)

    def _envelope(self, request: Any, environ: Dict[str, Any]) -> Tuple[str, Dict[str, Any]]:
        if isinstance(request, list):
            raise wire.RpcError(wire.INVALID_REQUEST, "Batch requests are not supported")
        if not isinstance(request, dict) or request.get("jsonrpc") != "2.0" or not _valid_id(request.get("id")):
            raise wire.RpcError(wire.INVALID_REQUEST, "Invalid Request")
        method = request.get("method")
        if not isinstance(method, str):
            raise wire.RpcError(wire.INVALID_REQUEST, "Invalid Request")
        params = request.get("params", {})
        params = {} if params is None else params
        task_ref = None
        if isinstance(params, dict):
            message = params.get("message")
            task_ref = message.get("taskId") if isinstance(message, dict) else params.get("id")
        self.requests_log.append((method, task_ref if isinstance(task_ref, str) else None))
        version = environ.get("HTTP_A2A_VERSION", "").strip() or "0.3"
        if version.split(".")[0] != "1":
            raise wire.RpcError(wire.VERSION_NOT_SUPPORTED,
                                "A2A version '%s' is not supported by this handler. Expected version '1.0'."
                                % version)
        if method not in self._methods:
            raise wire.RpcError(wire.METHOD_NOT_FOUND, "Method not found", with_info=False)
        if not isinstance(params, dict):
            raise wire.RpcError(wire.INVALID_PARAMS, "Validation failed", [("params", "Must be an object.")])
        return method, params

    def _get_task(self, environ: Dict[str, Any], start_response: StartResponse, rpc_id: Any,
                  params: Dict[str, Any]) -> Iterable[bytes]:
        task = self._task_param(params)
        history_length = _history_length(params.get("historyLength"))
        return _rpc_result(start_response, task.snapshot(history_length), rpc_id)

    def _cancel_task(self, environ: Dict[str, Any], start_response: StartResponse, rpc_id: Any,
                     params: Dict[str, Any]) -> Iterable[bytes]:
        task = self._task_param(params)
        message = {"messageId": task.id + "-5", "contextId": task.context_id, "taskId": task.id,
                   "role": "ROLE_AGENT", "parts": [{"text": "Task canceled."}]}
        return _rpc_result(start_response, task.cancel(message), rpc_id)

    def _subscribe(self, environ: Dict[str, Any], start_response: StartResponse, rpc_id: Any,
                   params: Dict[str, Any]) -> Iterable[bytes]:
        task = self._task_param(params)
        sub = task.subscribe(None)
        return self._stream(environ, start_response, sub, rpc_id, pings=True)

    def _task_param(self, params: Dict[str, Any]) -> TaskRecord:
        task_id = params.get("id")
        if not isinstance(task_id, str) or not task_id:
            raise wire.RpcError(wire.INVALID_PARAMS, "Validation failed", [("id", "Field is required.")])
        task = self.store.get(task_id)
        if task is None:
            raise wire.RpcError(wire.TASK_NOT_FOUND, "Task not found")
        return task

    # --- messages ---------------------------------------------------------------------------------------
    def _send_streaming(self, environ: Dict[str, Any], start_response: StartResponse, rpc_id: Any,
                        params: Dict[str, Any]) -> Iterable[bytes]:
        accepted = self._accept_message(params, streaming=True)
        return self._stream(environ, start_response, accepted.sub, rpc_id, pings=accepted.pings)

    def _send_message(self, environ: Dict[str, Any], start_response: StartResponse, rpc_id: Any,
                      params: Dict[str, Any]) -> Iterable[bytes]:
        """Blocking send: the Task once the turn parks or ends (or at once with ``returnImmediately``).

        A sideband permission answer gets a Message back instead, at once (its effects run in the
        background and are seen through SubscribeToTask) unless the scenario holds it until the task parks.
        """
        configuration = _configuration(params)
        history_length = _history_length(configuration.get("historyLength"))
        accepted = self._accept_message(params, streaming=False)
        task, sub = accepted.task, accepted.sub
        if sub is not None:
            try:
                if not configuration.get("returnImmediately"):
                    self._drain(sub)
            finally:
                task.unsubscribe(sub)
        if accepted.ack is not None:
            return _rpc_result(start_response, {"message": accepted.ack}, rpc_id)
        return _rpc_result(start_response, {"task": task.snapshot(history_length)}, rpc_id)

    def _drain(self, sub: Any) -> None:
        while not self.store.stopping:
            for kind, payload in sub.take(0.5):
                if kind == ERROR:
                    raise wire.RpcError(payload["code"], payload["message"], with_info=False)
                if kind == ABORT:
                    raise wire.RpcError(wire.INTERNAL_ERROR, "The scripted runtime dropped the turn.",
                                        with_info=False)
                if kind == END:
                    return

    def _accept_message(self, params: Dict[str, Any], streaming: bool) -> "Accepted":
        """Validate a message, claim its task and start the producer; errors surface before any SSE."""
        message = validate_message(params)
        _configuration(params)
        iac = iac_metadata(message)
        if isinstance(message.get("taskId"), str):
            return self._continue_task(message, streaming)
        return self._new_task(message, iac)

    def _new_task(self, message: Dict[str, Any], iac: Dict[str, Any]) -> "Accepted":
        run_mode = iac.get("run_mode", "normal")
        chooser = RUN_MODES.get(run_mode) if isinstance(run_mode, str) else None
        if chooser is None:
            raise wire.RpcError(wire.INVALID_PARAMS, "Unsupported run mode.")
        text = user_text(message)
        scenario, scenario_params = chooser(text, iac)
        task = self.store.create(message.get("contextId") or str(uuid.uuid4()))
        task.scenario = scenario
        task.scenario_state.update(scenario_params)
        task.cwd = iac.get("cwd") if isinstance(iac.get("cwd"), str) else None
        task.language = tools.normalize_language(iac.get("preferredLanguage"))
        workspace_ok = self._workspace_allowed(iac.get("cwd"))
        first = None
        if scenario.announce or not workspace_ok:
            first = {"task": {"id": task.id, "contextId": task.context_id, "status": {"state": SUBMITTED},
                              "history": [echo_user_message(message, task.id, task.context_id)]}}
        turn = self._turn(task, text)

        def body() -> None:
            if not workspace_ok:
                turn.submitted()
                turn.fail("Invalid A2A workspace metadata.")
                return
            if scenario.announce:
                turn.submitted()
                turn.working()
            scenario.start(turn)

        sub = task.claim_turn(None, first)
        start_producer("demo-turn-" + task.id[:8], body, task, self._producers)
        return Accepted(task, sub, scenario.pings)

    def _continue_task(self, message: Dict[str, Any], streaming: bool) -> "Accepted":
        task = self.store.get(message["taskId"])
        if task is None:
            raise wire.RpcError(wire.TASK_NOT_FOUND, "Task not found")
        context_id = message.get("contextId")
        if context_id is not None and context_id != task.context_id:
            raise wire.RpcError(wire.INVALID_PARAMS, "Context %s does not match context %s of task %s"
                                % (context_id, task.context_id, task.id))
        text = user_text(message)
        turn = self._turn(task, text)
        plan: Dict[str, Any] = {}

        def prepare() -> None:
            """Runs under the task lock, so two racing answers cannot both be accepted."""
            pending, decision, sideband = answered_input(task.iac, message, text, task.id)
            if sideband and streaming:
                raise wire.RpcError(wire.INVALID_PARAMS, SIDEBAND_ONLY)
            plan.update(pending=pending, decision=decision, sideband=sideband)
            if sideband:
                left = [entry for entry in task.iac.get("pendingPermissions", []) if entry is not pending]
                task.iac.pop("pendingPermissions", None)
                if left:
                    task.iac["pendingPermissions"] = left
                # accepted without a stream: GetTask must already show the task working again
                task.status = {"state": WORKING, "timestamp": wire.utc_timestamp()}
                turn.follow_mark = task.mark()
            elif pending is not None:
                task.iac.pop("input", None)
                task.iac.pop("permission", None)

        sub = task.claim_turn(prepare, None)
        ack = None
        if plan["sideband"]:
            ack = _permission_ack(task, message)
            if not task.scenario.holds_ack(task.scenario_state):
                task.unsubscribe(sub)  # acknowledged at once; the work below is only seen by subscribers
                sub = None

        def body() -> None:
            if plan["pending"] is None:
                turn.working()
                scenarios.greet(turn)
                return
            task.scenario.resume(turn, plan["pending"], text, plan["decision"])

        start_producer("demo-turn-" + task.id[:8], body, task, self._producers)
        return Accepted(task, sub, True, ack)

    def _turn(self, task: TaskRecord, text: str) -> Turn:
        self._producers[:] = [t for t in self._producers if t.is_alive()]
        return Turn(task, text, slow_interval=self.slow_interval,
                    record_tool=lambda task_id, tool_use_id: self.tool_executions.append((task_id, tool_use_id)))

    def _workspace_allowed(self, cwd: Any) -> bool:
        """The runtime's cwd policy: when roots are configured, a cwd must be absolute and inside one."""
        if cwd is None or not self.allowed_cwds:
            return True
        if not isinstance(cwd, str) or not os.path.isabs(os.path.expanduser(cwd)):
            return False
        resolved = os.path.realpath(os.path.expanduser(cwd))
        return any(resolved == root or resolved.startswith(root.rstrip(os.sep) + os.sep)
                   for root in self.allowed_cwds)

    def _stream(self, environ: Dict[str, Any], start_response: StartResponse, sub: Any, rpc_id: Any,
                pings: bool) -> Iterable[bytes]:
        write = start_response("200 OK", [("Content-Type", wire.SSE_CONTENT_TYPE), ("Cache-Control", "no-store"),
                                          ("X-Accel-Buffering", "no")])
        with self._streams_lock:
            self._open_streams += 1
        return EventStream(sub, rpc_id, write=write, environ=environ, ping_interval=self.ping_interval,
                           pings=pings, on_close=self._stream_closed)

    def _stream_closed(self) -> None:
        with self._streams_lock:
            self._open_streams -= 1


# --- helpers ---------------------------------------------------------------------------------------------
class Accepted(NamedTuple):
    """A message the runtime took: its task, the mailbox of its stream (None: no stream), its ack."""
    task: TaskRecord
    sub: Optional[Subscriber]
    pings: bool
    ack: Optional[Dict[str, Any]] = None


def _valid_id(rpc_id: Any) -> bool:
    return rpc_id is None or (isinstance(rpc_id, (str, int)) and not isinstance(rpc_id, bool))


def _configuration(params: Dict[str, Any]) -> Dict[str, Any]:
    configuration = params.get("configuration")
    if configuration is None:
        return {}
    if not isinstance(configuration, dict):
        raise wire.RpcError(wire.INVALID_PARAMS, "Validation failed", [("configuration", "Must be an object.")])
    return configuration


def _history_length(value: Any) -> Optional[int]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value or value < 0:
        raise wire.RpcError(wire.INVALID_PARAMS, "Validation failed",
                            [("historyLength", "Must be a non-negative integer.")])
    return int(value)


def _read_body(environ: Dict[str, Any]) -> Optional[bytes]:
    stream = environ.get("wsgi.input")
    if stream is None:
        return b""
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0
    if length > MAX_BODY:
        return None
    if length:
        return stream.read(length)
    if environ.get("wsgi.input_terminated"):
        data = stream.read(MAX_BODY + 1)
        return None if len(data) > MAX_BODY else data
    return b""


def _json(start_response: StartResponse, status: str, body: Any) -> List[bytes]:
    data = wire.dumps_body(body)
    start_response(status, [("Content-Type", wire.JSON_CONTENT_TYPE), ("Content-Length", str(len(data)))])
    return [data]


def _text(start_response: StartResponse, status: str, text: str) -> List[bytes]:
    data = text.encode("utf-8")
    start_response(status, [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(data)))])
    return [data]


def _permission_ack(task: TaskRecord, message: Dict[str, Any]) -> Dict[str, Any]:
    """The Message a sideband permission answer gets back (instead of the Task)."""
    data = next(part["data"] for part in message["parts"] if isinstance(part.get("data"), dict))
    return {"messageId": "ack-" + uuid.uuid4().hex[:12], "contextId": task.context_id, "taskId": task.id,
            "role": "ROLE_AGENT", "parts": [{"data": {"kind": "permission_ack", "inputId": data["inputId"]}}]}


def _raw_json(start_response: StartResponse, data: bytes) -> List[bytes]:
    start_response("200 OK", [("Content-Type", wire.JSON_CONTENT_TYPE), ("Content-Length", str(len(data)))])
    return [data]


def _rpc_result(start_response: StartResponse, result: Any, rpc_id: Any) -> List[bytes]:
    return _raw_json(start_response, wire.result_body(result, rpc_id))


def _rpc_error(start_response: StartResponse, error: wire.RpcError, rpc_id: Any) -> List[bytes]:
    return _raw_json(start_response, wire.error_body(error.to_error(), rpc_id))

"""Handlers of the AgentCore-compatible routes; the WSGI app routes to them and renders their errors.

Each handler speaks AgentCore at its edges (codes through ``errors.agentcore_error``, the session
header on every answer) and the run core's own API in between.
"""
from typing import Any, Dict, Optional, Tuple
from urllib.parse import quote

from werkzeug.wrappers import Request, Response
from werkzeug.wsgi import wrap_file

from iaccode_agui import errors
from iaccode_agui.web import inputs
from iaccode_agui.agentcore import requests as ac_requests
from iaccode_agui.agentcore.capabilities import capabilities
from iaccode_agui.agentcore.published_files import FileLinks, RunFilePublisher
from iaccode_agui.agentcore.runtime_probe import RuntimeProbe
from iaccode_agui.agentcore.shaping import AgentCoreShaper
from iaccode_agui.agentcore.stop import stop_run
from iaccode_agui.errors import AguiError
from iaccode_agui.sse.channel import Subscription
from iaccode_agui.runs.profile import RunProfile
from iaccode_agui.runs.run import Run

SESSION_HEADER = ac_requests.SESSION_HEADER
PROFILE_NAME = "agentcore"


class AgentCoreRoutes:
    def __init__(self, app: Any) -> None:
        self.app = app
        settings = app.settings
        self.settings = settings
        self.manager = app.manager
        self.probe = RuntimeProbe(app.client)
        self.policy = inputs.InputPolicy(default_cwd=settings.default_cwd, agentcore=True,
                                         max_image_bytes=settings.max_image_bytes,
                                         max_images_bytes=settings.max_images_bytes,
                                         client_tools=settings.client_tools)
        self.links = FileLinks(settings.file_link_ttl, settings.max_file_links) if settings.publish_files else None
        self.manager.profiles.register(PROFILE_NAME, self.rebuild_profile)

    def profile(self, request: Request, workspace: str) -> RunProfile:
        """How the core shapes this run's events (with file links when enabled)."""
        return self.rebuild_profile({"workspace": workspace, "base": request.url_root})

    def rebuild_profile(self, args: Dict[str, Any]) -> RunProfile:
        """The profile from what a run log header records: the run's workspace and the links' base URL
        (the size limit and whether files are published are this process's settings)."""
        links, limit = self.links, self.settings.max_sse_event_bytes
        workspace, base = str(args.get("workspace") or ""), str(args.get("base") or "/")

        def shaper(language: str) -> AgentCoreShaper:
            files = RunFilePublisher(links, workspace, base) if links is not None else None
            return AgentCoreShaper(language, limit, files)
        return RunProfile(name=PROFILE_NAME, shaper=shaper, args={"workspace": workspace, "base": base})

    # ---- POST /ag-ui/agent ----------------------------------------------------------------------
    def run(self, request: Request, info: Dict[str, Any]) -> Any:
        thread_id: Optional[str] = None
        try:
            body = self._read(request, self.settings.agentcore_max_request_bytes)
            thread_id = ac_requests.body_thread_id(body)
            info["language"] = inputs.request_language(body, request.headers.get("Accept-Language"),
                                                       self.settings.default_language)
            ac_requests.check_session_header(request.headers, body)
            attach = ac_requests.attach_request(body)
            run_request = None
            if attach is not None:
                info["thread"], info["run"] = attach.thread_id, attach.run_id
            else:
                run_request = inputs.parse_run_request(body, self.settings.allowed_cwds, self.policy,
                                                       self.settings.max_messages)
                self.app.note_run_request(info, run_request)
                if self.manager.draining:
                    raise AguiError("RUNTIME_DRAINING", headers={"Retry-After": "5"})
                self.probe.check()
            # A stream holds a server worker to its last byte: it takes a slot as POST / does.
            self.app.reserve_stream()
            try:
                run, sub = self._open(request, info, attach, run_request)
            except BaseException:
                self.app.release_stream()
                raise
        except AguiError as exc:
            raise self._mapped(exc, thread_id, request)
        return self.app.stream_response(request, info, run, sub, headers=[(SESSION_HEADER, run.thread_id)])

    def _open(self, request: Request, info: Dict[str, Any], attach: Any,
              run_request: Any) -> Tuple[Run, Subscription]:
        """Attach to a run, or start one that no missing client can cancel (it has an explicit stop)."""
        if attach is not None:
            attached = self.manager.attach(attach.thread_id, attach.run_id, attach.after_sequence,
                                           language=info["language"])
            if attached is None:
                raise AguiError("RUN_NOT_FOUND")
            return attached
        # The run's thread starts once the response's first bytes are out (as on POST /).
        return self.manager.start(run_request, info["language"], start_thread=False, keep_without_client=True,
                                  profile=self.profile(request, run_request.cwd))

    # ---- POST /ag-ui/agent/stop -----------------------------------------------------------------
    def stop(self, request: Request, info: Dict[str, Any]) -> Response:
        thread_id: Optional[str] = None
        try:
            body = self._read(request, self.settings.max_cancel_bytes)
            thread_id = ac_requests.body_thread_id(body)
            info["language"] = inputs.request_language(body, request.headers.get("Accept-Language"),
                                                       self.settings.default_language)
            thread_id, run_id = ac_requests.stop_request(body)
            ac_requests.check_session_header(request.headers, body)
            info["thread"], info["run"] = thread_id, run_id
            stop_run(self.manager, thread_id, run_id)
        except AguiError as exc:
            raise self._mapped(exc, thread_id, request)
        response = Response(status=204)
        response.headers[SESSION_HEADER] = thread_id
        return response

    # ---- GET /capabilities, /ag-ui/agent/capabilities ------------------------------------------------
    def capabilities(self, request: Request, info: Dict[str, Any]) -> Response:
        document = capabilities(self.settings, generic_upstream=self.manager.upstream_is_generic(),
                                draining=self.manager.draining, prefix=request.script_root)
        return self.app.json_response(document)

    # ---- GET /ag-ui/agent/threads/<threadId>/messages ------------------------------------------------
    def thread_messages(self, request: Request, info: Dict[str, Any], thread_id: str) -> Response:
        try:
            document = self.app.thread_messages(request, info, thread_id)
        except AguiError as exc:
            raise self._mapped(exc, thread_id, request)
        response = self.app.json_response(document)
        if thread_id.isascii() and thread_id.isprintable():     # a header carries nothing else unchanged
            response.headers[SESSION_HEADER] = thread_id
        return response

    # ---- GET /ag-ui/files/<token> -------------------------------------------------------------------
    def file(self, request: Request, info: Dict[str, Any], token: str) -> Response:
        if self.links is None:
            raise AguiError("NOT_FOUND")
        handle, size, link = self.links.open(token)
        response = Response(wrap_file(request.environ, handle), mimetype=link.mime_type, direct_passthrough=True)
        response.content_length = size
        response.headers["Content-Disposition"] = "attachment; filename*=UTF-8''" + quote(link.file_name, safe="")
        response.headers["Cache-Control"] = "no-store"
        response.headers["X-Content-Type-Options"] = "nosniff"
        return response

    # ---- helpers ----------------------------------------------------------------------------------
    def _read(self, request: Request, limit: int) -> Any:
        try:
            return self.app.read_json(request, limit)
        except AguiError as exc:
            if exc.code != "REQUEST_TOO_LARGE":
                raise
            raise AguiError("PAYLOAD_TOO_LARGE", errors.MSG_BODY_OVER_LIMIT,
                            params={"limit": inputs.format_bytes(limit)})

    @staticmethod
    def _mapped(exc: AguiError, thread_id: Optional[str], request: Request) -> AguiError:
        """The AgentCore form of a refusal, echoing the session: the body's thread, else (a body that could
        not be read) the client's own header, so a router keyed on it still sees every answer."""
        mapped = errors.agentcore_error(exc)
        session = thread_id if thread_id is not None else request.headers.get(SESSION_HEADER)
        if session is not None and inputs.is_identifier(session):
            mapped.headers[SESSION_HEADER] = session
        return mapped

"""Entry point for pre-forking WSGI servers: ``gunicorn 'iaccode_agui.wsgi:create_app()'``.

Worker processes that share one state directory and one A2A runtime behave as one server: admission, busy
threads, resumes and cancels go through the state directory, which every worker locks the same way.  So
the settings here are the ones of ``python -m iaccode_agui`` (the same flags, passed as factory arguments,
and the same ``IAC_CODE_AGUI_*`` variables), minus what belongs to the WSGI server (address, port, threads,
drain) and minus the runtimes the adapter would otherwise start itself: each worker would start its own,
and a thread's task lives in exactly one runtime, so a resume landing on another worker would find nothing.

A server that runs one request at a time per process (gunicorn's default ``sync`` worker) is refused: one
open SSE stream would block every other request of that worker, and gunicorn kills a sync worker whose
request outlasts ``--timeout``, taking every live run with it.  Under gunicorn the refusal comes as the
application loads, and so does every other configuration error: one line on stderr, and gunicorn stops
("App failed to load") instead of printing a traceback per worker and booting the next one.  Any other
server that calls the application one request at a time gets ``503 WSGI_SERVER_UNSUPPORTED`` on every
request (``/health`` included, so a load balancer takes the worker out), and the reason is logged once.
"""
import inspect
import json
import logging
import os
import sys
import threading
from typing import Any, Callable, Dict, Iterable, Mapping, Optional, Sequence

from werkzeug.wrappers import Response

from iaccode_agui import errors, i18n
from iaccode_agui.server import cli
from iaccode_agui.web.app import AguiApp
from iaccode_agui.config import ConfigError, normalize_a2a_url

log = logging.getLogger("iaccode_agui.wsgi")

# Flags of ``python -m iaccode_agui`` that the WSGI server owns (its --bind, --threads, --graceful-timeout).
SERVER_FLAGS = ("--host", "--port", "--threads", "--drain-timeout", "--idle-shutdown", "--demo",
                "--log-stdout")


def _refuse_server_flags(argv: Iterable[str]) -> None:
    for item in argv:
        name = item.split("=", 1)[0]
        if name in SERVER_FLAGS:
            raise ConfigError("%s does not apply under a WSGI server: the server owns addresses, threads and "
                              "shutdown, and every worker must use the one runtime given by --a2a-url" % name)


def settings_from_args(argv: Iterable[str], env: Mapping[str, str]) -> Any:
    """Settings from ``python -m iaccode_agui`` flags and ``IAC_CODE_AGUI_*`` variables (flags win)."""
    argv = [str(item) for item in argv]
    _refuse_server_flags(argv)
    parser = cli.build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit:
        raise ConfigError("invalid adapter arguments %r (see python -m iaccode_agui --help)" % (argv,))
    url = args.a2a_url or env.get("IAC_CODE_AGUI_A2A_URL")
    if not url:
        raise ConfigError("set IAC_CODE_AGUI_A2A_URL (or pass --a2a-url): all workers must share the host's one "
                          "A2A runtime, so none may start its own")
    token = args.a2a_token or env.get("IAC_CODE_AGUI_A2A_TOKEN") or None
    return cli.settings_from(args, env, normalize_a2a_url(url), token)


class WorkerApp:
    """The adapter as one worker of a multi-process server; refuses servers that cannot stream."""

    def __init__(self, app: AguiApp) -> None:
        self.app = app
        self.settings = app.settings
        self._warned = threading.Event()

    def __call__(self, environ: Dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("wsgi.multithread") is False:
            return self._refuse(environ, start_response)
        return self.app(environ, start_response)

    def _refuse(self, environ: Dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if not self._warned.is_set():
            self._warned.set()
            log.error("%s runs one request at a time per process: every request is refused with 503 "
                      "WSGI_SERVER_UNSUPPORTED; use a threaded worker (gunicorn -k gthread --threads N)",
                      environ.get("SERVER_SOFTWARE", "this WSGI server"))
        language = i18n.negotiate(environ.get("HTTP_ACCEPT_LANGUAGE"), self.settings.default_language)
        error = errors.AguiError("WSGI_SERVER_UNSUPPORTED")
        body = errors.error_body(error.code, i18n.translate(error.message, language))
        response = Response(json.dumps(body, ensure_ascii=False), status=error.status,
                            content_type="application/json; charset=utf-8")
        return response(environ, start_response)

    def close(self, timeout: float = 10.0) -> None:
        """Stop this worker's runs cleanly (gunicorn's ``worker_exit`` hook in the recipe calls it)."""
        self.app.close(timeout)


def gunicorn_config() -> Any:
    """The configuration of the gunicorn process loading this application, or None outside gunicorn.

    gunicorn calls the factory with its arguments only.  The worker loading it (with ``--preload``, the
    arbiter) is on the call stack, and its public ``cfg`` already names the worker class, so a worker that
    cannot stream is refused before it accepts anything.
    """
    config = sys.modules.get("gunicorn.config")    # gunicorn is no dependency: only ever the one running us
    if config is None:
        return None
    frame = inspect.currentframe()
    try:
        while frame is not None:
            cfg = getattr(frame.f_locals.get("self"), "cfg", None)
            if isinstance(cfg, config.Config):
                return cfg
            frame = frame.f_back
        return None
    finally:
        del frame


def refuse_sync_worker(cfg: Any) -> None:
    sync = sys.modules.get("gunicorn.workers.sync")    # loaded by gunicorn whenever its worker class is one
    if sync is not None and issubclass(cfg.worker_class, sync.SyncWorker):
        raise ConfigError("gunicorn's sync worker serves one request at a time, so one open event stream "
                          "blocks the worker and --timeout kills its runs: start gunicorn with --worker-class "
                          "gthread --threads N (N = streams per worker + 8), or -c the recipe in "
                          "`python -m iaccode_agui --print-deploy-dir`")


def create_app(*argv: str, env: Optional[Mapping[str, str]] = None) -> WorkerApp:
    """The WSGI application of one worker; ``argv`` takes the flags of ``python -m iaccode_agui``.

    Under gunicorn a configuration error is gunicorn's own "cannot load the application" error: gunicorn
    prints its one line and stops, where any other exception is a traceback per worker.
    """
    cfg = gunicorn_config()
    try:
        if cfg is not None:
            refuse_sync_worker(cfg)
        return _create(argv, os.environ if env is None else env)
    except ConfigError as exc:
        if cfg is None:
            raise
        if cfg.preload_app:   # loaded by gunicorn's arbiter before any worker exists: a plain exit is one line
            raise SystemExit("iaccode_agui: %s" % exc) from None
        raise sys.modules["gunicorn.errors"].AppImportError("iaccode_agui: %s" % exc) from None


def _create(argv: Sequence[str], env: Mapping[str, str]) -> WorkerApp:
    settings = settings_from_args(argv, env)
    if not logging.getLogger().handlers:   # the adapter's and access logs go to the worker's stderr
        cli.configure_logging("--debug" in argv, False)
    # As at ``python -m iaccode_agui`` start-up: a worker booted on an unusable state directory would answer
    # every run with 503 and leave the reason to the readiness probe.
    cli.check_state_dir(settings.state_dir, "the state directory (--state-dir or IAC_CODE_AGUI_STATE_DIR) is "
                                            "not usable:")
    log.info("worker %d: A2A runtime %s, state dir %s", os.getpid(), settings.a2a_url, settings.state_dir)
    app = AguiApp(settings)
    cli.warn_if_runtime_silent(app)
    return WorkerApp(app)


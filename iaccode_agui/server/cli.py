"""``python -m iaccode_agui``: flags and ``IAC_CODE_AGUI_*`` variables -> Settings -> waitress.

The flags themselves (names, help, the variables' list) are in ``cliflags``; this module resolves them.

Flags win over environment variables, which win over defaults (the same names and defaults as
``iac-code agui``).  The process drains on SIGTERM/SIGINT: it stops admitting runs (503
RUNTIME_DRAINING), lets active runs finish up to ``--drain-timeout``, cancels the rest and exits 0.  A
second signal cancels the active runs at once (cleanly: each client gets its RUN_ERROR, state is written).
"""
import argparse
import errno
import logging
import os
import re
import signal
import socket
import sys
import threading
import time
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from iaccode_agui import __version__, i18n
from iaccode_agui.server.argtypes import at_least, choice, count, flag_or_env, megabytes, port, positive_seconds, seconds
from iaccode_agui.server.flags import EVENT_BYTES, HISTORY_BYTES, POSITIVE_COUNT, SPARE_THREADS, build_parser
from iaccode_agui.config import (AGENTCORE_MAX_REQUEST_BYTES, CLIENT_TOOLS_MODES, DEFAULT_FILE_LINK_TTL,
                                 DEFAULT_HEARTBEAT, DEFAULT_HOST,
                                 DEFAULT_INTERRUPT_TTL, DEFAULT_MAX_JSON_VALUES, DEFAULT_MAX_JSON_DEPTH,
                                 DEFAULT_MAX_MESSAGES, DEFAULT_PORT,
                                 DEFAULT_RELEASE_RUNS, DEFAULT_REPLAY_MEMORY_MB, DEFAULT_RUN_ID_WINDOW,
                                 DEFAULT_RUN_ID_WINDOW_AGE,
                                 DEFAULT_APPLIED_WINDOW, DEFAULT_STREAM_BUFFER_BYTES, MIN_STREAM_BUFFER_BYTES,
                                 DEFAULT_RUN_LOG_MAX_MB, DEFAULT_RUN_LOG_TTL,
                                 DEFAULT_TAKEOVER_GRACE, MAX_FILE_LINKS,
                                 MAX_IMAGE_BYTES, MAX_IMAGES_BYTES, MAX_SSE_EVENT_BYTES, ConfigError, Settings,
                                 default_allowed_cwds, default_state_dir, is_loopback_host, normalize_a2a_url)
from iaccode_agui.config import DEFAULT_HISTORY_MAX_BYTES, DEFAULT_HISTORY_MAX_MESSAGES, MESSAGES_SNAPSHOT_MODES

log = logging.getLogger("iaccode_agui")

# With --demo, the scripted runtime keeps its sessions and tasks here, inside the state directory: a
# restarted demo then still knows every thread the adapter remembers, as a restarted iac-code would.
DEMO_RUNTIME_DIR = "demo-runtime"

def settings_from(args: argparse.Namespace, env: Mapping[str, str], a2a_url: str, a2a_token: Optional[str],
                  state_dir: Optional[str] = None) -> Settings:
    ttl = flag_or_env(args.interrupt_ttl, env, "IAC_CODE_AGUI_INTERRUPT_TTL", DEFAULT_INTERRUPT_TTL, seconds)
    return Settings(
        a2a_url=a2a_url, a2a_token=a2a_token, auth_token=auth_token(args, env),
        state_dir=state_dir or resolve_state_dir(args, env), allowed_cwds=default_allowed_cwds(env),
        interrupt_ttl=ttl, heartbeat_interval=args.heartbeat_interval,
        upstream_idle_timeout=args.upstream_idle_timeout, max_active_runs=run_cap(args),
        reconnect_grace=args.reconnect_grace, upstream_kind=args.upstream_kind,
        default_language=i18n.process_locale_language(env),
        run_log_ttl=flag_or_env(args.run_log_ttl, env, "IAC_CODE_AGUI_RUN_LOG_TTL", DEFAULT_RUN_LOG_TTL, seconds),
        run_log_max_mb=flag_or_env(args.run_log_max_mb, env, "IAC_CODE_AGUI_RUN_LOG_MAX_MB", DEFAULT_RUN_LOG_MAX_MB,
                                   megabytes),
        replay_memory_mb=flag_or_env(args.replay_memory_mb, env, "IAC_CODE_AGUI_REPLAY_MEMORY_MB",
                                      DEFAULT_REPLAY_MEMORY_MB, megabytes),
        memory_release_runs=flag_or_env(args.memory_release_runs, env, "IAC_CODE_AGUI_MEMORY_RELEASE_RUNS",
                                        DEFAULT_RELEASE_RUNS, count),
        console=console_enabled(args, env), **agentcore_settings(args, env), **history_settings(args, env),
        takeover_grace=flag_or_env(args.takeover_grace, env, "IAC_CODE_AGUI_TAKEOVER_GRACE", DEFAULT_TAKEOVER_GRACE,
                                   seconds),
        max_json_depth=flag_or_env(args.max_json_depth, env, "IAC_CODE_AGUI_MAX_JSON_DEPTH", DEFAULT_MAX_JSON_DEPTH,
                                   POSITIVE_COUNT),
        max_messages=flag_or_env(args.max_messages, env, "IAC_CODE_AGUI_MAX_MESSAGES", DEFAULT_MAX_MESSAGES,
                                 POSITIVE_COUNT),
        max_json_values=flag_or_env(args.max_json_values, env, "IAC_CODE_AGUI_MAX_JSON_VALUES",
                                    DEFAULT_MAX_JSON_VALUES, POSITIVE_COUNT),
        run_id_window=flag_or_env(args.run_id_window, env, "IAC_CODE_AGUI_RUN_ID_WINDOW", DEFAULT_RUN_ID_WINDOW,
                                  POSITIVE_COUNT),
        run_id_window_age=flag_or_env(args.run_id_window_age, env, "IAC_CODE_AGUI_RUN_ID_WINDOW_AGE",
                                      DEFAULT_RUN_ID_WINDOW_AGE, positive_seconds),
        applied_window=flag_or_env(args.applied_window, env, "IAC_CODE_AGUI_APPLIED_WINDOW", DEFAULT_APPLIED_WINDOW,
                                   POSITIVE_COUNT),
        stream_buffer_bytes=flag_or_env(args.stream_buffer_bytes, env, "IAC_CODE_AGUI_STREAM_BUFFER_BYTES",
                                        DEFAULT_STREAM_BUFFER_BYTES, at_least(MIN_STREAM_BUFFER_BYTES)))


def _from_env(value: Any, env: Mapping[str, str], name: str, parse: Any, default: Any) -> Any:
    """A flag's value, else its variable's (parsed), else the default."""
    if value is not None:
        return value
    raw = env.get(name)
    if not raw:
        return default
    try:
        return parse(raw)
    except ValueError:
        raise ConfigError("%s has an unusable value %r" % (name, raw))


def _flag(raw: str) -> bool:
    lowered = raw.strip().lower()
    if lowered not in ("1", "true", "yes", "on", "0", "false", "no", "off"):
        raise ValueError(raw)
    return lowered in ("1", "true", "yes", "on")


def history_settings(args: argparse.Namespace, env: Mapping[str, str]) -> Dict[str, Any]:
    """Settings of each thread's stored conversation, from flags and variables."""
    return {
        "history_max_messages": flag_or_env(args.history_max_messages, env, "IAC_CODE_AGUI_HISTORY_MAX_MESSAGES",
                                            DEFAULT_HISTORY_MAX_MESSAGES, POSITIVE_COUNT),
        "history_max_bytes": flag_or_env(args.history_max_bytes, env, "IAC_CODE_AGUI_HISTORY_MAX_BYTES",
                                         DEFAULT_HISTORY_MAX_BYTES, HISTORY_BYTES),
        "messages_snapshot": flag_or_env(args.messages_snapshot, env, "IAC_CODE_AGUI_MESSAGES_SNAPSHOT", "auto",
                                         choice(*MESSAGES_SNAPSHOT_MODES)),
    }


def agentcore_settings(args: argparse.Namespace, env: Mapping[str, str]) -> Dict[str, Any]:
    """Settings of the AgentCore-compatible routes and of server-side defaults, from flags and variables."""
    return {
        "default_cwd": _from_env(args.default_cwd, env, "IAC_CODE_AGUI_DEFAULT_CWD", str, None),
        "publish_files": _from_env(args.publish_files, env, "IAC_CODE_AGUI_PUBLISH_FILES", _flag, False),
        "file_link_ttl": flag_or_env(args.file_link_ttl, env, "IAC_CODE_AGUI_FILE_LINK_TTL", DEFAULT_FILE_LINK_TTL,
                                     positive_seconds),
        "max_file_links": flag_or_env(args.max_file_links, env, "IAC_CODE_AGUI_MAX_FILE_LINKS", MAX_FILE_LINKS,
                                      POSITIVE_COUNT),
        "agentcore_max_request_bytes": flag_or_env(args.max_agentcore_request_bytes, env,
                                                   "IAC_CODE_AGUI_MAX_AGENTCORE_REQUEST_BYTES",
                                                   AGENTCORE_MAX_REQUEST_BYTES, POSITIVE_COUNT),
        "max_image_bytes": flag_or_env(args.max_image_bytes, env, "IAC_CODE_AGUI_MAX_IMAGE_BYTES", MAX_IMAGE_BYTES,
                                       POSITIVE_COUNT),
        "max_images_bytes": flag_or_env(args.max_images_bytes, env, "IAC_CODE_AGUI_MAX_IMAGES_BYTES",
                                        MAX_IMAGES_BYTES, POSITIVE_COUNT),
        "client_tools": flag_or_env(args.client_tools, env, "IAC_CODE_AGUI_CLIENT_TOOLS", "reject",
                                    choice(*CLIENT_TOOLS_MODES)),
        "max_sse_event_bytes": flag_or_env(args.max_sse_event_bytes, env, "IAC_CODE_AGUI_MAX_SSE_EVENT_BYTES",
                                           MAX_SSE_EVENT_BYTES, EVENT_BYTES),
        "detached_run_timeout": flag_or_env(args.detached_run_timeout, env, "IAC_CODE_AGUI_DETACHED_RUN_TIMEOUT",
                                            0.0, seconds),
    }


def console_enabled(args: argparse.Namespace, env: Mapping[str, str]) -> bool:
    if args.no_console:
        return False
    raw = (env.get("IAC_CODE_AGUI_CONSOLE") or "").strip().lower()
    if raw in ("", "1", "true", "on", "yes"):
        return True
    if raw in ("0", "false", "off", "no"):
        return False
    raise ConfigError("IAC_CODE_AGUI_CONSOLE must be 1/true/on or 0/false/off, not %r" % raw)


def auth_token(args: argparse.Namespace, env: Mapping[str, str]) -> Optional[str]:
    return args.auth_token or env.get("IAC_CODE_AGUI_AUTH_TOKEN") or None


def resolve_state_dir(args: argparse.Namespace, env: Mapping[str, str]) -> str:
    state_dir = args.state_dir
    return os.path.realpath(os.path.expanduser(state_dir)) if state_dir else default_state_dir(env)


def run_cap(args: argparse.Namespace) -> int:
    """The active-run cap: explicit, or the thread count minus spares; 0 means no cap."""
    if args.max_active_runs is None:
        return max(1, args.threads - SPARE_THREADS)
    return int(args.max_active_runs)


def capacity_problems(threads: int, max_active_runs: int) -> Tuple[Optional[str], List[str]]:
    """(refusal, warnings) for a thread count and run cap.

    Every open stream holds one waitress thread for its whole run.  A cap above the thread count can never
    be reached: the runs past it would wait unseen in waitress's queue instead of getting the documented
    429.  A cap that leaves no spare thread lets streams starve /health, /ready and the cancel route.
    """
    if max_active_runs > threads:
        return ("--max-active-runs %d exceeds --threads %d: every active run holds a worker thread for its "
                "stream, so runs past %d would queue silently instead of getting 429; raise --threads or lower "
                "--max-active-runs" % (max_active_runs, threads, threads)), []
    warnings = []
    if max_active_runs == 0:
        warnings.append("--max-active-runs 0 means unlimited: past --threads %d, new runs wait in the server's "
                        "queue instead of getting 429 RUNTIME_CAPACITY_EXCEEDED" % threads)
    elif max_active_runs > threads - 2:
        warnings.append("--max-active-runs %d leaves fewer than 2 of --threads %d free: with every run streaming, "
                        "/health, /ready and cancel requests wait for a thread" % (max_active_runs, threads))
    return None, warnings


def exposure_warnings(host: str, token: Optional[str]) -> List[str]:
    """A bind beyond loopback without a client token lets anyone on the network drive the agent."""
    if is_loopback_host(host) or token:
        return []
    return ["--host %s is not a loopback address and no --auth-token (IAC_CODE_AGUI_AUTH_TOKEN) is set: anyone "
            "who can reach this port can run the agent in your workspaces" % host]


def listen_address(args: argparse.Namespace, env: Mapping[str, str]) -> Tuple[str, int]:
    host = args.host or env.get("IAC_CODE_AGUI_HOST") or DEFAULT_HOST
    if args.port is not None:
        return host, args.port
    raw = env.get("IAC_CODE_AGUI_PORT") or str(DEFAULT_PORT)
    try:
        return host, int(port(raw))
    except argparse.ArgumentTypeError:
        raise ConfigError("IAC_CODE_AGUI_PORT: expected a port number between 1 and 65535, got %r" % raw)


def check_state_dir(state_dir: str, what: str = "--state-dir") -> None:
    """Create the state directory if needed and prove it writable, before anything listens."""
    from iaccode_agui.state.store import StateError, ThreadStore
    try:
        ThreadStore(state_dir).check_writable()
    except StateError as exc:
        raise ConfigError("%s %s" % (what, exc)) from None


def resolve_server_limits(args: argparse.Namespace, env: Mapping[str, str]) -> None:
    """Fill ``args.connection_limit`` and ``args.header_timeout`` from flags, variables or defaults."""
    from iaccode_agui.server.serving import DEFAULT_CONNECTION_LIMIT, DEFAULT_HEADER_TIMEOUT
    args.connection_limit = flag_or_env(args.connection_limit, env, "IAC_CODE_AGUI_CONNECTION_LIMIT",
                                        max(args.threads + 256, DEFAULT_CONNECTION_LIMIT), POSITIVE_COUNT)
    args.header_timeout = flag_or_env(args.header_timeout, env, "IAC_CODE_AGUI_HEADER_TIMEOUT",
                                      DEFAULT_HEADER_TIMEOUT, positive_seconds)
    heartbeat = args.heartbeat_interval if args.heartbeat_interval > 0 else DEFAULT_HEARTBEAT
    args.stall_timeout = flag_or_env(args.stall_timeout, env, "IAC_CODE_AGUI_STALL_TIMEOUT", 2 * heartbeat,
                                     positive_seconds)


def child_startup_timeout(args: argparse.Namespace, env: Mapping[str, str]) -> float:
    from iaccode_agui.server.upstream import CHILD_STARTUP_TIMEOUT
    return flag_or_env(args.a2a_startup_timeout, env, "IAC_CODE_AGUI_A2A_STARTUP_TIMEOUT", CHILD_STARTUP_TIMEOUT,
                       positive_seconds)


def configure_logging(debug: bool, to_stdout: bool) -> None:
    handler = logging.StreamHandler(sys.stdout if to_stdout else sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if debug else logging.INFO)
    logging.getLogger("waitress.queue").setLevel(logging.ERROR)
    logging.getLogger("urllib3").setLevel(logging.WARNING)
    # The demo runtime's connection notices (the adapter closing streams it no longer needs) are noise.
    logging.getLogger("iaccode_agui.demo.http").setLevel(logging.DEBUG if debug else logging.WARNING)


def main(argv: Optional[Sequence[str]] = None, env: Optional[Mapping[str, str]] = None) -> int:
    env = os.environ if env is None else env
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging(args.debug, args.log_stdout)
    from iaccode_agui.server.upstream import choose_upstream
    try:
        host, port_number = listen_address(args, env)
        refusal, warnings = capacity_problems(args.threads, run_cap(args))
        if refusal:
            raise ConfigError(refusal)
        a2a_url = args.a2a_url or env.get("IAC_CODE_AGUI_A2A_URL") or None
        if a2a_url:
            a2a_url = normalize_a2a_url(a2a_url)
        state_dir = resolve_state_dir(args, env)   # created only once the rest of the settings hold
        check_state_dir(state_dir)
        upstream = choose_upstream(a2a_url=a2a_url, a2a_token=args.a2a_token or env.get("IAC_CODE_AGUI_A2A_TOKEN"),
                                   demo=args.demo, env=env, demo_dir=os.path.join(state_dir, DEMO_RUNTIME_DIR),
                                   startup_timeout=child_startup_timeout(args, env))
    except ConfigError as exc:
        print("error: %s" % exc, file=sys.stderr)
        return 2
    warnings.extend(exposure_warnings(host, auth_token(args, env)))
    try:
        settings = settings_from(args, env, upstream.url, upstream.token, state_dir)
        resolve_server_limits(args, env)
        return serve(settings, host, port_number, args, upstream.description, warnings)
    except ConfigError as exc:
        print("error: %s" % exc, file=sys.stderr)
        return 2
    finally:
        upstream.close()


def start_server(app: Any, host: str, port_number: int, threads: int, settings: Settings,
                 **server_options: Any) -> Any:
    """Bind the listening socket; a busy port or an unusable host is a one-line ConfigError naming the flag.

    ``server_options`` are the connection bounds (``connection_limit``, ``header_timeout``, ``stall_timeout``).
    """
    from iaccode_agui.server.serving import ServerThread, waitress_limits
    try:
        return ServerThread(app, host, port_number, threads=threads,
                            channel_timeout=max(120, int(settings.heartbeat_interval * 4)),
                            **dict(waitress_limits(settings.largest_request_bytes, settings.stream_buffer_bytes),
                                   **server_options))
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise ConfigError("--port %d: address already in use on %s" % (port_number, host))
        if isinstance(exc, socket.gaierror):
            raise ConfigError("--host %s: cannot resolve this host name (%s)" % (host, exc.strerror or exc))
        raise ConfigError("--host %s --port %d: cannot listen there: %s" % (host, port_number, exc.strerror or exc))
    except ValueError as exc:   # waitress: "Invalid host/port specified."
        raise ConfigError("--host %s: not an address or host name this machine can listen on (%s)" % (host, exc))


def serve(settings: Settings, host: str, port: int, args: argparse.Namespace, upstream_description: str,
          warnings: Sequence[str] = ()) -> int:
    from iaccode_agui.web.app import AguiApp

    app = AguiApp(settings)
    try:
        server = start_server(app, host, port, args.threads, settings,
                              connection_limit=getattr(args, "connection_limit", None),
                              header_timeout=getattr(args, "header_timeout", None) or 10.0,
                              stall_timeout=getattr(args, "stall_timeout", None))
    except ConfigError:
        app.close(0)
        raise
    stop, now = threading.Event(), threading.Event()
    reason: List[str] = []

    def request_stop(signum: int, frame: Any) -> None:
        if stop.is_set():   # the second signal: stop at once, as uvicorn and gunicorn do
            now.set()
        reason.append(signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    print("iaccode_agui %s listening on %s" % (__version__, server.url), flush=True)
    print("upstream: %s" % upstream_description, flush=True)
    print("state dir: %s" % settings.state_dir, flush=True)
    if settings.console:
        print("web console: %sconsole" % server.url, flush=True)
    for warning in warnings:
        log.warning("%s", warning)
    warn_if_runtime_silent(app)
    if args.idle_shutdown > 0:
        _start_idle_monitor(app, args.idle_shutdown, stop, reason)
    while not stop.wait(0.5):
        if not server.alive:
            log.error("the HTTP server loop stopped unexpectedly")
            return 1
    log.info("stopping (%s): draining %d active run(s) for up to %g s (--drain-timeout); press Ctrl-C or send "
                "SIGTERM again to cancel them and stop now", reason[0] if reason else "stop",
                app.manager.active_count(), args.drain_timeout)
    drain(app, args.drain_timeout, now)
    server.stop()
    print("iaccode_agui stopped", flush=True)
    return 0


def warn_if_runtime_silent(app: Any) -> None:
    """A runtime that does not answer yet is no reason to refuse to start (it may come later), but the
    operator should hear of it now rather than from the first failed run."""
    runtime = next(check for check in app.readiness.report().checks if check.name == "runtime")
    if not runtime.ok:
        os_reason = re.search(r"\[Errno \d+\] ([^'\")]+)", runtime.detail)
        log.warning("the A2A runtime at %s does not answer (%s); serving anyway: runs fail until it does, and "
                    "GET /ready reports when it is back", app.settings.a2a_url,
                    os_reason.group(1) if os_reason else runtime.detail)


def drain(app: Any, timeout: float, now: threading.Event) -> None:
    """Refuse new runs and let active ones finish for up to ``timeout`` seconds, or until ``now`` is set (a
    second signal); then cancel what is left, cleanly (each client gets its ``RUN_ERROR``, the state is
    written) and close the application."""
    app.manager.draining = True
    deadline = time.monotonic() + timeout
    while not now.is_set() and time.monotonic() < deadline:
        if app.manager.wait_idle(min(0.2, max(0.0, deadline - time.monotonic()))):
            break
    if now.is_set():
        log.warning("stopping now: cancelling %d active run(s)", app.manager.active_count())
        app.manager.cancel_all()
        app.manager.wait_idle(10.0)
    app.close(0, cancel_wait=10.0)


def _start_idle_monitor(app: Any, idle_seconds: float, stop: threading.Event, reason: List[str]) -> None:
    def watch() -> None:
        last_busy = time.monotonic()
        interval = min(5.0, max(0.1, idle_seconds / 4))
        while not stop.wait(interval):
            if app.manager.active_count() or app.open_streams:
                last_busy = time.monotonic()
            elif time.monotonic() - last_busy >= idle_seconds:
                reason.append("idle")
                stop.set()
    threading.Thread(target=watch, name="idle-monitor", daemon=True).start()

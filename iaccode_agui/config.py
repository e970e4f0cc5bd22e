"""One immutable settings object shared by the app, the CLI and embedders.

Embedders build ``Settings(...)`` directly; the CLI (and the gunicorn app factory) fills it from flags and
``IAC_CODE_AGUI_*`` variables.  Only those entry points and the defaults here (state directory, workspace
roots) read the environment, so the rest of the server never looks at ``os.environ``.
"""
import dataclasses
import ipaddress
import os
import tempfile
from typing import Mapping, Optional, Tuple
from urllib.parse import urlsplit

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
DEFAULT_INTERRUPT_TTL = 540.0
DEFAULT_HEARTBEAT = 15.0
MAX_REQUEST_BYTES = 12 * 1024 * 1024
MAX_CANCEL_BYTES = 64 * 1024
DEFAULT_RUN_LOG_TTL = 600.0
DEFAULT_RUN_LOG_MAX_MB = 256.0
DEFAULT_REPLAY_MEMORY_MB = 64.0
DEFAULT_RELEASE_RUNS = 256      # ended runs between the housekeeper's collections, see iaccode_agui.server.allocator
# The AgentCore-compatible route takes the managed runtime's body limit; images follow what iac-code takes.
AGENTCORE_MAX_REQUEST_BYTES = 96 * 1024 * 1024
MAX_IMAGE_BYTES = 8 * 1024 * 1024
MAX_IMAGES_BYTES = 10 * 1024 * 1024
MAX_SSE_EVENT_BYTES = 1024 * 1024
MIN_SSE_EVENT_BYTES = 4096      # room for one event with its framing and a useful piece of text
DEFAULT_FILE_LINK_TTL = 3600.0
MAX_FILE_LINKS = 10000
DEFAULT_TAKEOVER_GRACE = 60.0
MAX_SECONDS = 10 ** 9           # the largest duration a flag takes (``argtypes.seconds``)
DEFAULT_MAX_JSON_DEPTH = 64
DEFAULT_MAX_MESSAGES = 10000
# Values in one request body (arrays, objects, and the commas and colons between their parts).  Ten
# thousand messages with tool calls take about 200,000; a body of nothing but brackets or keys at the
# size limit holds millions and costs seconds of CPU to parse.
DEFAULT_MAX_JSON_VALUES = 500000
# Client tools a request may carry when the server ignores them (--client-tools ignore), and the canonical
# JSON size of each: far above what a frontend registers, and all of them together fit the request body limit.
MAX_CLIENT_TOOLS = 128
MAX_CLIENT_TOOL_BYTES = 64 * 1024
CLIENT_TOOLS_MODES = ("reject", "ignore")
DEFAULT_RUN_ID_WINDOW = 64
DEFAULT_RUN_ID_WINDOW_AGE = 86400.0
# Accepted interrupt answers of the current execution remembered per thread (besides those of interrupts
# pending again), so a replayed answer is recognised as applied.
DEFAULT_APPLIED_WINDOW = 256
# Bytes of output a client may leave unread at each stage (the run's queue, the server's output buffer,
# the socket's send buffer) before its run stops pulling from the runtime until the client reads again.
DEFAULT_STREAM_BUFFER_BYTES = 128 * 1024
MIN_STREAM_BUFFER_BYTES = 16 * 1024
# Each thread's stored conversation (``docs/history.rst``): its bounds, and when a stream opens with it.
DEFAULT_HISTORY_MAX_MESSAGES = 1000
DEFAULT_HISTORY_MAX_BYTES = 1024 * 1024
MIN_HISTORY_BYTES = 4096
MAX_HISTORY_BYTES = 4 * 1024 * 1024     # half the largest document the state directory reads back
MESSAGES_SNAPSHOT_MODES = ("auto", "resume", "off")


@dataclasses.dataclass(frozen=True)
class Settings:
    a2a_url: str = "http://127.0.0.1:41242/"
    a2a_token: Optional[str] = None
    auth_token: Optional[str] = None
    state_dir: str = ""
    allowed_cwds: Tuple[str, ...] = ()
    interrupt_ttl: float = DEFAULT_INTERRUPT_TTL
    heartbeat_interval: float = DEFAULT_HEARTBEAT
    upstream_idle_timeout: float = 3600.0
    connect_timeout: float = 5.0
    max_request_bytes: int = MAX_REQUEST_BYTES
    max_cancel_bytes: int = MAX_CANCEL_BYTES
    max_json_depth: int = DEFAULT_MAX_JSON_DEPTH
    max_messages: int = DEFAULT_MAX_MESSAGES
    max_json_values: int = DEFAULT_MAX_JSON_VALUES
    run_id_window: int = DEFAULT_RUN_ID_WINDOW
    run_id_window_age: float = DEFAULT_RUN_ID_WINDOW_AGE
    applied_window: int = DEFAULT_APPLIED_WINDOW
    max_active_runs: int = 0
    reconnect_grace: float = 0.0
    replay_buffer_events: int = 10000
    queue_max_events: int = 4096
    stream_buffer_bytes: int = DEFAULT_STREAM_BUFFER_BYTES
    disconnect_poll: float = 1.0
    default_language: str = "en"
    upstream_kind: str = "auto"          # "auto" (from the agent card) | "iac-code" | "generic"
    server_version: str = ""
    run_log_ttl: float = DEFAULT_RUN_LOG_TTL          # seconds a finished run's log is kept
    run_log_max_mb: float = DEFAULT_RUN_LOG_MAX_MB    # total size of all run logs; 0 disables the log
    replay_memory_mb: float = DEFAULT_REPLAY_MEMORY_MB  # replay frames kept in memory, all runs together
    memory_release_runs: int = DEFAULT_RELEASE_RUNS  # ended runs between memory releases under load; 0 = never
    console: bool = True                 # GET /console: the built-in web console (static files only)
    # The AgentCore-compatible routes (/ag-ui/agent) and server-side defaults for stock AG-UI clients.
    default_cwd: Optional[str] = None          # workspace for a run that sends no forwardedProps.iacCode
    agentcore_max_request_bytes: int = AGENTCORE_MAX_REQUEST_BYTES
    max_image_bytes: int = MAX_IMAGE_BYTES
    max_images_bytes: int = MAX_IMAGES_BYTES
    max_sse_event_bytes: int = MAX_SSE_EVENT_BYTES   # /ag-ui/agent only: larger events are split or truncated
    publish_files: bool = False                # /ag-ui/agent: tool results that wrote files carry download links
    file_link_ttl: float = DEFAULT_FILE_LINK_TTL
    max_file_links: int = MAX_FILE_LINKS       # live links held in memory; the oldest is dropped beyond it
    takeover_grace: float = DEFAULT_TAKEOVER_GRACE    # an adopted run without a client is cancelled after it
    detached_run_timeout: float = 0.0          # /ag-ui/agent: a run nobody is attached to is cancelled after it
    history_max_messages: int = DEFAULT_HISTORY_MAX_MESSAGES   # per thread; the oldest go first
    history_max_bytes: int = DEFAULT_HISTORY_MAX_BYTES
    messages_snapshot: str = "auto"            # when a run opens with MESSAGES_SNAPSHOT: auto | resume | off
    client_tools: str = "reject"               # "ignore": a request's client tools are checked and not used

    @property
    def largest_request_bytes(self) -> int:
        """The largest body any route accepts: waitress cannot tell routes apart, so its limit follows this."""
        return max(self.max_request_bytes, self.agentcore_max_request_bytes)

    def __post_init__(self) -> None:
        object.__setattr__(self, "a2a_url", normalize_a2a_url(self.a2a_url))
        if not self.state_dir:
            object.__setattr__(self, "state_dir", default_state_dir(os.environ))
        if not self.allowed_cwds:
            object.__setattr__(self, "allowed_cwds", default_allowed_cwds(os.environ))
        if not self.server_version:
            from iaccode_agui.version import __version__
            object.__setattr__(self, "server_version", __version__)
        if self.interrupt_ttl < 0:
            raise ValueError("interrupt TTL must be >= 0 (0 disables expiry)")
        if self.heartbeat_interval <= 0:
            raise ValueError("heartbeat interval must be > 0")
        self._check_kept()
        if min(self.max_json_depth, self.max_messages, self.max_json_values) < 1:
            raise ValueError("the JSON depth, value count and message count limits must be >= 1")
        if self.run_id_window < 1 or not self.run_id_window_age > 0 or self.applied_window < 1:
            raise ValueError("the run id window must keep >= 1 run for > 0 seconds, the answer window >= 1")
        if self.upstream_kind not in ("auto", "iac-code", "generic"):
            raise ValueError("upstream kind must be auto, iac-code or generic")
        if self.client_tools not in CLIENT_TOOLS_MODES:
            raise ConfigError("client tools must be reject or ignore, not %r" % (self.client_tools,))
        if self.default_cwd:
            object.__setattr__(self, "default_cwd", check_default_cwd(self.default_cwd, self.allowed_cwds))
        for name in ("agentcore_max_request_bytes", "max_image_bytes", "max_images_bytes"):
            if getattr(self, name) < 1:
                raise ConfigError("%s must be at least 1 byte" % name)
        if self.max_sse_event_bytes < MIN_SSE_EVENT_BYTES:
            raise ConfigError("the SSE event limit must be at least %d bytes" % MIN_SSE_EVENT_BYTES)
        if self.stream_buffer_bytes < MIN_STREAM_BUFFER_BYTES:
            raise ConfigError("the stream buffer must be at least %d bytes" % MIN_STREAM_BUFFER_BYTES)
        if self.file_link_ttl <= 0 or self.max_file_links < 1:
            raise ConfigError("file links need a lifetime > 0 seconds and room for at least one link")
        if not 0 <= self.detached_run_timeout <= MAX_SECONDS:
            raise ConfigError("the detached run timeout must be 0 (keep running) to %d seconds" % MAX_SECONDS)
        self._check_history()

    def _check_history(self) -> None:
        if self.history_max_messages < 1 or not MIN_HISTORY_BYTES <= self.history_max_bytes <= MAX_HISTORY_BYTES:
            raise ConfigError("a stored conversation keeps at least 1 message and %d to %d bytes"
                              % (MIN_HISTORY_BYTES, MAX_HISTORY_BYTES))
        if self.messages_snapshot not in MESSAGES_SNAPSHOT_MODES:
            raise ConfigError("the messages snapshot mode must be auto, resume or off")


    def _check_kept(self) -> None:
        """The bounds of what the server keeps once runs end (logs, memory) must be usable."""
        if min(self.run_log_ttl, self.run_log_max_mb, self.replay_memory_mb, self.takeover_grace) < 0:
            raise ValueError("run log TTL, run log size, replay memory and take-over grace must be >= 0")
        if self.memory_release_runs < 0:
            raise ValueError("the memory release interval must be >= 0 runs (0 = never)")


class ConfigError(ValueError):
    """A setting that cannot be used; the CLI prints it and exits 2."""


_LOOPBACK_NAMES = {"localhost"}


def is_loopback_host(host: str) -> bool:
    """Only literal loopback addresses or the exact name ``localhost`` count (no DNS lookups)."""
    if not host:
        return False
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _redacted(url: str) -> str:
    """The URL for an error message, without any user:password part."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return repr(url)
    authority, slash, path = rest.partition("/")
    if "@" in authority:
        authority = "***@" + authority.rsplit("@", 1)[1]
    return repr(scheme + sep + authority + slash + path)


def normalize_a2a_url(url: str) -> str:
    """Refuse anything but an http(s) URL on a loopback host; return it rebuilt, ending in one ``/``.

    The URL is rebuilt from the parts that were checked, so what is used is exactly what was validated
    (``urlsplit`` silently drops tabs and newlines that a raw string would still carry).
    """
    if not isinstance(url, str) or any(ch in url for ch in "\t\r\n ") or not url.isprintable():
        raise ConfigError("invalid A2A URL: %s" % _redacted(str(url)))
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        raise ConfigError("invalid A2A URL: %s" % _redacted(url))
    if parts.scheme not in ("http", "https"):
        raise ConfigError("the A2A URL must use http or https: %s" % _redacted(url))
    if parts.username or parts.password:
        raise ConfigError("the A2A URL must not carry credentials; use --a2a-token")
    if not is_loopback_host(host):
        raise ConfigError("the adapter may connect only to a loopback A2A HTTP(S) URL "
                          "(127.0.0.0/8, localhost or ::1), not %s" % _redacted(url))
    if parts.query or parts.fragment:
        raise ConfigError("the A2A URL must not carry a query or fragment: %s" % _redacted(url))
    shown_host = "[%s]" % host if ":" in host else host
    netloc = shown_host if port is None else "%s:%d" % (shown_host, port)
    return "%s://%s%s/" % (parts.scheme, netloc, parts.path.rstrip("/"))


def check_default_cwd(path: str, allowed_roots: Tuple[str, ...]) -> str:
    """The default workspace, resolved; it must be an existing directory inside an allowed root.

    Checked at start-up so a misconfigured default is a clear exit, not a 400 on every request.
    """
    real = os.path.realpath(os.path.expanduser(path))
    if not os.path.isabs(os.path.expanduser(path)):
        raise ConfigError("--default-cwd must be an absolute path, not %r" % path)
    inside = False
    for root in allowed_roots:
        try:
            inside = inside or os.path.commonpath([os.path.normpath(root), real]) == os.path.normpath(root)
        except ValueError:
            continue
    if not inside:
        raise ConfigError("--default-cwd %s is outside the allowed workspace roots (%s)"
                          % (real, os.pathsep.join(allowed_roots)))
    if not os.path.isdir(real):
        raise ConfigError("--default-cwd %s is not an existing directory" % real)
    return real


def config_dir(env: Mapping[str, str]) -> str:
    return os.path.abspath(os.path.expanduser(env.get("IAC_CODE_CONFIG_DIR") or "~/.iac-code"))


def default_state_dir(env: Mapping[str, str]) -> str:
    explicit = env.get("IAC_CODE_AGUI_STATE_DIR")
    if explicit:
        return os.path.realpath(os.path.expandvars(os.path.expanduser(explicit)))
    return os.path.join(config_dir(env), "agui")


def default_allowed_cwds(env: Mapping[str, str]) -> Tuple[str, ...]:
    """Roots from ``IAC_CODE_AGUI_ALLOWED_CWDS``, else ``IACCODE_A2A_ALLOWED_CWDS``, else cwd + temp dir."""
    raw = env.get("IAC_CODE_AGUI_ALLOWED_CWDS") or env.get("IACCODE_A2A_ALLOWED_CWDS") or ""
    roots = [item for item in raw.split(os.pathsep) if item.strip()]
    if not roots:
        roots = [os.getcwd(), tempfile.gettempdir()]
    resolved = []
    for root in roots:
        path = os.path.realpath(os.path.expandvars(os.path.expanduser(root.strip())))
        if os.path.isdir(path) and path not in resolved:
            resolved.append(path)
    return tuple(resolved)

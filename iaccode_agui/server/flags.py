"""The server's command line: every flag, its help text, and the variables that stand in for flags.

``cli`` turns parsed flags and ``IAC_CODE_AGUI_*`` variables into ``Settings`` and runs the server; what a
user may type, and what ``--help`` says about it, is kept here so the list can be read (and checked
against the README's) in one place.  The gunicorn entry point (``wsgi``) parses the same flags.
"""
import argparse
import os
from typing import Any

from iaccode_agui import __version__
from iaccode_agui.server.argtypes import (OneLineParser, at_least, between, count, megabytes, port, positive_seconds, program_name,
                                   seconds)
from iaccode_agui.config import (AGENTCORE_MAX_REQUEST_BYTES, CLIENT_TOOLS_MODES, DEFAULT_FILE_LINK_TTL,
                                 DEFAULT_HEARTBEAT, DEFAULT_HOST,
                                 DEFAULT_INTERRUPT_TTL, DEFAULT_MAX_JSON_VALUES, DEFAULT_MAX_JSON_DEPTH,
                                 DEFAULT_MAX_MESSAGES, DEFAULT_PORT,
                                 DEFAULT_RELEASE_RUNS, DEFAULT_REPLAY_MEMORY_MB, DEFAULT_RUN_ID_WINDOW,
                                 DEFAULT_RUN_ID_WINDOW_AGE,
                                 DEFAULT_APPLIED_WINDOW, DEFAULT_STREAM_BUFFER_BYTES, MIN_STREAM_BUFFER_BYTES,
                                 DEFAULT_RUN_LOG_MAX_MB, DEFAULT_RUN_LOG_TTL,
                                 DEFAULT_TAKEOVER_GRACE, MAX_FILE_LINKS, MAX_IMAGE_BYTES,
                                 MAX_IMAGES_BYTES, MAX_SSE_EVENT_BYTES, MIN_SSE_EVENT_BYTES)
from iaccode_agui.config import (DEFAULT_HISTORY_MAX_BYTES, DEFAULT_HISTORY_MAX_MESSAGES, MAX_HISTORY_BYTES,
                                 MESSAGES_SNAPSHOT_MODES, MIN_HISTORY_BYTES)

MIN_THREADS = 4
DEPLOY_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "deploy")
# Threads kept free of streams by the default run cap, so /health, /ready, cancels and metrics still answer
# when every admitted run holds its stream open.
SPARE_THREADS = 8
POSITIVE_COUNT = at_least(1)
EVENT_BYTES = at_least(MIN_SSE_EVENT_BYTES)
HISTORY_BYTES = between(MIN_HISTORY_BYTES, MAX_HISTORY_BYTES)

ENV_HELP = """environment variables (a flag wins over its variable):
  IAC_CODE_AGUI_HOST            --host
  IAC_CODE_AGUI_PORT            --port
  IAC_CODE_AGUI_A2A_URL         --a2a-url (loopback http(s) only)
  IAC_CODE_AGUI_A2A_TOKEN       --a2a-token (bearer token sent to the A2A runtime)
  IAC_CODE_AGUI_A2A_STARTUP_TIMEOUT --a2a-startup-timeout (managed child only)
  IAC_CODE_AGUI_AUTH_TOKEN      --auth-token (bearer token clients must send)
  IAC_CODE_AGUI_STATE_DIR       --state-dir
  IAC_CODE_AGUI_INTERRUPT_TTL   --interrupt-ttl
  IAC_CODE_AGUI_ALLOWED_CWDS    allowed workspace roots, separated by '%s'
                                (else IACCODE_A2A_ALLOWED_CWDS, else the current and temp directories)
  IAC_CODE_AGUI_RUN_LOG_TTL     --run-log-ttl
  IAC_CODE_AGUI_RUN_LOG_MAX_MB  --run-log-max-mb
  IAC_CODE_AGUI_REPLAY_MEMORY_MB --replay-memory-mb
  IAC_CODE_AGUI_MEMORY_RELEASE_RUNS --memory-release-runs
  IAC_CODE_AGUI_CONSOLE         0/false/off disables the web console (as --no-console)
  IAC_CODE_AGUI_TAKEOVER_GRACE  --takeover-grace
  IAC_CODE_AGUI_MAX_JSON_DEPTH  --max-json-depth
  IAC_CODE_AGUI_MAX_MESSAGES    --max-messages
  IAC_CODE_AGUI_MAX_JSON_VALUES  --max-json-values
  IAC_CODE_AGUI_CONNECTION_LIMIT  --connection-limit
  IAC_CODE_AGUI_RUN_ID_WINDOW   --run-id-window
  IAC_CODE_AGUI_RUN_ID_WINDOW_AGE  --run-id-window-age
  IAC_CODE_AGUI_APPLIED_WINDOW  --applied-window
  IAC_CODE_AGUI_HEADER_TIMEOUT  --header-timeout
  IAC_CODE_AGUI_STALL_TIMEOUT   --stall-timeout
  IAC_CODE_AGUI_STREAM_BUFFER_BYTES  --stream-buffer-bytes
  IAC_CODE_CONFIG_DIR           config directory (default ~/.iac-code; state goes to <dir>/agui)
  IAC_CODE_AGUI_DEFAULT_CWD     --default-cwd
  IAC_CODE_AGUI_PUBLISH_FILES   --publish-files (1/true/yes/on or 0/false/no/off)
  IAC_CODE_AGUI_FILE_LINK_TTL   --file-link-ttl
  IAC_CODE_AGUI_MAX_FILE_LINKS  --max-file-links
  IAC_CODE_AGUI_MAX_AGENTCORE_REQUEST_BYTES  --max-agentcore-request-bytes
  IAC_CODE_AGUI_MAX_IMAGE_BYTES              --max-image-bytes
  IAC_CODE_AGUI_MAX_IMAGES_BYTES             --max-images-bytes
  IAC_CODE_AGUI_MAX_SSE_EVENT_BYTES          --max-sse-event-bytes
  IAC_CODE_AGUI_DETACHED_RUN_TIMEOUT         --detached-run-timeout
  IAC_CODE_AGUI_HISTORY_MAX_MESSAGES         --history-max-messages
  IAC_CODE_AGUI_HISTORY_MAX_BYTES            --history-max-bytes
  IAC_CODE_AGUI_MESSAGES_SNAPSHOT            --messages-snapshot
  IAC_CODE_AGUI_CLIENT_TOOLS                 --client-tools
""" % os.pathsep


def add_agentcore_flags(add: Any) -> None:
    """Flags of the AgentCore-compatible routes and of server-side defaults."""
    add("--default-cwd", help="workspace for runs that send no forwardedProps.iacCode (stock AG-UI clients); "
                              "must lie inside the allowed workspace roots")
    add("--publish-files", action="store_true", default=None,
        help="on /ag-ui/agent, a tool result that wrote workspace files carries expiring download links "
             "(GET /ag-ui/files/<token>, behind the same auth)")
    add("--file-link-ttl", type=positive_seconds,
        help="seconds a published file link stays valid (default %.0f)" % DEFAULT_FILE_LINK_TTL)
    add("--max-file-links", type=POSITIVE_COUNT, help="published links kept at once; the oldest go first (default %d)"
                                             % MAX_FILE_LINKS)
    add("--max-agentcore-request-bytes", type=POSITIVE_COUNT,
        help="largest request body on /ag-ui/agent (default %d = 96 MiB)" % AGENTCORE_MAX_REQUEST_BYTES)
    add("--max-image-bytes", type=POSITIVE_COUNT,
        help="largest decoded inline image (default %d = 8 MiB)" % MAX_IMAGE_BYTES)
    add("--max-images-bytes", type=POSITIVE_COUNT,
        help="largest total of a message's decoded images (default %d = 10 MiB)" % MAX_IMAGES_BYTES)
    add("--client-tools", choices=CLIENT_TOOLS_MODES,
        help="tools a client declares in RunAgentInput.tools: 'reject' answers 400 (default); 'ignore' checks and "
             "accepts them without giving them to the runtime, which cannot call a client's tool")
    add("--max-sse-event-bytes", type=EVENT_BYTES,
        help="largest SSE event on /ag-ui/agent; longer deltas are split, tool results truncated "
             "(default %d = 1 MiB)" % MAX_SSE_EVENT_BYTES)
    add("--detached-run-timeout", type=seconds,
        help="seconds a run of /ag-ui/agent goes on with no client attached before it is cancelled "
             "(default 0 = until it ends)")


def add_history_flags(add: Any) -> None:
    """Flags of each thread's stored conversation (docs/history.rst)."""
    add("--history-max-messages", type=POSITIVE_COUNT,
        help="messages kept per thread; the oldest go first (default %d)" % DEFAULT_HISTORY_MAX_MESSAGES)
    add("--history-max-bytes", type=HISTORY_BYTES,
        help="bytes of JSON kept per thread, %d to %d; the oldest messages go first (default %d)"
             % (MIN_HISTORY_BYTES, MAX_HISTORY_BYTES, DEFAULT_HISTORY_MAX_BYTES))
    add("--messages-snapshot", choices=MESSAGES_SNAPSHOT_MODES,
        help="when a run opens with MESSAGES_SNAPSHOT: auto = resume runs and clients that lack the "
             "latest message, resume = resume runs only, off = never (default auto)")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog=program_name("iaccode_agui"), description="AG-UI (HTTP POST + SSE) front for the iac-code A2A runtime.",
        epilog=ENV_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    add = parser.add_argument
    add("--host", help="address to listen on (default %s)" % DEFAULT_HOST)
    add("--port", type=port, help="port to listen on (default %d)" % DEFAULT_PORT)
    add("--a2a-url", help="URL of a running `iac-code a2a` runtime (loopback only); without it the adapter starts "
                          "`iac-code a2a` as a managed child when iac-code is installed")
    add("--a2a-token", help="bearer token for the A2A runtime")
    add("--a2a-startup-timeout", type=positive_seconds,
        help="seconds a managed `iac-code a2a` child may take to answer /health (default 60)")
    add("--auth-token", help="bearer token that clients must send (Authorization: Bearer ...)")
    add("--state-dir", help="directory for per-thread state (default <config dir>/agui)")
    add("--interrupt-ttl", type=seconds,
        help="seconds an interrupt stays answerable (default %.0f; 0 disables expiry)" % DEFAULT_INTERRUPT_TTL)
    add("--idle-shutdown", type=seconds, default=0.0,
        help="exit after this many idle seconds with no active run (default 0 = never)")
    add("--upstream-kind", choices=("auto", "iac-code", "generic"), default="auto",
        help="dialect of the A2A runtime: detected from its agent card by default; 'generic' for plain A2A 1.0 agents")
    add("--demo", action="store_true", help="start the built-in scripted A2A runtime (no LLM, no network) and use it")
    add("--threads", type=at_least(MIN_THREADS), default=128,
        help="waitress worker threads; each open SSE stream holds one (default 128, at least %d)" % MIN_THREADS)
    add("--max-active-runs", type=count, default=None,
        help="runs allowed in flight before 429 RUNTIME_CAPACITY_EXCEEDED (default: threads - %d; 0 = unlimited; "
             "never more than --threads)" % SPARE_THREADS)
    add("--heartbeat-interval", type=positive_seconds, default=DEFAULT_HEARTBEAT,
        help="seconds of silence before an SSE ': heartbeat' comment (default %.0f)" % DEFAULT_HEARTBEAT)
    add("--upstream-idle-timeout", type=positive_seconds, default=3600.0,
        help="seconds without any byte from the A2A runtime before a run fails (default 3600)")
    add("--reconnect-grace", type=seconds, default=0.0,
        help="seconds a disconnected run keeps going while waiting for a re-attach (default 0 = cancel at once)")
    add("--drain-timeout", type=seconds, default=30.0,
        help="seconds active runs may take to finish on SIGTERM before they are cancelled (default 30)")
    add_kept_flags(add)
    add("--no-console", action="store_true", help="do not serve the built-in web console at /console")
    add("--takeover-grace", type=seconds,
        help="seconds a run adopted after its process died waits for a client before it is cancelled "
             "(default %.0f; a larger --reconnect-grace wins)" % DEFAULT_TAKEOVER_GRACE)
    add_bound_flags(add)
    add_agentcore_flags(add)
    add_history_flags(add)
    add("--debug", action="store_true", help="debug logging")
    add("--log-stdout", action="store_true", help="log to stdout instead of stderr")
    add("--version", action="version", version="iaccode_agui %s" % __version__)
    add("--print-deploy-dir", action=PrintDeployDir,
        help="print the directory of the deployment recipes shipped with the package (gunicorn.conf.py, "
             "nginx.conf) and exit")
    return parser


class PrintDeployDir(argparse.Action):
    """The recipes ship inside the package, so an installed user finds them without the source tree."""

    def __init__(self, option_strings: Any, dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *args: Any) -> None:
        print(DEPLOY_DIR)
        parser.exit()


def add_kept_flags(add: Any) -> None:
    """Flags that bound what the server keeps once runs end: logs, replay memory, freed memory."""
    add("--run-log-ttl", type=seconds,
        help="seconds a finished run's event log stays on disk for re-attach (default %.0f)" % DEFAULT_RUN_LOG_TTL)
    add("--run-log-max-mb", type=megabytes,
        help="total MB of run event logs; the oldest finished ones go first (default %.0f; 0 = no log)"
             % DEFAULT_RUN_LOG_MAX_MB)
    add("--replay-memory-mb", type=megabytes,
        help="MB of replay frames kept in memory across all runs (default %.0f)" % DEFAULT_REPLAY_MEMORY_MB)
    add("--memory-release-runs", type=count,
        help="while runs keep coming, collect the cycles ended runs leave every N ended runs; it also "
             "happens whenever the last run ends (default %d; 0 = leave it to Python)" % DEFAULT_RELEASE_RUNS)


def add_bound_flags(add: Any) -> None:
    """Flags that bound what a hostile or careless client can make the server hold."""
    add("--max-json-depth", type=POSITIVE_COUNT, default=None,
        help="deepest array/object nesting accepted in a request body (default %d)" % DEFAULT_MAX_JSON_DEPTH)
    add("--max-messages", type=POSITIVE_COUNT, default=None,
        help="most messages accepted in one RunAgentInput, else 413 (default %d)" % DEFAULT_MAX_MESSAGES)
    add("--max-json-values", type=POSITIVE_COUNT, default=None,
        help="most JSON values (arrays, objects, elements, members) in a request body, else 413 (default %d)"
        % DEFAULT_MAX_JSON_VALUES)
    add("--run-id-window", type=POSITIVE_COUNT, default=None,
        help="run ids remembered per thread for replay detection (default %d)" % DEFAULT_RUN_ID_WINDOW)
    add("--run-id-window-age", type=positive_seconds, default=None,
        help="seconds a run id is remembered (default %.0f); an older replay runs as a new turn"
             % DEFAULT_RUN_ID_WINDOW_AGE)
    add("--applied-window", type=POSITIVE_COUNT, default=None,
        help="accepted interrupt answers remembered per thread for replay detection (default %d)"
             % DEFAULT_APPLIED_WINDOW)
    add("--connection-limit", type=POSITIVE_COUNT, default=None,
        help="open client connections before new ones wait (default max(threads + 256, 2048)); "
             "the open-file limit is raised to fit")
    add("--header-timeout", type=positive_seconds, default=None,
        help="seconds a connection may take to send a complete request head (default 10)")
    add("--stall-timeout", type=positive_seconds, default=None,
        help="seconds a response may have output waiting without any being sent before its connection is "
             "dropped and its worker freed (default 2 x heartbeat interval)")
    add("--stream-buffer-bytes", type=at_least(MIN_STREAM_BUFFER_BYTES), default=None,
        help="bytes of a stream a client may leave unread in each of the run's queue, the server's output "
             "buffer and the socket before its run stops pulling from the runtime until it reads again "
             "(default %d)" % DEFAULT_STREAM_BUFFER_BYTES)

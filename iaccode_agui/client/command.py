"""Command line of the terminal client: options, wiring and exit codes.

``main`` takes its input function, output stream and transport as arguments so the whole command runs
in-process under test; the defaults are the real terminal and HTTP.
"""
import argparse
import contextlib
import os
import signal
import sys
import threading
from typing import Any, Iterator, List, Optional, Sequence, TextIO

from iaccode_agui.server.argtypes import OneLineParser, positive_seconds, program_name
from iaccode_agui.client.render import Renderer, color_wanted
from iaccode_agui.client.session import (EXIT_ERROR, EXIT_INTERRUPTED, EXIT_OK, ClientOptions, InputFn,
                                         TerminalClient)
from iaccode_agui.client.transport import AguiTransport, HttpError

DEFAULT_URL = "http://127.0.0.1:8000/"
TOKEN_ENV = "IAC_CODE_AGUI_AUTH_TOKEN"


def piped_input(stream: TextIO, out: TextIO) -> InputFn:
    """Input for a non-interactive stdin: the answer read is echoed after its prompt.

    The builtin ``input`` leaves the prompt without a line end when nothing is typed on a terminal, which
    glues the next output line to it and leaves transcripts without the answers.
    """
    def read(prompt: str) -> str:
        out.write(prompt)
        line = stream.readline()
        if not line:
            out.flush()
            raise EOFError
        line = line.rstrip("\r\n")
        out.write(line + "\n")
        out.flush()
        return line
    return read


def _stdin_is_terminal() -> bool:
    try:
        return sys.stdin.isatty()
    except (AttributeError, ValueError):
        return False


@contextlib.contextmanager
def ctrl_c_cancels() -> Iterator[None]:
    """Make Ctrl-C raise KeyboardInterrupt for the duration, whatever SIGINT disposition was inherited.

    A process started in the background by a non-interactive shell (``cmd &``, nohup, many CI runners)
    inherits SIGINT as *ignored*; Python then never installs its own handler and Ctrl-C would neither
    cancel the run nor exit.  Only the main thread may install handlers, so elsewhere this does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous: Any = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous if previous is not None else signal.SIG_DFL)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog=program_name("iaccode_agui.client"),
        description="Talk to an iac-code AG-UI adapter from a terminal: send a message, watch the run live, "
                    "answer interrupts, cancel with Ctrl-C. Without MESSAGE, every stdin line is a new turn "
                    "on the same thread.",
        epilog="Exit status: 0 success, 1 run or HTTP error, 130 interrupted with Ctrl-C.")
    parser.add_argument("message", nargs="*", metavar="MESSAGE", help="the message to send (words are joined)")
    parser.add_argument("--url", default=DEFAULT_URL, help="adapter base URL (default %(default)s)")
    parser.add_argument("--token", default=None, metavar="TOKEN",
                        help="bearer token (default: the %s environment variable)" % TOKEN_ENV)
    parser.add_argument("--thread", dest="thread_id", default=None, metavar="ID",
                        help="thread id to continue (default: a new thread)")
    parser.add_argument("--cwd", default=None, help="absolute workspace path (default: the current directory)")
    parser.add_argument("--ros-invocation-id", default=None, metavar="ID",
                        help="requester identity for every turn (default: a new one per turn)")
    parser.add_argument("--language", default=None, metavar="LANG", help="preferred display language, e.g. fr")
    parser.add_argument("--run-mode", choices=("normal", "pipeline"), default=None, help="execution mode")
    parser.add_argument("--pipeline-name", default=None, metavar="NAME", help="pipeline name, e.g. selling")
    parser.add_argument("--read-timeout", type=positive_seconds, default=120.0, metavar="SECONDS",
                        help="seconds without any byte (heartbeats count) before giving up (default %(default)s)")
    parser.add_argument("--no-color", action="store_true", help="plain output (automatic when not a terminal)")
    parser.add_argument("--history", action="store_true",
                        help="print the conversation the adapter keeps for --thread, then exit")
    return parser


def show_history(transport: AguiTransport, thread_id: str, renderer: Renderer) -> int:
    """``--history``: the thread's stored conversation, or the adapter's error."""
    try:
        answer = transport.history(thread_id)
    except HttpError as exc:
        renderer.error(exc.code, exc.message)
        return EXIT_ERROR
    messages = answer.get("messages")
    renderer.conversation([m for m in messages if isinstance(m, dict)] if isinstance(messages, list) else [],
                          answer.get("truncated") is True)
    return EXIT_OK


def main(argv: Optional[Sequence[str]] = None, input_fn: Optional[InputFn] = None,
         out: Optional[TextIO] = None, transport: Optional[AguiTransport] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.history and (not args.thread_id or args.message):
        parser.error("--history needs --thread ID and no MESSAGE")
    out = out if out is not None else sys.stdout
    owned = transport is None
    if transport is None:
        token = args.token if args.token is not None else os.environ.get(TOKEN_ENV)
        transport = AguiTransport(args.url, token=token, language=args.language,
                                  timeout=(10.0, args.read_timeout))
    options = ClientOptions(thread_id=args.thread_id, cwd=args.cwd, ros_invocation_id=args.ros_invocation_id,
                            language=args.language, run_mode=args.run_mode, pipeline_name=args.pipeline_name)
    if input_fn is None:
        input_fn = input if _stdin_is_terminal() else piped_input(sys.stdin, out)
    client = TerminalClient(transport, options, input_fn, out, color=color_wanted(out, args.no_color))
    words: List[str] = args.message
    if args.history:
        try:
            return show_history(transport, args.thread_id, client.renderer)
        finally:
            if owned:
                transport.close()
    try:
        with ctrl_c_cancels():
            if words:
                return client.send(" ".join(words))
            return client.repl()
    except KeyboardInterrupt:
        client.renderer.end_line()
        return EXIT_INTERRUPTED
    finally:
        if owned:
            transport.close()

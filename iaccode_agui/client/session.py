"""The conversation loop: one user turn, its interrupts and resumes, and Ctrl-C as a cancel.

The loop only sees an input function, a renderer and a transport, so a test can drive a whole turn (answers
included) in-process.  Identity rules come from the contract: every request is a new run id on the same
thread; the turn and all its resumes share one ``rosInvocationId`` (a later turn may use a new one); the
cancel extension needs the ``executionId`` announced by the ``iac-code.session.v1`` event.
"""
import os
import uuid
from typing import Any, Callable, Dict, List, NamedTuple, Optional, TextIO

from iaccode_agui.client import prompt
from iaccode_agui.client.render import Renderer
from iaccode_agui.client.transport import AguiTransport, HttpError, StreamBroken
from iaccode_agui.projection.events import SESSION_EVENT

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_INTERRUPTED = 130
REATTACH_ATTEMPTS = 3   # re-attaches (Last-Event-ID) after a broken stream before giving up
REPL_PROMPT = "> "

InputFn = Callable[[str], str]


class ClientOptions(NamedTuple):
    """What the user chose on the command line; None means "let the client or the adapter pick"."""

    thread_id: Optional[str] = None
    cwd: Optional[str] = None
    ros_invocation_id: Optional[str] = None
    language: Optional[str] = None
    run_mode: Optional[str] = None
    pipeline_name: Optional[str] = None


class RunResult(NamedTuple):
    status: int
    interrupts: List[Dict[str, Any]]


def _new_id(prefix: str) -> str:
    return "%s-%s" % (prefix, uuid.uuid4().hex)


def _interrupts(finished: Dict[str, Any]) -> List[Dict[str, Any]]:
    """The interrupts a ``RUN_FINISHED`` leaves to answer (none unless its outcome is an interrupt)."""
    outcome = finished.get("outcome")
    if not isinstance(outcome, dict) or outcome.get("type") != "interrupt":
        return []
    return [item for item in outcome.get("interrupts") or [] if isinstance(item, dict)]


class TerminalClient:
    """Sends turns on one thread and renders what comes back."""

    def __init__(self, transport: AguiTransport, options: ClientOptions, input_fn: InputFn, out: TextIO,
                 color: bool = False) -> None:
        self.transport = transport
        self.options = options
        self.input_fn = input_fn
        self.renderer = Renderer(out, color)
        self.thread_id = options.thread_id or _new_id("cli")
        self.cwd = os.path.abspath(os.path.expanduser(options.cwd or os.getcwd()))

    # ---- requests -------------------------------------------------------------------------------
    def _body(self, ros_invocation_id: str, text: Optional[str] = None,
              resume: Optional[List[Dict[str, Any]]] = None) -> Dict[str, Any]:
        iac: Dict[str, Any] = {"schemaVersion": 1, "rosInvocationId": ros_invocation_id, "cwd": self.cwd}
        if self.options.language:
            iac["preferredLanguage"] = self.options.language
        if self.options.run_mode:
            iac["runMode"] = self.options.run_mode
        if self.options.pipeline_name:
            iac["pipelineName"] = self.options.pipeline_name
        messages = [] if text is None else [{"id": _new_id("msg"), "role": "user", "content": text}]
        body: Dict[str, Any] = {"threadId": self.thread_id, "runId": _new_id("run"), "state": {},
                                "messages": messages, "tools": [], "context": [],
                                "forwardedProps": {"iacCode": iac}}
        if resume is not None:
            body["resume"] = resume
        return body

    # ---- one run --------------------------------------------------------------------------------
    def _run(self, body: Dict[str, Any], ros_invocation_id: str) -> RunResult:
        try:
            stream = self.transport.start_run(body)
        except HttpError as exc:
            self.renderer.error(exc.code, exc.message)
            return RunResult(EXIT_ERROR, [])
        execution_box: List[Optional[str]] = [None]   # the executionId, once the session event showed it
        reattach_left = REATTACH_ATTEMPTS
        while True:
            try:
                return self._consume(stream, execution_box, ros_invocation_id)
            except StreamBroken as exc:
                last_id = stream.last_event_id
                stream.close()
                if last_id is None or reattach_left == 0:
                    self.renderer.error("STREAM_BROKEN", str(exc))
                    return RunResult(EXIT_ERROR, [])
                reattach_left -= 1
                self.renderer.end_line()
                self.renderer.info("connection lost; re-attaching after event %s" % last_id)
                try:
                    stream = self.transport.start_run(body, last_event_id=last_id)
                except HttpError as http_error:
                    self.renderer.error(http_error.code, http_error.message)
                    return RunResult(EXIT_ERROR, [])

    def _consume(self, stream: Any, execution_id_box: List[Optional[str]], ros_invocation_id: str) -> RunResult:
        """Render one response until the run's terminal event; StreamBroken propagates to the caller."""
        execution_id = execution_id_box[0]
        try:
            with self.renderer.waiting():
                for event in stream:
                    if event.get("type") == "CUSTOM" and event.get("name") == SESSION_EVENT:
                        value = event.get("value")
                        if isinstance(value, dict) and value.get("executionId"):
                            execution_id = execution_id_box[0] = str(value["executionId"])
                    self.renderer.event(event)
                    if event.get("type") == "RUN_ERROR":
                        return RunResult(EXIT_ERROR, [])
                    if event.get("type") == "RUN_FINISHED":
                        return RunResult(EXIT_OK, _interrupts(event))
        except KeyboardInterrupt:
            self._cancel(execution_id, ros_invocation_id)
            return RunResult(EXIT_INTERRUPTED, [])
        finally:
            stream.close()  # after the cancel above, never before it
        return RunResult(EXIT_ERROR, [])  # unreachable: the stream raises StreamBroken without a terminal event

    def _cancel(self, execution_id: Optional[str], ros_invocation_id: str) -> None:
        """Cancel while still attached, so the adapter reports what it did rather than seeing a hang-up."""
        self.renderer.end_line()
        if execution_id is None:
            # Not announced yet: dropping the connection is the only lever, and the adapter cancels on it.
            self.renderer.info("cancelled (disconnected before the run was announced)")
            return
        try:
            answer = self.transport.cancel(execution_id, self.thread_id, ros_invocation_id)
        except HttpError as exc:
            self.renderer.error(exc.code, exc.message)
            return
        self.renderer.info("cancel: %s" % answer.get("status", "?"))

    # ---- turns ----------------------------------------------------------------------------------
    def send(self, text: str) -> int:
        """One user turn, answering interrupts until the run ends; returns the exit status.

        KeyboardInterrupt at an answer prompt propagates (the caller exits); the interrupt stays pending
        on the adapter, which is durable, so nothing is lost.
        """
        ros_invocation_id = self.options.ros_invocation_id or _new_id("cli-inv")
        body = self._body(ros_invocation_id, text=text)
        while True:
            result = self._run(body, ros_invocation_id)
            if not result.interrupts:
                return result.status
            try:
                entries = [prompt.ask(prompt.AnswerForm(interrupt), self.input_fn, self.renderer)
                           for interrupt in result.interrupts]
            except EOFError:
                self.renderer.write("\n")
                self.renderer.error("NO_ANSWER", "input ended; the interrupt stays pending on thread %s"
                                    % self.thread_id)
                return EXIT_ERROR
            except KeyboardInterrupt:
                self.renderer.write("\n")  # the cursor still sits after the prompt
                self.renderer.info("the interrupt stays pending on thread %s" % self.thread_id)
                raise
            body = self._body(ros_invocation_id, resume=entries)

    def repl(self) -> int:
        """Each input line is a new turn on the same thread; EOF ends with the last turn's status."""
        self.renderer.info("thread %s (end with Ctrl-D)" % self.thread_id)
        status = EXIT_OK
        while True:
            try:
                line = self.input_fn(REPL_PROMPT)
            except EOFError:
                self.renderer.write("\n")  # the cursor still sits after the prompt
                return status
            except KeyboardInterrupt:
                self.renderer.write("\n")
                return EXIT_INTERRUPTED
            if line.strip():
                status = self.send(line.strip())

"""The terminal client (``python -m iaccode_agui.client``) driven in-process against a real adapter."""
import io
import os
import re
import select
import shlex
import signal
import subprocess
import sys
import time
from typing import Any, Dict, List

import pytest

from iaccode_agui.client import AguiTransport, main
from iaccode_agui.client import render
from iaccode_agui.client.prompt import AnswerForm, InvalidAnswer, show
from iaccode_agui.client.render import Renderer
from tests.harness import wait_for
from tests.docs.test_readme import ROOT, _literal_blocks


class Script:
    """Answers typed by the user, in order; EOF once they run out.  Records every prompt shown."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.prompts: List[str] = []

    def __call__(self, prompt: str) -> str:
        self.prompts.append(prompt)
        if not self.answers:
            raise EOFError
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer


class RecordingTransport(AguiTransport):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.bodies: List[Dict[str, Any]] = []
        self.cancels: List[tuple] = []

    def start_run(self, body, last_event_id=None):
        self.bodies.append(body)
        return super().start_run(body, last_event_id=last_event_id)

    def cancel(self, execution_id, thread_id, ros_invocation_id):
        self.cancels.append((execution_id, thread_id, ros_invocation_id))
        return super().cancel(execution_id, thread_id, ros_invocation_id)


class Client:
    """One client invocation: its exit status, transcript, prompts and requests."""

    def __init__(self, adapter, *argv: str, answers=(), thread="t", out=None, token=None, extra=()) -> None:
        self.out = out if out is not None else io.StringIO()
        self.script = Script(*answers)
        self.transport = RecordingTransport(adapter.url, token=token)
        args = ["--url", adapter.url, "--cwd", adapter.workspace, "--thread", thread] + list(extra) + list(argv)
        self.code = main(args, input_fn=self.script, out=self.out, transport=self.transport)
        self.text = self.out.getvalue()


def test_normal_message_streams_text_and_reasoning(adapter):
    run = Client(adapter, "hello", "there")
    assert run.code == 0, run.text
    assert "Hello! I am the scripted runtime. You said: hello there\n" in run.text
    assert "\u2026 The user greeted me. I should answer politely.\n" in run.text
    assert "\x1b[" not in run.text  # a StringIO is no terminal: no colour
    body = run.transport.bodies[0]
    assert body["threadId"] == "t" and body["messages"][0]["content"] == "hello there"
    assert body["forwardedProps"]["iacCode"]["cwd"] == adapter.workspace
    assert run.script.prompts == []


def test_permission_answered_by_number(adapter, demo):
    run = Client(adapter, "write a file", answers=["1"], extra=["--ros-invocation-id", "inv-9"])
    assert run.code == 0, run.text
    assert "? Permission needed: Change a workspace file (write_file)\n" in run.text
    assert "  1) Allow once [allow_once]\n  2) Deny [deny]\n" in run.text
    assert "schema" not in run.text and '"enum"' not in run.text   # words, not the raw JSON schema
    assert run.script.prompts == ["Type a number 1-2; Enter alone denies: "]
    assert "\u2699 write_file(" in run.text and "hello.txt" in run.text
    assert "\u21b3 Successfully wrote" in run.text
    assert "artifact " in run.text
    assert os.path.exists(os.path.join(adapter.workspace, "hello.txt"))
    first, resume = run.transport.bodies
    assert resume["threadId"] == first["threadId"] and resume["runId"] != first["runId"]
    assert resume["forwardedProps"]["iacCode"]["rosInvocationId"] == "inv-9"
    assert first["forwardedProps"]["iacCode"]["rosInvocationId"] == "inv-9"
    assert resume["messages"] == []
    assert resume["resume"][0]["status"] == "resolved"
    assert resume["resume"][0]["payload"] == {"decision": "allow_once"}
    assert len(demo.runtime.tool_executions) == 1


def test_invalid_answers_are_asked_again(adapter):
    run = Client(adapter, "write a file", answers=["maybe", "7", '{"decision": "yes"}', "ALLOW_ONCE"])
    assert run.code == 0, run.text
    assert len(run.script.prompts) == 4
    assert "invalid answer: choose a number from 1 to 2 or one of: allow_once, deny" in run.text
    assert "invalid answer: choose a number from 1 to 2\n" in run.text
    assert "invalid answer: 'yes' is not one of ['allow_once', 'deny']" in run.text
    assert len(run.transport.bodies) == 2  # nothing invalid ever reached the adapter
    assert run.transport.bodies[1]["resume"][0]["payload"] == {"decision": "allow_once"}


def test_question_by_option_number(adapter):
    run = Client(adapter, "a question please", answers=["2"])
    assert run.code == 0, run.text
    assert "? Your answer is needed\n  Which region?\n" in run.text
    assert "1) Hangzhou [cn-hangzhou]" in run.text and "2) Beijing [cn-beijing]" in run.text
    assert "or type your own answer" in run.text and "oneOf" not in run.text
    assert run.script.prompts == ["Type a number 1-2 or your own answer; Enter alone cancels: "]
    assert "You chose: Beijing." in run.text
    assert run.transport.bodies[1]["resume"][0]["payload"] == {"selectedId": "cn-beijing"}


def test_question_by_free_text(adapter):
    run = Client(adapter, "a question please", answers=["Shanghai please"])
    assert run.code == 0, run.text
    assert "You chose: Shanghai please." in run.text
    assert run.transport.bodies[1]["resume"][0]["payload"] == {"freeText": "Shanghai please"}


def test_empty_answer_sends_cancelled(adapter, demo):
    run = Client(adapter, "write a file", answers=[""])
    assert run.transport.bodies[1]["resume"] == [
        {"interruptId": run.transport.bodies[1]["resume"][0]["interruptId"], "status": "cancelled"}]
    assert "denied" in run.text and run.code == 0, run.text
    assert demo.runtime.tool_executions == []
    assert not os.path.exists(os.path.join(adapter.workspace, "hello.txt"))


def test_http_error_before_the_stream(adapter_factory):
    secured = adapter_factory(auth_token="x")
    run = Client(secured, "hello", token="wrong")
    assert run.code == 1
    assert run.text == "error UNAUTHORIZED: A valid bearer token is required.\n"
    assert Client(secured, "hello", token="x").code == 0
    elsewhere = Client(secured, "hello", token="x", thread="t2", extra=["--cwd", "/definitely/not/allowed"])
    assert elsewhere.code == 1 and elsewhere.text.startswith("error INVALID_INPUT: ")


def test_unreachable_adapter(adapter):
    out = io.StringIO()
    code = main(["--url", "http://127.0.0.1:9/", "--cwd", adapter.workspace, "hi"], input_fn=Script(), out=out)
    assert code == 1 and out.getvalue().startswith("error CONNECTION_FAILED: cannot reach http://127.0.0.1:9/")


def test_run_error_exits_1(adapter):
    run = Client(adapter, "fail")
    assert run.code == 1
    assert "RUN_ERROR A2A_EXECUTION_FAILED: " in run.text, run.text


class InterruptingOutput(io.StringIO):
    """Simulates Ctrl-C: raises KeyboardInterrupt once, right after the first text delta is written."""

    def __init__(self, marker: str) -> None:
        super().__init__()
        self.marker = marker
        self.fired = False

    def write(self, text: str) -> int:
        written = super().write(text)
        if not self.fired and self.marker in self.getvalue():
            self.fired = True
            raise KeyboardInterrupt
        return written


def test_ctrl_c_during_a_run_calls_the_cancel_extension(adapter, demo):
    out = InterruptingOutput("slow-0")
    run = Client(adapter, "slow", out=out, thread="cc", extra=["--ros-invocation-id", "inv-c"])
    assert out.fired and run.code == 130
    state = adapter.app.store.load("cc")
    assert run.transport.cancels == [(state.execution.execution_id, "cc", "inv-c")]
    assert wait_for(lambda: ("CancelTask", state.execution.task_id) in demo.runtime.requests_log)
    assert "cancel: cancelled" in run.text
    assert "slow-5" not in run.text
    # the thread is free again for the next turn
    assert wait_for(lambda: adapter.app.manager.active_count() == 0)
    assert Client(adapter, "hello again", thread="cc").code == 0


def test_ctrl_c_at_the_answer_prompt_exits(adapter):
    run = Client(adapter, "write a file", answers=[KeyboardInterrupt()], thread="kp")
    assert run.code == 130
    assert "the interrupt stays pending on thread kp" in run.text
    assert len(run.transport.bodies) == 1
    assert list(adapter.app.store.load("kp").execution.pending)


def test_repl_sends_each_line_as_a_turn_on_one_thread(adapter):
    run = Client(adapter, answers=["first line", "", "write a file", "2", "second line"], thread="repl")
    assert run.code == 0, run.text
    assert "You said: first line" in run.text and "You said: second line" in run.text
    assert run.script.prompts[0] == "> " and run.script.prompts[-1] == "> "
    bodies = run.transport.bodies
    assert [b["threadId"] for b in bodies] == ["repl"] * 4
    assert len({b["runId"] for b in bodies}) == 4
    assert bodies[2]["resume"][0]["payload"] == {"decision": "deny"}


def test_repl_ctrl_c_at_the_prompt_exits_130(adapter):
    assert Client(adapter, answers=["hi", KeyboardInterrupt()]).code == 130


def test_answer_form_from_schemas():
    boolean = AnswerForm({"id": "b", "responseSchema": {
        "type": "object", "properties": {"approved": {"type": "boolean"}, "note": {"type": "string"}},
        "required": ["approved"]}})
    assert [c.key for c in boolean.choices] == ["true", "false"] and boolean.free_text is None
    assert boolean.answer("2") == {"approved": False}
    assert boolean.answer('{"approved": true, "note": "ok"}') == {"approved": True, "note": "ok"}
    assert boolean.answer("  ") is None
    opaque = AnswerForm({"id": "o", "responseSchema": {"type": "object", "required": ["a", "b"], "properties": {
        "a": {"type": "integer"}, "b": {"type": "integer"}}}})
    assert opaque.choices == [] and opaque.prompt == "Type a JSON object; Enter alone cancels: "
    shown = io.StringIO()
    show(opaque, Renderer(shown))
    assert "a JSON object with: a (integer, required), b (integer, required)" in shown.getvalue()
    assert opaque.answer('{"a": 1, "b": 2}') == {"a": 1, "b": 2}
    for bad in ('{"a": 1}', "a=1", "{nope"):
        try:
            opaque.answer(bad)
        except InvalidAnswer:
            continue
        raise AssertionError("accepted %r" % bad)


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_colour_only_on_a_terminal_and_ascii_fallback(adapter, monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    coloured = Client(adapter, "hello", out=FakeTerminal(), thread="c1")
    assert "\x1b[2m" in coloured.text and coloured.code == 0
    plain = Client(adapter, "hello", out=FakeTerminal(), thread="c2", extra=["--no-color"])
    assert "\x1b[" not in plain.text
    raw = io.BytesIO()
    ascii_out = io.TextIOWrapper(raw, encoding="ascii")
    renderer = Renderer(ascii_out)
    renderer.event({"type": "REASONING_MESSAGE_CONTENT", "messageId": "r", "delta": "think\nmore"})
    renderer.event({"type": "TOOL_CALL_START", "toolCallId": "c", "toolCallName": "bash"})
    renderer.event({"type": "TOOL_CALL_ARGS", "toolCallId": "c", "delta": '{"command": "ls"}'})
    renderer.event({"type": "TOOL_CALL_RESULT", "toolCallId": "c", "content": "a\nb"})
    ascii_out.flush()
    assert raw.getvalue().decode("ascii") == '... think\n... more\n* bash({"command":"ls"})\n  -> a (+1 lines)\n'


def _child_env() -> Dict[str, str]:
    return dict(os.environ, PYTHONPATH=ROOT)


def test_help_in_a_subprocess():
    done = subprocess.run([sys.executable, "-m", "iaccode_agui.client", "--help"], capture_output=True,
                          text=True, env=_child_env(), timeout=60)
    assert done.returncode == 0, done.stderr
    for flag in ("--url", "--token", "--thread", "--cwd", "--ros-invocation-id", "--language", "--run-mode",
                 "--pipeline-name", "--no-color", "MESSAGE"):
        assert flag in done.stdout


def _inherit_sigint(disposition):
    """The child starts with exactly this SIGINT disposition, not whatever the test runner was given."""
    return lambda: signal.signal(signal.SIGINT, disposition)


@pytest.mark.parametrize("inherited", [signal.SIG_DFL, signal.SIG_IGN], ids=["sigint-default", "sigint-ignored"])
def test_real_sigint_in_a_subprocess_cancels_the_run(adapter, demo, inherited):
    """The in-process tests raise KeyboardInterrupt from the output; a real Ctrl-C lands in a socket read.

    A background job of a non-interactive shell (nohup, ``setsid ... &``, CI runners) inherits SIGINT as
    ignored; the client must still cancel on Ctrl-C.
    """
    thread = "sig-%s" % ("ign" if inherited is signal.SIG_IGN else "dfl")
    child = subprocess.Popen([sys.executable, "-m", "iaccode_agui.client", "--url", adapter.url, "--cwd",
                              adapter.workspace, "--thread", thread, "--ros-invocation-id", "inv-s", "slow"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_child_env(),
                             preexec_fn=_inherit_sigint(inherited))
    seen = b""
    try:
        deadline = time.monotonic() + 30
        while b"slow-1" not in seen:
            assert time.monotonic() < deadline, seen
            ready, _, _ = select.select([child.stdout], [], [], 0.5)
            if ready:
                chunk = os.read(child.stdout.fileno(), 4096)
                assert chunk, (seen, child.stderr.read())
                seen += chunk
        child.send_signal(signal.SIGINT)
        rest, errors = child.communicate(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 130, (child.returncode, (seen + rest).decode("utf-8", "replace"), errors)
    output = (seen + rest).decode("utf-8")
    assert "cancel: cancelled" in output and "\x1b[" not in output
    state = adapter.app.store.load(thread)
    assert wait_for(lambda: ("CancelTask", state.execution.task_id) in demo.runtime.requests_log)


def test_piped_stdin_repl_in_a_subprocess_echoes_answers(adapter):
    done = subprocess.run([sys.executable, "-m", "iaccode_agui.client", "--url", adapter.url, "--cwd",
                           adapter.workspace, "--thread", "piped"], input="write a file\nnope\n2\nhi\n",
                          capture_output=True, text=True, env=_child_env(), timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "> write a file\n" in done.stdout
    assert "Type a number 1-2; Enter alone denies: nope\ninvalid answer: " in done.stdout
    assert "Type a number 1-2; Enter alone denies: 2\n" in done.stdout and "denied" in done.stdout
    assert "You said: hi" in done.stdout and "\x1b[" not in done.stdout


def _projected(value):
    from iaccode_agui.projection import interrupts as ip
    return ip.build_interrupt(value, None, "en")


def test_deployment_confirmation_lists_each_option_once():
    from tests.core.test_interrupts import DEPLOY
    form = AnswerForm(_projected(DEPLOY))
    assert [choice.key for choice in form.choices] == ["go", "tune", "stop"]
    assert form.prompt == "Type a number 1-3; Enter alone cancels: "
    assert form.answer("1") == {"selectedId": "go"}
    assert form.answer("adjust") == {"action": "adjust"}       # the other spelling is still understood
    out = io.StringIO()
    show(form, Renderer(out))
    assert out.getvalue().count(") ") == 3, out.getvalue()


def test_a_permission_prompt_says_that_empty_denies():
    permission = AnswerForm({"id": "p", "reason": "tool_call", "responseSchema": {
        "type": "object", "properties": {"decision": {"type": "string", "enum": ["allow_once", "deny"]}},
        "required": ["decision"]}})
    assert permission.prompt == "Type a number 1-2; Enter alone denies: "
    assert permission.resume_entry(permission.answer("")) == {"interruptId": "p", "status": "cancelled"}
    question = AnswerForm({"id": "q", "responseSchema": {"oneOf": [
        {"type": "object", "properties": {"selectedId": {"const": "a"}}, "required": ["selectedId"]},
        {"type": "object", "properties": {"freeText": {"type": "string"}}, "required": ["freeText"]}]}})
    assert question.prompt == "Type 1 or your own answer; Enter alone cancels: "


def test_parallel_messages_are_written_as_separate_blocks():
    out = io.StringIO()
    renderer = Renderer(out)
    events = [
        {"type": "TEXT_MESSAGE_START", "messageId": "a", "role": "assistant"},
        {"type": "TEXT_MESSAGE_START", "messageId": "b", "role": "assistant"},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "a", "delta": "Candidate A: "},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "b", "delta": "Candidate B: "},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "b", "delta": "SLB + ECS + RDS."},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "a", "delta": "ECS only."},
        {"type": "TEXT_MESSAGE_END", "messageId": "b"},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "c", "delta": "Candidate C: "},
        {"type": "TEXT_MESSAGE_END", "messageId": "a"},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "c", "delta": "FC."},
        {"type": "RUN_FINISHED", "threadId": "t", "runId": "r", "outcome": {"type": "success"}},
    ]
    for event in events:
        renderer.event(event)
    assert out.getvalue() == "Candidate A: ECS only.\nCandidate B: SLB + ECS + RDS.\nCandidate C: FC.\n"


def test_a_silent_run_shows_waiting_in_place_on_a_terminal(adapter):
    """On a terminal the waiting line is redrawn in place with the seconds of silence and erased by the
    next output, which then starts on a clean line."""
    run = Client(adapter, "sleep 3", out=FakeTerminal())
    assert run.code == 0, run.text
    assert "waiting\u2026 2 s" in run.text, repr(run.text)
    assert "\n" not in run.text[run.text.index("waiting"):run.text.rindex("waiting")]   # one line, redrawn
    assert render.ERASE_LINE + "I slept for 3 seconds." in run.text.replace("\x1b[0m", ""), repr(run.text)


def test_a_silent_run_in_a_transcript_gets_a_few_plain_lines(adapter, monkeypatch):
    """Not a terminal: no control characters, and a plain line only each time the silence doubles."""
    quiet = Client(adapter, "sleep 3", thread="quiet")
    assert quiet.code == 0 and "waiting" not in quiet.text      # shorter than the first line's 10 s
    monkeypatch.setattr(render, "WAIT_FIRST_LINE", 1.0)
    run = Client(adapter, "sleep 3", thread="noted")
    assert run.code == 0, run.text
    seconds = [int(found) for found in re.findall(r"^\u00b7 waiting\u2026 (\d+) s$", run.text, re.M)]
    assert seconds[:2] == [1, 2] and len(seconds) <= 3, run.text   # at 1 s, 2 s (4 s: after the reply)
    assert "\r" not in run.text and "\x1b[" not in run.text


def test_the_commands_of_its_page_work_as_written(adapter):
    """``docs/terminal-client.rst``: each command, run against the test adapter with the answers piped in."""
    commands = [block for block in _literal_blocks(os.path.join(ROOT, "docs", "terminal-client.rst"))
                if block.startswith(".venv/bin/python -m iaccode_agui.client ")]
    assert len(commands) == 2
    for command, typed, wanted in zip(commands, ("1\n", "hello\n"), ("Done: hello.txt was written.", "You said: hello")):
        argv = shlex.split(command.replace("http://127.0.0.1:8000/", adapter.url).replace("/tmp/ws", adapter.workspace))
        done = subprocess.run([sys.executable] + argv[1:], input=typed, capture_output=True, text=True,
                              env=_child_env(), timeout=60)
        assert done.returncode == 0 and wanted in done.stdout, done.stdout + done.stderr

"""Scripted behaviours of the demo runtime, chosen from the user text of a NEW task.

These are the normal run mode's; ``run_mode: "pipeline"`` runs the scenarios of ``pipeline`` instead.
Matching is case-insensitive on whole words, first match wins, in this order:

==================  =====================================================================================
``firehose [N]``    N text deltas (default 1000, at most 1,000,000) as fast as possible, each
                    ``"~<i>@<time.time_ns()> "`` so a client can measure per-event latency.
``sleep [N]``       silent for N seconds (default 5; keepalive pings only), then a short reply.
``slow``            one text delta every ``slow_interval`` seconds, 60 of them; cancellable.
``hang``            sends no frame at all, not even pings, for 3600 s; gives up when its reader leaves.
``garbage``         a non-JSON ``data:`` frame mid-stream, then the turn goes on normally.
``truncate``        a frame cut mid-JSON, then the connection closes without the chunked terminator.
``rpcerror``        an ``event: error`` frame (-32603) mid-stream; the task is then FAILED.
``wrongtask``       a statusUpdate carrying another taskId, then the turn goes on normally.
``wrongcontext``    a statusUpdate carrying another contextId, then the turn goes on normally.
``die``             two text deltas, then the connection closes abruptly.
``retryable``       ends in INPUT_REQUIRED with "A temporary error occurred. Please retry." and
                    ``iac_code.error{retryable:true}``.
``fail``            "Something went wrong.", then TASK_STATE_FAILED with ``iac_code.error{retryable:false}``.
``question``        an ``ask_user_question`` interrupt ("Which region?"); the text answer is echoed.
``write twice``     two permission interrupts in a row (hello.txt, then notes.txt).
``write``           a ``write_file`` permission interrupt; allow writes hello.txt into the cwd.
``bash``            a ``bash`` permission interrupt (``echo hi``, effect local_execution).
``tool``            an auto-approved read-only ``read_file`` call with an MCP progress signal.
(anything else)     the default turn: thinking, three text deltas echoing the user, end of turn.
==================  =====================================================================================

``truncate`` and ``die`` end the body without the chunked terminator and close the socket (the stream
raises waitress' ClientDisconnected, which waitress answers by closing quietly): a ``requests`` client gets
the bytes sent so far, then ``ChunkedEncodingError`` (urllib3 ``ProtocolError``).  After ``truncate``,
``die`` and ``rpcerror`` the task reads TASK_STATE_FAILED, so a client that resyncs with GetTask sees a
definite end.  A follow-up text on a task that is not waiting for an answer always gets
the default reply.  Every normal turn ends in TASK_STATE_INPUT_REQUIRED with an empty ``iac_code``, exactly
as iac-code ends a turn.

To add a scenario, subclass ``Scenario``, give it a ``pattern`` and put an instance in ``PLAYBOOK``.
"""
import re
import time
import uuid
from typing import Any, Dict, List, Optional, Tuple

from iaccode_agui.demo import tools
from iaccode_agui.demo.turns import FIRST_CALL_USAGE, FOLLOW_UP_USAGE, Turn, new_error_id

FIREHOSE_DEFAULT = 1000
FIREHOSE_CAP = 1000000
SLOW_DELTAS = 60
SLEEP_DEFAULT = 5.0
HANG_SECONDS = 3600.0


class Scenario:
    """One scripted behaviour; instances are stateless (per-task memory lives in ``turn.state``)."""

    name = "default"
    description = "thinking, three text deltas echoing the user, usage, final text, end of turn"
    pattern: Optional[str] = None
    # Streams of this scenario send keepalive pings / the opening task frames.
    pings = True
    announce = True

    def match(self, text: str) -> Optional[Dict[str, Any]]:
        """Parameters when ``text`` selects this scenario, else None."""
        if self.pattern is None:
            return {}
        found = re.search(self.pattern, text, re.IGNORECASE | re.DOTALL)
        if found is None:
            return None
        return {"arg": found.group(1) if found.groups() else None}

    def start(self, turn: Turn) -> None:
        greet(turn)

    def resume(self, turn: Turn, pending: Dict[str, Any], answer: str, decision: Optional[str]) -> None:
        """A message answered ``pending``: acknowledge it, then go on (``decision`` set for permissions)."""
        received = {"kind": pending["kind"], "inputId": pending["inputId"], "toolUseId": pending["toolUseId"]}
        if decision is not None:
            received["decision"] = decision
            turn.input_received(received)
            self.on_permission(turn, decision, pending)
            return
        turn.input_received(received)
        self.on_answer(turn, answer, pending)

    def holds_ack(self, turn_state: Dict[str, Any]) -> bool:
        """Whether a sideband answer's ack waits until the task parks again (default: sent at once)."""
        return False

    def on_permission(self, turn: Turn, decision: str, envelope: Dict[str, Any]) -> None:
        raise NotImplementedError("%s never asks for permission" % self.name)

    def on_answer(self, turn: Turn, answer: str, envelope: Dict[str, Any]) -> None:
        raise NotImplementedError("%s never asks a question" % self.name)

    def pipeline_state(self, turn_state: Dict[str, Any], after_sequence: int) -> Optional[Dict[str, Any]]:
        """The ``/iac-code/pipeline/state`` body; normal-mode scenarios have none (404)."""
        return None


def greet(turn: Turn) -> None:
    """The default LLM answer, also used for every follow-up message."""
    turn.reply(["The user greeted me. ", "I should answer ", "politely."],
               ["Hello! ", "I am the scripted runtime. ", "You said: %s" % turn.user_text], FIRST_CALL_USAGE)


def _number(arg: Optional[str], default: float) -> float:
    return float(arg) if arg else default


class Firehose(Scenario):
    name = "firehose"
    description = "N text deltas '~<i>@<time_ns> ' as fast as possible (default 1000, cap 1,000,000)"
    pattern = r"\bfirehose\b(?:\s+(\d+))?"

    def start(self, turn: Turn) -> None:
        count = min(int(_number(turn.state.get("arg"), FIREHOSE_DEFAULT)), FIREHOSE_CAP)
        for index in range(count):
            if index % 256 == 0 and not turn.observed:
                return  # nobody reads any more: do not burn a benchmark's CPU for nothing
            turn.text("~%d@%d " % (index, time.time_ns()))
        turn.usage(FIRST_CALL_USAGE)
        turn.final("firehose: %d deltas" % count)
        turn.end_turn()


class Sleep(Scenario):
    name = "sleep"
    description = "silent for N seconds (pings only, default 5), then a short reply"
    pattern = r"\bsleep\b(?:\s+(\d+(?:\.\d+)?))?"

    def start(self, turn: Turn) -> None:
        seconds = min(_number(turn.state.get("arg"), SLEEP_DEFAULT), HANG_SECONDS)
        turn.sleep(seconds)
        turn.reply([], ["I slept for %g seconds." % seconds], FIRST_CALL_USAGE)


class Slow(Scenario):
    name = "slow"
    description = "one text delta per slow_interval seconds, 60 deltas, then end of turn (cancellable)"
    pattern = r"\bslow\b"

    def start(self, turn: Turn) -> None:
        deltas = []
        for index in range(SLOW_DELTAS):
            if index:
                turn.sleep(turn.slow_interval)
            delta = "slow-%d " % index
            deltas.append(delta)
            turn.text(delta)
        turn.usage(FIRST_CALL_USAGE)
        turn.final("".join(deltas))
        turn.end_turn()


class Hang(Scenario):
    name = "hang"
    description = "sends nothing at all (no frames, no pings) for 3600 s; stops when the client leaves"
    pattern = r"\bhang\b"
    pings = False
    announce = False

    def start(self, turn: Turn) -> None:
        turn.sleep(HANG_SECONDS, while_observed=True)


class Garbage(Scenario):
    name = "garbage"
    description = "a non-JSON data frame mid-stream, then a normal turn"
    pattern = r"\bgarbage\b"

    def start(self, turn: Turn) -> None:
        turn.text("Hello! ")
        turn.raw(b"data: this is {not json\r\n\r\n")
        turn.reply([], ["I am still here."], FIRST_CALL_USAGE)


class Truncate(Scenario):
    name = "truncate"
    description = "a frame cut mid-JSON, then the connection closes without the chunked terminator"
    pattern = r"\btruncate\b"

    def start(self, turn: Turn) -> None:
        turn.text("Hello! ")
        turn.drop_connection(('data: {"result": {"statusUpdate": {"taskId": "%s", "contextId": "%s", "sta'
                              % (turn.task.id, turn.task.context_id)).encode("utf-8"))


class RpcErrorMidStream(Scenario):
    name = "rpcerror"
    description = "an 'event: error' frame with -32603 mid-stream; the task is then FAILED"
    pattern = r"\brpcerror\b"

    def start(self, turn: Turn) -> None:
        turn.text("Hello! ")
        turn.crash({"code": -32603, "message": "Internal error: the scripted agent raised an exception"})


class WrongTask(Scenario):
    name = "wrongtask"
    description = "a statusUpdate carrying another taskId, then a normal turn"
    pattern = r"\bwrongtask\b"

    def start(self, turn: Turn) -> None:
        turn.text("Hello! ")
        turn.foreign_update(task_id=str(uuid.uuid4()))
        turn.reply([], ["I am still here."], FIRST_CALL_USAGE)


class WrongContext(Scenario):
    name = "wrongcontext"
    description = "a statusUpdate carrying another contextId, then a normal turn"
    pattern = r"\bwrongcontext\b"

    def start(self, turn: Turn) -> None:
        turn.text("Hello! ")
        turn.foreign_update(context_id="agui-" + uuid.uuid4().hex + "00000000")
        turn.reply([], ["I am still here."], FIRST_CALL_USAGE)


class Die(Scenario):
    name = "die"
    description = "two text deltas, then the connection closes abruptly"
    pattern = r"\bdie\b"

    def start(self, turn: Turn) -> None:
        turn.text("Hello! ")
        turn.text("Goodbye")
        turn.drop_connection()


class Retryable(Scenario):
    name = "retryable"
    description = "INPUT_REQUIRED with 'A temporary error occurred. Please retry.' and error.retryable true"
    pattern = r"\bretryable\b"

    def start(self, turn: Turn) -> None:
        turn.end_turn("A temporary error occurred. Please retry.",
                      {"retryable": True, "errorId": new_error_id()})


class Fail(Scenario):
    name = "fail"
    description = "'Something went wrong.', then TASK_STATE_FAILED with error.retryable false"
    pattern = r"\bfail\b"

    def start(self, turn: Turn) -> None:
        turn.text("Something went wrong.")
        error_id = new_error_id()
        turn.fail("The task failed (error %s)." % error_id, {"retryable": False, "errorId": error_id})


class Question(Scenario):
    name = "question"
    description = "an ask_user_question interrupt 'Which region?'; the text answer is echoed back"
    pattern = r"\bquestion\b"
    options = [{"id": "cn-hangzhou", "label": "Hangzhou"}, {"id": "cn-beijing", "label": "Beijing"}]

    def start(self, turn: Turn) -> None:
        turn.thinking("I need the region first. ")
        turn.text("I need one detail first.")
        tool_use_id = tools.new_tool_use_id()
        turn.tool_call("ask_user_question", tool_use_id, {"question": "Which region?", "options": self.options},
                       redacted=False)
        turn.usage(FIRST_CALL_USAGE)
        turn.ask(tools.question_envelope(task_id=turn.task.id, context_id=turn.task.context_id,
                                         tool_use_id=tool_use_id, prompt="Which region?", options=self.options))

    def on_answer(self, turn: Turn, answer: str, envelope: Dict[str, Any]) -> None:
        turn.tool({"status": "completed", "name": "ask_user_question", "toolUseId": envelope["toolUseId"],
                   "result": answer})
        turn.reply(["The user answered. "], ["You chose: %s." % answer], FOLLOW_UP_USAGE)


class Write(Scenario):
    name = "write"
    description = "a write_file permission interrupt; allow_once writes hello.txt into the cwd, deny does not"
    pattern = r"\bwrite\b"
    files: Tuple[Tuple[str, str], ...] = (("hello.txt", "hello from the scripted runtime\n"),)
    done_text = "Done: hello.txt was written."

    def start(self, turn: Turn) -> None:
        turn.thinking("The user wants a file. ")
        turn.text("I'll create hello.txt for you.")
        self._request(turn, 0)

    def _request(self, turn: Turn, index: int) -> None:
        path, content = self.files[index]
        turn.state["step"] = index
        turn.request_permission("write_file", tools.new_tool_use_id(), {"path": path, "content": content},
                                "file_change", path)

    def on_permission(self, turn: Turn, decision: str, envelope: Dict[str, Any]) -> None:
        tool_use_id = envelope["toolUseId"]
        if decision != "allow_once":
            turn.tool({"status": "failed", "name": "write_file", "toolUseId": tool_use_id,
                       "result": tools.DENIAL_RESULT})
            turn.reply(["The user declined. "], ["Understood, I did not write the file."], FOLLOW_UP_USAGE)
            return
        index = int(turn.state.get("step", 0))
        path, content = self.files[index]
        turn.executed(tool_use_id)
        artifact, result = tools.write_workspace_file(turn.task.cwd, path, content)
        turn.artifact(artifact)
        turn.tool({"status": "completed", "name": "write_file", "toolUseId": tool_use_id, "result": result,
                   "artifact": tools.artifact_ref(artifact)})
        if index + 1 < len(self.files):
            turn.thinking("One more file to go. ")
            turn.text("Now I'll create %s." % self.files[index + 1][0])
            self._request(turn, index + 1)
            return
        turn.reply(["The file is written. "], [self.done_text], FOLLOW_UP_USAGE)


class WriteTwice(Write):
    name = "write twice"
    description = "two write_file permission interrupts in a row (hello.txt, then notes.txt)"
    pattern = r"^(?=.*\bwrite\b)(?=.*\btwice\b)"
    files = (("hello.txt", "hello from the scripted runtime\n"), ("notes.txt", "notes from the scripted runtime\n"))
    done_text = "Done: hello.txt and notes.txt were written."


class Bash(Scenario):
    name = "bash"
    description = "a bash permission interrupt for 'echo hi' (effect local_execution)"
    pattern = r"\bbash\b"
    command = "echo hi"

    def start(self, turn: Turn) -> None:
        turn.thinking("A shell command will do. ")
        turn.text("I'll run %s for you." % self.command)
        turn.request_permission("bash", tools.new_tool_use_id(),
                                {"command": self.command, "description": "Print a greeting"},
                                "local_execution", "the current local workspace; command: %s" % self.command)

    def on_permission(self, turn: Turn, decision: str, envelope: Dict[str, Any]) -> None:
        tool_use_id = envelope["toolUseId"]
        if decision != "allow_once":
            turn.tool({"status": "failed", "name": "bash", "toolUseId": tool_use_id, "result": tools.DENIAL_RESULT})
            turn.reply(["The user declined. "], ["Understood, I did not run the command."], FOLLOW_UP_USAGE)
            return
        turn.executed(tool_use_id)  # scripted: the command is never really run
        turn.tool({"status": "completed", "name": "bash", "toolUseId": tool_use_id, "result": "hi\n"})
        turn.reply(["The command ran. "], ["Done: the command printed hi."], FOLLOW_UP_USAGE)


class ReadTool(Scenario):
    name = "tool"
    description = "an auto-approved read-only read_file call with an MCP progress signal, then text"
    pattern = r"\btool\b"

    def start(self, turn: Turn) -> None:
        turn.thinking("Let me look at the workspace. ")
        turn.text("Let me read README.md.")
        tool_use_id = tools.new_tool_use_id()
        turn.tool_call("read_file", tool_use_id, {"path": "README.md"}, redacted=False)
        turn.usage(FIRST_CALL_USAGE)
        turn.executed(tool_use_id)
        progress = {"serverName": "demo-files", "toolName": "read_file", "progress": 1.0, "total": 2.0,
                    "message": "Reading README.md"}
        turn.tool({"status": "progress", "toolUseId": tool_use_id, "name": "read_file", "mcp": progress,
                   "mcpProgress": dict(progress)})
        turn.tool({"status": "completed", "name": "read_file", "toolUseId": tool_use_id,
                   "result": "# Demo workspace\n"})
        turn.reply(["The file is short. "], ["README.md starts with the heading 'Demo workspace'."],
                   FOLLOW_UP_USAGE)


DEFAULT = Scenario()

# Match order: the first scenario whose pattern matches the user text wins.
PLAYBOOK: Tuple[Scenario, ...] = (
    Firehose(), Sleep(), Slow(), Hang(), Garbage(), Truncate(), RpcErrorMidStream(), WrongTask(), WrongContext(),
    Die(), Retryable(), Fail(), Question(), WriteTwice(), Write(), Bash(), ReadTool(),
)

# name -> one-line description, in match order (for the README and ``--help``).
SCENARIOS: Dict[str, str] = dict([(s.name, s.description) for s in PLAYBOOK] + [("default", DEFAULT.description)])


def select(text: str, iac: Optional[Dict[str, Any]] = None) -> Tuple[Scenario, Dict[str, Any]]:
    """The scenario a new task's user text asks for, with its parsed parameters (normal run mode)."""
    for scenario in PLAYBOOK:
        params = scenario.match(text)
        if params is not None:
            return scenario, params
    return DEFAULT, {}


def scenario_lines() -> List[str]:
    """``name: description`` lines, for help output."""
    return ["%-13s %s" % (name, text) for name, text in SCENARIOS.items()]

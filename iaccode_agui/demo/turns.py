"""What a scripted scenario may do during one turn, expressed in iac-code signals.

Scenarios never build wire dicts themselves: every frame shape lives here, once, so a scenario reads like
the story of an LLM turn ("think, say, call a tool, ask") and the dialect stays consistent across them.
Every emitting method raises ``TurnStopped`` once the task was cancelled or the runtime stops, which is how
a cancel interrupts a script at its next step.
"""
import logging
import threading
import uuid
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from iaccode_agui.demo import tools, wire
from iaccode_agui.demo.tasks import (ABORT, ERROR, FAILED, INPUT_REQUIRED, RAW, SUBMITTED, WORKING,
                                     TaskRecord, TurnStopped)

_LOG = logging.getLogger(__name__)

# Token counts of the scripted LLM calls, as (input, output, cached).
FIRST_CALL_USAGE = (102, 22, 0)
FOLLOW_UP_USAGE = (105, 25, 0)


class Turn:
    """One producer run on one task."""

    def __init__(self, task: TaskRecord, user_text: str, *, slow_interval: float,
                 record_tool: Callable[[str, str], None]) -> None:
        self.task = task
        self.user_text = user_text
        self.slow_interval = slow_interval
        self._record_tool = record_tool
        # Streams opened after this mark count as followers (set when a stream is cut or an ack sent).
        self.follow_mark = task.mark()

    # --- shapes -----------------------------------------------------------------------------------------
    @property
    def state(self) -> Dict[str, Any]:
        """Scenario memory that survives between the turns of this task."""
        return self.task.scenario_state

    def agent_message(self, text: str, message_id: str) -> Dict[str, Any]:
        return {"messageId": message_id, "contextId": self.task.context_id, "taskId": self.task.id,
                "role": "ROLE_AGENT", "parts": [{"text": text}]}

    def _update(self, state: str, iac: Dict[str, Any], message: Optional[Dict[str, Any]] = None,
                timestamp: bool = False) -> Dict[str, Any]:
        status: Dict[str, Any] = {"state": state}
        if message is not None:
            status["message"] = message
        if timestamp:
            status["timestamp"] = wire.utc_timestamp()
        return {"statusUpdate": {"taskId": self.task.id, "contextId": self.task.context_id, "status": status,
                                 "metadata": {"iac_code": iac}}}

    def _session(self, **extra: Any) -> Dict[str, Any]:
        iac = dict(extra)
        iac["iacCodeSessionId"] = self.task.session_id
        return iac

    # --- lifecycle --------------------------------------------------------------------------------------
    def submitted(self) -> None:
        self.task.publish(self._update(SUBMITTED, self._session(), timestamp=True))

    def working(self) -> None:
        self.task.publish(self._update(WORKING, self._session(), timestamp=True))

    def input_received(self, received: Dict[str, Any]) -> None:
        """First frame of an answer stream: the runtime acknowledges the pending input."""
        self.task.publish(self._update(WORKING, {"inputReceived": received}),
                          iac_drop=("input", "permission"))

    def end_turn(self, message_text: Optional[str] = None, error: Optional[Dict[str, Any]] = None) -> None:
        """A normal turn ends in INPUT_REQUIRED with no input projection (the conversation stays open)."""
        iac: Dict[str, Any] = {}
        message = None
        if message_text is not None:
            message = self.agent_message(message_text, self.task.id + "-3")
        if error is not None:
            iac["error"] = error
        self.task.publish(self._update(INPUT_REQUIRED, iac, message, timestamp=True),
                          iac_set={"error": error} if error else None,
                          iac_drop=("input", "permission") if error else ("input", "permission", "error"))

    def ask(self, envelope: Dict[str, Any], permission: Optional[Dict[str, Any]] = None) -> None:
        """Park the task on an input; GetTask reports it until an answer arrives."""
        iac: Dict[str, Any] = {"input": envelope}
        if permission is not None:
            iac["permission"] = permission
        self.task.publish(self._update(INPUT_REQUIRED, iac, timestamp=True), iac_set=dict(iac),
                          iac_drop=("permission", "error"))

    def fail(self, message_text: str, error: Optional[Dict[str, Any]] = None) -> None:
        message = self.agent_message(message_text, self.task.id + "-3")
        iac = {"error": error} if error else {}
        self.task.publish(self._update(FAILED, iac, message, timestamp=True),
                          iac_set=dict(iac), iac_drop=("input", "permission"))

    def signal(self, state: str, iac: Dict[str, Any], *, iac_set: Optional[Dict[str, Any]] = None,
               iac_drop: Tuple[str, ...] = (), timestamp: bool = False) -> None:
        """A bare status update carrying ``iac`` (pipeline envelopes use it; they own their shapes)."""
        self.task.publish(self._update(state, iac, timestamp=timestamp), iac_set=iac_set, iac_drop=iac_drop)

    def detach(self, hold: bool = False) -> None:
        """Close the stream of the message that started this turn; the work goes on for subscribers.

        With ``hold`` the stream stays open, silent, until the turn ends (see ``detach_turn_streams``).
        """
        self.follow_mark = self.task.detach_turn_streams(hold)

    def wait_for_follower(self, limit: float) -> bool:
        """Pause until a SubscribeToTask stream opened after ``follow_mark`` is attached (or ``limit`` s).

        Background work after an early-closed stream stands for minutes of real work; waiting for a
        follower makes "the client missed nothing" deterministic instead of a race with a sleep.
        """
        deadline = self.task.store.clock() + limit
        while not self.task.followed_after(self.follow_mark):
            remaining = deadline - self.task.store.clock()
            if remaining <= 0:
                return False
            self.task.sleep(min(remaining, 0.02))
        return True

    def drop_connection(self, partial: bytes = b"") -> None:
        """Cut the turn's stream mid-body; the task then reads FAILED so a client that resyncs sees an end."""
        self.abort(partial)
        self.task.fail_silently(self.agent_message("The connection to the runtime was lost.", self.task.id + "-3"),
                                {"retryable": False, "errorId": new_error_id()})

    # --- LLM output -------------------------------------------------------------------------------------
    def thinking(self, text: str) -> None:
        self.task.publish(self._update(WORKING, self._session(thinking={"type": "raw_thinking", "text": text})))

    def text(self, text: str) -> None:
        """One streamed text delta; every delta of a task reuses the message id ``<taskId>-message``."""
        self.task.publish(self._update(WORKING, self._session(),
                                       self.agent_message(text, self.task.id + "-message")))

    def usage(self, counts: Tuple[int, int, int]) -> None:
        inp, out, cached = counts
        usage = {"inputTokens": float(inp), "outputTokens": float(out), "totalTokens": float(inp + out),
                 "cachedInputTokens": float(cached), "model": "other", "provider": "openai"}
        self.task.publish(self._update(WORKING, {"usage": usage}))

    def final(self, text: str) -> None:
        """The consolidated answer of the LLM call, flagged so clients can drop it as a duplicate."""
        self.task.publish(self._update(WORKING, {"assistantFinal": {"complete": True}},
                                       self.agent_message(text, self.task.id + "-2"), timestamp=True))

    def reply(self, thoughts: Sequence[str], deltas: Sequence[str], usage: Tuple[int, int, int],
              final: bool = True) -> None:
        """A whole closing LLM call: reasoning, text, usage, consolidated text, end of turn."""
        for thought in thoughts:
            self.thinking(thought)
        for delta in deltas:
            self.text(delta)
        self.usage(usage)
        if final:
            self.final("".join(deltas))
        self.end_turn()

    # --- tools ------------------------------------------------------------------------------------------
    def tool(self, signal: Dict[str, Any]) -> None:
        self.task.publish(self._update(WORKING, {"tool": signal}))

    def tool_call(self, name: str, tool_use_id: str, tool_input: Dict[str, Any], redacted: bool) -> None:
        """started, one input_delta per argument piece, input_complete (with the input when it needs consent)."""
        self.tool({"status": "started", "name": name, "toolUseId": tool_use_id})
        for length in tools.argument_deltas(tool_input):
            self.tool({"status": "input_delta", "partialJsonLength": length, "toolUseId": tool_use_id})
        complete: Dict[str, Any] = {"status": "input_complete", "name": name, "toolUseId": tool_use_id,
                                    "inputSummary": tools.input_summary(name, tool_input)}
        if redacted:
            complete["toolInput"] = dict(tool_input)
        self.tool(complete)

    def request_permission(self, name: str, tool_use_id: str, tool_input: Dict[str, Any], effect: str,
                           target: str) -> Dict[str, Any]:
        """Announce a consent-requiring tool call and park on its permission request."""
        self.tool_call(name, tool_use_id, tool_input, redacted=True)
        self.usage(FIRST_CALL_USAGE)
        envelope = tools.permission_envelope(
            task_id=self.task.id, context_id=self.task.context_id, tool_name=name, tool_use_id=tool_use_id,
            effect=effect, target=target, tool_input=tool_input, language=self.task.language)
        self.ask(envelope, {"pending": True, "toolName": name, "autoApproved": False, "toolUseId": tool_use_id})
        return envelope

    def executed(self, tool_use_id: str) -> None:
        """Count a real tool execution, so tests can prove a tool never runs twice."""
        self._record_tool(self.task.id, tool_use_id)

    def artifact(self, artifact: Dict[str, Any]) -> None:
        self.task.publish({"artifactUpdate": {"taskId": self.task.id, "contextId": self.task.context_id,
                                              "artifact": artifact, "lastChunk": True}})

    # --- time and faults --------------------------------------------------------------------------------
    def sleep(self, seconds: float, while_observed: bool = False) -> bool:
        return self.task.sleep(seconds, while_observed)

    @property
    def observed(self) -> bool:
        return self.task.observed

    def raw(self, data: bytes) -> None:
        self.task.push_fault(RAW, data)

    def abort(self, partial: bytes = b"") -> None:
        self.task.push_fault(ABORT, partial)

    def crash(self, error: Dict[str, Any]) -> None:
        """An agent exception: an ``event: error`` frame ends the stream and the task reads FAILED."""
        self.task.crash(error, self.agent_message(error["message"], self.task.id + "-3"),
                        {"retryable": False, "errorId": new_error_id()})

    def foreign_update(self, task_id: Optional[str] = None, context_id: Optional[str] = None) -> None:
        """A statusUpdate that claims to belong elsewhere; it is sent but never recorded on this task."""
        update = self._update(WORKING, self._session(), self.agent_message("stray ", self.task.id + "-message"))
        body = update["statusUpdate"]
        if task_id is not None:
            body["taskId"] = task_id
            body["status"]["message"]["taskId"] = task_id
        if context_id is not None:
            body["contextId"] = context_id
            body["status"]["message"]["contextId"] = context_id
        self.task.publish(update, apply=False)


def new_error_id() -> str:
    return uuid.uuid4().hex[:12]


def start_producer(name: str, body: Callable[[], None], task: TaskRecord,
                   threads: List[threading.Thread]) -> threading.Thread:
    """Run one turn on its own thread; whatever happens, the streams of the turn are ended."""

    def run() -> None:
        try:
            body()
        except TurnStopped:
            pass
        except Exception:  # a scripted turn must never leave its stream hanging
            _LOG.exception("scripted turn on task %s crashed", task.id)
            if not task.terminal and not task.store.stopping:
                error_id = new_error_id()
                task.fail_silently({"messageId": task.id + "-3", "contextId": task.context_id,
                                    "taskId": task.id, "role": "ROLE_AGENT",
                                    "parts": [{"text": "The scripted runtime failed."}]},
                                   {"retryable": False, "errorId": error_id})
        finally:
            task.finish_turn()

    thread = threading.Thread(target=run, name=name, daemon=True)
    threads.append(thread)
    thread.start()
    return thread

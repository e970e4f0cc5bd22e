"""The one place that builds AG-UI event dicts (the public event shapes).

Events are plain dicts with camelCase keys and no ``None`` values; ``type`` comes first.  The
``timestamp`` is added by the SSE encoder when the event is written, so this module stays pure and
deterministic for tests.
"""
from typing import Any, Dict, List, Optional

PROTOCOL_VERSION = "1.0"

SESSION_EVENT = "iac-code.session.v1"
ARTIFACT_EVENT = "iac-code.artifact.v1"
TOOL_PROGRESS_EVENT = "iac-code.tool-progress.v1"
PIPELINE_EVENT = "iac-code.pipeline.v1"
PIPELINE_ACTIVITY = "iac-code.pipeline.v1"

Event = Dict[str, Any]


def _event(event_type: str, **fields: Any) -> Event:
    event: Event = {"type": event_type}
    for key, value in fields.items():
        if value is not None:
            event[key] = value
    return event


def run_started(thread_id: str, run_id: str, parent_run_id: Optional[str] = None) -> Event:
    return _event("RUN_STARTED", threadId=thread_id, runId=run_id, parentRunId=parent_run_id,
                  protocolVersion=PROTOCOL_VERSION)


def run_finished_success(thread_id: str, run_id: str, usage: Optional[List[Dict[str, Any]]] = None) -> Event:
    return _event("RUN_FINISHED", threadId=thread_id, runId=run_id, outcome={"type": "success"},
                  usage=usage or None)


def run_finished_interrupt(thread_id: str, run_id: str, interrupts: List[Dict[str, Any]],
                           usage: Optional[List[Dict[str, Any]]] = None) -> Event:
    if not interrupts:
        raise ValueError("an interrupt outcome needs at least one interrupt")
    return _event("RUN_FINISHED", threadId=thread_id, runId=run_id,
                  outcome={"type": "interrupt", "interrupts": interrupts}, usage=usage or None)


def run_error(thread_id: str, run_id: str, code: str, message: str,
              usage: Optional[List[Dict[str, Any]]] = None) -> Event:
    return _event("RUN_ERROR", message=message, code=code, threadId=thread_id, runId=run_id, usage=usage or None)


def text_start(message_id: str, role: str = "assistant") -> Event:
    return _event("TEXT_MESSAGE_START", messageId=message_id, role=role)


def text_content(message_id: str, delta: str) -> Event:
    # The most frequent event of all, built directly (both fields are always present).
    return {"type": "TEXT_MESSAGE_CONTENT", "messageId": message_id, "delta": delta}


def text_end(message_id: str) -> Event:
    return _event("TEXT_MESSAGE_END", messageId=message_id)


def reasoning_start(message_id: str) -> Event:
    return _event("REASONING_START", messageId=message_id)


def reasoning_message_start(message_id: str) -> Event:
    return _event("REASONING_MESSAGE_START", messageId=message_id, role="reasoning")


def reasoning_content(message_id: str, delta: str) -> Event:
    return _event("REASONING_MESSAGE_CONTENT", messageId=message_id, delta=delta)


def reasoning_message_end(message_id: str) -> Event:
    return _event("REASONING_MESSAGE_END", messageId=message_id)


def reasoning_end(message_id: str) -> Event:
    return _event("REASONING_END", messageId=message_id)


def tool_start(tool_call_id: str, name: str, parent_message_id: Optional[str] = None) -> Event:
    return _event("TOOL_CALL_START", toolCallId=tool_call_id, toolCallName=name, parentMessageId=parent_message_id)


def tool_args(tool_call_id: str, delta: str) -> Event:
    return _event("TOOL_CALL_ARGS", toolCallId=tool_call_id, delta=delta)


def tool_end(tool_call_id: str) -> Event:
    return _event("TOOL_CALL_END", toolCallId=tool_call_id)


def tool_result(tool_call_id: str, content: str) -> Event:
    return _event("TOOL_CALL_RESULT", messageId="tool-result-" + tool_call_id, toolCallId=tool_call_id,
                  content=content, role="tool")


def step_started(step_name: str) -> Event:
    return _event("STEP_STARTED", stepName=step_name)


def step_finished(step_name: str) -> Event:
    return _event("STEP_FINISHED", stepName=step_name)


def custom(name: str, value: Any) -> Event:
    return {"type": "CUSTOM", "name": name, "value": value}


def activity_snapshot(message_id: str, activity_type: str, content: Dict[str, Any], replace: bool = True) -> Event:
    return _event("ACTIVITY_SNAPSHOT", messageId=message_id, activityType=activity_type, content=content,
                  replace=replace)


def messages_snapshot(messages: List[Dict[str, Any]], truncated: bool = False) -> Event:
    """``truncated``: older messages were left out.  AG-UI messages have no such flag, so it is the event's
    metadata, under this server's own key: a client that looks can tell, others ignore it."""
    event: Event = {"type": "MESSAGES_SNAPSHOT", "messages": messages}
    if truncated:
        event["metadata"] = {"iacCode": {"truncated": True}}
    return event

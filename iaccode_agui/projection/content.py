"""What a frame's artifacts and tool reports become as AG-UI events.

``RunProjector`` (``projection.projector``) owns the rules that need the run's state: identity, text replay,
interrupts and the end of the run.  Turning an artifact update or an ``iac_code.tool`` report into events
needs none of that (a tool report only touches the open tool spans), so those mappings live here, apart
from the state machine, and can be read and tested without one.
"""
from typing import Any, Dict, List

from iaccode_agui.canonical import canonical_json, coerce_numbers
from iaccode_agui.projection import events as ev
from iaccode_agui.projection.effects import Output
from iaccode_agui.projection.spans import SpanTracker


def artifact_events(obj: Dict[str, Any]) -> List[Output]:
    """An ``artifactUpdate`` as one custom event (nothing when it carries no artifact)."""
    artifact = obj.get("artifact")
    if not isinstance(artifact, dict):
        return []
    value = {"schemaVersion": 1}
    value.update(coerce_numbers(artifact))
    # Chunked artifacts: without these a client cannot tell "extend" from "replace".
    for flag in ("append", "lastChunk"):
        if obj.get(flag) is True:
            value[flag] = True
    return [ev.custom(ev.ARTIFACT_EVENT, value)]


def tool_events(spans: SpanTracker, tool: Dict[str, Any]) -> List[Output]:
    """An ``iac_code.tool`` report: opens, fills or closes its tool span, or reports its progress."""
    tool_id = tool.get("toolUseId")
    if not isinstance(tool_id, str) or not tool_id:
        return []
    name = tool.get("name") if isinstance(tool.get("name"), str) else "tool"
    status = tool.get("status")
    if status == "started":
        return list(spans.tool_start(tool_id, name))
    if status == "input_complete":
        return list(spans.tool_args_complete(tool_id, name, tool_arguments(tool)))
    if status in ("completed", "failed"):
        result = tool.get("result")
        content = result if isinstance(result, str) else canonical_json(coerce_numbers(result))
        return list(spans.tool_result(tool_id, content))
    if status == "progress":
        value = {"schemaVersion": 1}
        value.update(coerce_numbers(tool))
        return [ev.custom(ev.TOOL_PROGRESS_EVENT, value)]
    return []


def tool_arguments(tool: Dict[str, Any]) -> str:
    """The complete tool input as one JSON string (a summary when the runtime withholds the input)."""
    if isinstance(tool.get("toolInput"), (dict, list)):
        return canonical_json(coerce_numbers(tool["toolInput"]))
    if tool.get("inputSummary") is not None:
        return canonical_json({"summary": coerce_numbers(tool["inputSummary"])})
    return ""

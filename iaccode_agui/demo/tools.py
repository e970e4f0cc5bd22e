"""The scripted tools: their redacted summaries, permission envelopes and (harmless) effects.

Shapes follow the iac-code runtime's permission, question and artifact metadata, so that a client's
interrupt and artifact handling meets the same fields it will meet on the real runtime.  Only
``write_file`` touches the disk, and only inside an existing workspace directory the client named.
"""
import hashlib
import json
import os
import uuid
from typing import Any, Dict, List, Optional, Tuple

DENIAL_RESULT = ("The user explicitly denied this tool operation. This is not a cloud API or IAM permission "
                 "error. Do not retry this operation or perform the same action with another tool unless "
                 "the user asks again.")

# Field names a summary may show; any other name is hashed, as the runtime does for unknown fields.
_KNOWN_FIELDS = frozenset(["path", "content", "command", "question", "options", "file_path"])
# Values a safe summary may show verbatim; other strings are reduced to a fingerprint.
_VISIBLE_VALUES = frozenset(["path", "command", "file_path"])

# Permission prompt texts per effect, in the two languages the demo honours.
_PROMPTS: Dict[str, Dict[str, Tuple[str, str]]] = {
    "file_change": {
        "en": ("Change a workspace file", "Write a file needed for the requested infrastructure task."),
        "zh": ("修改工作区文件", "写入完成所请求的基础设施任务所需的文件。"),
    },
    "local_execution": {
        "en": ("Run a local shell command", "Execute a local command needed for the requested infrastructure task."),
        "zh": ("运行本地 Shell 命令", "执行完成所请求的基础设施任务所需的本地命令。"),
    },
    "cloud_change": {
        "en": ("Create cloud resources", "Create a preview stack to validate a candidate architecture."),
        "zh": ("创建云资源", "创建预览资源栈以验证候选架构。"),
    },
}
_ALLOW_ONCE = {"en": ("Allow once", "Allow once?"), "zh": ("允许一次", "是否允许一次？")}
_DENY = {"en": "Deny", "zh": "拒绝"}


def new_tool_use_id() -> str:
    return "call_" + uuid.uuid4().hex[:12]


def normalize_language(value: Any) -> str:
    """Only the permission prompt is translated, and only en/zh: anything Chinese-like is zh."""
    if isinstance(value, str) and value.strip().lower().startswith("zh"):
        return "zh"
    return "en"


def _fingerprint(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def input_summary(tool_name: str, tool_input: Dict[str, Any]) -> Dict[str, Any]:
    """Field types only; unknown field names hashed so secrets in argument names cannot leak."""
    fields = {}
    for name, value in tool_input.items():
        key = name if name in _KNOWN_FIELDS else _fingerprint(name)
        fields[key] = {"type": _type_name(value)}
    return {"fields": fields, "tool_name": tool_name}


def safe_summary(tool_name: str, tool_input: Dict[str, Any]) -> str:
    shown: Dict[str, Any] = {}
    for name, value in tool_input.items():
        if name in _VISIBLE_VALUES:
            shown[name] = value
        elif isinstance(value, str):
            shown[name] = {"fingerprint": _fingerprint(value), "length": len(value), "type": "str"}
    return "%s: %s" % (tool_name, json.dumps(shown, sort_keys=True, separators=(",", ":"), ensure_ascii=False))


def _type_name(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, str):
        return "str"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "dict"
    return "null"


def permission_envelope(*, task_id: str, context_id: str, tool_name: str, tool_use_id: str, effect: str,
                        target: str, tool_input: Dict[str, Any], language: str) -> Dict[str, Any]:
    """The ``metadata.iac_code.input`` of a permission request (numbers already as Struct floats)."""
    lang = language if language in ("en", "zh") else "en"
    title, purpose = _PROMPTS[effect][lang]
    allow_label, allow_question = _ALLOW_ONCE[lang]
    return {
        "kind": "permission", "schemaVersion": 1.0,
        "inputId": "permission-" + uuid.uuid4().hex,
        "requestTaskId": task_id, "contextId": context_id,
        "toolName": tool_name, "toolUseId": tool_use_id,
        "isReadOnly": False, "required": True, "effect": effect, "target": target,
        "title": title, "prompt": "%s %s" % (title, allow_question), "purpose": purpose,
        "language": lang, "safeSummary": safe_summary(tool_name, tool_input),
        "options": [{"label": allow_label, "id": "allow_once"}, {"label": _DENY[lang], "id": "deny"}],
    }


def question_envelope(*, task_id: str, context_id: str, tool_use_id: str, prompt: str,
                      options: List[Dict[str, str]]) -> Dict[str, Any]:
    return {
        "kind": "ask_user_question", "schemaVersion": 1.0, "inputId": "ask-" + tool_use_id,
        "requestTaskId": task_id, "contextId": context_id, "toolUseId": tool_use_id,
        "prompt": prompt, "options": [dict(o) for o in options], "allowFreeText": True, "required": True,
    }


def argument_deltas(tool_input: Dict[str, Any], pieces: int = 2) -> List[float]:
    """Cumulative ``partialJsonLength`` values, as if the LLM streamed the arguments in ``pieces`` parts."""
    total = len(json.dumps(tool_input, ensure_ascii=False))
    step = max(1, total // pieces)
    lengths = [float(min(total, step * (i + 1))) for i in range(pieces - 1)]
    return lengths + [float(total)]


def write_workspace_file(cwd: Optional[str], filename: str, content: str) -> Tuple[Dict[str, Any], str]:
    """Execute ``write_file``: returns the artifact and the tool result text.

    The file is really written when ``cwd`` names an existing directory, so an end-to-end test can look
    for it; otherwise the effect is only described.
    """
    data = content.encode("utf-8")
    source_path = os.path.join(cwd, filename) if cwd else filename
    if cwd and os.path.isdir(cwd):
        with open(source_path, "wb") as handle:
            handle.write(data)
    artifact_id = str(uuid.uuid4())
    uri = "iac-code-artifact://%s/%s" % (artifact_id, filename)
    digest = hashlib.sha256(data).hexdigest()
    meta = {"sourcePath": source_path, "byteSize": float(len(data)), "uri": uri, "mediaType": "text/plain",
            "sha256": digest}
    artifact = {
        "artifactId": artifact_id, "name": filename,
        "parts": [{"url": uri, "filename": filename, "mediaType": "text/plain", "metadata": dict(meta)}],
        "metadata": meta,
    }
    lines = content.count("\n") + (0 if content.endswith("\n") or not content else 1)
    return artifact, "Successfully wrote %d lines to %s" % (lines, source_path)


def artifact_ref(artifact: Dict[str, Any]) -> Dict[str, Any]:
    """The short artifact reference carried by the tool ``completed`` signal."""
    meta = artifact["metadata"]
    return {"artifactId": artifact["artifactId"], "filename": artifact["name"], "uri": meta["uri"],
            "sha256": meta["sha256"]}

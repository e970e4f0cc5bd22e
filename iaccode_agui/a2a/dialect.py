"""The iac-code flavour of A2A 1.0: building outgoing messages and reading incoming frames.

Pure functions only.  Every outgoing A2A message is built here so the wire shape lives in one place; the
readers normalise what the runtime sends (proto-style enums, floats from protobuf Struct, the four
StreamResponse kinds) so the projection never sees wire quirks.
"""
import hashlib
from typing import Any, Dict, List, Optional, Tuple

ACCEPTED_OUTPUT_MODES = ["text/plain"]

# forwardedProps.iacCode key -> metadata.iac_code key (strings are whitespace-stripped, None dropped).
_PROP_TO_METADATA = (
    ("rosInvocationId", "rosInvocationId"),
    ("userId", "user_id"),
    ("channel", "channel"),
    ("candidatePresentation", "candidatePresentation"),
    ("runMode", "run_mode"),
    ("pipelineName", "pipeline_name"),
    ("model", "iac_code_model"),
    ("llmApiKey", "iac_code_api_key"),
    ("guidanceId", "guidance_id"),
    ("inputDigest", "input_digest"),
)
_ALIBABA_TO_METADATA = (
    ("accessKeyId", "alibaba_cloud_access_key_id"),
    ("accessKeySecret", "alibaba_cloud_access_key_secret"),
    ("securityToken", "alibaba_cloud_security_token"),
    ("regionId", "alibaba_cloud_region_id"),
)

SUCCESS_STATES = frozenset({"completed", "input-required"})
FAILED_STATES = frozenset({"failed", "rejected", "auth-required"})
TERMINAL_STATES = frozenset({"completed", "failed", "rejected", "canceled"})
# The roles of a message the agent sent (a tuple: a role of any type, even an unhashable one, is compared).
AGENT_ROLES = (None, "ROLE_AGENT", "agent", "ROLE_UNSPECIFIED")


def context_id_for(thread_id: str) -> str:
    """Deterministic, so a restarted adapter finds the same A2A context for a thread."""
    return "agui-" + hashlib.sha256(thread_id.encode("utf-8")).hexdigest()[:40]


def build_metadata(props: Dict[str, Any], cwd: str, language: str) -> Dict[str, Any]:
    """``metadata.iac_code`` for every message of a run (new turn, answers, guidance)."""
    meta: Dict[str, Any] = {"cwd": cwd, "preferredLanguage": language,
                            "cleanupOnly": bool(props.get("cleanupOnly", False))}
    for prop, key in _PROP_TO_METADATA:
        value = props.get(prop)
        if isinstance(value, str):
            value = value.strip()
        if value is not None and value != "":
            meta[key] = value
    if isinstance(props.get("llmHeaders"), dict):
        meta["llm_headers"] = dict(props["llmHeaders"])
    if isinstance(props.get("executionFence"), dict):
        meta["execution_fence"] = props["executionFence"]
    thinking = props.get("thinking")
    if isinstance(thinking, dict):
        block: Dict[str, Any] = {"enabled": bool(thinking.get("enabled", False))}
        if isinstance(thinking.get("effort"), str):
            block["effort"] = thinking["effort"]
        budget = thinking.get("budget")
        if isinstance(budget, int) and not isinstance(budget, bool) and budget > 0:
            block["budget"] = budget
        meta["thinking"] = block
    cloud = props.get("alibabaCloud")
    if isinstance(cloud, dict):
        for prop, key in _ALIBABA_TO_METADATA:
            value = cloud.get(prop)
            if isinstance(value, str) and value.strip():
                meta[key] = value.strip()
    return meta


def build_message(message_id: str, parts: List[Dict[str, Any]], context_id: str, metadata: Dict[str, Any],
                  task_id: Optional[str] = None) -> Dict[str, Any]:
    message: Dict[str, Any] = {"messageId": message_id, "role": "ROLE_USER", "parts": parts,
                               "metadata": {"iac_code": metadata}, "contextId": context_id}
    if task_id:
        message["taskId"] = task_id
    return message


def send_params(message: Dict[str, Any]) -> Dict[str, Any]:
    """Params of SendMessage / SendStreamingMessage."""
    return {"message": message, "configuration": {"acceptedOutputModes": list(ACCEPTED_OUTPUT_MODES)}}


def normalize_state(state: Any) -> str:
    """``TASK_STATE_INPUT_REQUIRED`` / ``input-required`` / ``input_required`` -> ``input-required``."""
    if not isinstance(state, str):
        return ""
    value = state.strip().lower()
    if value.startswith("task_state_"):
        value = value[len("task_state_"):]
    return value.replace("_", "-")


def unwrap(result: Any) -> Tuple[str, Dict[str, Any]]:
    """Split a StreamResponse (or a bare Task / Message) into its kind and object."""
    if isinstance(result, dict):
        for kind in ("task", "statusUpdate", "artifactUpdate", "message"):
            inner = result.get(kind)
            if isinstance(inner, dict):
                return kind, inner
        if "status" in result and "id" in result:
            return "task", result
        if "parts" in result and "role" in result:
            return "message", result
        return "unknown", result
    return "unknown", {}


def frame_task_id(kind: str, obj: Dict[str, Any]) -> Optional[str]:
    value = obj.get("taskId") if kind != "task" else obj.get("id")
    if value is None and kind == "task":
        value = obj.get("taskId")
    return value if isinstance(value, str) and value else None


def iac_code_metadata(obj: Dict[str, Any]) -> Dict[str, Any]:
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        inner = meta.get("iac_code")
        if isinstance(inner, dict):
            return inner
    return {}


def is_agent_message(message: Any) -> bool:
    if not isinstance(message, dict):
        return False
    return message.get("role") in AGENT_ROLES


def message_text(message: Any) -> str:
    """Concatenated text parts of an agent message ('' for user messages or none)."""
    if not is_agent_message(message):
        return ""
    parts = message.get("parts")
    if not isinstance(parts, list):
        return ""
    if len(parts) == 1:      # a streamed delta: one text part
        text = parts[0].get("text") if isinstance(parts[0], dict) else None
        return text if isinstance(text, str) else ""
    return "".join(part["text"] for part in parts if isinstance(part, dict) and isinstance(part.get("text"), str))


def rpc_error_is_backup_not_ready(data: Any) -> bool:
    if isinstance(data, dict):
        return data.get("code") == "SESSION_BACKUP_NOT_READY" and bool(data.get("retryable"))
    if isinstance(data, list):
        return any(rpc_error_is_backup_not_ready(item) for item in data)
    return False

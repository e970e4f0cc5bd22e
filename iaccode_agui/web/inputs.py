"""Turn a raw POST body into a validated run (or cancel) request, entirely before SSE starts.

Every rejection is ``AguiError("INVALID_INPUT", <specific message>)`` so a client learns what to fix, and a
rejected request never consumes its ``runId``: the client fixes the body and retries with the same id.
Structural rules live in the JSON Schema documents under ``schemas/``; what needs a specific message or
touches the file system (user content, images) is checked here in Python, the workspace path in
``workspace``.  Schema error text is never exposed because it can echo secrets: ``input_errors`` names the
field and the problem from the failing keyword, and the field's JSON pointer travels as ``field``.
"""
import base64
import binascii
import dataclasses
import hashlib
import json
import os
from typing import Any, Callable, Dict, FrozenSet, List, Optional, Sequence, Tuple

import jsonschema
from jsonschema.exceptions import best_match

from iaccode_agui import errors
from iaccode_agui.canonical import canonical_json
from iaccode_agui.config import DEFAULT_MAX_MESSAGES, MAX_CLIENT_TOOL_BYTES, MAX_CLIENT_TOOLS
from iaccode_agui.errors import AguiError
from iaccode_agui.i18n import negotiate, normalize_tag
from iaccode_agui.web.input_errors import invalid_input as _invalid
from iaccode_agui.web.input_errors import missing_or_wrong, schema_problem, wrong_type
from iaccode_agui.web.jsoncheck import compile_schema
from iaccode_agui.web.workspace import create_cwd, locate_cwd, resolve_cwd  # noqa: F401  (part of this API)

MAX_IMAGE_BYTES = 8 * 1024 * 1024
MAX_TOTAL_IMAGE_BYTES = 10 * 1024 * 1024
MAX_FILENAME_BYTES = 255

_SCHEMA_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "schemas")

# Magic numbers: the declared type must match the bytes, or the upstream decoder would choke later.
_IMAGE_SIGNATURES = {
    "image/png": (b"\x89PNG\r\n\x1a\n",),
    "image/jpeg": (b"\xff\xd8\xff",),
    "image/gif": (b"GIF87a", b"GIF89a"),
}
IMAGE_MEDIA_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")
_WINDOWS_RESERVED = frozenset(
    ["CON", "PRN", "AUX", "NUL"] + ["COM%d" % i for i in range(1, 10)] + ["LPT%d" % i for i in range(1, 10)]
)


@dataclasses.dataclass(frozen=True)
class _Validator:
    accepts: Callable[[Any], bool]     # the compiled predicate: answers valid requests in microseconds
    full: Any                          # jsonschema's validator: finds the error to report


def _load_validator(name: str, subschema: Optional[str] = None) -> _Validator:
    """Read, check and compile a schema document once, at import, so each request only pays for validation."""
    with open(os.path.join(_SCHEMA_DIR, name), encoding="utf-8") as handle:
        document = json.load(handle)
    jsonschema.Draft202012Validator.check_schema(document)
    schema = document["$defs"][subschema] if subschema is not None else document
    # jsonschema gets the sub-schema as its own document, sharing the definitions its references point to.
    full = document if subschema is None else {"$ref": "#/$defs/" + subschema, "$defs": document["$defs"]}
    return _Validator(compile_schema(schema, document), jsonschema.Draft202012Validator(full))


_ENVELOPE = _load_validator("run_agent_input.json")
_RESUME = _load_validator("run_agent_input.json", "resume")
_MESSAGE = _load_validator("run_agent_input.json", "message")
_PROPS = _load_validator("iaccode_props.json")
_CANCEL = _load_validator("cancel_request.json")
_SUBSCRIBE = _load_validator("subscribe_request.json")
_IDENTIFIER = _load_validator("run_agent_input.json", "identifier")
_CLIENT_TOOLS = _load_validator("run_agent_input.json", "clientTools")


# Roles a RunAgentInput history may carry.  ``activity`` and ``reasoning`` entries are display history,
# never model input; system/developer/assistant/tool history already lives in the runtime's session, so
# only the newest user message is sent.
MESSAGE_ROLES = frozenset(["user", "assistant", "system", "developer", "tool", "activity", "reasoning"])


@dataclasses.dataclass(frozen=True)
class InputPolicy:
    """What a route family accepts beyond the strict ``POST /`` contract."""

    default_cwd: Optional[str] = None   # lets a request without forwardedProps.iacCode run (server defaults)
    agentcore: bool = False             # /ag-ui/agent: forwardedProps may be {} and may carry "agentcore"
    max_image_bytes: int = MAX_IMAGE_BYTES
    max_images_bytes: int = MAX_TOTAL_IMAGE_BYTES
    client_tools: str = "reject"        # "ignore": client tools are checked, accepted and never sent upstream


STRICT = InputPolicy()


@dataclasses.dataclass(frozen=True)
class UserMessage:
    message_id: str
    parts: List[Dict[str, Any]]


@dataclasses.dataclass(frozen=True)
class RunRequest:
    thread_id: str
    run_id: str
    parent_run_id: Optional[str]
    props: Dict[str, Any]
    cwd: str
    user_message: Optional[UserMessage]
    resume: Optional[List[Dict[str, Any]]]
    digest: str
    # No resume and the newest message is a ``tool`` message: a client answering an interrupt the wrong way
    # (only ``resume`` answers one; a tool message is history, never sent upstream).
    tool_answer: bool = False
    # The ids of the input's messages: a client holding the thread's latest stored one is in sync.
    message_ids: FrozenSet[str] = frozenset()
    ignored_tools: int = 0              # client tools accepted and not sent upstream (--client-tools ignore)
    cwd_created: bool = False           # the workspace directory did not exist: this request created it

    @property
    def is_resume(self) -> bool:
        return self.resume is not None

    @property
    def ros_invocation_id(self) -> str:
        return self.props["rosInvocationId"]

    @property
    def user_id(self) -> Optional[str]:
        return self.props.get("userId")

    @property
    def run_mode(self) -> Optional[str]:
        """None when the client did not choose: A2A then picks the mode itself."""
        return self.props.get("runMode")


# --- errors ---------------------------------------------------------------------------------------

def _check(validator: _Validator, instance: Any, message: str, prefix: Sequence[Any] = ()) -> None:
    if validator.accepts(instance):
        return
    error = best_match(validator.full.iter_errors(instance))
    if error is None:
        return
    path, problem = schema_problem(error)
    raise _invalid(message, list(prefix) + path,
                   problem=problem if message in errors.PROBLEM_HEADS else None)


# --- public API -------------------------------------------------------------------------------------

def canonical_digest(value: Any) -> str:
    """Key order and whitespace must not change the digest; non-ASCII text is hashed as UTF-8.

    ``surrogatepass`` keeps a lone surrogate (legal in JSON escapes) from crashing the hash.
    """
    return hashlib.sha256(canonical_json(value).encode("utf-8", "surrogatepass")).hexdigest()


def request_language(body: Any, accept_language: Optional[str], fallback: str) -> str:
    """The request's language; a usable ``preferredLanguage`` wins even if the rest of the body is bad.

    This runs before validation so that the error explaining an invalid body is already localised.
    """
    props = body.get("forwardedProps") if isinstance(body, dict) else None
    iac_code = props.get("iacCode") if isinstance(props, dict) else None
    preferred = iac_code.get("preferredLanguage") if isinstance(iac_code, dict) else None
    if isinstance(preferred, str):
        language = normalize_tag(preferred)
        if language is not None:
            return language
    return negotiate(accept_language, fallback)


def parse_cancel_request(body: Any) -> Tuple[str, str]:
    """(threadId, rosInvocationId): both are needed to prove the caller owns the execution."""
    if not isinstance(body, dict):
        raise _invalid(errors.MSG_INVALID_BODY)
    _check(_CANCEL, body, errors.MSG_CANCEL_IDENTITY)
    return body["threadId"], body["rosInvocationId"]


@dataclasses.dataclass(frozen=True)
class SubscribeRequest:
    thread_id: str
    run_id: str
    ros_invocation_id: str
    after_sequence: Optional[int]


def parse_subscribe_request(body: Any) -> SubscribeRequest:
    """The observer's proof of identity (like cancel's, plus the run) and where to start."""
    if not isinstance(body, dict):
        raise _invalid(errors.MSG_INVALID_BODY)
    _check(_SUBSCRIBE, body, errors.MSG_SUBSCRIBE_IDENTITY)
    after = body.get("afterSequence")
    return SubscribeRequest(body["threadId"], body["runId"], body["rosInvocationId"],
                            None if after is None else int(after))


def check_envelope(body: Any) -> None:
    """The RunAgentInput envelope alone (ids, lists, objects), for requests that are not new runs."""
    if not isinstance(body, dict):
        raise _invalid(errors.MSG_INVALID_BODY)
    _check(_ENVELOPE, body, errors.MSG_INVALID_ENVELOPE)


def is_identifier(value: Any) -> bool:
    """A thread or run id as the envelope schema accepts it."""
    return isinstance(value, str) and _IDENTIFIER.accepts(value)


def parse_run_request(body: Any, allowed_cwds: Sequence[str], policy: InputPolicy = STRICT,
                      max_messages: int = DEFAULT_MAX_MESSAGES) -> RunRequest:
    """Validate a RunAgentInput fully; the checks run in a fixed order so the first problem is reported.

    The message count is checked first and history is checked shallowly (only the turn input is sent
    upstream), so the cost of refusing or accepting a body grows with its size, not with schema work per
    message.  The workspace directory is created only once everything else has passed.
    """
    if not isinstance(body, dict):
        raise _invalid(errors.MSG_INVALID_BODY)
    messages = body.get("messages")
    if isinstance(messages, list) and len(messages) > max_messages:
        raise AguiError("REQUEST_TOO_LARGE", errors.MSG_TOO_MANY_MESSAGES, params={"limit": max_messages})
    _check(_ENVELOPE, body, errors.MSG_INVALID_ENVELOPE)
    _check_history(body["messages"])
    props = _iac_code_props(body, policy)
    ignored_tools = _client_tools(body["tools"], policy)
    cwd = locate_cwd(props["cwd"], allowed_cwds)
    resume = body.get("resume")
    if resume is not None:
        _check(_RESUME, resume, errors.MSG_RESUME_INVALID, ("resume",))
    resume = resume or None
    user_message = None if resume is not None else _latest_user_message(body["messages"], policy)
    digest = canonical_digest(body)
    created = not os.path.lexists(cwd)
    return RunRequest(
        thread_id=body["threadId"],
        run_id=body["runId"],
        parent_run_id=body.get("parentRunId"),
        props=props,
        cwd=create_cwd(cwd, allowed_cwds),
        user_message=user_message,
        resume=resume,
        digest=digest,
        tool_answer=resume is None and bool(body["messages"]) and body["messages"][-1]["role"] == "tool",
        message_ids=frozenset(message["id"] for message in body["messages"]),
        ignored_tools=ignored_tools,
        cwd_created=created,
    )


def default_props(thread_id: str, cwd: str) -> Dict[str, Any]:
    """Server-side iac-code properties for a client that knows nothing of iac-code.

    The invocation id is derived from the thread so that every turn and resume of one thread agrees on it
    without the client having to remember anything.
    """
    digest = hashlib.sha256(thread_id.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return {"schemaVersion": 1, "rosInvocationId": "agui-thread-" + digest, "cwd": cwd, "runMode": "normal"}


def _iac_code_props(body: Dict[str, Any], policy: InputPolicy) -> Dict[str, Any]:
    forwarded = body["forwardedProps"]
    if policy.agentcore:
        # Other keys belong to the client's own extensions (``agentcore`` carries attach): not ours to judge.
        forwarded = {key: value for key, value in forwarded.items() if key == "iacCode"}
    if "iacCode" not in forwarded and not forwarded:
        if policy.default_cwd:
            return default_props(body["threadId"], policy.default_cwd)
        if policy.agentcore:
            raise _invalid(errors.MSG_DEFAULT_CWD_REQUIRED, ("forwardedProps", "iacCode", "cwd"))
    _check(_PROPS, forwarded, errors.MSG_INVALID_PROPS, ("forwardedProps",))
    return forwarded["iacCode"]


def _client_tools(tools: List[Any], policy: InputPolicy) -> int:
    """How many client tools are ignored; they are refused unless the server was told to ignore them.

    Ignored tools still have to be AG-UI ``Tool`` objects within the bounds, so a client learns of a broken
    tool list here rather than from a runtime that will never see it.
    """
    if not tools:
        return 0
    if policy.client_tools != "ignore":
        raise _invalid(errors.MSG_TOOLS_UNSUPPORTED, ("tools",))
    if len(tools) > MAX_CLIENT_TOOLS:
        raise _invalid(errors.MSG_INVALID_ENVELOPE, ("tools",),
                       problem=(errors.MSG_FIELD_TOO_MANY, {"limit": MAX_CLIENT_TOOLS}))
    _check(_CLIENT_TOOLS, tools, errors.MSG_INVALID_ENVELOPE, ("tools",))
    for index, tool in enumerate(tools):
        if len(canonical_json(tool).encode("utf-8", "surrogatepass")) > MAX_CLIENT_TOOL_BYTES:
            raise _invalid(errors.MSG_INVALID_ENVELOPE, ("tools", index),
                           problem=(errors.MSG_FIELD_TOO_LARGE, {"limit": format_bytes(MAX_CLIENT_TOOL_BYTES)}))
    return len(tools)


def _check_history(messages: List[Any]) -> None:
    """Every message needs a string ``id`` and a known ``role``; content is checked only where it is used."""
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            raise _invalid(errors.MSG_INVALID_ENVELOPE, ("messages", index), problem=wrong_type("object"))
        for key in ("id", "role"):
            if not isinstance(message.get(key), str):
                raise _invalid(errors.MSG_INVALID_ENVELOPE, ("messages", index, key),
                               problem=missing_or_wrong(message, key, "string"))
        role = message["role"]
        if role not in MESSAGE_ROLES:
            raise _invalid(errors.MSG_ROLE_UNSUPPORTED, ("messages", index, "role"))
        if role == "tool" and not isinstance(message.get("toolCallId"), str):
            raise _invalid(errors.MSG_TOOL_CALL_ID_REQUIRED, ("messages", index, "toolCallId"))


# --- user content -----------------------------------------------------------------------------------

def _latest_user_message(messages: List[Dict[str, Any]], policy: InputPolicy = STRICT) -> UserMessage:
    """Only the newest user message is sent: earlier history already lives in the A2A session."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.get("role") == "user":
            _check(_MESSAGE, message, errors.MSG_INVALID_ENVELOPE, ("messages", index))
            parts = _convert_content(message.get("content"), ("messages", index, "content"), policy)
            return UserMessage(message_id=message["id"], parts=parts)
    raise _invalid(errors.MSG_USER_MESSAGE_REQUIRED, ("messages",))


_UNSUPPORTED_KINDS = {"audio": errors.MSG_AUDIO_UNSUPPORTED, "video": errors.MSG_VIDEO_UNSUPPORTED,
                      "document": errors.MSG_DOCUMENT_UNSUPPORTED}


def _convert_content(content: Any, path: Tuple[Any, ...], policy: InputPolicy = STRICT) -> List[Dict[str, Any]]:
    if isinstance(content, str):
        if not content.strip():
            raise _invalid(errors.MSG_USER_MESSAGE_REQUIRED, path)
        return [{"text": content}]
    if not isinstance(content, list):
        raise _invalid(errors.MSG_INVALID_ENVELOPE, path, problem=wrong_type("string | array"))
    parts: List[Dict[str, Any]] = []
    budget = _ImageBudget(policy.max_image_bytes, policy.max_images_bytes)
    for index, part in enumerate(content):
        part_path = path + (index,)
        if not isinstance(part, dict):
            raise _invalid(errors.MSG_INVALID_ENVELOPE, part_path, problem=wrong_type("object"))
        kind = part.get("type")
        if kind == "text":
            text = part.get("text")
            if not isinstance(text, str):
                raise _invalid(errors.MSG_INVALID_ENVELOPE, part_path + ("text",),
                               problem=missing_or_wrong(part, "text", "string"))
            if text.strip():
                parts.append({"text": text})
        elif kind == "image":
            parts.append(_convert_image_part(part, part_path, budget))
        elif kind == "binary":
            parts.append(_convert_binary_part(part, part_path, budget))
        elif kind in _UNSUPPORTED_KINDS:
            raise _invalid(_UNSUPPORTED_KINDS[kind], part_path)
        else:
            raise _invalid(errors.MSG_UNSUPPORTED_CONTENT, part_path)
    if not parts:
        raise _invalid(errors.MSG_USER_MESSAGE_REQUIRED, path)
    return parts


class _ImageBudget:
    """Numbers images for default filenames and enforces the per-message size total."""

    def __init__(self, per_image: int = MAX_IMAGE_BYTES, total: int = MAX_TOTAL_IMAGE_BYTES) -> None:
        self.count = 0
        self.total = 0
        self.per_image = per_image
        self.limit = total

    def check_one(self, size: int, path: Tuple[Any, ...]) -> None:
        if size > self.per_image:
            if self.per_image == MAX_IMAGE_BYTES:
                raise _invalid(errors.MSG_IMAGE_TOO_LARGE, path)
            raise _invalid(errors.MSG_IMAGE_OVER_LIMIT, path, {"limit": format_bytes(self.per_image)})

    def add(self, size: int, path: Tuple[Any, ...]) -> int:
        self.count += 1
        self.total += size
        if self.total > self.limit:
            if self.limit == MAX_TOTAL_IMAGE_BYTES:
                raise _invalid(errors.MSG_IMAGES_TOO_LARGE, path)
            raise _invalid(errors.MSG_IMAGES_OVER_LIMIT, path, {"limit": format_bytes(self.limit)})
        return self.count


def format_bytes(size: int) -> str:
    """A limit as people write it: whole MiB or KiB when exact, else bytes."""
    for unit, scale in (("MiB", 1024 * 1024), ("KiB", 1024)):
        if size >= scale and size % scale == 0:
            return "%d %s" % (size // scale, unit)
    return "%d bytes" % size


def _convert_image_part(part: Dict[str, Any], path: Tuple[Any, ...], budget: _ImageBudget) -> Dict[str, Any]:
    source = part.get("source")
    if not isinstance(source, dict):
        if "url" in part:
            raise _invalid(errors.MSG_REMOTE_MEDIA, path + ("url",))
        raise _invalid(errors.MSG_IMAGE_INVALID, path + ("source",))
    source_type = source.get("type")
    if source_type == "url" or (source_type is None and "url" in source):
        raise _invalid(errors.MSG_REMOTE_MEDIA, path + ("source",))
    if source_type != "data":
        raise _invalid(errors.MSG_UNSUPPORTED_CONTENT, path + ("source", "type"))
    metadata = part.get("metadata")
    filename = metadata.get("filename") if isinstance(metadata, dict) else None
    return _inline_image(source.get("mimeType"), source.get("value"), filename, path + ("source",), budget)


def _convert_binary_part(part: Dict[str, Any], path: Tuple[Any, ...], budget: _ImageBudget) -> Dict[str, Any]:
    """Pre-1.0 clients still send ``binary`` parts; an inline image is the only kind we can forward."""
    mime = _normalize_mime(part.get("mimeType"))
    if mime is None or not mime.startswith("image/"):
        raise _invalid(errors.MSG_UNSUPPORTED_CONTENT, path)
    if "data" not in part and isinstance(part.get("url"), str):
        raise _invalid(errors.MSG_REMOTE_MEDIA, path + ("url",))
    if "data" not in part:
        raise _invalid(errors.MSG_UNSUPPORTED_CONTENT, path)
    return _inline_image(part.get("mimeType"), part.get("data"), part.get("filename"), path, budget)


def _normalize_mime(value: Any) -> Optional[str]:
    if not isinstance(value, str):
        return None
    return value.split(";", 1)[0].strip().lower()


def _inline_image(
    mime_type: Any, value: Any, filename: Any, path: Tuple[Any, ...], budget: _ImageBudget
) -> Dict[str, Any]:
    mime = _normalize_mime(mime_type)
    if mime not in IMAGE_MEDIA_TYPES:
        raise _invalid(errors.MSG_IMAGE_TYPE, path + ("mimeType",))
    if not isinstance(value, str):
        raise _invalid(errors.MSG_IMAGE_INVALID, path)
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise _invalid(errors.MSG_IMAGE_INVALID, path) from None
    budget.check_one(len(raw), path)
    if not _has_signature(raw, mime):
        raise _invalid(errors.MSG_IMAGE_INVALID, path)
    number = budget.add(len(raw), path)
    name = filename if is_safe_filename(filename) else "agui-image-%d" % number
    return {
        "data": {"filename": name, "bytes": base64.b64encode(raw).decode("ascii")},
        "mediaType": mime,
    }


def _has_signature(raw: bytes, mime: str) -> bool:
    if mime == "image/webp":
        return len(raw) >= 12 and raw[:4] == b"RIFF" and raw[8:12] == b"WEBP"
    return any(raw.startswith(magic) for magic in _IMAGE_SIGNATURES[mime])


def is_safe_filename(name: Any) -> bool:
    """A client-supplied name is forwarded only if no file system could read it as a path or device."""
    if not isinstance(name, str) or not name or name in (".", ".."):
        return False
    try:
        if len(name.encode("utf-8")) > MAX_FILENAME_BYTES:
            return False
    except UnicodeEncodeError:
        return False
    if any(ch in "/\\" or ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F for ch in name):
        return False
    stem = name.split(".", 1)[0].rstrip(" ").upper()
    return stem not in _WINDOWS_RESERVED

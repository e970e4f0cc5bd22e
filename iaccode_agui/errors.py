"""The public error contract: every code, its HTTP status and its English message.

Codes, statuses and messages are a contract with clients (the same as `iac-code agui`), so they live in
this one table.  English strings double as message ids for the translation catalogs in ``catalogs/``;
``i18n.translate`` looks them up per request.  Anything not declared in ``MESSAGES`` is never translated.
"""
from typing import Any, Callable, Dict, Mapping, NamedTuple, Optional, Tuple

# --- messages (English source strings; the catalogs are keyed by them) -------------------------------
MSG_UNAUTHORIZED = "A valid bearer token is required."
MSG_UNSUPPORTED_MEDIA_TYPE = "Content-Type must be application/json."
MSG_REQUEST_TOO_LARGE = "The request body is too large."
MSG_INVALID_JSON = "The request body is not valid JSON."
MSG_JSON_TOO_DEEP = "The request body nests arrays and objects deeper than {limit} levels."
MSG_JSON_TOO_MANY_VALUES = "The request body holds more than {limit} JSON values."
MSG_JSON_DUPLICATE_KEY = "The request body repeats a key inside one JSON object."
MSG_JSON_NOT_FINITE = "The request body contains a number that is not finite."
MSG_AMBIGUOUS_FRAMING = ("The request has both Content-Length and Transfer-Encoding, "
                         "or Transfer-Encoding on HTTP/1.0.")
MSG_CONTENT_ENCODING = "Content-Encoding {coding} is not supported; send the body uncompressed."
MSG_TOO_MANY_MESSAGES = "The request has more than {limit} messages."
MSG_NOT_FOUND = "The requested resource was not found."
MSG_METHOD_NOT_ALLOWED = "The HTTP method is not allowed for this resource."
MSG_INTERNAL_ERROR = "The server failed to process the request."

MSG_INVALID_BODY = "The request body must be a JSON object."
MSG_INVALID_ENVELOPE = "Invalid AG-UI RunAgentInput envelope."
MSG_INVALID_PROPS = "Invalid iac-code forwarded properties."
MSG_TOOLS_UNSUPPORTED = "Client-defined tools are not supported."
MSG_USER_MESSAGE_REQUIRED = "A new run requires a user message."
MSG_REMOTE_MEDIA = "Remote media URLs are not supported."
MSG_UNSUPPORTED_CONTENT = "Only text and inline data images are supported."
MSG_IMAGE_TYPE = "The image type is not supported; use PNG, JPEG, GIF or WebP."
MSG_IMAGE_INVALID = "The image data is invalid."
MSG_IMAGE_TOO_LARGE = "An image exceeds the 8 MiB limit."
MSG_IMAGES_TOO_LARGE = "The images exceed the 10 MiB total limit."
MSG_CANCEL_IDENTITY = "threadId and rosInvocationId are required."
MSG_RESUME_INVALID = "The resume entries are invalid."
MSG_LAST_EVENT_ID = "The Last-Event-ID header must be a non-negative event id."
MSG_SUBSCRIBE_IDENTITY = ("threadId, runId and rosInvocationId are required; afterSequence must be a non-negative "
                          "integer.")

# An input refusal names the field and the problem: a head (which document is wrong) takes one problem, and each
# problem takes the field's name, so a few templates cover every field of every schema.
MSG_INVALID_ENVELOPE_AT = "Invalid AG-UI RunAgentInput envelope: {problem}"
MSG_INVALID_PROPS_AT = "Invalid iac-code forwarded properties: {problem}"
MSG_RESUME_INVALID_AT = "The resume entries are invalid: {problem}"
PROBLEM_HEADS: Dict[str, str] = {
    MSG_INVALID_ENVELOPE: MSG_INVALID_ENVELOPE_AT,
    MSG_INVALID_PROPS: MSG_INVALID_PROPS_AT,
    MSG_RESUME_INVALID: MSG_RESUME_INVALID_AT,
}
MSG_FIELD_REQUIRED = "`{field}` is required."
MSG_FIELD_UNKNOWN = "`{field}` is not a known field."
MSG_FIELD_TYPE = "`{field}` must be of JSON type {expected}."
MSG_FIELD_ONE_OF = "`{field}` must be one of {expected}."
MSG_FIELD_EQUALS = "`{field}` must be {expected}."
MSG_FIELD_EMPTY = "`{field}` must not be empty."
MSG_FIELD_TOO_LONG = "`{field}` must be at most {limit} characters long."
MSG_FIELD_TOO_SMALL = "`{field}` must be at least {limit}."
MSG_FIELD_TOO_BIG = "`{field}` must be at most {limit}."
MSG_FIELD_TOO_MANY = "`{field}` must have at most {limit} items."
MSG_FIELD_TOO_LARGE = "`{field}` must be at most {limit} of JSON."
MSG_FIELD_CONTROL = "`{field}` must not contain control characters."
MSG_FIELD_INVALID = "`{field}` is invalid."
MSG_CWD_NOT_ABSOLUTE = "`{field}` must be an absolute path."
MSG_CWD_NOT_ALLOWED = ("`{field}` is outside the allowed workspace roots; the server's IAC_CODE_AGUI_ALLOWED_CWDS "
                       "setting lists them.")
MSG_CWD_NOT_DIRECTORY = "`{field}` exists but is not a directory."
MSG_CWD_UNUSABLE = "`{field}` names a directory that cannot be created or accessed."

MSG_DUPLICATE_RUN_ID = "The AG-UI run id has already been used."
MSG_THREAD_BUSY = "The AG-UI thread already has an active run."
MSG_THREAD_BINDING_CONFLICT = "The AG-UI thread is already bound to another workspace or caller."
MSG_RESUME_REQUIRED = "The AG-UI thread is waiting for interrupt responses."
MSG_RESUME_NOT_BY_TOOL_MESSAGE = ("The AG-UI thread is waiting for interrupt responses; a tool message does not answer an "
                                  "interrupt: send the answer in resume.")
MSG_EXECUTION_LOST = "The execution to resume is no longer available."
MSG_RESUME_MISMATCH = "The resume request does not match the interrupted run."
MSG_TASK_UNAVAILABLE = "The A2A task to resume is unavailable."
MSG_STATE_UNAVAILABLE = "The AG-UI thread state is unavailable."
MSG_EXECUTION_NOT_FOUND = "The execution was not found."
MSG_RUN_ALREADY_ATTACHED = "Another client is already attached to this run."
MSG_RUN_ALREADY_TERMINAL = "The run has already ended and its events are no longer available."
MSG_RUNTIME_DRAINING = "The server is shutting down and does not accept new runs."
MSG_RUNTIME_CAPACITY = "The server has reached its limit of active runs."
MSG_WSGI_SERVER_UNSUPPORTED = "The WSGI server runs one request at a time per process; run the adapter on a threaded server."
MSG_RUN_LOG_INCOMPLETE = ("This stream cannot follow the run further: the server stopped recording its events (the run's "
                          "log reached its size limit or could not be written). The run itself goes on; re-attach to "
                          "reach its process.")
MSG_RUNTIME_MISMATCH = ("This thread belongs to another A2A runtime; every process sharing a state directory must "
                        "use the same runtime.")

MSG_INCOMPLETE_RESUME = "The resume must resolve every pending interrupt exactly once."
MSG_DUPLICATE_RESUME_IDS = "The resume contains duplicate interrupt ids."
MSG_UNKNOWN_INTERRUPT = "The resume references an unknown interrupt."
MSG_UNKNOWN_INTERRUPT_PENDING = "The resume references an unknown interrupt; the pending interrupts are {pending}."
MSG_NOTHING_PENDING = ("The AG-UI thread has no pending interrupt to resume; send a new user message without "
                       "resume instead.")
MSG_RESUME_PAYLOAD_INVALID = "The interrupt response payload is invalid."
MSG_RESUME_PAYLOAD_ALLOWED = "The interrupt response payload is invalid: interrupt `{interrupt}` accepts {allowed}."
MSG_RESUME_PAYLOAD_MISSING = "A resolved interrupt requires a payload."
MSG_RESUME_ALREADY_APPLIED = "The interrupt response has already been applied."
MSG_EXECUTION_EXPIRED = "The interrupted execution has expired."
MSG_STATE_PERSISTENCE_FAILED = "The adapter could not persist recovery state."
MSG_COMMIT_FAILED = "The accepted interrupt response could not be committed."
MSG_A2A_UNAVAILABLE = "The local A2A execution service is unavailable."
MSG_A2A_NOT_ACCEPTED = "The A2A interrupt response was not accepted."
MSG_A2A_REJECTED = "The A2A service rejected the interrupt response."
MSG_A2A_IDLE_TIMEOUT = "The local A2A execution service stopped responding."
MSG_A2A_PROTOCOL_ERROR = "The A2A task, context or session does not match the interrupted run."
MSG_CONVERSATION_LOST = "The runtime no longer has this conversation; start a new thread."
MSG_A2A_EXECUTION_FAILED = "The A2A execution failed."
MSG_CANCELLED = "The execution was cancelled."
MSG_SESSION_BACKUP_NOT_READY = "The iac-code session backup is not ready yet. Retry after 3 seconds."

# --- the AgentCore-compatible route family (/ag-ui/agent) ------------------------------------------
MSG_UNAUTHORIZED_API_KEY = "A valid API key (x-api-key) or bearer token is required."
MSG_SESSION_ID_MISMATCH = "X-AgentCore-Session-ID must equal RunAgentInput.threadId."
MSG_INVALID_ATTACH = "forwardedProps.agentcore.attach.afterSequence must be a non-negative safe integer."
MSG_ATTACH_MESSAGES = "An attach request must send an empty messages list."
MSG_INVALID_STOP = "The stop request must be a JSON object with a string threadId and runId."
MSG_RUN_NOT_FOUND = "The run was not found or its record is no longer kept."
MSG_RUN_CANCELLED = "Run cancelled."
MSG_RUNTIME_NOT_READY = "The execution runtime is not ready or cannot be reached yet."
MSG_DEFAULT_CWD_REQUIRED = ("No workspace was given: send forwardedProps.iacCode.cwd or start the server with "
                            "--default-cwd (IAC_CODE_AGUI_DEFAULT_CWD).")
MSG_ROLE_UNSUPPORTED = "A message role is not supported; use user, assistant, system, developer or tool."
MSG_TOOL_CALL_ID_REQUIRED = "A tool message requires a toolCallId."
MSG_AUDIO_UNSUPPORTED = "Audio input is not supported; send text or inline images."
MSG_VIDEO_UNSUPPORTED = "Video input is not supported; send text or inline images."
MSG_DOCUMENT_UNSUPPORTED = "Document input is not supported; send text or inline images."
MSG_BODY_OVER_LIMIT = "The request body exceeds the limit of {limit}."
MSG_IMAGE_OVER_LIMIT = "An image exceeds the limit of {limit}."
MSG_IMAGES_OVER_LIMIT = "The images exceed the total limit of {limit}."
MSG_FILE_LINK_INVALID = "The file link is unknown or has expired."
MSG_EVENT_TRUNCATED = "[truncated by the adapter: the original content had {size} bytes]"

# --- stored conversations (GET /threads/{threadId}/messages) -----------------------------------------
MSG_THREAD_NOT_FOUND = "The thread was not found: it was never used here or it has been removed."
MSG_THREAD_ID_INVALID = "The thread id must be 1 to 1024 characters without control characters."
MSG_HISTORY_IMAGE = "[image {name} ({type}): not kept in the conversation]"

MSG_PERMISSION_REQUIRED = "Permission required"
MSG_INPUT_REQUIRED = "Input required"

# --- codes: code -> (HTTP status when reported before SSE, default message) --------------------------
ERRORS: Dict[str, Tuple[int, str]] = {
    "UNAUTHORIZED": (401, MSG_UNAUTHORIZED),
    "UNSUPPORTED_MEDIA_TYPE": (415, MSG_UNSUPPORTED_MEDIA_TYPE),
    "REQUEST_TOO_LARGE": (413, MSG_REQUEST_TOO_LARGE),
    "INVALID_JSON": (400, MSG_INVALID_JSON),
    "INVALID_INPUT": (400, MSG_INVALID_ENVELOPE),
    "NOT_FOUND": (404, MSG_NOT_FOUND),
    "METHOD_NOT_ALLOWED": (405, MSG_METHOD_NOT_ALLOWED),
    "INTERNAL_ERROR": (500, MSG_INTERNAL_ERROR),
    "DUPLICATE_RUN_ID": (409, MSG_DUPLICATE_RUN_ID),
    "RUN_ID_CONFLICT": (409, MSG_DUPLICATE_RUN_ID),
    "THREAD_BUSY": (409, MSG_THREAD_BUSY),
    "THREAD_BINDING_CONFLICT": (409, MSG_THREAD_BINDING_CONFLICT),
    "RESUME_REQUIRED": (409, MSG_RESUME_REQUIRED),
    "EXECUTION_LOST": (409, MSG_EXECUTION_LOST),
    "STATE_UNAVAILABLE": (503, MSG_STATE_UNAVAILABLE),
    "EXECUTION_NOT_FOUND": (404, MSG_EXECUTION_NOT_FOUND),
    "RUN_ALREADY_ATTACHED": (409, MSG_RUN_ALREADY_ATTACHED),
    "RUN_ALREADY_TERMINAL": (409, MSG_RUN_ALREADY_TERMINAL),
    "RUNTIME_DRAINING": (503, MSG_RUNTIME_DRAINING),
    "RUNTIME_CAPACITY_EXCEEDED": (429, MSG_RUNTIME_CAPACITY),
    "WSGI_SERVER_UNSUPPORTED": (503, MSG_WSGI_SERVER_UNSUPPORTED),
    "RUNTIME_MISMATCH": (503, MSG_RUNTIME_MISMATCH),
    "RUN_LOG_INCOMPLETE": (503, MSG_RUN_LOG_INCOMPLETE),
    # Reported as RUN_ERROR inside the SSE stream (the status is what they would be over plain HTTP).
    "INCOMPLETE_RESUME": (409, MSG_INCOMPLETE_RESUME),
    "UNKNOWN_INTERRUPT": (409, MSG_UNKNOWN_INTERRUPT),
    "RESUME_PAYLOAD_INVALID": (400, MSG_RESUME_PAYLOAD_INVALID),
    "RESUME_ALREADY_APPLIED": (409, MSG_RESUME_ALREADY_APPLIED),
    "EXECUTION_EXPIRED": (410, MSG_EXECUTION_EXPIRED),
    "STATE_PERSISTENCE_FAILED": (503, MSG_STATE_PERSISTENCE_FAILED),
    "A2A_UNAVAILABLE": (502, MSG_A2A_UNAVAILABLE),
    "A2A_PROTOCOL_ERROR": (502, MSG_A2A_PROTOCOL_ERROR),
    # A new turn found that the runtime has forgotten the thread's session (a restarted runtime that does not
    # persist its sessions, or one whose sessions were deleted): retrying cannot help, a new thread can.
    "CONVERSATION_LOST": (409, MSG_CONVERSATION_LOST),
    "A2A_EXECUTION_FAILED": (502, MSG_A2A_EXECUTION_FAILED),
    "CANCELLED": (409, MSG_CANCELLED),
    "SESSION_BACKUP_NOT_READY": (503, MSG_SESSION_BACKUP_NOT_READY),
    # Both route families check X-AgentCore-Session-ID against threadId.
    "SESSION_ID_MISMATCH": (400, MSG_SESSION_ID_MISMATCH),
    # The AgentCore-compatible route family's own codes (see AGENTCORE_CODES for the renamed ones).
    "INVALID_AG_UI_REQUEST": (400, MSG_INVALID_ENVELOPE),
    "INVALID_ATTACH": (400, MSG_INVALID_ATTACH),
    "INVALID_STOP": (400, MSG_INVALID_STOP),
    "EXECUTOR_INPUT_UNSUPPORTED": (400, MSG_UNSUPPORTED_CONTENT),
    "RUN_NOT_FOUND": (404, MSG_RUN_NOT_FOUND),
    "RUN_ALREADY_EXISTS": (409, MSG_DUPLICATE_RUN_ID),
    "SESSION_UNAVAILABLE": (409, MSG_THREAD_BUSY),
    "PAYLOAD_TOO_LARGE": (413, MSG_REQUEST_TOO_LARGE),
    "RUNTIME_NOT_READY": (503, MSG_RUNTIME_NOT_READY),
    "RUN_CANCELLED": (409, MSG_RUN_CANCELLED),
    "FILE_LINK_NOT_FOUND": (404, MSG_FILE_LINK_INVALID),
    # The history route: a thread with neither state nor conversation (never used, or pruned).
    "THREAD_NOT_FOUND": (404, MSG_THREAD_NOT_FOUND),
}

# How the AgentCore-compatible routes spell a code of the run core (codes not listed keep their name).
# ``SESSION_QUEUE_FULL`` and ``RUN_ATTACH_UNSUPPORTED`` have no entry on purpose: nothing is ever
# queued (a busy thread is refused at once) and attach is always available.
AGENTCORE_CODES: Dict[str, str] = {
    "INVALID_INPUT": "INVALID_AG_UI_REQUEST",
    "DUPLICATE_RUN_ID": "RUN_ALREADY_EXISTS",
    "RUN_ID_CONFLICT": "RUN_ALREADY_EXISTS",
    "THREAD_BUSY": "SESSION_UNAVAILABLE",
    "REQUEST_TOO_LARGE": "PAYLOAD_TOO_LARGE",
    "EXECUTION_NOT_FOUND": "RUN_NOT_FOUND",
    "CANCELLED": "RUN_CANCELLED",
}

# Input refusals that are about what the executor can take, not about a malformed request: on the
# AgentCore routes their code follows the message (POST / reports them all as INVALID_INPUT).
AGENTCORE_MESSAGE_CODES: Dict[str, str] = {
    MSG_TOOLS_UNSUPPORTED: "EXECUTOR_INPUT_UNSUPPORTED",
    MSG_REMOTE_MEDIA: "EXECUTOR_INPUT_UNSUPPORTED",
    MSG_UNSUPPORTED_CONTENT: "EXECUTOR_INPUT_UNSUPPORTED",
    MSG_AUDIO_UNSUPPORTED: "EXECUTOR_INPUT_UNSUPPORTED",
    MSG_VIDEO_UNSUPPORTED: "EXECUTOR_INPUT_UNSUPPORTED",
    MSG_DOCUMENT_UNSUPPORTED: "EXECUTOR_INPUT_UNSUPPORTED",
    MSG_IMAGE_TOO_LARGE: "PAYLOAD_TOO_LARGE",
    MSG_IMAGES_TOO_LARGE: "PAYLOAD_TOO_LARGE",
    MSG_IMAGE_OVER_LIMIT: "PAYLOAD_TOO_LARGE",
    MSG_IMAGES_OVER_LIMIT: "PAYLOAD_TOO_LARGE",
}

# A renamed code whose core message would read wrongly under the new name gets this one instead.
AGENTCORE_MESSAGES: Dict[str, str] = {
    "RUN_CANCELLED": MSG_RUN_CANCELLED,
}

# Codes that say the upstream failed (not the client, not this adapter): counted apart in the metrics.
UPSTREAM_CODES = frozenset({"A2A_UNAVAILABLE", "A2A_PROTOCOL_ERROR", "A2A_EXECUTION_FAILED",
                            "SESSION_BACKUP_NOT_READY", "CONVERSATION_LOST"})

# Seconds a client should wait before retrying, sent as ``Retry-After`` with these codes.  A busy thread frees
# itself as soon as its run ends or its lost client is noticed, so one second is the useful retry step.
RETRY_AFTER: Dict[str, str] = {"THREAD_BUSY": "1"}

MESSAGES: Tuple[str, ...] = tuple(
    value for name, value in sorted(globals().items()) if name.startswith("MSG_") and isinstance(value, str)
)


class Text(NamedTuple):
    """A message with its parameters; a parameter that is itself a ``Text`` is translated before it is used."""
    message: str
    params: Mapping[str, Any] = {}


def render(message: str, params: Mapping[str, Any], translate: Callable[[str], str]) -> str:
    """``message`` translated, its ``{name}`` placeholders filled (nested ``Text`` parameters translated too)."""
    translated = translate(message)
    if not params:
        return translated
    return translated.format(**{name: render(value.message, value.params, translate) if isinstance(value, Text)
                                else value for name, value in params.items()})


class AguiError(Exception):
    """An error with a public code; raised anywhere, rendered by the HTTP layer or as RUN_ERROR.

    ``message`` is an English source string from this module (so it can be translated) or, for text
    that comes from the A2A runtime, free text that is passed through untouched.
    ``params`` fill the ``{name}`` placeholders of a message after it is translated, so a catalog entry
    keeps one placeholder per value instead of one entry per value.  ``field`` is the JSON pointer of the
    request field a refusal is about, sent to the client beside the message.
    """

    def __init__(self, code: str, message: Optional[str] = None, *, headers: Optional[Dict[str, str]] = None,
                 params: Optional[Mapping[str, Any]] = None, field: Optional[str] = None):
        if code not in ERRORS:
            raise ValueError("undeclared error code %r" % code)
        self.code = code
        self.message = message if message is not None else ERRORS[code][1]
        self.headers = dict(headers or {})
        self.params = dict(params or {})
        self.field = field
        if code in RETRY_AFTER:
            self.headers.setdefault("Retry-After", RETRY_AFTER[code])
        super().__init__("%s: %s" % (code, self.message))

    @property
    def status(self) -> int:
        return ERRORS[self.code][0]

    def render(self, translate: Callable[[str], str]) -> str:
        """The message translated by ``translate`` with its placeholders filled."""
        return render(self.message, self.params, translate)


def agentcore_error(exc: AguiError) -> AguiError:
    """``exc`` as the AgentCore-compatible routes report it (same message unless the table says otherwise)."""
    code = AGENTCORE_MESSAGE_CODES.get(exc.message) if exc.code == "INVALID_INPUT" else None
    code = code or AGENTCORE_CODES.get(exc.code, exc.code)
    if code == exc.code:
        return exc
    return AguiError(code, AGENTCORE_MESSAGES.get(code, exc.message), headers=exc.headers, params=exc.params,
                     field=exc.field)


def error_body(code: str, message: str, field: Optional[str] = None) -> Dict[str, Dict[str, str]]:
    """The one JSON shape of every error answered before SSE starts; ``field`` only when the error names one."""
    error = {"code": code, "message": message}
    if field is not None:
        error["field"] = field
    return {"error": error}

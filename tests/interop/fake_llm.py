"""A scripted OpenAI-compatible chat-completions server for driving the real runtime offline.

The real `iac-code a2a` runtime needs an LLM; this one answers deterministically from the
last message of each request so interoperability tests can provoke a plain reply, a
`write_file` or `bash` permission interrupt, and the closing turn after a tool result,
without any network access or credentials.

In pipeline mode the runtime offers the step tools `complete_step` and `ask_user_question`;
the script then plays the `intent_parsing` step: one question, then a conclusion that is
valid against the step's schema and exits the pipeline early (`is_infra_intent: false`).
An invalid conclusion makes the runtime retry for ~150 turns, so the shape matters.
"""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, Iterator, List, Optional, Tuple

MODEL_ID = "fake-model"
WRITE_ARGS = {"path": "hello.txt", "content": "hello from fake llm\n"}
BASH_ARGS = {"command": "echo hi > bash_out.txt", "description": "write a file"}
CLOSING_TEXT = "Done. The tool finished."
SLOW_WORDS = 40
SLOW_DELAY = 0.25  # seconds between text deltas of a "slow" reply, room for a cancel

# Pipeline step (`selling` / `intent_parsing`), as offered by iac-code 0.16.
COMPLETE_STEP = "complete_step"
ASK_USER_QUESTION = "ask_user_question"
PIPELINE_INTRO = "I need one detail first."
PIPELINE_OPTIONS = [{"id": "not_now", "label": "Not now"},
                    {"id": "small_website", "label": "A small website"}]
PIPELINE_ASK_ARGS = {"question": "What should be deployed on Alibaba Cloud?",
                     "options": PIPELINE_OPTIONS, "allow_free_text": True,
                     "free_text_prompt": "Describe the application"}
PIPELINE_REJECTION = "The user chose not to deploy anything now."


def _text_of(message: Dict[str, Any]) -> str:
    """Flatten OpenAI message content (a string or a list of typed parts) to plain text."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        pieces = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                pieces.append(part["text"])
        return "".join(pieces)
    return ""


def _words(text: str) -> List[str]:
    """Split text into word-sized deltas that still concatenate back to the original."""
    out: List[str] = []
    current = ""
    for ch in text:
        current += ch
        if ch == " ":
            out.append(current)
            current = ""
    if current:
        out.append(current)
    return out


def _split_in_pieces(text: str, count: int) -> List[str]:
    """Cut a string into `count` roughly equal pieces, so tool arguments arrive as partial JSON."""
    size = max(1, -(-len(text) // count))
    return [text[i:i + size] for i in range(0, len(text), size)]


class Script:
    """The reply decided for one request: reasoning, text and an optional tool call."""

    def __init__(self, reasoning: str, text: str,
                 tool: Optional[Tuple[str, Dict[str, Any]]] = None,
                 delay: float = 0.0) -> None:
        self.reasoning = reasoning
        self.text = text
        self.tool = tool
        self.delay = delay


def _tool_names(tools: Optional[List[Dict[str, Any]]]) -> List[str]:
    return [str((t.get("function") or {}).get("name")) for t in tools or []
            if isinstance(t, dict)]


def _called_tool(messages: List[Dict[str, Any]], call_id: Any) -> str:
    """The name of the assistant tool call a `tool` message answers."""
    for message in reversed(messages):
        for call in message.get("tool_calls") or []:
            if call.get("id") == call_id:
                return str((call.get("function") or {}).get("name"))
    return ""


def pipeline_conclusion(answer: str) -> Dict[str, Any]:
    """`complete_step` arguments ending `intent_parsing` with an early exit.

    The answer is copied into the clarification fields, which the step's completion guards
    require once a question was asked.
    """
    conclusion: Dict[str, Any] = {"is_infra_intent": False, "confidence": "high",
                                  "category": "other", "rejection_reason": PIPELINE_REJECTION,
                                  "user_message_summary": "no deployment requested"}
    try:
        parsed = json.loads(answer)
    except ValueError:
        parsed = None
    selected = parsed.get("selected_id") if isinstance(parsed, dict) else None
    free_text = parsed.get("free_text") if isinstance(parsed, dict) else None
    if isinstance(selected, str) and selected:
        conclusion["clarification_choice"] = selected
    elif isinstance(free_text, str) and free_text:
        conclusion["clarification_text"] = free_text
    else:
        conclusion["clarification_text"] = answer[:200] or "no answer"
    return {"conclusion": conclusion}


def decide_pipeline(messages: List[Dict[str, Any]]) -> Script:
    """One `ask_user_question`, then `complete_step` with an early-exit conclusion."""
    last = messages[-1] if messages else {}
    if last.get("role") == "tool":
        if _called_tool(messages, last.get("tool_call_id")) == ASK_USER_QUESTION:
            return Script("The user answered; conclude.", "",
                          (COMPLETE_STEP, pipeline_conclusion(_text_of(last))))
        return Script("Conclude the step.", "", (COMPLETE_STEP, pipeline_conclusion("")))
    if last.get("role") == "user" and COMPLETE_STEP in _text_of(last):
        return Script("The runtime wants a conclusion.", "",
                      (COMPLETE_STEP, pipeline_conclusion("")))
    return Script("The request is vague; ask the user.", PIPELINE_INTRO,
                  (ASK_USER_QUESTION, json.loads(json.dumps(PIPELINE_ASK_ARGS))))


def decide(messages: List[Dict[str, Any]],
           tools: Optional[List[Dict[str, Any]]] = None) -> Script:
    """Choose the reply from the last message only, so every turn is predictable."""
    names = _tool_names(tools)
    if COMPLETE_STEP in names and ASK_USER_QUESTION in names:
        return decide_pipeline(messages)
    last = messages[-1] if messages else {}
    if last.get("role") == "tool":
        return Script("The tool ran; summarise.", CLOSING_TEXT)
    text = _text_of(last)
    lowered = text.lower()
    if last.get("role") == "user" and "write" in lowered:
        return Script("The user wants a file written.", "I'll create hello.txt for you.",
                      ("write_file", dict(WRITE_ARGS)))
    if last.get("role") == "user" and "slow" in lowered:
        return Script("Taking my time.", "tick " * SLOW_WORDS, delay=SLOW_DELAY)
    if last.get("role") == "user" and "bash" in lowered:
        return Script("The user wants a shell command.", "I'll run a command.",
                      ("bash", dict(BASH_ARGS)))
    return Script("Let me think about the answer.",
                  "Hello! I am the fake LLM. Your message was: " + text)


class FakeLLM:
    """Owns the HTTP server thread and the log of received requests."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._lock = threading.Lock()
        self._requests: List[Dict[str, Any]] = []
        self._tool_counter = 0
        self._server = ThreadingHTTPServer((host, port), self._handler_class())
        self._server.daemon_threads = True
        self._thread: Optional[threading.Thread] = None

    # lifecycle -----------------------------------------------------------------
    def start(self) -> "FakeLLM":
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        name="fake-llm", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> "FakeLLM":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        """The OpenAI base URL, ending in /v1 as SDK clients expect."""
        return "http://127.0.0.1:%d/v1" % self.port

    # request log ---------------------------------------------------------------
    @property
    def requests(self) -> List[Dict[str, Any]]:
        """A snapshot copy of every request received: method, path and parsed JSON body."""
        with self._lock:
            return list(self._requests)

    def chat_requests(self) -> List[Dict[str, Any]]:
        return [r["body"] for r in self.requests
                if r["method"] == "POST" and r["path"].endswith("/chat/completions")]

    def clear(self) -> None:
        with self._lock:
            del self._requests[:]

    def _record(self, method: str, path: str, body: Any) -> None:
        with self._lock:
            self._requests.append({"method": method, "path": path, "body": body,
                                   "time": time.time()})

    def _next_tool_id(self) -> str:
        with self._lock:
            self._tool_counter += 1
            return "call_fake_%d" % self._tool_counter

    # response building ---------------------------------------------------------
    def chunks(self, body: Dict[str, Any]) -> Iterator[Dict[str, Any]]:
        """The streamed chunks for one request, ending with the usage chunk."""
        script = decide(body.get("messages") or [], body.get("tools"))
        completion_id = "chatcmpl-fake-%d" % int(time.time() * 1000)
        created = int(time.time())

        def chunk(delta: Dict[str, Any], finish: Optional[str] = None) -> Dict[str, Any]:
            return {"id": completion_id, "object": "chat.completion.chunk", "created": created,
                    "model": MODEL_ID,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

        yield chunk({"role": "assistant", "content": ""})
        for piece in _words(script.reasoning):
            yield chunk({"reasoning_content": piece})
        for piece in _words(script.text):
            if script.delay:
                time.sleep(script.delay)
            yield chunk({"content": piece})
        finish = "stop"
        if script.tool is not None:
            finish = "tool_calls"
            name, args = script.tool
            call_id = self._next_tool_id()
            yield chunk({"tool_calls": [{"index": 0, "id": call_id, "type": "function",
                                         "function": {"name": name, "arguments": ""}}]})
            for piece in _split_in_pieces(json.dumps(args), 3):
                yield chunk({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
        yield chunk({}, finish)
        prompt_tokens = 100 + len(body.get("messages") or [])
        completion_tokens = len(_words(script.text)) + len(_words(script.reasoning))
        usage_chunk = {"id": completion_id, "object": "chat.completion.chunk", "created": created,
                       "model": MODEL_ID, "choices": [],
                       "usage": {"prompt_tokens": prompt_tokens,
                                 "completion_tokens": completion_tokens,
                                 "total_tokens": prompt_tokens + completion_tokens}}
        yield usage_chunk

    def completion(self, body: Dict[str, Any]) -> Dict[str, Any]:
        """The non-streaming equivalent: the same script folded into one message."""
        reasoning, text = "", ""
        calls: Dict[int, Dict[str, Any]] = {}
        finish, usage, completion_id, created = "stop", None, "", 0
        for item in self.chunks(body):
            completion_id, created = item["id"], item["created"]
            if item.get("usage"):
                usage = item["usage"]
            for choice in item["choices"]:
                delta = choice["delta"]
                reasoning += delta.get("reasoning_content", "")
                text += delta.get("content", "") or ""
                for call in delta.get("tool_calls", []):
                    slot = calls.setdefault(call["index"], {"id": "", "type": "function",
                                                            "function": {"name": "", "arguments": ""}})
                    slot["id"] = call.get("id", slot["id"])
                    fn = call.get("function", {})
                    slot["function"]["name"] += fn.get("name", "")
                    slot["function"]["arguments"] += fn.get("arguments", "")
                finish = choice.get("finish_reason") or finish
        message: Dict[str, Any] = {"role": "assistant", "content": text,
                                   "reasoning_content": reasoning}
        if calls:
            message["tool_calls"] = [calls[i] for i in sorted(calls)]
        return {"id": completion_id, "object": "chat.completion", "created": created,
                "model": MODEL_ID,
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": usage}

    def _handler_class(self) -> type:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, fmt: str, *args: Any) -> None:
                """Silence per-request logging; the request log is the record."""

            def _send_json(self, status: int, payload: Any) -> None:
                data = json.dumps(payload).encode("utf-8")
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                owner._record("GET", self.path, None)
                if self.path.rstrip("/").endswith("/models"):
                    self._send_json(200, {"object": "list", "data": [
                        {"id": MODEL_ID, "object": "model", "created": 0, "owned_by": "fake"}]})
                else:
                    self._send_json(404, {"error": {"message": "not found"}})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw.decode("utf-8") or "{}")
                except ValueError:
                    owner._record("POST", self.path, None)
                    self._send_json(400, {"error": {"message": "invalid JSON"}})
                    return
                owner._record("POST", self.path, body)
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._send_json(404, {"error": {"message": "not found"}})
                    return
                if not body.get("stream"):
                    self._send_json(200, owner.completion(body))
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True
                try:
                    for item in owner.chunks(body):
                        self.wfile.write(("data: %s\n\n" % json.dumps(item)).encode("utf-8"))
                        self.wfile.flush()
                    self.wfile.write(b"data: [DONE]\n\n")
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the runtime abandons the stream on cancel

        return Handler


if __name__ == "__main__":
    with FakeLLM() as llm:
        print(llm.base_url, flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass

"""Requests in the AgentCore shape: a stock RunAgentInput with ``forwardedProps: {}``."""
import json
import uuid
from typing import Any, Dict, List, Optional, Tuple

import requests

from tests.agui_checker import check_sequence, parse_sse

AGENT = "ag-ui/agent"
STOP = "ag-ui/agent/stop"
SESSION = "X-AgentCore-Session-ID"


def ac_body(text: Optional[str] = "hello", *, thread: str = "session-001", run: Optional[str] = None,
            resume: Optional[List[Dict[str, Any]]] = None, **extra: Any) -> Dict[str, Any]:
    messages = [] if text is None else [{"id": "message-" + uuid.uuid4().hex[:8], "role": "user", "content": text}]
    body: Dict[str, Any] = {"threadId": thread, "runId": run or "run-" + uuid.uuid4().hex[:8], "state": {},
                            "messages": messages, "tools": [], "context": [], "forwardedProps": {}}
    if resume is not None:
        body["resume"] = resume
    body.update(extra)
    return body


def attach_body(thread: str, run: str, after: Any) -> Dict[str, Any]:
    return {"threadId": thread, "runId": run, "messages": [], "state": {}, "tools": [], "context": [],
            "forwardedProps": {"agentcore": {"attach": {"afterSequence": after}}}}


def ac_post(adapter: Any, body: Any, path: str = AGENT, **kwargs: Any) -> requests.Response:
    return adapter.post(body, path=path, **kwargs)


def ac_stream(adapter: Any, body: Dict[str, Any]) -> Tuple[List[Dict[str, Any]], List[Optional[int]]]:
    """Run to the end on /ag-ui/agent; returns (events, ids) after checking the AgentCore framing."""
    response = ac_post(adapter, body)
    assert response.status_code == 200, response.text
    assert response.headers["Content-Type"].startswith("text/event-stream")
    assert response.headers["Cache-Control"] == "no-cache"
    assert response.headers["X-AgentCore-Session-ID"] == body["threadId"]
    events, ids, _ = parse_sse(response.content)
    assert ids == list(range(len(events))), ids          # RUN_STARTED is id 0, then +1 each
    check_sequence(events)
    return events, ids


def error_of(response: requests.Response) -> Tuple[int, str, str]:
    payload = response.json()
    assert set(payload) == {"error"}, payload
    return response.status_code, payload["error"]["code"], payload["error"]["message"]


def dumps(value: Any) -> str:
    return json.dumps(value)

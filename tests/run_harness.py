"""An in-process run core in front of a scripted upstream, for tests of ``runs/``.

The tests drive the real ``RunManager`` (admission, store, worker, resume driver, channel) in front of
``ScriptedClient``: a stand-in for ``A2AClient`` whose every call is scripted by the test, so the
interleavings that matter (a frame held back, a write that fails, a GetTask that lost its projections)
are deterministic instead of timing-dependent.
"""
import collections
import time
from typing import Any, Callable, Deque, Dict, List, Optional, Tuple

import pytest

from iaccode_agui.a2a.dialect import context_id_for
from iaccode_agui.config import Settings
from iaccode_agui.web.inputs import parse_run_request
from iaccode_agui.metrics import Metrics
from iaccode_agui.sse.channel import END
from iaccode_agui.runs.manager import RunManager
from iaccode_agui.state.store import ThreadStore
from tests.agui_checker import check_stream

THREAD = "runs-thread"
CTX = context_id_for(THREAD)
TASK = "task-1"
SESSION = "session-1"


# ---- a scripted upstream ---------------------------------------------------------------------------------
class ScriptedStream:
    """What ``A2AClient`` streams return: iterable results, ``abort`` from any thread, ``close``.

    Items are result dicts, exceptions (raised when reached) or callables (run when reached, e.g. to
    block until the test lets the stream go on).
    """

    def __init__(self, items: List[Any]) -> None:
        self._items: Deque[Any] = collections.deque(items)
        self.aborted = False
        self.before_read: Optional[Callable[[], None]] = None   # as ``A2AStream``: called before a wait

    def __iter__(self) -> "ScriptedStream":
        return self

    def __next__(self) -> Dict[str, Any]:
        while True:
            if self.aborted or not self._items:
                raise StopIteration
            item = self._items.popleft()
            if isinstance(item, BaseException):
                raise item
            if callable(item):
                if self.before_read is not None:
                    self.before_read()   # a callable stands for the network: the reader waits here
                item()
                continue
            return item

    def abort(self) -> None:
        self.aborted = True

    def close(self) -> None:
        pass


class ScriptedClient:
    """Duck-typed ``A2AClient``; ``streams``/``tasks`` are consumed in order, ``calls`` records everything."""

    def __init__(self) -> None:
        self.streams: Deque[Any] = collections.deque()      # list of items, or an exception to raise on open
        self.tasks: Deque[Dict[str, Any]] = collections.deque()
        self.subscriptions: Deque[List[Any]] = collections.deque()
        self.calls: List[Tuple[str, Any]] = []

    def send_streaming_message(self, params: Dict[str, Any]) -> ScriptedStream:
        self.calls.append(("SendStreamingMessage", params["message"]))
        script = self.streams.popleft()
        if isinstance(script, BaseException):
            raise script
        return ScriptedStream(script)

    def subscribe_to_task(self, task_id: str) -> ScriptedStream:
        self.calls.append(("SubscribeToTask", task_id))
        return ScriptedStream(self.subscriptions.popleft() if self.subscriptions else [])

    def send_message(self, params: Dict[str, Any]) -> Dict[str, Any]:
        self.calls.append(("SendMessage", params["message"]))
        return {"task": task_frame("input-required")["task"]}

    def get_task(self, task_id: str, history_length: int = 100) -> Dict[str, Any]:
        self.calls.append(("GetTask", task_id))
        return self.tasks.popleft() if len(self.tasks) > 1 else self.tasks[0]

    def cancel_task(self, task_id: str) -> Dict[str, Any]:
        self.calls.append(("CancelTask", task_id))
        return {"id": task_id, "status": {"state": "TASK_STATE_CANCELED"}}

    def ensure_session_restored(self, cwd: str, session_id: str, task_id: Optional[str]) -> str:
        self.calls.append(("EnsureRestored", session_id))
        return "current"

    def get_pipeline_state(self, task_id: str, after_sequence: int) -> Optional[Dict[str, Any]]:
        return None

    def agent_card(self) -> Dict[str, Any]:
        return {}

    def close(self) -> None:
        pass

    def sent(self) -> List[Dict[str, Any]]:
        return [body for method, body in self.calls if method in ("SendStreamingMessage", "SendMessage")]


# ---- A2A frames --------------------------------------------------------------------------------------------
def _iac(session: bool, extra: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    iac: Dict[str, Any] = {"iacCodeSessionId": SESSION} if session else {}
    iac.update(extra or {})
    return {"iac_code": iac} if iac else {}


def status(state: str, text: Optional[str] = None, *, session: bool = True, task: str = TASK,
           iac: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    body: Dict[str, Any] = {"state": "TASK_STATE_" + state.upper().replace("-", "_")}
    if text is not None:
        body["message"] = {"messageId": task + "-message", "role": "ROLE_AGENT", "parts": [{"text": text}]}
    update: Dict[str, Any] = {"taskId": task, "contextId": CTX, "status": body}
    meta = _iac(session, iac)
    if meta:
        update["metadata"] = meta
    return {"statusUpdate": update}


def task_frame(state: str, *, session: bool = True, iac: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    task: Dict[str, Any] = {"id": TASK, "contextId": CTX,
                            "status": {"state": "TASK_STATE_" + state.upper().replace("-", "_")}}
    meta = _iac(session, iac)
    if meta:
        task["metadata"] = meta
    return {"task": task}


def permission(input_id: str, tool_use: str) -> Dict[str, Any]:
    return {"schemaVersion": 1, "kind": "permission", "requestTaskId": TASK, "contextId": CTX, "inputId": input_id,
            "toolUseId": tool_use, "toolName": "write_file", "prompt": "Allow writing?", "required": True}


# ---- driving the manager ------------------------------------------------------------------------------------
def make_manager(tmp_path, client: ScriptedClient, clock: Callable[[], float] = time.time,
                 **settings: Any) -> RunManager:
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    fields: Dict[str, Any] = dict(a2a_url="http://127.0.0.1:9/", state_dir=str(tmp_path / "state"),
                                  allowed_cwds=(str(workspace.resolve()),), upstream_kind="iac-code")
    fields.update(settings)
    cfg = Settings(**fields)
    manager = RunManager(cfg, ThreadStore(cfg.state_dir, fsync=False), client, Metrics(),  # type: ignore[arg-type]
                         clock=clock)
    manager.workspace = str(workspace.resolve())  # type: ignore[attr-defined]
    return manager


def body(manager: RunManager, text: Optional[str] = "hello", *, run: str, ros: str = "inv-1",
         resume: Optional[List[Dict[str, Any]]] = None, thread: str = THREAD, **props: Any) -> Dict[str, Any]:
    messages = [] if text is None else [{"id": "m-" + run, "role": "user", "content": text}]
    doc: Dict[str, Any] = {"threadId": thread, "runId": run, "state": {}, "messages": messages, "tools": [],
                           "context": [], "forwardedProps": {"iacCode": {
                               "schemaVersion": 1, "rosInvocationId": ros,
                               "cwd": manager.workspace}}}  # type: ignore[attr-defined]
    doc["forwardedProps"]["iacCode"].update(props)
    if resume is not None:
        doc["resume"] = resume
    return doc


def start(manager: RunManager, doc: Dict[str, Any]):
    req = parse_run_request(doc, manager.settings.allowed_cwds)
    return manager.start(req, "en")


def drain(sub: Any, timeout: float = 5.0) -> bytes:
    frames = list(sub.replay)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        items = sub.queue.take(0.05)
        done = bool(items) and items[-1] is END
        frames.extend(item for item in items if item is not END)
        if done:
            return b"".join(frames)
    raise AssertionError("the run did not end")


def finish(manager: RunManager, run: Any, sub: Any) -> bytes:
    raw = drain(sub)
    assert run.worker is not None
    run.worker.thread.join(5)
    assert not run.worker.thread.is_alive()
    return raw


def run_events(manager: RunManager, doc: Dict[str, Any]) -> List[Dict[str, Any]]:
    run, sub = start(manager, doc)
    return check_stream(finish(manager, run, sub))


def interrupt_ids(events: List[Dict[str, Any]]) -> List[str]:
    final = events[-1]
    assert final["type"] == "RUN_FINISHED" and final["outcome"]["type"] == "interrupt", final
    return [item["id"] for item in final["outcome"]["interrupts"]]


def allow(*ids: str) -> List[Dict[str, Any]]:
    return [{"interruptId": i, "status": "resolved", "payload": {"decision": "allow_once"}} for i in ids]


@pytest.fixture
def client() -> ScriptedClient:
    return ScriptedClient()


@pytest.fixture
def manager(tmp_path, client):
    made = make_manager(tmp_path, client)
    yield made
    made.stop()


def interrupted_permission(manager: RunManager, client: ScriptedClient, *ids: str) -> List[Dict[str, Any]]:
    """Run 1: a new turn that ends with the permission interrupts ``ids`` (all pending at once)."""
    inputs = [permission(i, "tool-" + i) for i in ids]
    client.streams.append([task_frame("submitted"), status("working", "Let me write it."),
                           status("input-required", iac={"input": inputs[0] if len(inputs) == 1 else inputs})])
    events = run_events(manager, body(manager, "write please", run="run-1"))
    assert interrupt_ids(events) == list(ids)
    return events


def question(input_id: str, tool_use: str, prompt: str) -> Dict[str, Any]:
    return {"schemaVersion": 1, "kind": "ask_user_question", "requestTaskId": TASK, "contextId": CTX,
            "inputId": input_id, "toolUseId": tool_use, "prompt": prompt, "required": True,
            "options": [{"id": "a", "label": "Option A"}, {"id": "b", "label": "Option B"}]}


class QuietClient(ScriptedClient):
    """Records nothing, so the only references to what was sent are the adapter's own."""

    def send_streaming_message(self, params: Dict[str, Any]) -> ScriptedStream:
        return ScriptedStream(self.streams.popleft())


class ManualTimer:
    """Stands in for threading.Timer so the test decides when each grace period ends."""
    made: List["ManualTimer"] = []

    def __init__(self, interval: float, function: Callable[[], None]) -> None:
        self.interval, self.function, self.cancelled, self.daemon = interval, function, False, True
        ManualTimer.made.append(self)

    def start(self) -> None:
        pass

    def cancel(self) -> None:
        self.cancelled = True

    def fire(self) -> None:
        if not self.cancelled:
            self.function()

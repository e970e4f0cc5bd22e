"""Adversarial review of the run core: each test pins one defect the review found (all fixed since).

The tests drive the real ``RunManager`` (admission, store, worker, resume driver, channel) in process,
in front of ``ScriptedClient``: a stand-in for ``A2AClient`` whose every call is scripted by the test, so
the interleavings that matter (a frame held back, a write that fails, a GetTask that lost its
projections) are deterministic instead of timing-dependent.
"""
import collections
import threading
import time
from typing import Any, Callable, Deque, Dict, List, Optional, Tuple

import pytest

from iaccode_agui.a2a.client import A2ARpcError
from iaccode_agui.a2a.dialect import context_id_for
from iaccode_agui.config import Settings
from iaccode_agui.errors import AguiError
from iaccode_agui.inputs import parse_run_request
from iaccode_agui.metrics import Metrics
from iaccode_agui.runs.channel import END
from iaccode_agui.runs.manager import RunManager
from iaccode_agui.runs.recorder import StateRecorder
from iaccode_agui.state.store import StateWriteFailed, ThreadStore
from tests.agui_checker import check_stream

THREAD = "review-thread"
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
    made.expiry.stop()


def interrupted_permission(manager: RunManager, client: ScriptedClient, *ids: str) -> List[Dict[str, Any]]:
    """Run 1: a new turn that ends with the permission interrupts ``ids`` (all pending at once)."""
    inputs = [permission(i, "tool-" + i) for i in ids]
    client.streams.append([task_frame("submitted"), status("working", "Let me write it."),
                           status("input-required", iac={"input": inputs[0] if len(inputs) == 1 else inputs})])
    events = run_events(manager, body(manager, "write please", run="run-1"))
    assert interrupt_ids(events) == list(ids)
    return events


def test_smoke_the_scripted_harness_reaches_an_interrupt_and_resumes(manager, client):
    interrupted_permission(manager, client, "perm-1")
    client.tasks.append(task_frame("input-required", iac={"input": permission("perm-1", "tool-perm-1")}))
    client.streams.append([status("working"), status("working", "Done."), status("input-required")])
    events = run_events(manager, body(manager, None, run="run-2", resume=allow("perm-1")))
    assert events[-1]["type"] == "RUN_FINISHED" and events[-1]["outcome"] == {"type": "success"}
    assert len(client.sent()) == 2


# ---- 1. a failed task-binding write drops the event that triggered it ---------------------------------------
def test_bind_write_failure_keeps_the_stream_balanced(manager, client, monkeypatch):
    # No session id on the first frames (a generic A2A agent, or iac-code before the session is known):
    # the held task binding is flushed by the first *event*, here TEXT_MESSAGE_START.
    def refuse(self, task_id=None, session_id=None):
        raise StateWriteFailed("disk full")

    monkeypatch.setattr(StateRecorder, "bind", refuse)
    client.streams.append([task_frame("submitted", session=False), status("working", "Hello there", session=False),
                           status("completed", session=False)])
    run, sub = start(manager, body(manager, run="run-1"))
    raw = finish(manager, run, sub)
    assert b"STATE_PERSISTENCE_FAILED" in raw and ("CancelTask", TASK) in client.calls
    check_stream(raw)   # TEXT_MESSAGE_CONTENT/END of a message whose TEXT_MESSAGE_START was never sent


# ---- 2. a generic agent that asks twice on one task can never be answered the second time -----------------
def test_generic_agent_second_question_on_the_same_task_is_answerable(tmp_path, client):
    manager = make_manager(tmp_path, client, upstream_kind="generic")
    try:
        client.streams.append([task_frame("submitted", session=False),
                               status("input-required", "What is your name?", session=False)])
        first = interrupt_ids(run_events(manager, body(manager, "ask", run="run-1")))
        client.tasks.append(task_frame("input-required", session=False))
        client.streams.append([status("working", "Thanks, Ada.", session=False),
                               status("input-required", "And how old are you?", session=False)])
        resumed = run_events(manager, body(manager, None, run="run-2", resume=[
            {"interruptId": first[0], "status": "resolved", "payload": {"freeText": "Ada"}}]))
        second = interrupt_ids(resumed)          # the agent's second question, announced as an interrupt
        client.streams.append([status("completed", "Ada is 42.", session=False)])
        answered = run_events(manager, body(manager, None, run="run-3", resume=[
            {"interruptId": second[0], "status": "resolved", "payload": {"freeText": "42"}}]))
        # Today: RUN_ERROR RESUME_ALREADY_APPLIED, the answer never reaches the agent, and the thread is
        # wedged (a new turn is RESUME_REQUIRED) until the interrupt expires.
        assert answered[-1]["type"] == "RUN_FINISHED", answered[-1]
        assert [m["parts"] for m in client.sent()][-1] == [{"text": "42"}]
    finally:
        manager.expiry.stop()


# ---- 3. a rejected answer is later "recovered" as applied and the interrupt is lost -----------------------
def test_rejected_answer_is_not_recovered_as_applied_from_a_projectionless_snapshot(manager, client):
    interrupted_permission(manager, client, "perm-1")
    # Run 2: the runtime rejects the answer with a JSON-RPC error before any frame: nothing was accepted.
    client.tasks.append(task_frame("input-required", iac={"input": permission("perm-1", "tool-perm-1")}))
    client.streams.append([A2ARpcError(-32603, "internal error")])
    rejected = run_events(manager, body(manager, None, run="run-2", resume=allow("perm-1")))
    assert rejected[-1]["code"] == "A2A_UNAVAILABLE"
    assert list(manager.store.load(THREAD).execution.pending) == ["perm-1"]   # retryable, as documented
    # Run 3: the same answer again.  The runtime restarted meanwhile and its task summary has no projection
    # (a lost stream must never erase a durable interrupt: the user could not answer it any more).
    client.tasks.clear()
    client.tasks.append(task_frame("input-required"))
    client.subscriptions.append([task_frame("input-required")])
    client.streams.append([status("working"), status("working", "Written."), status("input-required")])
    retried = run_events(manager, body(manager, None, run="run-3", resume=allow("perm-1")))
    # Today the adapter decides the runtime "already took" the rejected answer, commits it as applied,
    # never sends it, and reports RUN_FINISHED success: the tool never runs and the interrupt is gone.
    delivered = [m for m in client.sent()[1:] if m["parts"][0].get("data", {}).get("inputId") == "perm-1"]
    assert len(delivered) == 2 or list(manager.store.load(THREAD).execution.pending) == ["perm-1"], (
        retried[-1], manager.store.load(THREAD).execution.pending)


# ---- 4. a failed commit of an accepted answer cancels the task but leaves the thread demanding a resume ----
def test_commit_failure_of_an_accepted_answer_clears_pending(manager, client, monkeypatch):
    interrupted_permission(manager, client, "perm-1")
    client.tasks.append(task_frame("input-required", iac={"input": permission("perm-1", "tool-perm-1")}))
    client.streams.append([status("working"), status("working", "Writing."), status("input-required")])
    real = StateRecorder.commit_answer
    failures = []

    def commit_once_fails(self, interrupt_id, digest):
        if not failures:
            failures.append(interrupt_id)
            raise StateWriteFailed("disk full")
        return real(self, interrupt_id, digest)

    monkeypatch.setattr(StateRecorder, "commit_answer", commit_once_fails)
    events = run_events(manager, body(manager, None, run="run-2", resume=allow("perm-1")))
    assert events[-1]["code"] == "STATE_PERSISTENCE_FAILED" and ("CancelTask", TASK) in client.calls
    # The task is cancelled upstream, yet the state still says "answer perm-1 first": every new turn is
    # refused with 409 RESUME_REQUIRED until the client resumes into EXECUTION_LOST (or the TTL ends).
    client.streams.append([task_frame("submitted"), status("input-required", "Hi again.")])
    try:
        after = run_events(manager, body(manager, "next turn", run="run-3", ros="inv-2"))
    except AguiError as exc:
        pytest.fail("a new turn after the fail-closed resume was refused: %s" % exc.code)
    assert after[-1]["type"] == "RUN_FINISHED"


# ---- 5. the cancel extension races an interrupt that is being committed -------------------------------------
def test_cancel_extension_wins_over_an_interrupt_committed_afterwards(manager, client):
    blocked, go = threading.Event(), threading.Event()

    def upstream_latency() -> None:
        blocked.set()
        go.wait(5)

    # The permission frame was already on the wire when the runtime processed CancelTask.
    client.streams.append([task_frame("submitted"), status("working", "Writing."), upstream_latency,
                           status("input-required", iac={"input": permission("perm-1", "tool-perm-1")})])
    run, sub = start(manager, body(manager, "write please", run="run-1"))
    assert blocked.wait(5)
    answer = manager.cancel(run.execution_id, THREAD, "inv-1")
    assert answer == {"executionId": run.execution_id, "status": "cancelled"}
    go.set()
    events = check_stream(finish(manager, run, sub))
    state = manager.store.load(THREAD)
    assert events[-1]["type"] == "RUN_ERROR" or events[-1]["outcome"]["type"] != "interrupt", events[-1]
    assert state.execution.pending == {}, sorted(state.execution.pending)


# ---- 6. finished runs pin their whole request (inline images included) for up to 256 runs -----------------
class QuietClient(ScriptedClient):
    """Records nothing, so the only references to what was sent are the adapter's own."""

    def send_streaming_message(self, params: Dict[str, Any]) -> ScriptedStream:
        return ScriptedStream(self.streams.popleft())


def test_finished_runs_do_not_retain_their_request_images(tmp_path):
    import base64
    import gc
    import os
    import tracemalloc

    quiet = QuietClient()
    manager = make_manager(tmp_path, quiet)
    image = base64.b64encode(b"\x89PNG\r\n\x1a\n" + os.urandom(2 * 1024 * 1024)).decode("ascii")
    try:
        for index in range(2):       # warm-up: imports, caches, the first state file
            quiet.streams.append([task_frame("submitted"), status("input-required", "ok")])
            run_events(manager, body(manager, "warm-up", run="warm-%d" % index))
        tracemalloc.start()
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        for index in range(4):
            doc = body(manager, None, run="img-%d" % index)
            doc["messages"] = [{"id": "m-img-%d" % index, "role": "user", "content": [
                {"type": "text", "text": "what is in this picture?"},
                {"type": "image", "source": {"type": "data", "value": image, "mimeType": "image/png"}}]}]
            quiet.streams.append([task_frame("submitted"), status("input-required", "A picture.")])
            run_events(manager, doc)
            del doc
        gc.collect()
        retained = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
        manager.expiry.stop()
    assert manager.active_count() == 0
    # 4 runs x 2.7 MiB of base64 are still reachable from manager._finished[i].worker._driver.
    assert retained < 2 * 1024 * 1024, "%.1f MiB retained after the runs ended" % (retained / 1048576.0)


# ---- 7. an identity violation seen while following the task is reported as A2A_UNAVAILABLE ----------------
def test_foreign_input_while_following_the_task_is_a_protocol_error(manager, client):
    interrupted_permission(manager, client, "perm-1")
    client.tasks.append(task_frame("input-required", iac={"input": permission("perm-1", "tool-perm-1")}))
    foreign = dict(permission("perm-2", "tool-perm-2"), requestTaskId="someone-elses-task")
    client.tasks.append(task_frame("input-required", iac={"input": foreign}))
    client.streams.append([status("working")])       # accepted, then the stream ends before a boundary
    events = run_events(manager, body(manager, None, run="run-2", resume=allow("perm-1")))
    # an input whose requestTaskId differs from the thread's bound task -> A2A_PROTOCOL_ERROR
    assert events[-1]["type"] == "RUN_ERROR" and events[-1]["code"] == "A2A_PROTOCOL_ERROR", events[-1]


# ---- 8. the active-run cap: checked outside any lock, and released only after the terminal event -----------
def test_active_run_cap_holds_under_concurrent_admission(tmp_path, client, monkeypatch):
    manager = make_manager(tmp_path, client, max_active_runs=1)
    both_checked = threading.Barrier(2)
    real_admit = RunManager._admit

    def admit_after_both_checked(self, req):      # the scheduler interleaves the two requests here
        try:
            both_checked.wait(2)
        except threading.BrokenBarrierError:      # a fixed manager refused the other request earlier
            pass
        return real_admit(self, req)

    monkeypatch.setattr(RunManager, "_admit", admit_after_both_checked)
    gate = threading.Event()
    for _ in range(2):
        client.streams.append([gate.wait])        # both runs stay live until the gate opens
    outcomes: List[Any] = []

    def post(thread: str) -> None:
        try:
            outcomes.append(start(manager, body(manager, run="run-" + thread, thread=thread)))
        except AguiError as exc:
            outcomes.append(exc.code)

    posters = [threading.Thread(target=post, args=(name,)) for name in ("cap-a", "cap-b")]
    try:
        for poster in posters:
            poster.start()
        for poster in posters:
            poster.join(5)
        admitted = manager.active_count()
    finally:
        gate.set()
        for item in outcomes:
            if not isinstance(item, str):
                finish(manager, *item)
        manager.expiry.stop()
    assert admitted <= 1 and "RUNTIME_CAPACITY_EXCEEDED" in outcomes, (admitted, outcomes)


def test_immediate_resume_at_the_cap_is_not_refused(tmp_path, client, monkeypatch):
    from iaccode_agui.runs.channel import RunChannel

    manager = make_manager(tmp_path, client, max_active_runs=1)
    worker_descheduled, resume_done = threading.Event(), threading.Event()
    real_close = RunChannel.close

    def close_late(self):     # the worker thread loses the CPU right after publishing RUN_FINISHED
        if not worker_descheduled.is_set():
            worker_descheduled.set()
            resume_done.wait(5)
        real_close(self)

    monkeypatch.setattr(RunChannel, "close", close_late)
    client.streams.append([task_frame("submitted"),
                           status("input-required", iac={"input": permission("perm-1", "tool-perm-1")})])
    run, sub = start(manager, body(manager, "write please", run="run-1"))
    try:
        assert worker_descheduled.wait(5)
        seen = check_stream(b"".join(list(sub.replay) + [f for f in sub.queue.take(1.0) if f is not END]))
        assert interrupt_ids(seen) == ["perm-1"]          # the client has its interrupt and answers at once
        client.tasks.append(task_frame("input-required", iac={"input": permission("perm-1", "tool-perm-1")}))
        client.streams.append([status("working", "Done."), status("input-required")])
        try:
            resumed = start(manager, body(manager, None, run="run-2", resume=allow("perm-1")))
        except AguiError as exc:
            resumed = None
            refused = exc.code
        else:
            refused = None
    finally:
        resume_done.set()
        run.worker.thread.join(5)
        manager.expiry.stop()
    if resumed is not None:
        finish(manager, *resumed)
    assert refused is None, refused


# ---- 9. pipeline: a send-stream that ends at the answered question is taken as the end of the run --------
def question(input_id: str, tool_use: str, prompt: str) -> Dict[str, Any]:
    return {"schemaVersion": 1, "kind": "ask_user_question", "requestTaskId": TASK, "contextId": CTX,
            "inputId": input_id, "toolUseId": tool_use, "prompt": prompt, "required": True,
            "options": [{"id": "a", "label": "Option A"}, {"id": "b", "label": "Option B"}]}


def test_pipeline_answer_stream_ending_at_the_old_question_follows_the_task(manager, client):
    q1 = question("q-1", "tool-q-1", "Which region?")
    client.streams.append([task_frame("submitted"), status("working", "Planning."),
                           status("input-required", iac={"input": q1})])
    first = run_events(manager, body(manager, "sell me a stack", run="run-1", runMode="pipeline",
                                     pipelineName="selling"))
    assert interrupt_ids(first) == ["q-1"]
    client.tasks.append(task_frame("input-required", iac={"input": q1}))
    # The answer's stream is cut while the runtime still shows the (now answered) question...
    client.streams.append([status("working"), status("input-required", iac={"input": q1})])
    # ... the real next boundary only shows up when the task is followed.
    q2 = question("q-2", "tool-q-2", "Which instance type?")
    client.subscriptions.append([task_frame("working"), status("input-required", iac={"input": q2})])
    resumed = run_events(manager, body(manager, None, run="run-2", runMode="pipeline", pipelineName="selling",
                                       resume=[{"interruptId": "q-1", "status": "resolved",
                                                "payload": {"selectedId": "a"}}]))
    # Today: RUN_FINISHED success, no SubscribeToTask; q-2 is never shown and the thread looks idle.
    assert ("SubscribeToTask", TASK) in client.calls
    assert interrupt_ids(resumed) == ["q-2"]


# ---- 10. reconnect grace: the first disconnect's timer cuts the second disconnect's grace short ----------
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


def test_each_disconnect_gets_its_full_reconnect_grace(tmp_path, client, monkeypatch):
    from iaccode_agui.runs import manager as manager_module
    from iaccode_agui.runs.stream import SSEBody

    ManualTimer.made = []
    monkeypatch.setattr(manager_module.threading, "Timer", ManualTimer)
    manager = make_manager(tmp_path, client, reconnect_grace=30.0)
    gate = threading.Event()
    client.streams.append([task_frame("submitted"), status("working", "Working."), gate.wait,
                           status("input-required", "Done.")])
    doc = body(manager, "long job", run="run-1")
    run, sub = start(manager, doc)

    def response(subscription: Any) -> SSEBody:
        return SSEBody(subscription, heartbeat=15.0, poll=0.05, on_close=run.client_closed)

    try:
        first = response(sub)
        next(first)                                      # RUN_STARTED reached the client, then it vanished
        first.close()                                    # t = 0: disconnect #1, grace until t = 30
        req = parse_run_request(doc, manager.settings.allowed_cwds)
        _, sub2 = manager.start(req, "en", last_event_id=0)      # t = 20: re-attached with Last-Event-ID
        second = response(sub2)
        next(second)
        second.close()                                   # t = 25: disconnect #2, grace until t = 55
        ManualTimer.made[0].fire()                       # t = 30: disconnect #1's timer
        assert not run.worker.cancel_requested, "cancelled 5 s into a 30 s grace period"
    finally:
        gate.set()
        run.worker.thread.join(5)
        manager.expiry.stop()


# ---- 11. cancel during a multi-answer resume: the remaining answers are still delivered ------------------
def test_cancel_extension_stops_a_resume_between_two_answers(manager, client):
    interrupted_permission(manager, client, "perm-1", "perm-2")
    both = [permission("perm-1", "tool-perm-1"), permission("perm-2", "tool-perm-2")]
    client.tasks.append(task_frame("input-required", iac={"input": both}))
    cancelled: List[Dict[str, str]] = []
    execution_id = manager.store.load(THREAD).execution.execution_id

    def user_presses_stop() -> None:     # the cancel extension arrives while the first answer's stream ends
        cancelled.append(manager.cancel(execution_id, THREAD, "inv-1"))

    client.streams.append([status("working"), status("input-required", iac={"input": both[1]}), user_presses_stop])
    client.streams.append([status("canceled")])
    events = run_events(manager, body(manager, None, run="run-2", resume=allow("perm-1", "perm-2")))
    assert cancelled == [{"executionId": execution_id, "status": "cancelled"}]
    after_cancel = [m for m in client.sent() if m["parts"][0].get("data", {}).get("inputId") == "perm-2"]
    assert after_cancel == [], "perm-2 (allow_once) was sent after the execution was cancelled"
    assert events[-1]["type"] == "RUN_ERROR" and events[-1]["code"] == "CANCELLED"


# ---- 12. expiry: the timer expires interrupts one by one, admission expires the execution --------------
def test_timer_expiry_of_one_of_two_interrupts_is_reported_as_expired(tmp_path, client):
    now = [1_800_000_000.0]
    manager = make_manager(tmp_path, client, clock=lambda: now[0], interrupt_ttl=100.0)
    try:
        interrupted_permission(manager, client, "perm-1")              # perm-1 expires at t0 + 100
        now[0] += 50
        both = [permission("perm-1", "tool-perm-1"), permission("perm-2", "tool-perm-2")]
        client.tasks.append(task_frame("input-required", iac={"input": both}))
        discovery = run_events(manager, body(manager, None, run="run-2", resume=allow("perm-1")))
        assert interrupt_ids(discovery) == ["perm-1", "perm-2"]         # perm-2 expires at t0 + 150
        expiries = [i["expiresAt"] for i in discovery[-1]["outcome"]["interrupts"]]
        assert expiries[0] != expiries[1]
        now[0] += 70                                                    # t0 + 120: the timer's turn
        assert manager.expiry.expire(THREAD)
        sent_before = len(client.sent())
        client.streams.append([status("working"), status("input-required", iac={"input": both[1]})])
        client.streams.append([status("working", "Both written."), status("input-required")])
        answered = run_events(manager, body(manager, None, run="run-3", resume=allow("perm-1", "perm-2")))
    finally:
        manager.expiry.stop()
    # Every interrupt expires: a resume after expiry gets RUN_ERROR EXECUTION_EXPIRED.  Today the timer dropped perm-1 only,
    # the task was not cancelled, so the resume's GetTask "rediscovers" perm-1 and the expired answer is sent.
    late = [m["parts"][0]["data"]["inputId"] for m in client.sent()[sent_before:]]
    assert late == [], "answers delivered after perm-1 expired: %r" % late
    assert answered[-1]["type"] == "RUN_ERROR" and answered[-1]["code"] == "EXECUTION_EXPIRED", answered[-1]

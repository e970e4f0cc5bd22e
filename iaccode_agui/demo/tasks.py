"""The in-memory task store and the fan-out of a task's events to its open streams.

A turn runs on its own producer thread, like the real runtime, so a client that goes away does not stop the
work and a ``SubscribeToTask`` stream sees the same events as the stream that started the turn.  Each open
stream owns a bounded mailbox: a producer that outruns its slowest reader waits, which keeps a million-event
firehose from piling up in memory.
"""
import json
import threading
import uuid
from collections import deque
from typing import Any, Callable, Deque, Dict, List, Optional, Tuple

from iaccode_agui.demo import wire
from iaccode_agui.demo.persistence import RuntimeDisk

SUBMITTED = "TASK_STATE_SUBMITTED"
WORKING = "TASK_STATE_WORKING"
INPUT_REQUIRED = "TASK_STATE_INPUT_REQUIRED"
COMPLETED = "TASK_STATE_COMPLETED"
FAILED = "TASK_STATE_FAILED"
CANCELED = "TASK_STATE_CANCELED"
REJECTED = "TASK_STATE_REJECTED"
TERMINAL_STATES = frozenset([COMPLETED, FAILED, CANCELED, REJECTED])

# Mailbox item kinds.  RAW bytes, ERROR and ABORT only reach the stream that started the turn: they model
# a broken connection, not a task event.
DATA, RAW, ERROR, ABORT, END = range(5)
Item = Tuple[int, Any]

MAILBOX_LIMIT = 2048
HISTORY_CAP = 10000

_EXECUTION_STATUS = {
    SUBMITTED: "submitted", WORKING: "running", INPUT_REQUIRED: "input-required",
    COMPLETED: "completed", FAILED: "failed", CANCELED: "canceled", REJECTED: "rejected",
}


RESTARTED_TEXT = "The scripted runtime restarted while this turn was running."


class TurnStopped(Exception):
    """Raised inside a producer when its task was cancelled or the runtime is stopping."""


class Subscriber:
    """The mailbox of one open stream."""

    def __init__(self, task: "TaskRecord", turn_bound: bool) -> None:
        self.task = task
        self.turn_bound = turn_bound
        task.serial += 1  # callers hold the task lock
        self.serial = task.serial
        self.items: Deque[Item] = deque()
        self.cond = threading.Condition(task.lock)

    def take(self, timeout: float) -> List[Item]:
        """Everything queued so far, waiting up to ``timeout`` when nothing is."""
        with self.cond:
            if not self.items and timeout > 0:
                self.cond.wait(timeout)
            items = list(self.items)
            self.items.clear()
            if items:
                self.task.room.notify_all()
            return items

    def push(self, item: Item) -> None:
        """Caller holds the task lock."""
        self.items.append(item)
        self.cond.notify()


class TaskRecord:
    """One A2A task: the durable view that GetTask reports and the live fan-out of its events."""

    def __init__(self, store: "TaskStore", task_id: str, context_id: str, session_id: str) -> None:
        self.store = store
        self.id = task_id
        self.context_id = context_id
        self.session_id = session_id
        self.execution_id = "exec-" + uuid.uuid4().hex[:12]
        self.lock = threading.Lock()
        self.room = threading.Condition(self.lock)  # producers wait here for room, cancel or stop
        self.status: Dict[str, Any] = {"state": SUBMITTED}
        self.history: Deque[Dict[str, Any]] = deque(maxlen=store.history_cap)
        self.iac: Dict[str, Any] = {"iacCodeSessionId": session_id}
        self.artifacts: List[Dict[str, Any]] = []
        self.subscribers: List[Subscriber] = []
        self.serial = 0                        # streams opened so far (numbers every Subscriber)
        self._held: List[Subscriber] = []      # turn streams kept silent until the turn ends
        self.turn_active = False
        self.revision = 0
        # What the scripted scenario needs between turns (cwd, language, pending input, step, ...).
        self.scenario: Any = None
        self.scenario_state: Dict[str, Any] = {}
        self.cwd: Optional[str] = None
        self.language = "en"

    # --- state ------------------------------------------------------------------------------------------
    @property
    def state(self) -> str:
        return self.status["state"]

    @property
    def terminal(self) -> bool:
        return self.status["state"] in TERMINAL_STATES

    @property
    def pending_input(self) -> Optional[Dict[str, Any]]:
        return self.iac.get("input")

    def _check_live(self) -> None:
        if self.terminal or self.store.stopping:
            raise TurnStopped()

    def _apply(self, result: Dict[str, Any]) -> None:
        """SDK-style bookkeeping: the status replaces the current one; agent deltas join the history."""
        update = result.get("statusUpdate")
        if update is not None:
            status = update["status"]
            self.status = status
            message = status.get("message")
            if message is not None and message.get("messageId") == self.id + "-message":
                self.history.append(message)
            return
        artifact_update = result.get("artifactUpdate")
        if artifact_update is not None:
            artifact = artifact_update["artifact"]
            self.artifacts = [a for a in self.artifacts if a["artifactId"] != artifact["artifactId"]]
            self.artifacts.append(artifact)

    # --- fan-out ----------------------------------------------------------------------------------------
    def publish(self, result: Dict[str, Any], *, iac_set: Optional[Dict[str, Any]] = None,
                iac_drop: Tuple[str, ...] = (), apply: bool = True) -> None:
        """Record ``result`` on the task and hand it to every open stream (raises TurnStopped when stopped)."""
        payload = (DATA, wire.dumps_sse(result))
        with self.lock:
            self._wait_for_room()
            if apply:
                self._apply(result)
            for key in iac_drop:
                self.iac.pop(key, None)
            if iac_set:
                self.iac.update(iac_set)
            self.revision += 1
            for sub in self.subscribers:
                sub.push(payload)
            if self.terminal:
                self._end_all()

    def push_fault(self, kind: int, payload: Any) -> None:
        """Send a transport fault (raw bytes, error frame, abort) to the stream(s) of the running turn."""
        with self.lock:
            self._check_live()
            for sub in self.subscribers:
                if sub.turn_bound:
                    sub.push((kind, payload))

    def _wait_for_room(self) -> None:
        while True:
            self._check_live()
            if all(len(sub.items) < MAILBOX_LIMIT for sub in self.subscribers):
                return
            self.room.wait(0.5)

    def _end_all(self) -> None:
        for sub in self.subscribers:
            sub.push((END, None))
        self.room.notify_all()

    def claim_turn(self, prepare: Optional[Callable[[], None]], first: Optional[Dict[str, Any]]) -> Subscriber:
        """Claim the task for one turn and open the mailbox of the stream that asked for it.

        ``prepare`` runs under the task lock (it may reject the message or consume the pending input), so
        two racing messages cannot both start a turn or answer the same input.
        """
        with self.lock:
            if self.terminal:
                raise wire.RpcError(wire.UNSUPPORTED_OPERATION,
                                    "Task %s is in terminal state: %s" % (self.id, self.state))
            if self.turn_active:
                raise wire.RpcError(wire.INVALID_PARAMS, "Task %s is still working" % self.id)
            if prepare is not None:
                prepare()
            self.turn_active = True
            sub = Subscriber(self, turn_bound=True)
            if first is not None:
                sub.items.append((DATA, wire.dumps_sse(first)))
            self.subscribers.append(sub)
            return sub

    def finish_turn(self) -> None:
        """The producer is done: streams opened by this turn end; subscriptions keep going."""
        with self.lock:
            self.turn_active = False
            for sub in self.subscribers + self._held:
                if sub.turn_bound:
                    sub.push((END, None))
            self._held = []
            self.room.notify_all()
        self.persist()

    def subscribe(self, history_length: Optional[int]) -> Subscriber:
        """Attach a SubscribeToTask stream whose first item is the snapshot; atomic, so no event is lost."""
        with self.lock:
            if self.terminal:
                raise wire.RpcError(wire.UNSUPPORTED_OPERATION,
                                    "Task %s is in terminal state: %s" % (self.id, self.state))
            sub = Subscriber(self, turn_bound=False)
            sub.items.append((DATA, wire.dumps_sse({"task": self._snapshot(history_length)})))
            self.subscribers.append(sub)
            return sub

    def unsubscribe(self, sub: Subscriber) -> None:
        with self.lock:
            if sub in self.subscribers:
                self.subscribers.remove(sub)
            self.room.notify_all()

    @property
    def observed(self) -> bool:
        return bool(self.subscribers)

    def mark(self) -> int:
        """A point in time for ``followed_after``: every stream opened later has a higher serial."""
        return self.serial

    def followed_after(self, mark: int) -> bool:
        """Whether a SubscribeToTask stream opened after ``mark`` is attached.

        Only a new one counts: an earlier subscription may linger until the server notices its client left.
        """
        with self.lock:
            return any(not sub.turn_bound and sub.serial > mark for sub in self.subscribers)

    def detach_turn_streams(self, hold: bool = False) -> int:
        """Stop feeding the streams opened by the running turn; the turn goes on for subscribers only.

        This is how the runtime lets an answer's stream close early (at ``working``) and finishes the work
        in the background, which a client can only follow with SubscribeToTask.  ``hold`` keeps those
        streams open and silent until the turn ends, as if their reader were slow to notice the end.
        Returns the mark to wait for a follower from.
        """
        with self.lock:
            for sub in [s for s in self.subscribers if s.turn_bound]:
                self.subscribers.remove(sub)
                if hold:
                    self._held.append(sub)
                else:
                    sub.push((END, None))
            self.room.notify_all()
            return self.serial

    def sleep(self, seconds: float, while_observed: bool = False) -> bool:
        """Wait like a slow LLM; False when the last reader left first (only if ``while_observed``)."""
        deadline = self.store.clock() + seconds
        with self.lock:
            while True:
                self._check_live()
                if while_observed and not self.subscribers:
                    return False
                remaining = deadline - self.store.clock()
                if remaining <= 0:
                    return True
                self.room.wait(min(remaining, 1.0))

    def cancel(self, message: Dict[str, Any]) -> Dict[str, Any]:
        """Move to CANCELED, tell every open stream, stop the producer; returns the Task."""
        with self.lock:
            if self.terminal:
                raise wire.RpcError(wire.TASK_NOT_CANCELABLE, "Task cannot be canceled")
            status = {"state": CANCELED, "message": message, "timestamp": wire.utc_timestamp()}
            self.status = status
            self.iac.pop("input", None)
            self.iac.pop("permission", None)
            self.revision += 1
            update = {"statusUpdate": {"taskId": self.id, "contextId": self.context_id, "status": status,
                                       "metadata": {"iac_code": {"iacCodeSessionId": self.session_id}}}}
            payload = (DATA, wire.dumps_sse(update))
            for sub in self.subscribers:
                sub.push(payload)
            self._end_all()
            snapshot = self._snapshot(None)
        self.persist()
        return snapshot

    def fail_silently(self, message: Dict[str, Any], error: Dict[str, Any]) -> None:
        """Mark the task FAILED without an event, as after an agent exception or a dropped connection."""
        with self.lock:
            if self.terminal:
                return
            self._mark_failed(message, error)
            self._end_all()

    def crash(self, frame: Dict[str, Any], message: Dict[str, Any], error: Dict[str, Any]) -> None:
        """An agent exception: the task reads FAILED before the turn's stream can carry the error ``frame``.

        In one step under the task's lock, so a client that reads the error and asks GetTask at once never
        sees the task still WORKING.
        """
        with self.lock:
            self._check_live()
            self._mark_failed(message, error)
            for sub in self.subscribers:
                if sub.turn_bound:
                    sub.push((ERROR, frame))
            self._end_all()

    def _mark_failed(self, message: Dict[str, Any], error: Dict[str, Any]) -> None:
        self.status = {"state": FAILED, "message": message, "timestamp": wire.utc_timestamp()}
        self.iac["error"] = error
        self.revision += 1

    # --- persistence ------------------------------------------------------------------------------------
    def persist(self) -> None:
        """Save the task (when the store has a directory), so a restarted runtime still knows it."""
        disk = self.store.disk
        if disk is None:
            return
        with self.lock:
            try:
                document = json.loads(json.dumps(self._document()))
            except (TypeError, ValueError):
                return          # scenario memory that is not JSON: this task cannot outlive the process
        disk.save_task(document)

    def _document(self) -> Dict[str, Any]:
        return {"id": self.id, "contextId": self.context_id, "sessionId": self.session_id,
                "executionId": self.execution_id, "status": self.status, "history": list(self.history),
                "iac": self.iac, "artifacts": self.artifacts, "revision": self.revision,
                "scenario": getattr(self.scenario, "name", None), "scenarioState": self.scenario_state,
                "cwd": self.cwd, "language": self.language}

    def restore(self, document: Dict[str, Any], scenario: Any) -> None:
        """Take the saved state back; a turn that was running when the process died has failed."""
        self.execution_id = str(document.get("executionId") or self.execution_id)
        self.status = dict(document.get("status") or {"state": FAILED})
        self.history.extend(document.get("history") or [])
        self.iac.update(document.get("iac") or {})
        self.artifacts = list(document.get("artifacts") or [])
        self.revision = int(document.get("revision") or 0)
        self.scenario = scenario
        self.scenario_state = dict(document.get("scenarioState") or {})
        self.cwd = document.get("cwd")
        self.language = str(document.get("language") or "en")
        parked = self.state == INPUT_REQUIRED and scenario is not None
        if not self.terminal and not parked:
            message = {"messageId": self.id + "-restarted", "contextId": self.context_id, "taskId": self.id,
                       "role": "ROLE_AGENT", "parts": [{"text": RESTARTED_TEXT}]}
            self.status = {"state": FAILED, "message": message, "timestamp": wire.utc_timestamp()}
            self.iac.pop("input", None)
            self.iac.pop("permission", None)
            self.revision += 1

    # --- snapshots --------------------------------------------------------------------------------------
    def snapshot(self, history_length: Optional[int] = None) -> Dict[str, Any]:
        with self.lock:
            return self._snapshot(history_length)

    def _snapshot(self, history_length: Optional[int]) -> Dict[str, Any]:
        task: Dict[str, Any] = {"id": self.id, "contextId": self.context_id, "status": dict(self.status)}
        if self.artifacts:
            task["artifacts"] = list(self.artifacts)
        if history_length != 0 and self.history:
            history = list(self.history)
            if history_length is not None:
                history = history[-history_length:]
            task["history"] = history
        iac = dict(self.iac)
        iac["executionControl"] = self._execution_control()
        task["metadata"] = {"iac_code": iac}
        return task

    def _execution_control(self) -> Dict[str, Any]:
        return {
            "taskId": self.id, "executionId": self.execution_id,
            "phase": "terminal" if self.terminal else "running",
            "executionStatus": _EXECUTION_STATUS.get(self.state, "running"),
            "revision": float(self.revision), "persistedRevision": float(self.revision),
            "serverInstanceId": self.store.instance_id, "connectionEpoch": -1.0,
            "backup": {"status": "not_requested"}, "blockers": [], "externalOperations": [],
            "pauseId": None, "pauseComplete": False, "streamAvailable": self.turn_active,
            "releaseReady": False,
        }


class TaskStore:
    """All tasks, and one iac-code session per context (stable across the turns of a thread)."""

    def __init__(self, clock: Callable[[], float], history_cap: int = HISTORY_CAP,
                 disk: Optional[RuntimeDisk] = None,
                 scenario_named: Optional[Callable[[Optional[str]], Any]] = None) -> None:
        self.clock = clock
        self.history_cap = history_cap
        self.instance_id = "instance-" + uuid.uuid4().hex[:12]
        self.stopping = False
        self.disk = disk
        self._lock = threading.Lock()
        self._tasks: Dict[str, TaskRecord] = {}
        self._sessions: Dict[str, str] = {}
        if disk is not None:
            self._load(disk, scenario_named or (lambda name: None))

    def _load(self, disk: RuntimeDisk, scenario_named: Callable[[Optional[str]], Any]) -> None:
        self._sessions.update(disk.load_sessions())
        for document in disk.load_tasks():
            context_id, session_id = document.get("contextId"), document.get("sessionId")
            if not isinstance(context_id, str) or not isinstance(session_id, str):
                continue
            task = TaskRecord(self, document["id"], context_id, session_id)
            task.restore(document, scenario_named(document.get("scenario")))
            self._tasks[task.id] = task
            self._sessions.setdefault(context_id, session_id)

    def create(self, context_id: str) -> TaskRecord:
        with self._lock:
            session_id = self._sessions.get(context_id)
            new_session = session_id is None
            if session_id is None:
                session_id = str(uuid.uuid4())
                self._sessions[context_id] = session_id
            task = TaskRecord(self, str(uuid.uuid4()), context_id, session_id)
            self._tasks[task.id] = task
            if new_session and self.disk is not None:
                self.disk.save_sessions(dict(self._sessions))   # under the lock: saves never reorder
        return task

    def get(self, task_id: Any) -> Optional[TaskRecord]:
        if not isinstance(task_id, str):
            return None
        with self._lock:
            return self._tasks.get(task_id)

    def knows_session(self, session_id: Any) -> bool:
        with self._lock:
            return session_id in self._sessions.values()

    def stop(self) -> None:
        """Wake every producer and stream so they notice the runtime is going away."""
        with self._lock:
            self.stopping = True
            tasks = list(self._tasks.values())
        for task in tasks:
            with task.lock:
                task.room.notify_all()
                for sub in task.subscribers:
                    sub.push((END, None))

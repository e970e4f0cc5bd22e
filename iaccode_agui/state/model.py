"""The per-thread state and its JSON document (schema version 1).

The document is what survives a restart, so reading it is strict: a file that does not match the schema
exactly is reported as corrupt (``StateCorrupt``) instead of being half-trusted, and only that one thread
becomes unavailable.  Writing is strict too: the document must never hold a credential, whatever a caller
put into an interrupt projection, so ``to_document`` scans every key as a last line of defence.

This module is pure: no files, no clocks (timestamps are ``state.values``, credential key names ``credentials``).
"""
import copy
import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

from iaccode_agui.config import DEFAULT_APPLIED_WINDOW
from iaccode_agui.credentials import SECRET_KEYS, find_secret_keys
from iaccode_agui.state.values import iso_utc, parse_iso_utc

SCHEMA_VERSION = 1
RUN_KINDS = ("new", "resume")

_HEX64 = re.compile(r"^[0-9a-f]{64}$")


class StateCorrupt(ValueError):
    """A thread document that cannot be trusted; ``reason`` says which rule it broke."""

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(reason)


# --- the model --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PendingInterrupt:
    """One interrupt the execution waits on; the same shape in the projector, the effects and the file.

    Frozen so that a copy handed to the projector or to an effect can never be changed behind the
    other's back: a change is a new value (``dataclasses.replace``).
    """
    value: Dict[str, Any]
    sideband: bool = False
    expires_at: Optional[str] = None
    # Digest of an answer sent upstream whose acceptance was not seen yet (the adapter may have died
    # in between): a later resume uses it to recognise an answer the runtime already applied.
    answer_digest: Optional[str] = None

    def is_expired(self, now: float) -> bool:
        """True once ``now`` (epoch seconds) has reached ``expires_at``; never without an expiry."""
        return self.expires_at is not None and now >= parse_iso_utc(self.expires_at)

    def to_document(self) -> Dict[str, Any]:
        return {"value": copy.deepcopy(self.value), "sideband": self.sideband, "expiresAt": self.expires_at,
                "answerDigest": self.answer_digest}


@dataclass
class Execution:
    execution_id: str
    ros_invocation_id: str
    task_id: Optional[str] = None
    pipeline_sequence: int = 0
    pipeline_open_steps: List[str] = field(default_factory=list)
    text_snapshot_digests: List[str] = field(default_factory=list)
    pending: Dict[str, PendingInterrupt] = field(default_factory=dict)
    # Interrupts cleared because they expired: a late resume of them is told EXECUTION_EXPIRED.
    expired_interrupt_ids: List[str] = field(default_factory=list)
    # The run whose end announced interrupts of this execution most recently: a resume may carry its run id
    # and continue it (``runs.admission``); ``continuations`` counts the continuations admitted under it.
    interrupted_run_id: Optional[str] = None
    continuations: int = 0
    interrupted_ids: List[str] = field(default_factory=list)    # what that run (any segment) announced

    def note_interrupted(self, run_id: str, interrupt_ids: List[str]) -> bool:
        """``run_id`` ended in interrupts; a continuation of it that interrupts again keeps its count."""
        if self.interrupted_run_id == run_id:
            grown = sorted(set(self.interrupted_ids) | set(interrupt_ids))
            changed, self.interrupted_ids = grown != self.interrupted_ids, grown
            return changed
        self.interrupted_run_id = run_id
        self.continuations = 0
        self.interrupted_ids = sorted(set(interrupt_ids))
        return True
    run_mode: Optional[str] = None   # chosen when the execution started (None: the runtime chose)

    def expire_interrupts(self, now: float) -> bool:
        """The one expiry rule: a single expired interrupt expires every pending one of the execution.

        Its task can no longer be resumed as a unit, so all pending ids are cleared and remembered (a
        late resume of any of them is told EXECUTION_EXPIRED).  True when something expired.
        """
        if not any(item.is_expired(now) for item in self.pending.values()):
            return False
        self.expired_interrupt_ids = sorted(set(self.expired_interrupt_ids) | set(self.pending))
        self.pending.clear()
        return True


@dataclass
class ActiveRun:
    run_id: str
    owner: str
    started_at: float
    kind: str = "new"


@dataclass
class AppliedDigest:
    execution_id: str
    interrupt_id: str
    digest: str


@dataclass
class ThreadState:
    thread_id: str
    context_id: str
    cwd: str
    user_id: Optional[str]
    session_id: Optional[str]
    execution: Execution
    run_digests: Dict[str, str] = field(default_factory=dict)
    applied_resume_digests: List[AppliedDigest] = field(default_factory=list)
    terminal_execution_ids: List[str] = field(default_factory=list)
    active_run: Optional[ActiveRun] = None
    # The A2A runtime (its URL) the thread was last run on: its session and tasks live there.
    runtime: Optional[str] = None
    # When each run id / terminal execution was recorded; both records keep a bounded window (see
    # ``remember_run``).  Entries of documents written before the window existed get their time on load's
    # first admission.
    run_times: Dict[str, float] = field(default_factory=dict)
    terminal_times: Dict[str, float] = field(default_factory=dict)

    # -- small mutations that keep the invariants the document relies on --

    def applied_digest(self, execution_id: str, interrupt_id: str) -> Optional[str]:
        for entry in self.applied_resume_digests:
            if entry.execution_id == execution_id and entry.interrupt_id == interrupt_id:
                return entry.digest
        return None

    def record_applied(self, execution_id: str, interrupt_id: str, digest: str) -> None:
        """Remember (or overwrite) the digest of an accepted answer; one record per (execution, interrupt).

        The list is kept in the order answers were accepted (the newest last), which is what the window
        of ``trim_applied`` keeps.
        """
        if not _is_hex64(digest):
            raise ValueError("applied digest must be 64 lowercase hex")
        self.applied_resume_digests = [
            entry for entry in self.applied_resume_digests
            if (entry.execution_id, entry.interrupt_id) != (execution_id, interrupt_id)]
        self.applied_resume_digests.append(AppliedDigest(execution_id, interrupt_id, digest))

    def trim_applied(self, max_entries: int = DEFAULT_APPLIED_WINDOW) -> None:
        """Keep the accepted answers that can still matter: a bounded window, so the document stays small.

        Only the current execution's records are ever consulted (a resume answers the current execution),
        so other executions' records go.  Of the current one, a record whose interrupt is pending again
        always stays (it is what stops a re-shown question from being answered twice); of the others the
        newest ``max_entries`` stay.  A replay of an answer that has left the window names an interrupt
        that is neither pending nor remembered, so the resume rules refuse it before anything is sent:
        it can never be applied a second time, it only gets a refusal instead of RESUME_ALREADY_APPLIED.
        """
        current = self.execution.execution_id
        pending = self.execution.pending
        mine = [entry for entry in self.applied_resume_digests if entry.execution_id == current]
        others = [entry for entry in mine if entry.interrupt_id not in pending]
        keep = {id(entry) for entry in others[-max_entries:]} if max_entries > 0 else set()
        self.applied_resume_digests = [entry for entry in mine
                                       if entry.interrupt_id in pending or id(entry) in keep]

    def remember_run(self, run_id: str, digest: str, now: float, max_entries: int, max_age: float,
                     max_applied: int = DEFAULT_APPLIED_WINDOW) -> None:
        """Record a claimed run id, then keep only the newest ``max_entries`` records younger than ``max_age``.

        Run ids and terminal execution ids are kept in the same bounded window, so the document (and the
        cost of every write of it) stops growing with the number of runs.  A run id that has left the
        window is admitted like a new one: it starts a new turn and can never re-apply an interrupt
        answer, because answers are tied to their execution, which is terminal or no longer current.
        Accepted answers keep their own window (``trim_applied``).
        """
        self.run_digests[run_id] = digest
        self.run_times[run_id] = now
        self.run_times = _window(self.run_times, self.run_digests, now, max_entries, max_age, keep=run_id)
        self.run_digests = {key: self.run_digests[key] for key in self.run_times}
        self.terminal_times = _window(self.terminal_times, self.terminal_execution_ids, now, max_entries, max_age,
                                      keep=self.execution.execution_id)
        self.terminal_execution_ids = sorted(self.terminal_times)
        self.trim_applied(max_applied)

    def mark_terminal(self, execution_id: str) -> None:
        if execution_id not in self.terminal_execution_ids:
            self.terminal_execution_ids.append(execution_id)
            self.terminal_execution_ids.sort()

    def copy(self) -> "ThreadState":
        """A deep copy, so callers can mutate a draft and roll back by dropping it."""
        return copy.deepcopy(self)

    # -- document mapping --

    def to_document(self) -> Dict[str, Any]:
        """The JSON-ready document; raises ValueError if it would contain a credential key."""
        ex = self.execution
        doc: Dict[str, Any] = {
            "schemaVersion": SCHEMA_VERSION,
            "threadId": self.thread_id,
            "contextId": self.context_id,
            "cwd": self.cwd,
            "userId": self.user_id,
            "iacCodeSessionId": self.session_id,
            "execution": {
                "executionId": ex.execution_id,
                "rosInvocationId": ex.ros_invocation_id,
                "taskId": ex.task_id,
                "pipelineSequence": ex.pipeline_sequence,
                "pipelineOpenSteps": sorted(set(ex.pipeline_open_steps)),
                "textSnapshotDigests": sorted(set(ex.text_snapshot_digests)),
                "pending": {key: item.to_document() for key, item in ex.pending.items()},
                "expiredInterruptIds": sorted(set(ex.expired_interrupt_ids)),
            },
            "runDigests": dict(self.run_digests),
            # In the order the answers were accepted: the window keeps the newest.
            "appliedResumeDigests": [
                {"executionId": a.execution_id, "interruptId": a.interrupt_id, "digest": a.digest}
                for a in self.applied_resume_digests
            ],
            "terminalExecutionIds": sorted(set(self.terminal_execution_ids)),
            # Keyed by digest (64 characters), not by run id (up to 1,024): the times must not double the size.
            "runDigestTimes": {self.run_digests[key]: value for key, value in self.run_times.items()
                               if key in self.run_digests},
            "terminalExecutionTimes": {key: value for key, value in self.terminal_times.items()
                                       if key in self.terminal_execution_ids},
            "activeRun": None if self.active_run is None else {
                "runId": self.active_run.run_id, "owner": self.active_run.owner,
                "startedAt": self.active_run.started_at, "kind": self.active_run.kind},
        }
        if self.runtime is not None:
            doc["runtime"] = self.runtime
        if ex.interrupted_run_id is not None:
            doc["execution"].update(interruptedRunId=ex.interrupted_run_id, continuations=ex.continuations,
                                    interruptedIds=list(ex.interrupted_ids))
        if ex.run_mode is not None:     # absent from documents written before it was kept
            doc["execution"]["runMode"] = ex.run_mode
        found = find_secret_keys(doc)
        if found:
            raise ValueError("thread state must not contain credentials (keys: %s)" % ", ".join(sorted(found)))
        return doc

    @classmethod
    def from_document(cls, doc: Any, expected_thread_id: str, *, credentials_checked: bool = False) -> "ThreadState":
        """Parse and strictly validate a document; any deviation raises ``StateCorrupt``.

        ``credentials_checked`` skips the credential scan for a document ``to_document`` has just built
        (it made the same scan and refuses what this one would); a document read from disk is always scanned.
        """
        top = _object(doc, "document", _TOP_KEYS, optional=_OPTIONAL_TOP_KEYS)
        _require(
            type(top["schemaVersion"]) is int and top["schemaVersion"] == SCHEMA_VERSION,
            "unsupported schemaVersion",
        )
        thread_id = _string(top["threadId"], "threadId")
        _require(thread_id == expected_thread_id, "threadId does not match the requested thread")
        state = cls(
            thread_id=thread_id,
            context_id=_string(top["contextId"], "contextId", nonempty=True),
            cwd=_string(top["cwd"], "cwd"),
            user_id=_optional(top["userId"], "userId", _string),
            session_id=_optional(top["iacCodeSessionId"], "iacCodeSessionId", _string),
            execution=_execution(top["execution"]),
            run_digests=_run_digests(top["runDigests"]),
            applied_resume_digests=_applied(top["appliedResumeDigests"]),
            terminal_execution_ids=sorted(set(_string_list(top["terminalExecutionIds"], "terminalExecutionIds"))),
            active_run=_optional(top["activeRun"], "activeRun", _active_run),
            runtime=_string(top["runtime"], "runtime", nonempty=True) if "runtime" in top else None,
        )
        by_digest = _times(top.get("runDigestTimes", {}), "runDigestTimes", set(state.run_digests.values()))
        state.run_times = {run_id: by_digest[digest] for run_id, digest in state.run_digests.items()
                           if digest in by_digest}
        state.terminal_times = _times(top.get("terminalExecutionTimes", {}), "terminalExecutionTimes",
                                      state.terminal_execution_ids)
        _require("revision" not in top or (type(top["revision"]) is int and top["revision"] >= 0),
                 "revision must be a non-negative integer")
        if not credentials_checked and find_secret_keys(doc):
            raise StateCorrupt("document contains credential keys")
        return state


# --- validation helpers -----------------------------------------------------------------------------------

_TOP_KEYS = (
    "schemaVersion", "threadId", "contextId", "cwd", "userId", "iacCodeSessionId", "execution",
    "runDigests", "appliedResumeDigests", "terminalExecutionIds", "activeRun",
)
# "revision" belongs to the store (it orders a thread's writes across its journal and its file); the state
# itself ignores it, but a document carrying it is still a valid document.
_OPTIONAL_TOP_KEYS = ("runtime", "runDigestTimes", "terminalExecutionTimes", "revision")
_EXECUTION_KEYS = (
    "executionId", "rosInvocationId", "taskId", "pipelineSequence", "pipelineOpenSteps",
    "textSnapshotDigests", "pending", "expiredInterruptIds",
)
_OPTIONAL_EXECUTION_KEYS = ("interruptedRunId", "continuations", "interruptedIds")   # together, or neither
_PENDING_KEYS = ("value", "sideband", "expiresAt", "answerDigest")
_APPLIED_KEYS = ("executionId", "interruptId", "digest")
_ACTIVE_RUN_KEYS = ("runId", "owner", "startedAt", "kind")


def _require(condition: bool, reason: str) -> None:
    if not condition:
        raise StateCorrupt(reason)


def _is_hex64(value: Any) -> bool:
    return isinstance(value, str) and bool(_HEX64.match(value))


def _object(value: Any, where: str, keys: Tuple[str, ...], optional: Tuple[str, ...] = ()) -> Dict[str, Any]:
    """A dict with exactly ``keys`` (plus any of ``optional``): missing and unknown keys are corruption."""
    _require(isinstance(value, dict), "%s must be an object" % where)
    missing = [k for k in keys if k not in value]
    _require(not missing, "%s is missing %s" % (where, ", ".join(missing)))
    extra = sorted(str(k) for k in value if k not in keys and k not in optional)
    _require(not extra, "%s has unknown keys %s" % (where, ", ".join(extra)))
    return value


def _string(value: Any, where: str, nonempty: bool = False) -> str:
    _require(isinstance(value, str), "%s must be a string" % where)
    _require(not nonempty or value != "", "%s must not be empty" % where)
    return value


def _optional(value: Any, where: str, parse: Callable[[Any, str], Any]) -> Any:
    return None if value is None else parse(value, where)


def _times(value: Any, where: str, known: Any) -> Dict[str, float]:
    _require(isinstance(value, dict), "%s must be an object" % where)
    for key, moment in value.items():
        _require(key in known, "%s[%s] has no record" % (where, key))
        _require(type(moment) in (int, float) and math.isfinite(moment), "%s[%s] must be a time" % (where, key))
    return {key: float(moment) for key, moment in value.items()}


def _window(times: Dict[str, float], keys: Any, now: float, max_entries: int, max_age: float,
            keep: str) -> Dict[str, float]:
    """The newest ``max_entries`` of ``keys`` not older than ``max_age`` (``keep`` always stays).

    A key without a time (a document from before the window) is dated ``now``, so it ages from here on.
    """
    dated = {key: times.get(key, now) for key in keys}
    fresh = sorted((key for key, moment in dated.items() if now - moment <= max_age or key == keep),
                   key=lambda key: (key != keep, -dated[key], key))
    return {key: dated[key] for key in fresh[:max(1, max_entries)]}


def _string_list(value: Any, where: str) -> List[str]:
    _require(isinstance(value, list), "%s must be a list" % where)
    for item in value:
        _string(item, where + "[]")
    return list(value)


def _digest(value: Any, where: str) -> str:
    _require(_is_hex64(value), "%s must be 64 lowercase hex" % where)
    return value


def _execution(value: Any) -> Execution:
    ex = _object(value, "execution", _EXECUTION_KEYS, optional=_OPTIONAL_EXECUTION_KEYS + ("runMode",))
    _require(ex.get("runMode") in (None, "normal", "pipeline"), "execution.runMode must be normal or pipeline")
    cursor = ex["pipelineSequence"]
    continued = ex.get("continuations", 0)
    _require(("interruptedRunId" in ex) == ("continuations" in ex), "execution.interruptedRunId needs continuations")
    _require(type(continued) is int and continued >= 0, "execution.continuations must be a non-negative integer")
    _require(type(cursor) is int and cursor >= 0, "execution.pipelineSequence must be a non-negative integer")
    digests = _string_list(ex["textSnapshotDigests"], "execution.textSnapshotDigests")
    for item in digests:
        _digest(item, "execution.textSnapshotDigests[]")
    return Execution(
        execution_id=_string(ex["executionId"], "execution.executionId", nonempty=True),
        ros_invocation_id=_string(ex["rosInvocationId"], "execution.rosInvocationId"),
        task_id=_optional(ex["taskId"], "execution.taskId", _string),
        pipeline_sequence=cursor,
        pipeline_open_steps=sorted(set(_string_list(ex["pipelineOpenSteps"], "execution.pipelineOpenSteps"))),
        text_snapshot_digests=sorted(set(digests)),
        pending=_pending_map(ex["pending"]),
        expired_interrupt_ids=sorted(set(_string_list(ex["expiredInterruptIds"], "execution.expiredInterruptIds"))),
        interrupted_run_id=_optional(ex.get("interruptedRunId"), "execution.interruptedRunId", _string),
        continuations=continued,
        interrupted_ids=sorted(set(_string_list(ex.get("interruptedIds", []), "execution.interruptedIds"))),
        run_mode=ex.get("runMode"),
    )


def _pending_map(value: Any) -> Dict[str, PendingInterrupt]:
    _require(isinstance(value, dict), "execution.pending must be an object")
    result: Dict[str, PendingInterrupt] = {}
    for key, raw in value.items():
        where = "execution.pending[%s]" % key
        entry = _object(raw, where, _PENDING_KEYS)
        projection = entry["value"]
        _require(isinstance(projection, dict), where + ".value must be an object")
        _require(projection.get("inputId") == key, where + " key must equal value.inputId")
        _require(type(entry["sideband"]) is bool, where + ".sideband must be a boolean")
        expires = entry["expiresAt"]
        if expires is not None:
            _string(expires, where + ".expiresAt")
            try:
                parse_iso_utc(expires)
            except ValueError:
                raise StateCorrupt(where + ".expiresAt must be an ISO-8601 UTC timestamp") from None
        answer = entry["answerDigest"]
        if answer is not None:
            _digest(answer, where + ".answerDigest")
        result[key] = PendingInterrupt(value=copy.deepcopy(projection), sideband=entry["sideband"], expires_at=expires,
                                       answer_digest=answer)
    return result


def _run_digests(value: Any) -> Dict[str, str]:
    _require(isinstance(value, dict), "runDigests must be an object")
    return {run_id: _digest(d, "runDigests[%s]" % run_id) for run_id, d in value.items()}


def _applied(value: Any) -> List[AppliedDigest]:
    _require(isinstance(value, list), "appliedResumeDigests must be a list")
    result: List[AppliedDigest] = []
    seen = set()
    for raw in value:
        entry = _object(raw, "appliedResumeDigests[]", _APPLIED_KEYS)
        item = AppliedDigest(
            execution_id=_string(entry["executionId"], "appliedResumeDigests[].executionId"),
            interrupt_id=_string(entry["interruptId"], "appliedResumeDigests[].interruptId"),
            digest=_digest(entry["digest"], "appliedResumeDigests[].digest"),
        )
        key = (item.execution_id, item.interrupt_id)
        _require(key not in seen, "appliedResumeDigests has duplicate entries")
        seen.add(key)
        result.append(item)
    return result


def _active_run(value: Any, where: str) -> ActiveRun:
    run = _object(value, where, _ACTIVE_RUN_KEYS)
    started = run["startedAt"]
    _require(
        type(started) in (int, float) and math.isfinite(started) and started >= 0,
        where + ".startedAt must be a non-negative number",
    )
    _require(run["kind"] in RUN_KINDS, where + ".kind must be one of " + "/".join(RUN_KINDS))
    return ActiveRun(
        run_id=_string(run["runId"], where + ".runId", nonempty=True),
        owner=_string(run["owner"], where + ".owner", nonempty=True),
        started_at=float(started),
        kind=run["kind"],
    )


__all__ = [
    "SCHEMA_VERSION", "SECRET_KEYS", "StateCorrupt", "PendingInterrupt", "Execution", "ActiveRun",
    "AppliedDigest", "ThreadState", "find_secret_keys", "iso_utc", "parse_iso_utc",
]

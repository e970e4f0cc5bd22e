"""Pipeline-mode projection: iac-code pipeline envelopes in, AG-UI events out.

In pipeline mode the runtime sends every signal (text, thinking, tools, usage, step lifecycle) as an
envelope in ``metadata.iac_code.pipeline`` or ``pipelineBatch.events``.  Envelopes are replayed (batches,
the ``/iac-code/pipeline/state`` catch-up, resumes), so this mapper owns the dedupe cursor, and pipeline
steps outlive a single AG-UI run, so it owns the *durable* open-step set the caller persists.  It is pure:
the run projector hands it metadata dicts and forwards the events it returns.
"""
from typing import Any, Dict, FrozenSet, Iterable, List, Optional, Set, Tuple

from iaccode_agui.canonical import canonical_json, coerce_numbers
from iaccode_agui.projection import events as ev
from iaccode_agui.projection.events import Event
from iaccode_agui.projection.spans import SpanTracker
from iaccode_agui.projection.usage import UsageLedger

# The contract's list of eventTypes worth a CUSTOM event (no standard AG-UI equivalent).  Anything else
# is either mapped to standard events below or dropped, so clients never see the same signal twice.
PIPELINE_CUSTOM_ALLOWLIST: FrozenSet[str] = frozenset({
    "pipeline_started", "pipeline_resumed", "pipeline_completed", "pipeline_error", "pipeline_warning",
    "backup_blocked",
    "candidate_started", "candidate_completed", "candidate_failed", "candidate_interrupted",
    "candidate_restart_requested", "candidate_selected", "candidate_detail_shown", "candidate_step_failed",
    "sub_pipeline_started", "sub_pipeline_completed", "sub_step_failed", "step_failed",
    "stack_progress", "stack_instances_progress", "stack_current_changed", "cleanup_started",
    "cleanup_progress", "cleanup_completed", "cleanup_failed",
    "rollback_triggered", "rollback_completed",
    "context_compaction_started", "context_compacted", "context_compaction_failed", "fields_marked_stale",
    "diagram_shown", "mcp_status", "tool_progress",
})

STEP_OPEN_EVENTS = frozenset({"step_started", "candidate_step_started", "input_received"})
STEP_CLOSE_EVENTS = frozenset({"step_completed", "step_failed", "candidate_step_completed",
                               "candidate_step_failed"})

_STEP_PREFIX = "step:"
_CANDIDATE_PREFIX = "candidate:"


def _ident(value: Any) -> Optional[str]:
    """An identifier part, or None; whole floats from protobuf Struct count as their int spelling."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str) and value:
        return value
    return None


def _dict(value: Any) -> Dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _sequence(value: Any) -> int:
    """The envelope sequence as an int; anything unusable counts as 0 (never advances the cursor)."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, int):
        return value
    return 0


def _compact_json(value: Any) -> str:
    return canonical_json(coerce_numbers(value))


def step_name_of(key: str) -> str:
    """AG-UI ``stepName`` for a durable key: top-level steps keep their plain id, candidate steps the key
    itself, because parallel candidates run steps with the same id."""
    if key.startswith(_STEP_PREFIX):
        return key[len(_STEP_PREFIX):]
    return key


def step_key_of(envelope: Dict[str, Any]) -> Optional[str]:
    """The durable key of the step an envelope belongs to, or None when it names no step."""
    event_type = envelope.get("eventType")
    candidate_step = _dict(envelope.get("candidateStep"))
    is_candidate = (envelope.get("scope") == "candidate_step" or bool(candidate_step)
                    or (isinstance(event_type, str) and event_type.startswith("candidate_step_")))
    if is_candidate:
        candidate = _dict(envelope.get("candidate"))
        data = _dict(envelope.get("data"))
        owner = (_ident(candidate.get("id")) or _ident(envelope.get("subPipelineId"))
                 or _ident(data.get("subPipelineId")) or _ident(candidate.get("runId")))
        step_id = _ident(candidate_step.get("id"))
        if owner and step_id:
            return "%s%s:%s" % (_CANDIDATE_PREFIX, owner, step_id)
        return None
    step_id = _ident(_dict(envelope.get("step")).get("id"))
    return _STEP_PREFIX + step_id if step_id else None


class PipelineMapper:
    def __init__(self, spans: SpanTracker, usage: UsageLedger, *, thread_id: str, sequence: int = 0,
                 open_steps: Iterable[str] = (), pipeline_run_id: Optional[str] = None) -> None:
        self.spans = spans
        self.usage = usage
        self.sequence: int = max(0, int(sequence))
        self._run_base = self.sequence       # everything at or below it was shown by an earlier run
        self.open_steps: Set[str] = set(open_steps)
        self.seen_event_ids: Set[str] = set()
        self.session_ids: List[str] = []
        self.pipeline_run_id: str = pipeline_run_id or "pipeline-" + thread_id
        self._run_id_adopted = pipeline_run_id is not None
        self._reasoning_base: Optional[str] = None
        self._saved: Tuple[int, Tuple[str, ...]] = self._snapshot()

    # ---- persistence ----------------------------------------------------------------------------
    def _snapshot(self) -> Tuple[int, Tuple[str, ...]]:
        return self.sequence, tuple(sorted(self.open_steps))

    def progress(self) -> Tuple[int, List[str]]:
        """What the caller persists (cursor and durable open steps); also resets ``changed``."""
        self._saved = self._snapshot()
        return self.sequence, list(self._saved[1])

    @property
    def changed(self) -> bool:
        return self._snapshot() != self._saved

    # ---- entry points ---------------------------------------------------------------------------
    def reopen_steps(self) -> List[Event]:
        """Steps still open from an earlier run get a fresh STEP_STARTED, since AG-UI spans end with each run."""
        out: List[Event] = []
        for key in sorted(self.open_steps):
            out.extend(self.spans.step_open(step_name_of(key)))
        return out

    def feed(self, iac_code: Dict[str, Any]) -> List[Event]:
        """Apply the live envelope(s) carried by one ``metadata.iac_code`` dict, in wire order."""
        out: List[Event] = []
        if not isinstance(iac_code, dict):
            return out
        single = iac_code.get("pipeline")
        if isinstance(single, dict):
            out.extend(self._live(single))
        batch = _dict(iac_code.get("pipelineBatch")).get("events")
        if isinstance(batch, list):
            for envelope in batch:
                if isinstance(envelope, dict):
                    out.extend(self._live(envelope))
        return out

    def recover(self, state: Dict[str, Any]) -> List[Event]:
        """Apply a ``/iac-code/pipeline/state`` answer: the snapshot as an activity, then the missed events.

        The state endpoint is authoritative, so an event with an unseen eventId is applied even below the
        cursor (it fills a gap a bounded live suffix left); only id-less events rely on the cursor.
        """
        if not isinstance(state, dict):
            return []
        snapshot = coerce_numbers(_dict(state.get("snapshot")))
        run_id = _ident(snapshot.get("pipelineRunId"))
        if run_id:
            self.pipeline_run_id = run_id
            self._run_id_adopted = True
        out: List[Event] = [ev.activity_snapshot(
            "pipeline:" + self.pipeline_run_id, ev.PIPELINE_ACTIVITY,
            {"schemaVersion": 1, "pipelineRunId": self.pipeline_run_id, "snapshot": snapshot}, replace=True)]
        events = state.get("events")
        if isinstance(events, list):
            for envelope in events:
                if not isinstance(envelope, dict):
                    continue
                if envelope.get("visibility") == "pending_backup":
                    continue    # a provisional copy; the committed one follows under its own eventId
                self._note_envelope(envelope)
                event_id = _ident(envelope.get("eventId"))
                sequence = _sequence(envelope.get("sequence"))
                if event_id is not None:
                    if event_id in self.seen_event_ids:
                        continue
                elif sequence <= self.sequence:
                    continue
                out.extend(self._apply(envelope, event_id, sequence))
        self.sequence = max(self.sequence, _sequence(snapshot.get("lastSequence")))
        self._run_base = max(self._run_base, self.sequence)   # recovery delivered everything up to here
        return out

    # ---- dedupe ---------------------------------------------------------------------------------
    def _note_envelope(self, envelope: Dict[str, Any]) -> None:
        session_id = _ident(envelope.get("iacCodeSessionId"))
        if session_id and session_id not in self.session_ids:
            self.session_ids.append(session_id)
        if not self._run_id_adopted:
            run_id = _ident(envelope.get("pipelineRunId"))
            if run_id:
                self.pipeline_run_id = run_id
                self._run_id_adopted = True

    def _live(self, envelope: Dict[str, Any]) -> List[Event]:
        self._note_envelope(envelope)
        event_id = _ident(envelope.get("eventId"))
        sequence = _sequence(envelope.get("sequence"))
        if event_id is not None and event_id in self.seen_event_ids:
            return []
        if 0 < sequence <= self._run_base:
            return []           # shown by an earlier run (the persisted cursor)
        if event_id is None and 0 < sequence <= self.sequence:
            return []
        # A new eventId above the run's starting cursor is applied even when it arrives out of sequence
        # order (the runtime sends e.g. 35, 37, 36 after an early exit): dropping it would lose it.
        return self._apply(envelope, event_id, sequence)

    def _apply(self, envelope: Dict[str, Any], event_id: Optional[str], sequence: int) -> List[Event]:
        if event_id is not None:
            self.seen_event_ids.add(event_id)
        self.sequence = max(self.sequence, sequence)
        return self._map(envelope)

    # ---- mapping --------------------------------------------------------------------------------
    def _map(self, envelope: Dict[str, Any]) -> List[Event]:
        event_type = envelope.get("eventType")
        data = _dict(envelope.get("data"))
        out: List[Event] = []
        if event_type == "text_delta":
            text = data.get("text")
            if isinstance(text, str) and text:
                out.extend(self.spans.text(self._message_id(envelope), text, exclusive=False))
        elif event_type == "thinking_delta":
            text = data.get("text")
            if data.get("type") == "raw_thinking" and isinstance(text, str) and text:
                out.extend(self._reasoning(self._message_id(envelope), text))
        elif event_type == "tool_started":
            out.extend(self._tool_started(envelope, data))
        elif event_type == "tool_result":
            out.extend(self._tool_result(data))
        elif event_type == "usage":
            self.usage.record(coerce_numbers(data))
        elif event_type in STEP_OPEN_EVENTS:
            out.extend(self._step_open(envelope))
        elif event_type in STEP_CLOSE_EVENTS:
            out.extend(self._step_close(envelope))
        if event_type in PIPELINE_CUSTOM_ALLOWLIST:
            out.append(ev.custom(ev.PIPELINE_EVENT, coerce_numbers(envelope)))
        return out

    def _message_id(self, envelope: Dict[str, Any]) -> str:
        """One AG-UI message per stream, so parallel candidates interleaving deltas never merge.

        Run ids are preferred over plain ids because a retried step or candidate is a new stream.
        """
        candidate = _dict(envelope.get("candidate"))
        candidate_step = _dict(envelope.get("candidateStep"))
        step = _dict(envelope.get("step"))
        parts = [self.pipeline_run_id, _ident(envelope.get("scope")),
                 _ident(candidate.get("runId")) or _ident(candidate.get("id")),
                 _ident(candidate_step.get("runId")) or _ident(candidate_step.get("id")),
                 _ident(step.get("runId")) or _ident(step.get("id"))]
        return "pipeline-message:" + ":".join(part for part in parts if part)

    def _reasoning(self, base_id: str, text: str) -> List[Event]:
        # One reasoning span exists at a time; a different stream's thinking starts its own span.
        out: List[Event] = []
        if self._reasoning_base != base_id:
            out.extend(self.spans.close_reasoning())
            self._reasoning_base = base_id
        out.extend(self.spans.reasoning(text, base_id))
        return out

    def _tool_started(self, envelope: Dict[str, Any], data: Dict[str, Any]) -> List[Event]:
        tool_id = _ident(data.get("toolUseId"))
        if tool_id is None:
            return []
        name = data.get("toolName") if isinstance(data.get("toolName"), str) and data.get("toolName") else "tool"
        args = _compact_json(data["input"]) if data.get("input") is not None else ""
        # The tool's parent is its own stream's message (if open), not whichever candidate spoke last.
        return list(self.spans.tool_args_complete(tool_id, name, args, self._message_id(envelope)))

    def _tool_result(self, data: Dict[str, Any]) -> List[Event]:
        tool_id = _ident(data.get("toolUseId"))
        if tool_id is None:
            return []
        result = data.get("result")
        if isinstance(result, str):
            content = result
        elif result is None:
            content = ""
        else:
            content = _compact_json(result)
        return list(self.spans.tool_result(tool_id, content))

    def _step_open(self, envelope: Dict[str, Any]) -> List[Event]:
        key = step_key_of(envelope)
        if key is None:
            return []
        self.open_steps.add(key)
        return list(self.spans.step_open(step_name_of(key)))

    def _step_close(self, envelope: Dict[str, Any]) -> List[Event]:
        """Close a step without ever emitting an orphan STEP_FINISHED."""
        key = step_key_of(envelope)
        if key is None:
            return []
        name = step_name_of(key)
        durable = key in self.open_steps
        self.open_steps.discard(key)
        if self.spans.step_is_open(name):
            return list(self.spans.step_close(name))
        if durable:
            # Opened in an earlier run and not reopened here: a zero-length pair keeps the stream balanced.
            return list(self.spans.step_open(name)) + list(self.spans.step_close(name))
        return []

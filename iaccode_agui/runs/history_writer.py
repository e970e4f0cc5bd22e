"""One run's part in its thread's stored conversation: what it streamed, folded in as the run ends.

The run's channel shows every event it publishes (after any route family's shaping, so exactly what its
clients saw) to ``observe``; the recorder reports each accepted answer (``note_answer``) and calls ``save``
right before the run frees its thread, so the conversation is durable before the run's end is visible and
before another run of the thread can start.  A run adopted after its owner died folds what its log holds
first; the request's user message and answers, which the stream does not carry, travel in the log header.
The first event after ``RUN_STARTED`` is the ``MESSAGES_SNAPSHOT`` the snapshot rule asks for, if any.
"""
import logging
import uuid
from typing import Any, Dict, FrozenSet, Iterable, List, Optional

from iaccode_agui import errors
from iaccode_agui.credentials import redact, secret_values
from iaccode_agui.i18n import translate
from iaccode_agui.projection import events as ev
from iaccode_agui.projection import history_rules as rules
from iaccode_agui.projection.history_reducer import Conversation, RunEvents, user_message
from iaccode_agui.projection.interrupts import build_interrupt
from iaccode_agui.state.history_store import History, HistoryStore
from iaccode_agui.state.store import StateError

log = logging.getLogger("iaccode_agui.runs")

Event = Dict[str, Any]
HEADER_FIELD = "history"      # the run log header's field holding what the stream does not carry


class RunHistory:
    def __init__(self, store: HistoryStore, settings: Any, thread_id: str, language: str, *,
                 user: Optional[Dict[str, Any]] = None, answers: Iterable[Dict[str, Any]] = (),
                 resume: bool = False, input_ids: FrozenSet[str] = frozenset(), secrets: Iterable[str] = (),
                 key: Optional[str] = None, adopted: bool = False) -> None:
        self.store = store
        self.thread_id = thread_id
        self.language = language
        self.mode = settings.messages_snapshot
        self.max_messages = settings.history_max_messages
        self.max_bytes = settings.history_max_bytes
        self.cap = rules.text_cap(self.max_bytes)
        self.secrets = sorted(secrets, key=len, reverse=True)   # a longer credential first: it may hold a shorter
        self.user = None if user is None else rules.clean(user, self.cap, self.mark, self.secrets)
        self.answers = {entry.get("interruptId"): redact(entry, self.secrets) for entry in answers}
        self.answered: List[Dict[str, Any]] = []
        self.resume = resume
        self.input_ids = input_ids
        self.key = key or uuid.uuid4().hex
        self.adopted = adopted
        self.events: Optional[RunEvents] = RunEvents(self.cap, self.cut)
        self.projector: Any = None      # the run's, for the interrupts it ends with

    @classmethod
    def for_request(cls, store: HistoryStore, settings: Any, req: Any, language: str) -> "RunHistory":
        user = None
        if req.user_message is not None:
            label = translate(errors.MSG_HISTORY_IMAGE, language)
            user = user_message(req.user_message.message_id, req.user_message.parts,
                                lambda name, kind: label.format(name=name, type=kind))
        return cls(store, settings, req.thread_id, language, user=user, answers=req.resume or (),
                   resume=req.is_resume, input_ids=req.message_ids, secrets=secret_values(req.props))

    @classmethod
    def adopted_from(cls, store: HistoryStore, settings: Any, thread_id: str, header: Dict[str, Any],
                     logged: Iterable[Event]) -> "RunHistory":
        """The history of a run continued from its log: its header's part, then the events it already sent."""
        part = header.get(HEADER_FIELD) if isinstance(header.get(HEADER_FIELD), dict) else {}
        user = part.get("user") if isinstance(part.get("user"), dict) else None
        answers = [entry for entry in part.get("answers") or [] if isinstance(entry, dict)]
        history = cls(store, settings, thread_id, str(header.get("language") or "en"), user=user, answers=answers,
                      key=part.get("key") if isinstance(part.get("key"), str) else None, adopted=True)
        for event in logged:
            history.observe(event)
        return history

    def header(self) -> Dict[str, Any]:
        """The run log header's part: what an adopter needs and cannot read from the events."""
        return {"key": self.key, "user": self.user, "answers": list(self.answers.values())}

    def mark(self, size: int) -> str:
        return translate(errors.MSG_EVENT_TRUNCATED, self.language).format(size=size)

    def cut(self, text: str, size: int) -> str:
        return rules.cut_text(text, size, self.cap, self.mark)

    # ---- while the run goes on ------------------------------------------------------------------
    def observe(self, event: Event) -> None:
        events = self.events
        if events is not None:
            events.add(event)

    def note_answer(self, interrupt_id: str) -> None:
        entry = self.answers.get(interrupt_id)
        if entry is not None and entry not in self.answered:
            self.answered.append(entry)

    def opening(self) -> Optional[Event]:
        """The ``MESSAGES_SNAPSHOT`` this run opens with, when the snapshot rule asks for one."""
        if self.adopted or self.mode == "off":
            return None
        try:
            stored = self.store.load(self.thread_id) or History()
        except StateError as exc:
            log.warning("no snapshot for thread %s: %s", self.thread_id, exc)
            return None
        if not rules.wants_snapshot(self.mode, self.resume, stored.messages, self.input_ids):
            return None
        return ev.messages_snapshot(rules.snapshot_messages(stored.messages, self.user), stored.truncated)

    # ---- the end ----------------------------------------------------------------------------------
    def save(self, interrupted: bool) -> None:
        """Fold the run into the stored conversation (best-effort: a failure is logged, the run ends anyway)."""
        events, self.events = self.events, None
        if events is None:
            return          # saved already
        try:
            self.store.update(self.thread_id, lambda history: self._merge(history, events, interrupted))
        except StateError as exc:
            log.warning("the conversation of thread %s was not saved: %s", self.thread_id, exc)
        except Exception:   # a bug here must not keep the run from freeing its thread
            log.exception("the conversation of thread %s was not saved", self.thread_id)

    def _merge(self, history: History, events: RunEvents, interrupted: bool) -> Optional[History]:
        if self.key in history.runs:
            return None     # this run was saved by its owner before it died
        conversation = Conversation(history.messages)
        if self.user is not None:
            conversation.add_user(self.user)
        for event in events.events():
            conversation.apply(event)
        for entry in self.answered:
            conversation.note_answer(entry)
        for interrupt in self._interrupts() if interrupted else ():
            conversation.note_interrupt(interrupt)
        touched = conversation.touched
        cleaned = [rules.clean(message, self.cap, self.mark, self.secrets) if message["id"] in touched else message
                   for message in conversation.messages]
        messages, dropped = rules.bound(cleaned, self.max_messages, self.max_bytes)
        return History(messages, history.truncated or dropped, history.runs + [self.key])

    def _interrupts(self) -> List[Dict[str, Any]]:
        pending = getattr(self.projector, "pending", None) or {}
        built = (build_interrupt(item.value, item.expires_at, self.language) for item in pending.values())
        return [interrupt for interrupt in built if interrupt is not None]

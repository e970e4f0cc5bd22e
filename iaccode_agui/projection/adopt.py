"""The projection of a run adopted from its log after its owning process died.

The new owner continues the same run: same ids, spans still open where the log left them, the session
event not repeated, no second ``RUN_STARTED``.  ``restore`` rebuilds that state from the AG-UI events the
log says were already sent.  Text the runtime streamed while nobody was projecting it is recovered from
what the runtime keeps: the task's history (its text deltas) when the run is adopted, and the final
consolidated text at the end of the turn.  Only text beyond what was already shown is emitted, so the
client's reconstructed message is complete and nothing is shown twice.
"""
from typing import AbstractSet, Any, Dict, Iterable, List

from iaccode_agui.a2a import dialect
from iaccode_agui.projection.events import SESSION_EVENT
from iaccode_agui.projection.effects import Output
from iaccode_agui.projection.projector import RunContext, RunProjector, SessionNotice
from iaccode_agui.projection.textreplay import new_suffix


def missing_text(source_text: str, streamed: str, new_turn: bool) -> str:
    """The part of the runtime's ``source_text`` that follows what was already ``streamed``.

    A new turn's run streamed the turn from its start, so its text is a prefix of the runtime's.  A resumed
    run streamed only the turn's later part: it is found by its last occurrence.
    """
    if not source_text or source_text == streamed:
        return ""
    if not streamed:
        return source_text if new_turn else ""
    if new_turn and source_text.startswith(streamed):
        return source_text[len(streamed):]
    at = source_text.rfind(streamed)
    if at < 0:
        return ""
    return source_text[at + len(streamed):]


def strip_shown(text: str, known_digests: AbstractSet[str]) -> str:
    """``text`` without its leading parts that earlier runs of the execution showed.

    A task's history holds the text deltas of all its turns; each earlier run (the turn, then each resumed
    turn) recorded the digest of the text it showed when it ended with an interrupt.  Those texts follow one
    another at the history's start, so peeling known prefixes one at a time leaves the current turn's text.
    """
    while text:
        rest = new_suffix(text, set(known_digests))
        if rest == text:
            break
        text = rest
    return text


def final_text(result: Any) -> str:
    """The consolidated text of a turn's final message (``assistantFinal``), '' for any other frame."""
    kind, obj = dialect.unwrap(result)
    if kind not in ("task", "statusUpdate"):
        return ""
    iac = dialect.iac_code_metadata(obj)
    final = iac.get("assistantFinal")
    if not (isinstance(final, dict) and final.get("complete") is True):
        return ""
    status = obj.get("status") if isinstance(obj.get("status"), dict) else {}
    return dialect.message_text(status.get("message"))


def history_text(task_result: Any) -> str:
    """The agent's text of the current turn in a task snapshot: the trailing agent messages of its history."""
    _, task = dialect.unwrap(task_result)
    history = task.get("history") if isinstance(task, dict) else None
    if not isinstance(history, list):
        return ""
    trailing: List[str] = []
    for message in reversed(history):
        if not isinstance(message, dict) or not dialect.is_agent_message(message):
            break
        trailing.insert(0, dialect.message_text(message))
    if len(trailing) > 1 and trailing[-1] == "".join(trailing[:-1]):
        trailing.pop()     # a consolidated copy of the deltas before it, not more text
    return "".join(trailing)


class AdoptedProjector(RunProjector):
    def __init__(self, ctx: RunContext, logged: Iterable[Dict[str, Any]], **kwargs: Any) -> None:
        super().__init__(ctx, **kwargs)
        # Whatever was accepted before the crash stays accepted: the session event is due unless it was sent.
        self.session_notice = SessionNotice.DUE
        self.new_turn = not ctx.resume
        self.restore(logged)

    def restore(self, logged: Iterable[Dict[str, Any]]) -> None:
        for event in logged:
            self.spans.replay(event)
            if event.get("type") == "CUSTOM" and event.get("name") == SESSION_EVENT:
                self.session_notice = SessionNotice.SENT

    def start(self) -> List[Output]:
        return []                     # RUN_STARTED (and any reopened step) is in the log already

    def catch_up(self, snapshot: Any) -> List[Output]:
        """Text the runtime streamed between the crash and the adoption, from the task's history."""
        source = history_text(snapshot)
        if self.new_turn:
            return self.continue_text(source)
        # A resumed turn's text follows, in the history, the text the execution's earlier runs showed.
        known = self.ctx.text_digests
        turn = strip_shown(source, known)
        if turn != source or not known:
            return self.continue_text(turn, from_turn_start=True)
        return self.continue_text(source)     # the earlier text is not recognised: only what follows the shown

    def feed(self, result: Any, *, with_text: bool = True, history_text: bool = False) -> List[Output]:
        out: List[Output] = []
        if not self.done and dialect.unwrap(result)[0] == "task":
            # A SubscribeToTask stream opens with the task as it is at that moment: what it shows beyond
            # the shown text was streamed before the subscription, and no later frame repeats it.
            out.extend(self.catch_up(result))
        if with_text and not self.done:
            out.extend(self.continue_final(result))
        out.extend(super().feed(result, with_text=with_text, history_text=history_text))
        return out

    def continue_final(self, result: Any) -> List[Output]:
        """The consolidated text of the turn's last LLM call: it belongs to this turn, even a resumed one."""
        return self.continue_text(final_text(result), from_turn_start=True)

    def continue_text(self, source_text: str, *, from_turn_start: bool = False) -> List[Output]:
        """Show what ``source_text`` (the runtime's text of the turn) holds beyond what was shown.

        ``from_turn_start``: the source holds this run's text from its start, even when the run resumed a
        turn (a new turn's source always does).
        """
        gap = missing_text(source_text, self.spans.streamed_text(), self.new_turn or from_turn_start)
        if not gap:
            return []
        return list(self.spans.text(self.spans.plain_source(), gap))

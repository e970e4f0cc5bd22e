"""The phases of a resume and which may follow which.

``ResumeMachine`` (``projection.resume_machine``) is a state machine whose every step waits for the result of one
command.  Its phases and the table of allowed moves live here, apart from the handlers, so the table can
be read (and tested) as a whole: a move outside it is a bug in the machine, never an upstream condition,
and ``check_move`` turns it into an error at once instead of a resume that wanders on.
"""
import enum
from typing import Dict, FrozenSet


class Phase(enum.Enum):
    """What the machine waits for: the result of the command it last asked for."""
    CHECK = "check"                                   # nothing asked yet
    RESTORING = "restoring"                           # RestoreSession
    FETCHING = "fetching"                             # FetchTask, the snapshot every check is made on
    RECOVERING = "recovering"                         # RecordAnswer of an answer the runtime took pre-crash
    RELEASING = "releasing"                           # ReleaseExecution before the run ends
    CATCHING_UP = "catching-up"                       # RecoverPipeline before the plan
    RECORDING_DISCOVERED = "recording-discovered"     # RecordInterrupts of inputs the client never saw
    RECORDING_IN_FLIGHT = "recording-in-flight"       # RecordInFlight before an answer goes out
    SENDING = "sending"                               # SendAnswer
    RECORDING_PRIOR = "recording-prior"               # RecordAnswer of a refused answer applied pre-crash
    CLEARING_IN_FLIGHT = "clearing-in-flight"         # RecordInFlight(None) after a refusal
    CANCELLING = "cancelling"                         # CancelTask for a cancelled question
    RECORDING_CANCELLED = "recording-cancelled"       # RecordAnswer of that cancelled question
    FOLLOW_CATCH_UP = "follow-catch-up"               # RecoverPipeline while following
    FOLLOW_FETCH = "follow-fetch"                     # FetchTask while following
    SUBSCRIBING = "subscribing"                       # Subscribe
    REPAIRING = "repairing"                           # the last FetchTask
    GIVING_UP = "giving-up"                           # CancelTask, no boundary came
    EMITTING = "emitting"                             # Emit; then the step it was emitted for
    ENDED = "ended"


_FOLLOW = frozenset({Phase.FOLLOW_CATCH_UP, Phase.FOLLOW_FETCH})
_DELIVER = frozenset({Phase.RECORDING_IN_FLIGHT, Phase.EMITTING}) | _FOLLOW
_PLAN = frozenset({Phase.RECORDING_DISCOVERED, Phase.EMITTING}) | _DELIVER
_RECOVER = frozenset({Phase.RECOVERING, Phase.RELEASING, Phase.CATCHING_UP, Phase.EMITTING}) | _PLAN

# Which phase may follow which: a move outside this table is a bug in the machine, not in the upstream.
_NEXT: Dict[Phase, FrozenSet[Phase]] = {
    Phase.CHECK: frozenset({Phase.RESTORING, Phase.FETCHING, Phase.EMITTING}),
    Phase.RESTORING: frozenset({Phase.FETCHING, Phase.RELEASING, Phase.EMITTING}),
    Phase.FETCHING: frozenset({Phase.RELEASING, Phase.EMITTING}),
    Phase.RECOVERING: _RECOVER,
    Phase.RELEASING: frozenset({Phase.EMITTING}),
    Phase.CATCHING_UP: _PLAN,
    Phase.RECORDING_DISCOVERED: frozenset({Phase.EMITTING}) | _FOLLOW,
    Phase.RECORDING_IN_FLIGHT: frozenset({Phase.SENDING, Phase.CANCELLING, Phase.EMITTING}),
    Phase.SENDING: _DELIVER | {Phase.RECORDING_PRIOR, Phase.CLEARING_IN_FLIGHT},
    Phase.RECORDING_PRIOR: frozenset({Phase.EMITTING}),
    Phase.CLEARING_IN_FLIGHT: frozenset({Phase.EMITTING}),
    Phase.CANCELLING: frozenset({Phase.RECORDING_CANCELLED, Phase.EMITTING}),
    Phase.RECORDING_CANCELLED: frozenset({Phase.RELEASING}),
    Phase.FOLLOW_CATCH_UP: frozenset({Phase.FOLLOW_FETCH, Phase.EMITTING}),
    Phase.FOLLOW_FETCH: frozenset({Phase.SUBSCRIBING, Phase.EMITTING}),
    Phase.SUBSCRIBING: frozenset({Phase.REPAIRING}),
    Phase.REPAIRING: frozenset({Phase.GIVING_UP, Phase.EMITTING}),
    Phase.GIVING_UP: frozenset({Phase.EMITTING}),
    Phase.EMITTING: frozenset(Phase),
    Phase.ENDED: frozenset(),
}


class IllegalTransition(RuntimeError):
    """The machine tried a move its table does not allow (a bug, never an upstream condition)."""


def check_move(current: Phase, target: Phase) -> None:
    """Refuse a move the table does not allow."""
    if target not in _NEXT[current]:
        raise IllegalTransition("%s -> %s" % (current.value, target.value))

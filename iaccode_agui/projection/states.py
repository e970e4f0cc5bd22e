"""The closed sets the run core decides on: the upstream task's state and the outcome of a run (pure).

The runtime spells task states several ways (``TASK_STATE_INPUT_REQUIRED``, ``input-required``,
``input_required``) and may invent new ones; everything downstream of this module sees one enum member,
so a rule is written once against a name instead of against a set of strings.
"""
import enum
from typing import Dict, Tuple

from iaccode_agui.a2a import dialect


class TaskState(enum.Enum):
    UNSEEN = "unseen"                # the frame carried no state
    WORKING = "working"              # submitted, working, or a state this version does not know
    INPUT_REQUIRED = "input-required"
    AUTH_REQUIRED = "auth-required"
    COMPLETED = "completed"
    CANCELED = "canceled"
    FAILED = "failed"
    REJECTED = "rejected"

    # Members are singletons: identity hashing keeps the per-frame table lookups in C.
    __hash__ = object.__hash__

    @classmethod
    def of(cls, raw: object) -> "TaskState":
        known = _BY_RAW.get(raw) if isinstance(raw, str) else None
        if known is not None:
            return known
        name = dialect.normalize_state(raw)
        if not name:
            return cls.UNSEEN
        return _BY_NAME.get(name, cls.WORKING)

    @property
    def terminal(self) -> bool:
        """The task will never change again (A2A's terminal states)."""
        return self in _TERMINAL

    @property
    def failed(self) -> bool:
        """The run ends as an execution failure (auth-required cannot be answered through AG-UI)."""
        return self in FAILED

    @property
    def success(self) -> bool:
        """A stream that stops here ended its turn normally."""
        return self in (TaskState.COMPLETED, TaskState.INPUT_REQUIRED)


_BY_NAME = {member.value: member for member in TaskState if member is not TaskState.UNSEEN}
# The spelling the runtime sends on every frame, looked up before any normalisation.
_BY_RAW = {"TASK_STATE_" + name.upper().replace("-", "_"): member for name, member in _BY_NAME.items()}
_TERMINAL = frozenset({TaskState.COMPLETED, TaskState.FAILED, TaskState.REJECTED, TaskState.CANCELED})
FAILED = frozenset({TaskState.FAILED, TaskState.REJECTED, TaskState.AUTH_REQUIRED})


class Outcome(str, enum.Enum):
    """How a run ended; a string so that logs, metrics labels and state checks read the plain word."""
    SUCCESS = "success"
    INTERRUPT = "interrupt"
    ERROR = "error"

    def __str__(self) -> str:
        return self.value


class Inputs(enum.Enum):
    """What a non-terminal frame shows about required inputs, relative to what the run already knows."""
    __hash__ = object.__hash__
    AWAITED = "awaited"    # input-required only for answers this resume is still about to send
    FRESH = "fresh"        # at least one input that is not pending yet
    KNOWN = "known"        # inputs, all of them pending already
    NONE = "none"          # no input at all


class Step(enum.Enum):
    """What a frame's boundary does to the run."""
    READ_ON = "read-on"
    INTERRUPT = "interrupt"
    NO_INPUTS = "no-inputs"       # input-required without any input: depends on the kind of run
    SUCCEED = "succeed"
    FAIL = "fail"
    CANCEL = "cancel"


# (task state, inputs) -> step, for states that do not end the task.  Terminal states decide alone.
BOUNDARY: Dict[Tuple[TaskState, Inputs], Step] = {
    (TaskState.INPUT_REQUIRED, Inputs.AWAITED): Step.READ_ON,
    (TaskState.INPUT_REQUIRED, Inputs.FRESH): Step.INTERRUPT,
    (TaskState.INPUT_REQUIRED, Inputs.KNOWN): Step.INTERRUPT,
    (TaskState.INPUT_REQUIRED, Inputs.NONE): Step.NO_INPUTS,
}
for _state in (TaskState.WORKING, TaskState.UNSEEN):
    BOUNDARY.update({(_state, Inputs.FRESH): Step.INTERRUPT, (_state, Inputs.KNOWN): Step.READ_ON,
                      (_state, Inputs.NONE): Step.READ_ON})
TERMINAL_STEP = {TaskState.COMPLETED: Step.SUCCEED, TaskState.CANCELED: Step.CANCEL}


def _reads_on(state: TaskState) -> bool:
    """A frame in this state, without inputs, neither fails, ends nor interrupts the run."""
    return state not in FAILED and state not in TERMINAL_STEP and BOUNDARY.get((state, Inputs.NONE)) is Step.READ_ON


# The runtime's spellings of the states a streamed delta is sent in, for which ``_reads_on`` holds (the
# projection's shortcut for text deltas looks the raw value up here; any other spelling takes the rules).
READ_ON_SPELLINGS: Dict[str, TaskState] = {
    raw: TaskState.of(raw) for raw in ("TASK_STATE_WORKING", "TASK_STATE_SUBMITTED", "working", "submitted")
    if _reads_on(TaskState.of(raw))}

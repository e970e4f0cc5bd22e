"""The closed set of commands a resume is made of, and what the shell reports back (pure data).

``projection.resume_machine.ResumeMachine`` asks for one command at a time; ``runs.resume_driver`` performs it against
the upstream or the state file and hands back a result: a document, a member of ``Upstream`` or
``Delivery``, a bool (whether a state write went through) or None.
"""
import enum
from dataclasses import dataclass
from typing import Any, Dict, FrozenSet, List, Mapping, Optional, Tuple, Union

from iaccode_agui.projection import answers as encode
from iaccode_agui.projection.answers import UpstreamAnswer
from iaccode_agui.projection.effects import Output, Pending


@dataclass(frozen=True)
class RestoreSession:
    cwd: str
    session_id: str
    task_id: str


@dataclass(frozen=True)
class FetchTask:
    task_id: str
    history_length: int


@dataclass(frozen=True)
class RecoverPipeline:
    task_id: str
    cursor: int


@dataclass(frozen=True)
class SendAnswer:
    """One answer upstream: streamed (SendStreamingMessage) unless ``answer.mode`` is sideband."""
    answer: UpstreamAnswer
    message: Dict[str, Any]

    @property
    def streamed(self) -> bool:
        return self.answer.mode != encode.MODE_SIDEBAND


@dataclass(frozen=True)
class CancelTask:
    task_id: str
    best_effort: bool = False      # giving up: the run ends whatever CancelTask answers


@dataclass(frozen=True)
class Subscribe:
    task_id: str


@dataclass(frozen=True)
class RecordInFlight:
    """Remember the answer about to be sent (``digest``), or forget it (None) after a refusal."""
    interrupt_id: str
    digest: Optional[str]


@dataclass(frozen=True)
class RecordAnswer:
    """The runtime took this answer: drop it from pending and keep its digest."""
    interrupt_id: str
    digest: str


@dataclass(frozen=True)
class RecordInterrupts:
    """Inputs discovered in the snapshot become durable pending interrupts too (never erased)."""
    pending: Pending
    text_digests: Tuple[str, ...]


@dataclass(frozen=True)
class ReleaseExecution:
    """The execution is over: free the thread, clear what is pending and mark the execution terminal."""


@dataclass(frozen=True)
class Emit:
    outputs: List[Output]


@dataclass(frozen=True)
class Finished:
    """Nothing more to do: the run ended (or the shell already ended it)."""


Command = Union[RestoreSession, FetchTask, RecoverPipeline, SendAnswer, CancelTask, Subscribe, RecordInFlight,
                RecordAnswer, RecordInterrupts, ReleaseExecution, Emit, Finished]


class Upstream(enum.Enum):
    """What the shell observed of an upstream call that returns no document."""
    OK = "ok"
    REFUSED = "refused"                  # a JSON-RPC error: the runtime said no
    NOT_CANCELABLE = "not-cancelable"    # CancelTask of a task that already ended
    UNAVAILABLE = "unavailable"          # transport failure, timeout, malformed reply
    BACKUP_NOT_READY = "backup-not-ready"
    SESSION_LOST = "session-lost"        # the runtime does not know the session (restarted without it)
    TASK_NOT_FOUND = "task-not-found"    # the runtime does not know the task (A2A TaskNotFoundError)


class Delivery(enum.Enum):
    """How sending one answer went."""
    ENDED = "ended"                # its stream ended the run (terminal event published)
    OPEN = "open"                  # accepted; the run goes on (stream closed early, or sideband)
    REFUSED = "refused"            # a JSON-RPC error before acceptance
    NOT_ACCEPTED = "not-accepted"  # no frame proved acceptance
    FAILED = "failed"              # the shell already ended the run with an upstream error


@dataclass(frozen=True)
class ResumeFacts:
    """What the machine starts from: the request's answers and the durable state of the execution."""
    entries: List[Dict[str, Any]]
    applied: Mapping[str, str]                # interrupt id -> digest applied in this execution
    task_id: Optional[str]
    expired_ids: FrozenSet[str]
    session_id: Optional[str]
    cwd: str
    metadata: Dict[str, Any]                  # message metadata of every answer
    run_id: str
    pipeline_cursor: int = 0

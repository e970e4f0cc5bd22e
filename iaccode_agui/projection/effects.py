"""What the projection hands the shell besides events: the state changes to make durable first (pure data).

The shell applies each effect before it publishes the events that follow it, which is how "durable
before visible" holds while the projection itself does no I/O.
"""
import dataclasses
from typing import Any, Dict, Optional, Tuple, Union

from iaccode_agui.projection.events import Event
from iaccode_agui.projection.states import Outcome
from iaccode_agui.state.model import PendingInterrupt

Pending = Dict[str, PendingInterrupt]


@dataclasses.dataclass(frozen=True)
class BindTask:
    task_id: str


@dataclasses.dataclass(frozen=True)
class BindSession:
    session_id: str


@dataclasses.dataclass(frozen=True)
class CommitInterrupts:
    """The complete pending map to persist and the digests of the text shown so far."""
    pending: Pending
    text_digests: Tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class PipelineProgress:
    """The pipeline cursor and durable open steps to persist (written at run boundaries, not per event)."""
    sequence: int
    open_steps: Tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class EndRun:
    outcome: Outcome
    code: Optional[str] = None


Output = Union[Event, BindTask, BindSession, CommitInterrupts, PipelineProgress, EndRun]


def is_event(item: Any) -> bool:
    return isinstance(item, dict)

"""Who a run is: the identity and starting state a projector is built from, and the identity breaches.

A run's context is fixed when it is admitted (thread, run, execution, A2A context, the invocation) or read
back from the thread's durable state (task, session, pending interrupts, answered ids, pipeline cursor);
the projector never changes it.  A frame that contradicts it is a protocol violation, which ends the run.
"""
import dataclasses
import enum
from typing import FrozenSet, Mapping, Optional, Tuple

from iaccode_agui.state.model import PendingInterrupt


@dataclasses.dataclass(frozen=True)
class RunContext:
    thread_id: str
    run_id: str
    execution_id: str
    context_id: str
    ros_invocation_id: str
    language: str = "en"
    parent_run_id: Optional[str] = None
    task_id: Optional[str] = None
    session_id: Optional[str] = None
    pending: Mapping[str, PendingInterrupt] = dataclasses.field(default_factory=dict)
    applied_ids: FrozenSet[str] = frozenset()
    text_digests: FrozenSet[str] = frozenset()
    resume: bool = False
    interrupt_ttl: float = 540.0
    generic: bool = False
    pipeline_sequence: int = 0
    pipeline_open_steps: Tuple[str, ...] = ()
    pipeline_mode: bool = False
    # Sets this run's text message ids apart from the earlier runs' of the execution, which the runtime's
    # message ids repeat (see ``SpanTracker``): '' for a new turn, a tag of the request for a resume.
    message_scope: str = ""
    workspace_created: bool = False     # this run's request created the workspace directory


class ProtocolViolation(Exception):
    """The runtime broke the identity contract of the run (other task, context or session)."""


class ConversationLost(ProtocolViolation):
    """A new turn got a session other than the thread's: the runtime has forgotten the conversation."""


class SessionNotice(enum.Enum):
    """The session event is announced once, and on a resume only after the runtime accepted an answer."""
    HELD = "held"
    DUE = "due"
    SENT = "sent"

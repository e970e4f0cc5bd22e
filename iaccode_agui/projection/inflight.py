"""Answers sent to a task whose acceptance nobody saw: what the task's snapshot says became of them (pure).

An answer is recorded "in flight" before it goes out and committed when the runtime's stream shows it
was taken.  A process that dies in between leaves the record; whoever continues the execution (a resume
that retries the answer, or the adopter of the dead process's run) reads the task back and decides:

- the task no longer waits (working, or ended), or waits for other inputs: the answer was consumed;
- it waits for that very input: the answer never arrived, it may be sent (again);
- it waits with no input projection at all.  A generic agent, or a runtime restarted from its backup,
  shows that while it still waits, so it proves nothing on its own -- the answer is "maybe applied" and a
  resend lets the runtime's refusal decide.  But an iac-code task also shows that once the turn the
  answer started is over, and then a resend is refused and the turn's text is lost.  The task's history
  tells the two apart: when it holds text after everything the execution's runs had shown, the task
  produced a turn after the interrupt, so the answer was consumed, and that text is the turn's.
"""
import dataclasses
from typing import AbstractSet, Any, Dict, List, Optional, Sequence, Set, Tuple

from iaccode_agui.a2a import dialect
from iaccode_agui.projection.adopt import history_text, strip_shown
from iaccode_agui.projection.interrupts import read_required_inputs
from iaccode_agui.projection.states import TaskState


@dataclasses.dataclass(frozen=True)
class InFlightVerdict:
    consumed: List[Tuple[str, str]]           # (interrupt id, answer digest): commit as applied, never resend
    maybe_applied: Dict[str, str]             # interrupt id -> digest: resend, a refusal means consumed
    turn_text: str = ""                       # the text of the turn the consumed answers started


def turn_after_shown(task_result: Any, known_digests: AbstractSet[str]) -> str:
    """The text the task's history holds after what the execution's runs showed ('' when none or unknown)."""
    source = history_text(task_result)
    turn = strip_shown(source, known_digests)
    return turn if turn != source or not known_digests else ""


def waited_inputs(task: Dict[str, Any]) -> Optional[Set[str]]:
    """Input ids an input-required task shows it waits for; None when it shows no input projection."""
    projected = read_required_inputs(dialect.iac_code_metadata(task))
    return {value.get("inputId") for value, _ in projected} if projected else None


def judge_in_flight(task_result: Any, in_flight: Sequence[Tuple[str, str]], known_digests: AbstractSet[str],
                    *, generic: bool) -> InFlightVerdict:
    """Sort the answers in flight by what the task snapshot ``task_result`` shows (see the module text)."""
    _, task = dialect.unwrap(task_result)
    state = TaskState.of((task.get("status") or {}).get("state"))
    waiting = waited_inputs(task) if state is TaskState.INPUT_REQUIRED else None
    turn = "" if generic else turn_after_shown(task_result, known_digests)
    consumed: List[Tuple[str, str]] = []
    maybe: Dict[str, str] = {}
    for interrupt_id, digest in in_flight:
        if state is TaskState.INPUT_REQUIRED:
            if waiting is not None and interrupt_id in waiting:
                continue                       # still waited for: the answer never arrived
            if waiting is None and not turn:
                maybe[interrupt_id] = digest
                continue
        consumed.append((interrupt_id, digest))
    return InFlightVerdict(consumed, maybe, turn if consumed else "")

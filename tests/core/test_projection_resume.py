"""The resume machine walked with plain dicts: which command comes next for each upstream answer.

No client, no store, no thread: each test scripts what the upstream "answered" and reads the commands
the machine asked for, which is exactly what ``runs.resume_driver`` would have executed.
"""
from typing import Any, Dict, List, Optional, Tuple

import pytest

from iaccode_agui.a2a.dialect import context_id_for
from iaccode_agui.projection import resume_machine as machine_module
from iaccode_agui.projection import resume_phases
from iaccode_agui.projection.resume_machine import ResumeMachine
from iaccode_agui.projection.resume_phases import IllegalTransition, Phase
from iaccode_agui.projection.resume_commands import (CancelTask, Delivery, Emit, FetchTask, Finished, RecordAnswer,
                                                     RecordInFlight, RecordInterrupts, ReleaseExecution,
                                                     RestoreSession, ResumeFacts, SendAnswer, Subscribe, Upstream)
from iaccode_agui.projection.resume_plan import resume_digest
from iaccode_agui.projection.effects import CommitInterrupts, is_event
from iaccode_agui.projection.projector import RunContext, RunProjector
from iaccode_agui.projection.textreplay import digests_of
from iaccode_agui.state.model import PendingInterrupt

THREAD = "thread-m"
CTX = context_id_for(THREAD)
TASK = "task-m"


def permission(input_id: str) -> Dict[str, Any]:
    return {"schemaVersion": 1, "kind": "permission", "requestTaskId": TASK, "contextId": CTX,
            "inputId": input_id, "toolUseId": "tool-" + input_id, "toolName": "write_file",
            "prompt": "Allow?", "required": True}


def question(input_id: str) -> Dict[str, Any]:
    return {"schemaVersion": 1, "kind": "ask_user_question", "requestTaskId": TASK, "contextId": CTX,
            "inputId": input_id, "toolUseId": "tool-" + input_id, "prompt": "Which?", "required": True,
            "options": [{"id": "a", "label": "A"}], "allowFreeText": True}


def snapshot(state: str = "input-required", inputs: Optional[List[Dict[str, Any]]] = None) -> Dict[str, Any]:
    task: Dict[str, Any] = {"id": TASK, "contextId": CTX,
                            "status": {"state": "TASK_STATE_" + state.upper().replace("-", "_")}}
    iac: Dict[str, Any] = {"iacCodeSessionId": "session-m"}
    if inputs:
        iac["input"] = inputs[0] if len(inputs) == 1 else inputs
    task["metadata"] = {"iac_code": iac}
    return {"task": task}


def allow(*ids: str) -> List[Dict[str, Any]]:
    return [{"interruptId": i, "status": "resolved", "payload": {"decision": "allow_once"}} for i in ids]


def make(pending: Dict[str, PendingInterrupt], entries: List[Dict[str, Any]], *,
         applied: Optional[Dict[str, str]] = None, task_id: Optional[str] = TASK, expired: Tuple[str, ...] = (),
         pipeline: bool = False, shown: Tuple[str, ...] = (), generic: bool = False) -> ResumeMachine:
    ctx = RunContext(thread_id=THREAD, run_id="run-2", execution_id="exec-1", context_id=CTX,
                     ros_invocation_id="inv-1", task_id=task_id, session_id="session-m", pending=pending,
                     resume=True, pipeline_mode=pipeline, text_digests=frozenset(digests_of(shown)))
    projector = RunProjector(ctx, clock=lambda: 1_800_000_000.0)
    projector.start()
    facts = ResumeFacts(entries=entries, applied=applied or {}, task_id=task_id, expired_ids=frozenset(expired),
                        session_id="session-m", cwd="/ws", metadata={}, run_id="run-2")
    return ResumeMachine(projector, facts, generic=generic, pipeline_mode=pipeline)


def walk(machine: ResumeMachine, results: List[Any], on_send: Any = None) -> List[Any]:
    """Run the machine; ``results`` answer every non-Emit command in order.  Returns the commands."""
    commands: List[Any] = []
    script = list(results)
    for _ in range(100):
        command = machine.next_command()
        commands.append(command)
        if isinstance(command, Finished):
            return commands
        if isinstance(command, Emit):
            machine.observe(None)
            continue
        if isinstance(command, SendAnswer) and on_send is not None:
            on_send(machine, command)
        machine.observe(script.pop(0))
    raise AssertionError("the machine did not finish: %r" % commands)


def kinds(commands: List[Any]) -> List[str]:
    return [type(command).__name__ for command in commands]


def last_event(commands: List[Any]) -> Dict[str, Any]:
    events = [item for command in commands if isinstance(command, Emit) for item in command.outputs if is_event(item)]
    return events[-1]


def pending_of(*values: Dict[str, Any], digest: Optional[str] = None) -> Dict[str, PendingInterrupt]:
    return {value["inputId"]: PendingInterrupt(value=value, answer_digest=digest) for value in values}


def accept_on_send(machine: ResumeMachine, command: SendAnswer) -> None:
    machine.accepted(command.answer.interrupt_id)


# ---- 1. nothing to resume -----------------------------------------------------------------------------
def test_nothing_pending_is_execution_lost_without_any_upstream_call():
    commands = walk(make({}, allow("p-1")), [])
    assert kinds(commands) == ["Emit", "Finished"] and last_event(commands)["code"] == "EXECUTION_LOST"


def test_replay_of_applied_answers_is_already_applied():
    entries = allow("p-1")
    commands = walk(make({}, entries, applied={"p-1": resume_digest(entries[0])}), [])
    assert last_event(commands)["code"] == "RESUME_ALREADY_APPLIED"


def test_answers_to_expired_interrupts_are_execution_expired():
    commands = walk(make({}, allow("p-1"), expired=("p-1",)), [])
    assert last_event(commands)["code"] == "EXECUTION_EXPIRED"


# ---- 2-3. restore and snapshot --------------------------------------------------------------------------
@pytest.mark.parametrize("restored, code", [(Upstream.BACKUP_NOT_READY, "SESSION_BACKUP_NOT_READY"),
                                            (Upstream.UNAVAILABLE, "A2A_UNAVAILABLE")])
def test_session_restore_failures_send_nothing(restored, code):
    commands = walk(make(pending_of(permission("p-1")), allow("p-1")), [restored])
    assert kinds(commands) == ["RestoreSession", "Emit", "Finished"] and last_event(commands)["code"] == code


@pytest.mark.parametrize("answers", [[Upstream.SESSION_LOST], [Upstream.OK, Upstream.TASK_NOT_FOUND]])
def test_a_runtime_that_forgot_the_conversation_settles_the_thread(answers):
    """The runtime said so: the execution is released (pending cleared) and the run says what to do."""
    commands = walk(make(pending_of(permission("p-1")), allow("p-1")), answers + [None])
    assert kinds(commands)[-3:] == ["ReleaseExecution", "Emit", "Finished"]
    assert last_event(commands)["code"] == "CONVERSATION_LOST"
    assert not any(isinstance(command, SendAnswer) for command in commands)


@pytest.mark.parametrize("answers", [[Upstream.UNAVAILABLE], [Upstream.OK, Upstream.UNAVAILABLE],
                                     [Upstream.OK, Upstream.REFUSED]])
def test_a_transient_or_unexplained_failure_settles_nothing(answers):
    commands = walk(make(pending_of(permission("p-1")), allow("p-1")), answers)
    assert not any(isinstance(command, ReleaseExecution) for command in commands)
    assert last_event(commands)["code"] in ("A2A_UNAVAILABLE", "EXECUTION_LOST")


def test_snapshot_of_another_task_is_a_protocol_error():
    other = snapshot()
    other["task"]["id"] = "task-other"
    commands = walk(make(pending_of(permission("p-1")), allow("p-1")), [Upstream.OK, other])
    assert last_event(commands)["code"] == "A2A_PROTOCOL_ERROR"
    assert not any(isinstance(command, SendAnswer) for command in commands)


# ---- 7. deliver -----------------------------------------------------------------------------------------
def test_one_answer_is_recorded_in_flight_sent_and_committed_on_acceptance():
    machine = make(pending_of(permission("p-1")), allow("p-1"))
    commands = walk(machine, [Upstream.OK, snapshot(inputs=[permission("p-1")]), True, Delivery.ENDED],
                    on_send=accept_on_send)
    assert kinds(commands) == ["RestoreSession", "FetchTask", "Emit", "RecordInFlight", "SendAnswer", "Finished"]
    restore, fetch, _, in_flight, send, _ = commands
    assert restore == RestoreSession("/ws", "session-m", TASK) and fetch == FetchTask(TASK, 100)
    assert in_flight == RecordInFlight("p-1", resume_digest(allow("p-1")[0]))
    assert send.streamed and send.message["parts"][0]["data"]["decision"] == "allow_once"
    assert send.message["taskId"] == TASK and send.message["contextId"] == CTX
    assert machine.projector.pending == {} and "p-1" in machine.projector.applied_ids


def test_in_flight_write_failure_sends_nothing():
    commands = walk(make(pending_of(permission("p-1")), allow("p-1")),
                    [Upstream.OK, snapshot(inputs=[permission("p-1")]), False])
    assert "SendAnswer" not in kinds(commands) and last_event(commands)["code"] == "STATE_PERSISTENCE_FAILED"


def test_refused_answer_forgets_its_in_flight_record_and_stays_pending():
    machine = make(pending_of(permission("p-1")), allow("p-1"))
    commands = walk(machine, [Upstream.OK, snapshot(inputs=[permission("p-1")]), True, Delivery.REFUSED, True])
    assert commands[-3] == RecordInFlight("p-1", None)
    assert last_event(commands)["code"] == "A2A_UNAVAILABLE"
    assert machine.projector.pending["p-1"].answer_digest is None


def test_cancel_between_two_answers_stops_before_the_second():
    machine = make(pending_of(permission("p-1"), permission("p-2")), allow("p-1", "p-2"))
    sends = []

    def on_send(machine: ResumeMachine, command: SendAnswer) -> None:
        sends.append(command.answer.interrupt_id)
        machine.accepted(command.answer.interrupt_id)
        machine.note_cancelled()

    both = [permission("p-1"), permission("p-2")]
    commands = walk(machine, [Upstream.OK, snapshot(inputs=both), True, Delivery.OPEN], on_send=on_send)
    assert sends == ["p-1"] and last_event(commands)["code"] == "CANCELLED"


def test_cancelled_question_cancels_the_task_and_releases_the_execution():
    entry = {"interruptId": "q-1", "status": "cancelled"}
    commands = walk(make(pending_of(question("q-1")), [entry]),
                    [Upstream.OK, snapshot(inputs=[question("q-1")]), True, Upstream.NOT_CANCELABLE, True, None])
    assert kinds(commands)[3:] == ["RecordInFlight", "CancelTask", "RecordAnswer", "ReleaseExecution", "Emit",
                                   "Finished"]
    assert commands[4] == CancelTask(TASK) and last_event(commands)["code"] == "CANCELLED"


# ---- 4. recover answers in flight -------------------------------------------------------------------------
def test_answer_consumed_before_a_crash_is_committed_from_the_snapshot_and_replay_follows_the_task():
    entries = allow("p-1")
    digest = resume_digest(entries[0])
    machine = make(pending_of(permission("p-1"), digest=digest), entries)
    # The task moved on (working, no input): the runtime took the answer before the adapter died.
    commands = walk(machine, [Upstream.OK, snapshot("working"), True, snapshot("completed"), None, None],
                    on_send=accept_on_send)
    assert commands[3] == RecordAnswer("p-1", digest)
    assert "SendAnswer" not in kinds(commands)
    assert last_event(commands)["type"] == "RUN_FINISHED"


def test_refusal_of_an_answer_the_snapshot_could_not_judge_commits_it_as_applied():
    entries = allow("p-1")
    digest = resume_digest(entries[0])
    machine = make(pending_of(permission("p-1"), digest=digest), entries)
    # Waiting, but no input projection (a restarted runtime): resend; the refusal proves it was consumed.
    commands = walk(machine, [Upstream.OK, snapshot(), True, Delivery.REFUSED, True,
                              snapshot("completed"), None, None])
    assert RecordAnswer("p-1", digest) in commands
    assert last_event(commands)["type"] == "RUN_FINISHED"


def with_history(document: Dict[str, Any], *texts: str) -> Dict[str, Any]:
    document["task"]["history"] = [{"role": "ROLE_AGENT", "messageId": TASK + "-message", "parts": [{"text": t}]}
                                   for t in texts]
    return document


def texts_of(commands: List[Any]) -> str:
    return "".join(item["delta"] for command in commands if isinstance(command, Emit) for item in command.outputs
                   if is_event(item) and item["type"] == "TEXT_MESSAGE_CONTENT")


@pytest.mark.parametrize("state", ["input-required", "completed"])
def test_an_answer_whose_turn_finished_before_the_crash_is_committed_not_resent_and_its_text_shown(state):
    entries = allow("p-1")
    digest = resume_digest(entries[0])
    machine = make(pending_of(permission("p-1"), digest=digest), entries, shown=("I'll write it.",))
    # Waiting with no input projection, but the history holds a turn after the shown text: a finished turn.
    turn = with_history(snapshot(state), "I'll write it.", "Done: it is written.")
    commands = walk(machine, [Upstream.OK, turn, True, snapshot(state), None, snapshot(state), None, None])
    assert commands[1] == FetchTask(TASK, machine_module.RECOVERY_HISTORY)
    assert commands[3] == RecordAnswer("p-1", digest)
    assert "SendAnswer" not in kinds(commands)
    assert texts_of(commands) == "Done: it is written."
    assert last_event(commands)["type"] == "RUN_FINISHED"


@pytest.mark.parametrize("generic, history", [(False, ("I'll write it.",)), (True, ("I'll write it.", "Done."))])
def test_a_waiting_task_whose_history_shows_no_later_turn_still_gets_the_answer_resent(generic, history):
    entries = allow("p-1")
    digest = resume_digest(entries[0])
    machine = make(pending_of(permission("p-1"), digest=digest), entries, shown=("I'll write it.",),
                   generic=generic)
    waiting = with_history(snapshot(), *history)
    first = [] if generic else [Upstream.OK]
    commands = walk(machine, first + [waiting, True, Delivery.REFUSED, True, snapshot("completed"), None, None])
    assert "SendAnswer" in kinds(commands) and machine.maybe_applied == {"p-1": digest}
    assert texts_of(commands) == ""


def test_terminal_task_without_recovered_answers_is_lost_and_released():
    commands = walk(make(pending_of(permission("p-1")), allow("p-1")), [Upstream.OK, snapshot("failed"), None])
    assert kinds(commands)[-3:] == ["ReleaseExecution", "Emit", "Finished"]
    assert last_event(commands)["code"] == "EXECUTION_LOST"


# ---- 6. plan and discovery ------------------------------------------------------------------------------
def test_inputs_the_client_never_saw_are_announced_instead_of_sending():
    machine = make(pending_of(permission("p-1")), allow("p-1"))
    commands = walk(machine, [Upstream.OK, snapshot(inputs=[permission("p-1"), permission("p-2")])])
    assert "SendAnswer" not in kinds(commands)
    emitted = [item for command in commands if isinstance(command, Emit) for item in command.outputs]
    commit = next(item for item in emitted if isinstance(item, CommitInterrupts))
    assert sorted(commit.pending) == ["p-1", "p-2"]
    assert last_event(commands)["outcome"]["type"] == "interrupt"


def test_refused_plan_still_records_discovered_inputs():
    machine = make(pending_of(permission("p-1")), allow("p-1", "nope"))
    commands = walk(machine, [Upstream.OK, snapshot(inputs=[permission("p-1"), permission("p-2")]), True])
    record = next(command for command in commands if isinstance(command, RecordInterrupts))
    assert sorted(record.pending) == ["p-1", "p-2"] and "p-2" in machine.projector.pending
    assert last_event(commands)["code"] == "UNKNOWN_INTERRUPT"


# ---- 8. follow --------------------------------------------------------------------------------------------
def test_no_boundary_after_the_answers_follows_the_task_then_gives_up():
    machine = make(pending_of(permission("p-1")), allow("p-1"))
    commands = walk(machine, [Upstream.OK, snapshot(inputs=[permission("p-1")]), True, Delivery.OPEN,
                              Upstream.UNAVAILABLE, None, Upstream.UNAVAILABLE, Upstream.OK],
                    on_send=accept_on_send)
    assert kinds(commands)[5:] == ["FetchTask", "Subscribe", "FetchTask", "CancelTask", "Emit", "Finished"]
    assert commands[5] == FetchTask(TASK, 0) and commands[6] == Subscribe(TASK)
    assert commands[8] == CancelTask(TASK, best_effort=True) and last_event(commands)["code"] == "A2A_UNAVAILABLE"


def test_pipeline_resume_catches_up_before_planning():
    machine = make(pending_of(permission("p-1")), allow("p-1"), pipeline=True)
    commands = walk(machine, [Upstream.OK, snapshot(inputs=[permission("p-1")]), None, True, Delivery.ENDED],
                    on_send=accept_on_send)
    assert kinds(commands)[:4] == ["RestoreSession", "FetchTask", "Emit", "RecoverPipeline"]


# ---- the table ------------------------------------------------------------------------------------------
def test_every_waiting_phase_has_a_handler_and_a_row():
    for phase in Phase:
        assert phase in resume_phases._NEXT
        if phase is not Phase.ENDED:
            assert phase in machine_module._HANDLERS


def test_a_move_outside_the_table_is_refused():
    machine = make(pending_of(permission("p-1")), allow("p-1"))
    with pytest.raises(IllegalTransition):
        machine._go(Phase.SENDING)          # nothing was planned yet


def test_nothing_is_asked_after_the_run_ended():
    machine = make({}, allow("p-1"))
    walk(machine, [])
    assert isinstance(machine.next_command(), Finished) and machine.phase is Phase.ENDED
    assert not isinstance(ReleaseExecution(), Finished)

"""Accepted interrupt answers keep a bounded window, so answering questions for ever cannot grow the
thread's document (and every write of it) without end, and an answer that left the window can still
never be applied twice."""
import json

import pytest

from iaccode_agui.server import cli
from iaccode_agui.config import ConfigError
from iaccode_agui.errors import AguiError
from iaccode_agui.projection import resume_plan as rs
from iaccode_agui.runs.admission import admit
from iaccode_agui.state.model import PendingInterrupt, ThreadState
from tests.core.test_admission import request
from tests.core.test_resume_rules import PERM_B, resolved


def _thread_with_answers(count: int, window: int = 16) -> ThreadState:
    state = admit(None, request(run="first", digest="0" * 64), owner="o", now=1000.0, lease_free=True).state
    current = state.execution.execution_id
    state.record_applied("older-execution", "q-old", "a" * 64)
    for index in range(count):
        state.record_applied(current, "q%04d" % index, "%064x" % index)
    state.execution.pending["q0000"] = PendingInterrupt(value={"inputId": "q0000"})   # shown again
    state.trim_applied(window)
    return state


def test_only_the_newest_answers_of_the_current_execution_stay():
    state = _thread_with_answers(100)
    kept = [(entry.execution_id, entry.interrupt_id) for entry in state.applied_resume_digests]
    current = state.execution.execution_id
    assert all(execution_id == current for execution_id, _ in kept)
    ids = [interrupt_id for _, interrupt_id in kept]
    # the re-shown question stays whatever its age (it stops a second answer); then the 16 newest
    assert ids == ["q0000"] + ["q%04d" % index for index in range(84, 100)]


def test_the_window_is_applied_on_admission_and_the_document_stops_growing():
    sizes = []
    for count in (300, 3000):
        state = admit(None, request(run="first", digest="0" * 64), owner="o", now=1000.0, lease_free=True).state
        for index in range(count):
            state.record_applied(state.execution.execution_id, "q%05d" % index, "%064x" % index)
        # the next run of the same execution (what a resume's admission does to the record)
        state.remember_run("resume-%d" % count, "2" * 64, 2000.0, 64, 86400.0, 256)
        assert len(state.applied_resume_digests) == 256
        assert state.applied_resume_digests[-1].interrupt_id == "q%05d" % (count - 1)
        sizes.append(len(json.dumps(state.to_document())))
    assert sizes[1] <= sizes[0] * 1.01, sizes


def test_a_new_turn_forgets_the_answers_of_the_previous_execution():
    state = _thread_with_answers(5)
    state.active_run = None
    state.execution.pending.clear()
    later = admit(state, request(run="second", digest="4" * 64), owner="o", now=1001.0, lease_free=True).state
    assert later.execution.execution_id != state.execution.execution_id
    assert later.applied_resume_digests == []


def test_a_replay_of_an_answer_outside_the_window_is_refused_not_applied_again():
    old = resolved("perm-old", {"decision": "allow_once"})
    entries = [old, resolved("perm-8c1e", {"decision": "deny"})]
    remembered = {"perm-old": rs.resume_digest(old)}
    plan = rs.plan_resume({"perm-8c1e": PERM_B}, entries, remembered.get)
    assert plan.skipped == ["perm-old"]                      # inside the window: recognised as applied
    with pytest.raises(AguiError) as caught:                 # outside: refused before anything is sent
        rs.plan_resume({"perm-8c1e": PERM_B}, entries, {}.get)
    assert caught.value.code == "UNKNOWN_INTERRUPT"


def test_answers_keep_their_order_through_the_document():
    state = _thread_with_answers(5)
    again = ThreadState.from_document(json.loads(json.dumps(state.to_document())), state.thread_id)
    assert [entry.interrupt_id for entry in again.applied_resume_digests] == \
        [entry.interrupt_id for entry in state.applied_resume_digests]


def test_the_window_setting_from_flag_and_environment(tmp_path):
    def settings(argv, env):
        args = cli.build_parser().parse_args(argv + ["--state-dir", str(tmp_path)])
        return cli.settings_from(args, env, "http://127.0.0.1:1/", None)

    assert settings([], {}).applied_window == 256
    assert settings(["--applied-window", "9"], {}).applied_window == 9
    assert settings([], {"IAC_CODE_AGUI_APPLIED_WINDOW": "7"}).applied_window == 7
    with pytest.raises(ConfigError):
        settings([], {"IAC_CODE_AGUI_APPLIED_WINDOW": "0"})

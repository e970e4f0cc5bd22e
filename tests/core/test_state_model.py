"""Thread-state model: file stems, the JSON document, strict loading and the credential guard."""
import copy
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from iaccode_agui.state.keys import thread_file_stem
from iaccode_agui.state.model import (
    SECRET_KEYS,
    ActiveRun,
    AppliedDigest,
    Execution,
    PendingInterrupt,
    StateCorrupt,
    ThreadState,
    find_secret_keys,
    iso_utc,
    parse_iso_utc,
)

D1 = "a" * 64
D2 = "0123456789abcdef" * 4
D3 = "f" * 64


def make_state(thread_id: str = "thread-1") -> ThreadState:
    return ThreadState(
        thread_id=thread_id,
        context_id="ctx-1",
        cwd="/work/ws",
        user_id=None,
        session_id="sess-1",
        execution=Execution(
            execution_id="exec-2",
            ros_invocation_id="ros-1",
            task_id="task-1",
            pipeline_sequence=7,
            pipeline_open_steps=["step-b", "step-a"],
            text_snapshot_digests=[D2, D1],
            pending={
                "input-1": PendingInterrupt(
                    value={"inputId": "input-1", "kind": "permission", "options": [{"id": "x", "label": "X"}]},
                    sideband=True,
                    expires_at="2026-11-30T12:00:00.000Z",
                ),
                "input-2": PendingInterrupt(value={"inputId": "input-2", "kind": "question"}),
            },
        ),
        run_digests={"run-1": D1, "run-2": D3},
        applied_resume_digests=[AppliedDigest("exec-2", "q-9", D3), AppliedDigest("exec-1", "q-1", D1)],
        terminal_execution_ids=["exec-1", "exec-0"],
        active_run=ActiveRun(run_id="run-2", owner="owner-abc", started_at=1700000000.5, kind="resume"),
    )


def good_doc() -> dict:
    return json.loads(json.dumps(make_state().to_document()))


# --- keys ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("thread_id", ["thread-1", "a", "a.b_c-d", "x" * 200, "console", "com0", "lpt10", "con-1"])
def test_plain_ids_are_their_own_stem(thread_id):
    assert thread_file_stem(thread_id) == thread_id


@pytest.mark.parametrize(
    "thread_id",
    ["Abc", "", ".", "..", "a.", "con", "CON", "nul.txt", "Aux.x", "com1", "COM9.json", "lpt1", "a/b", "a b", "é"],
)
def test_unsafe_ids_are_hex_encoded(thread_id):
    assert thread_file_stem(thread_id) == "aguiid~" + thread_id.encode("utf-8").hex()


def test_case_variants_never_collide_case_insensitively():
    upper, lower = thread_file_stem("Abc"), thread_file_stem("abc")
    assert lower == "abc"
    assert upper == "aguiid~416263"
    assert upper.lower() != lower.lower()


def test_long_ids_switch_to_hex_then_hash():
    assert thread_file_stem("x" * 201).startswith("aguihash~")  # 201 plain chars exceed the limit
    assert len(thread_file_stem("X" * 96)) == 199  # 7 + 192 hex chars still fit
    hashed = thread_file_stem("X" * 97)
    assert hashed.startswith("aguihash~") and len(hashed) == 9 + 64


def test_lone_surrogates_are_encodable():
    assert thread_file_stem("\ud800").startswith("aguiid~")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(max_size=260), min_size=1, max_size=40, unique=True))
def test_stems_are_safe_and_injective(ids):
    stems = [thread_file_stem(i) for i in ids]
    for stem in stems:
        assert stem and stem not in (".", "..") and not stem.endswith(".")
        assert "/" not in stem and "\\" not in stem and "\x00" not in stem
        assert len(stem.encode("utf-8")) <= 200
        assert len((stem + ".json").encode("utf-8")) <= 255
        assert stem == stem.lower()  # hence injective on case-insensitive filesystems too
    assert len(set(stems)) == len(stems)


# --- document round trip ---------------------------------------------------------------------------------


def test_round_trip_through_json():
    state = make_state()
    doc = json.loads(json.dumps(state.to_document()))
    again = ThreadState.from_document(doc, "thread-1")
    assert again.to_document() == state.to_document()
    assert again.execution.pending["input-1"].sideband is True
    assert again.active_run == ActiveRun("run-2", "owner-abc", 1700000000.5, "resume")


def test_document_shape_is_camel_case_and_sorted():
    doc = make_state().to_document()
    assert doc["schemaVersion"] == 1
    assert set(doc) == {
        "schemaVersion", "threadId", "contextId", "cwd", "userId", "iacCodeSessionId", "execution",
        "runDigests", "appliedResumeDigests", "terminalExecutionIds", "activeRun", "runDigestTimes",
        "terminalExecutionTimes",
    }
    ex = doc["execution"]
    assert ex["pipelineOpenSteps"] == ["step-a", "step-b"]
    assert ex["textSnapshotDigests"] == [D2, D1]
    assert ex["pending"]["input-2"] == {"value": {"inputId": "input-2", "kind": "question"}, "sideband": False,
                                        "expiresAt": None, "answerDigest": None}
    # in the order the answers were accepted (the window of remembered answers keeps the newest)
    assert [(a["executionId"], a["interruptId"]) for a in doc["appliedResumeDigests"]] == [
        ("exec-2", "q-9"), ("exec-1", "q-1")]
    assert doc["terminalExecutionIds"] == ["exec-0", "exec-1"]
    assert doc["activeRun"] == {"runId": "run-2", "owner": "owner-abc", "startedAt": 1700000000.5, "kind": "resume"}


def test_minimal_state_round_trips():
    state = ThreadState("t", "c", "/w", "user", None, Execution("e", "r"))
    doc = state.to_document()
    assert doc["activeRun"] is None and doc["execution"]["taskId"] is None
    assert ThreadState.from_document(doc, "t") == state


def test_the_run_mode_an_execution_started_with_round_trips_and_older_documents_have_none():
    state = ThreadState("t", "c", "/w", "user", None, Execution("e", "r", run_mode="pipeline"))
    doc = state.to_document()
    assert doc["execution"]["runMode"] == "pipeline"
    assert ThreadState.from_document(doc, "t") == state
    del doc["execution"]["runMode"]                       # as written before the mode was kept
    assert ThreadState.from_document(doc, "t").execution.run_mode is None
    assert "runMode" not in ThreadState("t", "c", "/w", None, None, Execution("e", "r")).to_document()["execution"]


def _set(path, value):
    def mutate(doc):
        target = doc
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    return mutate


def _delete(path):
    def mutate(doc):
        target = doc
        for key in path[:-1]:
            target = target[key]
        del target[path[-1]]
    return mutate


PENDING = ("execution", "pending", "input-1")
CORRUPTIONS = {
    "schema version 2": _set(("schemaVersion",), 2),
    "schema version bool": _set(("schemaVersion",), True),
    "schema version string": _set(("schemaVersion",), "1"),
    "missing key": _delete(("cwd",)),
    "unknown key": _set(("messages",), []),
    "thread id mismatch": _set(("threadId",), "thread-2"),
    "thread id type": _set(("threadId",), 5),
    "empty context": _set(("contextId",), ""),
    "cwd type": _set(("cwd",), ["/"]),
    "user id type": _set(("userId",), 3),
    "session id type": _set(("iacCodeSessionId",), {}),
    "execution type": _set(("execution",), []),
    "execution missing key": _delete(("execution", "taskId")),
    "execution unknown key": _set(("execution", "lastTaskId"), "x"),
    "empty execution id": _set(("execution", "executionId"), ""),
    "ros invocation type": _set(("execution", "rosInvocationId"), None),
    "task id type": _set(("execution", "taskId"), 1),
    "negative cursor": _set(("execution", "pipelineSequence"), -1),
    "float cursor": _set(("execution", "pipelineSequence"), 1.0),
    "bool cursor": _set(("execution", "pipelineSequence"), True),
    "string cursor": _set(("execution", "pipelineSequence"), "3"),
    "run mode unknown": _set(("execution", "runMode"), "fast"),
    "run mode type": _set(("execution", "runMode"), 1),
    "open steps type": _set(("execution", "pipelineOpenSteps"), "step-a"),
    "open step item type": _set(("execution", "pipelineOpenSteps"), [1]),
    "snapshot digest upper": _set(("execution", "textSnapshotDigests"), ["A" * 64]),
    "snapshot digest short": _set(("execution", "textSnapshotDigests"), ["a" * 63]),
    "pending type": _set(("execution", "pending"), []),
    "pending key mismatch": _set(PENDING + ("value", "inputId"), "input-9"),
    "pending without input id": _delete(PENDING + ("value", "inputId")),
    "pending value type": _set(PENDING + ("value",), "x"),
    "pending sideband type": _set(PENDING + ("sideband",), "yes"),
    "pending expiry format": _set(PENDING + ("expiresAt",), "2026-11-30 12:00:00"),
    "pending expiry offset": _set(PENDING + ("expiresAt",), "2026-11-30T12:00:00+00:00"),
    "pending expiry type": _set(PENDING + ("expiresAt",), 1700000000),
    "pending expiry impossible date": _set(PENDING + ("expiresAt",), "2026-13-40T12:00:00Z"),
    "pending entry unknown key": _set(PENDING + ("extra",), 1),
    "pending entry missing key": _delete(PENDING + ("sideband",)),
    "run digests type": _set(("runDigests",), []),
    "run digest bad": _set(("runDigests", "run-1"), "sha256:" + "a" * 57),
    "applied type": _set(("appliedResumeDigests",), {}),
    "applied entry type": _set(("appliedResumeDigests",), ["x"]),
    "applied digest bad": _set(("appliedResumeDigests", 0, "digest"), "z" * 64),
    "applied missing key": _delete(("appliedResumeDigests", 0, "interruptId")),
    "applied duplicates": lambda doc: doc["appliedResumeDigests"].append(dict(doc["appliedResumeDigests"][0])),
    "terminal type": _set(("terminalExecutionIds",), "exec-1"),
    "terminal item type": _set(("terminalExecutionIds",), [None]),
    "active run type": _set(("activeRun",), "run-2"),
    "active run kind": _set(("activeRun", "kind"), "other"),
    "active run started string": _set(("activeRun", "startedAt"), "1700000000"),
    "active run started bool": _set(("activeRun", "startedAt"), True),
    "active run started negative": _set(("activeRun", "startedAt"), -1),
    "active run started nan": _set(("activeRun", "startedAt"), float("nan")),
    "active run empty owner": _set(("activeRun", "owner"), ""),
    "active run empty id": _set(("activeRun", "runId"), ""),
    "active run unknown key": _set(("activeRun", "pid"), 1),
    "credential in pending": _set(PENDING + ("value", "llmApiKey"), "sk-x"),
}


@pytest.mark.parametrize("name", sorted(CORRUPTIONS))
def test_every_corruption_is_rejected(name):
    doc = good_doc()
    ThreadState.from_document(copy.deepcopy(doc), "thread-1")  # the baseline is valid
    CORRUPTIONS[name](doc)
    with pytest.raises(StateCorrupt) as info:
        ThreadState.from_document(doc, "thread-1")
    assert info.value.reason


@pytest.mark.parametrize("doc", [None, [], "x", 1])
def test_non_object_documents_are_corrupt(doc):
    with pytest.raises(StateCorrupt):
        ThreadState.from_document(doc, "thread-1")


def test_expected_thread_id_is_checked():
    with pytest.raises(StateCorrupt, match="threadId"):
        ThreadState.from_document(good_doc(), "Thread-1")


def test_the_interrupted_run_and_its_continuations_round_trip():
    state = make_state()
    assert "interruptedRunId" not in state.to_document()["execution"]      # written only once a run interrupts
    assert state.execution.note_interrupted("run-2", ["p-1"]) and state.execution.continuations == 0
    state.execution.continuations = 3
    assert not state.execution.note_interrupted("run-2", ["p-1"]) and state.execution.continuations == 3
    assert state.execution.note_interrupted("run-2", ["p-2"]) and state.execution.continuations == 3
    doc = json.loads(json.dumps(state.to_document()))
    assert doc["execution"]["interruptedRunId"] == "run-2" and doc["execution"]["continuations"] == 3
    assert doc["execution"]["interruptedIds"] == ["p-1", "p-2"]       # every interrupt the run announced
    again = ThreadState.from_document(doc, "thread-1")
    assert (again.execution.interrupted_run_id, again.execution.continuations) == ("run-2", 3)
    assert again.execution.interrupted_ids == ["p-1", "p-2"]
    assert again.execution.note_interrupted("run-3", ["p-3"]) and again.execution.continuations == 0
    assert again.execution.interrupted_ids == ["p-3"]


@pytest.mark.parametrize("change", [{"continuations": 1}, {"interruptedRunId": "r"},
                                    {"interruptedRunId": "r", "continuations": -1},
                                    {"interruptedRunId": "r", "continuations": True},
                                    {"interruptedRunId": 5, "continuations": 0}])
def test_a_bad_continuation_record_is_corrupt(change):
    doc = good_doc()
    doc["execution"].update(change)
    with pytest.raises(StateCorrupt):
        ThreadState.from_document(doc, "thread-1")


def test_loaded_lists_are_normalised():
    doc = good_doc()
    doc["execution"]["pipelineOpenSteps"] = ["b", "a", "b"]
    doc["terminalExecutionIds"] = ["z", "a"]
    state = ThreadState.from_document(doc, "thread-1")
    assert state.execution.pipeline_open_steps == ["a", "b"]
    assert state.terminal_execution_ids == ["a", "z"]


# --- credentials -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("key", sorted(SECRET_KEYS) + ["LLM_API_KEY", "llm-headers", "AccessKeySecret"])
def test_credentials_are_refused_anywhere(key):
    state = make_state()
    state.execution.pending["input-2"].value["displayParameters"] = [{"nested": {key: "secret"}}]
    with pytest.raises(ValueError, match="credentials"):
        state.to_document()


def test_harmless_keys_pass_the_credential_guard():
    value = {"inputId": "i", "accessKeyId": "public id", "token": "t", "headers": {}, "apiKeyHint": "x"}
    assert find_secret_keys(value) == []
    assert find_secret_keys({"a": [{"securityToken": 1}]}) == ["securityToken"]


# --- mutations -------------------------------------------------------------------------------------------


def test_copy_is_deep():
    state = make_state()
    clone = state.copy()
    clone.execution.pending["input-1"].value["options"].append("y")
    clone.run_digests["run-3"] = D1
    clone.applied_resume_digests[0].digest = D2
    assert state.to_document() == make_state().to_document()


def test_record_applied_overwrites_and_keeps_order():
    state = make_state()
    assert state.applied_digest("exec-2", "q-9") == D3
    assert state.applied_digest("exec-2", "q-1") is None
    state.record_applied("exec-2", "q-9", D1)
    state.record_applied("exec-0", "q-5", D2)
    assert state.applied_digest("exec-2", "q-9") == D1
    # acceptance order: an overwritten answer is the newest again
    assert [(a.execution_id, a.interrupt_id) for a in state.applied_resume_digests] == [
        ("exec-1", "q-1"), ("exec-2", "q-9"), ("exec-0", "q-5")]
    with pytest.raises(ValueError):
        state.record_applied("exec-2", "q-2", "not-hex")


def test_mark_terminal_is_idempotent_and_sorted():
    state = make_state()
    state.mark_terminal("exec-2")
    state.mark_terminal("exec-2")
    state.mark_terminal("a-first")
    assert state.terminal_execution_ids == ["a-first", "exec-0", "exec-1", "exec-2"]


# --- time helpers ----------------------------------------------------------------------------------------


def test_iso_utc_round_trip_and_expiry():
    stamp = iso_utc(1700000000.25)
    assert stamp == "2023-11-14T22:13:20.250Z"
    assert parse_iso_utc(stamp) == 1700000000.25
    assert parse_iso_utc("2023-11-14T22:13:20Z") == 1700000000.0
    pending = PendingInterrupt({"inputId": "i"}, expires_at=stamp)
    assert not pending.is_expired(1700000000.0)
    assert pending.is_expired(1700000000.25)
    assert not PendingInterrupt({"inputId": "i"}).is_expired(10 ** 12)
    with pytest.raises(ValueError):
        parse_iso_utc("2023-11-14T22:13:20+01:00")

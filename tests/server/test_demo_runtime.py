"""The scripted A2A runtime, end to end over real HTTP with plain ``requests``: its scenarios (a normal turn,
permissions, questions, tools, failures and wire faults).

These tests pin the wire shapes the adapter relies on (the iac-code A2A dialect), so a change in the demo that
would make adapter tests pass against something the real runtime never sends shows up here first.  The
JSON-RPC surface (cancel, subscribe, errors, auth, side endpoints) is in ``test_demo_protocol.py``.
"""
import os
import time
from typing import Any, Dict

import pytest
import requests

from iaccode_agui.demo import SCENARIOS, DemoServer
from iaccode_agui.demo.tools import DENIAL_RESULT
from tests.demo_runtime_helpers import (
    TOKEN, Stream, answer_permission, headers, iac, message, rpc, rpc_error, start, state, texts, tool_signals, turn,
    wait_for)
from tests.demo_runtime_helpers import server, workspace  # noqa: F401  (fixtures: pytest finds them by these names)


# --- a normal turn -------------------------------------------------------------------------------------------
def test_normal_turn_frames_in_order_and_wire_shape(server: DemoServer) -> None:
    stream = start(server, "Hello there", context_id="ctx-normal")
    assert stream.response.headers["Cache-Control"] == "no-store"
    results = stream.results()
    assert stream.raw.endswith(b"\r\n\r\n") and b"\n\n" not in stream.raw.replace(b"\r\n\r\n", b"")
    first = results[0]["task"]
    task_id = first["id"]
    assert first["contextId"] == "ctx-normal" and first["status"] == {"state": "TASK_STATE_SUBMITTED"}
    echoed = first["history"][0]
    assert echoed["role"] == "ROLE_USER" and echoed["taskId"] == task_id and echoed["parts"] == [{"text": "Hello there"}]
    assert [state(r) for r in results[1:3]] == ["TASK_STATE_SUBMITTED", "TASK_STATE_WORKING"]
    session = iac(results[1])["iacCodeSessionId"]
    assert all(r["statusUpdate"]["taskId"] == task_id for r in results[1:])
    thinking = [iac(r)["thinking"] for r in results if "thinking" in iac(r)]
    assert 2 <= len(thinking) <= 3 and all(t["type"] == "raw_thinking" for t in thinking)
    assert texts(results) == ["Hello! ", "I am the scripted runtime. ", "You said: Hello there"]
    deltas = [r["statusUpdate"]["status"]["message"] for r in results if texts([r])]
    assert {d["messageId"] for d in deltas} == {task_id + "-message"} and {d["role"] for d in deltas} == {"ROLE_AGENT"}
    usage = [iac(r)["usage"] for r in results if "usage" in iac(r)]
    assert usage == [{"inputTokens": 102.0, "outputTokens": 22.0, "totalTokens": 124.0, "cachedInputTokens": 0.0,
                      "model": "other", "provider": "openai"}]
    assert b'"inputTokens": 102.0' in stream.raw  # floats, like protobuf Struct
    final = results[-2]
    assert iac(final) == {"assistantFinal": {"complete": True}}
    assert texts([final], "-2") == ["Hello! I am the scripted runtime. You said: Hello there"]
    assert state(results[-1]) == "TASK_STATE_INPUT_REQUIRED" and iac(results[-1]) == {}
    # A second turn in the same context is a new task of the same iac-code session.
    again = turn(server, "again", context_id="ctx-normal")
    assert again[0]["task"]["id"] != task_id and iac(again[1])["iacCodeSessionId"] == session


def test_context_is_generated_when_absent_and_frames_echo_rpc_id(server: DemoServer) -> None:
    body = {"jsonrpc": "2.0", "id": 42, "method": "SendStreamingMessage", "params": message(context_id=None)}
    response = requests.post(server.url, json=body, headers=headers(), stream=True, timeout=5)
    stream = Stream(response)
    first = stream.next_event()
    assert first is not None and first[1]["id"] == 42 and first[1]["jsonrpc"] == "2.0"
    assert first[1]["result"]["task"]["contextId"]
    stream.results()


def test_follow_up_on_the_same_task_has_no_task_frame(server: DemoServer) -> None:
    first = turn(server, "hi")
    task_id = first[0]["task"]["id"]
    follow = turn(server, "more please", task_id=task_id)
    assert "task" not in follow[0] and state(follow[0]) == "TASK_STATE_WORKING"
    assert texts(follow)[-1] == "You said: more please"
    assert state(follow[-1]) == "TASK_STATE_INPUT_REQUIRED"


# --- permissions ---------------------------------------------------------------------------------------------
def test_write_permission_allow_runs_the_tool_once_and_writes_the_file(server: DemoServer, workspace: str) -> None:
    results = turn(server, "please WRITE a file", cwd=workspace)
    task_id = results[0]["task"]["id"]
    signals = tool_signals(results)
    assert [s["status"] for s in signals] == ["started", "input_delta", "input_delta", "input_complete"]
    complete = signals[-1]
    assert complete["toolInput"] == {"path": "hello.txt", "content": "hello from the scripted runtime\n"}
    assert complete["inputSummary"]["tool_name"] == "write_file"
    last = iac(results[-1])
    pending = last["input"]
    assert state(results[-1]) == "TASK_STATE_INPUT_REQUIRED"
    assert pending["inputId"].startswith("permission-") and len(pending["inputId"]) == len("permission-") + 32
    assert pending["toolUseId"] == complete["toolUseId"] and pending["toolUseId"].startswith("call_")
    assert pending["schemaVersion"] == 1.0 and pending["requestTaskId"] == task_id
    assert (pending["effect"], pending["target"], pending["isReadOnly"], pending["required"]) == \
        ("file_change", "hello.txt", False, True)
    assert pending["prompt"] == "Change a workspace file Allow once?" and pending["language"] == "en"
    assert [o["id"] for o in pending["options"]] == ["allow_once", "deny"]
    assert last["permission"] == {"pending": True, "toolName": "write_file", "autoApproved": False,
                                  "toolUseId": pending["toolUseId"]}
    snapshot = rpc(server, "GetTask", {"id": task_id, "historyLength": 100}).json()["result"]
    assert snapshot["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert snapshot["metadata"]["iac_code"]["input"]["inputId"] == pending["inputId"]
    assert snapshot["metadata"]["iac_code"]["executionControl"]["executionStatus"] == "input-required"

    answer = Stream(answer_permission(server, task_id, pending, "allow_once"))
    after = answer.results()
    assert "task" not in after[0]
    assert iac(after[0])["inputReceived"] == {"kind": "permission", "inputId": pending["inputId"],
                                              "toolUseId": pending["toolUseId"], "decision": "allow_once"}
    artifact = after[1]["artifactUpdate"]
    assert artifact["lastChunk"] is True and artifact["artifact"]["name"] == "hello.txt"
    assert artifact["artifact"]["metadata"]["byteSize"] == 32.0
    completed = tool_signals(after)[0]
    assert completed["status"] == "completed"
    assert completed["result"] == "Successfully wrote 1 lines to %s" % os.path.join(workspace, "hello.txt")
    assert completed["artifact"]["artifactId"] == artifact["artifact"]["artifactId"]
    assert texts(after) == ["Done: hello.txt was written."] and state(after[-1]) == "TASK_STATE_INPUT_REQUIRED"
    with open(os.path.join(workspace, "hello.txt")) as handle:
        assert handle.read() == "hello from the scripted runtime\n"
    # Replaying the same answer is stale: rejected before any stream, and the tool never runs twice.
    replay = answer_permission(server, task_id, pending, "allow_once")
    assert rpc_error(replay)["code"] == -32602
    assert [e for e in server.runtime.tool_executions if e[0] == task_id] == [(task_id, pending["toolUseId"])]
    assert "input" not in rpc(server, "GetTask", {"id": task_id}).json()["result"]["metadata"]["iac_code"]


def test_deny_reports_the_denial_and_executes_nothing(server: DemoServer) -> None:
    results = turn(server, "run bash please", preferredLanguage="zh-CN")
    task_id = results[0]["task"]["id"]
    pending = iac(results[-1])["input"]
    assert pending["effect"] == "local_execution" and pending["language"] == "zh"
    assert pending["target"] == "the current local workspace; command: echo hi"
    after = Stream(answer_permission(server, task_id, pending, "deny")).results()
    failed = tool_signals(after)[0]
    assert failed == {"status": "failed", "name": "bash", "toolUseId": pending["toolUseId"], "result": DENIAL_RESULT}
    assert texts(after) == ["Understood, I did not run the command."]
    assert not [e for e in server.runtime.tool_executions if e[0] == task_id]


def test_write_twice_parks_on_a_second_permission(server: DemoServer) -> None:
    results = turn(server, "write it twice")
    task_id = results[0]["task"]["id"]
    first = iac(results[-1])["input"]
    after = Stream(answer_permission(server, task_id, first, "allow_once")).results()
    second = iac(after[-1])["input"]
    assert second["target"] == "notes.txt" and second["inputId"] != first["inputId"]
    final = Stream(answer_permission(server, task_id, second, "allow_once")).results()
    assert texts(final) == ["Done: hello.txt and notes.txt were written."]
    assert len([e for e in server.runtime.tool_executions if e[0] == task_id]) == 2


@pytest.mark.parametrize("change", [
    {"extra": "x"},                        # a seventh key
    {"requestTaskId": "someone-else"},     # not this task
    {"inputId": "permission-" + "0" * 32},  # stale / unknown input
    {"decision": "allow_always"},
])
def test_invalid_permission_answers_are_rejected(server: DemoServer, change: Dict[str, Any]) -> None:
    results = turn(server, "write a file")
    task_id = results[0]["task"]["id"]
    pending = iac(results[-1])["input"]
    error = rpc_error(answer_permission(server, task_id, pending, "allow_once", **change))
    assert error["code"] == -32602 and error["message"] == "Invalid permission response"
    assert error["data"][0]["reason"] == "INVALID_PARAMS"
    two_parts = message(task_id=task_id, parts=[{"text": "yes"}, {"text": "really"}])
    assert rpc_error(rpc(server, "SendStreamingMessage", two_parts))["code"] == -32602
    # Still parked on the same permission.
    snapshot = rpc(server, "GetTask", {"id": task_id}).json()["result"]
    assert snapshot["metadata"]["iac_code"]["input"]["inputId"] == pending["inputId"]


# --- other scenarios -----------------------------------------------------------------------------------------
def test_question_text_answer_completes_the_tool(server: DemoServer) -> None:
    results = turn(server, "ask me a question")
    task_id = results[0]["task"]["id"]
    assert [s["status"] for s in tool_signals(results)][0] == "started"
    pending = iac(results[-1])["input"]
    assert pending["kind"] == "ask_user_question" and pending["inputId"] == "ask-" + pending["toolUseId"]
    assert pending["options"] == [{"id": "cn-hangzhou", "label": "Hangzhou"}, {"id": "cn-beijing", "label": "Beijing"}]
    assert pending["allowFreeText"] is True and pending["prompt"] == "Which region?"
    after = turn(server, "Hangzhou", task_id=task_id)
    assert iac(after[0])["inputReceived"]["inputId"] == pending["inputId"]
    completed = tool_signals(after)[0]
    assert completed == {"status": "completed", "name": "ask_user_question", "toolUseId": pending["toolUseId"],
                         "result": "Hangzhou"}
    assert texts(after) == ["You chose: Hangzhou."] and state(after[-1]) == "TASK_STATE_INPUT_REQUIRED"


def test_read_only_tool_reports_progress_without_asking(server: DemoServer) -> None:
    results = turn(server, "use a tool")
    signals = tool_signals(results)
    assert [s["status"] for s in signals] == ["started", "input_delta", "input_delta", "input_complete",
                                              "progress", "completed"]
    assert "toolInput" not in signals[3] and signals[3]["inputSummary"]["tool_name"] == "read_file"
    assert signals[4]["mcp"]["total"] == 2.0 and signals[4]["name"] == "read_file"
    assert "input" not in iac(results[-1]) and state(results[-1]) == "TASK_STATE_INPUT_REQUIRED"


def test_fail_and_retryable(server: DemoServer) -> None:
    failed = turn(server, "fail now")
    assert texts(failed) == ["Something went wrong."]
    assert state(failed[-1]) == "TASK_STATE_FAILED" and iac(failed[-1])["error"]["retryable"] is False
    assert failed[-1]["statusUpdate"]["status"]["message"]["parts"][0]["text"]
    error = rpc_error(rpc(server, "SendStreamingMessage", message(task_id=failed[0]["task"]["id"])))
    assert error["code"] == -32004
    retry = turn(server, "retryable please")
    assert state(retry[-1]) == "TASK_STATE_INPUT_REQUIRED" and iac(retry[-1])["error"]["retryable"] is True
    assert texts(retry, "-3") == ["A temporary error occurred. Please retry."]


def test_firehose_delivers_every_delta_with_a_timestamp(server: DemoServer) -> None:
    results = turn(server, "firehose 3000")
    deltas = texts(results)
    assert len(deltas) == 3000
    assert [int(d[1:].split("@")[0]) for d in deltas] == list(range(3000))
    stamps = [int(d.split("@")[1]) for d in deltas]
    assert stamps == sorted(stamps) and abs(stamps[-1] - time.time_ns()) < 60e9
    assert iac(results[-2]) == {"assistantFinal": {"complete": True}}


def test_cwd_outside_the_allowed_roots_fails_the_task(server: DemoServer) -> None:
    results = turn(server, "hello", cwd="/etc")
    assert state(results[-1]) == "TASK_STATE_FAILED"
    assert results[-1]["statusUpdate"]["status"]["message"]["parts"] == [{"text": "Invalid A2A workspace metadata."}]


# --- faults --------------------------------------------------------------------------------------------------
def test_garbage_frame_mid_stream(server: DemoServer) -> None:
    kinds = [kind for kind, _ in start(server, "garbage").events()]
    assert "garbage" in kinds and kinds[-1] == "data"


@pytest.mark.parametrize("text", ["truncate", "die"])
def test_abrupt_close_without_chunked_terminator(server: DemoServer, text: str) -> None:
    stream = start(server, text)
    task_id = stream.next_result()["task"]["id"]
    with pytest.raises((requests.exceptions.ChunkedEncodingError, requests.exceptions.ConnectionError)):
        stream.results()
    if text == "truncate":
        assert stream.raw.rstrip().endswith(b'"sta')
    assert wait_for(lambda: rpc(server, "GetTask", {"id": task_id}).json()["result"]["status"]["state"]
                    == "TASK_STATE_FAILED")


def test_rpc_error_frame_then_task_failed(server: DemoServer) -> None:
    stream = start(server, "rpcerror")
    task_id = stream.next_result()["task"]["id"]
    events = stream.events()
    assert events[-1][0] == "error" and events[-1][1]["error"]["code"] == -32603
    assert b"event: error\r\ndata: " in stream.raw
    assert rpc(server, "GetTask", {"id": task_id}).json()["result"]["status"]["state"] == "TASK_STATE_FAILED"


@pytest.mark.parametrize("text,field", [("wrongtask", "taskId"), ("wrongcontext", "contextId")])
def test_foreign_status_update(server: DemoServer, text: str, field: str) -> None:
    results = turn(server, text)
    first = results[0]["task"]
    own = first["id"] if field == "taskId" else first["contextId"]
    foreign = [r for r in results[1:] if r["statusUpdate"][field] != own]
    assert len(foreign) == 1 and state(results[-1]) == "TASK_STATE_INPUT_REQUIRED"


def test_scenarios_are_documented() -> None:
    assert {"default", "write", "write twice", "bash", "tool", "question", "slow", "fail", "retryable", "firehose",
            "sleep", "garbage", "truncate", "rpcerror", "wrongtask", "wrongcontext", "hang", "die"} <= set(SCENARIOS)
    assert all(isinstance(text, str) and text and "\n" not in text for text in SCENARIOS.values())


def test_stop_closes_sockets_only_after_every_stream_thread_has_left(workspace: str) -> None:
    """A worker thread still serving a stream when the loop closes the sockets and the trigger pipe writes
    to a closed (or meanwhile reused) descriptor: EBADF in the teardown of any test that stops mid-stream."""
    srv = DemoServer.start(token=TOKEN, ping_interval=0.2, slow_interval=0.05, allowed_cwds=[workspace])
    server = srv._server
    threads_at_close = []
    close = server.trigger._close

    def recording_close() -> None:
        threads_at_close.append(sum(1 for thread in server.task_dispatcher.threads))
        close()

    server.trigger._close = recording_close
    streams = [rpc(srv, "SendStreamingMessage", message("slow", context_id="ctx-stop-%d" % i), stream=True)
               for i in range(4)]
    for response in streams:
        next(response.iter_lines())   # each stream is being served by a worker thread now
    srv.stop()
    for response in streams:
        response.close()
    assert threads_at_close == [0]


@pytest.mark.slow
def test_stop_still_ends_the_loop_when_its_wake_up_pipe_was_closed_underneath(workspace: str) -> None:
    """A descriptor closed twice elsewhere in the process can be the loop's trigger pipe; stop must still
    end the loop and free the port instead of raising EBADF."""
    srv = DemoServer.start(token=TOKEN, allowed_cwds=[workspace])
    assert requests.get(srv.url + "health", timeout=5).status_code == 401   # it serves
    for fd in list(srv._server.trigger._fds):
        os.close(fd)
    srv.stop(timeout=5)
    assert not srv._thread.is_alive()
    with pytest.raises(requests.ConnectionError):
        requests.get(srv.url + "health", timeout=2)


def test_a_crashed_turn_reads_failed_before_its_error_frame_can_be_taken() -> None:
    """The stream's reader takes the error frame only once the task reads FAILED: a client that calls
    GetTask right after the error never sees the task still WORKING (a race under load before)."""
    import time

    from iaccode_agui.demo.tasks import ERROR, Subscriber, TaskStore
    from iaccode_agui.demo.turns import Turn

    task = TaskStore(time.monotonic).create("ctx-crash")
    with task.lock:
        sub = Subscriber(task, turn_bound=True)
        task.subscribers.append(sub)
    seen = []
    real_push = sub.push

    def push(item):
        if item[0] == ERROR:
            seen.append(task.status["state"])
        real_push(item)

    sub.push = push
    Turn(task, "rpcerror", slow_interval=0.01, record_tool=lambda *args: None).crash(
        {"code": -32603, "message": "boom"})
    assert seen == ["TASK_STATE_FAILED"]
    assert [kind for kind, _ in sub.take(0)][:1] == [ERROR]

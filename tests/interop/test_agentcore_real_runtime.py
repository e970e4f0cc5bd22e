"""The AgentCore-compatible route in front of the REAL `iac-code a2a` 0.16 runtime, with forwardedProps {}.

A normal turn, a permission interrupt answered, a stop of a slow run and an attach after a cut connection,
all as a client that knows nothing of iac-code would send them.
"""
import os
import uuid

import pytest

from tests.agentcore_helpers import STOP, ac_body, ac_post, ac_stream, attach_body
from tests.agui_checker import check_sequence, parse_sse
from tests.harness import Adapter, SSEReader


@pytest.fixture
def ac_adapter(real_a2a, tmp_path):
    adapter = Adapter(real_a2a.url, real_a2a.token, str(tmp_path / "state"), real_a2a.workspace,
                      default_cwd=real_a2a.workspace)
    yield adapter
    adapter.stop()


def _thread() -> str:
    return "ac-" + uuid.uuid4().hex[:10]


def _text(events):
    return "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")


def test_normal_turn(ac_adapter):
    events, ids = ac_stream(ac_adapter, ac_body("hello real runtime", thread=_thread()))
    assert "Your message was: hello real runtime" in _text(events)
    assert any(e["type"] == "REASONING_MESSAGE_CONTENT" for e in events)
    usage, finished = events[-2], events[-1]
    assert finished["outcome"] == {"type": "success"}
    assert usage["name"] == "agentcore.usage" and usage["value"]["models"][0]["provider"] == "openai"
    assert usage["value"]["outputTokens"] > 0


def test_permission_interrupt_answered(ac_adapter, real_a2a):
    thread = _thread()
    events, _ = ac_stream(ac_adapter, ac_body("please write the file", thread=thread))
    interrupt = events[-1]["outcome"]["interrupts"][0]
    assert interrupt["reason"] == "tool_call" and interrupt["metadata"]["toolName"] == "write_file"
    resumed, _ = ac_stream(ac_adapter, ac_body(None, thread=thread, resume=[
        {"interruptId": interrupt["id"], "status": "resolved", "payload": {"decision": "allow_once"}}]))
    result = next(e for e in resumed if e["type"] == "TOOL_CALL_RESULT")
    assert "Successfully wrote" in result["content"]
    assert resumed[-1]["outcome"] == {"type": "success"}
    assert os.path.exists(os.path.join(real_a2a.workspace, "hello.txt"))


def test_stop_of_a_slow_run(ac_adapter):
    thread, run = _thread(), "run-slow"
    reader = SSEReader(ac_post(ac_adapter, ac_body("slow story please", thread=thread, run=run), stream=True,
                               timeout=120))
    reader.until("TEXT_MESSAGE_CONTENT", limit=60)
    stop = ac_post(ac_adapter, {"threadId": thread, "runId": run}, path=STOP)
    assert stop.status_code == 204
    events = reader.until("RUN_ERROR", limit=60)
    reader.close()
    assert events[-1]["code"] == "RUN_CANCELLED" and events[-1]["message"] == "Run cancelled."
    check_sequence(events)
    assert ac_post(ac_adapter, {"threadId": thread, "runId": run}, path=STOP).status_code == 204


def test_attach_after_a_cut_connection(ac_adapter):
    thread, run = _thread(), "run-attach"
    reader = SSEReader(ac_post(ac_adapter, ac_body("slow story please", thread=thread, run=run), stream=True,
                               timeout=120))
    seen = reader.until("TEXT_MESSAGE_CONTENT", limit=60)
    reader.close()                      # the connection is cut; the run must go on
    attached = ac_post(ac_adapter, attach_body(thread, run, len(seen) - 1), timeout=120)
    assert attached.status_code == 200, attached.text
    rest, ids, _ = parse_sse(attached.content)
    assert ids[0] == len(seen) and rest[-1]["type"] == "RUN_FINISHED", rest[-1]
    assert rest[-1]["outcome"] == {"type": "success"}
    full = seen + rest
    check_sequence(full)
    # Every word of the slow reply arrived once: nothing was lost or repeated across the cut.
    from fake_llm import SLOW_WORDS
    assert _text(full).split().count("tick") == SLOW_WORDS

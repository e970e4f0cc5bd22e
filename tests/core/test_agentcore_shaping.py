"""Event shaping on the AgentCore routes (pure: events in, events out)."""
import json

from hypothesis import given, settings, strategies as st

from iaccode_agui.agentcore.shaping import FRAME_OVERHEAD, AgentCoreShaper, split_text, usage_value
from iaccode_agui.projection import events as ev
from iaccode_agui.sse.channel import encode_agui_event

LIMIT = 4096


def frame_size(event, seq=123456):
    return len(encode_agui_event(dict(event), seq))


def test_usage_event_comes_right_before_run_finished():
    usage = [{"provider": "p", "model": "m", "inputTokens": 10, "outputTokens": 5, "totalTokens": 15},
             {"model": "n", "inputTokens": 1, "outputTokens": 2, "totalTokens": 3, "cachedInputTokens": 1}]
    finished = ev.run_finished_success("t", "r", usage)
    out = AgentCoreShaper("en", LIMIT)(finished)
    assert [e["type"] for e in out] == ["CUSTOM", "RUN_FINISHED"] and out[1] is finished
    assert out[0]["name"] == "agentcore.usage"
    assert out[0]["value"] == {"inputTokens": 11, "outputTokens": 7, "totalTokens": 18, "cachedInputTokens": 1,
                               "models": usage}
    interrupted = ev.run_finished_interrupt("t", "r", [{"id": "i", "reason": "tool_call"}])
    empty = AgentCoreShaper("en", LIMIT)(interrupted)
    assert empty[0]["value"] == {"inputTokens": 0, "outputTokens": 0, "totalTokens": 0, "models": []}
    assert usage_value(None)["models"] == []


def test_cancelled_becomes_run_cancelled_in_the_run_language():
    out = AgentCoreShaper("ja", LIMIT)(ev.run_error("t", "r", "CANCELLED", "anything"))
    assert out == [dict(ev.run_error("t", "r", "RUN_CANCELLED", "実行はキャンセルされました。"))]
    other = ev.run_error("t", "r", "A2A_UNAVAILABLE", "down")
    assert AgentCoreShaper("en", LIMIT)(other) == [other]


def test_small_events_pass_unchanged():
    shaper = AgentCoreShaper("en", LIMIT)
    for event in (ev.text_content("m", "hi"), ev.tool_result("c", "ok"), ev.tool_args("c", "{}"),
                  ev.run_started("t", "r"), ev.text_start("m")):
        assert shaper(event) == [event]


def test_a_long_delta_is_split_into_events_under_the_limit():
    text = ("naïve \"q\" \\ \n\t\u0001 漢字 😀 " * 2000)
    for event in (ev.text_content("m", text), ev.tool_args("c", text), ev.reasoning_content("m", text)):
        out = AgentCoreShaper("en", LIMIT)(event)
        assert len(out) > 1
        assert "".join(item["delta"] for item in out) == text
        assert all(frame_size(item) <= LIMIT for item in out)
        assert all({k: v for k, v in item.items() if k != "delta"} ==
                   {k: v for k, v in event.items() if k != "delta"} for item in out)


def test_a_long_tool_result_is_truncated_with_a_marker_stating_its_size():
    content = "x" * 10000 + "END"
    out = AgentCoreShaper("de", LIMIT)(ev.tool_result("c", content))
    assert len(out) == 1 and frame_size(out[0]) <= LIMIT
    shown = out[0]["content"]
    assert shown.startswith("xxxx") and "END" not in shown
    assert shown.endswith("[vom Adapter gekürzt: der ursprüngliche Inhalt hatte 10003 Bytes]")


def test_the_one_mebibyte_default_holds():
    out = AgentCoreShaper("en", 1024 * 1024)(ev.text_content("m", "é" * (1024 * 1024)))
    assert len(out) == 3 and all(frame_size(item) <= 1024 * 1024 for item in out)


@settings(max_examples=60, deadline=None)
@given(st.text(min_size=0, max_size=3000), st.integers(min_value=16, max_value=600))
def test_split_text_keeps_the_text_and_the_budget(text, budget):
    pieces = split_text(text, budget)
    assert "".join(pieces) == text
    for piece in pieces:
        encoded = len(json.dumps(piece, ensure_ascii=False).encode("utf-8", "surrogatepass")) - 2
        assert encoded <= budget or len(piece) == 1
    assert FRAME_OVERHEAD >= len(',"timestamp":9999999999999') + len("id: 9007199254740991\ndata: \n\n")


def test_splitting_measures_each_piece_at_most_three_times(monkeypatch):
    from iaccode_agui.agentcore import shaping
    calls = []
    real = shaping.encoded_size
    monkeypatch.setattr(shaping, "encoded_size", lambda value: calls.append(1) or real(value))
    pieces = shaping.split_text("é" * 100000 + "a" * 100000, 20000)
    assert len(calls) <= 3 * len(pieces)

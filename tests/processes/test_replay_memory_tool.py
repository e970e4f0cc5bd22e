"""The bounded memory tool runs end to end (its figures are read from its output, not asserted here)."""
from tests.tools_loader import load_tool


def test_replay_memory_tool_short_run(capsys):
    tool = load_tool("toolkit.memory")
    assert tool.main(["--runs", "3", "--deltas", "300", "--wait", "0.5"]) in (0, 1)
    output = capsys.readouterr().out
    assert "RSS idle" in output and "RSS after load" in output and "within 50 MB of idle" in output

"""Take-over against the REAL `iac-code a2a` 0.16: the adapter is killed with SIGKILL during a slow streamed
turn, a new adapter starts on the same state directory, and the client re-attaches with its last id.

The runtime goes on with the task meanwhile; the text the client reconstructs (what it saw before the kill
plus what the re-attach brings) must equal the text of the same turn run without interruption.
"""
import uuid

from tests.adapter_process import AdapterProcess, post_run, reattach_rest, read_then_kill, run_body
from tests.harness import Adapter, text_of


def test_kill_9_mid_stream_then_reattach_reconstructs_the_whole_text(real_a2a, tmp_path):
    reference = Adapter(real_a2a.url, real_a2a.token, str(tmp_path / "reference"), real_a2a.workspace)
    try:
        uninterrupted = reference.run(reference.body("slow story please", thread="ref-" + uuid.uuid4().hex[:8]),
                                      timeout=120)
    finally:
        reference.stop()
    expected = text_of(uninterrupted)
    assert expected.count("tick") >= 20

    state_dir = str(tmp_path / "state")
    owner = AdapterProcess(real_a2a.url, real_a2a.token, state_dir, real_a2a.workspace,
                           str(tmp_path / "owner.log"))
    body = run_body(real_a2a.workspace, "slow story please", "crash-" + uuid.uuid4().hex[:8])
    seen, ids = read_then_kill(owner, post_run(owner.url, body), b"tick", 5, limit=120)
    assert 5 <= text_of(seen).count("tick") < expected.count("tick")

    successor = Adapter(real_a2a.url, real_a2a.token, state_dir, real_a2a.workspace)
    try:
        whole = reattach_rest(successor, body, seen, ids, timeout=120)
        assert text_of(whole) == expected
        assert whole[-1]["type"] == "RUN_FINISHED" and whole[-1]["outcome"] == {"type": "success"}
        assert "agui_takeovers_total 1" in successor.app.metrics.render()
    finally:
        successor.stop()

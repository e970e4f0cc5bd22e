"""``kill -9`` of a gunicorn worker in the middle of streamed runs, clients re-attaching as the terminal client.

The soak (``tools/worker_crash_soak.py``) runs here with a CI-sized kill count; the full variant::

    IACCODE_AGUI_WORKER_SOAK_KILLS=50 python -m pytest tests/processes/test_deploy_crash_soak.py
    # or, with the printed table:  python tools/worker_crash_soak.py --kills 50
"""
import os

import pytest

from tests.tools_loader import load_tool

pytest.importorskip("gunicorn", reason="gunicorn is a test dependency (setup.cfg test extra)")
soak = load_tool("worker_crash_soak")


@pytest.mark.soak
def test_worker_kills_mid_stream_lose_nothing():
    kills = int(os.environ.get("IACCODE_AGUI_WORKER_SOAK_KILLS", "5"))
    seed = os.environ.get("IACCODE_AGUI_WORKER_SOAK_SEED")
    report = soak.run_soak(kills, clients=3, seed=int(seed) if seed else None)
    text = soak.render(report)
    print(text)
    assert report["ok"], text
    counts = report["counts"]
    # The soak must really have done what it claims: every kill cut a stream in the middle of its text.
    assert report["kills"] == kills and counts["kills that cut their target stream"] >= kills - 2, text
    assert counts["runs cut by a kill"] >= kills and counts["re-attaches"] > 0, text
    assert report["outcomes"].get("complete", 0) > 0 and counts["threads usable at the end"] > 0, text
    assert counts["answers applied twice"] == 0 and counts["tools run twice"] == 0, text

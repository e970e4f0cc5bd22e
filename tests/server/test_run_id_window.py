"""The idempotency record (run ids and terminal executions) keeps a bounded window, so one thread can
neither be bricked by the state-file cap nor get slower with every run."""
import json

import pytest

from iaccode_agui.errors import AguiError
from iaccode_agui.runs.admission import admit
from iaccode_agui.state.model import ThreadState
from tests.core.test_admission import request

LONG = "r" * 1000


def _runs(count: int, window=(256, 86400.0), start: float = 1000.0, id_of=lambda i: "%s-%05d" % (LONG, i)):
    state = None
    for index in range(count):
        admitted = admit(state, request(run=id_of(index), digest="%064x" % index), owner="o",
                         now=start + index, lease_free=True, window=window)
        state = admitted.state
        state.active_run = None                      # the run ended
    return state


def test_run_ids_are_kept_in_a_count_window():
    state = _runs(600)
    assert len(state.run_digests) == 256
    assert "%s-%05d" % (LONG, 599) in state.run_digests and "%s-%05d" % (LONG, 343) not in state.run_digests
    assert len(state.terminal_execution_ids) <= 256
    size = len(json.dumps(state.to_document()))
    assert size < 256 * 1300 + 40000, size         # about 1.2 kB per remembered run with 1 kB run ids


def test_state_size_stops_growing():
    sizes = [len(json.dumps(_runs(count).to_document())) for count in (300, 900)]
    assert sizes[1] <= sizes[0] * 1.01, sizes


def test_run_ids_older_than_the_age_window_are_forgotten():
    state = _runs(10, window=(256, 100.0))
    later = admit(state, request(run="fresh", digest="f" * 64), owner="o", now=1000.0 + 9 + 200,
                  lease_free=True, window=(256, 100.0)).state
    assert list(later.run_digests) == ["fresh"]


def test_inside_the_window_a_replay_is_refused_outside_it_is_a_new_turn():
    state = _runs(300)
    recent = "%s-%05d" % (LONG, 299)
    with pytest.raises(AguiError) as caught:
        admit(state, request(run=recent, digest="%064x" % 299), owner="o", now=5000.0, lease_free=True)
    assert caught.value.code == "DUPLICATE_RUN_ID"
    evicted = "%s-%05d" % (LONG, 0)
    again = admit(state, request(run=evicted, digest="%064x" % 0), owner="o", now=5000.0, lease_free=True).state
    assert again.execution.execution_id != state.execution.execution_id          # a new turn, nothing re-applied
    assert state.execution.execution_id in again.terminal_execution_ids


def test_documents_without_times_load_and_are_dated_on_the_next_admission():
    document = _runs(5).to_document()
    del document["runDigestTimes"], document["terminalExecutionTimes"]
    state = ThreadState.from_document(document, "t")
    assert state.run_times == {}
    later = admit(state, request(run="next", digest="e" * 64), owner="o", now=99999.0, lease_free=True).state
    assert len(later.run_digests) == 6 and set(later.run_times.values()) == {99999.0}
    assert ThreadState.from_document(later.to_document(), "t") == later


def test_corrupt_times_are_refused():
    from iaccode_agui.state.model import StateCorrupt
    document = _runs(2).to_document()
    for bad in ({"f" * 64: 1.0}, {next(iter(document["runDigests"].values())): "soon"}):
        broken = dict(document, runDigestTimes=bad)
        with pytest.raises(StateCorrupt):
            ThreadState.from_document(broken, "t")


def test_window_settings_from_flags_and_environment(tmp_path):
    from iaccode_agui.server import cli
    from iaccode_agui.config import ConfigError

    def settings(argv, env):
        args = cli.build_parser().parse_args(argv + ["--state-dir", str(tmp_path)])
        return cli.settings_from(args, env, "http://127.0.0.1:1/", None)

    assert (settings([], {}).run_id_window, settings([], {}).run_id_window_age) == (64, 86400.0)
    env = {"IAC_CODE_AGUI_RUN_ID_WINDOW": "16", "IAC_CODE_AGUI_RUN_ID_WINDOW_AGE": "60"}
    assert (settings([], env).run_id_window, settings([], env).run_id_window_age) == (16, 60.0)
    assert settings(["--run-id-window", "8"], env).run_id_window == 8
    with pytest.raises(ConfigError):
        settings([], {"IAC_CODE_AGUI_RUN_ID_WINDOW_AGE": "-1"})


def test_the_window_applies_through_the_http_surface(adapter_factory):
    adapter = adapter_factory(run_id_window=3)
    for index in range(5):
        adapter.run(adapter.body("hello", thread="windowed", run="run-%d" % index))
    state = adapter.app.store.load("windowed")
    assert sorted(state.run_digests) == ["run-2", "run-3", "run-4"]
    assert adapter.post(adapter.body("hello", thread="windowed", run="run-4")).status_code == 409

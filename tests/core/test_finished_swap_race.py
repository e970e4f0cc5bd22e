"""A finished run swapped for its summary while a client re-attaches: still one client at a time.

``RunManager.attach`` looks the run up under the registry's lock and attaches to its channel after
letting go of it; the housekeeper may swap the run for its summary in between.  The client then holds
the run's old channel while the manager keeps a new one: a second client must still be refused.
"""
import pytest

from iaccode_agui.errors import AguiError
from iaccode_agui.web.inputs import parse_run_request
from iaccode_agui.runs.finished import FinishedRun
from iaccode_agui.runs.liverun import LiveRun
from tests.core.test_finished_summary import _finished_run, _kept, _manager
from tests.run_harness import body


@pytest.mark.slow
def test_a_swap_between_lookup_and_attach_does_not_let_a_second_client_attach(tmp_path):
    manager, quiet = _manager(tmp_path)
    try:
        _finished_run(manager, quiet, "run-1")
        assert isinstance(_kept(manager, "run-1"), LiveRun)
        req = parse_run_request(body(manager, "hi", run="run-1"), manager.settings.allowed_cwds)
        find = manager.runs.find
        swapped = []

        def find_then_swap(key):
            run = find(key)
            if not swapped:          # the housekeeper's tick lands just after the first lookup
                swapped.append(manager.runs.kept.summarise())
            return run

        manager.runs.find = find_then_swap
        first_run, first = manager.attach(req.thread_id, "run-1", 0)
        assert swapped == [1] and isinstance(_kept(manager, "run-1"), FinishedRun)
        with pytest.raises(AguiError) as seen:
            manager.attach(req.thread_id, "run-1", 0)
        assert seen.value.code == "RUN_ALREADY_ATTACHED"
        first.detach()
    finally:
        manager.stop()

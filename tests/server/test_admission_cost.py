"""What one admission and one run's close cost in reads and ordering (counted, never timed).

- A new turn reads the thread's state once: inside its own transaction, which also tells whether a run
  that lost its owner has to be settled first (no separate read before the transaction).
- The connection a run opens ahead for the next upstream call is opened only once the run's channel is
  closed, so it never holds back the end of the run's response.
"""
import threading

from iaccode_agui.state.model import ActiveRun
from iaccode_agui.state.store import ThreadStore
from tests.harness import wait_for


def _count_reads(monkeypatch):
    reads = []
    original = ThreadStore._read

    def counted(self, thread_id, stem):
        if not threading.current_thread().name.startswith("agui-run-"):   # not the run's own writes
            reads.append(thread_id)
        return original(self, thread_id, stem)

    monkeypatch.setattr(ThreadStore, "_read", counted)
    return reads


def test_a_new_turn_on_a_known_thread_reads_its_state_once(adapter_factory, monkeypatch):
    adapter = adapter_factory()
    assert adapter.run(adapter.body("hello", thread="t-once"))[-1]["type"] == "RUN_FINISHED"
    assert wait_for(lambda: adapter.app.manager.active_count() == 0, 5)
    reads = _count_reads(monkeypatch)
    assert adapter.run(adapter.body("hello again", thread="t-once"))[-1]["type"] == "RUN_FINISHED"
    assert reads == ["t-once"]


def test_a_turn_after_a_dead_owner_still_settles_its_run_first(adapter_factory, monkeypatch):
    """The settling still happens when the admission's read finds a claimed run nobody here runs."""
    adapter = adapter_factory()
    assert adapter.run(adapter.body("hello", thread="t-dead"))[-1]["type"] == "RUN_FINISHED"
    assert wait_for(lambda: adapter.app.manager.active_count() == 0, 5)
    store = adapter.app.store
    with store.transaction("t-dead") as txn:      # a claim left by a process that died mid-run
        state = txn.state
        state.active_run = ActiveRun(run_id="run-of-the-dead", owner="gone", started_at=1.0)
        txn.save(state)
    settled = []
    original = type(adapter.app.manager)._settle_orphan

    def settle(self, thread_id, active):
        settled.append((thread_id, active.run_id))
        return original(self, thread_id, active)

    monkeypatch.setattr(type(adapter.app.manager), "_settle_orphan", settle)
    assert adapter.run(adapter.body("hello again", thread="t-dead"))[-1]["type"] == "RUN_FINISHED"
    assert settled == [("t-dead", "run-of-the-dead")]
    assert store.load("t-dead").active_run is None

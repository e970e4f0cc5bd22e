"""Special files planted in the state directory: each is refused at once, like a symlink, never waited on."""
import os
import threading
from typing import Any, List

import pytest

from iaccode_agui.state.store import StateError, ThreadStore
from iaccode_agui.state.keys import thread_file_stem
from tests.hostile_helpers import Env, assert_contract, fresh_run


def _in_thread(action: Any, limit: float = 5.0) -> List[Any]:
    """Run ``action`` in a daemon thread; [] when it did not finish within ``limit`` seconds."""
    result: List[Any] = []

    def target() -> None:
        try:
            result.append(action())
        except BaseException as exc:  # the outcome under test may be an exception
            result.append(exc)

    worker = threading.Thread(target=target, daemon=True)
    worker.start()
    worker.join(limit)
    return result


@pytest.mark.parametrize("name", [".{stem}.json.tmp", "{stem}.json", "{stem}.lock", "{stem}.run"])
def test_a_fifo_at_a_state_file_name_is_refused_at_once(tmp_path, name):
    env = Env(str(tmp_path))
    try:
        assert env.call(env.body("hello", thread="seed", run=fresh_run()))[0] == 200   # creates the threads dir
        path = os.path.join(env.app.store.threads_dir, name.format(stem=thread_file_stem("victim")))
        os.mkfifo(path, 0o600)
        answer = _in_thread(lambda: env.call(env.body("hello", thread="victim", run=fresh_run())))
        assert answer, "the request hung on a FIFO at %s" % name
        status, headers, body = answer[0]
        assert status == 503 and assert_contract(status, headers, body, allow_5xx=True) in (
            "STATE_UNAVAILABLE", "STATE_PERSISTENCE_FAILED")
        assert env.call(env.body("hello", thread="bystander", run=fresh_run()))[0] == 200
    finally:
        env.close()


def test_store_write_through_a_fifo_temp_fails_fast(tmp_path):
    store = ThreadStore(str(tmp_path / "state"))
    with store.transaction("seed") as txn:
        assert txn.state is None
    os.mkfifo(os.path.join(store.threads_dir, ".%s.json.tmp" % thread_file_stem("t")), 0o600)
    from tests.core.test_state_store import make_state

    def write() -> None:
        with store.transaction("t") as txn:
            txn.save(make_state("t"))

    outcome = _in_thread(write)
    assert outcome and isinstance(outcome[0], StateError), outcome

"""A state directory too small for what a run writes is refused at start-up and reported by /ready, with
the space it has and the space a run needs in one line; on real small file systems (tmpfs mounts)."""
import json
import os
import pathlib
import subprocess

import pytest
from werkzeug.test import Client

from iaccode_agui.web.readiness import Readiness, probe_client, ready_response
from iaccode_agui.state.fileio import size_text
from iaccode_agui.state.journal import SPACE_BYTES
from iaccode_agui.state.model import Execution, ThreadState
from iaccode_agui.state.store import SPACE_HEADROOM, StateUnavailable, ThreadStore
from tests.processes.test_cli_startup import _one_line_error, _run
from tests.wsgi.test_ready import _app

NEEDED = size_text(SPACE_BYTES + SPACE_HEADROOM)


@pytest.fixture
def small_fs(tmp_path):
    """Mount a tmpfs of the given size (KiB) under ``tmp_path``; skipped where mounting is not permitted."""
    mounted = []

    def mount(kib: int) -> str:
        path = tmp_path / ("fs-%d" % len(mounted))
        path.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%dk" % kib, "tmpfs", str(path)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip("cannot mount a small tmpfs here (needs root): %s" % done.stderr.strip())
        mounted.append(str(path))
        return str(path)

    yield mount
    for path in mounted:
        subprocess.run(["umount", "-l", path], capture_output=True)


def test_a_64_kib_file_system_is_refused_at_start_up_saying_how_much_a_run_needs(tmp_path, small_fs):
    state_dir = os.path.join(small_fs(64), "agui")
    line = _one_line_error(_run(["--demo", "--state-dir", state_dir], tmp_path), "--state-dir %s" % state_dir)
    assert "KiB free, a run needs %s" % NEEDED in line, line


def test_a_file_system_just_short_of_the_journal_is_refused_and_one_that_holds_it_is_taken(small_fs):
    short = ThreadStore(small_fs((SPACE_BYTES + SPACE_HEADROOM) // 1024 - 256))
    with pytest.raises(StateUnavailable, match="a run needs %s" % NEEDED):
        short.check_writable()
    roomy = ThreadStore(small_fs((SPACE_BYTES + SPACE_HEADROOM) // 1024 + 256))
    assert roomy.check_writable() >= SPACE_BYTES + SPACE_HEADROOM


def test_ready_reports_a_state_dir_that_filled_up_and_says_what_is_free_and_needed(tmp_path, workspace, demo,
                                                                                     small_fs):
    roomy = small_fs(16 * 1024)
    app = _app(pathlib.Path(roomy), workspace, demo.url, demo.token)   # state in <mount>/state
    uncached = Readiness(app.store, probe_client(app.settings), lambda: False, ttl=0.0)   # looks every time
    try:
        ready = Client(app).get("/ready").get_json()
        assert ready["status"] == "ready", ready
        assert "free (a run needs %s)" % NEEDED in ready["checks"]["stateDir"]["detail"]
        with open(os.path.join(roomy, "filler"), "wb") as filler:     # something else fills the disk
            filler.write(b"\0" * (8 << 20))
        response = ready_response(uncached)
        assert response.status_code == 503 and json.loads(response.get_data())["failing"] == ["stateDir"]
        assert "a run needs %s" % NEEDED in json.loads(response.get_data())["checks"]["stateDir"]["detail"]
    finally:
        uncached.close()
        app.close(0.1)


def test_what_the_journal_already_holds_counts_as_room(tmp_path):
    store = ThreadStore(str(tmp_path / "state"))
    assert store.space_needed() == SPACE_BYTES + SPACE_HEADROOM
    with store.transaction("t") as txn:                                           # opens the journal
        txn.save(ThreadState("t", "c", "/w", None, None, Execution("e", "r")))
    held = SPACE_BYTES + SPACE_HEADROOM - store.space_needed()
    assert 0 < held <= SPACE_BYTES
    store.close()
    assert ThreadStore(str(tmp_path / "none"), fsync=False).space_needed() == SPACE_HEADROOM

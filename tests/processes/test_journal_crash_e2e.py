"""``kill -9`` of a real adapter process, then what a power loss would leave of its unsynced thread files.

The adapter writes thread files without fsync and makes each write durable in its journal.  Here it is
killed mid-run and after announcing an interrupt; the test then empties every thread file its journal
still names (a file renamed into place whose data never reached the disk) and marks the journal as written
before a reboot.  The restarted adapter must rebuild the files from the journal at start and remove it:
the announced interrupt can be answered, the cut run's id is never accepted again.
"""
import fcntl
import os
from typing import Any, Dict

import pytest

from iaccode_agui.state.keys import thread_file_stem
from tests.journal_helpers import from_an_earlier_boot, journal_files, named_stems
from tests.processes.test_reliability_crash import Client, _allow, adapter_proc, soak  # noqa: F401 (a fixture)


def _owner_lock_is_free(journal_dir: str) -> bool:
    locks = [n for n in journal_files(journal_dir) if n.endswith(".lock")]
    for name in locks:
        fd = os.open(os.path.join(journal_dir, name), os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False
        finally:
            os.close(fd)
    return bool(locks)


def test_power_loss_after_a_kill_keeps_interrupts_and_run_ids(adapter_proc, demo, workspace):
    client = Client(adapter_proc, workspace)
    announced = client.run(client.body("answer-me", "please write"))
    assert len(announced.interrupts) == 1
    interrupt = announced.interrupts[0]
    seen: Dict[str, Any] = {}

    def kill_on_first_text(event: Dict[str, Any]) -> None:
        soak.remember_session(event, seen)
        if event["type"] == "TEXT_MESSAGE_CONTENT" and adapter_proc.proc.poll() is None:
            adapter_proc.kill()

    cut_body = client.body("cut", "slow please")
    assert client.run(cut_body, on_event=kill_on_first_text).dropped

    journal_dir = os.path.join(adapter_proc.state_dir, "journal")
    threads_dir = os.path.join(adapter_proc.state_dir, "threads")
    assert _owner_lock_is_free(journal_dir), "the dead adapter's journal must be there, its lock free"
    orphaned = journal_files(journal_dir)
    named = named_stems(journal_dir)
    stems = [thread_file_stem(t) for t in ("answer-me", "cut")]
    if not set(stems) <= named:
        pytest.fail("a checkpoint made the files durable before the kill; nothing left to lose: %s" % named)
    for stem in stems:
        with open(os.path.join(threads_dir, stem + ".json"), "r+b") as handle:
            handle.truncate(0)
    from_an_earlier_boot(journal_dir)

    adapter_proc.start()  # recovery runs before the adapter listens
    assert not set(orphaned) & set(journal_files(journal_dir)), "the orphaned journal must be gone"
    answered = client.run(client.body("answer-me", None, _allow(interrupt["id"])))
    assert answered.final["type"] == "RUN_FINISHED" and answered.final["outcome"] == {"type": "success"}
    reused = client.run(cut_body)
    assert reused.status == 409 and reused.code == "DUPLICATE_RUN_ID"
    following = client.run(client.body("cut", "hello again"))
    assert following.status == 200 and following.final["type"] == "RUN_FINISHED", (following.status, following.code)
    assert adapter_proc.terminate() == 0
    assert journal_files(journal_dir) == [], "a clean stop checkpoints and removes the journal"

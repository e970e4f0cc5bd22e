"""Faults: a broken, silent or lying runtime, a client that stops reading, and a state directory that fails.

Every case checks the documented RUN_ERROR and then that nothing is left behind: no ``agui-run-*`` worker
thread, no upstream socket beyond the keep-alive pool, and a thread that accepts the next run.  Sockets are
counted from ``/proc/self/fd`` and ``/proc/net/tcp{,6}`` (the adapter, the scripted runtime and the test
client all live in this process), so the checks need Linux.
"""
import errno
import os
import subprocess
import threading
import time
from typing import List, Tuple

import pytest

from iaccode_agui import errors
from iaccode_agui.server.serving import ServerThread
from iaccode_agui.state import fileio as files_module
from iaccode_agui.state.store import ThreadStore
from iaccode_agui.server.upstream import free_loopback_port
from tests.agui_checker import check_stream, parse_sse, types
from tests.harness import SSEReader, session_of, text_of, wait_for

POOL_SLACK = 4          # idle keep-alive connections the A2A client may keep per pool
TCP_STATES = {"01": "ESTABLISHED", "06": "TIME_WAIT", "08": "CLOSE_WAIT", "0A": "LISTEN"}


# ---- process introspection ---------------------------------------------------------------------------
_PREEXISTING: List[threading.Thread] = []


@pytest.fixture(autouse=True)
def _ignore_run_threads_of_earlier_tests() -> None:
    _PREEXISTING[:] = [thread for thread in threading.enumerate() if thread.name.startswith("agui-run-")]


def run_threads() -> List[str]:
    """Run worker threads started by this test that are still alive."""
    return [thread.name for thread in threading.enumerate()
            if thread.name.startswith("agui-run-") and not any(thread is old for old in _PREEXISTING)]


def _socket_inodes() -> set:
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink("/proc/self/fd/" + fd)
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    return inodes


def tcp_sockets() -> List[Tuple[int, int, str]]:
    """(local port, remote port, state) of every TCP socket this process holds open."""
    inodes = _socket_inodes()
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as handle:
                lines = handle.readlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[9] in inodes:
                local = int(fields[1].rsplit(":", 1)[1], 16)
                remote = int(fields[2].rsplit(":", 1)[1], 16)
                found.append((local, remote, TCP_STATES.get(fields[3], fields[3])))
    return found


def upstream_connections(port: int) -> List[str]:
    """States of the adapter's client-side connections to the runtime on ``port``."""
    return [state for local, remote, state in tcp_sockets() if remote == port and local != port]


def rss_mib() -> float:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    raise AssertionError("no VmRSS")


def assert_nothing_left(adapter, upstream_port: int, socket_baseline: int) -> None:
    assert wait_for(lambda: adapter.app.manager.active_count() == 0, 5)
    assert wait_for(lambda: run_threads() == [], 5), run_threads()
    # A broken connection must be closed, not parked: no CLOSE_WAIT, and at most the keep-alive pool.
    assert wait_for(lambda: "CLOSE_WAIT" not in upstream_connections(upstream_port), 5), \
        upstream_connections(upstream_port)
    assert wait_for(lambda: len(upstream_connections(upstream_port)) <= POOL_SLACK, 5), \
        upstream_connections(upstream_port)
    assert wait_for(lambda: len(tcp_sockets()) <= socket_baseline + POOL_SLACK + 2, 5), tcp_sockets()


def demo_port(demo) -> int:
    return int(demo.url.rstrip("/").rsplit(":", 1)[1])


# ---- runtime refuses connections -----------------------------------------------------------------------
def test_refused_connection_fails_fast_and_frees_the_thread(adapter_factory):
    port = free_loopback_port()
    # Each attempt is a new user message on the thread, sent alone: the snapshot that tells such a client the
    # earlier attempts is not what this test is about.
    adapter = adapter_factory(upstream_url="http://127.0.0.1:%d/" % port, connect_timeout=2, messages_snapshot="off")
    baseline = len(tcp_sockets())
    for attempt in range(3):
        started = time.monotonic()
        events = adapter.run(adapter.body("hello", thread="refused"))
        assert time.monotonic() - started < 2.0
        assert types(events) == ["RUN_STARTED", "RUN_ERROR"], events
        assert events[-1]["code"] == "A2A_UNAVAILABLE"
        assert events[-1]["message"] == errors.MSG_A2A_UNAVAILABLE
        assert_nothing_left(adapter, port, baseline)
    state = adapter.app.store.load("refused")
    assert state.active_run is None and state.execution.execution_id in state.terminal_execution_ids


# ---- runtime misbehaves mid-stream ---------------------------------------------------------------------
# What runs/worker.py emits: a non-JSON frame, a stream cut mid-event or mid-body and a mid-stream JSON-RPC
# error all surface as A2AError -> fail_upstream -> A2A_UNAVAILABLE (behaviour rule 27) after a
# best-effort CancelTask; another task or context id is a ProtocolViolation -> A2A_PROTOCOL_ERROR.
FAULTS = [
    ("garbage", "A2A_UNAVAILABLE", errors.MSG_A2A_UNAVAILABLE, True),
    ("truncate", "A2A_UNAVAILABLE", errors.MSG_A2A_UNAVAILABLE, True),
    ("die", "A2A_UNAVAILABLE", errors.MSG_A2A_UNAVAILABLE, True),
    ("rpcerror", "A2A_UNAVAILABLE", errors.MSG_A2A_UNAVAILABLE, True),
    ("wrongtask", "A2A_PROTOCOL_ERROR", errors.MSG_A2A_PROTOCOL_ERROR, False),
    ("wrongcontext", "A2A_PROTOCOL_ERROR", errors.MSG_A2A_PROTOCOL_ERROR, False),
    ("fail", "A2A_EXECUTION_FAILED", errors.MSG_A2A_EXECUTION_FAILED, False),
]


@pytest.mark.parametrize("scenario,code,message,cancels", FAULTS, ids=[f[0] for f in FAULTS])
def test_runtime_fault_gives_documented_run_error(adapter, demo, scenario, code, message, cancels):
    port = demo_port(demo)
    adapter.run(adapter.body("warm up the pool", thread="warm-" + scenario))
    baseline = len(tcp_sockets())
    thread = "fault-" + scenario
    events = adapter.run(adapter.body("please %s now" % scenario, thread=thread))
    final = events[-1]
    assert final["type"] == "RUN_ERROR" and final["code"] == code and final["message"] == message, final
    assert "Hello! " in text_of(events) or scenario == "fail"   # what came before the fault is kept
    assert not any(e["type"] == "RUN_FINISHED" for e in events)
    state = adapter.app.store.load(thread)
    task_id = state.execution.task_id
    assert task_id
    if cancels:
        assert wait_for(lambda: ("CancelTask", task_id) in demo.runtime.requests_log, 5)
    assert_nothing_left(adapter, port, baseline)
    state = adapter.app.store.load(thread)
    assert state.active_run is None and state.execution.pending == {}
    assert state.execution.execution_id in state.terminal_execution_ids
    follow_up = adapter.run(adapter.body("and now a normal turn", thread=thread, ros="inv-2"))
    assert follow_up[-1]["type"] == "RUN_FINISHED" and follow_up[-1]["outcome"] == {"type": "success"}
    assert_nothing_left(adapter, port, baseline)


def test_many_faults_in_a_row_leak_nothing(adapter, demo):
    port = demo_port(demo)
    adapter.run(adapter.body("warm up", thread="warm"))
    baseline = len(tcp_sockets())
    scenarios = ["garbage", "truncate", "die", "rpcerror", "wrongtask", "wrongcontext"] * 3
    for index, scenario in enumerate(scenarios):
        events = adapter.run(adapter.body(scenario, thread="burst-%d" % index))
        assert events[-1]["type"] == "RUN_ERROR"
    assert_nothing_left(adapter, port, baseline)


# ---- runtime hangs silently ---------------------------------------------------------------------------
def _hang(adapter):
    started = time.monotonic()
    response = adapter.post(adapter.body("hang", thread="hang"), timeout=20)
    elapsed = time.monotonic() - started
    events, _, heartbeats = parse_sse(response.content)
    check_stream(response.content)
    return events, heartbeats, elapsed


@pytest.mark.slow
def test_silent_runtime_heartbeats_then_idle_timeout(adapter_factory, demo):
    adapter = adapter_factory(upstream_idle_timeout=1.5, heartbeat_interval=0.3)
    port = demo_port(demo)
    baseline = len(tcp_sockets())
    events, heartbeats, elapsed = _hang(adapter)
    assert heartbeats >= 3                      # the client connection is kept alive meanwhile
    assert 1.4 <= elapsed < 5
    assert types(events) == ["RUN_STARTED", "RUN_ERROR"]
    assert events[-1]["code"] == "A2A_UNAVAILABLE"
    assert_nothing_left(adapter, port, baseline)
    # The runtime's hanging stream noticed its reader left (``hang`` gives up when unobserved).
    assert wait_for(lambda: demo.runtime.open_streams == 0, 5)
    assert adapter.run(adapter.body("hello again", thread="hang", ros="inv-2"))[-1]["type"] == "RUN_FINISHED"


@pytest.mark.slow
def test_idle_timeout_message_says_the_runtime_stopped_responding(adapter_factory):
    adapter = adapter_factory(upstream_idle_timeout=1, heartbeat_interval=0.3)
    events, _, _ = _hang(adapter)
    assert events[-1]["code"] == "A2A_UNAVAILABLE"
    assert events[-1]["message"] == errors.MSG_A2A_IDLE_TIMEOUT


# ---- a client that stops reading ------------------------------------------------------------------------
def _with_small_server_buffer(adapter, watermark: int):
    """Serve the same app from a waitress whose per-connection output buffer blocks at ``watermark``.

    waitress buffers up to ``outbuf_high_watermark`` (16 MiB by default, spilled to a temp file beyond
    1 MiB) of a slow client's output before the app's write blocks; a small one makes the adapter's own
    bound (the per-client queue) the one that is observed within seconds.
    """
    adapter.server.stop()
    adapter.server = ServerThread(adapter.app, threads=32, slice_seconds=0.05, outbuf_high_watermark=watermark)
    adapter.url = adapter.server.url
    return adapter


def _published_still(samples: List[Tuple[float, int, float]], seconds: float) -> bool:
    """Whether the published-event count in ``samples`` (time, count, RSS) has not moved for ``seconds``."""
    if not samples or samples[-1][0] - samples[0][0] < seconds:
        return False
    last_time, last_count, _ = samples[-1]
    window = [count for when, count, _ in samples if last_time - when <= seconds]
    older = [count for when, count, _ in samples if last_time - when > seconds]
    return bool(older) and older[-1] == last_count and all(count == last_count for count in window)


@pytest.mark.slow
def test_stalled_client_memory_is_bounded_and_close_cancels(adapter_factory, demo):
    """A full per-client queue blocks the worker (backpressure through the runtime's TCP stream) instead
    of growing memory or dropping events; closing the client cancels."""
    adapter = _with_small_server_buffer(adapter_factory(queue_max_events=8, replay_buffer_events=256), 65536)
    response = adapter.post(adapter.body("firehose 1000000", thread="stall"), stream=True)
    reader = SSEReader(response)
    reader.until("TEXT_MESSAGE_CONTENT")
    run = adapter.app.manager.live_runs()[0]
    start_rss = rss_mib()
    samples = []
    # Sample without reading a byte until the published count has not moved for 2 s (the worker waits
    # for the client). How soon the buffers fill depends on the machine's load, so the wait is sized by
    # that condition, bounded at 20 s; a worker that never stalls publishes the whole million meanwhile.
    deadline = time.monotonic() + 20.0
    while time.monotonic() < deadline and not _published_still(samples, 2.0):
        time.sleep(0.25)
        samples.append((time.monotonic(), run.channel.events_published, rss_mib()))
    assert not run.worker.finished
    assert _published_still(samples, 2.0), samples       # stalled: the worker waits for the client
    assert samples[-1][1] < 200000, samples
    # What was published is held at most in the bounded queue and the bounded replay buffer.
    assert len(run.channel._frames) <= 256 and run.channel._subscriber.queue.qsize() <= 8
    assert max(rss for _, _, rss in samples) - start_rss < 32, samples
    task_id = session_of(reader.events)["taskId"]
    reader.close()
    assert wait_for(lambda: adapter.app.manager.active_count() == 0, 5)
    assert run.worker.outcome == "error" and run.worker.error_code == "CANCELLED"
    assert wait_for(lambda: ("CancelTask", task_id) in demo.runtime.requests_log, 5)
    assert wait_for(lambda: run_threads() == [], 5)
    state = adapter.app.store.load("stall")
    assert state.active_run is None and state.execution.execution_id in state.terminal_execution_ids


# ---- state directory failures ---------------------------------------------------------------------------
def _fail_replace(monkeypatch, predicate=lambda payload: True):
    """Make the rename step of an atomic write fail with ENOSPC (a write failing mid-way)."""
    real = files_module.replace_with_retries
    calls = {"failed": 0}

    def replace(source: str, target: str) -> None:
        with open(source, "rb") as handle:
            payload = handle.read()
        # The predicates read thread state documents; a thread's stored conversation is written as usual.
        if not target.endswith("~history.json") and predicate(payload):
            calls["failed"] += 1
            raise OSError(errno.ENOSPC, "No space left on device")
        real(source, target)

    monkeypatch.setattr(files_module, "replace_with_retries", replace)
    return calls


def _leftover_temp_files(adapter) -> List[str]:
    threads_dir = adapter.app.store.threads_dir
    return [name for name in os.listdir(threads_dir) if name.endswith(".tmp")] if os.path.isdir(threads_dir) else []


def test_admission_write_failure_is_503_and_claims_nothing(adapter, monkeypatch):
    adapter.run(adapter.body("first turn", thread="adm", run="run-a"))
    path = adapter.app.store.path_for("adm")
    with open(path, "rb") as handle:
        before = handle.read()
    calls = _fail_replace(monkeypatch)
    for thread, run in (("adm", "run-b"), ("adm-new", "run-c")):
        response = adapter.post(adapter.body("second turn", thread=thread, run=run))
        assert response.status_code == 503
        assert response.json() == {"error": {"code": "STATE_UNAVAILABLE", "message": errors.MSG_STATE_UNAVAILABLE}}
    assert calls["failed"] == 2
    with open(path, "rb") as handle:
        assert handle.read() == before                          # the previous document is intact
    assert not os.path.exists(adapter.app.store.path_for("adm-new"))
    assert _leftover_temp_files(adapter) == []
    assert adapter.app.manager.active_count() == 0 and run_threads() == []
    monkeypatch.undo()
    # Nothing was claimed: the run ids are still free and no lease is held.
    assert not adapter.app.store.run_lease_is_held("adm")
    assert adapter.run(adapter.body("second turn", thread="adm", run="run-b"))[-1]["type"] == "RUN_FINISHED"
    assert adapter.run(adapter.body("second turn", thread="adm-new", run="run-c"))[-1]["type"] == "RUN_FINISHED"


def test_raw_os_error_from_the_store_is_503_and_leaks_no_lease(adapter, monkeypatch):
    """The brief's injection: ``_write_atomic`` raising OSError (its contract says StateWriteFailed)."""
    def broken(self, name, payload):
        raise OSError(errno.EIO, "Input/output error")
    monkeypatch.setattr(ThreadStore, "_write_atomic", broken)
    response = adapter.post(adapter.body("hello", thread="eio", run="run-eio"))
    assert response.status_code == 503, response.text
    assert response.json()["error"]["code"] == "STATE_UNAVAILABLE"
    monkeypatch.undo()
    assert not adapter.app.store.run_lease_is_held("eio")
    assert adapter.run(adapter.body("hello", thread="eio", run="run-eio"))[-1]["type"] == "RUN_FINISHED"


def _has_task(payload: bytes) -> bool:
    import json
    return bool(json.loads(payload.decode("utf-8"))["execution"].get("taskId"))


def test_task_binding_write_failure_fails_closed(adapter, demo, monkeypatch):
    calls = _fail_replace(monkeypatch, _has_task)
    sends_before = [m for m, _ in demo.runtime.requests_log].count("SendStreamingMessage")
    events = adapter.run(adapter.body("slow please", thread="bind"))
    final = events[-1]
    assert final["type"] == "RUN_ERROR" and final["code"] == "STATE_PERSISTENCE_FAILED"
    assert final["message"] == errors.MSG_STATE_PERSISTENCE_FAILED
    assert calls["failed"] >= 1
    # nothing recoverable announced: no session event (it would name a task the adapter never saved)
    assert not any(e["type"] == "CUSTOM" and e["name"] == "iac-code.session.v1" for e in events)
    log = demo.runtime.requests_log
    assert [m for m, _ in log].count("SendStreamingMessage") == sends_before + 1
    cancels = [task for method, task in log if method == "CancelTask"]
    assert len(cancels) == 1, log
    assert wait_for(lambda: run_threads() == [], 5)
    state = adapter.app.store.load("bind")
    assert state.active_run is None and state.execution.task_id is None and state.execution.pending == {}
    assert state.execution.execution_id in state.terminal_execution_ids
    assert _leftover_temp_files(adapter) == []
    # While the disk still refuses, the next request is a clean 503; once it is back, the thread works.
    busy = adapter.post(adapter.body("again", thread="bind", ros="inv-2"))
    assert busy.status_code == 200 and parse_sse(busy.content)[0][-1]["code"] == "STATE_PERSISTENCE_FAILED"
    monkeypatch.undo()
    assert adapter.run(adapter.body("again", thread="bind", ros="inv-3"))[-1]["type"] == "RUN_FINISHED"


def test_every_write_after_admission_fails(adapter, demo, monkeypatch):
    """The disk dies right after admission: even the release is lost, yet the thread recovers afterwards."""
    admitted = {"done": False}
    real = files_module.replace_with_retries

    def replace(source: str, target: str) -> None:
        if admitted["done"]:
            raise OSError(errno.EROFS, "Read-only file system")
        admitted["done"] = True
        real(source, target)

    monkeypatch.setattr(files_module, "replace_with_retries", replace)
    events = adapter.run(adapter.body("hello", thread="dead-disk"))
    assert events[-1]["type"] == "RUN_ERROR" and events[-1]["code"] == "STATE_PERSISTENCE_FAILED"
    assert wait_for(lambda: run_threads() == [] and adapter.app.manager.active_count() == 0, 5)
    assert any(method == "CancelTask" for method, _ in demo.runtime.requests_log)
    stuck = adapter.app.store.load("dead-disk")
    assert stuck.active_run is not None        # the release could not be written ...
    assert not adapter.app.store.run_lease_is_held("dead-disk")   # ... but the lease is free
    refused = adapter.post(adapter.body("during outage", thread="dead-disk", ros="inv-2"))
    assert refused.status_code == 503 and refused.json()["error"]["code"] == "STATE_UNAVAILABLE"
    monkeypatch.undo()
    after = adapter.run(adapter.body("after outage", thread="dead-disk", ros="inv-3"))
    assert after[-1]["type"] == "RUN_FINISHED"


def test_interrupt_commit_failure_on_real_disk_error(adapter, demo, monkeypatch):
    def pending_in(payload: bytes) -> bool:
        import json
        return bool(json.loads(payload.decode("utf-8"))["execution"].get("pending"))
    _fail_replace(monkeypatch, pending_in)
    events = adapter.run(adapter.body("please write a file", thread="commit"))
    assert events[-1]["type"] == "RUN_ERROR" and events[-1]["code"] == "STATE_PERSISTENCE_FAILED"
    assert not any(e["type"] == "RUN_FINISHED" for e in events)
    task_id = adapter.app.store.load("commit").execution.task_id
    assert ("CancelTask", task_id) in demo.runtime.requests_log
    assert demo.runtime.tool_executions == []
    monkeypatch.undo()
    state = adapter.app.store.load("commit")
    assert state.execution.pending == {} and state.active_run is None
    assert adapter.run(adapter.body("next", thread="commit", ros="inv-2"))[-1]["type"] == "RUN_FINISHED"


# ---- a real full / read-only file system (tmpfs; needs mount privileges) -------------------------------------
@pytest.fixture
def tiny_fs(tmp_path):
    mount_point = tmp_path / "tinyfs"
    mount_point.mkdir()
    # 2 MiB: room for the state journal's first preallocated segments (2 x 256 KiB) and a run; then filled.
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount_point)],
                            capture_output=True, text=True)
    if result.returncode != 0:
        pytest.skip("cannot mount a tmpfs here: %s" % result.stderr.strip())
    try:
        yield str(mount_point)
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], capture_output=True)


def _fill(directory: str) -> str:
    filler = os.path.join(directory, "filler")
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC
    finally:
        os.close(fd)
    return filler


def test_full_disk_then_recovery(adapter_factory, tiny_fs):
    adapter = adapter_factory(state_dir=os.path.join(tiny_fs, "state"))
    assert adapter.run(adapter.body("hello", thread="full"))[-1]["type"] == "RUN_FINISHED"
    path = adapter.app.store.path_for("full")
    with open(path, "rb") as handle:
        before = handle.read()
    filler = _fill(tiny_fs)
    for thread in ("full", "full-new"):
        response = adapter.post(adapter.body("hello", thread=thread))
        assert response.status_code == 503, response.text
        assert response.json()["error"]["code"] == "STATE_UNAVAILABLE"
    with open(path, "rb") as handle:
        assert handle.read() == before
    assert _leftover_temp_files(adapter) == []
    os.unlink(filler)
    assert adapter.run(adapter.body("hello", thread="full"))[-1]["type"] == "RUN_FINISHED"
    assert adapter.run(adapter.body("hello", thread="full-new"))[-1]["type"] == "RUN_FINISHED"


def test_read_only_state_dir_then_recovery(adapter_factory, tiny_fs):
    adapter = adapter_factory(state_dir=os.path.join(tiny_fs, "state"))
    assert adapter.run(adapter.body("hello", thread="ro"))[-1]["type"] == "RUN_FINISHED"
    # The store's journal keeps its files open for writing (Linux refuses a read-only remount then, as it
    # does while a run holds its lease file); closing it checkpoints and removes it until the next write.
    adapter.app.store.close()
    subprocess.run(["mount", "-o", "remount,ro", tiny_fs], check=True, capture_output=True)
    try:
        response = adapter.post(adapter.body("hello", thread="ro"))
        assert response.status_code == 503 and response.json()["error"]["code"] == "STATE_UNAVAILABLE"
        assert adapter.app.manager.active_count() == 0
    finally:
        subprocess.run(["mount", "-o", "remount,rw", tiny_fs], check=True, capture_output=True)
    assert adapter.run(adapter.body("hello", thread="ro"))[-1]["type"] == "RUN_FINISHED"


@pytest.mark.slow
def test_disk_fills_up_during_a_run(adapter_factory, tiny_fs, demo):
    """(A read-only remount is refused while a run holds its lease file open for writing, so the mid-run
    failure is a full disk.)"""
    adapter = adapter_factory(state_dir=os.path.join(tiny_fs, "state"))
    response = adapter.post(adapter.body("sleep 1.5", thread="full-mid"), stream=True)
    reader = SSEReader(response)
    # the task binding is durable before the disk fills
    assert wait_for(lambda: adapter.app.store.load("full-mid").execution.task_id is not None, 5)
    filler = _fill(tiny_fs)
    events = reader.until("RUN_FINISHED", limit=30)
    check_stream(reader.raw)
    reader.close()
    assert events[-1]["type"] == "RUN_FINISHED"     # the release write is best-effort only
    assert wait_for(lambda: adapter.app.manager.active_count() == 0 and run_threads() == [], 5)
    assert adapter.app.store.load("full-mid").active_run is not None
    blocked = adapter.post(adapter.body("next", thread="full-mid", ros="inv-2"))
    assert blocked.status_code == 503 and blocked.json()["error"]["code"] == "STATE_UNAVAILABLE"
    os.unlink(filler)
    # the stale activeRun (lease free) is recognised as an orphan and the next turn is admitted
    assert adapter.run(adapter.body("next", thread="full-mid", ros="inv-3"))[-1]["type"] == "RUN_FINISHED"

"""The benchmark must keep working as the package changes: a tiny end-to-end run plus its parsing rules.

The figures themselves are not asserted (machines are noisy; the targets are read from the table), but
every section must produce a row, every stream must complete without error, and the client-side rules
that turn bytes into figures (event boundaries, stamps, heartbeat lateness, the floor's frame split) are
checked on fixed inputs so a wrong figure cannot come from a parsing slip.
"""
import json
import os
import signal
import subprocess
import sys

import pytest

from tests import ROOT

TOOLS = os.path.join(ROOT, "tools")
sys.path.insert(0, TOOLS)

from toolkit import client as bench_client, floor as bench_floor, many as bench_many  # noqa: E402

ROWS = ("0 one tiny run, phase by phase", "  fsyncs file / dir before RUN_STARTED", "1 throughput, events/s", "2 latency p50 / p99 ms", "  added vs direct p50 / p99 ms",
        "3 time to RUN_STARTED ms", "  time to first TEXT_MESSAGE_CONTENT ms", "4 10 streams",
        "  heartbeat lateness max / p99 ms", "  peak RSS MB / peak threads", "  CPU while heartbeating",
        "5 start-up to 200 /health s", "  idle RSS MB / threads", "6 floor: in-process decode+encode",
        "7 RUN_STARTED ms, 50 threads in state dir", "7 RUN_STARTED ms, 200 threads in state dir",
        "  50 runs in a row: RSS before / after MB", "  one 10,000-event run: RSS before / peak / after")


def test_quick_bench_runs_every_section(tmp_path):
    out = tmp_path / "bench.json"
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    # Its own process group, so a timeout also ends the servers the bench started.
    proc = subprocess.Popen(
        [sys.executable, os.path.join(TOOLS, "bench.py"), "--quick", "--concurrency", "10", "--no-peer",
         "--reps", "1", "--deltas", "2000", "--json", str(out)],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        raw_out, raw_err = proc.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail("the quick bench took more than 90 s")
    stdout = raw_out.decode("utf-8", "replace")
    assert proc.returncode == 0, raw_err.decode("utf-8", "replace")[-3000:]
    for row in ROWS:
        assert row in stdout, "missing row %r in:\n%s" % (row, stdout)
    figures = json.loads(out.read_text())
    for path in ("direct", "relay", "adapter"):
        assert figures["throughput"][path]["errors"] == [], figures["throughput"][path]
        assert figures["throughput"][path]["events_per_s"] > 0
        assert figures["latency"][path]["errors"] == 0
    level = figures["concurrency"]["10"]["adapter"]
    assert (level["completed"], level["errors"]) == (10, 0), level
    # 2 s of silence with 0.5 s heartbeats: every stream must have seen some.
    assert level["streams_with_heartbeat"] == 10 and level["heartbeats"] >= 20, level
    assert figures["startup"]["adapter"]["startup_s"] > 0
    assert figures["floor"]["events_per_s"] > 0
    assert figures["breakdown"]["failures"] == 0
    assert all(c["errors"] == 0 for c in figures["growth"]["populated"].values()), figures["growth"]
    assert figures["growth"]["many_runs"]["errors"] == 0 and figures["growth"]["big_run"]["ok"], figures["growth"]


def test_event_boundaries_accept_lf_and_crlf():
    assert bench_client._complete_end(b"data: a\n\ndata: b") == len(b"data: a\n\n")
    assert bench_client._complete_end(b"data: a\r\n\r\ndata: b\r\n") == len(b"data: a\r\n\r\n")
    assert bench_client._complete_end(b"data: a\r\n") == -1


class _FakeResponse:
    def __init__(self, chunks):
        self._chunks = list(chunks)

    def read1(self, size):
        return self._chunks.pop(0) if self._chunks else b""


def test_stamps_are_counted_once_across_split_chunks():
    frame = lambda i, text: ('data: {"type":"%s","delta":"~%d@%d "}\n\n' % (text, i, 1000 + i)).encode()  # noqa: E731
    body = b'data: {"type":"RUN_STARTED"}\n\n' + frame(0, "T") + frame(1, "T") + frame(1, "AGG") + frame(2, "T")
    body += b": heartbeat\n\n" + b'data: {"type":"RUN_FINISHED"}\n\n'
    cut = body.index(b"~1@") + 2  # split inside a stamp: it must not be read half
    result = bench_client.StreamResult()
    bench_client._read_events(_FakeResponse([body[:cut], body[cut:]]), result, True, b'"RUN_FINISHED"', None)
    assert result.deltas == 3
    assert len(result.latencies_ns) == 3
    assert result.heartbeats == 1 and result.finished and not result.run_error
    assert result.t_run_started is not None and result.t_first_delta is not None


def test_heartbeat_lateness_is_the_worst_gap_past_the_interval():
    result = bench_client.StreamResult()
    second = 1_000_000_000
    result.marks = [(0, False), (int(0.5 * second), True), (int(1.2 * second), True), (int(1.3 * second), False)]
    assert result.heartbeat_lateness(0.5) == pytest.approx(0.2)
    result.marks = [(0, False), (second, False)]
    assert result.heartbeat_lateness(0.5) is None


def _chunked(*parts):
    return b"".join(b"%X\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


def test_many_streams_client_reads_chunked_responses_cut_anywhere():
    """The selector client sees the same events whatever the TCP segments look like."""
    events = [b'data: {"type":"RUN_STARTED"}\n\n', b": heartbeat\n\n", b'data: {"d":"~0@5 "}\n\n',
              b'data: {"type":"RUN_FINISHED"}\n\n']
    wire = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: text/event-stream\r\n\r\n"
    wire += _chunked(events[0], events[1] + events[2][:7], events[2][7:] + events[3])
    for cut in range(1, len(wire) - 2):   # the body is complete at the last chunk's "0\r\n"
        result = bench_client.StreamResult()
        reader = bench_client.EventReader(result, True, b'"RUN_FINISHED"', None)
        conn = bench_many.Conn(0, ("127.0.0.1", 9), b"", reader)
        try:
            assert not conn.received(wire[:cut], 1)
            assert conn.received(wire[cut:], 2), cut
        finally:
            conn.finish()
        assert result.ok and result.heartbeats == 1 and result.deltas == 1, (cut, vars(result))


def test_many_streams_client_reports_a_refusal_and_a_cut_stream():
    result = bench_client.StreamResult()
    conn = bench_many.Conn(0, ("127.0.0.1", 9), b"", bench_client.EventReader(result, False, b"X", None))
    assert conn.received(b'HTTP/1.1 429 Too Many\r\nContent-Length: 9\r\n\r\n{"e":"x"}', 1)
    conn.finish()
    assert not result.ok and result.error.startswith("HTTP 429")
    decoder = bench_many.ChunkedDecoder()
    assert decoder.feed(b"5\r\nhel") == b"hel" and not decoder.done


def test_floor_splits_frames_and_projects_each_one():
    raw = (b'data: {"result": {"task": {"id": "t"}}}\r\n\r\n'
           b'data: {"result": {"statusUpdate": {"status": {"message": {"messageId": "m", '
           b'"parts": [{"text": "hi"}]}}}}}\r\n\r\n: ping\r\n\r\n')
    frames = bench_floor.split_frames(raw)
    assert len(frames) == 2
    assert bench_floor.decode_encode(frames) == 2
    assert bench_floor.measure(raw, repeats=1)["frames"] == 2


def test_the_heartbeat_cost_bench_reports_every_figure():
    """``tools/bench.py --section heartbeats`` on a few streams: its lines come out, with the CPU of each thread
    group."""
    proc = subprocess.run([sys.executable, os.path.join(TOOLS, "bench.py"), "--section", "heartbeats", "--streams",
                           "10", "--seconds", "1.5"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert "10 streams, 0 busy thread(s)" in lines[0]
    assert lines[1].startswith("  heartbeats/s ") and "us per heartbeat" in lines[1]
    assert lines[3].startswith("  lateness p99 / max ms: ")
    by_thread = dict(item.rsplit(" ", 1) for item in lines[2].split(": ", 1)[1].split(", "))
    assert float(by_thread["stream workers"]) >= 0.0, lines[2]

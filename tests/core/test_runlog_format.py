"""The run log's byte format: records round-trip, and a torn or damaged tail is never read as an event."""
import json

import pytest

from iaccode_agui.runlog import encoding as logformat
from iaccode_agui.sse.channel import encode_agui_event
from iaccode_agui.state.keys import run_file_stem, thread_file_stem


def _log(count: int = 3) -> bytes:
    data = logformat.encode_start({"threadId": "t", "runId": "r", "executionId": "e"})
    for seq in range(count):
        data += logformat.encode_event(seq, "TEXT_MESSAGE_CONTENT", b"id: %d\ndata: {}\n\n" % seq)
    return data


def test_records_round_trip_in_order():
    data = _log(3) + logformat.encode_close({"outcome": "success"})
    start = logformat.check_magic(data)
    records, used = logformat.parse(data, start)
    assert used == len(data)
    assert [r.kind for r in records] == ["H", "E", "E", "E", "Z"]
    assert records[0].fields["executionId"] == "e"
    assert [r.seq for r in records[1:4]] == [0, 1, 2]
    assert records[2].frame == b"id: 1\ndata: {}\n\n"
    assert records[-1].fields == {"outcome": "success"}


def test_terminal_flag_follows_the_event_type():
    finished = logformat.parse(logformat.encode_event(7, "RUN_FINISHED", b"x"))[0][0]
    error = logformat.parse(logformat.encode_event(7, "RUN_ERROR", b"x"))[0][0]
    text = logformat.parse(logformat.encode_event(7, "TEXT_MESSAGE_END", b"x"))[0][0]
    assert finished.terminal and error.terminal and not text.terminal


def test_every_torn_tail_is_ignored():
    whole = _log(2)
    last = logformat.encode_event(2, "RUN_FINISHED", b"id: 2\ndata: {}\n\n")
    start = logformat.check_magic(whole)
    for cut in range(len(last)):
        records, used = logformat.parse(whole + last[:cut], start)
        assert [r.seq for r in records if r.kind == "E"] == [0, 1], cut
        assert used == len(whole), cut
    records, used = logformat.parse(whole + last, start)
    assert records[-1].seq == 2 and used == len(whole) + len(last)


@pytest.mark.parametrize("position", [0, 3, 4, 8, 9, 20])
def test_a_damaged_record_ends_parsing_before_it(position):
    whole = _log(1)
    damaged = bytearray(logformat.encode_event(1, "TEXT_MESSAGE_CONTENT", b"id: 1\ndata: {}\n\n"))
    damaged[position] ^= 0xFF
    start = logformat.check_magic(whole)
    records, used = logformat.parse(whole + bytes(damaged) + logformat.encode_event(2, "X", b"y"), start)
    assert [r.seq for r in records if r.kind == "E"] == [0]
    assert used == len(whole)


def test_magic_is_checked():
    assert logformat.check_magic(b"AGUI") is None
    with pytest.raises(logformat.LogFormatError):
        logformat.check_magic(b"NOTALOG1\n")
    with pytest.raises(logformat.LogFormatError):
        logformat.check_magic(b'{"threadId": 1}\n')


def test_event_json_reads_back_what_the_channel_encoded():
    event = {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "a\nb \u2028 c"}
    frame = encode_agui_event(dict(event), 5)
    decoded = logformat.event_json(frame)
    assert {key: decoded[key] for key in event} == event
    assert json.loads(frame.split(b"data: ", 1)[1]) == decoded


def test_run_stems_are_safe_distinct_and_bounded():
    seen = set()
    pairs = [("t", "r"), ("t@x", "r"), ("t", "x@r"), ("T", "r"), ("t", "R"), ("a/b", "../c"),
             ("x" * 150, "y" * 150), ("x" * 150, "y" * 151), ("t\x00", "r")]
    for thread_id, run_id in pairs:
        stem = run_file_stem(thread_id, run_id)
        assert "/" not in stem and "\x00" not in stem and len(stem) <= 240
        assert stem not in seen
        seen.add(stem)
    assert run_file_stem("thread-1", "run-1") == "thread-1@run-1"
    assert run_file_stem("T", "r") == thread_file_stem("T") + "@r"
    assert run_file_stem("x" * 150, "y" * 150).startswith("aguihash~run~")


def test_a_batch_encodes_to_the_records_of_its_events():
    # One delivery batch is encoded at once; its bytes must be exactly the events' records one by one.
    import random
    rng = random.Random(5)
    types = ["TEXT_MESSAGE_CONTENT", "RUN_FINISHED", "caf\u00e9", "x" * 300, "", "CUSTOM"]
    for _ in range(200):
        events = [(rng.randrange(2 ** 40), rng.choice(types),
                   bytes(rng.randrange(256) for _ in range(rng.randrange(300)))) for _ in range(rng.randrange(20))]
        parts, sizes = logformat.encode_events(events)
        records = [logformat.encode_event(*event) for event in events]
        assert b"".join(parts) == b"".join(records)
        assert sizes == [len(record) for record in records]
        parsed, _ = logformat.parse(b"".join(parts))
        assert [(r.seq, r.frame) for r in parsed] == [(seq, frame) for seq, _, frame in events]

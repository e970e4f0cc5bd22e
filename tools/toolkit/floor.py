"""The floor: the least work any A2A -> AG-UI adapter must do per event, measured in-process.

Decode each SSE frame's JSON, pick out the text delta, build the AG-UI event, encode it and frame it as
SSE.  No sockets, no threads, no validation: whatever an adapter spends beyond this per event is overhead
that tuning can attack; this part cannot go away (in pure Python with the stdlib ``json``).
"""
import json
import statistics
import time
from typing import Any, Dict, List


def split_frames(raw: bytes) -> List[bytes]:
    """The ``data:`` payloads of an SSE body (LF or CRLF framing), as bytes."""
    frames = []
    for block in raw.replace(b"\r\n", b"\n").split(b"\n\n"):
        data = [line[5:].lstrip(b" ") for line in block.split(b"\n") if line.startswith(b"data:")]
        if data:
            frames.append(b"\n".join(data))
    return frames


def _project(result: Dict[str, Any], run: Dict[str, str]) -> Dict[str, Any]:
    update = result.get("statusUpdate")
    if update is not None:
        message = update.get("status", {}).get("message")
        if message is not None and not update.get("metadata", {}).get("iac_code", {}).get("assistantFinal"):
            text = "".join(part.get("text", "") for part in message.get("parts", ()))
            return {"type": "TEXT_MESSAGE_CONTENT", "messageId": message.get("messageId"), "delta": text}
        return {"type": "CUSTOM", "name": "status", "value": update.get("status", {}).get("state")}
    return {"type": "RUN_STARTED", "threadId": run["thread"], "runId": run["run"]}


def decode_encode(frames: List[bytes]) -> int:
    """One pass over the stream; returns the number of AG-UI frames written."""
    run = {"thread": "bench-thread", "run": "bench-run"}
    out = []
    for seq, payload in enumerate(frames):
        body = json.loads(payload)
        event = _project(body.get("result") or {}, run)
        event["timestamp"] = int(time.time() * 1000)
        text = json.dumps(event, separators=(",", ":"), ensure_ascii=False)
        out.append(b"id: %d\ndata: %s\n\n" % (seq, text.encode("utf-8")))
    return len(out)


def one_pass(frames: List[bytes]) -> float:
    """Thread CPU seconds of one ``decode_encode`` pass.

    CPU time of this thread, not wall time: the server's cost is read as CPU time from /proc, and on a
    shared machine wall time also counts the moments another process had the core.
    """
    started = time.thread_time()
    decode_encode(frames)
    return time.thread_time() - started


def summary(timings: List[float], frames: int) -> Dict[str, float]:
    """Median events/s and µs/event of passes that took ``timings`` seconds, with their spread."""
    median = statistics.median(timings)
    return {"frames": float(frames), "seconds": median, "events_per_s": frames / median,
            "us_per_event": median / frames * 1e6, "us_min": min(timings) / frames * 1e6,
            "us_max": max(timings) / frames * 1e6, "passes": float(len(timings))}


def measure(raw: bytes, repeats: int = 3) -> Dict[str, float]:
    """``summary`` of ``repeats`` passes over the frames of ``raw``, one right after the other."""
    frames = split_frames(raw)
    return summary([one_pass(frames) for _ in range(max(1, repeats))], len(frames))

"""Growth: does the adapter's cost stay flat as its state and its history grow?

Three measurements, each on an adapter process of its own:

- ``populated``: time to ``RUN_STARTED`` for new threads when N threads already live in the state dir
  (their files are written directly, as earlier runs would have left them: a document and its two lock
  files).  One adapter and one state dir per population, the runs alternating between them.
- ``many_runs``: RSS after warm-up, after N tiny runs and a short rest: memory a long-lived adapter keeps.
- ``big_run``: RSS before, at the peak of, and after one run of N events, read to its end by the client.

The populations and sizes are parameters, so ``--quick`` keeps a short variant and ``--long`` the full one.
"""
import os
import statistics
import tempfile
import threading
import time
import uuid
from typing import Any, Callable, Dict, List, Optional

from . import client
from . import procs
from .procs import Service


def populate(state_dir: str, start: int, stop: int) -> float:
    """Write thread documents ``start``..``stop-1`` (plus their lock files); returns the seconds it took."""
    from iaccode_agui.web.inputs import canonical_digest
    from iaccode_agui.state.keys import thread_file_stem
    from iaccode_agui.state.model import ActiveRun, Execution, ThreadState

    threads = os.path.join(state_dir, "threads")
    os.makedirs(threads, mode=0o700, exist_ok=True)
    began = time.monotonic()
    template: Optional[ThreadState] = None
    for index in range(start, stop):
        thread_id = "grown-%07d" % index
        state = ThreadState(thread_id=thread_id, context_id="agui-%040x" % index, cwd="/tmp/grown", user_id=None,
                            session_id=str(uuid.UUID(int=index)),
                            execution=Execution(execution_id=str(uuid.UUID(int=index + 1)),
                                                ros_invocation_id="inv-%d" % index,
                                                task_id=str(uuid.UUID(int=index + 2))))
        state.run_digests["run-%d" % index] = canonical_digest({"run": index})
        state.mark_terminal(str(uuid.UUID(int=index + 3)))
        if template is None:
            template = state
            assert not isinstance(state.active_run, ActiveRun)
        stem = os.path.join(threads, thread_file_stem(thread_id))
        import json

        with open(stem + ".json", "w", encoding="utf-8") as handle:
            json.dump(state.to_document(), handle, indent=2, sort_keys=True)
            handle.write("\n")
        for suffix in (".lock", ".run"):
            os.close(os.open(stem + suffix, os.O_WRONLY | os.O_CREAT, 0o600))
    # Hundreds of thousands of new files are still being written back: without this, the first fsyncs of
    # the measurement wait for that writeback (one journal), and the figure is the disk's backlog.
    os.sync()
    return time.monotonic() - began


def _first_event_ms(service: Service, cwd: str) -> Optional[float]:
    result = client.post_stream(service.url, *client.agui_request("firehose 1", cwd))
    first = result.seconds_to(result.t_run_started)
    return first * 1000 if result.ok and first is not None else None


def populated(start_adapter: Callable[[str], Service], cwd: str, populations: List[int], runs: int,
              tmp: str) -> Dict[str, Any]:
    """Median ms from the POST to RUN_STARTED for new threads, one adapter (and state dir) per population.

    The adapters run side by side and the runs alternate between them (one per adapter per round, the
    order rotated each round), so a load that comes and goes on a shared machine falls on every
    population alike; measured one population after the other, the spread mostly showed the load.
    """
    services: Dict[int, Service] = {}
    out: Dict[str, Any] = {}
    sizes = sorted(populations)
    try:
        for size in sizes:
            state_dir = tempfile.mkdtemp(prefix="state-grown-%d-" % size, dir=tmp)
            write_s = populate(state_dir, 0, size)
            services[size] = start_adapter(state_dir)
            out[str(size)] = {"populate_s": write_s, "startup_s": services[size].startup_seconds}
        for size in sizes:                      # two warm-up runs each
            for _ in range(2):
                _first_event_ms(services[size], cwd)
        seconds: Dict[int, List[float]] = {size: [] for size in sizes}
        errors = dict.fromkeys(sizes, 0)
        for round_no in range(runs):
            shift = round_no % len(sizes)
            for size in sizes[shift:] + sizes[:shift]:
                ms = _first_event_ms(services[size], cwd)
                if ms is None:
                    errors[size] += 1
                else:
                    seconds[size].append(ms)
    finally:
        for service in services.values():
            service.stop()
    for size in sizes:
        got = sorted(seconds[size])
        out[str(size)].update({"run_started_ms": statistics.median(got) if got else None,
                               "p90_ms": got[int(0.9 * (len(got) - 1))] if got else None,
                               "runs": len(got), "errors": errors[size], "interleaved": True})
    return out


def many_runs(service: Service, cwd: str, count: int, lanes: int = 4, rest: float = 2.0) -> Dict[str, Any]:
    """``count`` tiny runs, ``lanes`` at a time (each lane one after the other); RSS before and after."""
    for _ in range(20):
        client.post_stream(service.url, *client.agui_request("firehose 1", cwd))
    time.sleep(rest)
    before = procs.rss_mb(service.pid)
    errors: List[str] = []
    left = [count]
    lock = threading.Lock()

    def lane() -> None:
        while True:
            with lock:
                if left[0] <= 0:
                    return
                left[0] -= 1
            result = client.post_stream(service.url, *client.agui_request("firehose 1", cwd))
            if not result.ok:
                with lock:
                    errors.append(result.error or "not finished")

    began = time.monotonic()
    with procs.Sampler(service.pid, interval=0.2) as sampler:
        workers = [threading.Thread(target=lane, daemon=True) for _ in range(lanes)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    seconds = time.monotonic() - began
    time.sleep(rest)
    after = procs.rss_mb(service.pid)
    return {"runs": count, "lanes": lanes, "errors": len(errors), "error_samples": sorted(set(errors))[:2],
            "seconds": seconds, "runs_per_s": count / seconds if seconds else None, "rss_before_mb": before,
            "rss_peak_mb": sampler.peak_rss_kb / 1024.0, "rss_after_mb": after, "growth_mb": after - before}


def big_run(service: Service, cwd: str, events: int, rest: float = 2.0) -> Dict[str, Any]:
    """One run of ``events`` text deltas read to its end; RSS before, at its peak and ``rest`` s after."""
    for _ in range(5):
        client.post_stream(service.url, *client.agui_request("firehose 200", cwd))
    time.sleep(rest)
    before = procs.rss_mb(service.pid)
    began = time.monotonic()
    with procs.Sampler(service.pid, interval=0.1) as sampler:
        result = client.post_stream(service.url, *client.agui_request("firehose %d" % events, cwd), timeout=600)
    seconds = time.monotonic() - began
    time.sleep(rest)
    after = procs.rss_mb(service.pid)
    return {"events": events, "received": result.deltas, "ok": result.ok and result.deltas == events,
            "error": result.error, "seconds": seconds, "events_per_s": events / seconds if seconds else None,
            "rss_before_mb": before, "rss_peak_mb": sampler.peak_rss_kb / 1024.0, "rss_after_mb": after,
            "growth_mb": after - before}

"""Does the number of threads in the state directory change what an admission costs, and where?

Three state directories are filled (100, 10,000 and 100,000 threads by default, written as earlier runs
would have left them: ``growth.populate``), and one in-process adapter serves each of them.  Runs
then alternate between the three (one run on each per round, the order rotated every round), so a load
that comes and goes on a shared machine falls on all three alike; a sequential measurement (one
population after the other) mostly measures how the load changed in between.  Each run is traced phase
by phase (``breakdown``'s tracer, plus the admission's own file operations), and a file-system
probe times the bare operations an admission performs in each ``threads`` directory: create a lock file,
look up a missing name, write and rename a file over another, all interleaved the same way.

    python tools/bench.py --section populated [--populations 100,10000,100000] [--runs 30] [--json out.json]
"""
import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
import uuid
from typing import Any, Dict, List

from . import breakdown
from . import client
from . import growth
from . import phases
from . import procs

PHASES = ("admission transaction", "  lock files (open + flock)", "  state read", "  state file write",
          "    journal append + group sync", "journal fdatasync", "    temp file + rename", "run log create",
          "worker thread start", "RUN_STARTED at the client")


def _install_extra(tracer: breakdown.Tracer) -> None:
    from iaccode_agui.runlog.logfiles import RunLogStore
    from iaccode_agui.state import store as store_module

    tracer.wrap(store_module.ThreadStore, "lock_file", "  lock files (open + flock)")
    tracer.wrap(store_module.ThreadStore, "_read", "  state read")
    tracer.wrap(store_module, "replace_file", "    temp file + rename")
    tracer.wrap(RunLogStore, "create", "run log create")


def fs_probe(threads_dir: str) -> Dict[str, float]:
    """Microseconds of the bare file operations of an admission in ``threads_dir``, one of each."""
    name = os.path.join(threads_dir, "probe-%s" % uuid.uuid4().hex)
    out: Dict[str, float] = {}
    clock = time.perf_counter_ns
    started = clock()
    os.lstat(threads_dir)
    try:
        os.lstat(name + ".json")
    except FileNotFoundError:
        pass
    out["lookup of a missing name"] = (clock() - started) / 1e3
    started = clock()
    os.close(os.open(name + ".lock", os.O_RDWR | os.O_CREAT, 0o600))
    out["create an empty file"] = (clock() - started) / 1e3
    started = clock()
    fd = os.open(name + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.write(fd, b"{}" * 600)
    os.close(fd)
    os.rename(name + ".tmp", name + ".json")
    out["write + rename"] = (clock() - started) / 1e3
    for suffix in (".lock", ".json"):
        os.unlink(name + suffix)
    return out


def _median_table(samples: Dict[int, List[Dict[str, float]]], labels: Any) -> Dict[str, Dict[str, Any]]:
    table: Dict[str, Dict[str, Any]] = {}
    for size, runs in samples.items():
        row: Dict[str, Any] = {}
        for label in labels:
            values = [run[label] for run in runs if label in run]
            row[label] = statistics.median(values) if values else None
        row["runs"] = len(runs)
        table[str(size)] = row
    return table


def measure(populations: List[int], runs: int, tmp: str) -> Dict[str, Any]:
    from iaccode_agui.web.app import AguiApp
    from iaccode_agui.config import Settings
    from iaccode_agui.server.serving import ServerThread

    token = "populated-" + uuid.uuid4().hex[:8]
    runtime = procs.start_runtime(token, threads=16, log_dir=tmp)
    cwd = phases.workspace()
    served: Dict[int, Any] = {}
    tracer = breakdown.Tracer()
    try:
        written = {}
        for size in populations:
            state = os.path.join(tmp, "state-%d" % size)
            written[size] = growth.populate(state, 0, size)
            settings = Settings(a2a_url=runtime.url, a2a_token=token, state_dir=state,
                                allowed_cwds=(os.path.dirname(cwd),))
            app = AguiApp(settings)
            served[size] = (app, ServerThread(app, "127.0.0.1", 0, threads=8))
        breakdown._install(tracer)
        _install_extra(tracer)
        timings = {size: [] for size in populations}     # type: Dict[int, List[Dict[str, float]]]
        probes = {size: [] for size in populations}      # type: Dict[int, List[Dict[str, float]]]
        failures = 0
        load_start = os.getloadavg()[0]
        for round_no in range(runs + 1):
            order = populations[round_no % len(populations):] + populations[:round_no % len(populations)]
            for size in order:
                app, server = served[size]
                del tracer.spans[:]
                body, headers = client.agui_request("firehose 1", cwd)
                arrivals = breakdown._post(server.url, body, headers)
                time.sleep(0.02)    # the end-of-run writes stay out of the next run's spans
                failures += 0 if arrivals.finished else 1
                timeline = breakdown._timeline(list(tracer.spans), arrivals)
                if round_no:        # round 0 warms each adapter (agent card, connections)
                    timings[size].append({k: (v[0] if k.endswith("at the client") else v[1])
                                          for k, v in timeline.items()})
                    probes[size].append(fs_probe(os.path.join(app.settings.state_dir, "threads")))
        return {"populations": populations, "runs": runs, "failures": failures, "written_s": written,
                "load": [load_start, os.getloadavg()[0]],
                "phases_ms": _median_table(timings, PHASES),
                "fs_us": _median_table(probes, ("lookup of a missing name", "create an empty file",
                                                "write + rename"))}
    finally:
        tracer.undo()
        for app, server in served.values():
            server.stop()
            app.close(2.0)
        runtime.stop()
        shutil.rmtree(cwd, ignore_errors=True)


def render(figures: Dict[str, Any]) -> str:
    sizes = [str(size) for size in figures["populations"]]
    lines = ["threads in the state dir, interleaved, median of %d runs each (load %.1f -> %.1f, %d failed)" % (
        figures["runs"], figures["load"][0], figures["load"][1], figures["failures"])]

    def table(title: str, rows: Dict[str, Dict[str, Any]], labels: Any, unit: str, fmt: str) -> None:
        lines.append("%-40s" % (title + " (" + unit + ")") + "".join("%12s" % "{:,}".format(int(s)) for s in sizes)
                     + "   spread")
        for label in labels:
            values = [rows[s].get(label) for s in sizes]
            known = [v for v in values if v]
            mid = sorted(known)[len(known) // 2] if known else None
            spread = max(abs(v - mid) / mid for v in known) * 100 if mid else None
            lines.append("%-40s" % label + "".join("%12s" % (fmt % v if v is not None else "-") for v in values)
                         + ("   %3.0f%%" % spread if spread is not None else ""))

    table("phase", figures["phases_ms"], PHASES, "ms", "%.3f")
    table("bare file operation", figures["fs_us"], ("lookup of a missing name", "create an empty file",
                                                   "write + rename"), "us", "%.1f")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python tools/bench.py --section populated", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--populations", default="100,10000,100000")
    parser.add_argument("--runs", type=int, default=30, help="runs per population (default 30)")
    parser.add_argument("--json", help="also write the figures to this JSON file")
    return parser


def main(argv: Any = None) -> int:
    args = build_parser().parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="iaccode-populated-")
    try:
        figures = measure(sorted(int(p) for p in args.populations.split(",")), args.runs, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(render(figures))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(figures, handle, indent=2)
    return 0

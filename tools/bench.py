#!/usr/bin/env python3
"""Benchmark of the AG-UI adapter against its floor (direct A2A, a raw byte relay) and its peer.

One command, everything on loopback, every server in its own process (so its CPU and RSS are its own):

    python tools/bench.py [--quick] [--concurrency 100,500,1000] [--peer CMD|auto] [--json out.json]

Prints one table of figures and ratios; the performance targets are checked by reading it (the ``check``
column), not by timed tests, because machines here are noisy.  Figures are medians over ``--reps`` runs.

``--section NAME [its options]`` runs one of the focused measurements instead of the table (their options
are listed below):

    python tools/bench.py --section heartbeats --streams 1000
"""
import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
import time
import uuid
from importlib import import_module
from typing import Any, Dict, List, Optional, Tuple

from toolkit import floor as bench_floor, phases, procs
from toolkit.report import render


PACE = "pace 20 5"      # 20 stamped deltas 5 ms apart, after the run has settled (toolkit/servers.py)
PACE_RUNS = 4           # runs per repetition (quick: 2)
DRAIN_SECONDS = 300     # how long a concurrency rep waits for the runtime to finish the previous one's streams
PEER_HEARTBEAT = 15.0   # iac-code 0.16 agui writes ': heartbeat' after 15 s of silence (not configurable)
# The adapter's heartbeat is short here (--heartbeat, 0.5 s) so a test of seconds sees many of them; its stall
# timeout would follow it down to 1 s (2 heartbeats), a pairing no user has, and at 1,000 streams on 2 cores
# that cuts streams whose server thread waited a second for the CPU.  So the adapter keeps the stall timeout
# the default 15 s heartbeat gives, unless --adapter-arg sets one.
STALL_TIMEOUT = 30.0
SECTIONS = ("phases", "streams", "concurrency", "startup", "floor", "growth")  # 0, 1-3, 4, 5, 6, 7
# Growth sizes: (state-dir populations, runs in a row, events in one run) for --quick, default, --long.
GROWTH = {"quick": ([50, 200], 50, 10000), "default": ([100, 1000, 10000], 1000, 200000),
          "long": ([100, 10000, 100000], 10000, 1000000)}
PHASE_RUNS = 15         # warm runs of the phase breakdown (quick: 5)
FIRST_RUNS = 6          # runs per repetition (quick: 3): 3 reps x 6 = 18 runs per path, the median is shown
# --section NAME: the module of toolkit/ that measures it (each has build_parser() and main(argv)).
FOCUSED = {"ab": "ab", "heartbeats": "heartbeats", "populated": "populated", "memory": "memory",
           "window": "window", "validation": "validation", "profile": "profiling", "instructions": "instructions"}


def _focused_help() -> str:
    """Every focused section's own help, so that one ``--help`` lists every option of the bench."""
    return "\n".join(import_module("toolkit." + module).build_parser().format_help()
                     for module in FOCUSED.values())


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    helping = argv is not None and bool({"-h", "--help"} & set(argv))
    parser = argparse.ArgumentParser(prog="python tools/bench.py", description=__doc__,
                                     epilog=_focused_help() if helping else None,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--section", choices=sorted(FOCUSED),
                        help="run this focused measurement instead of the table (options below)")
    parser.add_argument("--quick", action="store_true", help="small sizes for CI (5 000 deltas, 20,50 streams)")
    parser.add_argument("--long", action="store_true",
                        help="full growth sizes: 100/10,000/100,000 threads in the state dir, 10,000 runs in a row, "
                             "one 1,000,000-event run (several minutes and ~1 GB of disk)")
    parser.add_argument("--concurrency", help="comma-separated stream counts (default 100,500,1000; quick 20,50)")
    parser.add_argument("--deltas", type=int, help="firehose size (default 20000; quick 5000)")
    parser.add_argument("--reps", type=int, default=3, help="repetitions per figure, the median is shown (default 3; 1 only for smoke runs)")
    parser.add_argument("--heartbeat", type=float, default=0.5, help="adapter heartbeat interval (s)")
    parser.add_argument("--idle", type=float, default=2.0,
                        help="minimum silent seconds per concurrent stream (sleep N; more for large N, so "
                             "that all streams are open before the first one ends)")
    parser.add_argument("--peer", help="peer command with {port} and {a2a_url} placeholders (token and config "
                                       "dir go by environment), or 'auto' for the real iac-code 0.16 agui")
    parser.add_argument("--no-peer", action="store_true", help="ignore --peer (CI)")
    parser.add_argument("--json", help="also write every figure to this JSON file")
    parser.add_argument("--only", default=",".join(SECTIONS),
                        help="comma-separated subset of: %s (default all)" % ", ".join(SECTIONS))
    parser.add_argument("--adapter-arg", action="append", default=[],
                        help="extra flag for the adapter CLI (repeatable), e.g. to try a tuning")
    parser.add_argument("--no-run-log", action="store_true",
                        help="run the adapter without its durable run log (the log's cost is the difference)")
    args = parser.parse_args(argv)
    if args.no_run_log:
        args.adapter_arg = list(args.adapter_arg) + ["--run-log-max-mb", "0"]
    if not any(arg.startswith("--stall-timeout") for arg in args.adapter_arg):
        args.adapter_arg = list(args.adapter_arg) + ["--stall-timeout", "%g" % STALL_TIMEOUT]
    args.deltas = args.deltas or (5000 if args.quick else 20000)
    spec = args.concurrency or ("20,50" if args.quick else "100,500,1000")
    args.levels = [int(item) for item in spec.split(",") if item.strip()]
    args.reps = max(1, args.reps)
    args.only = {item.strip() for item in args.only.split(",") if item.strip()}
    unknown = args.only - set(SECTIONS)
    if unknown:
        parser.error("--only: unknown section(s) %s" % ", ".join(sorted(unknown)))
    if args.no_peer:
        args.peer = None
    return args


class Bench:
    """The services of one run and the figures they produce."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.token = "bench-" + uuid.uuid4().hex[:12]
        self.tmp = tempfile.mkdtemp(prefix="iaccode-bench-")
        self.cwd = phases.workspace()
        self.services: List[procs.Service] = []
        self.peer_cmd: Optional[str] = None
        self.figures: Dict[str, Any] = {"config": {
            "deltas": args.deltas, "reps": args.reps, "levels": args.levels, "heartbeat_s": args.heartbeat,
            "idle_s": args.idle, "cpus": os.cpu_count(), "python": sys.version.split()[0], "peer": None,
            "adapter_args": ["--heartbeat-interval", "%g" % args.heartbeat] + list(args.adapter_arg),
            "load_start": round(os.getloadavg()[0], 2)}}

    def _keep(self, service: procs.Service) -> procs.Service:
        self.services.append(service)
        return service

    def _adapter(self, threads: Optional[int] = None, heartbeat: Optional[float] = None) -> procs.Service:
        state = tempfile.mkdtemp(prefix="state-", dir=self.tmp)
        return procs.start_adapter(self.runtime, self.token, state, threads=threads,
                                   heartbeat=heartbeat if heartbeat is not None else self.args.heartbeat,
                                   extra=self.args.adapter_arg, log_dir=self.tmp)

    def _peer(self) -> procs.Service:
        assert self.peer_cmd is not None
        return procs.start_peer(self.peer_cmd, self.runtime, self.token,
                                tempfile.mkdtemp(prefix="peer-", dir=self.tmp), log_dir=self.tmp)

    def run(self) -> Dict[str, Any]:
        args = self.args
        top = max(args.levels) if args.levels else 0
        if args.peer:
            from toolkit import peer

            self.peer_cmd = peer.peer_command(args.peer)
            self.figures["config"]["peer"] = self.peer_cmd
        self.runtime = self._keep(procs.start_runtime(self.token, threads=max(96, top + 64), log_dir=self.tmp))
        say("runtime %s" % self.runtime.url)
        self._fresh_processes()
        relay = self._keep(procs.start_relay(self.runtime.url, threads=64, log_dir=self.tmp))
        adapter = self._keep(self._adapter(threads=max(64, top + 32)))
        peer = self._keep(self._peer()) if self.peer_cmd else None
        paths = phases.build_paths(self.runtime, relay, adapter, peer, self.token, self.cwd)
        floor_passes: List[float] = []
        if "streams" in args.only:
            self._streams(paths, floor_passes)
        self._concurrency(paths, args.levels if "concurrency" in args.only else [])
        if "floor" in args.only and not floor_passes:
            say("6. floor: in-process decode + encode")
            self.figures["floor"] = phases.floor(self.runtime, self.token, self.cwd, args.deltas, args.reps)
        if "growth" in args.only:
            self.figures["growth"] = self._growth()
        return self.figures

    def _fresh_processes(self) -> None:
        """The sections that trace or start their own adapters, before the shared ones are started."""
        args = self.args
        if "phases" in args.only:
            from toolkit import breakdown

            runs = 5 if args.quick else PHASE_RUNS
            say("0. one tiny run, phase by phase: 1 cold + %d warm runs of an in-process traced adapter" % runs)
            self.figures["breakdown"] = breakdown.measure(self.runtime.url, self.token, self.cwd, runs=runs)
        if "startup" in args.only:
            say("5. start-up and idle (fresh processes, default settings)")
            settle = (0.5, 1.0) if args.quick else (1.0, 2.0)
            self.figures["startup"] = {"adapter": phases.startup(lambda: self._adapter(heartbeat=15.0), args.reps,
                                                                 *settle)}
            if self.peer_cmd:
                self.figures["startup"]["peer"] = phases.startup(self._peer, args.reps, *settle)

    def _streams(self, paths: List[Any], floor_passes: List[float]) -> None:
        args = self.args
        between = None
        frames: List[Any] = []
        if "floor" in args.only:
            # The floor is measured in the same minutes as the adapter, a pass before and after each rep,
            # so that a noisy neighbour moves both alike.
            frames = phases.floor_frames(self.runtime, self.token, self.cwd, args.deltas)
            between = lambda: floor_passes.extend(bench_floor.one_pass(frames) for _ in range(2))  # noqa: E731
        say("1. throughput: firehose %d x %d per path" % (args.deltas, args.reps))
        self.figures["throughput"] = phases.throughput(paths, self.runtime, args.deltas, args.reps, between)
        if floor_passes:
            self.figures["floor"] = bench_floor.summary(floor_passes, len(frames))
            self.figures["floor"]["between_reps"] = True
        pace_runs, first_runs = (2, 3) if args.quick else (PACE_RUNS, FIRST_RUNS)
        say("2. added latency: %s x %d x %d per path" % (PACE, pace_runs, args.reps))
        self.figures["latency"] = phases.latency(paths, PACE, pace_runs, args.reps)
        say("3. first events: firehose 1 x %d x %d per path" % (first_runs, args.reps))
        self.figures["first"] = phases.latency(paths, "firehose 1", first_runs, args.reps)

    def _concurrency(self, paths: List[Any], levels: List[int]) -> None:
        args = self.args
        self.figures["concurrency"] = {}
        targets = [p for p in paths if p.name != "relay"]
        for level in levels:
            idle = phases.idle_for(level, args.idle)
            for path in targets:
                say("4. concurrency: %d streams (sleep %g) x %d on %s" % (level, idle, args.reps, path.name))
                runs = []
                for _ in range(args.reps):
                    interval = {"adapter": args.heartbeat, "peer": PEER_HEARTBEAT}.get(path.name)
                    left = procs.wait_drained(self.runtime, DRAIN_SECONDS)
                    if left:
                        say("   the runtime still runs %d requests after %d s" % (left, DRAIN_SECONDS))
                    runs.append(phases.concurrency(path, self.cwd, level, idle, interval))
                    runs[-1]["runtime_busy_at_start"] = left
                    death = self._revive_if_dead(path)
                    if death:
                        runs[-1]["crash"] = death
                        break  # the figures of a crashed process are not worth repeating
                self.figures["concurrency"].setdefault(str(level), {})[path.name] = phases.merge_concurrency(runs)

    def _growth(self) -> Dict[str, Any]:
        from toolkit import growth

        populations, runs, events = GROWTH["quick" if self.args.quick else "long" if self.args.long else "default"]
        say("7. growth: RUN_STARTED with %s threads in the state dir" % "/".join(map(str, populations)))
        start = lambda state: procs.start_adapter(self.runtime, self.token, state, heartbeat=15.0,  # noqa: E731
                                                  extra=self.args.adapter_arg, log_dir=self.tmp)
        quick = self.args.quick
        out: Dict[str, Any] = {"populated": growth.populated(start, self.cwd, populations, 3 if quick else 15,
                                                             self.tmp)}
        service = self._keep(self._adapter(heartbeat=15.0))
        say("7. growth: %d runs in a row, then one %d-event run" % (runs, events))
        rest = 0.5 if quick else 3.0
        out["many_runs"] = growth.many_runs(service, self.cwd, runs, rest=rest)
        out["big_run"] = growth.big_run(service, self.cwd, events, rest=rest)
        return out

    def _revive_if_dead(self, path: "phases.Path") -> Optional[str]:
        """A server that crashed under load is itself a finding: keep its last words, start a new one."""
        service = path.service
        if service is None or service.proc.poll() is None:
            return None
        tail = service.log_errors() or service.log_tail(12)
        lines = [line for line in tail.splitlines() if line.strip()]
        last = [line for line in lines if not line.startswith(" ") and "Traceback" not in line][:1] or lines[-1:] or ["?"]
        say("%s exited with %s during the concurrency test; last log lines:\n%s"
            % (path.name, service.proc.returncode, tail))
        top = max(self.args.levels)
        if path.name == "adapter":
            fresh = self._adapter(threads=max(64, top + 32))
        elif path.name == "peer":
            fresh = self._peer()
        else:
            raise RuntimeError("the %s process died; cannot go on" % path.name)
        self.services.append(fresh)
        path.service, path.url = fresh, fresh.url
        return "%s process exited (%s): %s" % (path.name, service.proc.returncode, last[0].strip()[:120])

    def close(self) -> None:
        for service in reversed(self.services):
            try:
                service.stop()
            except Exception as exc:  # keep stopping the others
                say("could not stop %s: %s" % (service.name, exc))
        shutil.rmtree(self.tmp, ignore_errors=True)
        shutil.rmtree(self.cwd, ignore_errors=True)


def say(message: str) -> None:
    sys.stderr.write("[bench %s] %s\n" % (time.strftime("%H:%M:%S"), message))
    sys.stderr.flush()


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)  # unwinds through Bench.close(), so no server outlives the bench


def _focused(argv: List[str]) -> Optional[Tuple[Any, List[str]]]:
    """The module of the focused section ``--section`` names and the rest of the arguments (its own)."""
    for index, arg in enumerate(argv):
        name = argv[index + 1] if arg == "--section" and index + 1 < len(argv) else arg[len("--section="):]
        if (arg == "--section" or arg.startswith("--section=")) and name in FOCUSED:
            rest = argv[:index] + argv[index + (2 if arg == "--section" else 1):]
            return import_module("toolkit." + FOCUSED[name]), rest
    return None


def main(argv: Optional[List[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    focused = _focused(argv)
    if focused is not None:
        module, rest = focused
        return int(module.main(rest))
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    bench = Bench(args)
    started = time.monotonic()
    try:
        figures = bench.run()
    finally:
        bench.close()
    figures["config"]["wall_s"] = round(time.monotonic() - started, 1)
    figures["config"]["load_end"] = round(os.getloadavg()[0], 2)
    print(render(figures))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(figures, handle, indent=2, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Two checkouts of the adapter and the peer, one tiny run of each in turn: first byte and first text.

Row 3 of ``bench.py`` measures one adapter per bench run, so on a shared machine a before/after pair of
bench runs mostly compares two moments of the machine's load.  Here both adapters (this checkout and
``--base``, any older checkout of the repository) and the peer run side by side on one runtime, and the
rounds alternate between them, so the load hits all three alike::

    python tools/bench.py --section ab --base /path/to/old/checkout [--rounds 40] [--peer auto|CMD|none]

Prints medians over the rounds (time to ``RUN_STARTED`` and to the first ``TEXT_MESSAGE_CONTENT`` from the
POST, as row 3 measures them) and the ratios between the three.  Figures only; nothing is asserted.
"""
import argparse
import os
import statistics
import tempfile
from typing import Dict, List, Optional

from . import ROOT, client
from . import peer as bench_peer
from . import phases as bench_phases
from . import procs

TOKEN = "bench-ab"


def _adapter(name: str, root: str, runtime: procs.Service) -> procs.Service:
    port = procs.free_port()
    state = tempfile.mkdtemp(prefix="bench-ab-%s-" % name)
    argv = procs.python_argv("-m", "iaccode_agui", "--a2a-url", runtime.url, "--a2a-token", TOKEN,
                             "--port", str(port), "--state-dir", state, "--heartbeat-interval", "15")
    env = procs.child_env({"IAC_CODE_CONFIG_DIR": state})
    env["PYTHONPATH"] = os.path.abspath(root)          # that checkout's package, not this one's
    return procs.Service(name, argv, "http://127.0.0.1:%d/" % port, env=env)


def measure(services: Dict[str, procs.Service], rounds: int, text: str = "firehose 1") -> Dict[str, Dict[str, float]]:
    cwd = bench_phases.workspace()
    samples: Dict[str, List[List[float]]] = {name: [[], [], []] for name in services}
    for service in services.values():               # warm-up: imports, pools, caches
        for _ in range(3):
            client.post_stream(service.url, *client.agui_request(text, cwd))
    for number in range(rounds):
        # The order rotates round by round: a run right after another one's end (its closing writes, syncs
        # and connects) is slower, and a fixed order would charge that to whoever always comes second.
        order = list(services.items())
        shift = number % len(order)
        for name, service in order[shift:] + order[:shift]:
            cpu = service.cpu()
            result = client.post_stream(service.url, *client.agui_request(text, cwd))
            if result.finished and not result.error and result.t_first_delta:
                samples[name][0].append((result.seconds_to(result.t_run_started) or 0) * 1000)
                samples[name][1].append((result.seconds_to(result.t_first_delta) or 0) * 1000)
                samples[name][2].append((service.cpu() - cpu) * 1000)
    return {name: {"run_started_ms": statistics.median(s[0]), "first_text_ms": statistics.median(s[1]),
                   "cpu_ms_per_run": sum(s[2]) / len(s[2]), "runs": len(s[0])}
            for name, s in samples.items() if s[0]}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python tools/bench.py --section ab", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", required=True, help="another checkout of this repository (the 'before')")
    parser.add_argument("--rounds", type=int, default=40, help="runs of each (default 40)")
    parser.add_argument("--peer", default="auto", help="'auto' (the cached iac-code 0.16 agui), a command, or 'none'")
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    runtime = procs.start_runtime(TOKEN, threads=64)
    services: Dict[str, procs.Service] = {}
    try:
        services["base"] = _adapter("base", args.base, runtime)
        services["this"] = _adapter("this", ROOT, runtime)
        if args.peer != "none":
            services["peer"] = procs.start_peer(bench_peer.peer_command(args.peer), runtime, TOKEN,
                                                tempfile.mkdtemp(prefix="bench-ab-peer-"))
        load = os.getloadavg()[0]
        figures = measure(services, args.rounds)
        print("load average %.2f at the start, %.2f at the end; %d rounds, one run of each in turn, the order rotating"
              % (load, os.getloadavg()[0], args.rounds))
        for name, f in figures.items():
            print("%-5s RUN_STARTED %7.2f ms   first TEXT %7.2f ms   server CPU %5.2f ms/run   (%d runs)"
                  % (name, f["run_started_ms"], f["first_text_ms"], f["cpu_ms_per_run"], f["runs"]))
        pairs = [("this", "base")] + ([("base", "peer"), ("this", "peer")] if "peer" in figures else [])
        for top, bottom in pairs:
            if top in figures and bottom in figures:
                print("%s/%s: RUN_STARTED %.2fx, first TEXT %.2fx" % (
                    top, bottom, figures[top]["run_started_ms"] / figures[bottom]["run_started_ms"],
                    figures[top]["first_text_ms"] / figures[bottom]["first_text_ms"]))
    finally:
        for service in services.values():
            service.stop()
        runtime.stop()
    return 0

"""Instructions per event of the whole adapter process and of the floor, counted by valgrind.

    python tools/bench.py --section instructions [--deltas 20000] [--tree DIR]

The bench's CPU row reads the adapter's CPU time from /proc while the runtime and the client share the
same two cores, and sets it against the floor's CPU time measured alone between the reps; on a shared
machine both move by tens of percent from run to run.  Instruction counts do not move with the load: the
adapter runs under ``valgrind --tool=callgrind`` (its own process, every thread: HTTP in and out, the
run's thread, the run log, the timer) with counting switched on for one firehose only, and the floor's
``decode_encode`` pass over the same runtime's frames is counted the same way.  What they leave out is the
kernel's side (system calls, copies into sockets and files), which the /proc figure includes.  This is
an additional figure, not a replacement: the target stays the CPU time ratio.

``--tree`` runs the adapter from another checkout (for a before/after pair in the same minutes).
"""
import argparse
import os
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
import time
from typing import List, Optional

from . import ROOT, client
from . import phases
from . import procs

_FLOOR_PASS = """
import pickle, sys
sys.path.insert(0, %r)
from toolkit import floor as bench_floor
frames = pickle.load(open(%r, "rb"))
for _ in range(int(sys.argv[1])):
    bench_floor.decode_encode(frames)
"""


def _collected(out_file: str) -> int:
    """Total instructions of a callgrind output file."""
    with open(out_file, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            found = re.match(r"(?:summary|totals):\s*(\d+)", line)
            if found and int(found.group(1)):
                return int(found.group(1))
    return 0


def _callgrind(out_file: str, *argv: str, instr_at_start: bool = True) -> List[str]:
    return ["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out_file,
            "--instr-atstart=" + ("yes" if instr_at_start else "no"), *argv]


def floor_instructions(frames: List[bytes], tmp: str) -> float:
    """Instructions per frame of one floor pass: three passes minus one, so start-up cancels out."""
    data = os.path.join(tmp, "frames.pkl")
    with open(data, "wb") as handle:
        pickle.dump(frames, handle)
    script = os.path.join(tmp, "floor_pass.py")
    with open(script, "w", encoding="utf-8") as handle:
        handle.write(_FLOOR_PASS % (procs.TOOLS, data))
    totals = []
    for passes in (1, 3):
        out = os.path.join(tmp, "floor-%d.out" % passes)
        subprocess.run(_callgrind(out, sys.executable, script, str(passes)), check=True, capture_output=True)
        totals.append(_collected(out))
    return (totals[1] - totals[0]) / 2.0 / len(frames)


def adapter_instructions(runtime: procs.Service, token: str, cwd: str, deltas: int, tree: str, tmp: str) -> float:
    """Instructions per delta of an adapter process over one firehose (warm: two small runs first)."""
    state = tempfile.mkdtemp(prefix="state-", dir=tmp)
    out = os.path.join(tmp, "adapter.out")
    port = procs.free_port()
    argv = _callgrind(out, sys.executable, "-m", "iaccode_agui", "--a2a-url", runtime.url, "--a2a-token", token,
                      "--port", str(port), "--state-dir", state, "--heartbeat-interval", "0.5",
                      "--stall-timeout", "60", "--threads", "16", instr_at_start=False)
    root, procs.ROOT = procs.ROOT, tree      # the adapter's import path and working directory
    try:
        service = procs.Service("adapter", argv, "http://127.0.0.1:%d/" % port,
                                env=procs.child_env({"IAC_CODE_CONFIG_DIR": state}), log_dir=tmp, timeout=600)
    finally:
        procs.ROOT = root
    try:
        for _ in range(2):
            client.post_stream(service.url, *client.agui_request("firehose 2000", cwd),
                               finished_marker=b'"RUN_FINISHED"')
        subprocess.run(["callgrind_control", "-i", "on", str(service.pid)], check=True, capture_output=True)
        result = client.post_stream(service.url, *client.agui_request("firehose %d" % deltas, cwd),
                                    finished_marker=b'"RUN_FINISHED"')
        time.sleep(0.5)
        subprocess.run(["callgrind_control", "-i", "off", str(service.pid)], check=True, capture_output=True)
        if result.deltas != deltas or not result.finished:
            raise RuntimeError("counted run incomplete: %d/%d deltas, %s" % (result.deltas, deltas, result.error))
    finally:
        service.stop(120)
    return _collected(out) / deltas


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python tools/bench.py --section instructions", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--deltas", type=int, default=20000)
    parser.add_argument("--tree", default=ROOT, help="checkout the adapter runs from")
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    if not (shutil.which("valgrind") and shutil.which("callgrind_control")):
        print("valgrind (callgrind) is not installed: no instruction counts")
        return 0
    tmp = tempfile.mkdtemp(prefix="bench-instructions-")
    cwd = phases.workspace()
    token = "bench-instructions"
    runtime = procs.start_runtime(token, threads=16, log_dir=tmp)
    try:
        floor = floor_instructions(phases.floor_frames(runtime, token, cwd, args.deltas), tmp)
        adapter = adapter_instructions(runtime, token, cwd, args.deltas, os.path.abspath(args.tree), tmp)
    finally:
        runtime.stop()
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(cwd, ignore_errors=True)
    print("instructions per event (valgrind, user space), firehose %d, load average %.2f"
          % (args.deltas, os.getloadavg()[0]))
    print("  floor: in-process decode+encode   %8.0f" % floor)
    print("  adapter process (%s)  %8.0f   adapter/floor %.2f" % (args.tree, adapter, adapter / floor))
    return 0

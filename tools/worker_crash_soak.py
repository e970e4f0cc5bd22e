"""Worker crash soak: ``kill -9`` a gunicorn worker in the middle of streamed runs; clients re-attach.

Usage::

    python tools/worker_crash_soak.py [--kills 50] [--clients 4] [--seed N] [--json]

gunicorn runs the recipe (``iaccode_agui/deploy/gunicorn.conf.py``) with 2 workers on one state dir; the scripted
runtime runs in this process so its record of A2A calls and tool executions can be read.  Client threads
drive turns (a 60-delta ``slow`` answer, a ``write`` permission interrupt answered allow_once, an
auto-approved ``tool``, a greeting), each request on a fresh connection tagged with a probe id so the
killer knows which worker streams it.  The killer waits for a stream that has shown text and is not over,
SIGKILLs its worker, and waits for gunicorn to replace it.  A client whose stream breaks does what the
terminal client does: re-POST the same body with ``Last-Event-ID`` (up to 3 times).

Every run must end one of two ways: complete (exactly one ``RUN_FINISHED``/``RUN_ERROR`` seen by the client,
the assistant text equal to an uninterrupted run's, SSE ids without a gap), or with a documented error.
Across the soak: no announced interrupt lost, no answer delivered twice, no tool run twice, every thread
usable at the end, no temporary file left, SIGTERM exits 0.  Exit status 0 only when all of it held.
"""
import argparse
import collections
import http.client
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
import uuid
from typing import Any, Dict, List, Optional, Set

from toolkit.deploy import GunicornProcess, PinnedConnection, sse_events  # first: puts the checkout on sys.path
from toolkit.soak import run_body

from iaccode_agui.demo import DemoServer
from iaccode_agui.state.store import ThreadStore

TOKEN = "worker-soak-token"
TURNS = (("slow", 4), ("please write a file", 2), ("run a tool", 1), ("hello there", 1))
REATTACHES = 3            # as the terminal client
ATTEMPTS = 6              # new runs tried for one turn or one answer (busy thread, cut before any event)
# Ways a killed run may end that the README documents: a re-attach that no worker can serve any more, and
# the errors of a run (or resume) whose execution the kill ended.
DOCUMENTED_HTTP = {"RUN_ALREADY_TERMINAL"}
DOCUMENTED_RUN_ERRORS = {"EXECUTION_LOST", "RESUME_ALREADY_APPLIED", "CANCELLED"}
LOG_TTL = 3.0             # --run-log-ttl, when the adapter keeps run logs: they must go this long after a run


def _run_log_flags() -> List[str]:
    """A short run-log retention when this adapter keeps run logs (older versions have no such flag)."""
    from iaccode_agui.server import cli
    known = cli.build_parser()._option_string_actions   # noqa: SLF001 - the flags this version knows
    return ["--run-log-ttl", str(LOG_TTL)] if "--run-log-ttl" in known else []


class Run:
    """What one client saw of one run, over its first response and its re-attaches."""

    def __init__(self, body: Dict[str, Any]) -> None:
        self.body = body
        self.probe = ""
        self.events: List[Dict[str, Any]] = []
        self.terminals = 0
        self.cut = 0
        self.status = 0
        self.code: Optional[str] = None
        self.deltas = 0
        self.ended = False
        self.retry = False

    @property
    def last_id(self) -> Optional[int]:
        ids = [e["_id"] for e in self.events if e.get("_id") is not None]
        return ids[-1] if ids else None

    @property
    def final(self) -> Optional[Dict[str, Any]]:
        return next((e for e in reversed(self.events) if e["type"] in ("RUN_FINISHED", "RUN_ERROR")), None)

    @property
    def text(self) -> str:
        return "".join(e["delta"] for e in self.events if e["type"] == "TEXT_MESSAGE_CONTENT")

    @property
    def interrupts(self) -> List[Dict[str, Any]]:
        outcome = (self.final or {}).get("outcome") or {}
        return list(outcome.get("interrupts") or []) if outcome.get("type") == "interrupt" else []

    def session(self) -> Dict[str, Any]:
        return next((e["value"] for e in self.events if e["type"] == "CUSTOM"
                     and e.get("name") == "iac-code.session.v1"), {})


class Soak:
    def __init__(self, kills: int, clients: int, seed: int) -> None:
        self.kills_wanted, self.clients, self.seed = kills, clients, seed
        self.base = tempfile.mkdtemp(prefix="agui-worker-soak-")
        self.state_dir = os.path.join(self.base, "state")
        self.root = os.path.realpath(os.path.join(self.base, "ws"))
        os.makedirs(self.root)
        self.demo = DemoServer.start(token=TOKEN, ping_interval=0.5, slow_interval=0.03, allowed_cwds=[self.root])
        self.env = {"IAC_CODE_AGUI_A2A_URL": self.demo.url, "IAC_CODE_AGUI_A2A_TOKEN": TOKEN,
                    "IAC_CODE_AGUI_STATE_DIR": self.state_dir, "IAC_CODE_AGUI_ALLOWED_CWDS": self.root,
                    "AGUI_GUNICORN_THREADS": "24", "AGUI_HEARTBEAT": "1",
                    "AGUI_ADAPTER_ARGS": " ".join(_run_log_flags())}
        self.server: Optional[GunicornProcess] = None
        self.lock = threading.Lock()
        self.live: Dict[str, Run] = {}                 # probe -> run being streamed now
        self.count: Dict[str, int] = collections.Counter()
        self.outcomes: Dict[str, int] = collections.Counter()
        self.anomalies: List[str] = []
        self.bad_runs: List[str] = []                  # runs neither complete nor ended with a documented error
        self.targets: List[Run] = []                   # the run each kill was aimed at
        self.reference: Dict[str, str] = {}            # turn text (or "resume") -> uninterrupted assistant text
        self.announced: Set[str] = set()
        self.settled: Set[str] = set()
        self.threads: List[str] = []
        self.executions: Dict[str, str] = {}           # thread -> last execution id the client saw announced
        self.allowed: List[str] = []                   # tool call ids answered allow_once and resumed ok
        self.stop_flows = threading.Event()

    # ---- one run, re-attached like the terminal client ------------------------------------------------
    def body(self, thread: str, text: Optional[str], resume: Optional[List[Dict[str, Any]]] = None) -> Dict[str, Any]:
        return run_body(self.root, thread, text, resume)

    def bump(self, name: str, by: int = 1) -> None:
        with self.lock:
            self.count[name] += by

    def _response(self, run: Run, last_id: Optional[int]) -> Optional[http.client.HTTPResponse]:
        assert self.server is not None
        run.probe = uuid.uuid4().hex
        headers = {"X-Probe": run.probe, "X-AgentCore-Session-ID": run.body["threadId"]}
        if last_id is not None:
            headers["Last-Event-ID"] = str(last_id)
        try:
            response = PinnedConnection(self.server.url, timeout=30).request("POST", "/", run.body, headers)
        except (OSError, http.client.HTTPException):
            run.status, run.code = 0, None    # the connection died before any answer (its worker was killed)
            return None
        run.status = response.status
        if response.status != 200:
            try:
                run.code = json.loads(response.read())["error"]["code"]
            except (ValueError, KeyError, TypeError, OSError, http.client.HTTPException):
                run.code = "HTTP_%d" % response.status
            return None
        return response

    def stream(self, body: Dict[str, Any], retry: bool = False) -> Run:
        """One run; ``retry``: it re-sends an answer whose earlier run a kill cut."""
        run = Run(body)
        run.retry = retry
        response = self._response(run, None)
        attach = 0
        while attach <= REATTACHES:
            if response is None and run.status == 0 and run.last_id is not None and attach < REATTACHES:
                run.cut += 1    # the re-attach itself hit a worker being killed: it counts as one more try
                attach += 1
                time.sleep(0.1)
                response = self._response(run, run.last_id)
                continue
            if response is None:
                run.cut += run.status == 0
                break
            with self.lock:
                self.live[run.probe] = run
            try:
                for event in sse_events(response):
                    if event["type"] == ":":
                        continue
                    run.events.append(event)
                    run.deltas += event["type"] == "TEXT_MESSAGE_CONTENT"
                    run.terminals += event["type"] in ("RUN_FINISHED", "RUN_ERROR")
            except (OSError, http.client.HTTPException, ValueError):
                pass
            finally:
                with self.lock:
                    self.live.pop(run.probe, None)
                response.close()
            if run.final is not None:
                break
            run.cut += 1
            if run.last_id is None or attach == REATTACHES:
                break
            attach += 1
            self.bump("re-attaches")
            response = self._response(run, run.last_id)
        run.ended = True
        if run.session().get("executionId"):
            self.executions[body["threadId"]] = run.session()["executionId"]
        self.classify(run)
        return run

    def classify(self, run: Run) -> None:
        """Complete and whole, or a documented error; anything else is an anomaly."""
        what = "resume" if run.body.get("resume") else run.body["messages"][0]["content"]
        ids = [e["_id"] for e in run.events]
        if run.events and ids != list(range(ids[0], ids[0] + len(ids))):
            self.bad_runs.append("%s: SSE ids with a gap or a repeat: %s" % (what, ids))
        if run.terminals > 1:
            self.bad_runs.append("%s: %d terminal events seen by one client" % (what, run.terminals))
        final = run.final
        if final is not None and final["type"] == "RUN_FINISHED":
            key = what if not run.interrupts else what + " (interrupt)"
            expected = self.reference.get(key)
            if run.retry and run.text != expected:
                # The runtime took the answer before the kill; the turn it started was streamed to the
                # killed worker's client, and the retry can only report that it is over.
                self.outcome("complete, answer taken before the kill: its turn's text went with the cut stream",
                             run)
                return
            if expected is not None and run.text != expected:
                self.bad_runs.append("%s: text %r, uninterrupted %r" % (what, run.text[-80:], expected[-80:]))
            self.outcome("complete after a cut" if run.cut else "complete", run)
        elif final is not None and final.get("code") in DOCUMENTED_RUN_ERRORS:
            named = "the task was named" if run.session().get("executionId") else "no session event yet"
            self.outcome("RUN_ERROR %s (%s, %s)" % (final["code"], what, named), run)
        elif final is not None:
            self.bad_runs.append("%s: RUN_ERROR %s %s" % (what, final.get("code"), final.get("message")))
        elif run.code in DOCUMENTED_HTTP and run.cut:
            self.outcome("re-attach refused: %d %s" % (run.status, run.code), run)
        elif run.cut and run.last_id is None:
            self.outcome("cut before its first event (client reports the broken stream)", run)
        elif run.cut > REATTACHES:
            # Each re-attach was cut again by a later kill: the terminal client stops there too.
            self.outcome("gave up after %d re-attaches, each cut by another kill" % REATTACHES, run)
        elif run.status != 200 and not run.cut:
            self.outcome("not admitted: %d %s" % (run.status, run.code), run)
        else:
            self.bad_runs.append("%s: cut %d times, last answer %s %s" % (what, run.cut, run.status, run.code))

    def outcome(self, name: str, run: Run) -> None:
        with self.lock:
            self.outcomes[name] += 1
            if run.cut:
                self.count["runs cut by a kill"] += 1
                self.outcomes["cut, then: " + name] += 1

    # ---- clients ----------------------------------------------------------------------------------------
    def turn(self, thread: str, text: str) -> None:
        run = None
        for _ in range(ATTEMPTS):
            run = self.stream(self.body(thread, text))
            if run.code == "RESUME_REQUIRED":   # a killed run persisted an interrupt it never showed
                self.cancel_pending(thread, run)
            elif run.code != "THREAD_BUSY" and not (run.cut and run.last_id is None):
                break
            time.sleep(0.1)
        interrupts = run.interrupts if run is not None else []
        while interrupts:
            interrupts = self.answer(thread, interrupts)

    def cancel_pending(self, thread: str, run: Run) -> None:
        """End an interrupt a killed worker persisted but never showed, with the cancel extension and the
        execution id the client saw announced (the state file only if the kill came before that)."""
        execution = self.executions.get(thread)
        if execution is None:
            state = ThreadStore(self.state_dir).load(thread)
            execution = state.execution.execution_id if state is not None else "unknown"
            self.bump("pending cancelled without a seen execution id")
        assert self.server is not None
        conn = PinnedConnection(self.server.url)
        try:
            response = conn.request("POST", "/extensions/iac-code/v1/executions/%s/cancel" % execution,
                                    {"threadId": thread, "rosInvocationId": "inv-" + thread})
            response.read()
            self.bump("unannounced pending cancelled (HTTP %d)" % response.status)
        finally:
            conn.close()

    def answer(self, thread: str, interrupts: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
        ids = [i["id"] for i in interrupts]
        with self.lock:
            self.announced.update(ids)
        entries = [{"interruptId": i["id"], "status": "resolved", "payload": {"decision": "allow_once"}}
                   for i in interrupts]
        retry = False
        for _ in range(ATTEMPTS):
            run = self.stream(self.body(thread, None, entries), retry)   # the same answer on every retry
            retry = retry or bool(run.cut)
            final = run.final
            if final is not None and final["type"] == "RUN_FINISHED":
                if not set(ids) & {i["id"] for i in run.interrupts}:
                    with self.lock:
                        self.settled.update(ids)
                        self.allowed.extend(i.get("toolCallId", "") for i in interrupts)
                return run.interrupts
            if final is not None and final.get("code") in DOCUMENTED_RUN_ERRORS:
                with self.lock:
                    self.settled.update(ids)
                return []
            time.sleep(0.1)
        self.anomalies.append("%s: interrupts %s never settled" % (thread, ids))
        return []

    def client(self, index: int) -> None:
        rng = random.Random(self.seed * 1000 + index)
        threads = ["ws-%d-%d" % (index, n) for n in range(3)]
        for thread in threads:
            os.makedirs(os.path.join(self.root, thread), exist_ok=True)
        with self.lock:
            self.threads.extend(threads)
        while not self.stop_flows.is_set():
            text = rng.choices([t for t, _ in TURNS], [w for _, w in TURNS])[0]
            self.turn(rng.choice(threads), text)

    # ---- the killer ---------------------------------------------------------------------------------------
    def kill_one(self) -> bool:
        assert self.server is not None
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with self.lock:
                candidates = [run for run in self.live.values()
                              if run.deltas and not run.ended and run.final is None and run not in self.targets]
            if candidates:
                run = random.Random(self.seed + len(self.outcomes)).choice(candidates)
                try:
                    pid = self.server.pid_of(run.probe, timeout=2)
                except RuntimeError:
                    continue
                if pid in self.server.worker_pids() and run.final is None:
                    os.kill(pid, signal.SIGKILL)
                    self.bump("kills")
                    self.targets.append(run)
                    gone_by = time.monotonic() + 10
                    while pid in self.server.worker_pids() and time.monotonic() < gone_by:
                        time.sleep(0.01)
                    self.server.wait_booted(60)
                    return True
            time.sleep(0.01)
        self.anomalies.append("no stream in the middle of its text within 20 s")
        return False

    def references(self) -> None:
        """Each turn once, uninterrupted: the text a complete run must reproduce."""
        for text, _ in TURNS:
            thread = "ref-" + uuid.uuid4().hex[:6]
            os.makedirs(os.path.join(self.root, thread))
            run = self.stream(self.body(thread, text))
            self.reference[text] = run.text
            if run.interrupts:
                self.reference[text + " (interrupt)"] = run.text
                answer = [{"interruptId": i["id"], "status": "resolved", "payload": {"decision": "allow_once"}}
                          for i in run.interrupts]
                self.reference["resume"] = self.stream(self.body(thread, None, answer)).text
        self.outcomes.clear()

    # ---- the whole soak -------------------------------------------------------------------------------------
    def run(self) -> Dict[str, Any]:
        started = time.monotonic()
        try:
            self.server = GunicornProcess(self.base, self.env, workers=2)
            self.references()
            clients = [threading.Thread(target=self.client, args=(i,), daemon=True) for i in range(self.clients)]
            for thread in clients:
                thread.start()
            while self.count["kills"] < self.kills_wanted and self.kill_one():
                pass
            self.stop_flows.set()
            for thread in clients:
                thread.join(120)
            if any(thread.is_alive() for thread in clients):
                self.anomalies.append("a client did not finish")
            self.final_checks()
            self.count["SIGTERM exit status"] = self.server.stop()
        finally:
            if self.server is not None and self.server.proc.poll() is None:
                self.server.proc.kill()
            self.demo.stop()
        report = self.report(time.monotonic() - started)
        if report["ok"]:
            shutil.rmtree(self.base, ignore_errors=True)
        return report

    def final_checks(self) -> None:
        for thread in list(self.threads):
            run = self.stream(self.body(thread, "final hello"))
            if run.code == "RESUME_REQUIRED":
                self.cancel_pending(thread, run)
                run = self.stream(self.body(thread, "final hello"))
            if run.final is not None and run.final["type"] == "RUN_FINISHED":
                self.bump("threads usable at the end")
            else:
                self.anomalies.append("thread %s unusable at the end: %s %s" % (thread, run.code, run.final))
        tools = collections.Counter(tool for _, tool in list(self.demo.runtime.tool_executions))
        self.count["tool executions"] = sum(tools.values())
        self.count["tools run twice"] = sum(1 for n in tools.values() if n > 1)
        not_once = [t for t in self.allowed if t and tools[t] != 1]
        if not_once:
            self.anomalies.append("allowed and resumed, not run exactly once: %s" % not_once)
        missed = [run for run in self.targets if not run.cut]
        self.count["kills that cut their target stream"] = len(self.targets) - len(missed)
        # A target's last event may race its kill: such a kill cut other streams, not its target.
        self.count["kills that landed after their target ended"] = len(missed)
        # An answer is applied when the runtime takes it: an allowed write then runs its tool, so "applied
        # twice" shows as a tool run twice.  A repeat the runtime refused is counted apart: it happens when
        # the answer's worker died after the runtime took it, and a finished turn (input-required, no
        # input) looks to the retry like a wait whose answer may not have arrived.
        answers = collections.Counter(task for method, task in list(self.demo.runtime.requests_log)
                                      if method in ("SendMessage", "SendStreamingMessage") and task)
        self.count["answers sent to the runtime"] = sum(answers.values())
        self.count["answers sent again after a kill (refused by the runtime)"] = sum(
            n - 1 for n in answers.values() if n > 1)
        self.count["answers applied twice"] = self.count["tools run twice"]
        self.count["temporary files left"] = sum(
            1 for _, _, files in os.walk(self.state_dir) for name in files if name.endswith(".tmp"))
        self.check_retention()

    def check_retention(self) -> None:
        """Run logs of runs that ended more than the TTL ago must be gone (retention sweeps periodically)."""
        runs_dir = os.path.join(self.state_dir, "runs")
        if not os.path.isdir(runs_dir):
            return
        deadline = time.monotonic() + LOG_TTL + 30

        def stale() -> List[str]:
            now = time.time()
            found = []
            for name in os.listdir(runs_dir):
                try:
                    old = now - os.stat(os.path.join(runs_dir, name)).st_mtime > LOG_TTL + 1
                except FileNotFoundError:
                    continue
                if name.endswith(".log") and old:
                    found.append(name)
            return found

        left = stale()
        while left and time.monotonic() < deadline:
            time.sleep(0.5)
            left = stale()
        self.count["run logs left past retention"] = len(left)

    def report(self, duration: float) -> Dict[str, Any]:
        count = dict(self.count)
        lost = sorted(self.announced - self.settled)
        invariants = [
            ("every run complete or documented", not self.bad_runs,
             "%d runs, %d not" % (sum(v for k, v in self.outcomes.items() if not k.startswith("cut, then")),
                                  len(self.bad_runs))),
            ("no announced interrupt lost", not lost, "%d announced, %d lost" % (len(self.announced), len(lost))),
            ("no answer applied twice", not count.get("answers applied twice"),
             "%d sent, %d sent again and refused" % (count.get("answers sent to the runtime", 0),
                                                     count.get("answers sent again after a kill (refused by the runtime)", 0))),
            ("no tool run twice", not count.get("tools run twice"), "%d executions" % count.get("tool executions", 0)),
            ("no temp or run-log file past retention",
             not count.get("temporary files left") and not count.get("run logs left past retention"),
             "%s temp, %s run logs" % (count.get("temporary files left", 0),
                                       count.get("run logs left past retention", "no run logs kept"))),
            ("every thread usable at the end", count.get("threads usable at the end") == len(self.threads),
             "%d threads" % len(self.threads)),
            ("kills made mid-stream", count.get("kills", 0) == self.kills_wanted,
             "%d of %d" % (count.get("kills", 0), self.kills_wanted)),
            ("no other anomaly", not self.anomalies, "%d anomalies" % len(self.anomalies)),
            ("SIGTERM exits 0", count.get("SIGTERM exit status") == 0, "exit %s" % count.get("SIGTERM exit status")),
        ]
        return {"ok": all(ok for _, ok, _ in invariants), "seed": self.seed, "kills": count.get("kills", 0),
                "duration_s": round(duration, 1), "counts": count, "outcomes": dict(self.outcomes),
                "lost": lost, "bad_runs": list(self.bad_runs), "anomalies": list(self.anomalies),
                "workdir": self.base,
                "invariants": [{"name": n, "ok": ok, "detail": d} for n, ok, d in invariants]}


def run_soak(kills: int = 5, clients: int = 4, seed: Optional[int] = None) -> Dict[str, Any]:
    return Soak(kills, clients, seed if seed is not None else random.randrange(1 << 30)).run()


def render(report: Dict[str, Any]) -> str:
    lines = ["worker crash soak: seed %s, %s kills, %.1f s" % (report["seed"], report["kills"], report["duration_s"]),
             "", "%-36s %-5s %s" % ("invariant", "held", "detail")]
    lines += ["%-36s %-5s %s" % (i["name"], "yes" if i["ok"] else "NO", i["detail"]) for i in report["invariants"]]
    lines += ["", "how runs ended:"] + ["  %5d  %s" % (n, name) for name, n in sorted(report["outcomes"].items())]
    lines += ["", "totals:"] + ["  %-44s %s" % item for item in sorted(report["counts"].items())]
    for title, items in (("LOST", report["lost"]), ("RUNS NEITHER COMPLETE NOR DOCUMENTED", report["bad_runs"]),
                         ("ANOMALIES", report["anomalies"])):
        lines += (["", title + ":"] + ["  " + str(item) for item in items]) if items else []
    if not report["ok"]:
        lines.append("\nlogs and state kept in %s" % report["workdir"])
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=50, help="SIGKILLs of a streaming worker (default 50)")
    parser.add_argument("--clients", type=int, default=4, help="concurrent client threads (default 4)")
    parser.add_argument("--seed", type=int, default=None, help="seed of the random choices (printed)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    if args.kills < 1 or args.clients < 1:
        parser.error("--kills and --clients must be at least 1")
    report = run_soak(args.kills, args.clients, args.seed)
    print(json.dumps(report, indent=2, sort_keys=True) if args.json else render(report))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())

"""Process counters and gauges, rendered in the Prometheus text exposition format (no client library)."""
import itertools
import threading
from typing import Callable, Dict, List, Tuple

_HELP = {
    "agui_runs_started_total": ("counter", "Runs admitted and started."),
    "agui_runs_finished_total": ("counter", "Runs that ended with RUN_FINISHED, by outcome."),
    "agui_runs_errored_total": ("counter", "Runs that ended with RUN_ERROR, by code."),
    "agui_admission_rejections_total": ("counter", "Requests refused before SSE, by error code."),
    "agui_events_sent_total": ("counter", "AG-UI events published to run channels."),
    "agui_heartbeats_total": ("counter", "SSE heartbeat comments written."),
    "agui_upstream_errors_total": ("counter", "A2A upstream failures seen by run workers."),
    "agui_streams_closed_total": ("counter", "SSE responses closed (finished or disconnected)."),
    "agui_reattach_total": ("counter", "Clients re-attached to a run with Last-Event-ID."),
    "agui_cancellations_total": ("counter", "Executions cancelled through the cancel extension."),
    "agui_http_requests_total": ("counter", "HTTP requests answered, by route and status."),
    "agui_observers_total": ("counter", "Read-only observers attached through the subscribe extension."),
    "agui_takeovers_total": ("counter", "Runs adopted after their owning process died."),
    "agui_run_log_failures_total": ("counter", "Runs that could not get a durable event log."),
    "agui_active_runs": ("gauge", "Runs currently in flight in this process."),
    "agui_open_streams": ("gauge", "SSE responses currently open."),
}

Labels = Tuple[Tuple[str, str], ...]


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class Level:
    """A count that goes up and down from many threads (open responses): ``+=`` on an int is not atomic."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._value = 0

    def add(self, amount: int) -> None:
        with self._lock:
            self._value += amount

    def add_below(self, amount: int, limit: int) -> bool:
        """Add unless the count is already at ``limit`` (0 = no limit); True when it was added."""
        with self._lock:
            if limit and self._value >= limit:
                return False
            self._value += amount
            return True

    @property
    def value(self) -> int:
        return self._value


class Tally:
    """A label-less counter that many threads bump at a high rate without taking a lock.

    Every open stream counts its heartbeats; with the one lock of ``Metrics.inc`` a thousand streams formed
    a convoy on it (a holder preempted for the interpreter lock kept hundreds of writers waiting, seen as
    300 threads in ``inc`` in one stack dump).  ``next()`` on an ``itertools.count`` is a single C call, so a
    bump needs no lock; reads (rare) take one so two readers never see the count go back.
    """

    def __init__(self) -> None:
        self._bumps = itertools.count()
        self._reads = itertools.count()
        self._lock = threading.Lock()

    def bump(self) -> None:
        next(self._bumps)

    @property
    def value(self) -> int:
        with self._lock:   # each read takes one number of each counter: the difference is the bumps
            return next(self._bumps) - next(self._reads)


class Metrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: Dict[str, Dict[Labels, float]] = {}
        self._gauges: Dict[str, Callable[[], float]] = {}
        self._tallies: Dict[str, Tally] = {}

    def tally(self, name: str) -> Tally:
        """The lock-free counter ``name`` for a hot path (shown and read like any counter without labels)."""
        with self._lock:
            return self._tallies.setdefault(name, Tally())

    def inc(self, name: str, amount: float = 1, **labels: str) -> None:
        key = tuple(sorted(labels.items()))
        with self._lock:
            series = self._values.setdefault(name, {})
            series[key] = series.get(key, 0) + amount

    def add_gauge(self, name: str, read: Callable[[], float]) -> None:
        self._gauges[name] = read

    def value(self, name: str, **labels: str) -> float:
        with self._lock:
            counted = self._values.get(name, {}).get(tuple(sorted(labels.items())), 0)
            tally = None if labels else self._tallies.get(name)
        return counted + (tally.value if tally is not None else 0)

    def render(self) -> str:
        lines: List[str] = []
        with self._lock:
            snapshot = {name: dict(series) for name, series in self._values.items()}
            tallies = dict(self._tallies)
        for name, tally in tallies.items():
            series = snapshot.setdefault(name, {})
            series[()] = series.get((), 0) + tally.value
        for name, read in self._gauges.items():
            snapshot[name] = {(): float(read())}
        for name in sorted(set(_HELP) | set(snapshot)):
            kind, text = _HELP.get(name, ("untyped", name))
            lines.append("# HELP %s %s" % (name, text))
            lines.append("# TYPE %s %s" % (name, kind))
            series = snapshot.get(name) or ({(): 0.0} if not name.endswith("_total") or kind == "counter" else {})
            for labels, value in sorted(series.items()):
                label_text = ",".join('%s="%s"' % (key, _escape(val)) for key, val in labels)
                number = int(value) if float(value).is_integer() else value
                lines.append("%s%s %s" % (name, "{%s}" % label_text if label_text else "", number))
        return "\n".join(lines) + "\n"

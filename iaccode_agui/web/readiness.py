"""``GET /ready``: whether this process can take runs now, for load balancers and Kubernetes probes.

``/health`` is liveness: it answers 200 for as long as the process serves HTTP, so a supervisor does not
restart an adapter that is merely waiting for its runtime.  Readiness is the stricter question a balancer
asks before sending traffic: is the state directory writable, does the A2A runtime answer its health
check, and is the server not draining?  Each check costs a disk write or an HTTP round trip, so results
are cached for ``ttl`` seconds, one caller refreshes at a time while the others read the previous answer,
and the runtime probe has its own short timeouts so a hung runtime cannot hold a worker thread for long.
"""
import dataclasses
import json
import threading
import time
from typing import Callable, Dict, List, Optional, Tuple

from werkzeug.wrappers import Response

from iaccode_agui.a2a.client import A2AClient, A2AError
from iaccode_agui.config import Settings
from iaccode_agui.state.fileio import size_text
from iaccode_agui.state.store import StateError, ThreadStore

CHECK_NAMES = ("stateDir", "runtime", "draining")


@dataclasses.dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str


@dataclasses.dataclass(frozen=True)
class Report:
    checks: Tuple[Check, ...]
    checked_at: float

    @property
    def ready(self) -> bool:
        return all(check.ok for check in self.checks)

    @property
    def failing(self) -> List[str]:
        return [check.name for check in self.checks if not check.ok]

    def body(self) -> Dict[str, object]:
        """The JSON answer: overall status, the failing check names, and every check's own detail."""
        return {"status": "ready" if self.ready else "not_ready", "failing": self.failing,
                "checks": {check.name: {"ok": check.ok, "detail": check.detail} for check in self.checks}}


def check_state_dir(store: ThreadStore) -> Check:
    try:
        free = store.check_writable()
    except StateError as exc:
        return Check("stateDir", False, str(exc))
    needed = store.space_needed()
    return Check("stateDir", True, "writable, %s free (a run needs %s)" % (size_text(free), size_text(needed)))


def check_runtime(probe: A2AClient) -> Check:
    """The runtime's ``/health``; a generic A2A agent without one counts as up when its agent card answers."""
    try:
        payload = probe.health()
    except A2AError as health_error:
        try:
            probe.agent_card()
        except A2AError:
            return Check("runtime", False, str(health_error))
        return Check("runtime", True, "agent card answered")
    status = payload.get("status")
    if status not in (None, "ok", "healthy"):
        return Check("runtime", False, "the runtime reports status %r" % (status,))
    return Check("runtime", True, "healthy")


class Readiness:
    """Cached readiness of one adapter; ``report()`` is safe to call from any number of request threads."""

    def __init__(self, store: ThreadStore, probe: A2AClient, draining: Callable[[], bool], *,
                 ttl: float = 2.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._store = store
        self._probe = probe
        self._draining = draining
        self._ttl = ttl
        self._clock = clock
        self._refresh = threading.Lock()
        self._cached: Optional[Report] = None

    def report(self) -> Report:
        cached = self._cached
        if cached is not None and self._clock() - cached.checked_at < self._ttl:
            return self._with_draining(cached)
        # One refresher at a time; everybody else answers from the previous result instead of queueing.
        if not self._refresh.acquire(blocking=cached is None):
            return self._with_draining(cached)  # type: ignore[arg-type]
        try:
            cached = self._cached
            if cached is None or self._clock() - cached.checked_at >= self._ttl:
                cached = Report((check_state_dir(self._store), check_runtime(self._probe)), self._clock())
                self._cached = cached
        finally:
            self._refresh.release()
        return self._with_draining(cached)

    def _with_draining(self, report: Report) -> Report:
        # Draining is a flag in memory: always current, never cached.
        draining = self._draining()
        check = Check("draining", not draining, "draining: new runs are refused" if draining else "accepting runs")
        return Report(report.checks + (check,), report.checked_at)

    def close(self) -> None:
        self._probe.close()


def ready_response(readiness: Readiness) -> Response:
    """200 when every check passes, else 503 naming the failing checks (``Retry-After`` for the balancer)."""
    report = readiness.report()
    response = Response(json.dumps(report.body(), ensure_ascii=False), status=200 if report.ready else 503,
                        content_type="application/json; charset=utf-8")
    response.headers["Cache-Control"] = "no-store"
    if not report.ready:
        response.headers["Retry-After"] = "1"
    return response


def probe_client(settings: Settings) -> A2AClient:
    """A separate client with short timeouts: a probe must answer within a couple of seconds, always."""
    return A2AClient(settings.a2a_url, settings.a2a_token, connect_timeout=1.0, read_timeout=2.0, pool_size=2,
                     quick_timeout=2.0)

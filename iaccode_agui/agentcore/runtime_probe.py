"""Is the execution runtime up?  Asked before a new run on the AgentCore routes (``RUNTIME_NOT_READY``).

``POST /`` reports an unreachable runtime inside the stream (iac-code does the same); an AgentCore
client expects a 503 before the stream instead, so it can retry elsewhere.  A reachable runtime is
remembered for a few seconds so that a busy server does not probe on every request.
"""
import threading
import time
from typing import Callable

from iaccode_agui.a2a.client import A2AClient, A2AUnavailable, unreachable
from iaccode_agui.errors import AguiError

REMEMBER_UP = 5.0


class RuntimeProbe:
    def __init__(self, client: A2AClient, clock: Callable[[], float] = time.monotonic) -> None:
        self._client = client
        self._clock = clock
        self._up_until = 0.0
        self._lock = threading.Lock()

    def check(self) -> None:
        with self._lock:
            if self._clock() < self._up_until:
                return
        try:
            self._client.agent_card()
        except A2AUnavailable as exc:
            # Only a failed connection means "not up": any HTTP answer proves something is listening.
            if unreachable(exc):
                raise AguiError("RUNTIME_NOT_READY", headers={"Retry-After": "2"})
        except Exception:
            pass        # an odd answer is the run's problem to report, not readiness
        with self._lock:
            self._up_until = self._clock() + REMEMBER_UP

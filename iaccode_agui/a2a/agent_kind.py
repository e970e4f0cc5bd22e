"""Which kind of agent answers upstream: iac-code (with its dialect extensions) or a plain A2A 1.0 agent.

The difference decides how inputs are announced and resumed, so it is settled once per process: from the
setting when it names the kind, else from the agent card, asked by a background thread when the process
starts.  Any HTTP answer settles it: a card naming an iac-code extension (or no card at all: a 404, any
other status, a body that is not a card) means iac-code, the runtime this adapter is built for; a card
without one means a plain A2A agent.  Only a failure to reach the runtime leaves the kind open, and the
same thread asks again later (backing off up to ``RETRY_MAX`` seconds) until an answer settles it.

A run never waits for the card: one admitted while the kind is still open is handled as iac-code (as a
runtime without a card would be).  A plain A2A agent that may be down when the adapter starts is therefore
best pinned with ``--upstream-kind generic``.
"""
import json
import logging
import threading
from typing import Any, Dict, Optional

from iaccode_agui.a2a.client import A2AClient, A2AError, unreachable

log = logging.getLogger("iaccode_agui.a2a")

IAC_CODE_URN_PREFIX = "urn:iac-code:"
RETRY_FIRST = 1.0    # seconds before the card is asked again after a failed connection; doubled each time
RETRY_MAX = 30.0


def card_is_generic(card: Dict[str, Any]) -> bool:
    """An agent card that names no iac-code extension belongs to a plain A2A agent."""
    return IAC_CODE_URN_PREFIX not in json.dumps(card)


class UpstreamKind:
    def __init__(self, setting: str, client: A2AClient, retry: float = RETRY_FIRST) -> None:
        self.setting = setting            # "auto" | "iac-code" | "generic"
        self.client = client
        self._generic: Optional[bool] = None if setting == "auto" else setting == "generic"
        self._retry = retry
        self._stop = threading.Event()

    @property
    def settled(self) -> bool:
        return self._generic is not None

    def is_generic(self) -> bool:
        """Never waits: while the kind is open the answer is iac-code (see the module's docstring)."""
        return bool(self._generic)

    def start(self) -> None:
        """Ask the card in the background when the setting leaves the kind to it."""
        if self._generic is None:
            threading.Thread(target=self._settle, name="agui-agent-card", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    def _settle(self) -> None:
        delay = self._retry
        while not self.ask() and not self._stop.wait(delay):
            delay = min(2 * delay, RETRY_MAX)

    def ask(self) -> bool:
        """Ask for the card once; True when the answer settled the kind (False: the runtime was not reached)."""
        try:
            card: Optional[Dict[str, Any]] = self.client.agent_card()
        except A2AError as exc:
            if unreachable(exc):
                log.debug("agent card unavailable (%s); assuming the iac-code dialect until the runtime answers", exc)
                return False
            log.debug("the runtime answered without an agent card (%s): it is taken for iac-code", exc)
            card = None
        self._generic = card is not None and card_is_generic(card)
        # Only the exception is said at INFO: the start-up output stays as it was for the runtime it expects.
        log.log(logging.INFO if self._generic else logging.DEBUG, "upstream agent is %s",
                "a generic A2A agent" if self._generic else "iac-code")
        return True

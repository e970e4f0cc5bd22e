"""Which kind of agent answers upstream: iac-code (with its dialect extensions) or a plain A2A 1.0 agent.

The difference decides how inputs are announced and resumed, so it is settled once per process: from the
setting when it names the kind, else from the agent card's extension URIs.
"""
import json
import logging
from typing import Any, Dict, Optional

from iaccode_agui.a2a.client import A2AClient, A2AError

log = logging.getLogger("iaccode_agui.a2a")

IAC_CODE_URN_PREFIX = "urn:iac-code:"


def card_is_generic(card: Dict[str, Any]) -> bool:
    """An agent card that names no iac-code extension belongs to a plain A2A agent."""
    return IAC_CODE_URN_PREFIX not in json.dumps(card)


class UpstreamKind:
    def __init__(self, setting: str, client: A2AClient) -> None:
        self.setting = setting            # "auto" | "iac-code" | "generic"
        self.client = client
        self._generic: Optional[bool] = None

    def is_generic(self) -> bool:
        if self.setting != "auto":
            return self.setting == "generic"
        if self._generic is None:
            # Two first runs may both ask; they get the same card, so no lock is held across the call.
            try:
                card = self.client.agent_card()
            except A2AError as exc:
                # Not cached: the next run asks again once the runtime is up.
                log.info("agent card unavailable (%s); assuming the iac-code dialect", exc)
                return False
            self._generic = card_is_generic(card)
            log.info("upstream agent is %s", "a generic A2A agent" if self._generic else "iac-code")
        return self._generic

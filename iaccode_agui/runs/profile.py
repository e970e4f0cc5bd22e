"""How a route family wants the shared run core to treat its runs.

Both route families admit, run, project and record runs the same way; they differ only in what a
closed connection means and in how events are shaped on their way to the channel.
"""
import dataclasses
from typing import Any, Callable, Dict, List, Optional

Event = Dict[str, Any]
Shape = Callable[[Event], List[Event]]


@dataclasses.dataclass(frozen=True)
class RunProfile:
    name: str = "agui"
    # language -> per-run event shaping; None publishes the projection's events unchanged.
    shaper: Optional[Callable[[str], Shape]] = None


DEFAULT = RunProfile()


class ShapedPublisher:
    """What a run worker publishes through: each event shaped, then put on the run's channel.

    It stands in for the channel (everything but ``publish`` is the channel's own), so the worker and
    the channel stay unaware of which route family started the run.
    """

    def __init__(self, channel: Any, shape: Shape) -> None:
        self._channel = channel
        self._shape = shape

    def publish(self, event: Event) -> None:
        for item in self._shape(event):
            self._channel.publish(item)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._channel, name)

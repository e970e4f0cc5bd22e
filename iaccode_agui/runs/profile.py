"""How a route family wants the shared run core to treat its runs.

Both route families admit, run, project and record runs the same way; they differ only in what a
closed connection means and in how events are shaped on their way to the channel.
"""
import dataclasses
import logging
from typing import Any, Callable, Dict, List, Optional, Tuple

Event = Dict[str, Any]
Shape = Callable[[Event], List[Event]]

log = logging.getLogger("iaccode_agui.runs")


@dataclasses.dataclass(frozen=True)
class RunProfile:
    name: str = "agui"
    # language -> per-run event shaping; None publishes the projection's events unchanged.
    shaper: Optional[Callable[[str], Shape]] = None
    # What rebuilds this profile in another process (JSON values, kept in the run log's header): a run
    # taken over after its owner died is shaped as it was, not as a plain run.
    args: Dict[str, Any] = dataclasses.field(default_factory=dict)

    def header_fields(self) -> Dict[str, Any]:
        """The run log header's fields naming this profile."""
        return {"profile": self.name, "profileArgs": dict(self.args)}


DEFAULT = RunProfile()


def header_profile(header: Dict[str, Any]) -> Tuple[str, Dict[str, Any]]:
    """The profile name and arguments a run log header records (a log without them ran the default)."""
    name = header.get("profile")
    args = header.get("profileArgs")
    return (name if isinstance(name, str) and name else DEFAULT.name), (args if isinstance(args, dict) else {})


class ProfileRegistry:
    """The profiles this process can rebuild by name, for runs it adopts from their logs.

    A route family registers a factory (its arguments recorded in the header -> the profile); the default
    profile needs none.  A name nobody registered (a log written by a newer version, or a route family
    this process does not serve) is logged as a warning and the run continues with the default shaping:
    refusing would leave the run to end as lost although its task goes on and its text can still reach
    the client; only the route family's additions (its extra events, size fitting) are missing then.
    """

    def __init__(self) -> None:
        self._factories: Dict[str, Callable[[Dict[str, Any]], RunProfile]] = {}

    def register(self, name: str, factory: Callable[[Dict[str, Any]], RunProfile]) -> None:
        self._factories[name] = factory

    def rebuild(self, header: Dict[str, Any]) -> RunProfile:
        name, args = header_profile(header)
        if name == DEFAULT.name:
            return DEFAULT
        factory = self._factories.get(name)
        if factory is None:
            log.warning("run %s on thread %s was started with profile %r, unknown here: it continues with "
                        "the default shaping", header.get("runId"), header.get("threadId"), name)
            return DEFAULT
        return factory(args)


def publisher_for(channel: Any, profile: RunProfile, language: str) -> Any:
    """What a run worker publishes through under ``profile``: the channel itself when nothing is shaped."""
    return channel if profile.shaper is None else ShapedPublisher(channel, profile.shaper(language))


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

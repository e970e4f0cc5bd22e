"""Serving a run from its log to a client that is not the owner's own subscriber.

Three kinds of client land here: a re-attach (``Last-Event-ID``) on a process that does not own the run,
a re-attach after the run left the owner's memory, and the read-only observers.  All of them read the same
file the owner appends to, so any process sharing the state directory can serve them, and any number of
them can follow one run without taking it over.  A re-attach also marks the run as followed, which the
owner's reconnect-grace timer respects: the client is attached, only somewhere else.
"""
import json
import logging
import time
from typing import Callable, List, Optional, Tuple

from iaccode_agui import errors
from iaccode_agui.errors import AguiError
from iaccode_agui.sse.codec import encode_event
from iaccode_agui.i18n import translate
from iaccode_agui.metrics import Metrics
from iaccode_agui.projection import events
from iaccode_agui.sse.channel import Subscription, encode_agui_event
from iaccode_agui.runlog.tail import LogFollower
from iaccode_agui.runlog.logfiles import RunLogReader, RunLogStore

log = logging.getLogger("iaccode_agui.runs")


class FollowSubscription(Subscription):
    """A subscription fed by a log follower thread instead of a channel."""

    def __init__(self, maxsize: int) -> None:
        super().__init__(None, [], maxsize)
        self.follower: Optional[LogFollower] = None

    def detach(self) -> None:
        if self.follower is not None:
            self.follower.stop()


class FollowedRun:
    """What the HTTP layer holds for a followed run: no worker here, and closing never cancels it."""

    worker = None

    def __init__(self, thread_id: str, run_id: str, metrics: Metrics) -> None:
        self.thread_id = thread_id
        self.run_id = run_id
        self._metrics = metrics

    def client_closed(self, finished: bool) -> None:
        self._metrics.inc("agui_streams_closed_total")


def lost_run_frames(thread_id: str, run_id: str, language: str) -> Callable[[int], List[bytes]]:
    """The end of a followed run whose writer died before its terminal event and that nobody adopted."""
    def end(last_seq: int) -> List[bytes]:
        event = events.run_error(thread_id, run_id, "EXECUTION_LOST", translate(errors.MSG_EXECUTION_LOST, language))
        return [encode_agui_event(event, last_seq + 1)]
    return end


def incomplete_log_frames(thread_id: str, run_id: str, language: str) -> Callable[[int], List[bytes]]:
    """The end of a follower's stream when the log stopped before the run's end while the run goes on.

    The frame has no SSE id: the run's own next id is still to come, so a client that re-attaches with
    its last id (and reaches the owner) misses nothing.
    """
    def end(last_seq: int) -> List[bytes]:
        event = events.run_error(thread_id, run_id, "RUN_LOG_INCOMPLETE",
                                 translate(errors.MSG_RUN_LOG_INCOMPLETE, language))
        event.setdefault("timestamp", int(time.time() * 1000))
        return [encode_event(json.dumps(event, ensure_ascii=False, separators=(",", ":")))]
    return end


class LogAttach:
    def __init__(self, runlogs: RunLogStore, metrics: Metrics, queue_max: int, poll: float = 0.05) -> None:
        self.runlogs = runlogs
        self.metrics = metrics
        self.queue_max = queue_max
        self.poll = poll
        # Asked when a followed run's writer died before its end: True when the run was adopted (here or
        # elsewhere) or otherwise given its end in the log.  The manager plugs its take-over in here.
        self.adopt: Callable[[str, str], bool] = lambda thread_id, run_id: False

    def reattach(self, thread_id: str, run_id: str, digest: Optional[str], after_seq: Optional[int],
                 language: str) -> Optional[Tuple[FollowedRun, Subscription]]:
        """Follow a run this process does not hold; None when there is no log of it.

        ``digest`` None skips the body check (an AgentCore attach sends a different body by design).
        """
        reader = self.runlogs.open_reader(thread_id, run_id)
        if reader is None:
            return None
        if digest is not None and reader.header.get("digest") != digest:
            reader.close()
            raise AguiError("RUN_ID_CONFLICT")
        return self._follow(reader, after_seq, language, self.runlogs.watch(thread_id, run_id))

    def observe(self, execution_id: str, thread_id: str, run_id: str, ros_invocation_id: str,
                after_seq: Optional[int], language: str) -> Tuple[FollowedRun, Subscription]:
        """A read-only observer: the identity must match the log's header exactly."""
        reader = self.runlogs.open_reader(thread_id, run_id)
        if reader is None:
            raise AguiError("EXECUTION_NOT_FOUND")
        header = reader.header
        if header.get("executionId") != execution_id or header.get("rosInvocationId") != ros_invocation_id:
            reader.close()
            raise AguiError("EXECUTION_NOT_FOUND")
        self.metrics.inc("agui_observers_total")
        return self._follow(reader, after_seq, language, None)

    def _follow(self, reader: RunLogReader, after_seq: Optional[int], language: str,
                watch: Optional[object]) -> Tuple[FollowedRun, Subscription]:
        sub = FollowSubscription(self.queue_max)
        thread_id, run_id = reader.header["threadId"], reader.header["runId"]
        lost = lost_run_frames(thread_id, run_id, language)

        def on_orphan(last_seq: int) -> Optional[List[bytes]]:
            return None if self.adopt(thread_id, run_id) else lost(last_seq)
        follower = LogFollower(reader, after_seq, sub.queue, on_orphan=on_orphan, on_orphan_fallback=lost,
                               on_incomplete=incomplete_log_frames(thread_id, run_id, language),
                               watch=watch, poll=self.poll)  # type: ignore[arg-type]
        sub.follower = follower
        follower.start()
        return FollowedRun(reader.header["threadId"], reader.header["runId"], self.metrics), sub

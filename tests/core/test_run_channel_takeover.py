"""A take-over attach never leaves the run without a subscriber.

``RunChannel.attach(takeover_wait=...)`` replaces a subscriber whose connection is known to be gone.  It
cleared the old subscriber under the channel's lock, let go of the lock, then took it again to attach
the new one.  In between the channel read as having no client at all (``attached`` False,
``client_gone()`` True): the old stream's own close (``LiveRun.client_closed``) or a second request's
``_free_abandoned`` then cancelled the run the client was re-attaching to.  The window is made to happen
here by a lock that stops the attaching thread before its next acquire (events, no sleeps).
"""
import threading

from iaccode_agui.sse.channel import RunChannel


class _GatedLock:
    """The channel's lock; the ``pause_at``-th acquire by the thread named ``who`` waits for ``go``."""

    def __init__(self, who: str, pause_at: int) -> None:
        self._lock = threading.Lock()
        self._who = who
        self._pause_at = pause_at
        self._count = 0
        self.paused = threading.Event()
        self.go = threading.Event()

    def acquire(self, *args, **kwargs):
        if threading.current_thread().name == self._who:
            self._count += 1
            if self._count == self._pause_at:
                self.paused.set()
                self.go.wait(10)
        return self._lock.acquire(*args, **kwargs)

    def release(self):
        self._lock.release()

    __enter__ = acquire

    def __exit__(self, *exc):
        self.release()


def test_a_takeover_attach_never_shows_the_run_without_a_client():
    channel = RunChannel()
    channel.publish({"type": "RUN_STARTED", "threadId": "t", "runId": "r"})
    old = channel.attach()
    old.gone = lambda: True              # the old connection is known to be lost
    gate = _GatedLock("attacher", pause_at=2)
    channel._lock = gate
    seen = {}

    def attach():
        seen["sub"] = channel.attach(0, takeover_wait=2.0)

    thread = threading.Thread(target=attach, name="attacher")
    thread.start()
    try:
        # Paused before its second acquire: the old subscriber, if cleared, is cleared by now.
        while not gate.paused.wait(0.05) and thread.is_alive():
            pass
        if gate.paused.is_set():
            seen["attached_meanwhile"] = channel.attached
            seen["gone_meanwhile"] = channel.client_gone()
    finally:
        gate.go.set()
        thread.join(10)
    assert seen.get("sub") is not None and channel._subscriber is seen["sub"]
    # Either the attach needs no second acquire (no window at all), or the run still has its subscriber.
    assert seen.get("attached_meanwhile", True) is True, "the run read as having no client mid-attach"

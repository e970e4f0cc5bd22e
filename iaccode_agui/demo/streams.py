"""The WSGI body of one SSE stream: a mailbox reader that pings on silence and notices a vanished client.

It is an iterator class rather than a bare generator because waitress may close the body before the first
``next()``; a generator's ``finally`` would then never run and the mailbox would leak.
"""
import time
from typing import Any, Callable, Dict, Iterator, List, Optional

from waitress.channel import ClientDisconnected

from iaccode_agui.demo import wire
from iaccode_agui.demo.tasks import ABORT, DATA, END, ERROR, RAW, Item, Subscriber

POLL_SECONDS = 0.25  # how often a silent stream checks for a gone client or a stopping runtime


class EventStream:
    """Iterates SSE bytes for one subscriber until its turn, its task or the runtime ends."""

    def __init__(self, sub: Subscriber, rpc_id: Any, *, write: Callable[[bytes], Any], environ: Dict[str, Any],
                 ping_interval: float, pings: bool, on_close: Callable[[], None]) -> None:
        self._sub = sub
        self._on_close = on_close
        self._id_json = wire.rpc_id_json(rpc_id)
        self._write = write
        self._disconnected: Optional[Callable[[], bool]] = environ.get("waitress.client_disconnected")
        self._ping_interval = ping_interval
        self._pings = pings
        self._closed = False
        self._body = self._run()

    def __iter__(self) -> "EventStream":
        return self

    def __next__(self) -> bytes:
        return next(self._body)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._body.close()
        finally:
            self._sub.task.unsubscribe(self._sub)
            self._on_close()

    def _gone(self) -> bool:
        return self._sub.task.store.stopping or bool(self._disconnected and self._disconnected())

    def _run(self) -> Iterator[bytes]:
        # Headers go out now, not with the first event, so a client's read timeout only ever measures silence.
        self._write(b"")
        last_sent = time.monotonic()
        while True:
            if self._pings:
                wait = min(POLL_SECONDS, max(0.0, last_sent + self._ping_interval - time.monotonic()))
            else:
                wait = POLL_SECONDS
            items = self._sub.take(wait)
            if not items:
                if self._gone():
                    return
                if self._pings and time.monotonic() - last_sent >= self._ping_interval:
                    yield wire.ping_comment()
                    last_sent = time.monotonic()
                continue
            chunk, finished, abort = self._render(items)
            if chunk:
                yield chunk
                last_sent = time.monotonic()
            if abort:
                # Leave without the chunked terminator: waitress drops the connection quietly on this error.
                raise ClientDisconnected("scripted connection drop")
            if finished:
                return

    def _render(self, items: List[Item]) -> "tuple":
        """Join what is queued into one write; stop at the first item that ends the stream."""
        parts = []
        for kind, payload in items:
            if kind == DATA:
                parts.append(wire.data_frame(payload, self._id_json))
            elif kind == RAW:
                parts.append(payload)
            elif kind == ERROR:
                parts.append(wire.error_frame(payload, self._id_json))
                return b"".join(parts), True, False
            elif kind == ABORT:
                parts.append(payload)
                return b"".join(parts), True, True
            elif kind == END:
                return b"".join(parts), True, False
        return b"".join(parts), False, False

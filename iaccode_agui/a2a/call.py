"""One streaming JSON-RPC call to the A2A runtime, read event by event.

Streams are read with ``raw.read1()`` into our own SSE decoder rather than ``iter_lines()``: ``read1``
returns as soon as any bytes arrive whatever the body framing, so each upstream event is forwarded
immediately, and it keeps text decoding (and its ISO-8859-1 guess for ``text/event-stream``) out of
``requests``' hands.
"""
import json
import socket
import threading
from collections import deque
from http.client import HTTPException
from typing import Any, Callable, Deque, Dict, Iterator, List, Optional

import requests
from urllib3.exceptions import HTTPError as Urllib3HTTPError
from urllib3.exceptions import ReadTimeoutError

from iaccode_agui.a2a.failures import A2AError, A2ATimeout, A2AUnavailable, rpc_error, rpc_result
from iaccode_agui.sse.codec import SSEDecodeError, SSEDecoder

_READ_SIZE = 65536


def _frame_decoder() -> Callable[[str], Any]:
    """``json.loads`` for SSE data: the C scanner on the whole text, the full decoder for anything else.

    A runtime's frame is one JSON document with nothing around it, so scanning it from offset 0 skips
    ``decode``'s per-call checks and its two whitespace scans; text with surrounding whitespace, or that
    is not JSON, goes through ``decode`` itself, which accepts or rejects it exactly as ``json.loads``.
    """
    decoder = json.JSONDecoder()
    scan, decode = decoder.scan_once, decoder.decode

    def loads(text: str) -> Any:
        try:
            value, end = scan(text, 0)
        except StopIteration:
            return decode(text)
        return value if end == len(text) else decode(text)
    return loads


_loads = _frame_decoder()
_scan = json.JSONDecoder().scan_once
# Everything a broken or timed-out body read can raise, across requests/urllib3/http.client versions.
STREAM_ERRORS = (requests.RequestException, Urllib3HTTPError, HTTPException, OSError, ValueError)


def shutdown_read(resp: Any) -> bool:
    """Shut down reading on the socket under a streaming response, so a read blocked in another thread
    returns now; whether it did.  Never raises.

    ``Response.close()`` from another thread does not wake a blocked read (and races with it); a socket
    shutdown does.  urllib3's ``HTTPResponse.shutdown`` (2.3 and later) refuses once the body has ended
    and the connection went back to the pool, so a pooled connection another request may be using is
    never shut down.
    """
    try:
        getattr(resp, "raw", resp).shutdown()
    except Exception:   # released to the pool already, or not a urllib3 response
        return False
    return True


def body_reader(raw: Any, size: int) -> Callable[[], bytes]:
    """Return a callable giving the next bytes of the body as soon as any arrive (b"" at the end).

    ``iter_content`` would hold bytes back until EOF on a close-delimited (HTTP/1.0) body; this never does.
    """
    return lambda: raw.read1(size, decode_content=True)


class A2AStream:
    """Iterator over the ``result`` objects of one streaming JSON-RPC call.

    After ``abort()`` (from any thread) iteration simply stops: the caller asked for it, so the broken read
    it causes is not an error; ``aborted`` tells the two endings apart.  Any other break raises
    ``A2AUnavailable``; an error frame raises ``A2ARpcError``; both end the stream.
    """

    def __init__(
        self,
        resp: Optional[requests.Response],
        rpc_id: str,
        method: str,
        *,
        preset: Optional[List[Dict[str, Any]]] = None,
        read_size: int = _READ_SIZE,
    ) -> None:
        self._resp = resp
        self._rpc_id = rpc_id
        self._method = method
        self._lock = threading.Lock()
        self._aborted = False
        self._done = resp is None
        self._results: Deque[Dict[str, Any]] = deque(preset or ())
        self._events: Deque[Any] = deque()
        self._decoder = SSEDecoder()
        self._read = body_reader(resp.raw, read_size) if resp is not None else None
        self.frames = len(self._results)
        # Called each time the stream is about to wait for the network (the reader flushes its batch).
        self.before_read: Optional[Callable[[], None]] = None

    @property
    def aborted(self) -> bool:
        return self._aborted

    @property
    def comments(self) -> int:
        """Keep-alive comments seen so far (the runtime pings every 15 s)."""
        return self._decoder.comments

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        return self

    def __enter__(self) -> "A2AStream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __next__(self) -> Dict[str, Any]:
        while True:
            if self._aborted:
                self._finish()
                raise StopIteration
            if self._results:
                return self._results.popleft()
            if self._events:
                event = self._events.popleft()
                # The common frame (a result object for this call), checked inline with one JSON scan.
                # Anything else goes to ``_frame``, which decides and raises.
                data = event.data
                try:
                    body, end = _scan(data, 0) if event.event == "message" else (None, -1)
                except (StopIteration, ValueError):
                    body, end = None, -1
                if end == len(data) and body.__class__ is dict and "error" not in body:
                    result = body.get("result")
                    echoed = body.get("id")
                    if result.__class__ is dict and (echoed is None or echoed == self._rpc_id):
                        self.frames += 1
                        return result
                result = self._frame(event)
                if result is not None:
                    return result
                continue
            if self._done:
                raise StopIteration
            self._fill()

    def _fill(self) -> None:
        if self.before_read is not None:
            self.before_read()
        try:
            chunk = self._read()
        except STREAM_ERRORS as exc:
            self._finish()
            if self._aborted:
                raise StopIteration from None
            if isinstance(exc, (ReadTimeoutError, socket.timeout, requests.Timeout)) or "timed out" in str(exc):
                raise A2ATimeout("%s: read timeout while streaming from the A2A runtime" % self._method) from exc
            raise A2AUnavailable("%s: the A2A stream broke off: %s" % (self._method, exc)) from exc
        if not chunk:
            truncated = self._decoder.has_pending
            self._decoder.close()
            self._finish()
            if truncated and not self._aborted:
                raise A2AUnavailable("%s: the A2A stream ended in the middle of an event" % self._method)
            raise StopIteration
        try:
            self._events.extend(self._decoder.feed(chunk))
        except SSEDecodeError as exc:
            self._finish()
            raise A2AUnavailable("%s: the A2A stream is not valid SSE: %s" % (self._method, exc)) from exc

    def _frame(self, event: Any) -> Optional[Dict[str, Any]]:
        """Turn one SSE event into a result, raising (and ending the stream) on an error frame.

        The whole rule; ``__next__`` answers the common frame itself and gives this every other one.
        """
        if event.event not in ("message", "error"):
            return None  # not an A2A frame type; SSE consumers ignore event types they do not listen to
        self.frames += 1
        try:
            body = _loads(event.data)
        except ValueError as exc:
            self._finish()
            raise A2AUnavailable("%s: the A2A stream sent a frame that is not JSON" % self._method) from exc
        if event.event == "error" or (isinstance(body, dict) and "error" in body):
            self._finish()
            error = body.get("error") if isinstance(body, dict) else None
            if error is None:
                raise A2AUnavailable("%s: the A2A stream sent an error event without an error" % self._method)
            raise rpc_error(error)
        try:
            return rpc_result(body, self._rpc_id, self._method)
        except A2AError:
            self._finish()
            raise

    def abort(self) -> None:
        """Stop the stream from any thread, waking a read blocked in the owner thread.

        Only the socket is touched here; releasing the response stays with the owner thread, because
        closing it concurrently with a read corrupts urllib3's state.  The upstream task keeps running:
        cancelling it is a separate ``CancelTask``.
        """
        with self._lock:  # serialised with _finish(), so the socket is never shut down after release
            if self._aborted:
                return
            self._aborted = True
            if not self._done and self._resp is not None:
                shutdown_read(self._resp)

    def close(self) -> None:
        """Release the response (owner thread only; use ``abort()`` from other threads)."""
        self._finish()

    def _finish(self) -> None:
        with self._lock:
            self._done = True
            resp, self._resp = self._resp, None
        self._events.clear()
        if resp is not None:
            try:
                resp.close()
            except Exception:  # pragma: no cover - closing a broken response must not mask the real error
                pass


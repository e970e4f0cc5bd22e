"""A byte-for-byte TCP relay on loopback whose live connections a test can cut at will.

It stands between a browser and the adapter so a test can break a stream mid-run the way a network
does (both directions closed, no HTTP-level goodbye) while new connections keep working.
"""
import socket
import threading
from typing import Callable, List, Optional, Tuple

MAX_CONNECTIONS = 64


class TcpRelay:
    """``cut_first_when``, if given, sees what the first connection has sent the client so far after each
    chunk; when it says so, that connection is cut right there (a break at a chosen point of a stream)."""

    def __init__(self, target_host: str, target_port: int,
                 cut_first_when: Optional[Callable[[bytes], bool]] = None) -> None:
        self.target = (target_host, target_port)
        self.cut_first_when = cut_first_when
        self.connections = 0
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port = self.listener.getsockname()[1]
        self.url = "http://127.0.0.1:%d/" % self.port
        self.pairs: List[Tuple[socket.socket, socket.socket]] = []
        self.cuts = 0
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, name="relay-accept", daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            with self._lock:
                if len(self.pairs) >= MAX_CONNECTIONS:
                    client.close()
                    continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self.pairs.append((client, upstream))
                self.connections += 1
                watch = self.cut_first_when if self.connections == 1 else None
            pair = (client, upstream)
            for source, sink, check in ((client, upstream, None), (upstream, client, watch)):
                threading.Thread(target=self._pump, args=(source, sink, pair, check), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, pair: Tuple[socket.socket, socket.socket],
              check: Optional[Callable[[bytes], bool]]) -> None:
        seen = b""
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                sink.sendall(data)
                if check is not None:
                    seen += data
                    if check(seen):
                        with self._lock:
                            self.cuts += 1
                        break
        except OSError:
            pass
        self._drop(pair)

    def _drop(self, pair: Tuple[socket.socket, socket.socket]) -> None:
        with self._lock:
            if pair in self.pairs:
                self.pairs.remove(pair)
        for sock in pair:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    def cut(self) -> int:
        """Break every connection open right now; returns how many were cut."""
        with self._lock:
            pairs = list(self.pairs)
        for pair in pairs:
            self._drop(pair)
        self.cuts += len(pairs)
        return len(pairs)

    def close(self) -> None:
        """Stop relaying; the connections closed here are not counted as cuts."""
        self._closed = True
        self.listener.close()
        with self._lock:
            pairs = list(self.pairs)
        for pair in pairs:
            self._drop(pair)

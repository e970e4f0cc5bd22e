"""The terminal client re-attaches with Last-Event-ID when its connection breaks mid-run."""
import io
import socket
import threading
from typing import List

from iaccode_agui.client import main


class CuttingProxy:
    """A TCP relay to the adapter that cuts the first connection right after the first SSE event."""

    def __init__(self, port: int) -> None:
        self.target = ("127.0.0.1", port)
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.url = "http://127.0.0.1:%d/" % self.listener.getsockname()[1]
        self.connections = 0
        self.cuts = 0
        self._threads: List[threading.Thread] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            upstream = socket.create_connection(self.target)
            cut = self.connections == 1
            for source, sink, watch in ((client, upstream, False), (upstream, client, cut)):
                thread = threading.Thread(target=self._pump, args=(source, sink, watch), daemon=True)
                thread.start()
                self._threads.append(thread)

    def _pump(self, source: socket.socket, sink: socket.socket, cut: bool) -> None:
        seen = b""
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                sink.sendall(data)
                seen += data
                if cut and b'"RUN_STARTED"' in seen and seen.endswith(b"\r\n"):
                    self.cuts += 1
                    break
        except OSError:
            pass
        for sock in (source, sink):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    def close(self) -> None:
        self.listener.close()


def test_client_reattaches_after_a_cut_connection(adapter_factory):
    adapter = adapter_factory(reconnect_grace=5.0)
    proxy = CuttingProxy(adapter.server.port)
    try:
        out = io.StringIO()
        code = main(["--url", proxy.url, "--cwd", adapter.workspace, "--thread", "cut", "sleep 1"],
                    input_fn=lambda prompt: "", out=out)
        text = out.getvalue()
    finally:
        proxy.close()
    assert proxy.cuts == 1 and proxy.connections >= 2
    assert code == 0, text
    assert "re-attaching after event" in text and "I slept for 1 seconds." in text
    assert adapter.app.metrics.value("agui_reattach_total") == 1

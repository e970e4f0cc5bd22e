"""The terminal client re-attaches with Last-Event-ID when its connection breaks mid-run."""
import io

import pytest

from iaccode_agui.client import main
from tests.tcp_relay import TcpRelay


def cut_after_first_event(seen: bytes) -> bool:
    return b'"RUN_STARTED"' in seen and seen.endswith(b"\r\n")


@pytest.mark.slow
def test_client_reattaches_after_a_cut_connection(adapter_factory):
    adapter = adapter_factory(reconnect_grace=5.0)
    proxy = TcpRelay("127.0.0.1", adapter.server.port, cut_first_when=cut_after_first_event)
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

"""A server stopping while the heartbeat timer writes to one of its responses.

The timer's ``write_idle`` sends on a response's socket while it holds that channel's output lock; every
other close of a waitress channel (``handle_close``) takes that lock first.  The server's own shutdown
must as well: a socket closed under a send in progress can be a descriptor that another connection of the
process (a new client, an upstream call) gets next, and the heartbeat's bytes would go there.
"""
import http.client
import threading

from iaccode_agui import idle_write
from iaccode_agui.serving import ServerThread
from tests.harness import wait_for
from tests.test_idle_write import _streaming_app


def test_shutdown_does_not_close_a_socket_while_the_timer_is_sending_on_it(monkeypatch):
    seen: dict = {}
    proceed = threading.Event()
    server = ServerThread(_streaming_app(seen, proceed), threads=4, slice_seconds=0.05)
    in_send, resume = threading.Event(), threading.Event()
    closed_under_send = []
    real_send_now = idle_write.send_now

    def send_now(sock, data, *args):
        in_send.set()
        resume.wait(15)                          # a switch to another thread between fileno() and send
        closed_under_send.append(sock.fileno() == -1)
        return real_send_now(sock, data, *args)

    monkeypatch.setattr(idle_write, "send_now", send_now)
    stopper = threading.Thread(target=server.stop, kwargs={"timeout": 15}, daemon=True)
    conn = http.client.HTTPConnection(server.host, server.port, timeout=10)
    try:
        conn.request("GET", "/stream")
        response = conn.getresponse()
        assert response.read1(64) == b"data: first\n\n"
        assert wait_for(lambda: seen.get("first_out"), 10)
        writer = threading.Thread(target=seen["write_idle"], args=(b": heartbeat\n\n",), daemon=True)
        writer.start()
        assert in_send.wait(10)
        sock = next(iter(server.server.active_channels.values())).socket
        stopper.start()                          # the response's worker stays parked: shutdown closes it
        wait_for(lambda: sock.fileno() == -1, 6)   # before the fix it is closed after the 2 s worker wait
        resume.set()
        writer.join(10)
        assert closed_under_send == [False], "the socket was closed while the timer was sending on it"
    finally:
        resume.set()
        proceed.set()
        conn.close()
        stopper.join(15) if stopper.is_alive() or stopper.ident else server.stop()

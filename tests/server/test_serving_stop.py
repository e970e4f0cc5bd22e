"""Stopping the background waitress server: its worker threads end before its sockets close."""
import threading
import time

import requests

from iaccode_agui.server.serving import ServerThread


def test_stop_closes_the_wake_up_pipe_only_after_the_worker_threads_have_left():
    """A worker still finishing a response when the loop closes the trigger pipe pulls it anyway: EBADF
    logged as a servicing error, or a byte written into a descriptor reused meanwhile."""
    finish = threading.Event()

    def app(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain")])

        def body():
            yield b"first\n"
            while not finish.wait(0.02):
                yield b"."
            time.sleep(0.2)          # the response is still being finished when stop() begins
            yield b"end\n"
        return body()

    server = ServerThread(app, threads=4, slice_seconds=0.05)
    trigger = server.server.trigger
    threads_at_close = []
    close = trigger._close

    def recording_close():
        threads_at_close.append(sum(1 for thread in server.workers.threads if thread.is_alive()))
        close()

    trigger._close = recording_close
    response = requests.get(server.url, stream=True, timeout=10)
    next(response.iter_content(6))
    finish.set()                     # the application ends its stream, as AguiApp.close() makes it do
    server.stop()
    response.close()
    assert threads_at_close == [0]

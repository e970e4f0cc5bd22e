"""gunicorn recipe for iaccode_agui: several worker processes on one state dir and one A2A runtime.

    IAC_CODE_AGUI_A2A_URL=http://127.0.0.1:41242/ IAC_CODE_AGUI_A2A_TOKEN=... \\
    IAC_CODE_AGUI_STATE_DIR=/var/lib/iaccode-agui \\
        gunicorn -c "$(python -m iaccode_agui --print-deploy-dir)/gunicorn.conf.py" --bind 127.0.0.1:8000 --workers 2

This file ships inside the package; ``python -m iaccode_agui --print-deploy-dir`` prints its directory.

Every choice below follows from one fact: an SSE stream holds its worker thread for the whole run.

* ``gthread`` worker: a thread per open stream.  The ``sync`` worker serves one request at a time and is
  killed after ``--timeout`` while a stream is open; this file refuses to start with it (and the
  application refuses to load under it, should the file not be used).
* ``threads`` = streams per worker plus room for short requests (health, cancel, metrics, stop): the
  adapter answers ``429 RUNTIME_CAPACITY_EXCEEDED`` at ``threads - 8`` active runs instead of letting
  gunicorn queue a request silently behind busy threads.
* ``timeout``: the gthread worker reports to the arbiter from its main loop, so an open stream never counts
  as a hung worker; the timeout only catches a stuck process.  It is still kept well above the SSE
  heartbeat interval so no proxy or server rule tuned to it cuts a quiet stream.
* ``graceful_timeout``: on SIGTERM or a reload a worker stops accepting and lets its streams finish this
  long; then ``worker_exit`` cancels what is left, cleanly (each client gets its ``RUN_ERROR``).
* ``keepalive``: long enough for a proxy's pooled upstream connections.
* ``control_socket_disable``: gunicorn 25.1+ otherwise opens a control socket in ``$XDG_RUNTIME_DIR`` or
  ``~/.gunicorn/``; nothing here uses it, and on a shared host a service should not leave sockets in a home
  directory.  Older gunicorn ignores the setting.

Environment knobs read here: ``AGUI_GUNICORN_THREADS`` (default 64), ``AGUI_HEARTBEAT`` (seconds,
default 15; the adapter's ``--heartbeat-interval``) and ``AGUI_ADAPTER_ARGS`` (more flags of
``python -m iaccode_agui``, e.g. ``--reconnect-grace 30``).  Any other adapter setting: the
``IAC_CODE_AGUI_*`` variables.
"""
import os
import shlex

threads = int(os.environ.get("AGUI_GUNICORN_THREADS", "64"))
heartbeat = float(os.environ.get("AGUI_HEARTBEAT", "15"))

worker_class = "gthread"
workers = 2
timeout = max(120, int(heartbeat * 4))
graceful_timeout = 30
keepalive = 75
control_socket_disable = True
worker_connections = threads + 256
adapter_args = ["--max-active-runs", str(max(1, threads - 8)), "--heartbeat-interval", str(heartbeat)]
adapter_args += shlex.split(os.environ.get("AGUI_ADAPTER_ARGS", ""))
wsgi_app = "iaccode_agui.wsgi:create_app(%s)" % ", ".join(repr(arg) for arg in adapter_args)


def on_starting(server):
    """Refuse a worker class that cannot hold a stream open while serving other requests."""
    if server.cfg.worker_class_str == "sync" or server.cfg.threads < 4 and server.cfg.worker_class_str == "gthread":
        raise SystemExit("iaccode_agui: use the gthread worker with --threads 4 or more (each open SSE stream "
                         "holds a thread; the sync worker serves one request at a time and is killed after "
                         "--timeout while a stream is open)")


def worker_exit(server, worker):
    """After the graceful timeout: cancel this worker's remaining runs so each client sees how it ended."""
    close = getattr(getattr(worker, "wsgi", None), "close", None)
    if callable(close):
        close(5.0)

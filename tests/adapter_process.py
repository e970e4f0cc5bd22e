"""An adapter as its own process, for tests that kill it like a real deployment would be killed."""
import os
import signal
import subprocess
import sys
import time
import uuid
from typing import Any, Dict, List, Optional, Tuple

import requests

from iaccode_agui.server.upstream import free_loopback_port
from tests.agui_checker import check_sequence, parse_sse


class AdapterProcess:
    """``python -m iaccode_agui`` as its own process, so it can be killed like a real deployment."""

    def __init__(self, a2a_url: str, a2a_token: str, state_dir: str, workspace: str, log_path: str) -> None:
        self.port = free_loopback_port()
        env = dict(os.environ, IAC_CODE_AGUI_ALLOWED_CWDS=workspace)
        self._log = open(log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "iaccode_agui", "--a2a-url", a2a_url, "--a2a-token", a2a_token,
             "--port", str(self.port), "--state-dir", state_dir, "--heartbeat-interval", "1"],
            env=env, stdout=subprocess.PIPE, stderr=self._log, start_new_session=True)
        line = self.proc.stdout.readline().decode()
        assert "listening on" in line, line
        self.url = "http://127.0.0.1:%d/" % self.port

    def kill(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        self._log.close()


def start_cli(args: List[str], env: Dict[str, str], log_path: str, attempts: int = 5,
              **popen: Any) -> Tuple[subprocess.Popen, int]:
    """``python -m iaccode_agui ARGS --port P`` started and listening; (process, port).

    A free port is only free when it is picked: another process on the machine (a client's outgoing
    connection, another test's server) can take it before the adapter binds it.  The adapter then exits
    naming the port, and the start is simply tried again on a new one.  stdout is a pipe whose first
    line (the listening banner) was read; stderr goes to ``log_path``.
    """
    for _ in range(attempts):
        port = free_loopback_port()
        with open(log_path, "ab") as log:
            proc = subprocess.Popen([sys.executable, "-m", "iaccode_agui"] + list(args) + ["--port", str(port)],
                                    env=env, stdout=subprocess.PIPE, stderr=log, **popen)
        line = proc.stdout.readline().decode()
        if "listening on http://127.0.0.1:%d/" % port in line:
            return proc, port
        proc.wait(30)
        with open(log_path, "rb") as log:
            tail = log.read()[-3000:]
        if b"address already in use" not in tail:
            raise AssertionError("the adapter did not start (exit %s): %r\n%s"
                                 % (proc.returncode, line, tail.decode("utf-8", "replace")))
    raise AssertionError("no free port after %d attempts" % attempts)


def run_body(workspace: str, text: str, thread: str, ros: str = "inv-1") -> Dict[str, Any]:
    """A RunAgentInput for a new turn, without an in-process adapter to build it."""
    return {"threadId": thread, "runId": "run-" + uuid.uuid4().hex[:8], "state": {}, "tools": [], "context": [],
            "messages": [{"id": "m-" + uuid.uuid4().hex[:8], "role": "user", "content": text}],
            "forwardedProps": {"iacCode": {"schemaVersion": 1, "rosInvocationId": ros, "cwd": workspace}}}


def post_run(url: str, body: Dict[str, Any], headers: Optional[Dict[str, str]] = None) -> Any:
    base = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    base.update(headers or {})
    return requests.post(url, json=body, headers=base, stream=True, timeout=120)


def read_then_kill(process: AdapterProcess, response: Any, marker: bytes, count: int,
                   limit: float = 60.0) -> Tuple[List[Dict[str, Any]], List[Optional[int]]]:
    """Read a streamed run until ``marker`` was seen ``count`` times, SIGKILL the adapter, return what arrived.

    Only complete SSE records count: what a client has really seen when its server dies.
    """
    raw = b""
    chunks = response.iter_content(chunk_size=None)
    deadline = time.monotonic() + limit
    while raw.count(marker) < count and time.monotonic() < deadline:
        raw += next(chunks)
    process.kill()
    response.close()
    seen, ids, _ = parse_sse(raw[:raw.rindex(b"\n\n") + 2])
    return seen, ids


def reattach_rest(successor: Any, body: Dict[str, Any], seen: List[Dict[str, Any]], ids: List[Optional[int]],
                  timeout: float = 30.0) -> List[Dict[str, Any]]:
    """Re-attach to ``successor`` after the last id seen; returns the whole run (what was seen + the rest).

    The rest must carry on the ids without a gap, and the whole must be one well-formed AG-UI run.
    """
    answer = successor.post(body, headers={"Last-Event-ID": str(ids[-1])}, timeout=timeout)
    assert answer.status_code == 200, answer.text
    rest, rest_ids, _ = parse_sse(answer.content)
    assert rest_ids == list(range(ids[-1] + 1, ids[-1] + 1 + len(rest)))
    whole = seen + rest
    check_sequence(whole)
    return whole

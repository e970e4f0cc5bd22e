"""Process and HTTP plumbing of the crash soak: the adapter as a killable process, and an SSE run reader.

Kept apart from the soak logic in ``crash_soak.py`` (which re-exports these names) so that the chaos and
its invariants read on their own, and a cut stream or a killed process is handled in exactly one place.
"""
import json
import os
import signal
import subprocess
import sys
import threading
import uuid
from typing import Any, Dict, List, Optional, Sequence, Tuple

import requests

from . import ROOT
from .procs import child_env, free_port, stop_process, wait_in_log

TOKEN = "soak-upstream-token"


class AdapterProcess:
    """``python -m iaccode_agui`` on a fresh loopback port; each start logs to its own file."""

    def __init__(self, upstream: str, state_dir: str, workspace_root: str, log_dir: str,
                 token: Optional[str] = TOKEN, extra_args: Sequence[str] = ()) -> None:
        self.upstream, self.state_dir, self.root, self.log_dir, self.token = (
            upstream, state_dir, workspace_root, log_dir, token)
        self.extra_args = list(extra_args)   # more flags; a repeated flag overrides the defaults below
        self.proc: Optional[subprocess.Popen] = None
        self.url: Optional[str] = None
        self.starts = 0

    def start(self, timeout: float = 20.0) -> str:
        self.starts += 1
        log_path = os.path.join(self.log_dir, "adapter-%03d.log" % self.starts)
        env = child_env({"IAC_CODE_AGUI_ALLOWED_CWDS": self.root})
        command = [sys.executable, "-m", "iaccode_agui", "--a2a-url", self.upstream, "--port", str(free_port()),
                   "--state-dir", self.state_dir, "--threads", "48", "--heartbeat-interval", "1",
                   "--drain-timeout", "5"] + (["--a2a-token", self.token] if self.token else []) + self.extra_args
        with open(log_path, "wb") as log:
            self.proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        # Up to the first "/" after the address: stdout and stderr share the file, and a log line of another
        # thread (a take-over at start-up) can land between the address and the end of its line.
        found = wait_in_log(self.proc, log_path, rb"listening on (https?://[^/\s]+/)", timeout)
        self.url = found.group(1).decode().rstrip("/") + "/"
        return self.url

    def kill(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def terminate(self, timeout: float = 20.0) -> Optional[int]:
        """SIGTERM must drain and exit 0; the exit status, or None when it had to be killed."""
        assert self.proc is not None
        return stop_process(self.proc, timeout)


class Gate:
    """Where the adapter listens now; clients wait here while it restarts, and learn whether it did."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.url: Optional[str] = None
        self.generation = 0

    def current(self, timeout: float = 30.0) -> Tuple[str, int]:
        with self._cond:
            if not self._cond.wait_for(lambda: self.url is not None, timeout):
                raise RuntimeError("the adapter did not come back")
            return str(self.url), self.generation

    def set(self, url: Optional[str]) -> None:
        with self._cond:
            self.url = url
            self.generation += 1 if url else 0
            self._cond.notify_all()

    def killed_since(self, generation: int, timeout: float = 30.0) -> bool:
        """Whether a kill explains a failure seen on ``generation`` (returns once the restart is done)."""
        with self._cond:
            return self._cond.wait_for(lambda: self.url is None or self.generation > generation, timeout) \
                and self._cond.wait_for(lambda: self.url is not None, timeout)


class Result:
    def __init__(self, status: int = 0, code: Optional[str] = None, dropped: bool = False, detail: str = "") -> None:
        self.status, self.code, self.dropped, self.detail = status, code, dropped, detail
        self.events: List[Dict[str, Any]] = []

    @property
    def final(self) -> Optional[Dict[str, Any]]:
        last = self.events[-1] if self.events else None
        return last if last and last["type"] in ("RUN_FINISHED", "RUN_ERROR") else None

    @property
    def finished(self) -> bool:
        return self.status == 200 and self.final is not None and self.final["type"] == "RUN_FINISHED"

    @property
    def interrupts(self) -> List[Dict[str, Any]]:
        outcome = (self.final or {}).get("outcome") or {}
        return list(outcome.get("interrupts") or []) if outcome.get("type") == "interrupt" else []

    def session(self) -> Optional[Dict[str, Any]]:
        return next((e["value"] for e in self.events if e["type"] == "CUSTOM"
                     and e.get("name") == "iac-code.session.v1"), None)


def run_body(root: str, thread: str, text: Optional[str],
             resume: Optional[List[Dict[str, Any]]] = None) -> Dict[str, Any]:
    """A RunAgentInput for ``thread``, working in ``<root>/<thread>``: a new turn, or a resume when given."""
    body: Dict[str, Any] = {
        "threadId": thread, "runId": "run-" + uuid.uuid4().hex[:12], "state": {}, "tools": [], "context": [],
        "messages": [] if text is None else [{"id": uuid.uuid4().hex[:8], "role": "user", "content": text}],
        "forwardedProps": {"iacCode": {"schemaVersion": 1, "rosInvocationId": "inv-" + thread,
                                       "cwd": os.path.join(root, thread)}}}
    if resume is not None:
        body["resume"] = resume
    return body


def post_run(session: requests.Session, url: str, body: Dict[str, Any], on_event: Any = None,
             headers: Optional[Dict[str, str]] = None) -> Result:
    """POST a RunAgentInput and read its SSE stream to the end; a cut connection is ``dropped``."""
    sent = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    sent.update(headers or {})
    try:
        response = session.post(url, data=json.dumps(body), stream=True, timeout=(3, 30), headers=sent)
    except requests.RequestException as exc:
        return Result(dropped=True, detail=type(exc).__name__)
    with response:
        if response.status_code != 200:
            try:
                return Result(response.status_code, response.json()["error"]["code"])
            except (ValueError, KeyError, TypeError, requests.RequestException):
                return Result(response.status_code, None, detail=response.text[:200])
        result = Result(200)
        try:
            for line in response.iter_lines():
                if line.startswith(b"data:"):
                    result.events.append(json.loads(line[5:].strip()))
                    if on_event is not None:
                        on_event(result.events[-1])
        except (requests.RequestException, ValueError) as exc:
            result.detail = type(exc).__name__
        result.dropped = result.final is None
        return result


def remember_session(event: Dict[str, Any], into: Dict[str, Any]) -> None:
    if event["type"] == "CUSTOM" and event.get("name") == "iac-code.session.v1":
        into.update(executionId=event["value"].get("executionId"), taskId=event["value"].get("taskId"))

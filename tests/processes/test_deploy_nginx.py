"""A real nginx over ``iaccode_agui/deploy/nginx.conf`` in front of two adapter hosts, each with its own runtime.

Each "host" is an adapter process (``python -m iaccode_agui``) with its own scripted runtime process and its
own state dir, on its own loopback port, as two machines behind one load balancer would be.  nginx hashes
``X-AgentCore-Session-ID``; which host served a thread is read from the hosts' state dirs.
"""
import os
import time
import uuid
from typing import Any, Dict, Iterator, List, Optional

import pytest

from iaccode_agui.state.store import ThreadStore
from iaccode_agui.server.upstream import free_loopback_port
from tests.agui_checker import check_sequence, validate_models
from tests.tools_loader import load_tool

procs = load_tool("toolkit.deploy")
soak_procs = load_tool("toolkit.soak")
TOKEN = "nginx-runtime-token"
GRACE = 2.0          # the hosts' --reconnect-grace: a re-attach within it continues the run
HEARTBEAT = 0.5



class Host:
    def __init__(self, base: str, name: str, workspace: str) -> None:
        self.name = name
        self.state_dir = os.path.join(base, name, "state")
        os.makedirs(os.path.join(base, name))
        self.runtime = procs.RuntimeProcess(os.path.join(base, name), TOKEN, slow_interval=0.05,
                                            allowed_cwds=[workspace])
        self.adapter = soak_procs.AdapterProcess(
            self.runtime.url, self.state_dir, workspace, os.path.join(base, name), token=TOKEN,
            extra_args=["--heartbeat-interval", str(HEARTBEAT), "--reconnect-grace", str(GRACE)])
        self.url = self.adapter.start()

    def has(self, thread: str) -> Any:
        return ThreadStore(self.state_dir).load(thread)

    def stop(self) -> List[Optional[int]]:
        return [self.adapter.terminate(), self.runtime.stop()]


class Front:
    def __init__(self, base: str) -> None:
        self.workspace = os.path.realpath(os.path.join(base, "ws"))
        os.makedirs(self.workspace)
        self.hosts = [Host(base, name, self.workspace) for name in ("host-a", "host-b")]
        upstreams = [host.url.split("//")[1].rstrip("/") for host in self.hosts]
        for attempt in range(3):
            try:
                self.nginx = procs.NginxProcess(os.path.join(base, "nginx-%d" % attempt), free_loopback_port(),
                                                upstreams)
                break
            except RuntimeError:
                if attempt == 2:
                    raise

    def body(self, text: Optional[str], thread: str, run: Optional[str] = None) -> Dict[str, Any]:
        return {"threadId": thread, "runId": run or "run-" + uuid.uuid4().hex[:10], "state": {}, "tools": [],
                "context": [], "messages": [] if text is None else [
                    {"id": "m-" + uuid.uuid4().hex[:8], "role": "user", "content": text}],
                "forwardedProps": {"iacCode": {"schemaVersion": 1, "rosInvocationId": "inv-" + thread,
                                               "cwd": self.workspace}}}

    def post(self, body: Dict[str, Any], headers: Optional[Dict[str, str]] = None) -> Any:
        conn = procs.PinnedConnection(self.nginx.url)
        sent = {"X-AgentCore-Session-ID": body["threadId"]}
        sent.update(headers or {})
        response = conn.request("POST", "/", body, headers=sent)
        response.pinned = conn
        return response

    def host_of(self, thread: str) -> Host:
        owners = [host for host in self.hosts if host.has(thread) is not None]
        assert len(owners) == 1, (thread, [h.name for h in owners])
        return owners[0]


@pytest.fixture(scope="module")
def front(tmp_path_factory) -> Iterator[Front]:
    if procs.nginx_binary() is None:
        pytest.skip("nginx is not installed (Debian: apt-get install nginx-light); .ci/run installs it")
    front = Front(str(tmp_path_factory.mktemp("nginx")))
    try:
        yield front
    finally:
        status = front.nginx.stop()
        codes = [code for host in front.hosts for code in host.stop()]
    assert status == 0 and codes == [0, 0, 0, 0], (status, codes)


def _read(response: Any, stamps: Optional[List[float]] = None) -> List[Dict[str, Any]]:
    assert response.status == 200, (response.status, response.read())
    events = []
    for event in procs.sse_events(response):
        if stamps is not None:
            stamps.append(time.monotonic())
        events.append(event)
    response.pinned.close()
    return events


def _checked(events: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    clean = [{k: v for k, v in e.items() if k != "_id"} for e in events if e["type"] != ":"]
    validate_models(clean)
    check_sequence(clean)
    return clean


def test_every_request_of_a_thread_lands_on_the_same_host(front):
    threads = ["pin-%02d" % n for n in range(12)]
    for _ in range(3):
        for thread in threads:
            events = _checked(_read(front.post(front.body("hello", thread))))
            assert events[-1]["type"] == "RUN_FINISHED"
    for thread in threads:
        assert len(front.host_of(thread).has(thread).run_digests) == 3   # all three runs on that host
    # Which host a name hashes to depends on the hosts' random ports: 12 names all land on one host about once
    # in a thousand port pairs.  More names, one run each, until both hosts are hit (48 more make a miss negligible).
    for n in range(49):
        per_host = {host.name: [t for t in threads if host.has(t) is not None] for host in front.hosts}
        if all(per_host.values()) or n == 48:
            break
        threads.append("pin-more-%02d" % n)
        assert _checked(_read(front.post(front.body("hello", threads[-1]))))[-1]["type"] == "RUN_FINISHED"
    # A host that refused a request would have been skipped by nginx, silently re-pinning its threads.
    assert front.nginx.upstream_failures() == []
    assert all(per_host.values()), per_host
    print("threads per host: %s" % {name: len(items) for name, items in per_host.items()})


def test_sse_events_arrive_progressively_through_nginx(front):
    stamps: List[float] = []
    events = _read(front.post(front.body("slow", "progressive")), stamps)
    deltas = [stamp for stamp, event in zip(stamps, events) if event["type"] == "TEXT_MESSAGE_CONTENT"]
    assert len(deltas) == 60
    gaps = [b - a for a, b in zip(deltas, deltas[1:])]
    spread = deltas[-1] - deltas[0]
    print("60 deltas over %.2f s through nginx; median gap %.3f s" % (spread, sorted(gaps)[len(gaps) // 2]))
    # The runtime paces them 50 ms apart: a buffering proxy would deliver them in one burst at the end.
    assert spread > 1.5 and sorted(gaps)[len(gaps) // 2] > 0.02, gaps


def test_heartbeats_pass_through_nginx(front):
    stamps: List[float] = []
    events = _read(front.post(front.body("sleep 2.5", "heartbeats")), stamps)
    beats = [stamp for stamp, event in zip(stamps, events) if event == {"type": ":", "comment": "heartbeat"}]
    assert len(beats) >= 3, [e["type"] for e in events]
    assert beats[-1] - beats[0] > 2 * HEARTBEAT * 0.8   # spread out, not flushed together at the end
    assert _checked(events)[-1]["type"] == "RUN_FINISHED"


def _task_state(host: Host, task_id: str) -> str:
    return host.runtime.get_task(task_id)["status"]["state"]


def test_a_client_disconnect_through_nginx_cancels_the_run(front):
    response = front.post(front.body("slow", "hangup"))
    events = []
    for event in procs.sse_events(response):
        events.append(event)
        if event["type"] == "TEXT_MESSAGE_CONTENT":
            break
    task = next(e["value"]["taskId"] for e in events if e["type"] == "CUSTOM")
    host = front.host_of("hangup")
    hung_up = time.monotonic()
    response.pinned.close()
    while time.monotonic() < hung_up + GRACE + 6 and _task_state(host, task) != "TASK_STATE_CANCELED":
        time.sleep(0.05)
    took = time.monotonic() - hung_up
    print("task cancelled %.2f s after the client hung up on nginx (reconnect grace %.0f s)" % (took, GRACE))
    assert _task_state(host, task) == "TASK_STATE_CANCELED"
    assert took >= GRACE * 0.9   # the grace held the run for a re-attach first
    assert _checked(_read(front.post(front.body("hello", "hangup"))))[-1]["type"] == "RUN_FINISHED"


def test_a_reattach_through_nginx_finds_the_run_and_gets_the_rest(front):
    body = front.body("slow", "reattach")
    response = front.post(body)
    first = []
    for event in procs.sse_events(response):
        first.append(event)
        if sum(1 for e in first if e["type"] == "TEXT_MESSAGE_CONTENT") == 10:
            break
    response.pinned.close()
    last_id = first[-1]["_id"]
    time.sleep(0.3)
    rest = _read(front.post(body, headers={"Last-Event-ID": str(last_id)}))
    assert rest[0]["_id"] == last_id + 1 and rest[-1]["type"] == "RUN_FINISHED"
    events = _checked(first + rest)
    text = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert text == "".join("slow-%d " % n for n in range(60)), text
    ids = [e["_id"] for e in first + rest if e["type"] != ":"]
    assert ids == list(range(ids[0], ids[0] + len(ids)))


def test_the_template_keeps_what_streaming_and_pinning_need():
    """What the live tests cannot tell apart: the adapter's own X-Accel-Buffering header also stops
    nginx from buffering, and a host is never marked down only while nothing fails."""
    text = procs.render_nginx_conf("127.0.0.1:1", ["127.0.0.1:2", "127.0.0.1:3"])
    lines = {line.strip() for line in text.splitlines() if not line.strip().startswith("#")}
    for directive in ("hash $http_x_agentcore_session_id consistent;", "proxy_buffering off;",
                      "proxy_read_timeout 3600s;", "proxy_next_upstream off;", "proxy_http_version 1.1;",
                      "server 127.0.0.1:2 max_fails=0;", "server 127.0.0.1:3 max_fails=0;",
                      "listen 127.0.0.1:1;"):
        assert directive in lines, directive
    assert "${" not in text

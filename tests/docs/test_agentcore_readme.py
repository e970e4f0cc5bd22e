"""The AgentCore curl examples of docs/http-api.rst (run, attach, stop) work as printed."""
import json
import re

from tests.agui_checker import parse_sse
from tests.harness import SSEReader
from tests.docs.test_readme import _literal_blocks, doc


def _examples():
    block = next(block for block in _literal_blocks(doc("http-api.rst")) if "/ag-ui/agent/stop" in block and "afterSequence" in block)
    commands = [command for command in block.split("\n\n") if command.strip()]
    parsed = []
    for command in commands:
        path = re.search(r"http://127\.0\.0\.1:\$PORT/([^\s\"]+)", command).group(1)
        body = json.loads(re.search(r"-d '(.*)'", command, re.S).group(1))
        headers = dict(re.findall(r"-H '([^:]+): ([^']+)'", command))
        parsed.append((path, body, headers))
    return parsed


def test_run_attach_and_stop_examples(adapter_factory, workspace):
    adapter = adapter_factory(default_cwd=workspace, auth_token="TOKEN")
    (run_path, run_body, headers), (attach_path, attach_body, _), (stop_path, stop_body, _) = _examples()
    assert (run_path, attach_path, stop_path) == ("ag-ui/agent", "ag-ui/agent", "ag-ui/agent/stop")
    assert run_body["forwardedProps"] == {} and attach_body["messages"] == []
    run_body = dict(run_body, messages=[dict(run_body["messages"][0], content="slow")])
    reader = SSEReader(adapter.post(run_body, path=run_path, headers=headers, stream=True))
    seen = reader.until("TEXT_MESSAGE_CONTENT")
    reader.close()
    after = attach_body["forwardedProps"]["agentcore"]["attach"]["afterSequence"]
    assert len(seen) > after
    attached = adapter.post(attach_body, path=attach_path, headers=headers, stream=True)
    assert attached.status_code == 200
    live = SSEReader(attached)
    events = live.until("TEXT_MESSAGE_CONTENT")
    assert parse_sse(live.raw)[1][0] == after + 1
    stop = adapter.post(stop_body, path=stop_path, headers=headers)
    assert stop.status_code == 204
    events = live.until("RUN_ERROR", limit=15)
    assert events[-1]["code"] == "RUN_CANCELLED"
    live.close()

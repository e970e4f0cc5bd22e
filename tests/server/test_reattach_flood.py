"""A flood of re-attaches to a run whose client is still attached and reading: at most one of them waits
for a take-over, the others are answered at once, so the flood cannot hold a worker per attempt."""
import json
import threading
import time

import pytest
import requests

from tests.harness import SSEReader


@pytest.mark.slow
def test_reattach_flood_waits_for_at_most_one_takeover(adapter_factory):
    adapter = adapter_factory()
    body = adapter.body("sleep 6", thread="flooded")
    reader = SSEReader(adapter.post(body, stream=True))
    reader.until("RUN_STARTED")
    durations = []
    codes = []
    lock = threading.Lock()

    def reattach() -> None:
        started = time.monotonic()
        response = requests.post(adapter.url, data=json.dumps(body), timeout=20,
                                 headers={"Content-Type": "application/json", "Last-Event-ID": "0"})
        with lock:
            durations.append(time.monotonic() - started)
            codes.append((response.status_code, response.json()["error"]["code"]))

    workers = [threading.Thread(target=reattach) for _ in range(20)]
    try:
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(30)
        assert codes == [(409, "RUN_ALREADY_ATTACHED")] * 20
        waited = [seconds for seconds in durations if seconds >= 1.5]   # a take-over wait is 2 s
        assert len(waited) <= 3, sorted(durations)
        assert reader.until("RUN_FINISHED", 20)[-1]["type"] == "RUN_FINISHED"    # the reading client kept the run
    finally:
        reader.close()

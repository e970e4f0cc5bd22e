"""Shared fixtures: a scripted runtime and an adapter in front of it, both on loopback port 0."""
import os
from typing import Iterator

import pytest

from iaccode_agui.demo import DemoServer
from tests.harness import Adapter

# Folders whose every test starts child processes or the real runtime: none is in the quick subset.
SLOW_FOLDERS = ("processes", "interop")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items) -> None:
    """Mark the tests of ``SLOW_FOLDERS`` ``slow`` before ``-m "not slow"`` deselects by marker."""
    for item in items:
        if item.path.parent.name in SLOW_FOLDERS:
            item.add_marker(pytest.mark.slow)


@pytest.fixture
def workspace(tmp_path) -> str:
    path = tmp_path / "ws"
    path.mkdir()
    return os.path.realpath(str(path))


@pytest.fixture
def demo() -> Iterator[DemoServer]:
    server = DemoServer.start(token="demo-token", ping_interval=0.5, slow_interval=0.2)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def adapter_factory(demo, tmp_path, workspace):
    made = []

    def make(**settings) -> Adapter:
        state_dir = settings.pop("state_dir", str(tmp_path / "state"))
        upstream = settings.pop("upstream_url", demo.url)
        token = settings.pop("upstream_token", demo.token)
        adapter = Adapter(upstream, token, state_dir, workspace, **settings)
        made.append(adapter)
        return adapter

    yield make
    for adapter in made:
        adapter.stop()


@pytest.fixture
def adapter(adapter_factory) -> Adapter:
    return adapter_factory()

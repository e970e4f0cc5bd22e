"""Fixtures shared by the tests that drive child processes."""
import shutil

import pytest

from tests.node_packages import Unavailable, node_modules


@pytest.fixture(scope="session")
def ag_ui_client_modules() -> str:
    if shutil.which("node") is None:
        pytest.skip("node is not installed: the @ag-ui/client HttpAgent test needs Node.js 18+")
    try:
        return node_modules()
    except Unavailable as missing:
        raise AssertionError(str(missing))

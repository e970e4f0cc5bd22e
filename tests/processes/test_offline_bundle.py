"""The air-gapped install: build the bundle, install it into a fresh venv with every package index out of
reach, and serve a demo run from the installed copy.

Only the build talks to the package registry.  The install runs with ``--no-index``, ``PIP_NO_INDEX=1``,
an unreachable ``PIP_INDEX_URL`` and no pip configuration files (this machine's pip.conf adds find-links
and mirrors), and a download of a package that is not in the bundle must fail to prove it.  The installed
adapter runs outside the checkout with no ``PYTHONPATH``, so it is the wheel's code that answers.
"""
import json
import os
import platform
import signal
import subprocess
import sys
import time
import uuid
import zipfile
from typing import Dict, Optional

import pytest
import requests

from tests import ROOT

TOOLS = os.path.join(ROOT, "tools")
sys.path.insert(0, TOOLS)
import check_py39  # noqa: E402
import offline_bundle  # noqa: E402

from iaccode_agui.server.upstream import free_loopback_port
from tests.agui_checker import check_stream  # noqa: E402

HOST_PLATFORM = "manylinux2014_%s" % platform.machine()
CURRENT = "%d.%d" % sys.version_info[:2]


def offline_env(tmp_path, **extra: str) -> Dict[str, str]:
    """The environment of an air-gapped host: no pip config, no index, nothing of the checkout."""
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("PIP_", "PYTHON", "VIRTUAL_ENV", "IAC_CODE_", "IACCODE_"))}
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env.update(HOME=str(home), PIP_CONFIG_FILE=os.devnull, PIP_NO_INDEX="1",
               PIP_INDEX_URL="http://127.0.0.1:9/unreachable/simple/", PIP_DISABLE_PIP_VERSION_CHECK="1")
    env.update(extra)
    return env


def run(command, **kwargs) -> subprocess.CompletedProcess:
    kwargs.setdefault("timeout", 300)
    return subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kwargs)


def wait_healthy(url: str, process: subprocess.Popen, timeout: float = 30) -> Optional[requests.Response]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        try:
            return requests.get(url + "health", timeout=1)
        except requests.ConnectionError:
            time.sleep(0.1)
    return None


def _interpreter(version: str) -> str:
    if version == CURRENT:
        return sys.executable
    found = check_py39.find_python39() if version == "3.9" else None
    if found is None:
        pytest.skip("no CPython %s interpreter on this machine" % version)
    return found


@pytest.mark.parametrize("python_version", sorted({CURRENT, "3.9"}))
def test_bundle_installs_and_serves_without_an_index(tmp_path, python_version):
    python = _interpreter(python_version)
    started = time.monotonic()
    repo_build_existed = os.path.exists(os.path.join(offline_bundle.REPO, "build"))

    bundle = offline_bundle.build_bundle(str(tmp_path / "bundle"), python_version, (HOST_PLATFORM,))
    built = time.monotonic()
    names = {wheel.name for wheel in bundle.wheels}
    assert {"iaccode-agui", "werkzeug", "requests", "jsonschema", "waitress", "markupsafe", "rpds-py",
            "attrs", "referencing", "jsonschema-specifications", "urllib3", "idna", "certifi",
            "charset-normalizer"} <= names
    assert os.path.exists(os.path.join(offline_bundle.REPO, "build")) == repo_build_existed
    # pure wheels wherever they exist: charset-normalizer publishes one next to its compiled ones
    assert all(wheel.pure for wheel in bundle.wheels if wheel.name not in ("markupsafe", "rpds-py"))
    pinned = open(os.path.join(bundle.path, "requirements.txt")).read()
    for wheel in bundle.wheels:
        assert "%s==%s" % (wheel.name, wheel.version) in pinned
        assert "--hash=sha256:%s" % offline_bundle.sha256_of(wheel.path) in pinned
    note = open(os.path.join(bundle.path, "INSTALL.txt")).read()
    assert "pip install --no-index --find-links wheelhouse iaccode_agui" in note
    assert "python -m iaccode_agui --demo" in note
    assert "rpds-py" in note and "glibc 2.17" in note

    env = offline_env(tmp_path)
    venv = tmp_path / "venv"
    created = run([python, "-m", "venv", str(venv)], env=env, cwd=str(tmp_path))
    assert created.returncode == 0, created.stdout
    venv_python = str(venv / "bin" / "python")
    install = run([venv_python, "-m", "pip", "install", "--no-index", "--find-links", "wheelhouse", "iaccode_agui"],
                  env=env, cwd=bundle.path)
    assert install.returncode == 0, install.stdout
    outside = run([venv_python, "-m", "pip", "download", "--no-deps", "-d", str(tmp_path / "dl"), "six"],
                  env=env, cwd=bundle.path, timeout=60)
    assert outside.returncode != 0, "pip reached an index: %s" % outside.stdout
    hashed = run([venv_python, "-m", "pip", "download", "--no-index", "--find-links", "wheelhouse",
                  "--require-hashes", "-r", "requirements.txt", "-d", str(tmp_path / "verified")],
                 env=env, cwd=bundle.path)
    assert hashed.returncode == 0, hashed.stdout
    where = run([venv_python, "-c", "import sys, iaccode_agui; print(sys.version_info[:2], iaccode_agui.__file__)"],
                env=env, cwd=str(tmp_path))
    assert where.returncode == 0 and str(venv) in where.stdout, where.stdout
    assert "(%s)" % python_version.replace(".", ", ") in where.stdout
    installed = time.monotonic()

    workspace = tmp_path / "ws"
    workspace.mkdir()
    port = free_loopback_port()
    log_path = tmp_path / "server.log"
    with open(str(log_path), "w") as log:
        server = subprocess.Popen(
            [venv_python, "-m", "iaccode_agui", "--demo", "--port", str(port), "--state-dir", str(tmp_path / "state")],
            env=offline_env(tmp_path, IAC_CODE_AGUI_ALLOWED_CWDS=str(workspace),
                            IAC_CODE_CONFIG_DIR=str(tmp_path / "config")),
            cwd=str(tmp_path), stdout=log, stderr=subprocess.STDOUT)
    try:
        url = "http://127.0.0.1:%d/" % port
        health = wait_healthy(url, server)
        assert health is not None and health.status_code == 200, log_path.read_text()
        assert health.json()["protocol"] == "ag-ui"
        body = {"threadId": "offline", "runId": "run-" + uuid.uuid4().hex[:8], "state": {}, "tools": [],
                "context": [], "messages": [{"id": "m1", "role": "user", "content": "hello offline"}],
                "forwardedProps": {"iacCode": {"schemaVersion": 1, "rosInvocationId": "inv-1",
                                               "cwd": os.path.realpath(str(workspace))}}}
        response = requests.post(url, data=json.dumps(body), timeout=30,
                                 headers={"Content-Type": "application/json", "Accept": "text/event-stream"})
        assert response.status_code == 200, response.text
        events = check_stream(response.content)
        assert events[-1]["type"] == "RUN_FINISHED" and events[-1]["outcome"] == {"type": "success"}
        server.send_signal(signal.SIGTERM)
        assert server.wait(30) == 0, log_path.read_text()
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(10)
    print("offline bundle for %s: build %.1fs, venv+install %.1fs, serve+run+stop %.1fs, total %.1fs"
          % (python_version, built - started, installed - built, time.monotonic() - installed,
             time.monotonic() - started))


def _fake_wheel(directory, name: str, version: str, requires) -> offline_bundle.Wheel:
    path = os.path.join(str(directory), "%s-%s-py3-none-any.whl" % (name, version))
    metadata = "Metadata-Version: 2.1\nName: %s\nVersion: %s\n" % (name, version)
    metadata += "".join("Requires-Dist: %s\n" % line for line in requires)
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("%s-%s.dist-info/METADATA" % (name, version), metadata)
    return offline_bundle.parse_wheel(path)


def test_dependency_walk_uses_the_target_markers(tmp_path):
    """pip decides markers for the interpreter running it; the walk must decide them for the target."""
    root = _fake_wheel(tmp_path, "app", "1.0", ['old-only; python_version < "3.10"', "lib>=2",
                                               'new-only; python_version >= "3.10"', 'opt; extra == "fast"',
                                               "withextra[fast]"])
    wheels = {wheel.name: wheel for wheel in [
        root, _fake_wheel(tmp_path, "lib", "2.1", []), _fake_wheel(tmp_path, "new_only", "1", []),
        _fake_wheel(tmp_path, "withextra", "1", ['speedup; extra == "fast"', 'never; extra == "slow"'])]}
    needed, missing = offline_bundle.needed_closure(root, wheels, offline_bundle.target_environment(
        "3.9", "manylinux2014_x86_64"))
    assert needed == {"app", "lib", "withextra"}
    assert sorted(missing) == ["old-only", "speedup"]
    needed, missing = offline_bundle.needed_closure(root, wheels, offline_bundle.target_environment(
        "3.12", "manylinux2014_x86_64"))
    assert needed == {"app", "lib", "new-only", "withextra"} and missing == ["speedup"]
    (tmp_path / "old").mkdir()
    too_old = dict(wheels, lib=_fake_wheel(tmp_path / "old", "lib", "1.5", []))
    assert "lib>=2" in offline_bundle.needed_closure(root, too_old, offline_bundle.target_environment(
        "3.9", "manylinux2014_x86_64"))[1]


@pytest.mark.parametrize("tag,text", [
    ("manylinux2014_x86_64", "Linux x86_64 with glibc 2.17 or newer"),
    ("manylinux_2_28_aarch64", "Linux aarch64 with glibc 2.28 or newer"),
    ("musllinux_1_2_x86_64", "musl 1.2"),
    ("macosx_11_0_arm64", "macOS 11.0 or newer on arm64"),
])
def test_platform_descriptions(tag, text):
    assert text in offline_bundle.describe_platform(tag)


def test_refuses_old_python_and_existing_bundle(tmp_path):
    with pytest.raises(offline_bundle.BundleError, match="at least 3.9"):
        offline_bundle.build_bundle(str(tmp_path / "a"), "3.8")
    with pytest.raises(offline_bundle.BundleError, match="X.Y"):
        offline_bundle.build_bundle(str(tmp_path / "a"), "3")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "keep.txt").write_text("mine")
    with pytest.raises(offline_bundle.BundleError, match="--force"):
        offline_bundle.build_bundle(str(tmp_path / "b"), CURRENT)
    assert (tmp_path / "b" / "keep.txt").read_text() == "mine"

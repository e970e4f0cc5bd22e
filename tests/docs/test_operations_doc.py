"""``docs/operations.rst``: its commands run as written from the quick start's ``.venv``, its quoted lines are
the ones the code prints, and the recipes it points to are in the built package."""
import os
import signal
import subprocess
import sys
import time
import zipfile

import pytest
import requests

from iaccode_agui import wsgi
from iaccode_agui.config import ConfigError
from iaccode_agui.server.upstream import free_loopback_port
from tests.adapter_process import run_body
from tests.harness import wait_for
from tests.docs.test_readme import ROOT, _literal_blocks, quick_start  # noqa: F401 (a fixture)
from tests.tools_loader import load_tool

DOC = os.path.join(ROOT, "docs", "operations.rst")
RECIPES = ("gunicorn.conf.py", "nginx.conf")


def _blocks():
    return _literal_blocks(DOC)


def _block(needle: str) -> str:
    (block,) = [block for block in _blocks() if needle in block]
    return block


def _bash(script: str, cwd: str, env, **popen):
    return subprocess.run(["bash", "-c", script], cwd=cwd, env=env, capture_output=True, text=True, timeout=60,
                          **popen)


def test_print_deploy_dir_names_the_shipped_recipes(quick_start):
    cwd, env = quick_start
    (command,) = [b for b in _blocks() if b.strip() == ".venv/bin/python -m iaccode_agui --print-deploy-dir"]
    done = _bash(command, cwd, env)
    assert done.returncode == 0, done.stderr
    folder = done.stdout.strip()
    assert all(os.path.isfile(os.path.join(folder, name)) for name in RECIPES), folder


@pytest.mark.slow
def test_the_built_package_carries_the_recipes(tmp_path):
    """What ``pip install`` puts in place: the wheel holds both recipes, and ``--print-deploy-dir`` of the
    unpacked wheel names its own copy."""
    bundle = load_tool("offline_bundle")
    version = "%d.%d" % sys.version_info[:2]
    wheel = bundle.build_own_wheel(ROOT, str(tmp_path), bundle.Pip(version, ("manylinux2014_x86_64",)))
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel.path) as archive:
        assert {"iaccode_agui/deploy/" + name for name in RECIPES} <= set(archive.namelist())
        archive.extractall(str(site))
    env = {k: v for k, v in os.environ.items() if not k.startswith("IAC_CODE_AGUI_")}
    env["PYTHONPATH"] = str(site)
    done = subprocess.run([sys.executable, "-m", "iaccode_agui", "--print-deploy-dir"], env=env,
                          capture_output=True, text=True, timeout=60, cwd=str(tmp_path))
    assert done.stdout.strip() == str(site / "iaccode_agui" / "deploy"), done.stdout + done.stderr


@pytest.mark.slow
def test_the_gunicorn_commands_work_as_written(quick_start):
    cwd, env = quick_start
    block = _block("gunicorn.conf.py")
    if not os.path.exists(os.path.join(cwd, ".venv", "bin", "gunicorn")):
        pytest.skip("gunicorn is not installed in the test environment")
    lines = block.splitlines()
    assert lines[0] == ".venv/bin/pip install gunicorn"     # already installed here: not run
    runtime_port, port = free_loopback_port(), free_loopback_port()
    script = "\n".join(lines[1:]).replace("41242", str(runtime_port)).replace("127.0.0.1:8000", "127.0.0.1:%d" % port)
    os.makedirs(os.path.join(cwd, "ws"))
    with open(os.path.join(cwd, "commands.log"), "wb") as log:
        proc = subprocess.Popen(["bash", "-c", script], cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    url = "http://127.0.0.1:%d/" % port
    try:
        assert wait_for(lambda: _answers(url + "ready"), 60), open(os.path.join(cwd, "commands.log")).read()
        response = requests.post(url, json=run_body(os.path.join(cwd, "ws"), "hello", "ops-doc"), timeout=30)
        assert response.status_code == 200 and '"type":"RUN_FINISHED"' in response.text, response.text
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)
    assert os.path.isdir(os.path.join(cwd, ".iac-code", "agui", "threads"))


def test_the_nginx_command_renders_the_template(quick_start):
    cwd, env = quick_start
    script = _block("envsubst").replace("/etc/nginx/nginx.conf", os.path.join(cwd, "nginx.conf"))
    done = _bash(script, cwd, env)
    assert done.returncode == 0, done.stderr
    with open(os.path.join(cwd, "nginx.conf")) as handle:
        rendered = handle.read()
    assert "listen 0.0.0.0:8080;" in rendered and "server 10.0.0.12:8000 max_fails=0;" in rendered
    assert "${AGUI" not in rendered


def test_the_quoted_lines_are_the_ones_the_code_prints():
    sync_worker = pytest.importorskip("gunicorn.workers.sync").SyncWorker
    with pytest.raises(ConfigError) as sync:
        wsgi.refuse_sync_worker(type("Config", (), {"worker_class": sync_worker})())
    assert _block("sync worker serves").strip() == "iaccode_agui: %s" % sync.value
    with pytest.raises(ConfigError) as missing:
        wsgi.settings_from_args([], {})
    assert _block("set IAC_CODE_AGUI_A2A_URL").strip() == "iaccode_agui: %s" % missing.value


def _answers(url: str) -> bool:
    try:
        return requests.get(url, timeout=2).status_code == 200
    except requests.RequestException:
        time.sleep(0.1)
        return False

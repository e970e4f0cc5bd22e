"""The README is part of the product: its two commands, its examples and its markup are checked.

The README is a newcomer's guide; the reference lives in ``docs/``, whose pages ``tests/docs/test_docs_pages.py``
checks.  Every shell command of the README runs here as written, with ``PORT`` set in the environment.
"""
import json
import os
import re
import signal
import subprocess
import sys
import time
from urllib.parse import urlparse

import docutils.core
import docutils.nodes
import pytest
import requests
from tests import ROOT

README = os.path.join(ROOT, "README.rst")
DOCS = os.path.join(ROOT, "docs")


def doc(name: str) -> str:
    """The path of a page of ``docs/``."""
    return os.path.join(DOCS, name)


def _literal_blocks(path: str = README):
    """The literal blocks of a reStructuredText page (the README, or a page of docs/), which must parse cleanly."""
    with open(path, encoding="utf-8") as handle:
        doctree = docutils.core.publish_doctree(handle.read(), settings_overrides={"report_level": 2,
                                                                                 "halt_level": 2})
    find = getattr(doctree, "findall", doctree.traverse)
    return [node.astext() for node in find(docutils.nodes.literal_block)]


def test_readme_is_valid_restructuredtext_and_opens_with_the_two_commands():
    with open(README, encoding="utf-8") as handle:
        text = handle.read()
    blocks = _literal_blocks()
    run_command, test_command = blocks[0], blocks[1]
    assert "\n" not in run_command and "\n" not in test_command
    assert run_command.endswith("python -m iaccode_agui --demo") and "pip install ." in run_command
    # nothing but the title and the two commands come before the rest of the text
    assert text.index(run_command) < text.index(test_command) < text.index("``iaccode_agui`` is an")
    with open(os.path.join(ROOT, ".ci", "run"), encoding="utf-8") as handle:
        ci_lines = [line.strip() for line in handle if line.strip() and not line.startswith("#")]
    assert test_command in ci_lines, "CI must run exactly the README's test command"


def test_curl_example_streams_a_valid_run(adapter, workspace):
    curl = next(block for block in _literal_blocks() if block.startswith("curl -N") and '"r1"' in block)
    payload = re.search(r"-d '(.*)'", curl, re.S).group(1)
    body = json.loads(payload.replace("/tmp/ws", workspace))
    events = adapter.run(body)
    assert events[0]["type"] == "RUN_STARTED" and events[-1]["type"] == "RUN_FINISHED"


def _readme_text(path: str = README):
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def _flat(path: str) -> str:
    """A page's text with its line breaks and indentation folded into single spaces."""
    return " ".join(_readme_text(path).split())


def test_readme_is_a_short_guide():
    assert os.path.getsize(README) <= 15 * 1024


def test_flags_list_names_every_server_flag():
    """The flags block of docs/operations.rst names exactly the flags the server has."""
    from iaccode_agui.server.cli import build_parser
    flags_block = next(block for block in _literal_blocks(doc("operations.rst"))
                       if block.lstrip().startswith("--host HOST"))
    documented = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]+", flags_block))
    actual = {option for action in build_parser()._actions for option in action.option_strings
              if option.startswith("--") and option != "--help"}
    assert actual - documented == set(), "flags missing from the list in docs/operations.rst"
    assert documented - actual == set(), "flags in docs/operations.rst that the server does not have"
    assert "0 = unlimited" in flags_block


def test_console_scripts_are_named():
    import configparser
    config = configparser.ConfigParser()
    config.read(os.path.join(ROOT, "setup.cfg"))
    scripts = [line.split("=")[0].strip() for line in config["options.entry_points"]["console_scripts"].splitlines()
               if line.strip()]
    text = _readme_text()
    assert scripts and all("``%s``" % script in text for script in scripts)


def test_health_and_ready_are_documented():
    text = _readme_text(doc("http-api.rst")) + _readme_text(doc("operations.rst"))
    assert "``GET /ready``" in text and "``GET /health``" in text
    assert "protocolPackageVersion" in text and "readinessProbe" in text and "503" in text


FORBIDDEN_REFERENCES = re.compile(r"\.\./shared|\bdecisions?\s+\d|\bitem\s+\d|§|\bseeds?/\d|"
                                  r"(?:a2a-dialect|a2a-wire|behaviou?r|reference-output|design)\.md")


def test_readme_and_code_stand_alone():
    """Readers of the package have no spec directory: reasons are written out, never referenced by number."""
    offenders = []
    paths = [README] + [os.path.join(DOCS, name) for name in os.listdir(DOCS) if name.endswith(".rst")]
    for top in ("iaccode_agui", "tools", "tests"):
        for folder, _, names in os.walk(os.path.join(ROOT, top)):
            paths += [os.path.join(folder, name) for name in names if name.endswith((".py", ".json", ".rst"))]
    for path in paths:
        if path == os.path.abspath(__file__) or "captures" in path:
            continue
        with open(path, encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                if FORBIDDEN_REFERENCES.search(line):
                    offenders.append("%s:%d: %s" % (os.path.relpath(path, ROOT), number, line.strip()))
    assert offenders == []


def _shell_blocks(adapter, workspace):
    blocks = [block for block in _literal_blocks() if "interrupt.sse" in block]
    assert len(blocks) == 2, "the permission curl and the resume one-liner"
    return [block.replace("/tmp/ws", workspace) for block in blocks]


def _port_env(url: str, **env):
    return dict(os.environ, PORT=str(urlparse(url).port), **env)


def test_permission_interrupt_and_resume_commands_work_as_written(adapter, workspace, tmp_path):
    import shutil
    import subprocess
    interrupt, resume = _shell_blocks(adapter, workspace)
    assert '"please write a file"' in interrupt and "allow_once" in resume and "$ID" in resume
    if shutil.which("curl") is None or shutil.which("bash") is None:
        pytest.skip("curl or bash is not installed: cannot run the README's shell commands as written")
    env = _port_env(adapter.url)
    first = subprocess.run(["bash", "-c", interrupt], cwd=str(tmp_path), env=env, capture_output=True, text=True,
                           timeout=60)
    assert first.returncode == 0 and '"outcome":{"type":"interrupt"' in first.stdout, first.stdout + first.stderr
    second = subprocess.run(["bash", "-c", resume], cwd=str(tmp_path), env=env, capture_output=True, text=True,
                            timeout=60)
    assert second.returncode == 0, second.stderr
    assert second.stdout.splitlines()[0].startswith("permission-")
    assert '"type":"RUN_FINISHED"' in second.stdout and '"type":"success"' in second.stdout, second.stdout
    assert os.path.exists(os.path.join(workspace, "hello.txt"))


def test_repeating_an_example_is_explained():
    text = _flat(README)
    assert "rm -rf ~/.iac-code/agui" in text and "keeps its threads across restarts" in text


def test_embedding_names_gunicorn_and_its_caveats():
    text = _readme_text(doc("operations.rst"))
    for needle in ("``gthread``", "``sync``", "--worker-class gthread", "--timeout 120", "WSGI_SERVER_UNSUPPORTED",
                   "single-process", "second one", "--print-deploy-dir)/gunicorn.conf.py"):
        assert needle in text, needle
    assert os.path.exists(os.path.join(ROOT, "iaccode_agui", "deploy", "gunicorn.conf.py"))


def test_air_gapped_commands_are_the_bundles_own():
    import importlib.util
    spec = importlib.util.spec_from_file_location("offline_bundle", os.path.join(ROOT, "tools", "offline_bundle.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    page = doc("operations.rst")
    block = next(block for block in _literal_blocks(page) if "--find-links wheelhouse iaccode_agui" in block)
    assert block.splitlines() == module.install_commands("3.9")
    assert "--python-version 3.9" in _readme_text(page)
    assert "``--platform`` replaces that default" in _readme_text(page)


def test_documented_differences_include_the_side_by_side_findings():
    text = _readme_text(doc("migration.rst"))
    for needle in ("``resume: []``", "CONVERSATION_LOST", "``pipeline_started``", "protocolPackageVersion",
                   "Retry-After: 1"):
        assert needle in text, needle


@pytest.fixture
def quick_start(tmp_path):
    """A directory laid out as the quick start leaves it: ``.venv`` is this interpreter's environment."""
    venv = os.path.dirname(os.path.dirname(os.path.abspath(sys.executable)))
    if not os.path.exists(os.path.join(venv, "pyvenv.cfg")):
        pytest.skip("the tests do not run in a virtual environment: no .venv to mirror")
    os.symlink(venv, str(tmp_path / ".venv"))
    env = dict(os.environ, HOME=str(tmp_path), PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return str(tmp_path), {k: v for k, v in env.items() if not k.startswith("IAC_CODE_AGUI_")}


def _start(script: str, cwd: str, env) -> subprocess.Popen:
    proc = subprocess.Popen(["bash", "-c", script], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    url = "http://127.0.0.1:%s/health" % env["PORT"]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if requests.get(url, timeout=2).status_code == 200:
                return proc
        except requests.RequestException:
            time.sleep(0.1)
    _stop(proc)
    raise AssertionError(proc.stdout.read().decode())


def _stop(proc: subprocess.Popen) -> str:
    """Ctrl-C, as the README says: the server drains and exits 0."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
    try:
        output = proc.communicate(timeout=30)[0].decode()
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output = proc.communicate(timeout=5)[0].decode()
    return output


def _start_blocks():
    blocks = [block for block in _literal_blocks() if '--demo --port "$PORT"' in block]
    assert len(blocks) == 2, "the PORT start and the --default-cwd start"
    return blocks


@pytest.mark.slow
def test_the_port_variable_starts_the_demo_and_ctrl_c_stops_it(quick_start):
    from iaccode_agui.server.upstream import free_loopback_port
    cwd, env = quick_start
    block = _start_blocks()[0]
    assert block.splitlines()[0] == "export PORT=8000"
    port = str(free_loopback_port())
    proc = _start(block.replace("export PORT=8000", "export PORT=" + port), cwd, dict(env, PORT=port))
    output = _stop(proc)
    assert proc.returncode == 0, output
    assert os.path.isdir(os.path.join(cwd, ".iac-code", "agui", "threads"))


@pytest.mark.slow
def test_a_stock_client_call_and_the_terminal_client_work_as_written(quick_start):
    from iaccode_agui.server.upstream import free_loopback_port
    cwd, env = quick_start
    env = dict(env, PORT=str(free_loopback_port()))
    workspace = os.path.join(cwd, "ws")
    proc = _start(_start_blocks()[1].replace("/tmp/ws", workspace), cwd, env)
    try:
        curl = next(block for block in _literal_blocks() if '"forwardedProps":{}' in block)
        done = subprocess.run(["bash", "-c", curl], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0 and '"type":"RUN_FINISHED"' in done.stdout, done.stdout + done.stderr
        client = next(block for block in _literal_blocks() if "iaccode_agui.client" in block)
        done = subprocess.run(["bash", "-c", client.replace("/tmp/ws", workspace)], cwd=cwd, env=env, input="1\n",
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0 and "hello.txt" in done.stdout, done.stdout + done.stderr
        assert os.path.exists(os.path.join(workspace, "hello.txt"))
    finally:
        output = _stop(proc)
    assert proc.returncode == 0, output

"""The pages of ``docs/``: valid reStructuredText read on the repository host, links that resolve, files they name
that exist, and their commands run as written (each page's own test runs the rest: operations, console,
terminal client, CopilotKit, errors, AgentCore examples)."""
import json
import os
import re
import shlex
import subprocess
import sys

import docutils.core
import docutils.nodes
import pytest

from tests.docs.test_readme import DOCS, README, ROOT, _literal_blocks, _port_env, doc, quick_start  # noqa: F401

PAGES = sorted(os.path.join(DOCS, name) for name in os.listdir(DOCS) if name.endswith(".rst"))
# Paths of the repository a page may name in a literal: each must exist.
NAMED_FILE = re.compile(r"``((?:tests|tools|iaccode_agui)/[\w/.-]+\.(?:py|json|conf))``")
NARRATIVE = re.compile(r"\bin the run before\b|\btried and not kept\b|\bthis round\b|\bmeasured\b|\bissue \d",
                       re.I)


def _doctree(path: str):
    with open(path, encoding="utf-8") as handle:
        return docutils.core.publish_doctree(handle.read(), settings_overrides={"report_level": 2,
                                                                                "halt_level": 2})


@pytest.mark.parametrize("path", [README] + PAGES, ids=os.path.basename)
def test_page_parses_and_its_links_and_files_exist(path):
    """Plain docutils at report level 2 (no Sphinx), every relative link and image a file next to the page."""
    tree = _doctree(path)
    find = getattr(tree, "findall", tree.traverse)
    targets = [node["refuri"] for node in find(docutils.nodes.reference) if "refuri" in node]
    targets += [node["uri"] for node in find(docutils.nodes.image)]
    relative = [target for target in targets if not re.match(r"[a-z]+:", target)]
    missing = [t for t in relative if not os.path.isfile(os.path.join(os.path.dirname(path), t.split("#")[0]))]
    assert missing == []
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    assert [name for name in NAMED_FILE.findall(text) if not os.path.exists(os.path.join(ROOT, name))] == []
    assert NARRATIVE.findall(text) == []


def test_every_page_is_in_the_readme_map():
    with open(README, encoding="utf-8") as handle:
        text = handle.read()
    assert [page for page in PAGES if "<docs/%s>`_" % os.path.basename(page) not in text] == []


def test_the_reattach_command_works_as_written(adapter, tmp_path):
    (command,) = [block for block in _literal_blocks(doc("http-api.rst")) if "Last-Event-ID" in block]
    body = adapter.body("hello", thread="reattach-doc")
    events = adapter.run(body)
    with open(str(tmp_path / "same-request-body.json"), "w") as handle:
        json.dump(body, handle)
    done = subprocess.run(["bash", "-c", command], cwd=str(tmp_path), env=_port_env(adapter.url),
                          capture_output=True, text=True, timeout=60)
    ids = [int(found) for found in re.findall(r"^id: (\d+)$", done.stdout, re.M)]
    assert ids and ids[0] == 4 and len(ids) == len(events) - 4, done.stdout + done.stderr
    assert '"type":"RUN_FINISHED"' in done.stdout


def test_the_metrics_command_works_as_written(adapter):
    (command,) = [block for block in _literal_blocks(doc("operations.rst")) if "/metrics" in block]
    adapter.run(adapter.body("hello", thread="metrics-doc"))
    done = subprocess.run(["bash", "-c", command], env=_port_env(adapter.url), capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0 and "agui_runs_started_total" in done.stdout, done.stdout + done.stderr


def test_the_prune_command_works_as_written(quick_start, adapter_factory):
    cwd, env = quick_start
    (command,) = [block for block in _literal_blocks(doc("operations.rst")) if "prune_threads.py" in block]
    adapter = adapter_factory(state_dir=os.path.join(cwd, ".iac-code", "agui"))
    adapter.run(adapter.body("hello", thread="prune-doc"))
    done = subprocess.run(["bash", "-c", command.replace("tools/", os.path.join(ROOT, "tools") + "/")], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert os.listdir(os.path.join(cwd, ".iac-code", "agui", "threads")), "a dry run removes nothing"


@pytest.mark.slow
@pytest.mark.parametrize("page", ["performance.rst", "reliability.rst"])
def test_the_long_running_commands_name_real_options(page):
    """The benchmark and the soaks take minutes to hours: the suite runs their short variants
    (``test_bench_smoke``, ``test_reliability_crash``, ``test_deploy_crash_soak``); here each documented
    command must name an existing tool and only options its ``--help`` lists."""
    commands = [line for block in _literal_blocks(doc(page)) for line in block.splitlines()
                if line.startswith(".venv/bin/python tools/")]
    assert commands
    for command in commands:
        argv = shlex.split(command)
        tool = os.path.join(ROOT, argv[1])
        helped = subprocess.run([sys.executable, tool, "--help"], capture_output=True, text=True, timeout=60)
        assert helped.returncode == 0, helped.stderr
        assert [arg for arg in argv[2:] if arg.startswith("--") and arg not in helped.stdout] == [], command


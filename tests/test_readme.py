"""The README is part of the product: its two commands, its curl example and its markup are checked."""
import json
import os
import re

import docutils.core
import docutils.nodes

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.rst")


def _literal_blocks():
    with open(README, encoding="utf-8") as handle:
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


def _readme_text():
    with open(README, encoding="utf-8") as handle:
        return handle.read()


def test_flags_list_names_every_server_flag():
    from iaccode_agui.cli import build_parser
    flags_block = next(block for block in _literal_blocks() if block.lstrip().startswith("--host HOST"))
    documented = set(re.findall(r"--[a-z][a-z0-9-]+", flags_block))
    actual = {option for action in build_parser()._actions for option in action.option_strings
              if option.startswith("--") and option != "--help"}
    assert actual - documented == set(), "flags missing from the README's list"
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
    text = _readme_text()
    assert "``GET /ready``" in text and "``GET /health``" in text
    assert "protocolPackageVersion" in text and "readinessProbe" in text and "503" in text

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

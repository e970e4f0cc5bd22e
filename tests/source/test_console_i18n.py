"""The console's own labels: one static catalog (``static/i18n.json``) for every language the server's
message catalogs have, covering every label the page shows, with the same placeholders as the English text.

The labels are found where the page names them: ``t("...")`` and ``tr("...")`` calls in the ES modules and
the elements of ``index.html`` marked ``data-i18n`` (text), ``data-i18n-placeholder`` and ``data-i18n-label``
(aria-label).
"""
import glob
import json
import os
import re
from html.parser import HTMLParser
from typing import List, Set

from iaccode_agui.web.console import STATIC_DIR

CATALOGS = os.path.join(os.path.dirname(STATIC_DIR), "catalogs")
SERVER_LANGUAGES = sorted(os.path.splitext(name)[0] for name in os.listdir(CATALOGS) if name.endswith(".json"))


def _catalog():
    with open(os.path.join(STATIC_DIR, "i18n.json"), encoding="utf-8") as handle:
        return json.load(handle)


def script_labels() -> Set[str]:
    found = set()
    for path in glob.glob(os.path.join(STATIC_DIR, "*.js")):
        with open(path, encoding="utf-8") as handle:
            for literal in re.findall(r'\btr?\("((?:[^"\\]|\\.)*)"', handle.read()):
                found.add(json.loads('"%s"' % literal))
    return found


class _Marked(HTMLParser):
    """Collects the text of data-i18n elements and the marked attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.found: Set[str] = set()
        self.stack: List[list] = []

    def handle_starttag(self, tag, attrs):
        named = dict(attrs)
        if "data-i18n-placeholder" in named:
            self.found.add(named["placeholder"])
        if "data-i18n-label" in named:
            self.found.add(named["aria-label"])
        if tag not in ("meta", "link", "input", "br"):
            self.stack.append([tag, "data-i18n" in named, ""])

    def handle_endtag(self, tag):
        while self.stack:
            name, marked, text = self.stack.pop()
            if marked:
                self.found.add(text.strip())
            if self.stack:
                self.stack[-1][2] += text
            if name == tag:
                return

    def handle_data(self, data):
        if self.stack:
            self.stack[-1][2] += data


def page_labels() -> Set[str]:
    parser = _Marked()
    with open(os.path.join(STATIC_DIR, "index.html"), encoding="utf-8") as handle:
        parser.feed(handle.read())
    return parser.found


def test_every_server_language_has_a_table_and_the_script_knows_it():
    assert SERVER_LANGUAGES == ["de", "es", "fr", "ja", "pt", "zh"]
    assert sorted(_catalog()) == SERVER_LANGUAGES          # English is the source text
    with open(os.path.join(STATIC_DIR, "i18n.js"), encoding="utf-8") as handle:
        declared = re.search(r"LANGUAGES = \[([^\]]*)\]", handle.read()).group(1)
    assert sorted(json.loads("[%s]" % declared)) == sorted(SERVER_LANGUAGES + ["en"])
    with open(os.path.join(STATIC_DIR, "index.html"), encoding="utf-8") as handle:
        picker = set(re.findall(r'<option value="(\w+)">', handle.read()))
    assert picker == set(SERVER_LANGUAGES + ["en"])


def test_every_label_is_translated_in_every_language_with_its_placeholders():
    labels = script_labels() | page_labels()
    assert {"Send", "Threads", "New thread", "Cancel run", "Workspace (cwd)", "Error {code}: {message}",
            "Finished: {outcome}.", "You", "Reasoning"} <= labels
    for language, table in _catalog().items():
        assert sorted(set(labels) - set(table)) == [], language
        assert sorted(set(table) - set(labels)) == [], "stale entries in %s" % language
        for english, translated in table.items():
            assert translated.strip(), (language, english)
            assert sorted(re.findall(r"\{\w+\}", translated)) == sorted(re.findall(r"\{\w+\}", english)), \
                (language, english, translated)


def test_translations_are_not_the_english_text_left_in_place():
    # A few labels are the same word in some languages (Pipeline, Token, normal); most must differ.
    for language, table in _catalog().items():
        same = [english for english, translated in table.items() if english == translated]
        assert len(same) < len(table) // 10, (language, same)


def test_the_session_panel_labels_stay_distinct_in_every_language():
    names = ("thread", "run", "execution", "task", "context", "session", "invocation")
    for language, table in _catalog().items():
        assert len({table[name] for name in names}) == len(names), language

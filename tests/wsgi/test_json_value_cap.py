"""A body made of tiny values (brackets, keys, numbers) is refused before it is parsed.

Parsing costs per value, so twelve megabytes of ``[[]]`` or ``"k":0`` cost seconds of CPU even though
every other bound holds.  The values outside strings are counted on the raw bytes (C-speed byte
operations) and more than ``--max-json-values`` is 413 ``REQUEST_TOO_LARGE`` before ``json.loads`` runs;
what lies inside strings (code in a message, a base64 image) is not counted, so a large legitimate
body is not refused for its size.
"""
import json
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from iaccode_agui.web import jsonbody
from iaccode_agui.errors import AguiError
from tests.hostile_helpers import Env, assert_contract, fresh_run
from tests.hostile_helpers import env  # noqa: F401  (fixture: pytest finds it by this name)


def _tree_count(value: Any) -> int:
    """Containers, plus one comma between parts and one colon per member."""
    if isinstance(value, dict):
        return 1 + max(0, len(value) - 1) + len(value) + sum(_tree_count(item) for item in value.values())
    if isinstance(value, list):
        return 1 + max(0, len(value) - 1) + sum(_tree_count(item) for item in value)
    return 0


_TEXT = st.text(alphabet=st.sampled_from('ab"\\[]{},: \u00e9'), max_size=8)
_JSON = st.recursive(st.none() | st.integers() | _TEXT,
                     lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_TEXT, inner, max_size=4),
                     max_leaves=30)


@settings(max_examples=300, deadline=None)
@given(_JSON, st.booleans(), st.booleans())
def test_value_count_matches_the_parsed_tree(value, ascii_only, spaced):
    raw = json.dumps(value, ensure_ascii=ascii_only, separators=(", ", ": ") if spaced else (",", ":")).encode()
    assert jsonbody.value_count(raw) == _tree_count(value)


def test_structure_inside_strings_is_not_counted():
    raw = json.dumps({"text": "[{,:}]" * 10000, "also": ['\\"[', "]\\\\"]}).encode()
    assert jsonbody.value_count(raw) == 1 + 1 + 2 + 1 + 1     # object, comma, two colons, array, comma


@pytest.mark.parametrize("flood", [b"[" + b",".join([b"[]"] * 3000) + b"]",
                                   b"{" + b",".join(b'"k%d":0' % i for i in range(3000)) + b"}",
                                   b"[" + b",".join([b"0"] * 6000) + b"]"])
def test_a_flood_is_refused_before_parsing(flood, monkeypatch):
    parsed = []
    monkeypatch.setattr(jsonbody.json, "loads", lambda *args, **kwargs: parsed.append(1))
    with pytest.raises(AguiError) as caught:
        jsonbody.loads(flood, max_values=5000)
    assert (caught.value.status, caught.value.code) == (413, "REQUEST_TOO_LARGE")
    assert caught.value.params == {"limit": 5000}
    assert parsed == []


def test_over_the_value_cap_is_413_naming_the_cap_translated(tmp_path):
    small = Env(str(tmp_path), max_json_values=50)
    try:
        body = small.body("hello", run=fresh_run())
        body["state"] = {"rows": [[index] for index in range(30)]}
        status, headers, raw = small.call(body, headers={"Accept-Language": "fr"})
        assert (status, assert_contract(status, headers, raw)) == (413, "REQUEST_TOO_LARGE")
        assert json.loads(raw)["error"]["message"] == "Le corps de la requête contient plus de 50 valeurs JSON."
        body = small.body("[{,:}] " * 2000, run=fresh_run())     # brackets in a text are not values
        status, headers, raw = small.call(body)
        assert assert_contract(status, headers, raw) is None, raw[:300]
    finally:
        small.close()


def test_the_default_cap_refuses_a_bracket_flood_at_the_body_limit_quickly():
    flood = b"[" + b",".join([b"[[[[[[[[]]]]]]]]"] * 700000) + b"]"       # 11.4 MB, 5.6 million arrays
    started = time.process_time()
    with pytest.raises(AguiError) as caught:
        jsonbody.loads(flood)
    assert caught.value.code == "REQUEST_TOO_LARGE"
    # a figure, not a target: parsing this body costs seconds; counting costs a small fraction of that
    print("refused a %.1f MB bracket flood in %.3f s CPU" % (len(flood) / 1e6, time.process_time() - started))


def test_the_value_cap_is_a_setting(tmp_path):
    from iaccode_agui.server import cli
    from iaccode_agui.config import ConfigError

    def settings_for(argv, environ):
        args = cli.build_parser().parse_args(argv + ["--state-dir", str(tmp_path)])
        return cli.settings_from(args, environ, "http://127.0.0.1:1/", None)

    assert settings_for([], {}).max_json_values == 500000
    assert settings_for([], {"IAC_CODE_AGUI_MAX_JSON_VALUES": "99"}).max_json_values == 99
    assert settings_for(["--max-json-values", "7"], {"IAC_CODE_AGUI_MAX_JSON_VALUES": "99"}).max_json_values == 7
    with pytest.raises(ConfigError):
        settings_for([], {"IAC_CODE_AGUI_MAX_JSON_VALUES": "0"})

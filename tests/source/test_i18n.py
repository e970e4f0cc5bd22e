"""Language negotiation, locale fallback and the translation catalogs."""
import json
import os
import re
import threading

import pytest

from iaccode_agui import errors, i18n
from iaccode_agui.i18n import SUPPORTED, negotiate, normalize_tag, process_locale_language, translate

CATALOG_DIR = os.path.join(os.path.dirname(i18n.__file__), "catalogs")
TRANSLATED = [language for language in SUPPORTED if language != "en"]


@pytest.mark.parametrize("tag,expected", [
    ("en", "en"), ("EN-us", "en"), ("zh-CN", "zh"), ("zh_Hant_TW", "zh"), ("pt_BR", "pt"), (" fr ", "fr"),
    ("de-DE-1996", "de"), ("ja", "ja"), ("es-419", "es"),
    ("it", None), ("", None), ("-", None), ("*", None), ("english", None), ("zhx", None), (None, None), (5, None),
])
def test_normalize_tag(tag, expected):
    assert normalize_tag(tag) == expected


@pytest.mark.parametrize("header,fallback,expected", [
    ("zh-CN,zh;q=0.9,en;q=0.8", "en", "zh"),
    ("en;q=0.8,zh-CN,zh;q=0.9", "fr", "zh"),
    ("fr;q=0", "de", "de"),
    ("fr;q=0, es;q=0.1", "en", "es"),
    ("de;q=1.5", "en", "en"),
    ("de;q=1.5, ja;q=0.2", "en", "ja"),
    ("*", "ja", "ja"),
    ("*;q=0.9, fr;q=0.8", "de", "de"),
    ("it, *;q=0.5, fr;q=0.4", "es", "es"),
    ("ja;q=abc", "en", "en"),
    ("ja;q=abc, pt;q=0.3", "en", "pt"),
    ("ja;q=nan, pt;q=0.1", "en", "pt"),
    ("ja;q=NaN", "zh", "zh"),
    ("ja;q=inf", "zh", "zh"),
    ("ja;q=-1", "zh", "zh"),
    ("ja;q=", "zh", "zh"),
    ("ja;q", "zh", "zh"),
    ("ja;Q=0.5, de;q=0.4", "en", "ja"),
    ("fr;level=1;q=0.5, de;q=0.4", "en", "fr"),
    ("de;q=0.5, fr;q=0.5", "en", "de"),
    ("fr;q=0.5, de;q=0.5", "en", "fr"),
    ("fr, de", "en", "fr"),
    ("it-IT, ko;q=0.9", "de", "de"),
    ("it, es;q=0.1", "en", "es"),
    (" , ;q=1, ja ", "en", "ja"),
    ("", "fr", "fr"),
    (None, "fr", "fr"),
    (None, "xx", "en"),
    (None, "zh-TW", "zh"),
    ("fr;q=1.0", "en", "fr"),
    ("fr;q=0.001", "en", "fr"),
])
def test_negotiate(header, fallback, expected):
    assert negotiate(header, fallback) == expected


@pytest.mark.parametrize("env,expected", [
    ({}, "en"),
    ({"LANG": "fr_FR.UTF-8"}, "fr"),
    ({"LANG": "de_DE@euro"}, "de"),
    ({"LC_MESSAGES": "ja_JP.UTF-8", "LANG": "fr_FR.UTF-8"}, "ja"),
    ({"LC_ALL": "es_ES.UTF-8", "LC_MESSAGES": "ja_JP", "LANG": "fr_FR"}, "es"),
    ({"LANGUAGE": "pt_BR:fr", "LC_ALL": "de_DE.UTF-8"}, "pt"),
    ({"LANGUAGE": "it:zh_CN:fr", "LANG": "de_DE"}, "zh"),
    ({"LANGUAGE": "", "LANG": "zh_CN.UTF-8"}, "zh"),
    ({"LANGUAGE": "it", "LANG": "ko_KR"}, "en"),
    ({"LC_ALL": "C", "LANG": "fr_FR.UTF-8"}, "en"),
    ({"LC_ALL": "C.UTF-8", "LANG": "fr_FR.UTF-8"}, "en"),
    ({"LANG": "POSIX"}, "en"),
    ({"LANG": "it_IT.UTF-8", "LC_MESSAGES": ""}, "en"),
])
def test_process_locale_language(env, expected):
    assert process_locale_language(env) == expected


def test_translate_known_message():
    assert translate(errors.MSG_INVALID_PROPS, "zh") == "无效的 iac-code 转发属性。"
    assert translate(errors.MSG_INVALID_PROPS, "zh-CN") == "无效的 iac-code 转发属性。"
    assert translate(errors.MSG_CWD_NOT_ABSOLUTE, "fr") == "`{field}` doit être un chemin absolu."


@pytest.mark.parametrize("message,language", [
    (errors.MSG_INVALID_PROPS, "en"),
    (errors.MSG_INVALID_PROPS, "it"),
    (errors.MSG_INVALID_PROPS, ""),
    ("Upstream said something free-form.", "zh"),
    ("", "de"),
    (errors.MSG_INVALID_PROPS + " ", "ja"),
])
def test_translate_falls_back_to_the_message(message, language):
    assert translate(message, language) == message


def test_translate_has_no_global_state():
    assert translate(errors.MSG_CANCELLED, "de") != errors.MSG_CANCELLED
    assert translate(errors.MSG_CANCELLED, "en") == errors.MSG_CANCELLED
    assert translate(errors.MSG_CANCELLED, "ja") != translate(errors.MSG_CANCELLED, "de")


def _raw_catalog(language):
    with open(os.path.join(CATALOG_DIR, language + ".json"), encoding="utf-8") as handle:
        return json.load(handle)


@pytest.mark.parametrize("language", TRANSLATED)
def test_catalog_covers_every_message_exactly(language):
    catalog = _raw_catalog(language)
    assert set(catalog) == set(errors.MESSAGES)
    for message, translation in catalog.items():
        assert isinstance(translation, str) and translation.strip(), (language, message)
        assert translation != message, (language, message)
        assert translate(message, language) == translation


_PLACEHOLDER = re.compile(r"\{[^{}]*\}|%(?:\([^)]*\))?[sdrif]")
_IDENTIFIERS = ("threadId", "Last-Event-ID", "rosInvocationId", "application/json", "RunAgentInput", "iac-code",
                "A2A", "AG-UI", "HTTP", "JSON", "PNG", "JPEG", "GIF", "WebP")


@pytest.mark.parametrize("language", TRANSLATED)
def test_catalog_keeps_placeholders_numbers_and_identifiers(language):
    for message, translation in _raw_catalog(language).items():
        assert sorted(_PLACEHOLDER.findall(translation)) == sorted(_PLACEHOLDER.findall(message)), message
        assert sorted(re.findall(r"\d+", translation)) == sorted(re.findall(r"\d+", message)), (language, message)
        for identifier in _IDENTIFIERS:
            if identifier in message:
                assert identifier in translation, (language, message, identifier)


def test_catalogs_are_loaded_once_even_under_concurrency(monkeypatch):
    opened = []
    real_open = open

    def counting_open(path, *args, **kwargs):
        opened.append(path)
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(i18n, "_catalogs", None)
    monkeypatch.setattr(i18n, "open", counting_open, raising=False)
    barrier = threading.Barrier(8)
    results = []

    def worker():
        barrier.wait()
        results.append(translate(errors.MSG_THREAD_BUSY, "es"))

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    translate(errors.MSG_THREAD_BUSY, "pt")
    assert sorted(os.path.basename(path) for path in opened) == sorted(lang + ".json" for lang in TRANSLATED)
    assert results == [_raw_catalog("es")[errors.MSG_THREAD_BUSY]] * 8


def test_catalog_returns_a_copy():
    copy = i18n.catalog("fr")
    copy[errors.MSG_CANCELLED] = "changed"
    assert translate(errors.MSG_CANCELLED, "fr") != "changed"
    assert i18n.catalog("en") == {} and i18n.catalog("it") == {}

"""Per-request language choice and translation of the adapter's own messages.

Several requests in different languages run concurrently, so nothing here touches process-global locale
state: the language travels with the request and ``translate`` is a pure lookup.  Only the stable
English strings declared in ``errors.MESSAGES`` are translated; any other text (for example an error
relayed from the A2A runtime) passes through unchanged, because we cannot vouch for a translation of it.
"""
import json
import math
import os
import threading
from typing import Dict, List, Mapping, Optional, Tuple

from iaccode_agui.errors import MESSAGES

SUPPORTED: Tuple[str, ...] = ("en", "zh", "es", "fr", "de", "ja", "pt")
SOURCE_LANGUAGE = "en"
_CATALOG_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "catalogs")
_LOCALE_VARIABLES = ("LANGUAGE", "LC_ALL", "LC_MESSAGES", "LANG")
_C_LOCALES = frozenset({"c", "posix"})

_catalogs: Optional[Dict[str, Dict[str, str]]] = None
_catalogs_lock = threading.Lock()
_known_messages = frozenset(MESSAGES)


def normalize_tag(tag: str) -> Optional[str]:
    """Reduce a BCP 47 / POSIX tag to a supported primary language, or None.

    Only the primary subtag matters because each catalog is per language, not per region.
    """
    if not isinstance(tag, str):
        return None
    primary = tag.strip().lower().replace("_", "-").split("-", 1)[0]
    return primary if primary in SUPPORTED else None


def _normalize_fallback(fallback: str) -> str:
    return normalize_tag(fallback) or SOURCE_LANGUAGE


def _parse_quality(params: List[str]) -> Optional[float]:
    """The entry's q-value; None drops the entry (RFC 9110 allows only 0 < q <= 1 to select)."""
    quality = 1.0
    for param in params:
        name, sep, value = param.partition("=")
        if name.strip().lower() != "q":
            continue
        if not sep:
            return None
        try:
            quality = float(value.strip())
        except ValueError:
            return None
        break
    if math.isnan(quality) or quality <= 0.0 or quality > 1.0:
        return None
    return quality


def negotiate(accept_language: Optional[str], fallback: str) -> str:
    """Pick the best supported language from an ``Accept-Language`` header.

    Highest q wins and ties keep header order (a stable sort), so a client's first preference is
    honoured when it does not bother with q-values.  ``*`` stands for the server's fallback.
    """
    default = _normalize_fallback(fallback)
    if not isinstance(accept_language, str) or not accept_language.strip():
        return default
    candidates: List[Tuple[float, str]] = []
    for entry in accept_language.split(","):
        pieces = entry.split(";")
        tag = pieces[0].strip()
        if not tag:
            continue
        quality = _parse_quality(pieces[1:])
        if quality is None:
            continue
        language = default if tag == "*" else normalize_tag(tag)
        if language is None:
            continue
        candidates.append((quality, language))
    if not candidates:
        return default
    candidates.sort(key=lambda item: -item[0])
    return candidates[0][1]


def process_locale_language(env: Mapping[str, str]) -> str:
    """The server's own language from the usual POSIX locale variables, in gettext's precedence order.

    A ``C``/``POSIX`` locale means "no localisation", which is English here.
    """
    for variable in _LOCALE_VARIABLES:
        value = env.get(variable) or ""
        entries = value.split(":") if variable == "LANGUAGE" else [value]
        for entry in entries:
            entry = entry.strip()
            if not entry:
                continue
            base = entry.split(".", 1)[0].split("@", 1)[0]
            if base.lower() in _C_LOCALES:
                return SOURCE_LANGUAGE
            language = normalize_tag(base)
            if language is not None:
                return language
    return SOURCE_LANGUAGE


def _load_catalogs() -> Dict[str, Dict[str, str]]:
    """Read every catalog once; later calls share the result without locking."""
    global _catalogs
    loaded = _catalogs
    if loaded is not None:
        return loaded
    with _catalogs_lock:
        if _catalogs is None:
            result: Dict[str, Dict[str, str]] = {}
            for language in SUPPORTED:
                if language == SOURCE_LANGUAGE:
                    continue
                path = os.path.join(_CATALOG_DIR, language + ".json")
                with open(path, encoding="utf-8") as handle:
                    data = json.load(handle)
                result[language] = {
                    key: value for key, value in data.items()
                    if isinstance(key, str) and isinstance(value, str) and value
                }
            _catalogs = result
        return _catalogs


def catalog(language: str) -> Dict[str, str]:
    """A copy of one language's catalog (empty for English or an unsupported language)."""
    normalized = normalize_tag(language)
    if normalized is None or normalized == SOURCE_LANGUAGE:
        return {}
    return dict(_load_catalogs().get(normalized, {}))


def translate(message: str, language: str) -> str:
    """``message`` in ``language`` when it is one of the adapter's declared messages, else unchanged."""
    if message not in _known_messages:
        return message
    normalized = normalize_tag(language)
    if normalized is None or normalized == SOURCE_LANGUAGE:
        return message
    return _load_catalogs().get(normalized, {}).get(message, message)

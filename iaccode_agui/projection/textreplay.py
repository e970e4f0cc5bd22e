"""Suppress text the runtime re-sends after a resume, without ever storing the text itself.

Only SHA-256 digests of finalised message texts are persisted (per execution).  When a resumed run's
first text for a message starts with an already-shown message, the longest such prefix is found by
hashing incrementally and only the new suffix is shown.
"""
import hashlib
from typing import Iterable, Set


def text_digest(text: str) -> str:
    # ``surrogatepass``: a lone surrogate (JSON can carry one) must not crash the run; any other text
    # hashes exactly as plain UTF-8, so digests already stored keep matching.
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def new_suffix(text: str, known_digests: Set[str]) -> str:
    """The part of ``text`` after the longest prefix whose digest is known ('' for an exact replay)."""
    if not known_digests or not text:
        return text
    hasher = hashlib.sha256()
    best = 0
    # Hash character by character (UTF-8 encoded) so each prefix digest costs O(1) extra work.
    for index, char in enumerate(text, start=1):
        hasher.update(char.encode("utf-8", "surrogatepass"))
        if hasher.copy().hexdigest() in known_digests:
            best = index
    return text[best:]


def digests_of(texts: Iterable[str]) -> Set[str]:
    return {text_digest(text) for text in texts if text}

"""Upstream frames that differ from an earlier one only in their text, decoded without a JSON parse.

A streamed answer is thousands of frames that repeat the same bytes (task, context, message id, role,
metadata, the JSON-RPC envelope) around a new text.  Parsing each one costs the JSON scanner a walk over
all of it and a hash of every key; here the first such frame is parsed as usual and cut into the bytes
before its text and the bytes after it, and a later frame made of exactly those bytes around one string
token is answered by scanning that token alone.

Why that is the same value ``json`` would give: JSON is read left to right and a string token delimits
itself, so a document ``prefix + token + suffix`` reads like the template's with only that token's value
changed, whatever the token holds; the one thing to establish is that the slot really is the text's
value.  That is checked once, when the template is made, by parsing the template with another string in
the slot and comparing with the expected value (a slot that were a key or another field would give a
different document).  The value is built fresh along the path to the text (result, status update, status,
message, parts, part); the rest (metadata, ids) is shared with the template's own value, which nothing
downstream modifies.
"""
from json.decoder import scanstring
from typing import Any, Callable, Dict, Optional

__all__ = ["FrameTemplate", "build", "text_of"]


def text_of(body: Any) -> Optional[str]:
    """The text of a status update whose message has exactly one part with a string text, else None."""
    try:
        parts = body["result"]["statusUpdate"]["status"]["message"]["parts"]
        if parts.__class__ is list and len(parts) == 1 and parts[0].__class__ is dict:
            text = parts[0]["text"]
            if text.__class__ is str:
                return text
    except (KeyError, TypeError, IndexError):
        pass
    return None


def _with_text(result: Dict[str, Any], text: str) -> Dict[str, Any]:
    """A copy of ``result`` with its one part's text replaced: new containers along the path only."""
    update = result["statusUpdate"].copy()
    status = update["status"].copy()
    message = status["message"].copy()
    part = message["parts"][0].copy()
    part["text"] = text
    message["parts"] = [part]
    status["message"] = message
    update["status"] = status
    out = result.copy()
    out["statusUpdate"] = update
    return out


class FrameTemplate:
    """The bytes around the text of one parsed frame, and that frame's result."""

    __slots__ = ("prefix", "suffix", "_start", "_tail", "_result", "hits")

    def __init__(self, prefix: str, suffix: str, result: Dict[str, Any]) -> None:
        self.prefix = prefix          # up to and including the text's opening quote
        self.suffix = suffix          # from just after its closing quote
        self._start = len(prefix)
        self._tail = len(suffix)
        self._result = result
        self.hits = 0

    def match(self, data: str) -> Optional[Dict[str, Any]]:
        """The result of ``data`` if it is this template around one string token, else None."""
        if not data.startswith(self.prefix) or not data.endswith(self.suffix):
            return None
        try:
            text, end = scanstring(data, self._start)
        except ValueError:            # not a complete, valid string token there
            return None
        if end != len(data) - self._tail:
            return None
        self.hits += 1
        return _with_text(self._result, text)


def build(data: str, body: Dict[str, Any], loads: Callable[[str], Any]) -> Optional[FrameTemplate]:
    """A template from a frame ``data`` already parsed to ``body`` (a result frame), or None.

    None when the frame carries no single text part or no slot passes the check (the text cannot be
    found as one string token of its own).
    """
    text = text_of(body)
    if text is None:
        return None
    probe = "\x01" if text != "\x01" else "\x02"
    expected = dict(body, result=_with_text(body["result"], probe))
    at = data.find('"')
    while at >= 0:
        try:
            value, end = scanstring(data, at + 1)
        except ValueError:
            value, end = None, -1
        if value == text:
            prefix, suffix = data[:at + 1], data[end:]
            try:
                checked = loads(prefix + ("\\u%04x" % ord(probe)) + '"' + suffix)
            except ValueError:
                checked = None
            if checked == expected:
                return FrameTemplate(prefix, suffix, body["result"])
        at = data.find('"', at + 1)
    return None

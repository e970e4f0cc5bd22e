"""Values the thread document holds that need rules of their own: timestamps and credential key names.

Pure: ``expiresAt`` is an ISO-8601 UTC string ending in "Z", written and read here, and the credential
guard of ``state.model`` (the document must never hold a credential) recognises key names here.
"""
import datetime
import re
from typing import Any, List

_ISO_UTC = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?Z$")


def iso_utc(epoch_seconds: float) -> str:
    """Millisecond-precision UTC timestamp, the shape clients see in ``expiresAt``."""
    moment = datetime.datetime.fromtimestamp(epoch_seconds, tz=datetime.timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + "%03dZ" % (moment.microsecond // 1000)


def parse_iso_utc(text: str) -> float:
    """Epoch seconds of a timestamp written by ``iso_utc`` (or any ``...Z`` with 0-6 fraction digits)."""
    if not isinstance(text, str) or not _ISO_UTC.match(text):
        raise ValueError("not an ISO-8601 UTC timestamp: %r" % (text,))
    body = text[:-1]
    fmt = "%Y-%m-%dT%H:%M:%S.%f" if "." in body else "%Y-%m-%dT%H:%M:%S"
    moment = datetime.datetime.strptime(body, fmt).replace(tzinfo=datetime.timezone.utc)
    return moment.timestamp()


# Key names that identify credentials.  They are compared after lower-casing and removing "_" and "-",
# so camelCase, snake_case and kebab-case spellings are all caught.
SECRET_KEYS = frozenset(
    [
        "llmApiKey",
        "llmHeaders",
        "accessKeySecret",
        "securityToken",
        "iac_code_api_key",
        "alibaba_cloud_access_key_secret",
        "alibaba_cloud_security_token",
        "llm_headers",
    ]
)


def find_secret_keys(value: Any) -> List[str]:
    """Every key, at any depth, whose name is a credential name (see ``SECRET_KEYS``)."""
    found: List[str] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key, sub in item.items():
                if isinstance(key, str) and _norm_key(key) in _SECRET_NORMALISED:
                    found.append(key)
                stack.append(sub)
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return found


def _norm_key(key: str) -> str:
    return key.lower().replace("_", "").replace("-", "")


_SECRET_NORMALISED = frozenset(_norm_key(k) for k in SECRET_KEYS)

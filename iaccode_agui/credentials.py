"""What counts as a credential, for everything the server writes down (pure).

A thread's state must never hold a credential, and neither may its stored conversation: both are files
that outlive the request which carried the credential.  One rule decides for both, so a key name added here
is refused in a state document and redacted from a conversation alike.
"""
from typing import Any, Iterable, List, Set

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
REDACTED = "[redacted]"
# A credential value shorter than this is not searched for in free text: it would match ordinary words.
MIN_SECRET_CHARS = 8


def _norm_key(key: str) -> str:
    return key.lower().replace("_", "").replace("-", "")


_SECRET_NORMALISED = frozenset(_norm_key(k) for k in SECRET_KEYS)


def is_secret_key(key: Any) -> bool:
    return isinstance(key, str) and _norm_key(key) in _SECRET_NORMALISED


def find_secret_keys(value: Any) -> List[str]:
    """Every key, at any depth, whose name is a credential name (see ``SECRET_KEYS``)."""
    found: List[str] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key, sub in item.items():
                if is_secret_key(key):
                    found.append(key)
                stack.append(sub)
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return found


def secret_values(value: Any) -> Set[str]:
    """The strings held under credential keys anywhere in ``value`` (a request's properties, say)."""
    found: Set[str] = set()
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key, sub in item.items():
                if is_secret_key(key):
                    found.update(text for text in _strings(sub) if len(text) >= MIN_SECRET_CHARS)
                else:
                    stack.append(sub)
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return found


def _strings(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _strings(item)


def redact(value: Any, secrets: Iterable[str] = ()) -> Any:
    """``value`` with every credential key's value and every known credential string replaced."""
    if isinstance(value, dict):
        return {key: REDACTED if is_secret_key(key) else redact(item, secrets) for key, item in value.items()}
    if isinstance(value, list):
        return [redact(item, secrets) for item in value]
    if isinstance(value, str):
        return redact_text(value, secrets)
    return value


def redact_text(text: str, secrets: Iterable[str]) -> str:
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text

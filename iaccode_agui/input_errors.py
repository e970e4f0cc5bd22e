"""The one shape of an input refusal: ``INVALID_INPUT`` with a specific message and the JSON pointer of
the offending field (``detail_path``), never the validator's own text (it can echo secrets)."""
from typing import Any, Dict, Optional, Sequence

from iaccode_agui.errors import AguiError


def json_pointer(parts: Sequence[Any]) -> str:
    return "".join("/" + str(part).replace("~", "~0").replace("/", "~1") for part in parts)


def invalid_input(message: str, path: Sequence[Any] = (), params: Optional[Dict[str, str]] = None) -> AguiError:
    err = AguiError("INVALID_INPUT", message, params=params)
    err.detail_path = json_pointer(path)  # type: ignore[attr-defined]
    return err

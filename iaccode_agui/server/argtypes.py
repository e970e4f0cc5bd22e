"""Command-line plumbing shared by the server and the terminal client.

A user who mistypes a flag should read one line that names the flag and what it wants, not a usage dump
or a traceback; and ``--help`` should show the command the user actually typed (``iaccode-agui`` for the
console script, ``python -m iaccode_agui`` for the module), not whichever one the code was written for.
"""
import argparse
import os
import sys
from typing import Callable, Mapping, NoReturn, Optional, TypeVar

from iaccode_agui.config import MAX_SECONDS, ConfigError

EXIT_USAGE = 2
Number = TypeVar("Number", int, float)


def program_name(module: str, argv0: Optional[str] = None) -> str:
    """``python -m <module>`` when started as a module, else the name of the script that was run."""
    argv0 = sys.argv[0] if argv0 is None else argv0
    base = os.path.basename(argv0 or "")
    if not base or base in ("__main__.py", "-c", "-m") or base.endswith(".py"):
        return "python -m %s" % module
    return base


class OneLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line on stderr and exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, "%s: error: %s (see --help)\n" % (self.prog, message))


def _number(kind: Callable[[str], float], what: str, minimum: float, strict: bool,
            maximum: Optional[float] = None) -> Callable[[str], float]:
    def convert(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError("expected %s, got %r" % (what, text)) from None
        if value != value or (strict and value <= minimum) or (not strict and value < minimum) or (
                maximum is not None and value > maximum):
            raise argparse.ArgumentTypeError("expected %s, got %r" % (what, text))
        return value
    convert.__name__ = what  # argparse names the converter in some messages; make that readable too
    return convert


seconds = _number(float, "a number of seconds >= 0", 0, strict=False, maximum=MAX_SECONDS)
positive_seconds = _number(float, "a number of seconds > 0", 0, strict=True, maximum=MAX_SECONDS)
count = _number(int, "a whole number >= 0", 0, strict=False)
port = _number(int, "a port number between 1 and 65535", 0, strict=True, maximum=65535)
megabytes = _number(float, "a number of megabytes >= 0", 0, strict=False, maximum=1e9)


def at_least(minimum: int) -> Callable[[str], float]:
    return _number(int, "a whole number >= %d" % minimum, minimum, strict=False)


def between(minimum: int, maximum: int) -> Callable[[str], float]:
    return _number(int, "a whole number from %d to %d" % (minimum, maximum), minimum, strict=False, maximum=maximum)


def choice(*allowed: str) -> Callable[[str], str]:
    """A converter for a variable that stands in for a flag with ``choices``."""
    def convert(text: str) -> str:
        if text not in allowed:
            raise argparse.ArgumentTypeError("expected one of %s, got %r" % (", ".join(allowed), text))
        return text
    return convert


def flag_or_env(flag: Optional[Number], env: Mapping[str, str], variable: str, default: Number,
                convert: Callable[[str], float]) -> Number:
    """The flag's value, else its environment variable's, else the default; a flag or variable that
    ``convert`` refuses is a ``ConfigError`` naming the variable, so both spellings fail alike."""
    raw = env.get(variable) if flag is None else str(flag)
    if not raw:
        return default
    try:
        return convert(raw)  # type: ignore[return-value]
    except argparse.ArgumentTypeError as exc:
        raise ConfigError("%s: %s" % (variable, exc)) from None

"""Timestamps the thread document holds: ``expiresAt`` is an ISO-8601 UTC string ending in "Z" (pure)."""
import datetime
import re

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

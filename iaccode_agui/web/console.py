"""The built-in web console: a few static files from package data, served under ``/console``.

The page, its ES modules and its stylesheet are the same bytes for every server and carry no data, no
setting and no token, so they are served without authentication: a browser navigating to ``/console``
cannot attach a bearer header, and asking for the token is the page's first job.  Everything the page
shows comes from the public API, which stays behind the configured token; the page keeps the token in
``sessionStorage`` and sends it as ``Authorization: Bearer``.

A strict Content-Security-Policy (``default-src 'self'``, no inline script or style, no eval) proves that
nothing is loaded from another origin.  Assets are revalidated on every load (``no-cache`` + a strong
ETag), so an upgraded package is never mixed with stale modules in a browser cache, and a reload costs a
304 per file.
"""
import hashlib
import os
from dataclasses import dataclass
from typing import Dict, Optional

from werkzeug.wrappers import Request, Response

from iaccode_agui.errors import AguiError

STATIC_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "static")

CONTENT_SECURITY_POLICY = ("default-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'; "
                           "object-src 'none'")
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-cache",
}
MEDIA_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
               ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml",
               ".json": "application/json; charset=utf-8"}
# The page names its assets relative to this prefix, which includes the mount point of an embedding app.
BASE_MARKER = b"{{base}}"


@dataclass(frozen=True)
class Asset:
    body: bytes
    media_type: str
    etag: str


def _load(directory: str) -> Dict[str, Asset]:
    """Every file of the static directory, read once: the set is small and fixed at install time."""
    assets: Dict[str, Asset] = {}
    for name in sorted(os.listdir(directory)):
        media_type = MEDIA_TYPES.get(os.path.splitext(name)[1])
        path = os.path.join(directory, name)
        if media_type is None or not os.path.isfile(path):
            continue
        with open(path, "rb") as handle:
            body = handle.read()
        assets[name] = Asset(body, media_type, hashlib.sha256(body).hexdigest()[:32])
    return assets


class Console:
    """Answers ``GET /console`` (the page) and ``GET /console/<name>`` (its modules and stylesheet)."""

    def __init__(self, directory: str = STATIC_DIR) -> None:
        self.assets = _load(directory)
        if "index.html" not in self.assets:
            raise RuntimeError("the console page is missing from the package: %s" % directory)

    def page(self, request: Request) -> Response:
        base = (request.script_root.rstrip("/") + "/console/").encode("utf-8")
        asset = self.assets["index.html"]
        body = asset.body.replace(BASE_MARKER, _attribute_safe(base))
        etag = hashlib.sha256(asset.etag.encode("ascii") + b"\0" + base).hexdigest()[:32]
        return self._respond(request, Asset(body, asset.media_type, etag))

    def asset(self, request: Request, name: str) -> Response:
        asset = self.assets.get(name)
        if asset is None or name == "index.html":
            raise AguiError("NOT_FOUND")
        return self._respond(request, asset)

    @staticmethod
    def _respond(request: Request, asset: Asset) -> Response:
        if request.if_none_match.contains(asset.etag):
            response = Response(status=304)
        else:
            response = Response(asset.body, content_type=asset.media_type)
        response.set_etag(asset.etag)
        for header, value in SECURITY_HEADERS.items():
            response.headers[header] = value
        return response


def _attribute_safe(value: bytes) -> bytes:
    """The mount prefix as it may appear inside an HTML attribute (it comes from the request)."""
    for raw, escaped in ((b"&", b"&amp;"), (b'"', b"&quot;"), (b"<", b"&lt;"), (b">", b"&gt;"), (b"'", b"&#39;")):
        value = value.replace(raw, escaped)
    return value


def make_console(enabled: bool) -> Optional[Console]:
    return Console() if enabled else None

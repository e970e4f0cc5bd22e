"""Download links for files a run wrote into its workspace (``--publish-files``).

A tool result that produced workspace files becomes the JSON an AgentCore client expects,
``{"status":"success","files":[{"fileName","mimeType","downloadUrl","expiresInSeconds"}]}``, where each
``downloadUrl`` is ``GET /ag-ui/files/<token>`` on this server.  A token is 256 random bits (unguessable),
expires after ``--file-link-ttl`` seconds, and names one regular file inside the run's workspace: a path
through a symlink or ``..`` is refused when the link is made and again when it is served, and the file is
streamed from disk, never read whole.
"""
import collections
import dataclasses
import json
import mimetypes
import os
import secrets
import stat
import threading
import time
from typing import Any, Callable, Dict, IO, List, Optional, Tuple

from iaccode_agui.errors import AguiError

ARTIFACT_EVENT = "iac-code.artifact.v1"


@dataclasses.dataclass(frozen=True)
class Link:
    path: str
    root: str
    file_name: str
    mime_type: str
    expires_at: float


class PublishError(Exception):
    """The file cannot be offered (outside the workspace, not a regular file, a symlink on the way)."""


def confined(path: str, root: str) -> str:
    """``path`` as a real path inside ``root``; refuses ``..``, symlinks and anything that is not a file."""
    if not os.path.isabs(path) or ".." in path.replace("\\", "/").split("/"):
        raise PublishError("not an absolute path without '..'")
    real_root = os.path.realpath(root)
    if os.path.realpath(path) != os.path.normpath(path):
        raise PublishError("a symlink on the path")
    try:
        inside = os.path.commonpath([real_root, path]) == real_root
    except ValueError:
        inside = False
    if not inside:
        raise PublishError("outside the workspace")
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        raise PublishError("no such file")
    if not stat.S_ISREG(mode):
        raise PublishError("not a regular file")
    return path


class FileLinks:
    """The live links of this process; bounded, oldest dropped first, expired ones swept on every use."""

    def __init__(self, ttl: float, max_links: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl = ttl
        self.max_links = max(1, max_links)
        self._clock = clock
        self._links: "collections.OrderedDict[str, Link]" = collections.OrderedDict()
        self._lock = threading.Lock()

    def publish(self, path: str, root: str, file_name: Optional[str] = None,
                mime_type: Optional[str] = None) -> Tuple[str, Link]:
        real = confined(path, root)
        name = file_name or os.path.basename(real)
        mime = mime_type or mimetypes.guess_type(name)[0] or "application/octet-stream"
        token = secrets.token_urlsafe(32)
        link = Link(path=real, root=os.path.realpath(root), file_name=name, mime_type=mime,
                    expires_at=self._clock() + self.ttl)
        with self._lock:
            self._sweep()
            self._links[token] = link
            while len(self._links) > self.max_links:
                self._links.popitem(last=False)
        return token, link

    def __len__(self) -> int:
        with self._lock:
            self._sweep()
            return len(self._links)

    def open(self, token: str) -> Tuple[IO[bytes], int, Link]:
        """The file behind ``token``, opened without following a symlink swapped in since publication."""
        with self._lock:
            self._sweep()
            link = self._links.get(token)
        if link is None:
            raise AguiError("FILE_LINK_NOT_FOUND")
        try:
            confined(link.path, link.root)
            # O_NONBLOCK: a FIFO swapped in after the check must not hold this thread (a regular file's
            # reads ignore the flag); the type check below then refuses it.
            fd = os.open(link.path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
        except (PublishError, OSError):
            raise AguiError("FILE_LINK_NOT_FOUND")
        handle = os.fdopen(fd, "rb")
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            handle.close()
            raise AguiError("FILE_LINK_NOT_FOUND")
        return handle, info.st_size, link

    def _sweep(self) -> None:
        now = self._clock()
        while self._links:
            token, link = next(iter(self._links.items()))
            if link.expires_at > now:
                break
            del self._links[token]


def artifact_files(value: Any) -> List[Dict[str, Optional[str]]]:
    """The workspace files an ``iac-code.artifact.v1`` event describes (path, name, media type)."""
    found: List[Dict[str, Optional[str]]] = []
    if not isinstance(value, dict):
        return found
    candidates = [(value.get("metadata"), value.get("name"))]
    for part in value.get("parts") or []:
        if isinstance(part, dict):
            candidates.append((part.get("metadata"), part.get("filename")))
    for metadata, name in candidates:
        path = metadata.get("sourcePath") if isinstance(metadata, dict) else None
        if isinstance(path, str) and all(item["path"] != path for item in found):
            mime = metadata.get("mediaType")
            found.append({"path": path, "name": name if isinstance(name, str) else None,
                          "mime": mime if isinstance(mime, str) else None})
    return found


class RunFilePublisher:
    """One run's side of publication: remembers the files artifacts announce, rewrites the next tool result."""

    def __init__(self, links: FileLinks, workspace: str, base_url: str) -> None:
        self.links = links
        self.workspace = workspace
        self.base_url = base_url
        self._pending: List[Dict[str, Optional[str]]] = []

    def note_artifact(self, value: Any) -> None:
        self._pending.extend(artifact_files(value))

    def tool_result_content(self) -> Optional[str]:
        """The JSON content for the tool result that follows the artifacts, or None if none were seen."""
        if not self._pending:
            return None
        pending, self._pending = self._pending, []
        files = []
        for item in pending:
            try:
                token, link = self.links.publish(item["path"] or "", self.workspace, item["name"], item["mime"])
            except PublishError as exc:
                return json.dumps({"status": "error", "message": "%s: %s" % (item["name"] or "file", exc)},
                                  ensure_ascii=False)
            files.append({"fileName": link.file_name, "mimeType": link.mime_type,
                          "downloadUrl": self.base_url + "ag-ui/files/" + token,
                          "expiresInSeconds": int(self.links.ttl)})
        return json.dumps({"status": "success", "files": files}, ensure_ascii=False)

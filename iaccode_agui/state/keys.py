"""Thread ids -> file-name stems.

A thread id is chosen by the client, so it cannot be used as a file name as-is: it may contain path
separators, NUL, upper-case letters that collide with their lower-case twin on case-insensitive
filesystems (macOS, Windows shares), names Windows reserves, or simply be too long.  The stem keeps
readable ids readable and encodes every other id reversibly (hex) or, when that would be too long, by a
hash.  The three forms cannot collide with each other: plain stems never contain ``~``, and the
``aguiid~`` / ``aguihash~`` prefixes differ.  Hex is lower-case, so two distinct ids never map to stems
that differ only by case.  The state document re-checks the real ``threadId`` anyway.
"""
import hashlib
import re

MAX_STEM_CHARS = 200

_PLAIN = re.compile(r"^[a-z0-9_.-]+$")
_RESERVED = frozenset(
    ["con", "prn", "aux", "nul"]
    + ["com%d" % i for i in range(1, 10)]
    + ["lpt%d" % i for i in range(1, 10)]
)


def _is_plain(thread_id: str) -> bool:
    if len(thread_id) > MAX_STEM_CHARS or not _PLAIN.match(thread_id):
        return False
    if thread_id in (".", "..") or thread_id.endswith("."):
        return False
    return thread_id.split(".", 1)[0].lower() not in _RESERVED


def thread_file_stem(thread_id: str) -> str:
    """The file-name stem (without extension) for one thread's files."""
    if not isinstance(thread_id, str):
        raise TypeError("thread id must be a string")
    if _is_plain(thread_id):
        return thread_id
    encoded = "aguiid~" + thread_id.encode("utf-8", "surrogatepass").hex()
    if len(encoded) <= MAX_STEM_CHARS:
        return encoded
    return "aguihash~" + hashlib.sha256(thread_id.encode("utf-8", "surrogatepass")).hexdigest()


def run_file_stem(thread_id: str, run_id: str) -> str:
    """The file-name stem for one run's files (its durable event log).

    ``<thread stem>@<run stem>``: no stem form contains ``@``, so the pair is unambiguous.  When the pair
    would make too long a name, a hash of both ids (NUL-separated, a character neither stem form keeps
    literally) stands in; it carries no ``@`` and so cannot collide with a pair.
    """
    if not isinstance(run_id, str):
        raise TypeError("run id must be a string")
    pair = thread_file_stem(thread_id) + "@" + thread_file_stem(run_id)
    if len(pair) <= MAX_STEM_CHARS:
        return pair
    joined = (thread_id + "\x00" + run_id).encode("utf-8", "surrogatepass")
    return "aguihash~run~" + hashlib.sha256(joined).hexdigest()

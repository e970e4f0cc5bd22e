"""Test helpers for the state journal: what a power loss leaves behind, and how to pretend one happened."""
import os
from typing import List, Set

from iaccode_agui.state import journal as wal


def journal_files(journal_dir: str) -> List[str]:
    try:
        return sorted(name for name in os.listdir(journal_dir) if not name.startswith("."))
    except FileNotFoundError:
        return []


def named_stems(journal_dir: str) -> Set[str]:
    """Every thread stem the journals in ``journal_dir`` still hold a record for."""
    stems: Set[str] = set()
    for owner in wal.journal_owners(journal_dir):
        for suffix in wal.SEGMENTS:
            _, records = wal.read_segment(os.path.join(journal_dir, owner + suffix))
            stems.update(str(meta["s"]) for meta, _ in records if meta.get("k") in (wal.PUT, wal.DELETE))
    return stems


def from_an_earlier_boot(journal_dir: str) -> None:
    """Rewrite every segment's header as if it had been written before a reboot (an OS crash since)."""
    for owner in wal.journal_owners(journal_dir):
        for suffix in wal.SEGMENTS:
            path = os.path.join(journal_dir, owner + suffix)
            if not os.path.exists(path):
                continue
            with open(path, "rb") as handle:
                records = list(wal.decode(handle.read()))
            out = []
            for meta, payload in records:
                if meta.get("k") == wal.HEADER:
                    meta = dict(meta, boot="an-earlier-boot")
                out.append(wal.encode(meta, payload))
            with open(path, "wb") as handle:
                handle.write(b"".join(out))



def end_of_records(path: str) -> int:
    """The offset just past a segment's current records (where its next append would go)."""
    header, records = wal.read_segment(path)
    assert header is not None
    with open(path, "rb") as handle:
        first = next(wal.decode(handle.read()))
    return len(wal.encode(*first)) + sum(len(wal.encode(meta, payload)) for meta, payload in records)

"""Remove threads idle for more than N days from an adapter state directory.

Usage: ``python tools/prune_threads.py --state-dir DIR --idle-days N [--dry-run]``.  Safe while adapters
run on the same directory: a thread is removed only while this command holds both of its locks, and never
when it has an active or orphaned run, an interrupt that can still be answered, a file written within the
window, or a document that does not read back (those are listed for the operator).  Prints one line per
outcome with its count; exits 0, or 2 for unusable arguments.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from iaccode_agui.state import prune as pruning  # noqa: E402
from iaccode_agui.state.store import ThreadStore  # noqa: E402

ORDER = (pruning.REMOVED, pruning.RECENT, pruning.ACTIVE, pruning.INTERRUPTED, pruning.BUSY, pruning.UNREADABLE)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--state-dir", required=True, help="the adapter's --state-dir")
    parser.add_argument("--idle-days", type=float, required=True, help="remove threads idle longer than this")
    parser.add_argument("--dry-run", action="store_true", help="report what would be removed, remove nothing")
    args = parser.parse_args(argv)
    if args.idle_days < 0:
        parser.error("--idle-days must be >= 0")
    store = ThreadStore(os.path.realpath(os.path.expanduser(args.state_dir)))
    if not os.path.isdir(store.threads_dir):
        print("no threads directory under %s" % store.state_dir)
        return 0
    report = pruning.prune(store, args.idle_days * 86400.0, dry_run=args.dry_run)
    verb = "would be removed" if args.dry_run else "removed"
    for outcome in ORDER:
        label = verb if outcome == pruning.REMOVED else "kept (%s)" % outcome
        print("%-26s %d" % (label, report.count(outcome)))
        if outcome == pruning.UNREADABLE:
            for stem in report.outcomes.get(outcome, []):
                print("  inspect: %s" % os.path.join(store.threads_dir, stem + ".json"))
    return 0


if __name__ == "__main__":
    sys.exit(main())

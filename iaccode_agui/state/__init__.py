"""Per-thread state on disk: the thread document, its journal and locks, the stored history, pruning."""

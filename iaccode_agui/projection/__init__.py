"""Pure projection of A2A events into AG-UI events (no I/O)."""

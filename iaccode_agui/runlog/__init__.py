"""The durable run log: one append-only file per run, its byte format, replay, following and retention."""

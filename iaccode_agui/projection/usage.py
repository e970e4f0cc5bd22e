"""Token usage: every LLM call's counts, summed per (provider, model) for RUN_FINISHED / RUN_ERROR."""
from typing import Any, Dict, List, Optional, Tuple

_COUNTS = ("inputTokens", "outputTokens", "totalTokens", "cachedInputTokens")


def _count(value: Any) -> Optional[int]:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, float) and value.is_integer() and value >= 0:
        return int(value)
    return None


class UsageLedger:
    def __init__(self) -> None:
        self._totals: Dict[Tuple[Optional[str], Optional[str]], Dict[str, int]] = {}
        self.version = 0          # bumped by every counted record, so a writer knows when to note the totals

    def restore(self, summary: Any) -> None:
        """Start from totals counted earlier (by the process that owned the run before it died)."""
        for entry in summary if isinstance(summary, list) else []:
            if isinstance(entry, dict):
                self.record(entry)

    def record(self, usage: Any) -> None:
        """Ignore anything that is not a usage record (e.g. context-window stats from older runtimes)."""
        if not isinstance(usage, dict):
            return
        counts = {name: _count(usage.get(name)) for name in _COUNTS}
        if all(value is None for value in counts.values()):
            return
        if counts["inputTokens"] is None and counts["outputTokens"] is None:
            return
        provider = usage.get("provider") if isinstance(usage.get("provider"), str) else None
        model = usage.get("model") if isinstance(usage.get("model"), str) else None
        bucket = self._totals.setdefault((provider, model), {})
        for name, value in counts.items():
            if value is not None:
                bucket[name] = bucket.get(name, 0) + value
        self.version += 1

    def summary(self) -> Optional[List[Dict[str, Any]]]:
        if not self._totals:
            return None
        out = []
        for (provider, model), counts in self._totals.items():
            entry: Dict[str, Any] = {}
            if provider is not None:
                entry["provider"] = provider
            if model is not None:
                entry["model"] = model
            for name in _COUNTS:
                if name in counts:
                    entry[name] = counts[name]
            out.append(entry)
        return out

"""The real `iac-code a2a` 0.16 runtime's own frame bytes are read from templates, with the same events.

The unit tests build frames with ``json.dumps``; this checks the bytes the real runtime writes: its text
frames must repeat around their text (so most of a streamed answer skips the JSON parse) and the events
of a turn must be what parsing every frame gives.
"""
from typing import Any, Dict, List

from iaccode_agui.a2a import frametemplate
from iaccode_agui.a2a import call as stream_module
from tests.harness import Adapter, text_of


def _turn(adapter: Adapter, thread: str) -> List[Dict[str, Any]]:
    events = adapter.run(adapter.body("hello real runtime", thread=thread, ros="inv-1"), timeout=120)
    assert events[-1]["outcome"] == {"type": "success"}
    return events


def _comparable(events: List[Dict[str, Any]]) -> List[Any]:
    """Types, texts and outcome, without the ids and times that differ between two turns anyway."""
    return [(event["type"], event.get("delta"), event.get("name"), event.get("outcome")) for event in events]


def test_real_runtime_text_frames_are_read_from_templates(real_a2a, tmp_path, monkeypatch):
    counts = {"hits": 0, "misses": 0}
    match = frametemplate.FrameTemplate.match

    def counted(self: Any, data: str) -> Any:
        result = match(self, data)
        counts["hits" if result is not None else "misses"] += 1
        return result

    monkeypatch.setattr(frametemplate.FrameTemplate, "match", counted)
    adapter = Adapter(real_a2a.url, real_a2a.token, str(tmp_path / "with"), real_a2a.workspace)
    try:
        with_templates = _turn(adapter, "it-template-on")
    finally:
        adapter.stop()
    assert counts["hits"] > counts["misses"] > 0, counts

    monkeypatch.setattr(stream_module.A2AStream, "_new_template", lambda self, data, body: None)
    adapter = Adapter(real_a2a.url, real_a2a.token, str(tmp_path / "without"), real_a2a.workspace)
    try:
        parsed = _turn(adapter, "it-template-off")
    finally:
        adapter.stop()
    assert "Your message was: hello real runtime" in text_of(with_templates)
    assert _comparable(with_templates) == _comparable(parsed)

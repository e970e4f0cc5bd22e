"""A run's profile survives in its log header, so a process adopting the run shapes it as its owner did."""
import logging

from iaccode_agui.runlog import encoding as logformat
from iaccode_agui.runs.profile import DEFAULT, ProfileRegistry, RunProfile, header_profile, publisher_for


def _round_trip(header):
    data = logformat.encode_start(header)
    records, _ = logformat.parse(data, logformat.check_magic(data))
    return dict(records[0].fields or {})


def _shout(language):
    return lambda event: [dict(event, language=language), {"type": "CUSTOM", "name": "extra"}]


def test_the_profile_name_and_args_round_trip_through_the_log_header():
    profile = RunProfile(name="agentcore", shaper=_shout, args={"workspace": "/w", "base": "http://h/"})
    header = _round_trip(dict(profile.header_fields(), language="fr", threadId="t", runId="r"))
    assert header_profile(header) == ("agentcore", {"workspace": "/w", "base": "http://h/"})
    registry = ProfileRegistry()
    built = []
    registry.register("agentcore", lambda args: built.append(args) or RunProfile("agentcore", _shout, args))
    rebuilt = registry.rebuild(header)
    assert rebuilt.name == "agentcore" and built == [{"workspace": "/w", "base": "http://h/"}]
    sent = []

    class Channel:
        publish = staticmethod(sent.append)
    publisher_for(Channel(), rebuilt, header["language"]).publish({"type": "RUN_FINISHED"})
    assert sent == [{"type": "RUN_FINISHED", "language": "fr"}, {"type": "CUSTOM", "name": "extra"}]


def test_a_default_run_and_a_log_without_a_profile_rebuild_the_default():
    registry = ProfileRegistry()
    assert registry.rebuild(_round_trip(DEFAULT.header_fields())) is DEFAULT
    assert registry.rebuild(_round_trip({"threadId": "t", "runId": "r"})) is DEFAULT   # older logs
    channel = object()
    assert publisher_for(channel, DEFAULT, "en") is channel


def test_an_unknown_profile_name_warns_and_falls_back_to_the_default(caplog):
    header = _round_trip({"profile": "from-the-future", "profileArgs": {}, "threadId": "t", "runId": "r"})
    with caplog.at_level(logging.WARNING, logger="iaccode_agui.runs"):
        assert ProfileRegistry().rebuild(header) is DEFAULT
    assert "from-the-future" in caplog.text and "default shaping" in caplog.text

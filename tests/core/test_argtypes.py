"""The one converter behind every bounded setting: flag, else environment variable, else default."""
import pytest

from iaccode_agui.server.argtypes import at_least, flag_or_env, positive_seconds
from iaccode_agui.config import ConfigError


def test_flag_wins_then_variable_then_default():
    env = {"X": "7"}
    assert flag_or_env(3, env, "X", 5, at_least(1)) == 3
    assert flag_or_env(None, env, "X", 5, at_least(1)) == 7
    assert flag_or_env(None, {}, "X", 5, at_least(1)) == 5
    assert flag_or_env(None, {"X": "0.5"}, "X", 9.0, positive_seconds) == 0.5


@pytest.mark.parametrize("flag,env", [(0, {}), (None, {"X": "0"}), (None, {"X": "many"}), (None, {"X": "1.5"})])
def test_a_refused_flag_or_variable_names_the_variable(flag, env):
    with pytest.raises(ConfigError, match=r"^X: expected a whole number >= 1"):
        flag_or_env(flag, env, "X", 5, at_least(1))


@pytest.mark.parametrize("raw", ["0", "-1", "nan", "soon"])
def test_seconds_must_be_positive(raw):
    with pytest.raises(ConfigError, match=r"^X: expected a number of seconds > 0"):
        flag_or_env(None, {"X": raw}, "X", 5.0, positive_seconds)


BOUNDED = [("--max-json-depth", "IAC_CODE_AGUI_MAX_JSON_DEPTH", "0"),
           ("--max-messages", "IAC_CODE_AGUI_MAX_MESSAGES", "0"),
           ("--run-id-window", "IAC_CODE_AGUI_RUN_ID_WINDOW", "0"),
           ("--run-id-window-age", "IAC_CODE_AGUI_RUN_ID_WINDOW_AGE", "0"),
           ("--file-link-ttl", "IAC_CODE_AGUI_FILE_LINK_TTL", "0"),
           ("--max-file-links", "IAC_CODE_AGUI_MAX_FILE_LINKS", "-3"),
           ("--max-agentcore-request-bytes", "IAC_CODE_AGUI_MAX_AGENTCORE_REQUEST_BYTES", "0"),
           ("--max-image-bytes", "IAC_CODE_AGUI_MAX_IMAGE_BYTES", "0"),
           ("--max-images-bytes", "IAC_CODE_AGUI_MAX_IMAGES_BYTES", "0"),
           ("--max-sse-event-bytes", "IAC_CODE_AGUI_MAX_SSE_EVENT_BYTES", "100")]


@pytest.mark.parametrize("flag,variable,bad", BOUNDED)
def test_a_refused_bound_names_the_flag_or_the_variable_the_user_set(tmp_path, capsys, flag, variable, bad):
    """Start-up errors name what the user typed: the flag (argparse, exit 2) or the variable, never an
    internal field name or a paraphrase."""
    from iaccode_agui.server import cli
    with pytest.raises(SystemExit) as exited:
        cli.build_parser().parse_args([flag, bad])
    assert exited.value.code == 2 and flag in capsys.readouterr().err
    args = cli.build_parser().parse_args(["--state-dir", str(tmp_path)])
    with pytest.raises(ConfigError, match="^%s: expected " % variable):
        cli.settings_from(args, {variable: bad}, "http://127.0.0.1:1/", None)

"""The one converter behind every bounded setting: flag, else environment variable, else default."""
import pytest

from iaccode_agui.argtypes import at_least, flag_or_env, positive_seconds
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

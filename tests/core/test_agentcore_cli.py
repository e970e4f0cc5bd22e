"""Flags and variables of the AgentCore routes and server-side defaults."""
import pytest

from iaccode_agui.server import cli
from iaccode_agui.config import ConfigError


def settings(argv, env, workspace):
    env = dict(env, IAC_CODE_AGUI_ALLOWED_CWDS=workspace)
    args = cli.build_parser().parse_args(argv)
    return cli.settings_from(args, env, "http://127.0.0.1:9/", None)


def test_flags_win_over_variables(workspace, tmp_path):
    env = {"IAC_CODE_AGUI_DEFAULT_CWD": workspace, "IAC_CODE_AGUI_MAX_SSE_EVENT_BYTES": "8192",
           "IAC_CODE_AGUI_MAX_IMAGE_BYTES": "1000", "IAC_CODE_AGUI_MAX_IMAGES_BYTES": "2000",
           "IAC_CODE_AGUI_MAX_AGENTCORE_REQUEST_BYTES": "5000", "IAC_CODE_AGUI_STATE_DIR": str(tmp_path)}
    from_env = settings([], env, workspace)
    assert (from_env.default_cwd, from_env.max_sse_event_bytes, from_env.max_image_bytes,
            from_env.max_images_bytes, from_env.agentcore_max_request_bytes) == (workspace, 8192, 1000, 2000, 5000)
    sub = workspace + "/sub"
    import os
    os.mkdir(sub)
    flags = settings(["--default-cwd", sub, "--max-sse-event-bytes", "4096", "--max-image-bytes", "7"], env,
                     workspace)
    assert (flags.default_cwd, flags.max_sse_event_bytes, flags.max_image_bytes) == (sub, 4096, 7)


def test_defaults_without_flags(workspace, tmp_path):
    plain = settings([], {"IAC_CODE_AGUI_STATE_DIR": str(tmp_path)}, workspace)
    assert plain.default_cwd is None and plain.agentcore_max_request_bytes == 96 * 1024 * 1024
    assert (plain.max_image_bytes, plain.max_images_bytes, plain.max_sse_event_bytes) == (
        8 * 1024 * 1024, 10 * 1024 * 1024, 1024 * 1024)


@pytest.mark.parametrize("env", [{"IAC_CODE_AGUI_MAX_SSE_EVENT_BYTES": "lots"},
                                 {"IAC_CODE_AGUI_MAX_SSE_EVENT_BYTES": "100"},
                                 {"IAC_CODE_AGUI_MAX_IMAGE_BYTES": "0"},
                                 {"IAC_CODE_AGUI_DEFAULT_CWD": "/"},
                                 {"IAC_CODE_AGUI_DETACHED_RUN_TIMEOUT": "-1"},
                                 {"IAC_CODE_AGUI_DETACHED_RUN_TIMEOUT": "2e9"},
                                 {"IAC_CODE_AGUI_DETACHED_RUN_TIMEOUT": "soon"}])
def test_unusable_values_are_config_errors(workspace, tmp_path, env):
    with pytest.raises(ConfigError):
        settings([], dict(env, IAC_CODE_AGUI_STATE_DIR=str(tmp_path)), workspace)


def test_the_detached_run_timeout_flag_and_variable(workspace, tmp_path):
    env = {"IAC_CODE_AGUI_STATE_DIR": str(tmp_path)}
    assert settings([], env, workspace).detached_run_timeout == 0.0       # keep running, as before
    assert settings([], dict(env, IAC_CODE_AGUI_DETACHED_RUN_TIMEOUT="90"), workspace).detached_run_timeout == 90
    assert settings(["--detached-run-timeout", "2.5"], dict(env, IAC_CODE_AGUI_DETACHED_RUN_TIMEOUT="90"),
                    workspace).detached_run_timeout == 2.5
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["--detached-run-timeout", "-3"])


def test_cli_exits_2_on_a_default_cwd_outside_the_roots(workspace, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(cli, "configure_logging", lambda debug, to_stdout: None)   # keep the test's logging
    code = cli.main(["--a2a-url", "http://127.0.0.1:9/", "--default-cwd", "/"],
                    env={"IAC_CODE_AGUI_ALLOWED_CWDS": workspace, "IAC_CODE_AGUI_STATE_DIR": str(tmp_path)})
    assert code == 2 and "--default-cwd" in capsys.readouterr().err


def test_file_publication_flags(workspace, tmp_path):
    base = {"IAC_CODE_AGUI_STATE_DIR": str(tmp_path)}
    off = settings([], base, workspace)
    assert off.publish_files is False and off.file_link_ttl == 3600 and off.max_file_links == 10000
    env = dict(base, IAC_CODE_AGUI_PUBLISH_FILES="yes", IAC_CODE_AGUI_FILE_LINK_TTL="60",
               IAC_CODE_AGUI_MAX_FILE_LINKS="5")
    on = settings([], env, workspace)
    assert (on.publish_files, on.file_link_ttl, on.max_file_links) == (True, 60.0, 5)
    flags = settings(["--publish-files", "--file-link-ttl", "10", "--max-file-links", "2"], base, workspace)
    assert (flags.publish_files, flags.file_link_ttl, flags.max_file_links) == (True, 10.0, 2)
    with pytest.raises(ConfigError):
        settings([], dict(base, IAC_CODE_AGUI_PUBLISH_FILES="maybe"), workspace)
    with pytest.raises(ConfigError):
        settings([], dict(base, IAC_CODE_AGUI_MAX_FILE_LINKS="0"), workspace)

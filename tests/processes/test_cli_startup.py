"""Start-up of ``iaccode-agui`` / ``python -m iaccode_agui``: every bad flag or environment is one line, exit 2."""
import logging
import os
import signal
import socket
import subprocess
import sys

import pytest

from iaccode_agui.server import cli
from iaccode_agui.server.argtypes import program_name
from iaccode_agui.server.serving import ServerThread
from iaccode_agui.server.upstream import free_loopback_port

BIN = os.path.dirname(sys.executable)


def _run(args, tmp_path, **extra_env):
    env = dict(os.environ, IAC_CODE_CONFIG_DIR=str(tmp_path / "cfg"), **extra_env)
    return subprocess.run([sys.executable, "-m", "iaccode_agui"] + args, env=env, capture_output=True, text=True,
                          timeout=60)


def _one_line_error(done, *needles):
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def test_a_busy_port_is_one_line_naming_the_flag(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = _run(["--demo", "--port", str(port), "--state-dir", str(tmp_path / "s")], tmp_path)
    _one_line_error(done, "--port %d" % port, "already in use")


@pytest.mark.parametrize("host", ["no.such.host.invalid", "999.1.1.1"])
def test_an_unusable_host_is_one_line_naming_the_flag(tmp_path, host):
    done = _run(["--demo", "--host", host, "--port", str(free_loopback_port()), "--state-dir", str(tmp_path / "s")],
                tmp_path)
    _one_line_error(done, "--host %s" % host)


@pytest.mark.parametrize("args, needles", [
    (["--port", "abc"], ["argument --port", "port number", "'abc'"]),
    (["--port", "70000"], ["argument --port", "between 1 and 65535"]),
    (["--threads", "x"], ["argument --threads", "whole number"]),
    (["--threads", "2"], ["argument --threads", ">= 4"]),
    (["--max-active-runs", "-1"], ["argument --max-active-runs", ">= 0"]),
    (["--heartbeat-interval", "0"], ["argument --heartbeat-interval", "> 0"]),
    (["--interrupt-ttl", "nan"], ["argument --interrupt-ttl", "seconds"]),
    (["--drain-timeout", "soon"], ["argument --drain-timeout", "seconds"]),
    (["--upstream-idle-timeout", "-5"], ["argument --upstream-idle-timeout"]),
    (["--reconnect-grace", "inf"], ["argument --reconnect-grace"]),
    (["--idle-shutdown", "-1"], ["argument --idle-shutdown"]),
])
def test_every_type_error_names_its_flag(tmp_path, args, needles):
    line = _one_line_error(_run(args, tmp_path), *needles)
    assert "invalid _" not in line and "value:" not in line


def test_bad_port_variable_names_the_variable(tmp_path):
    _one_line_error(_run(["--demo"], tmp_path, IAC_CODE_AGUI_PORT="http"), "IAC_CODE_AGUI_PORT", "'http'")


def test_client_read_timeout_must_be_positive():
    done = subprocess.run([sys.executable, "-m", "iaccode_agui.client", "--read-timeout", "-1", "hello"],
                          capture_output=True, text=True, timeout=60)
    _one_line_error(done, "argument --read-timeout", "> 0")


def test_more_active_runs_than_threads_is_refused(tmp_path):
    _one_line_error(_run(["--demo", "--threads", "4", "--max-active-runs", "50"], tmp_path),
                    "--max-active-runs 50", "--threads 4")


def test_capacity_rules():
    assert cli.capacity_problems(128, 120) == (None, [])
    refusal, _ = cli.capacity_problems(4, 50)
    assert refusal and "exceeds --threads 4" in refusal
    assert "unlimited" in cli.capacity_problems(16, 0)[1][0]
    assert "/health" in cli.capacity_problems(16, 16)[1][0]
    assert cli.capacity_problems(16, 14) == (None, [])


def test_exposure_warning_rules():
    assert cli.exposure_warnings("127.0.0.1", None) == []
    assert cli.exposure_warnings("localhost", None) == []
    assert cli.exposure_warnings("::1", None) == []
    assert cli.exposure_warnings("0.0.0.0", "token") == []
    for host in ("0.0.0.0", "::", "192.168.1.10", "myhost.example"):
        (warning,) = cli.exposure_warnings(host, None)
        assert "--auth-token" in warning and host in warning


def test_non_loopback_bind_without_token_warns_at_start_up(tmp_path, monkeypatch, capsys):
    bound = []

    def loopback_instead(app, host, port, threads, settings, **server_options):
        bound.append(host)       # tests listen on loopback only, whatever the flag asked for
        return ServerThread(app, "127.0.0.1", 0, threads=8, slice_seconds=0.05)

    monkeypatch.setattr(cli, "start_server", loopback_instead)
    previous = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    root = logging.getLogger()
    # main() configures logging for a process; give every later test the logging it had before.
    saved = root.handlers[:], root.level, {name: logging.getLogger(name).level for name in (
        "waitress.queue", "urllib3", "iaccode_agui.demo.http")}
    try:
        code = cli.main(["--demo", "--host", "0.0.0.0", "--idle-shutdown", "0.2", "--state-dir",
                         str(tmp_path / "s")], env={"IAC_CODE_CONFIG_DIR": str(tmp_path / "cfg")})
    finally:
        signal.signal(signal.SIGINT, previous[0])
        signal.signal(signal.SIGTERM, previous[1])
        root.handlers[:], root.level = saved[0], saved[1]
        for name, level in saved[2].items():
            logging.getLogger(name).setLevel(level)
    assert code == 0 and bound == ["0.0.0.0"]
    err = capsys.readouterr().err
    assert "WARNING" in err and "--host 0.0.0.0 is not a loopback address" in err


@pytest.mark.parametrize("state_dir, needle", [
    ("/proc/nope/agui", "No such file or directory"),
    ("FILE", "Not a directory"),
])
def test_an_unusable_state_dir_is_refused_at_start_up(tmp_path, state_dir, needle):
    if state_dir == "FILE":
        state_dir = str(tmp_path / "a-file")
        open(state_dir, "w").close()
    _one_line_error(_run(["--demo", "--state-dir", state_dir], tmp_path), "--state-dir %s" % state_dir, needle)


@pytest.fixture
def read_only_dir(tmp_path):
    """A directory this process cannot write: 0500 for a normal user, a read-only tmpfs for root."""
    path = tmp_path / "ro"
    path.mkdir()
    if os.geteuid() != 0:
        path.chmod(0o500)
        yield str(path)
        path.chmod(0o700)
        return
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(path)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        pytest.skip("running as root and cannot mount a read-only tmpfs: %s" % done.stderr.strip())
    try:
        yield str(path)
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def test_a_state_dir_that_cannot_be_written_is_refused_at_start_up(tmp_path, read_only_dir):
    state_dir = os.path.join(read_only_dir, "agui")
    line = _one_line_error(_run(["--demo", "--state-dir", state_dir], tmp_path), "--state-dir %s" % state_dir)
    assert "Read-only file system" in line or "Permission denied" in line


def test_a_missing_state_dir_is_created_private(tmp_path):
    state_dir = tmp_path / "new" / "agui"
    cli.check_state_dir(str(state_dir))
    assert (state_dir.stat().st_mode & 0o777) == 0o700
    assert list((state_dir / "threads").iterdir()) == []


def test_prog_follows_how_it_was_invoked():
    assert program_name("iaccode_agui", "/x/lib/python3/site-packages/iaccode_agui/__main__.py") == \
        "python -m iaccode_agui"
    assert program_name("iaccode_agui", "/venv/bin/iaccode-agui") == "iaccode-agui"
    assert program_name("iaccode_agui.client", "/venv/bin/iaccode-agui-client") == "iaccode-agui-client"
    module = subprocess.run([sys.executable, "-m", "iaccode_agui", "--help"], capture_output=True, text=True,
                            timeout=60)
    assert module.stdout.startswith("usage: python -m iaccode_agui ")


@pytest.mark.parametrize("script, module", [("iaccode-agui", "iaccode_agui"),
                                            ("iaccode-agui-client", "iaccode_agui.client")])
def test_console_scripts_show_their_own_name(script, module):
    path = os.path.join(BIN, script)
    if not os.path.exists(path):
        pytest.skip("the console script %s is not installed next to %s" % (script, sys.executable))
    done = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.startswith("usage: %s " % script), done.stdout[:200]


def test_the_managed_childs_start_up_wait_is_a_setting(monkeypatch):
    """On a loaded machine ``iac-code a2a`` takes longer than 20 s to answer /health: the bound of that wait
    is a flag and a variable (default 60 s), handed to the managed child."""
    from iaccode_agui.server import cli
    from iaccode_agui.server import upstream

    made = []
    monkeypatch.setattr(upstream, "iac_code_command", lambda: ["iac-code"])
    monkeypatch.setattr(upstream, "ManagedChild", lambda command, env, timeout: made.append(timeout) or "child")
    parser = cli.build_parser()
    for argv, env, wanted in (([], {}, 60.0), (["--a2a-startup-timeout", "90"], {}, 90.0),
                              ([], {"IAC_CODE_AGUI_A2A_STARTUP_TIMEOUT": "300"}, 300.0)):
        timeout = cli.child_startup_timeout(parser.parse_args(argv), env)
        assert upstream.choose_upstream(a2a_url=None, a2a_token=None, demo=False, env=env,
                                        startup_timeout=timeout) == "child"
    assert made == [60.0, 90.0, 300.0]

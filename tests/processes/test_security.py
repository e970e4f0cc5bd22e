"""Security: bearer auth on every protected route, secrets kept out of state and logs, workspace
containment, loopback-only upstream and state files that are never followed through symlinks."""
import base64
import json
import logging
import os
import subprocess
import sys
import time
from typing import Any, Dict, Iterator, List, Optional, Tuple
from urllib.parse import urlsplit

import ipaddress
import pytest
import requests

from iaccode_agui import errors
from iaccode_agui.config import ConfigError, normalize_a2a_url
from iaccode_agui.demo import DemoServer
from tests import ROOT
from tests.agui_checker import check_stream
from tests.harness import interrupt_of, read_sse_until, session_of, wait_for
from tests.hostile_helpers import CANCEL_PATH, Env, assert_contract, fresh_run

TOKEN = "tok-AUTH-S3CRET"
UNAUTHORIZED = {"error": {"code": "UNAUTHORIZED", "message": errors.MSG_UNAUTHORIZED}}


# ---- bearer auth ------------------------------------------------------------------------------------------
@pytest.fixture
def guarded(tmp_path) -> Iterator[Env]:
    env = Env(str(tmp_path), auth_token=TOKEN)
    yield env
    env.close()


def _route_call(env: Env, route: str, authorization: Optional[str],
                body: Any = None) -> Tuple[int, Dict[str, str], bytes]:
    headers = {} if authorization is None else {"Authorization": authorization}
    if route == "run":
        return env.call(env.body("hello", thread="auth", run=fresh_run()) if body is None else body, headers=headers)
    if route == "cancel":
        payload = {"threadId": "auth", "rosInvocationId": "inv"} if body is None else body
        return env.call(payload, path=CANCEL_PATH % "exec-1", headers=headers)
    return env.call(b"", path="/metrics", method="GET", headers=headers)


REFUSED = [None, "", "Bearer", "Bearer ", "Bearer wrong", "Bearer " + TOKEN[:-1], "Bearer " + TOKEN + "x",
           "Bearer " + TOKEN.lower(), "Bearer " + TOKEN + " extra", "Basic " + base64.b64encode(
               ("user:" + TOKEN).encode()).decode(), "Basic " + TOKEN, TOKEN, "Token " + TOKEN, "Bearer:" + TOKEN,
           "Bearer" + TOKEN, "Bearer\t" + TOKEN, "Bearer \u00e9" + TOKEN]
ACCEPTED = ["Bearer " + TOKEN, "bearer " + TOKEN, "BEARER " + TOKEN, "bEaReR " + TOKEN, "Bearer " + TOKEN + " "]


@pytest.mark.parametrize("route", ["run", "cancel", "metrics"])
def test_protected_routes_refuse_missing_wrong_and_basic_tokens(guarded, route, monkeypatch):
    import iaccode_agui.web.app as app_module
    compared: List[Tuple[bytes, bytes]] = []
    real = app_module.hmac.compare_digest

    def spy(a: Any, b: Any) -> bool:
        compared.append((a, b))
        return real(a, b)

    monkeypatch.setattr(app_module.hmac, "compare_digest", spy)
    for authorization in REFUSED:
        before = len(compared)
        status, headers, body = _route_call(guarded, route, authorization)
        assert status == 401, (authorization, status, body)
        assert json.loads(body) == UNAUTHORIZED
        assert headers.get("WWW-Authenticate") == "Bearer"
        assert TOKEN.encode() not in body and all(TOKEN not in value for value in headers.values())
        assert len(compared) == before + 1          # decided by the constant-time compare, whatever the length
    for authorization in ACCEPTED:
        status, headers, body = _route_call(guarded, route, authorization)
        assert status != 401, (authorization, body)
        if route == "metrics":
            assert status == 200 and b"agui_runs_started_total" in body
        else:
            assert_contract(status, headers, body)
    assert guarded.app.manager.wait_idle(5)


@pytest.mark.parametrize("route", ["run", "cancel"])
def test_auth_is_checked_before_the_body_is_read(guarded, route):
    for body, content_type in ((b"{not json", "application/json"), (b"x" * (1024 * 1024), "application/json"),
                               (b"{}", "text/plain")):
        status, _, content = guarded.call(body, path="/" if route == "run" else CANCEL_PATH % "e",
                                          content_type=content_type)
        assert status == 401 and json.loads(content) == UNAUTHORIZED


def test_health_stays_open(guarded):
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic Zm9vOmJhcg=="}):
        response = guarded.client.get("/health", headers=headers)
        assert response.status_code == 200 and response.get_json()["status"] == "ok"
        assert TOKEN not in response.get_data(as_text=True)


def test_auth_on_the_wire(adapter_factory):
    adapter = adapter_factory(auth_token=TOKEN)
    assert requests.get(adapter.url + "health", timeout=5).status_code == 200
    for path, method in (("", "POST"), ("metrics", "GET"), ("extensions/iac-code/v1/executions/e/cancel", "POST")):
        refused = requests.request(method, adapter.url + path, json={"threadId": "t", "rosInvocationId": "i"},
                                   auth=("user", TOKEN), timeout=5)
        assert refused.status_code == 401 and refused.json() == UNAUTHORIZED
    events = adapter.run(adapter.body("hi", thread="wire-auth"), headers={"Authorization": "bearer " + TOKEN})
    assert events[-1]["type"] == "RUN_FINISHED"


# ---- secrets never written to state or logs ------------------------------------------------------------
SECRETS = {"llm": "sk-LLM-SECRET-1", "header": "HDR-SECRET-2", "ak": "AK-SECRET-3", "sts": "STS-SECRET-4",
           "auth": "AUTH-SECRET-5", "a2a": "A2A-SECRET-6", "wrong_a2a": "A2A-WRONG-SECRET-7"}


def _secret_props() -> Dict[str, Any]:
    return {"llmApiKey": SECRETS["llm"], "llmHeaders": {"X-Api-Key": SECRETS["header"], "Authorization":
                                                         "Bearer " + SECRETS["header"]},
            "alibabaCloud": {"accessKeyId": "AKID-public", "accessKeySecret": SECRETS["ak"],
                             "securityToken": SECRETS["sts"], "regionId": "cn-hangzhou"}}


def _formatted(record: logging.LogRecord) -> str:
    text = logging.Formatter("%(name)s %(levelname)s %(message)s").format(record)
    return text + " " + repr(record.args) + " " + repr(getattr(record, "__dict__", {}))


def _files(root: str) -> Iterator[str]:
    for directory, _, names in os.walk(root):
        for name in names:
            yield os.path.join(directory, name)


@pytest.fixture
def secret_demo() -> Iterator[DemoServer]:
    server = DemoServer.start(token=SECRETS["a2a"], ping_interval=0.5, slow_interval=0.2)
    try:
        yield server
    finally:
        server.stop()


def test_no_secret_in_state_files_logs_metrics_or_streams(adapter_factory, secret_demo, tmp_path, caplog, capfd):
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="iaccode_agui.access")
    state_dir = str(tmp_path / "secret-state")
    adapter = adapter_factory(upstream_url=secret_demo.url, upstream_token=SECRETS["a2a"], state_dir=state_dir,
                              auth_token=SECRETS["auth"])
    auth = {"Authorization": "Bearer " + SECRETS["auth"]}
    props = _secret_props()
    streams: List[bytes] = []

    def run(body: Dict[str, Any]) -> List[Dict[str, Any]]:
        response = adapter.post(body, headers=auth)
        assert response.status_code == 200, response.text
        streams.append(response.content)
        return check_stream(response.content)

    first = run(adapter.body("please write a file", thread="sec", ros="inv-s", **props))
    interrupt = interrupt_of(first)
    resumed = run(adapter.body(None, thread="sec", ros="inv-s", resume=[
        {"interruptId": interrupt["id"], "status": "resolved", "payload": {"decision": "allow_once"}}], **props))
    assert resumed[-1]["outcome"] == {"type": "success"}
    assert run(adapter.body("please fail", thread="sec-2", ros="inv-f", **props))[-1]["code"] == "A2A_EXECUTION_FAILED"
    assert run(adapter.body("garbage", thread="sec-3", ros="inv-g", **props))[-1]["code"] == "A2A_UNAVAILABLE"
    # a cancel, a refused request and a metrics scrape
    response = adapter.post(adapter.body("slow please", thread="sec-4", ros="inv-c", **props), headers=auth,
                            stream=True)
    reader, events = read_sse_until(response, "TEXT_MESSAGE_CONTENT")
    cancel = adapter.post({"threadId": "sec-4", "rosInvocationId": "inv-c"}, headers=auth,
                          path="extensions/iac-code/v1/executions/%s/cancel" % session_of(events)["executionId"])
    assert cancel.status_code == 200
    streams.append(reader.raw + b"".join(reader._chunks))
    reader.close()
    assert adapter.post(adapter.body("hi", thread="sec-5"), headers={"Authorization": "Bearer nope"}).status_code == 401
    metrics = requests.get(adapter.url + "metrics", headers=auth, timeout=5).text
    # an adapter holding a wrong upstream token: the runtime answers 401
    wrong = adapter_factory(upstream_url=secret_demo.url, upstream_token=SECRETS["wrong_a2a"],
                            state_dir=str(tmp_path / "wrong-state"))
    failed = wrong.run(wrong.body("hello", thread="sec-6", **props))
    assert failed[-1]["code"] == "A2A_UNAVAILABLE"
    assert wait_for(lambda: adapter.app.manager.active_count() == 0 and wrong.app.manager.active_count() == 0, 5)

    records = [_formatted(record) for record in caplog.records]
    assert any(record.name == "iaccode_agui.access" for record in caplog.records)
    assert any(record.levelno == logging.DEBUG for record in caplog.records)
    out, err = capfd.readouterr()
    haystacks = {"log": "\n".join(records), "stdout": out, "stderr": err, "metrics": metrics,
                 "sse": b"".join(streams).decode("utf-8")}
    for root in (state_dir, str(tmp_path / "wrong-state")):
        for path in _files(root):
            with open(path, "rb") as handle:
                haystacks[path] = handle.read().decode("utf-8", "replace")
    assert any(path.endswith(".json") for path in haystacks)
    for where, text in haystacks.items():
        for name, secret in SECRETS.items():
            assert secret not in text, "%s secret found in %s" % (name, where)


# ---- workspace containment -------------------------------------------------------------------------------
@pytest.fixture
def contained(tmp_path) -> Iterator[Tuple[Env, str]]:
    env = Env(str(tmp_path / "root"))
    outside = str(tmp_path / "outside")
    os.makedirs(outside)
    yield env, os.path.realpath(outside)
    env.close()


def _cwd_answer(env: Env, cwd: str, thread: str = "cwd") -> Tuple[int, Optional[str], str]:
    status, headers, body = env.call(env.body("hello", thread=thread, run=fresh_run(), cwd=cwd))
    code = assert_contract(status, headers, body)
    message = json.loads(body)["error"]["message"] if code else ""
    return status, code, message


def _cwd_problem(problem: str) -> str:
    """The English message of a refused ``cwd``: the forwarded-props head, then the problem with the field."""
    return errors.MSG_INVALID_PROPS_AT.format(problem=problem.format(field="cwd"))


def test_cwd_symlink_escapes_are_refused(contained):
    env, outside = contained
    ws = env.workspace
    os.symlink(outside, os.path.join(ws, "escape"))
    os.symlink(os.path.join(outside, "missing"), os.path.join(ws, "dangling"))
    os.symlink(os.path.join(ws, "loop"), os.path.join(ws, "loop"))
    nested = os.path.join(ws, "a", "b")
    os.makedirs(nested)
    os.symlink("../../../outside", os.path.join(nested, "up"))
    with open(os.path.join(ws, "file"), "w") as handle:
        handle.write("x")
    cases = [
        (os.path.join(ws, "escape"), errors.MSG_CWD_NOT_ALLOWED),
        (os.path.join(ws, "escape", "sub", "deeper"), errors.MSG_CWD_NOT_ALLOWED),
        (os.path.join(ws, "dangling"), errors.MSG_CWD_NOT_ALLOWED),
        (os.path.join(nested, "up"), errors.MSG_CWD_NOT_ALLOWED),
        (ws + "/../outside", errors.MSG_CWD_NOT_ALLOWED),
        (ws + "/./a/../../outside", errors.MSG_CWD_NOT_ALLOWED),
        (ws + "-sibling", errors.MSG_CWD_NOT_ALLOWED),           # a prefix of the root is not inside it
        ("/", errors.MSG_CWD_NOT_ALLOWED),
        ("~", errors.MSG_CWD_NOT_ALLOWED),
        ("~root", errors.MSG_CWD_NOT_ALLOWED),
        ("relative/dir", errors.MSG_CWD_NOT_ABSOLUTE),
        ("$HOME", errors.MSG_CWD_NOT_ABSOLUTE),
        (os.path.join(ws, "file"), errors.MSG_CWD_NOT_DIRECTORY),
    ]
    for cwd, message in cases:
        status, code, text = _cwd_answer(env, cwd)
        assert (status, code, text) == (400, "INVALID_INPUT", _cwd_problem(message)), cwd
    loop_status, loop_code, _ = _cwd_answer(env, os.path.join(ws, "loop"))
    assert (loop_status, loop_code) == (400, "INVALID_INPUT")
    assert os.listdir(outside) == []                          # nothing created through a link
    assert not os.path.lexists(os.path.join(outside, "missing"))


def test_cwd_inside_the_root_is_bound_resolved_and_not_expanded(contained):
    env, _ = contained
    ws = env.workspace
    os.makedirs(os.path.join(ws, "real"))
    os.symlink(os.path.join(ws, "real"), os.path.join(ws, "alias"))
    assert _cwd_answer(env, os.path.join(ws, "alias"), thread="alias")[0] == 200
    assert env.app.store.load("alias").cwd == os.path.join(ws, "real")
    assert _cwd_answer(env, os.path.join(ws, "$HOME", "${PWD}"), thread="literal")[0] == 200
    assert env.app.store.load("literal").cwd == os.path.join(ws, "$HOME", "${PWD}")
    assert os.path.isdir(os.path.join(ws, "$HOME", "${PWD}"))


def test_workspace_swapped_for_a_symlink_later_is_refused(contained):
    env, outside = contained
    target = os.path.join(env.workspace, "project")
    os.makedirs(target)
    assert _cwd_answer(env, target, thread="swap")[0] == 200
    assert env.app.manager.wait_idle(5)
    os.rmdir(target)
    os.symlink(outside, target)
    assert _cwd_answer(env, target, thread="swap") == (400, "INVALID_INPUT", _cwd_problem(errors.MSG_CWD_NOT_ALLOWED))


# ---- loopback-only upstream ---------------------------------------------------------------------------------
ACCEPTED_URLS = [
    ("http://127.0.0.1:41242", "http://127.0.0.1:41242/"),
    ("http://127.0.0.1:41242///", "http://127.0.0.1:41242/"),
    ("http://127.5.6.7/", "http://127.5.6.7/"),
    ("http://localhost:8000/", "http://localhost:8000/"),
    ("http://LOCALHOST:8000/", "http://localhost:8000/"),
    ("https://localhost/", "https://localhost/"),
    ("http://[::1]:9000/a2a", "http://[::1]:9000/a2a/"),
]
REFUSED_URLS = [
    "http://127.0.0.1.example.com/", "http://0x7f.1/", "http://0x7f000001/", "http://2130706433/",
    "http://0177.0.0.1/", "http://127.1/", "http://localhost.:8000/", "http://localhost.localdomain/",
    "http://user@127.0.0.1/", "http://user:pw@localhost/", "http://localhost@evil.example/",
    "http://127.0.0.1:80@evil.example/", "http://evil.example#@127.0.0.1/", "http://evil.example?@127.0.0.1/",
    "http://127.0.0.1\\@evil.example/", "http://0.0.0.0/", "http://[::]/", "http://[::ffff:10.0.0.1]/",
    "http://10.0.0.1/", "http://169.254.169.254/", "http://[fe80::1]/", "http://127.0.0.1:99999/",
    "http://127.0.0.1:-1/", "http://127.0.0.1/?x=1", "http://127.0.0.1/#frag", "file:///", "file:///etc/passwd",
    "ftp://127.0.0.1/", "ws://127.0.0.1/", "unix:///tmp/sock", "//127.0.0.1/", "127.0.0.1:8000", "http:///",
    "", "http://127.0.0.1 .example/", "http://[::1%25eth0@evil.example]/",
]


def _connects_to_loopback(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    if host.lower() == "localhost":
        return True
    address = ipaddress.ip_address(host.split("%", 1)[0])
    mapped = getattr(address, "ipv4_mapped", None)
    return address.is_loopback or (mapped is not None and mapped.is_loopback)


@pytest.mark.parametrize("url,normalized", ACCEPTED_URLS)
def test_loopback_urls_are_accepted_and_normalized(url, normalized):
    assert normalize_a2a_url(url) == normalized
    assert _connects_to_loopback(normalized)


@pytest.mark.parametrize("url", REFUSED_URLS)
def test_non_loopback_or_tricky_urls_are_refused(url):
    with pytest.raises(ConfigError):
        normalize_a2a_url(url)


@pytest.mark.parametrize("url", ["http://local\thost:8000/", "http://127.0.0.1\n:8000/", "http://127.0.0.1:80 /"])
def test_urls_with_control_characters_are_refused(url):
    """urlsplit drops TAB/CR/LF silently: such a URL is refused instead of validated in a cleaned form."""
    with pytest.raises(ConfigError):
        normalize_a2a_url(url)


@pytest.mark.parametrize("url", [url for url, _ in ACCEPTED_URLS])
def test_accepted_urls_mean_loopback_to_the_http_client_too(url):
    """No parser differential: what was validated is what urllib3 will connect to."""
    from urllib3.util import parse_url
    normalized = normalize_a2a_url(url)
    host = parse_url(normalized).host or ""
    assert _connects_to_loopback("http://%s/" % host)


def test_ipv4_mapped_loopback_is_refused_or_really_loopback():
    """``[::ffff:127.0.0.1]`` does reach 127.0.0.1; refusing it is fine, accepting must mean loopback."""
    try:
        normalized = normalize_a2a_url("http://[::ffff:127.0.0.1]/")
    except ConfigError:
        return
    assert _connects_to_loopback(normalized)


@pytest.mark.parametrize("url", ["ftp://user:PW-SECRET-9@127.0.0.1/", "http://user:PW-SECRET-9@127.0.0.1:99999/",
                                 "http://u:PW-SECRET-9@[::1/"])
def test_refusals_never_echo_url_credentials(url):
    with pytest.raises(ConfigError) as caught:
        normalize_a2a_url(url)
    assert "PW-SECRET-9" not in str(caught.value)


CLI_REFUSED = ["http://127.0.0.1.example.com/", "http://0x7f.1/", "http://localhost.:8000/",
               "http://user@127.0.0.1/", "file:///", "http://10.0.0.1:8000/"]


def _cli(tmp_path, args: List[str], extra_env: Optional[Dict[str, str]] = None) -> subprocess.Popen:
    env = dict(os.environ)
    env.update({"PYTHONPATH": ROOT,
                "IAC_CODE_AGUI_STATE_DIR": str(tmp_path / "cli-state"), "IAC_CODE_CONFIG_DIR": str(tmp_path / "cfg")})
    for name in [key for key in env if key.startswith("IAC_CODE_AGUI_") and key != "IAC_CODE_AGUI_STATE_DIR"]:
        env.pop(name)
    env.update(extra_env or {})
    return subprocess.Popen([sys.executable, "-m", "iaccode_agui"] + args, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_cli_refuses_non_loopback_urls_with_exit_2(tmp_path):
    started = time.monotonic()
    procs = [(url, _cli(tmp_path, ["--a2a-url", url])) for url in CLI_REFUSED]
    procs.append(("env:" + CLI_REFUSED[0], _cli(tmp_path, [], {"IAC_CODE_AGUI_A2A_URL": CLI_REFUSED[0]})))
    for url, proc in procs:
        try:
            out, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 2, (url, proc.returncode, out, err)
        assert err.startswith("error: ") and ("loopback" in err or "http or https" in err or "credentials" in err), err
        assert "Traceback" not in err and "listening" not in out
    assert time.monotonic() - started < 30
    assert not os.path.exists(tmp_path / "cli-state" / "threads")


# ---- state files are never followed through symlinks --------------------------------------------------------
@pytest.fixture
def store_env(tmp_path) -> Iterator[Tuple[Env, str]]:
    env = Env(str(tmp_path / "root"))
    status, _, _ = env.call(env.body("hello", thread="seed", run=fresh_run()))
    assert status == 200
    assert env.app.manager.wait_idle(5)
    target_dir = str(tmp_path / "target")
    os.makedirs(target_dir)
    yield env, target_dir
    env.close()


def _snapshot(path: str) -> Tuple[bytes, int, int]:
    info = os.stat(path)
    with open(path, "rb") as handle:
        return handle.read(), info.st_mtime_ns, info.st_mode


@pytest.mark.parametrize("suffix", [".json", ".lock", ".run"])
def test_symlinked_thread_files_are_refused_and_targets_untouched(store_env, suffix):
    env, target_dir = store_env
    target = os.path.join(target_dir, "precious" + suffix)
    with open(target, "w") as handle:
        handle.write('{"precious": true}\n')
    os.chmod(target, 0o644)
    before = _snapshot(target)
    link = env.app.store.path_for("victim")[:-len(".json")] + suffix
    os.symlink(target, link)
    time.sleep(0.01)
    status, headers, body = env.call(env.body("hello", thread="victim", run=fresh_run()))
    assert status == 503 and assert_contract(status, headers, body, allow_5xx=True) == "STATE_UNAVAILABLE"
    status, headers, body = env.call({"threadId": "victim", "rosInvocationId": "inv"}, path=CANCEL_PATH % "e")
    code = assert_contract(status, headers, body, allow_5xx=True)
    assert code in ("STATE_UNAVAILABLE", "EXECUTION_NOT_FOUND")
    if suffix == ".json":
        assert status == 503
    assert _snapshot(target) == before
    assert os.path.islink(link) and os.listdir(target_dir) == ["precious" + suffix]
    # other threads are unaffected
    status, _, _ = env.call(env.body("hello", thread="bystander", run=fresh_run()))
    assert status == 200


def test_symlinked_threads_directory_is_refused(tmp_path):
    target_dir = tmp_path / "elsewhere"
    target_dir.mkdir()
    state_dir = tmp_path / "root" / "state"
    state_dir.mkdir(parents=True)
    os.symlink(str(target_dir), str(state_dir / "threads"))
    env = Env(str(tmp_path / "root"))
    try:
        status, headers, body = env.call(env.body("hello", thread="t", run=fresh_run()))
        assert status == 503 and assert_contract(status, headers, body, allow_5xx=True) == "STATE_UNAVAILABLE"
        assert os.listdir(str(target_dir)) == []
    finally:
        env.close()

"""The console's HTTP side: routes, CSP and cache headers, auth decision, --no-console, embedding prefix,
and the static files themselves (no external URL, no inline script or style, no eval)."""
import os
import re
import shlex
import shutil
import subprocess

import pytest
from werkzeug.middleware.dispatcher import DispatcherMiddleware
from werkzeug.test import Client

from iaccode_agui.server import cli
from iaccode_agui.web.app import AguiApp
from iaccode_agui.config import ConfigError, Settings
from iaccode_agui.web.console import STATIC_DIR
from tests import ROOT

ASSETS = sorted(os.listdir(STATIC_DIR))


_APPS = []


@pytest.fixture(autouse=True)
def _close_apps():
    """Every app a test made is closed after it, so its housekeeping thread does not outlive the test."""
    yield
    while _APPS:
        _APPS.pop().close(0)


def client(tmp_path, **settings) -> Client:
    app = AguiApp(Settings(a2a_url="http://127.0.0.1:9/", state_dir=str(tmp_path / "state"),
                           allowed_cwds=(str(tmp_path),), **settings))
    _APPS.append(app)
    return Client(app)


def test_page_and_assets_carry_csp_nosniff_and_revalidating_cache_headers(tmp_path):
    c = client(tmp_path)
    page = c.get("/console")
    assert page.status_code == 200 and page.mimetype == "text/html"
    assert page.headers["Content-Security-Policy"].startswith("default-src 'self';")
    assert "unsafe" not in page.headers["Content-Security-Policy"]
    assert page.headers["X-Content-Type-Options"] == "nosniff"
    assert page.headers["Cache-Control"] == "no-cache" and page.headers["ETag"]
    html = page.get_data(as_text=True)
    assert '<script type="module" src="/console/app.js"></script>' in html
    assert c.get("/console/").get_data() == page.get_data()
    for name in ("app.js", "sse.js", "patch.js", "stream.js", "forms.js", "render.js", "panels.js", "dom.js",
                 "store.js", "history.js", "i18n.js", "i18n.json", "console.css", "favicon.svg"):
        response = c.get("/console/" + name)
        assert response.status_code == 200, name
        assert response.headers["Content-Security-Policy"].startswith("default-src 'self'")
        again = c.get("/console/" + name, headers={"If-None-Match": response.headers["ETag"]})
        assert again.status_code == 304 and again.get_data() == b"", name
    assert c.get("/console/app.js").mimetype == "text/javascript"
    assert c.get("/console/console.css").mimetype == "text/css"
    assert c.get("/console/i18n.json").mimetype == "application/json"


def test_unknown_assets_and_methods_are_json_errors(tmp_path):
    c = client(tmp_path)
    for path in ("/console/nope.js", "/console/index.html", "/console/..%2fapp.py", "/console/a/b.js"):
        response = c.get(path)
        assert response.status_code == 404 and response.json["error"]["code"] == "NOT_FOUND", path
    assert c.post("/console/").status_code == 405 and c.post("/console/app.js").status_code == 405


def test_static_files_are_public_while_the_api_stays_behind_the_token(tmp_path):
    c = client(tmp_path, auth_token="s3cret")
    assert c.get("/console").status_code == 200
    assert c.get("/console/app.js").status_code == 200
    assert c.get("/metrics").status_code == 401
    assert c.get("/metrics", headers={"Authorization": "Bearer s3cret"}).status_code == 200
    denied = c.post("/", json={})
    assert denied.status_code == 401 and denied.json["error"]["code"] == "UNAUTHORIZED"


def test_no_console_setting_removes_the_routes(tmp_path):
    c = client(tmp_path, console=False)
    for path in ("/console", "/console/app.js"):
        response = c.get(path)
        assert response.status_code == 404 and response.json["error"]["code"] == "NOT_FOUND"


def test_cli_flag_and_environment_variable(tmp_path):
    parser = cli.build_parser()
    env = {"IAC_CODE_AGUI_STATE_DIR": str(tmp_path)}
    on = cli.settings_from(parser.parse_args([]), env, "http://127.0.0.1:9/", None)
    off = cli.settings_from(parser.parse_args(["--no-console"]), env, "http://127.0.0.1:9/", None)
    assert on.console is True and off.console is False
    for raw, expected in (("0", False), ("off", False), ("TRUE", True), ("", True)):
        settings = cli.settings_from(parser.parse_args([]), dict(env, IAC_CODE_AGUI_CONSOLE=raw), "http://127.0.0.1:9/", None)
        assert settings.console is expected, raw
    with pytest.raises(ConfigError, match="IAC_CODE_AGUI_CONSOLE"):
        cli.settings_from(parser.parse_args([]), dict(env, IAC_CODE_AGUI_CONSOLE="maybe"), "http://127.0.0.1:9/", None)


def test_page_names_its_assets_under_the_mount_prefix(tmp_path):
    app = AguiApp(Settings(a2a_url="http://127.0.0.1:9/", state_dir=str(tmp_path / "state")))
    _APPS.append(app)
    c = Client(DispatcherMiddleware(lambda e, s: [], {"/agui": app}))
    page = c.get("/agui/console")
    html = page.get_data(as_text=True)
    assert 'src="/agui/console/app.js"' in html and 'href="/agui/console/console.css"' in html
    assert "{{base}}" not in html
    plain = client(tmp_path).get("/console")
    assert plain.headers["ETag"] != page.headers["ETag"]  # the page differs by prefix, so does its tag
    assert c.get("/agui/console/sse.js").status_code == 200


@pytest.mark.parametrize("name", ASSETS)
def test_static_file_has_no_external_url_inline_code_or_eval(name):
    with open(os.path.join(STATIC_DIR, name), encoding="utf-8") as handle:
        text = handle.read()
    urls = re.findall(r"(?:https?:)?//[\w.-]+\.[a-z]{2,}", text)
    allowed = ["//www.w3.org"] if name.endswith(".svg") else []   # the SVG namespace name is not fetched
    assert [u for u in urls if not any(u.endswith(a[2:]) for a in allowed)] == [], urls
    assert not re.search(r"\beval\s*\(|new\s+Function\s*\(|innerHTML|outerHTML|insertAdjacentHTML|document\.write",
                         text), name
    if name.endswith(".html"):
        assert re.findall(r"<script(?![^>]*\bsrc=)", text) == []
        assert "<style" not in text and " style=" not in text and re.search(r"\son[a-z]+=", text) is None


def test_static_files_are_package_data():
    with open(os.path.join(ROOT, "setup.cfg"), encoding="utf-8") as handle:
        config = handle.read()
    line = next(item for item in config.splitlines() if item.startswith("iaccode_agui = "))
    patterns = {p.strip() for p in line.split("=", 1)[1].split(",")}
    for name in ASSETS:
        assert "static/*" + os.path.splitext(name)[1] in patterns, name


def test_js_units_under_node():
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the SSE parser and JSON-Patch unit tests need `node --test`")
    result = subprocess.run([node, "--test", os.path.join(ROOT, "tests", "js")], capture_output=True, text=True,
                            timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert re.search(r"^# pass [1-9]", result.stdout, re.M) and re.search(r"^# fail 0", result.stdout, re.M)


def test_capabilities_name_the_default_workspace_the_console_starts_with(tmp_path):
    """The console fills its workspace field from ``custom.iacCode.defaultCwd`` (null: the server has none)."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with_default = client(tmp_path, default_cwd=str(workspace)).get("/capabilities").get_json()["custom"]["iacCode"]
    assert with_default["defaultCwd"] == os.path.realpath(str(workspace)) and with_default["serverDefaults"] is True
    without = client(tmp_path).get("/capabilities").get_json()["custom"]["iacCode"]
    assert without["defaultCwd"] is None and without["serverDefaults"] is False


def test_console_guide_is_valid_and_its_command_serves_the_console_with_the_default_workspace(tmp_path):
    """docs/console.rst: valid reStructuredText, its image present, its start command run as written."""
    import docutils.core
    import docutils.nodes
    import requests

    from tests.adapter_process import start_cli

    with open(os.path.join(ROOT, "docs", "console.rst"), encoding="utf-8") as handle:
        doctree = docutils.core.publish_doctree(handle.read(), settings_overrides={"report_level": 2, "halt_level": 2})
    find = getattr(doctree, "findall", doctree.traverse)
    for image in find(docutils.nodes.image):
        assert os.path.isfile(os.path.join(ROOT, "docs", image["uri"])), image["uri"]
    commands = [node.astext() for node in find(docutils.nodes.literal_block)]
    assert commands == ['python -m iaccode_agui --demo --default-cwd "$PWD"']
    here = os.path.realpath(str(tmp_path))
    args = shlex.split(commands[0].replace("$PWD", here))[3:]
    env = dict(os.environ, IAC_CODE_AGUI_STATE_DIR=str(tmp_path / "state"))
    proc, port = start_cli(args, env, str(tmp_path / "log"), cwd=here)
    try:
        url = "http://127.0.0.1:%d/" % port
        assert requests.get(url + "console", timeout=10).status_code == 200
        capabilities = requests.get(url + "capabilities", timeout=10).json()
        assert capabilities["custom"]["iacCode"]["defaultCwd"] == here
    finally:
        proc.terminate()
        proc.wait(30)
        proc.stdout.close()

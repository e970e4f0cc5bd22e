"""The web console in a real headless Chromium (selenium) against the scripted runtime.

One browser session and one adapter for the whole module; the browser reaches the adapter through a TCP
relay the tests can cut.  Screenshots of the main states go to a temporary directory (or to
``$IACCODE_AGUI_CONSOLE_SHOTS``), printed at the end of the module.
"""
import json
import os
import shutil
import tempfile
import time
from typing import Any, Callable, Dict, Iterator, List
from urllib.parse import urlsplit

import pytest

from iaccode_agui import errors
from iaccode_agui.demo import DemoServer
from tests.harness import Adapter
from tests.tcp_relay import TcpRelay

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install '.[test]')")
from selenium.common.exceptions import TimeoutException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
CHROMEDRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(CHROMIUM is None or CHROMEDRIVER is None,
                                reason="headless Chromium needs the chromium and chromium-driver packages "
                                       "(apt-get install -y chromium chromium-driver)")
SLOW_INTERVAL = 0.08   # the 'slow' scenario: 60 deltas this far apart (about 5 s)
PIPELINE = "pipeline: deploy my web shop"


class Stack:
    def __init__(self, root: str) -> None:
        self.workspace = os.path.realpath(os.path.join(root, "ws"))
        os.mkdir(self.workspace)
        self.demo = DemoServer.start(token="demo-token", ping_interval=0.5, slow_interval=SLOW_INTERVAL)
        # The quick start's default command: no --reconnect-grace.  The console runs on the AgentCore route, where
        # a cut connection or a page reload does not cancel the run, so it needs none.
        self.adapter = Adapter(self.demo.url, self.demo.token, os.path.join(root, "state"), self.workspace)
        assert self.adapter.settings.reconnect_grace == 0
        parts = urlsplit(self.adapter.url)
        self.relay = TcpRelay(parts.hostname, parts.port)
        self.url = self.relay.url
        self.shots = os.environ.get("IACCODE_AGUI_CONSOLE_SHOTS") or tempfile.mkdtemp(prefix="console-shots-")
        os.makedirs(self.shots, exist_ok=True)

    def stop(self) -> None:
        self.relay.close()
        self.adapter.stop()
        self.demo.stop()


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    root = tempfile.mkdtemp(prefix="console-browser-")
    made = Stack(root)
    try:
        yield made
    finally:
        made.stop()
        print("\nconsole screenshots: %s" % made.shots)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def driver(stack: Stack) -> Iterator[Any]:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,1000",
                     "--disable-gpu", "--no-first-run", "--disable-extensions", "--disable-background-networking",
                     "--disable-component-update", "--disable-sync", "--metrics-recording-only"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
    browser = webdriver.Chrome(service=webdriver.ChromeService(executable_path=CHROMEDRIVER), options=options)
    browser.set_page_load_timeout(20)
    try:
        yield browser
    finally:
        browser.quit()


class Page:
    """The console as a user drives it: fresh thread, workspace, message, answers."""

    def __init__(self, driver: Any, stack: Stack) -> None:
        self.driver = driver
        self.stack = stack
        self.url = stack.url     # the origin the page is loaded from (through the relay by default)
        self.seen: List[Dict[str, Any]] = []

    def find(self, element_id: str) -> Any:
        return self.driver.find_element(By.ID, element_id)

    def wait(self, predicate: Callable[[], Any], what: str, timeout: float = 20.0) -> Any:
        try:
            return WebDriverWait(self.driver, timeout, poll_frequency=0.05).until(lambda _: predicate())
        except TimeoutException:
            self.shot("timeout")
            raise AssertionError("timed out waiting for %s; status %r; transcript:\n%s"
                                 % (what, self.status(), self.transcript()))

    def status(self) -> str:
        return self.find("run-status").text

    def transcript(self) -> str:
        return self.find("transcript").text

    def assistant_text(self) -> str:
        return "".join(e.text for e in self.driver.find_elements(By.CSS_SELECTOR, "#transcript .msg.assistant .text"))

    def shot(self, name: str) -> str:
        path = os.path.join(self.stack.shots, name + ".png")
        self.driver.save_screenshot(path)
        return path

    def full_shot(self, name: str) -> str:
        """The whole page at once (the window grown to the document's height), then the window restored."""
        size = self.driver.get_window_size()
        height = self.driver.execute_script("return document.documentElement.scrollHeight")
        self.driver.set_window_size(size["width"], min(2400, height + 140))
        self.driver.execute_script("window.scrollTo(0, 0)")
        try:
            return self.shot(name)
        finally:
            self.driver.set_window_size(size["width"], size["height"])

    def open(self, *, run_mode: str = "", pipeline: str = "") -> None:
        self.driver.get(self.url + "console")
        self.wait(lambda: self.find("server-status").text.startswith("server"), "the server probe")
        self.find("new-thread").click()
        self.fill("cwd", self.stack.workspace)
        self.driver.execute_script("document.getElementById('run-mode').value = arguments[0]", run_mode)
        self.fill("pipeline-name", pipeline)

    def fill(self, element_id: str, text: str) -> None:
        field = self.find(element_id)
        field.clear()
        if text:
            field.send_keys(text)

    def send(self, text: str) -> None:
        self.fill("message", text)
        self.find("send").click()

    def settled(self) -> str:
        return self.wait(lambda: not self.find("send").get_attribute("disabled") and self.status()
                         not in ("Running…", "Idle") and self.status(), "the run to settle")

    def choose(self, label: str) -> None:
        self.wait(lambda: not self.find("interrupts").get_attribute("hidden"), "an interrupt form")
        labels = self.driver.find_elements(By.CSS_SELECTOR, "#interrupt-forms .choice > label")
        match = [item for item in labels if item.text == label]
        assert match, "no choice %r among %r" % (label, [item.text for item in labels])
        match[0].click()

    def answer(self) -> str:
        self.find("send-answers").click()
        return self.settled()

    def requests(self) -> List[str]:
        return [request["url"] for request in self.sent()]

    def sent(self) -> List[Dict[str, Any]]:
        """Every request the browser sent since the last drain() (url, method, headers, postData), from its
        performance log."""
        for entry in self.driver.get_log("performance"):
            message = json.loads(entry["message"])["message"]
            if message.get("method") == "Network.requestWillBeSent":
                self.seen.append(message["params"]["request"])
        return list(self.seen)

    def drain(self) -> None:
        self.sent()
        self.seen = []

    def thread_id(self) -> str:
        return self.find("thread-id").text

    def api_requests(self, sent: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
        """The requests to the adapter's API (the page's own files are loaded by navigation, without headers)."""
        origin = self.url.rstrip("/")
        return [r for r in sent if r["url"].startswith(origin + "/") and "/console" not in r["url"]]

    def assert_thread_header(self, sent: List[Dict[str, Any]], thread_id: str) -> List[Dict[str, Any]]:
        """Every API request names a thread in X-AgentCore-Session-ID (what a load balancer hashes on): the
        probes the thread shown at the time, every run, attach, stop and observer request the thread of its
        body.  Returns the requests of ``thread_id``'s thread (there must be some)."""
        api = self.api_requests(sent)
        mine = []
        for request in api:
            named = {k.lower(): v for k, v in request["headers"].items()}.get("x-agentcore-session-id")
            wanted = json.loads(request["postData"])["threadId"] if request["method"] == "POST" else named
            assert named and named.startswith("thread-") and named == wanted, (request["method"], request["url"],
                                                                                request["headers"])
            if request["method"] == "POST" and named == thread_id:
                mine.append(request)
        assert mine, "no request of thread %s recorded" % thread_id
        return mine

    def assert_same_origin(self) -> None:
        urls = self.requests()
        assert urls, "the performance log recorded no request"
        origin = self.url.rstrip("/")
        foreign = [u for u in urls if not u.startswith(origin + "/")]
        assert not foreign, foreign


@pytest.fixture
def page(driver: Any, stack: Stack) -> Page:
    made = Page(driver, stack)
    driver.set_window_size(1280, 1000)
    driver.get(stack.url + "console")
    driver.execute_script("localStorage.clear(); sessionStorage.clear();")
    driver.get("about:blank")   # nothing of the page that saw the previous test's storage goes on sending
    made.drain()  # the log of the previous test
    return made


def test_hello_renders_text_session_and_usage(page):
    page.open()
    page.send("hello")
    assert page.settled() == "Finished: success."
    assert "Hello! I am the scripted runtime. You said: hello" in page.assistant_text()
    assert "Reasoning" in page.transcript()
    assert page.find("session-panel").text.count("execution") == 1
    assert "total tokens\n124" in page.find("usage-panel").text
    assert "agentcore.usage" not in page.transcript()            # the same figures as RUN_FINISHED.usage
    assert "agentcore.usage" in page.find("event-log").get_attribute("textContent")
    assert page.driver.find_element(By.CSS_SELECTOR, "#thread-list li.current").text.startswith("hello")
    page.shot("hello")
    page.assert_same_origin()


def test_write_permission_by_keyboard_renders_result_and_artifact(page):
    page.open()
    page.find("message").send_keys("please write a file", Keys.CONTROL, Keys.ENTER)
    assert page.settled() == "Waiting for your answer."
    form = page.find("interrupt-forms").text
    assert "Change a workspace file" in form and "Kind: permission" in form and "expires in" in form
    page.full_shot("permission")
    # keyboard only: the first choice has the focus; Space picks it, Tab reaches the submit button
    active = page.driver.switch_to.active_element
    assert active.get_attribute("type") == "radio"
    active.send_keys(Keys.SPACE)
    page.driver.switch_to.active_element.send_keys(Keys.TAB)
    assert page.driver.switch_to.active_element.get_attribute("id") == "send-answers"
    page.driver.switch_to.active_element.send_keys(Keys.ENTER)
    assert page.settled() == "Finished: success."
    card = page.driver.find_element(By.CSS_SELECTOR, "article.tool").text
    assert "Tool: write_file — done" in card and "Successfully wrote 1 lines" in card
    assert '"path": "hello.txt"' in card
    assert "Artifact: hello.txt" in page.driver.find_element(By.CSS_SELECTOR, "article.artifact").text
    assert os.path.isfile(os.path.join(page.stack.workspace, "hello.txt"))
    assert "Done: hello.txt was written." in page.assistant_text()
    page.shot("write-allowed")
    page.assert_same_origin()


def test_question_answered_with_free_text(page):
    page.open()
    page.send("a question for you")
    assert page.settled() == "Waiting for your answer."
    page.find("send-answers").click()
    page.wait(lambda: "choose an answer" in page.find("interrupt-error").text, "the missing-answer message")
    # The runtime withholds the tool's input ({"summary": {"fields": ...}}): the card shows what it asks instead.
    card = page.driver.find_element(By.CSS_SELECTOR, "article.tool").text
    assert "question\nWhich region?" in card and "options\nHangzhou · Beijing" in card, card
    assert "summary" not in card and "fields" not in card, card
    field = page.driver.find_element(By.CSS_SELECTOR, "#interrupt-forms textarea")
    field.send_keys("Shanghai, please")
    assert page.answer() == "Finished: success."
    assert "You chose: Shanghai, please." in page.assistant_text()
    assert "You\nWhich region? — Shanghai, please" in page.transcript()     # the user's answer, as theirs
    page.assert_same_origin()


def test_slow_run_cancelled(page):
    page.open()
    page.send("slow")
    page.wait(lambda: "slow-2" in page.assistant_text(), "a few slow deltas")
    page.wait(lambda: "execution" in page.find("session-panel").text, "the session event")
    page.find("cancel").click()
    status = page.settled()
    assert status == "Stopped.", status                        # a stop the user asked for is no error
    assert page.driver.find_element(By.CSS_SELECTOR, "#run-status").get_attribute("data-kind") == "ok"
    assert "Run stopped" in page.transcript() and "Stop accepted" not in page.transcript()
    assert not page.driver.find_elements(By.CSS_SELECTOR, "#transcript .run-error, #transcript .notice.error")
    assert page.driver.find_element(By.CSS_SELECTOR, "#thread-list li.current .meta").text.startswith("stopped")
    assert "slow-59" not in page.assistant_text()
    page.shot("cancelled")
    api = page.assert_thread_header(page.sent(), page.thread_id())
    stops = [r for r in api if r["url"].endswith("/ag-ui/agent/stop")]
    assert len(stops) == 1 and json.loads(stops[0]["postData"])["threadId"] == page.thread_id()
    assert not [r for r in api if "/cancel" in r["url"]]


def _slow_text() -> str:
    return "".join("slow-%d " % i for i in range(60)).strip()


def test_cut_connection_reattaches_and_completes_the_text(page):
    page.open()
    page.send("slow")
    page.wait(lambda: "slow-5" in page.assistant_text(), "the run under way")
    assert page.stack.relay.cut() >= 1
    page.wait(lambda: "reconnecting" in page.transcript(), "the reconnect notice", timeout=5)
    assert page.settled() == "Finished: success."
    assert "Re-attached after event" in page.transcript()
    assert page.assistant_text().replace("\n", " ").split() == _slow_text().split()
    page.shot("reattached")
    api = page.assert_thread_header(page.sent(), page.thread_id())
    runs = [json.loads(r["postData"]) for r in api if r["url"].endswith("/ag-ui/agent")]
    assert runs[0]["messages"][0]["content"] == "slow" and len(runs) >= 2
    after = runs[-1]["forwardedProps"]["agentcore"]["attach"]["afterSequence"]
    assert after > 5 and runs[-1]["runId"] == runs[0]["runId"] and runs[-1]["messages"] == []
    assert not [r for r in api if r["method"] == "POST" and r["url"] == page.url], "nothing goes to POST /"


def test_page_reload_mid_run_reattaches(page):
    page.open()
    page.send("slow")
    page.wait(lambda: "slow-5" in page.assistant_text(), "the run under way")
    thread_id = page.thread_id()
    page.driver.refresh()
    page.wait(lambda: "re-attaching" in page.transcript(), "the re-attach after the reload")
    assert page.settled() == "Finished: success."
    assert page.assistant_text().replace("\n", " ").split() == _slow_text().split()
    assert page.thread_id() == thread_id and "You\nslow" in page.transcript()
    api = page.assert_thread_header(page.sent(), thread_id)
    attach = [json.loads(r["postData"]) for r in api if r["url"].endswith("/ag-ui/agent")][-1]
    assert attach["forwardedProps"] == {"agentcore": {"attach": {"afterSequence": 0}}}
    page.assert_same_origin()


def test_switching_threads_shows_their_earlier_runs_again(page):
    page.open()
    first = page.thread_id()
    page.send("hello from the first thread")
    assert page.settled() == "Finished: success."
    page.send("please write a file")
    assert page.settled() == "Waiting for your answer."
    page.choose("Allow once")
    assert page.answer() == "Finished: success."
    page.find("new-thread").click()
    assert page.transcript() == "" and page.thread_id() != first
    page.send("hello from the second thread")
    assert page.settled() == "Finished: success."
    page.drain()
    page.driver.find_element(By.XPATH, "//ul[@id='thread-list']//button[contains(., 'hello from the first')]").click()
    page.wait(lambda: page.thread_id() == first and page.status() == "Idle", "the first thread shown again")
    text = page.transcript()
    assert "You\nhello from the first thread" in text and "You\nplease write a file" in text
    assert "You said: hello from the first thread" in page.assistant_text()
    assert "Done: hello.txt was written." in page.assistant_text()
    assert "second thread" not in text and "not shown" not in text
    assert "Tool: write_file — done" in text and "You\nChange a workspace file Allow once? — Allow once" in text
    sent = page.api_requests(page.sent())
    read = [r["url"] for r in sent if r["url"].endswith("/messages")]
    assert read == [page.url + "ag-ui/agent/threads/%s/messages" % first], read     # the stored conversation
    assert not [r for r in sent if r["url"].endswith("/subscribe")]
    page.shot("thread-history")
    page.assert_same_origin()


def _logs_gone(adapter: Adapter) -> None:
    """Past the run-log TTL (1 s), the finished runs' logs are removed, as the server's sweep does."""
    time.sleep(1.2)
    adapter.app.manager.runlogs.sweep()
    runs = os.path.join(adapter.settings.state_dir, "runs")
    assert not [name for name in os.listdir(runs) if name.endswith(".log")], os.listdir(runs)


def test_a_reload_after_the_run_logs_are_gone_shows_every_earlier_turn_from_the_stored_conversation(page, stack):
    """The run logs expire after --run-log-ttl; the conversation (tool calls and results, the question and the
    answer given) and the question still waiting come back from the thread's stored conversation."""
    short = Adapter(stack.demo.url, stack.demo.token, tempfile.mkdtemp(prefix="console-ttl-"), stack.workspace,
                    run_log_ttl=1)
    try:
        page.url = short.url
        page.open()
        page.send("tool please")
        assert page.settled() == "Finished: success."
        page.send("please write a file")
        assert page.settled() == "Waiting for your answer."
        _forget_pending(page)             # not what this browser remembered: what the server keeps
        _logs_gone(short)
        page.driver.refresh()
        page.wait(lambda: page.status() == "Waiting for your answer.", "the question back after the reload")
        assert "Change a workspace file" in page.find("interrupt-forms").text
        assert "You\ntool please" in page.transcript() and "Tool: read_file — done" in page.transcript()
        page.choose("Allow once")
        assert page.answer() == "Finished: success."
        _logs_gone(short)
        page.drain()
        page.driver.refresh()
        page.wait(lambda: page.status() == "Idle" and "Done: hello.txt" in page.assistant_text(), "the conversation")
        expected = ["You\ntool please", "Tool: read_file — done", "# Demo workspace", "You\nplease write a file",
                    "Tool: write_file — done", "You\nChange a workspace file Allow once? — Allow once",
                    "Done: hello.txt was written."]
        text = page.transcript()
        at = [text.find(item) for item in expected]
        assert -1 not in at and at == sorted(at), (at, text)
        assert "is not shown" not in text and page.find("interrupts").get_attribute("hidden")
        page.shot("history-after-ttl")
        # Every turn of the console (it sends only its new message) opens with a MESSAGES_SNAPSHOT: it shows
        # nothing twice.
        page.send("hello")
        assert page.settled() == "Finished: success."
        text = page.transcript()
        for item in expected + ["You\nhello"]:
            assert text.count(item) == 1, (item, text)
        assert "Messages snapshot" not in text
        events = page.find("event-log").get_attribute("textContent")
        assert "MESSAGES_SNAPSHOT" in events
        assert not [r for r in page.api_requests(page.sent()) if r["url"].endswith("/subscribe")]
        page.assert_same_origin()
    finally:
        short.stop()


def test_pipeline_steps_candidates_selection_and_confirmation(page):
    page.open(run_mode="pipeline", pipeline="selling")
    page.send(PIPELINE)
    assert page.settled() == "Waiting for your answer."
    assert "intent_parsing — done" in page.find("pipeline-panel").text
    page.choose("Hangzhou")
    assert page.answer() == "Waiting for your answer."           # a candidate's deploy permission
    page.choose("Allow once")
    assert page.answer() == "Waiting for your answer."           # the candidate selection
    assert "1650 per month" in page.find("interrupt-forms").text
    page.choose("Plan B: ACK + PolarDB")
    assert page.answer() == "Waiting for your answer."           # the deployment confirmation
    assert "stackName" in page.find("interrupt-forms").text
    page.shot("pipeline-confirmation")
    page.choose("Deploy now")
    overrides = page.driver.find_elements(By.CSS_SELECTOR, "#interrupt-forms textarea")[0]
    overrides.send_keys("{not json")
    page.find("send-answers").click()
    page.wait(lambda: "not valid JSON" in page.find("interrupt-error").text, "the JSON complaint")
    overrides.clear()
    assert page.answer() == "Finished: success."
    panel = page.find("pipeline-panel").text
    for step in ("intent_parsing — done", "architecture — done", "deploy — done"):
        assert step in panel, panel
    assert "Plan B: ACK + PolarDB" in panel and "selected" in panel
    page.shot("pipeline-done")
    page.assert_same_origin()


def test_narrow_screen_has_no_horizontal_scroll(page):
    page.driver.set_window_size(360, 900)
    page.open()
    page.send("please write a file")
    assert page.settled() == "Waiting for your answer."
    width = page.driver.execute_script("return document.documentElement.clientWidth")
    scroll = page.driver.execute_script("return document.documentElement.scrollWidth")
    assert scroll <= width, (scroll, width)
    page.shot("narrow-360")
    page.assert_same_origin()


def test_token_is_asked_for_kept_in_the_tab_and_sent_as_a_bearer_header(page, stack):
    guarded = Adapter(stack.demo.url, stack.demo.token, tempfile.mkdtemp(prefix="console-auth-"), stack.workspace,
                      auth_token="s3cret-token")
    try:
        page.url = guarded.url
        page.open()
        page.drain()  # the previous page (on the relay's origin) may still have been probing
        page.send("hello")
        page.wait(lambda: page.find("token-dialog").is_displayed(), "the token dialog")
        assert "UNAUTHORIZED" in page.status()
        page.find("token-input").send_keys("s3cret-token", Keys.ENTER)
        page.wait(lambda: not page.find("token-dialog").is_displayed(), "the dialog to close")
        assert page.find("message").get_attribute("value") == "hello"    # kept for the second try
        assert page.driver.execute_script("return sessionStorage.getItem('iaccode_agui.token')") == '"s3cret-token"'
        assert "s3cret" not in page.driver.current_url
        page.find("send").click()
        assert page.settled() == "Finished: success."
        page.assert_same_origin()
    finally:
        guarded.stop()


def test_language_picker_sends_accept_language(page):
    with open(os.path.join(os.path.dirname(errors.__file__), "catalogs", "fr.json"), encoding="utf-8") as handle:
        catalog = json.load(handle)
    french = catalog[errors.MSG_INVALID_PROPS_AT].format(
        problem=catalog[errors.MSG_CWD_NOT_ABSOLUTE].format(field="cwd"))
    page.open()
    page.fill("cwd", "relative/path")
    Select(page.find("language")).select_by_value("fr")
    page.send("hello")
    status = page.settled()
    assert status == "Erreur INVALID_AG_UI_REQUEST : %s" % french, status     # the console's label too
    assert page.find("message").get_attribute("value") == "hello"            # refused: kept to send again
    Select(page.find("language")).select_by_value("")
    page.assert_same_origin()


def test_language_picker_translates_the_console_labels(page):
    with open(os.path.join(os.path.dirname(errors.__file__), "static", "i18n.json"), encoding="utf-8") as handle:
        catalog = json.load(handle)
    page.open()
    page.send("hello")
    assert page.settled() == "Finished: success."
    english = {"send": "Send", "new-thread": "New thread", "threads-title": "Threads", "cancel": "Cancel run"}
    assert {key: page.find(key).text for key in english} == english
    for language, send in (("fr", "Envoyer"), ("ja", "送信"), ("de", "Senden"), ("zh", "发送"), ("es", "Enviar"),
                           ("pt", "Enviar")):
        Select(page.find("language")).select_by_value(language)
        table = catalog[language]
        assert page.find("send").text == send == table["Send"]
        for key, text in english.items():
            assert page.find(key).text == table[text], (language, key)
        assert page.find("message").get_attribute("placeholder") == table[
            "Say hello, or try: please write a file · question · slow · pipeline (with run mode pipeline)"]
        assert page.find("transcript").get_attribute("aria-label") == table["Conversation"]
        assert page.driver.execute_script("return document.documentElement.lang") == language
        assert page.driver.title == table["iaccode_agui console"]
        assert table["total tokens"] in page.find("usage-panel").text          # panels follow the switch
        page.wait(lambda: page.find("server-status").text.startswith(table["server {version} · {status}"][:3]),
                  "the server status in %s" % language)
    page.driver.refresh()                                                      # the choice is kept
    page.wait(lambda: page.find("send").text == "Enviar" and page.status() == catalog["pt"]["Idle"], "the reload")
    assert catalog["pt"]["You"] in page.transcript()       # the replayed history is labelled in Portuguese too
    page.shot("portuguese")
    Select(page.find("language")).select_by_value("")      # headless Chromium's own language is English
    assert {key: page.find(key).text for key in english} == english
    page.assert_same_origin()


def _forget_pending(page: Page) -> None:
    """The page's own record of the thread's questions emptied, as the console used to leave it after a refusal."""
    page.driver.execute_script("""
        const all = JSON.parse(localStorage.getItem('iaccode_agui.threads.v1'));
        all.find((x) => x.threadId === arguments[0]).pending = [];
        localStorage.setItem('iaccode_agui.threads.v1', JSON.stringify(all));""", page.thread_id())


def test_a_message_while_a_question_waits_keeps_the_form_and_a_reload_brings_it_back(page):
    page.open()
    page.send("please write a file")
    assert page.settled() == "Waiting for your answer."
    page.drain()
    page.send("hello meanwhile")
    page.wait(lambda: page.status() == "Answer or decline the questions above first; your message is kept.",
              "the reason the message is not sent")
    assert page.find("message").get_attribute("value") == "hello meanwhile"
    assert not page.find("interrupts").get_attribute("hidden")
    assert not [r for r in page.api_requests(page.sent()) if r["method"] == "POST"], "nothing was sent"
    # A reload reads the question back from the thread's stored conversation, even when this page's own record
    # of it is gone.
    _forget_pending(page)
    page.driver.refresh()
    page.wait(lambda: page.status() == "Waiting for your answer.", "the question back after the reload")
    assert "Change a workspace file" in page.find("interrupt-forms").text
    page.choose("Allow once")
    assert page.answer() == "Finished: success."
    page.assert_same_origin()


def test_a_question_asked_in_another_tab_comes_back_when_the_server_refuses_a_message(page):
    page.open()
    page.send("hello")
    assert page.settled() == "Finished: success."
    first = page.driver.current_window_handle
    page.driver.switch_to.new_window("tab")
    try:
        page.driver.get(page.url + "console")          # the same thread, the most recent one, in a second tab
        page.wait(lambda: page.status() == "Idle" and "You said: hello" in page.assistant_text(), "the second tab")
        page.send("please write a file")
        assert page.settled() == "Waiting for your answer."
    finally:
        page.driver.close()
        page.driver.switch_to.window(first)
    page.send("hello again")                             # this tab has not seen the question: 409 RESUME_REQUIRED
    page.wait(lambda: page.status() == "Answer or decline the questions above first; your message is kept.",
              "the refusal explained")
    assert page.find("message").get_attribute("value") == "hello again"
    assert "Change a workspace file" in page.find("interrupt-forms").text
    page.choose("Allow once")
    assert page.answer() == "Finished: success."
    page.assert_same_origin()


def test_the_workspace_starts_at_the_server_default_and_a_message_waits_for_one(page, stack):
    page.driver.get(page.url + "console")
    page.wait(lambda: page.find("server-status").text.startswith("server"), "the server probe")
    page.find("new-thread").click()
    assert page.find("cwd").get_attribute("value") == ""       # this server has no default workspace
    page.send("hello")
    page.wait(lambda: page.status() == "Enter a workspace directory (cwd) first.", "the missing workspace named")
    assert page.find("message").get_attribute("value") == "hello"
    page.fill("cwd", stack.workspace)
    page.find("send").click()
    assert page.settled() == "Finished: success."
    served = Adapter(stack.demo.url, stack.demo.token, tempfile.mkdtemp(prefix="console-default-"), stack.workspace,
                     default_cwd=stack.workspace)
    try:
        page.url = served.url                                   # another origin: nothing remembered
        page.driver.get(page.url + "console")
        page.wait(lambda: page.find("cwd").get_attribute("value") == stack.workspace, "the server's default workspace")
        page.drain()
        page.send("hello")
        assert page.settled() == "Finished: success."
        runs = [json.loads(r["postData"]) for r in page.api_requests(page.sent()) if r["url"].endswith("/ag-ui/agent")]
        assert runs[0]["forwardedProps"]["iacCode"]["cwd"] == stack.workspace
        page.assert_same_origin()
    finally:
        served.stop()


def test_a_language_switch_relabels_forms_transcript_threads_and_status(page):
    with open(os.path.join(os.path.dirname(errors.__file__), "static", "i18n.json"), encoding="utf-8") as handle:
        fr = json.load(handle)["fr"]
    page.open()
    page.send("please write a file")
    assert page.settled() == "Waiting for your answer."
    page.choose("Allow once")
    Select(page.find("language")).select_by_value("fr")
    assert page.status() == fr["Waiting for your answer."]
    form = page.find("interrupt-forms").text
    assert fr["Decline to answer (cancel this request)"] in form and fr["Kind: {kind}"].format(kind="permission") in form
    assert page.driver.find_elements(By.CSS_SELECTOR, "#interrupt-forms input[type=radio]")[0].is_selected()
    text = page.transcript()
    for label in (fr["You"] + "\nplease write a file", fr["Tool: {name}"].format(name="write_file"),
                  fr["called, waiting for the result"], fr["Run finished: waiting for your answer"], fr["Reasoning"]):
        assert label in text, (label, text)
    assert "Run finished" not in text and "You\n" not in text
    meta = page.driver.find_element(By.CSS_SELECTOR, "#thread-list li.current .meta").text
    assert meta.startswith(fr["waiting for an answer"] + " · "), meta
    page.shot("french")
    page.find("send-answers").click()
    assert page.settled() == fr["Finished: {outcome}."].format(outcome="success")
    Select(page.find("language")).select_by_value("")
    assert page.status() == "Finished: success." and "Tool: write_file — done" in page.transcript()
    page.assert_same_origin()

"""File links (``--publish-files``): unguessable, expiring, confined to the workspace, streamed."""
import json
import os

import pytest

from iaccode_agui.agentcore.published_files import FileLinks, PublishError, RunFilePublisher, artifact_files, confined
from iaccode_agui.errors import AguiError
from tests.agentcore_helpers import ac_body, ac_stream


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "ws"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "report.csv").write_text("a,b\n1,2\n")
    outside = tmp_path / "secret.txt"
    outside.write_text("secret")
    os.symlink(str(outside), str(root / "link.txt"))
    os.symlink(str(tmp_path), str(root / "up"))
    return os.path.realpath(str(root)), os.path.realpath(str(outside))


def test_only_regular_files_inside_the_workspace_are_published(tree):
    root, outside = tree
    assert confined(root + "/sub/report.csv", root) == root + "/sub/report.csv"
    for path in (outside, root + "/link.txt", root + "/up/secret.txt", root + "/sub/../sub/report.csv",
                 root + "/sub", root + "/missing.txt", "sub/report.csv"):
        with pytest.raises(PublishError):
            confined(path, root)


def test_links_are_unguessable_expire_and_are_bounded(tree):
    root, _ = tree
    clock = Clock()
    links = FileLinks(ttl=60, max_links=3, clock=clock)
    tokens = [links.publish(root + "/sub/report.csv", root)[0] for _ in range(4)]
    assert len(set(tokens)) == 4 and all(len(token) >= 43 for token in tokens)   # 256 random bits
    assert len(links) == 3
    with pytest.raises(AguiError) as dropped:
        links.open(tokens[0])
    assert dropped.value.code == "FILE_LINK_NOT_FOUND" and dropped.value.status == 404
    handle, size, link = links.open(tokens[3])
    assert handle.read() == b"a,b\n1,2\n" and size == 8 and link.mime_type == "text/csv"
    handle.close()
    clock.now += 61
    with pytest.raises(AguiError):
        links.open(tokens[3])
    assert len(links) == 0


def test_a_file_swapped_for_a_symlink_after_publication_is_refused(tree, tmp_path):
    root, outside = tree
    links = FileLinks(ttl=60, max_links=10)
    token, _ = links.publish(root + "/sub/report.csv", root)
    os.remove(root + "/sub/report.csv")
    os.symlink(outside, root + "/sub/report.csv")
    with pytest.raises(AguiError):
        links.open(token)


def test_artifacts_turn_the_next_tool_result_into_the_file_document(tree):
    root, outside = tree
    publisher = RunFilePublisher(FileLinks(ttl=3600, max_links=10), root, "http://h/prefix/")
    assert publisher.tool_result_content() is None
    publisher.note_artifact({"name": "report.csv", "metadata": {"sourcePath": root + "/sub/report.csv",
                                                                "mediaType": "text/csv"},
                             "parts": [{"filename": "report.csv",
                                        "metadata": {"sourcePath": root + "/sub/report.csv"}}]})
    document = json.loads(publisher.tool_result_content())
    assert document["status"] == "success" and len(document["files"]) == 1
    entry = document["files"][0]
    assert entry["fileName"] == "report.csv" and entry["mimeType"] == "text/csv"
    assert entry["expiresInSeconds"] == 3600 and entry["downloadUrl"].startswith("http://h/prefix/ag-ui/files/")
    assert publisher.tool_result_content() is None        # consumed by the result it belongs to
    publisher.note_artifact({"name": "secret.txt", "metadata": {"sourcePath": outside}})
    failed = json.loads(publisher.tool_result_content())
    assert failed["status"] == "error" and "secret.txt" in failed["message"]
    assert artifact_files("nope") == [] and artifact_files({"metadata": {"sourcePath": 3}}) == []


def test_published_files_end_to_end(adapter_factory, workspace):
    adapter = adapter_factory(default_cwd=workspace, publish_files=True, auth_token="k", file_link_ttl=30)
    headers = {"x-api-key": "k"}
    response = adapter.post(ac_body("write", thread="files"), path="ag-ui/agent", headers=headers)
    from tests.agui_checker import parse_sse
    interrupt = parse_sse(response.content)[0][-1]["outcome"]["interrupts"][0]
    resumed = adapter.post(ac_body(None, thread="files", resume=[
        {"interruptId": interrupt["id"], "status": "resolved", "payload": {"decision": "allow_once"}}]),
        path="ag-ui/agent", headers=headers)
    events = parse_sse(resumed.content)[0]
    result = next(e for e in events if e["type"] == "TOOL_CALL_RESULT")
    document = json.loads(result["content"])
    assert document["status"] == "success", document
    entry = document["files"][0]
    assert entry["fileName"] == "hello.txt" and entry["expiresInSeconds"] == 30
    url = entry["downloadUrl"]
    assert url.startswith(adapter.url + "ag-ui/files/")
    assert adapter.session.get(url).status_code == 401
    download = adapter.session.get(url, headers=headers)
    with open(os.path.join(workspace, "hello.txt"), "rb") as handle:
        assert download.status_code == 200 and download.content == handle.read()
    assert download.headers["Content-Type"].startswith("text/plain")
    assert download.headers["Content-Disposition"].startswith("attachment")
    missing = adapter.session.get(adapter.url + "ag-ui/files/nope", headers=headers)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "FILE_LINK_NOT_FOUND"
    # POST / keeps the tool result text: publication is an AgentCore feature.
    capabilities = adapter.session.get(adapter.url + "capabilities", headers=headers).json()
    assert capabilities["custom"]["iacCode"]["publishFiles"] is True


def test_without_publish_files_results_stay_text_and_links_do_not_exist(adapter_factory, workspace):
    adapter = adapter_factory(default_cwd=workspace)
    events, _ = ac_stream(adapter, ac_body("write", thread="nofiles"))
    interrupt = events[-1]["outcome"]["interrupts"][0]
    resumed, _ = ac_stream(adapter, ac_body(None, thread="nofiles", resume=[
        {"interruptId": interrupt["id"], "status": "resolved", "payload": {"decision": "allow_once"}}]))
    result = next(e for e in resumed if e["type"] == "TOOL_CALL_RESULT")
    assert result["content"].startswith("Successfully wrote")
    assert adapter.session.get(adapter.url + "ag-ui/files/anything").status_code == 404


def test_downloads_are_streamed_from_disk(tmp_path, workspace):
    from werkzeug.test import Client
    from werkzeug.wsgi import FileWrapper
    from iaccode_agui.web.app import AguiApp
    from iaccode_agui.config import Settings
    app = AguiApp(Settings(a2a_url="http://127.0.0.1:9/", state_dir=str(tmp_path / "s"), allowed_cwds=(workspace,),
                           publish_files=True))
    with open(os.path.join(workspace, "big.bin"), "wb") as handle:
        handle.write(b"x" * (3 * 1024 * 1024))
    token, _ = app.agentcore.links.publish(os.path.join(workspace, "big.bin"), workspace)
    seen = {}

    def start_response(status, headers, exc_info=None):
        seen["status"], seen["headers"] = status, dict(headers)

    body = app({"REQUEST_METHOD": "GET", "PATH_INFO": "/ag-ui/files/" + token, "SERVER_NAME": "x",
                "SERVER_PORT": "80", "wsgi.url_scheme": "http", "wsgi.input": None, "wsgi.errors": None}, start_response)
    assert seen["status"].startswith("200") and seen["headers"]["Content-Length"] == str(3 * 1024 * 1024)
    assert isinstance(body, FileWrapper), type(body)     # read block by block from the open file
    assert sum(len(chunk) for chunk in body) == 3 * 1024 * 1024
    body.close()
    assert Client(app).get("/ag-ui/files/" + token).status_code == 200
    app.close(0)   # its housekeeping thread and state journal too, not only the upstream client



def test_a_file_link_swapped_for_a_fifo_after_its_check_is_refused_without_blocking(tmp_path, monkeypatch):
    """The agent can replace a published file between the link's confinement check and its open: a FIFO
    there must not hold the server thread until someone writes to it."""
    import os
    import threading

    import pytest as _pytest

    from iaccode_agui.agentcore import published_files as files
    from iaccode_agui.errors import AguiError
    root = tmp_path / "ws"
    root.mkdir()
    target = root / "report.txt"
    target.write_text("data")
    links = files.FileLinks(60.0, 10)
    token, _ = links.publish(str(target), str(root))
    target.unlink()
    os.mkfifo(str(target))
    monkeypatch.setattr(files, "confined", lambda path, root: path)   # the swap lands after the check
    outcome = []

    def fetch() -> None:
        try:
            links.open(token)
        except AguiError as exc:
            outcome.append(exc.code)

    worker = threading.Thread(target=fetch, daemon=True)
    worker.start()
    worker.join(5)
    if worker.is_alive():   # unblock the open so the thread can end, then fail
        os.close(os.open(str(target), os.O_WRONLY | os.O_NONBLOCK))
        _pytest.fail("opening the link blocked on a FIFO")
    assert outcome == ["FILE_LINK_NOT_FOUND"]

"""Request validation, the content side: the cwd policy (roots, symlinks, creation) and the latest user
message (text parts, inline images, their types, sizes and file names, refused media)."""
import base64
import os

import pytest

from iaccode_agui import errors
from iaccode_agui.web import inputs
from iaccode_agui.errors import AguiError
from iaccode_agui.web.inputs import UserMessage, is_safe_filename, parse_run_request, resolve_cwd
from tests.inputs_helpers import (
    GIF, JPEG, MiB, PNG, WEBP, b64, expect_invalid, image_part, make_body, with_content, with_props)
from tests.inputs_helpers import root  # noqa: F401  (a fixture: pytest finds it by this module-level name)


# --- cwd policy -----------------------------------------------------------------------------------------

def test_cwd_relative(root):
    expect_invalid(with_props(root, cwd="ws"), [root], errors.MSG_CWD_NOT_ABSOLUTE, "/forwardedProps/iacCode/cwd")


def test_cwd_outside_roots_is_refused_and_not_created(root, tmp_path):
    outside = str(tmp_path / "outside" / "ws")
    expect_invalid(with_props(root, cwd=outside), [root], errors.MSG_CWD_NOT_ALLOWED, "/forwardedProps/iacCode/cwd")
    assert not os.path.exists(outside)


def test_cwd_prefix_sibling_is_not_inside(root):
    expect_invalid(with_props(root, cwd=root + "-evil"), [root], errors.MSG_CWD_NOT_ALLOWED)


def test_cwd_dotdot_escape_is_refused(root):
    expect_invalid(with_props(root, cwd=os.path.join(root, "..", "x")), [root], errors.MSG_CWD_NOT_ALLOWED)


def test_root_spelling_with_trailing_slash(root):
    assert resolve_cwd(os.path.join(root, "x"), [root + "/", "relative-root", ""]) == os.path.join(root, "x")


def test_cwd_without_roots_is_refused(root):
    expect_invalid(make_body(root), [], errors.MSG_CWD_NOT_ALLOWED)


def test_cwd_equal_to_root_is_accepted(root):
    assert parse_run_request(with_props(root, cwd=root), [root]).cwd == root


def test_cwd_under_second_root(root, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    real_other = os.path.realpath(str(other))
    request = parse_run_request(with_props(root, cwd=os.path.join(real_other, "a", "b")), [root, real_other])
    assert request.cwd == os.path.join(real_other, "a", "b") and os.path.isdir(request.cwd)


def test_cwd_symlink_escape_is_refused(root, tmp_path):
    target = tmp_path / "secret"
    target.mkdir()
    os.symlink(str(target), os.path.join(root, "link"))
    expect_invalid(with_props(root, cwd=os.path.join(root, "link")), [root], errors.MSG_CWD_NOT_ALLOWED)
    expect_invalid(with_props(root, cwd=os.path.join(root, "link", "deeper")), [root], errors.MSG_CWD_NOT_ALLOWED)
    assert not (target / "deeper").exists()


def test_cwd_symlink_inside_root_resolves_to_target(root):
    os.mkdir(os.path.join(root, "real"))
    os.symlink(os.path.join(root, "real"), os.path.join(root, "alias"))
    request = parse_run_request(with_props(root, cwd=os.path.join(root, "alias")), [root])
    assert request.cwd == os.path.join(root, "real")


def test_cwd_existing_file(root):
    path = os.path.join(root, "file.txt")
    with open(path, "w") as handle:
        handle.write("x")
    expect_invalid(with_props(root, cwd=path), [root], errors.MSG_CWD_NOT_DIRECTORY)


def test_cwd_below_a_file_is_unusable(root):
    path = os.path.join(root, "file.txt")
    with open(path, "w") as handle:
        handle.write("x")
    expect_invalid(with_props(root, cwd=os.path.join(path, "sub")), [root], errors.MSG_CWD_UNUSABLE)


def test_cwd_creation_failure_is_unusable(root, monkeypatch):
    def fail(*args, **kwargs):
        raise PermissionError("denied")
    monkeypatch.setattr(inputs.os, "makedirs", fail)
    expect_invalid(with_props(root, cwd=os.path.join(root, "new")), [root], errors.MSG_CWD_UNUSABLE)


def test_cwd_inaccessible_is_unusable(root, monkeypatch):
    monkeypatch.setattr(inputs.os, "access", lambda path, mode: False)
    expect_invalid(make_body(root), [root], errors.MSG_CWD_UNUSABLE)


def test_cwd_missing_directory_is_created(root):
    cwd = os.path.join(root, "a", "b", "c")
    assert parse_run_request(with_props(root, cwd=cwd), [root]).cwd == cwd
    assert os.path.isdir(cwd)


def test_cwd_home_expansion(root, monkeypatch):
    monkeypatch.setenv("HOME", root)
    assert parse_run_request(with_props(root, cwd="~/proj"), [root]).cwd == os.path.join(root, "proj")


def test_cwd_env_vars_are_not_expanded(root, monkeypatch):
    """A client must not get the server to write one of its environment values into a path."""
    monkeypatch.setenv("IACCODE_TEST_SECRET", "s3cret")
    resolved = resolve_cwd(os.path.join(root, "$IACCODE_TEST_SECRET"), [root])
    assert resolved == os.path.join(root, "$IACCODE_TEST_SECRET")
    assert not os.path.exists(os.path.join(root, "s3cret"))
    with pytest.raises(AguiError) as info:
        resolve_cwd("$IACCODE_TEST_SECRET/x", [root])
    assert info.value.params["problem"].message == errors.MSG_CWD_NOT_ABSOLUTE


def test_cwd_is_normalised(root):
    assert resolve_cwd(root + "//a/./b/../c/", [root]) == os.path.join(root, "a", "c")


def test_cwd_checked_before_content(root):
    body = with_props(root, cwd="relative")
    body["messages"] = []
    expect_invalid(body, [root], errors.MSG_CWD_NOT_ABSOLUTE)


# --- user content -------------------------------------------------------------------------------------

def test_latest_user_message_wins(root):
    body = make_body(root, messages=[
        {"id": "m-1", "role": "user", "content": "first"},
        {"id": "a-1", "role": "assistant", "content": "reply"},
        {"id": "m-2", "role": "user", "content": [{"type": "text", "text": "second"}]},
        {"id": "a-2", "role": "assistant", "content": "later"},
        {"id": "s", "role": "system", "content": "sys"},
    ])
    assert parse_run_request(body, [root]).user_message == UserMessage("m-2", [{"text": "second"}])


def test_only_latest_user_message_content_is_checked(root):
    body = make_body(root, messages=[
        {"id": "m-1", "role": "user", "content": [{"type": "audio", "source": {"type": "url", "value": "x"}}]},
        {"id": "m-2", "role": "user", "content": "ok"},
    ])
    assert parse_run_request(body, [root]).user_message.parts == [{"text": "ok"}]


@pytest.mark.parametrize("messages", [
    [],
    [{"id": "a", "role": "assistant", "content": "hi"}],
    [{"id": "m", "role": "user", "content": ""}],
    [{"id": "m", "role": "user", "content": "  \n\t"}],
    [{"id": "m", "role": "user", "content": []}],
    [{"id": "m", "role": "user", "content": [{"type": "text", "text": " "}]}],
])
def test_user_message_required(root, messages):
    expect_invalid(make_body(root, messages=messages), [root], errors.MSG_USER_MESSAGE_REQUIRED)


def test_text_parts_are_kept_in_order_and_untrimmed(root):
    content = [{"type": "text", "text": " a "}, {"type": "text", "text": ""}, {"type": "text", "text": "b\n"}]
    parts = parse_run_request(with_content(root, content), [root]).user_message.parts
    assert parts == [{"text": " a "}, {"text": "b\n"}]


@pytest.mark.parametrize("raw,mime", [(PNG, "image/png"), (JPEG, "image/jpeg"), (GIF, "image/gif"),
                                      (b"GIF87a" + b"\x00" * 8, "image/gif"), (WEBP, "image/webp")])
def test_valid_images(root, raw, mime):
    content = [{"type": "text", "text": "look"}, image_part(raw, mime)]
    parts = parse_run_request(with_content(root, content), [root]).user_message.parts
    assert parts == [{"text": "look"}, {"data": {"filename": "agui-image-1", "bytes": b64(raw)}, "mediaType": mime}]


def test_image_only_message_is_enough(root):
    assert len(parse_run_request(with_content(root, [image_part()]), [root]).user_message.parts) == 1


def test_image_mime_is_normalised(root):
    parts = parse_run_request(with_content(root, [image_part(mime=" Image/PNG; x=y")]), [root]).user_message.parts
    assert parts[0]["mediaType"] == "image/png"


def test_base64_is_normalised(root):
    canonical = b64(PNG + b"\x00")
    tweaked = canonical[:-3] + chr(ord(canonical[-3]) + 1) + "=="
    assert base64.b64decode(tweaked, validate=True) == PNG + b"\x00" and tweaked != canonical
    parts = parse_run_request(with_content(root, [image_part(value=tweaked)]), [root]).user_message.parts
    assert parts[0]["data"]["bytes"] == canonical


def test_image_numbering_and_filenames(root):
    content = [image_part(filename="diagram.png"), image_part(JPEG, "image/jpeg", filename="../x.jpg"),
               image_part(GIF, "image/gif")]
    parts = parse_run_request(with_content(root, content), [root]).user_message.parts
    names = [part["data"]["filename"] for part in parts]
    assert names == ["diagram.png", "agui-image-2", "agui-image-3"]


@pytest.mark.parametrize("name,safe", [
    ("photo.png", True), ("草图.png", True), ("a" * 255, True), ("é" * 127, True), ("...", True),
    ("CONSOLE.png", True),
    ("a" * 256, False), ("é" * 128, False), ("", False), (".", False), ("..", False), ("a/b.png", False),
    ("a\\b.png", False), ("a\x00b", False), ("tab\there", False), ("bell\x07", False), ("c1\x85", False),
    ("CON", False), ("con.txt", False), ("Nul.tar.gz", False), ("com1", False), ("LPT9.log", False), ("aux ", False),
    ("COM0", True), ("LPT10", True), ("\ud800.png", False), (None, False), (5, False), (["a"], False),
])
def test_safe_filename(name, safe):
    assert is_safe_filename(name) is safe


def test_unsafe_metadata_filename_falls_back(root):
    part = image_part()
    part["metadata"] = "diagram.png"
    parts = parse_run_request(with_content(root, [part]), [root]).user_message.parts
    assert parts[0]["data"]["filename"] == "agui-image-1"


def test_legacy_binary_image_is_accepted(root):
    part = {"type": "binary", "mimeType": "image/png", "data": b64(PNG), "filename": "x.png"}
    parts = parse_run_request(with_content(root, [part]), [root]).user_message.parts
    assert parts == [{"data": {"filename": "x.png", "bytes": b64(PNG)}, "mediaType": "image/png"}]


def _source(**source):
    return {"type": "image", "source": source}


@pytest.mark.parametrize("part,message", [
    (_source(type="url", value="https://example.com/a.png"), errors.MSG_REMOTE_MEDIA),
    (_source(type="url", value="https://example.com/a.png", mimeType="image/png"), errors.MSG_REMOTE_MEDIA),
    (_source(url="https://example.com/a.png"), errors.MSG_REMOTE_MEDIA),
    ({"type": "image", "url": "https://example.com/a.png"}, errors.MSG_REMOTE_MEDIA),
    ({"type": "binary", "mimeType": "image/png", "url": "https://example.com/a.png"}, errors.MSG_REMOTE_MEDIA),
    (_source(type="file", value="file-123", provider="openai"), errors.MSG_UNSUPPORTED_CONTENT),
    ({"type": "audio", "source": {"type": "data", "value": "AAAA", "mimeType": "audio/wav"}},
     errors.MSG_AUDIO_UNSUPPORTED),
    ({"type": "video", "source": {"type": "data", "value": "AAAA", "mimeType": "video/mp4"}},
     errors.MSG_VIDEO_UNSUPPORTED),
    ({"type": "document", "source": {"type": "data", "value": "AAAA", "mimeType": "application/pdf"}},
     errors.MSG_DOCUMENT_UNSUPPORTED),
    ({"type": "binary", "mimeType": "application/pdf", "data": "AAAA"}, errors.MSG_UNSUPPORTED_CONTENT),
    ({"type": "binary", "mimeType": "image/png", "id": "upload-1"}, errors.MSG_UNSUPPORTED_CONTENT),
    ({"type": "binary", "data": "AAAA"}, errors.MSG_UNSUPPORTED_CONTENT),
    ({"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}, errors.MSG_UNSUPPORTED_CONTENT),
    ({"type": "mystery"}, errors.MSG_UNSUPPORTED_CONTENT),
    ({"type": "image"}, errors.MSG_IMAGE_INVALID),
    (_source(type="data", mimeType="image/png"), errors.MSG_IMAGE_INVALID),
    (_source(type="data", value=123, mimeType="image/png"), errors.MSG_IMAGE_INVALID),
    (image_part(value=b64(PNG)[:-1]), errors.MSG_IMAGE_INVALID),
    (image_part(value=b64(PNG)[:8] + "\n" + b64(PNG)[8:]), errors.MSG_IMAGE_INVALID),
    (image_part(value=b64(PNG + b"\x00").rstrip("=")), errors.MSG_IMAGE_INVALID),
    (image_part(value="data:image/png;base64," + b64(PNG)), errors.MSG_IMAGE_INVALID),
    (image_part(value="é" + b64(PNG)), errors.MSG_IMAGE_INVALID),
    (image_part(value=""), errors.MSG_IMAGE_INVALID),
    (image_part(raw=JPEG, mime="image/png"), errors.MSG_IMAGE_INVALID),
    (image_part(raw=PNG, mime="image/jpeg"), errors.MSG_IMAGE_INVALID),
    (image_part(raw=PNG, mime="image/gif"), errors.MSG_IMAGE_INVALID),
    (image_part(raw=b"RIFF\x00\x00\x00\x00WAVEfmt ", mime="image/webp"), errors.MSG_IMAGE_INVALID),
    (image_part(raw=b"RIFF", mime="image/webp"), errors.MSG_IMAGE_INVALID),
    (image_part(mime="image/bmp"), errors.MSG_IMAGE_TYPE),
    (image_part(mime="image/svg+xml"), errors.MSG_IMAGE_TYPE),
    (image_part(mime="image/jpg"), errors.MSG_IMAGE_TYPE),
    (_source(type="data", value=b64(PNG)), errors.MSG_IMAGE_TYPE),
    ({"type": "binary", "mimeType": "image/tiff", "data": "AAAA"}, errors.MSG_IMAGE_TYPE),
])
def test_rejected_parts(root, part, message):
    content = [{"type": "text", "text": "look"}, part]
    expect_invalid(with_content(root, content), [root], message, "/messages/0/content/1" + _suffix(message, part))


def _suffix(message, part):
    """Where the failure is reported inside the part (kept explicit so the pointer is tested too)."""
    source = part.get("source")
    if message == errors.MSG_REMOTE_MEDIA:
        return "/url" if "url" in part else "/source"
    if message == errors.MSG_UNSUPPORTED_CONTENT:
        return "/source/type" if part["type"] == "image" else ""
    if part["type"] in ("binary", "audio", "video", "document"):
        return "/mimeType" if message == errors.MSG_IMAGE_TYPE else ""
    if not isinstance(source, dict):
        return "/source"
    return "/source/mimeType" if message == errors.MSG_IMAGE_TYPE else "/source"


def test_image_size_limits(root):
    exact = PNG + b"\x00" * (8 * MiB - len(PNG))
    assert parse_run_request(with_content(root, [image_part(exact)]), [root]).user_message is not None
    expect_invalid(with_content(root, [image_part(exact + b"\x00")]), [root], errors.MSG_IMAGE_TOO_LARGE)


def test_total_image_limit(root):
    five = PNG + b"\x00" * (5 * MiB - len(PNG))
    assert parse_run_request(with_content(root, [image_part(five), image_part(five)]), [root]).user_message
    six = PNG + b"\x00" * (6 * MiB - len(PNG))
    expect_invalid(with_content(root, [image_part(six), image_part(six)]), [root], errors.MSG_IMAGES_TOO_LARGE,
                   "/messages/0/content/1/source")

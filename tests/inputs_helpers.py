"""Shared by the request-validation tests: sample image bytes, a valid body and the INVALID_INPUT check.

Kept in one place so the envelope and the content tests build the very same baseline body and judge a
refusal the same way (code, status, English message, JSON pointer).
"""
import base64
import os

import pytest

from iaccode_agui import errors
from iaccode_agui.errors import AguiError
from iaccode_agui.web.inputs import parse_run_request

MiB = 1024 * 1024
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + b"\x00" * 8
JPEG = b"\xff\xd8\xff\xe0\x00\x10JFIF\x00" + b"\x00" * 8
GIF = b"GIF89a" + b"\x01\x00\x01\x00" + b"\x00" * 8
WEBP = b"RIFF" + (20).to_bytes(4, "little") + b"WEBPVP8 " + b"\x00" * 8


def b64(raw):
    return base64.b64encode(raw).decode("ascii")


def image_part(raw=PNG, mime="image/png", filename=None, value=None):
    data = b64(raw) if value is None else value
    part = {"type": "image", "source": {"type": "data", "value": data, "mimeType": mime}}
    if filename is not None:
        part["metadata"] = {"filename": filename}
    return part


@pytest.fixture
def root(tmp_path):
    path = tmp_path / "root"
    path.mkdir()
    return os.path.realpath(str(path))


def make_body(root, **overrides):
    body = {
        "threadId": "thread-1",
        "runId": "run-1",
        "state": {},
        "messages": [{"id": "m-1", "role": "user", "content": "hello"}],
        "tools": [],
        "context": [],
        "forwardedProps": {
            "iacCode": {"schemaVersion": 1, "rosInvocationId": "inv-1", "cwd": os.path.join(root, "ws")},
        },
    }
    body.update(overrides)
    return body


def with_props(root, **fields):
    body = make_body(root)
    body["forwardedProps"]["iacCode"].update(fields)
    return body


def with_content(root, content):
    return make_body(root, messages=[{"id": "m-1", "role": "user", "content": content}])


def english(err):
    """The message a client reading English gets for ``err``."""
    return err.render(lambda message: message)


def expect_invalid(body, roots, message, path=None):
    """``message`` is the refusal's English message or, for one that names its field and problem, its head
    (``errors.PROBLEM_HEADS``: the message then starts with the head's sentence) or its problem template."""
    with pytest.raises(AguiError) as info:
        parse_run_request(body, roots)
    err = info.value
    assert err.code == "INVALID_INPUT"
    assert err.status == 400
    if message in errors.PROBLEM_HEADS:
        assert err.message == errors.PROBLEM_HEADS[message]
        assert english(err).startswith(message[:-1] + ": "), english(err)
    elif err.message in errors.PROBLEM_HEADS.values():
        assert err.params["problem"].message == message, english(err)
    else:
        assert err.message == message
    if path is not None:
        assert err.field == path
    return err

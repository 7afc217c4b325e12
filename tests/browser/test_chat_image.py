"""An image uploaded in the chat page reaches a vision model as a data: URL and is answered as over the API.

The server serves the tiny random Qwen2.5-VL checkpoint of the vision tests
(tests/vision_model/tiny_checkpoint.py); the page's greedy reply to an
uploaded PNG must equal the API's reply to the same bytes, token for token.
"""

from __future__ import annotations

import base64

import pytest
from server_helpers import start_server

from .chat_page import api_chat, open_chat, send, set_settings
from .conftest import SERVER_ENV

QUESTION = "what is in this picture?"


@pytest.fixture(scope="module")
def vision_server(tmp_path_factory):
    pytest.importorskip("transformers")
    from vision_model.tiny_checkpoint import write_checkpoint

    checkpoint = write_checkpoint(tmp_path_factory.mktemp("tiny_qwen2_5_vl"))
    server = start_server(tmp_path_factory.mktemp("vision_server"), "--model", str(checkpoint), "--batch", "2",
                          "--chunk", "16", "--served-model-name", "tiny-vl", env=SERVER_ENV)
    yield server
    server.stop()


def test_uploaded_image_is_answered_as_over_the_api(page, vision_server, tmp_path):
    from vision_model.harness import picture

    path = tmp_path / "cat.png"
    picture(170, 140, 1).save(path)
    open_chat(page, vision_server.url, expect_model="tiny-vl")
    set_settings(page, temperature=0, max_tokens=6)
    page.set_input_files("#image-input", str(path))
    page.wait_for_selector("#attachment:not([hidden])")
    reply = send(page, QUESTION)
    assert page.locator(".msg.user img").count() == 1             # the picture shows in the conversation

    url = "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode()
    want = api_chat(vision_server.url, [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": QUESTION}]}],
        temperature=0, max_tokens=6)
    assert reply["ids"] == want["ids"] and len(want["ids"]) == 6
    assert reply["text"] == want["text"]

    page.click("button.check")
    page.wait_for_selector(".check-result.identical")

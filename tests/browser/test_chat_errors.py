"""The chat page when things go wrong: an API key to ask for, a stopped server, a refused request.

Each failure is shown as a message the user can read (never a blank page or
a silent hang), and the page keeps working once the cause is fixed.
"""

from __future__ import annotations

import signal

from server_helpers import start_server

from .chat_page import api_chat, open_chat, send, set_settings
from .conftest import SERVER_ENV


def test_api_key_is_asked_for_and_used(page, key_server):
    open_chat(page, key_server.url, expect_model=None)
    page.wait_for_selector("#key-bar:not([hidden])")
    assert page.text_content("#model") == "not connected"

    page.fill("#api-key", "wrong-key")
    page.click("#key-bar button[type=submit]")
    page.wait_for_function("document.getElementById('key-error').textContent.includes('invalid API key')")
    assert page.is_visible("#key-bar")

    page.fill("#api-key", key_server.api_key)
    page.click("#key-bar button[type=submit]")
    page.wait_for_function("document.getElementById('model').textContent === 'smollm2-135m'")
    assert page.is_hidden("#key-bar")
    set_settings(page, temperature=0, max_tokens=8)
    reply = send(page, "Hi!")
    want = api_chat(key_server.url, [{"role": "user", "content": "Hi!"}], api_key=key_server.api_key,
                    temperature=0, max_tokens=8)
    assert reply["ids"] == want["ids"]
    page.wait_for_function("document.querySelectorAll('#slots tbody tr').length === 1")   # slots use the key too


def test_a_stopped_server_is_reported(page, model_available, tmp_path):
    server = start_server(tmp_path, "--batch", "1", env=SERVER_ENV)
    try:
        open_chat(page, server.url)
    finally:
        assert server.stop(signal.SIGTERM) == 0
    page.fill("#prompt", "Are you there?")
    page.click("#send")
    error = page.wait_for_selector(".msg.error")
    assert "cannot reach the server" in error.text_content()
    assert page.locator(".msg.user").count() == 1             # the message stays, with a Retry button
    assert page.is_visible(".msg.error button.regenerate")
    assert not page.is_disabled("#send")
    page.wait_for_function("document.querySelector('.slots-summary').textContent.startsWith('slots unavailable')")


def test_a_refused_request_shows_the_servers_message(page, chat_server, tmp_path):
    open_chat(page, chat_server.url)
    picture = tmp_path / "dot.png"
    picture.write_bytes(bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010802000000907753de0000000c4944415408d763f8cfc0"
        "00000301010018dd8db00000000049454e44ae426082"))
    page.set_input_files("#image-input", str(picture))
    page.wait_for_selector("#attachment:not([hidden])")
    page.fill("#prompt", "What is this?")
    page.click("#send")
    error = page.wait_for_selector(".msg.error")
    assert "image" in error.text_content() and "error:" in error.text_content()   # text-only model: a 400
    assert page.is_hidden("#attachment")

    # The page keeps working: a plain question afterwards is answered.
    page.click("#clear")
    set_settings(page, temperature=0, max_tokens=6)
    reply = send(page, "Hello")
    assert reply["ids"]

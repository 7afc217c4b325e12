"""The chat page in headless Chromium against a live server: streamed replies, check, stop, regenerate, copy, slots.

Each reply the page shows must equal the HTTP API's answer to the same
request (same messages, sampling and seed), token id for token id.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from .chat_page import api_chat, last_reply, open_chat, send, set_settings

SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "chat-page.png"

COUNT_UPDATES_JS = """() => {
  window.textUpdates = 0;
  new MutationObserver(() => { window.textUpdates += 1; })
    .observe(document.getElementById('messages'), {subtree: true, characterData: true, childList: true});
}"""


def test_streamed_reply_equals_the_api(page, chat_server, tmp_path):
    open_chat(page, chat_server.url)
    set_settings(page, system="You are a helpful assistant. Answer briefly.", temperature=0.8, top_p=0.9,
                 top_k=40, seed=7, max_tokens=24)
    page.evaluate(COUNT_UPDATES_JS)
    reply = send(page, "Name three rivers in Europe.")
    assert page.evaluate("window.textUpdates") > 3          # the text arrived piece by piece
    want = api_chat(chat_server.url, [
        {"role": "system", "content": "You are a helpful assistant. Answer briefly."},
        {"role": "user", "content": "Name three rivers in Europe."}],
        temperature=0.8, top_p=0.9, top_k=40, seed=7, max_tokens=24)
    assert reply["ids"] == want["ids"] and len(want["ids"]) > 0
    assert reply["text"] == want["text"]
    assert "tokens/s" in reply["stats"] and "seed 7" in reply["stats"]

    # A second turn carries the first: the page sends the whole conversation.
    second = send(page, "Which is the longest?")
    want = api_chat(chat_server.url, [
        {"role": "system", "content": "You are a helpful assistant. Answer briefly."},
        {"role": "user", "content": "Name three rivers in Europe."},
        {"role": "assistant", "content": reply["text"]},
        {"role": "user", "content": "Which is the longest?"}],
        temperature=0.8, top_p=0.9, top_k=40, seed=7, max_tokens=24)
    assert second["ids"] == want["ids"]

    page.click(".msg.assistant:last-of-type button.check")
    page.wait_for_selector(".check-result.identical")
    shot = tmp_path / "chat-page.png"
    page.screenshot(path=str(shot))
    if os.environ.get("UPDATE_SCREENSHOTS") == "1":       # refresh the README's picture
        shutil.copy(shot, SCREENSHOT)


def test_check_marks_identical_and_catches_a_difference(page, chat_server):
    open_chat(page, chat_server.url)
    set_settings(page, temperature=0.9, max_tokens=16)     # no seed given: the page picks and shows one
    reply = send(page, "Tell me a fact about owls.")
    assert "seed " in reply["stats"]
    page.click("button.check")
    result = page.wait_for_selector(".check-result.identical")
    assert f"({len(reply['ids'])} tokens re-run alone)" in result.text_content()

    # Negative control: a rerun that came back different must be marked so.
    def tamper(route):
        response = route.fetch()
        body = response.json()
        body["choices"][0]["token_ids"][-1] += 1
        route.fulfill(response=response, body=json.dumps(body))

    page.route("**/v1/chat/completions", tamper)
    page.click("button.check")
    result = page.wait_for_selector(".check-result.different")
    assert f"first difference at token {len(reply['ids']) - 1}" in result.text_content()


def test_stop_then_regenerate(page, chat_server):
    open_chat(page, chat_server.url)
    set_settings(page, temperature=0.8, max_tokens=400)
    page.fill("#prompt", "Write a long story about a lighthouse keeper.")
    page.click("#send")
    page.wait_for_function("document.querySelector('.msg.assistant .text').textContent.length > 0")
    page.click("#stop")
    page.wait_for_selector(".msg.assistant .meta")
    stopped = last_reply(page)
    assert "stopped" in stopped["stats"]
    assert page.is_disabled("#stop") and not page.is_disabled("#send")
    page.wait_for_function("""async () => {
      const slots = await (await fetch('/slots')).json();
      return slots.busy_slots === 0;
    }""")                                                # the server freed the slot when the page stopped reading

    page.click("button.regenerate")
    page.wait_for_function("document.querySelectorAll('.msg.assistant').length === 1 && "
                           "!document.querySelector('.msg.assistant').classList.contains('streaming') && "
                           "document.querySelector('.msg.assistant .meta') !== null && "
                           "!document.querySelector('.msg.assistant .stats').textContent.includes('stopped')")
    assert page.locator(".msg.user").count() == 1


def test_copy_puts_the_reply_on_the_clipboard(browser, chat_server):
    context = browser.new_context()
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=chat_server.url)
    page = context.new_page()
    page.set_default_timeout(120_000)
    try:
        open_chat(page, chat_server.url, path="/chat")
        set_settings(page, temperature=0, max_tokens=12)
        reply = send(page, "Say hello.")
        page.click("button.copy")
        page.wait_for_selector("button.copy:text('Copied')")
        assert page.evaluate("navigator.clipboard.readText()") == reply["text"]
    finally:
        context.close()


def test_slots_panel_shows_every_slot(page, chat_server):
    open_chat(page, chat_server.url)
    page.wait_for_function("document.querySelectorAll('#slots tbody tr').length === 4")
    assert "of 4 slots busy" in page.text_content(".slots-summary")
    assert page.locator("#slots tbody tr.slot-idle").count() + page.locator("#slots tbody tr.slot-decode").count() \
        + page.locator("#slots tbody tr.slot-prefill").count() == 4

"""Driving the chat page like a user: open it, fill the settings, send, read the last reply.

Selectors are the page's element ids and classes (server/static/index.html, chat.js).
"""

from __future__ import annotations

import httpx

SETTINGS = {"system": "#system", "temperature": "#temperature", "top_p": "#top-p", "top_k": "#top-k",
            "seed": "#seed", "max_tokens": "#max-tokens"}

LAST_REPLY_JS = """() => {
  const replies = [...document.querySelectorAll('.msg.assistant')];
  const last = replies[replies.length - 1];
  if (!last) return null;
  const ids = last.querySelector('.token-ids');
  return {text: last.querySelector('.text').textContent,
          ids: ids && ids.textContent ? ids.textContent.split(' ').map(Number) : [],
          stats: (last.querySelector('.stats') || {}).textContent || '',
          streaming: last.classList.contains('streaming')};
}"""


def open_chat(page, url: str, path: str = "/", expect_model: str | None = "smollm2-135m") -> None:
    page.goto(url + path)
    if expect_model:
        page.wait_for_function(f"document.getElementById('model').textContent === {expect_model!r}")


def set_settings(page, **values) -> None:
    for name, value in values.items():
        page.fill(SETTINGS[name], str(value))


def finished_replies(page) -> int:
    return page.evaluate("document.querySelectorAll('.msg.assistant .meta').length")


def send(page, text: str) -> dict:
    """Types a message, sends it, waits for the streamed reply to finish and returns it."""
    before = finished_replies(page)
    page.fill("#prompt", text)
    page.click("#send")
    page.wait_for_function(f"document.querySelectorAll('.msg.assistant .meta').length > {before}")
    return last_reply(page)


def last_reply(page) -> dict:
    return page.evaluate(LAST_REPLY_JS)


def api_chat(url: str, messages: list, api_key: str | None = None, **sampling) -> dict:
    """The same request through the HTTP API (not streamed): text and generated token ids."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    body = {"messages": messages, "return_token_ids": True, **sampling}
    reply = httpx.post(url + "/v1/chat/completions", json=body, headers=headers, timeout=300)
    assert reply.status_code == 200, reply.text
    choice = reply.json()["choices"][0]
    return {"text": choice["message"]["content"], "ids": choice["token_ids"]}

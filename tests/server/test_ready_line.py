"""`strata serve` prints one "ready" line with the chat page's URL once it accepts connections, and the page is there."""

from __future__ import annotations

import time


def test_one_ready_line_with_the_chat_url(server, http):
    want = f"strata serve: ready — chat at {server.url}/ , OpenAI API at {server.url}/v1"
    deadline = time.monotonic() + 30          # /health can answer a moment before the line is flushed
    while want not in server.log() and time.monotonic() < deadline:
        time.sleep(0.05)
    lines = [line for line in server.log().splitlines() if "ready" in line and "chat at" in line]
    assert lines == [want]
    page = http.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert '<script type="module" src="/ui/chat.js">' in page.text
    for asset in ("chat.js", "api.js", "slots.js", "chat.css"):
        assert http.get(f"/ui/{asset}").status_code == 200
    assert http.get("/chat").text == page.text
    assert http.get("/ui/nope.js").status_code == 404


def test_the_page_needs_no_key_but_the_api_does(key_server):
    import httpx

    assert httpx.get(key_server.url + "/").status_code == 200
    assert httpx.get(key_server.url + "/ui/chat.js").status_code == 200
    assert httpx.get(key_server.url + "/slots").status_code == 401
    assert httpx.get(key_server.url + "/v1/models").status_code == 401

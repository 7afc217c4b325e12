"""`strata serve --draft suffix` over HTTP: streams equal the same requests with `"speculative":
false`, the draft counters show in /metrics per source and the acceptance in /slots, and a bad
`speculative` value is a 400."""

from __future__ import annotations

import threading
from pathlib import Path

import httpx
import pytest
from server_helpers import MODEL, metric, metrics, sse_events, start_server, wait_idle

PARAGRAPH = ("The history of computing is a story of abstraction layered on abstraction. Early machines were "
             "programmed by rewiring plugboards; then came stored programs, assemblers, compilers and networks.")


@pytest.fixture(scope="module")
def draft_server(model_available, tmp_path_factory):
    # PYTHONPATH: the checkout under test, also where an editable install points elsewhere (a git worktree)
    root = str(Path(__file__).resolve().parents[2])
    server = start_server(tmp_path_factory.mktemp("server"), "--batch", "2", "--chunk", "64", "--draft", "suffix",
                          "--draft-max", "4", env={"PYTHONPATH": root})
    yield server
    server.stop()


def _body(speculative: bool, **extra) -> dict:
    content = "Repeat this paragraph word for word:\n\n" + PARAGRAPH
    return {"model": MODEL, "messages": [{"role": "user", "content": content}], "max_tokens": 48,
            "temperature": 0.7, "top_p": 0.9, "seed": 5, "ignore_eos": True, "return_token_ids": True,
            "speculative": speculative, **extra}


def _stream_ids(client: httpx.Client, body: dict) -> list[int]:
    with client.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as response:
        assert response.status_code == 200
        events = sse_events(response.iter_lines())
    return [t for e in events if isinstance(e, dict) for c in e["choices"] for t in c.get("token_ids") or []]


def test_drafted_streams_equal_plain_and_are_counted(draft_server):
    wait_idle(draft_server)
    before = metrics(draft_server)
    with draft_server.http(timeout=300) as client:
        plain = _stream_ids(client, _body(False))
        mid = metrics(draft_server)
        assert metric(mid, "strata_draft_tokens_total", source="suffix") == \
            metric(before, "strata_draft_tokens_total", source="suffix"), "a speculative:false request drafted"
        drafted = _stream_ids(client, _body(True))
        whole = client.post("/v1/chat/completions", json=_body(True)).json()
    assert len(plain) == 48 and drafted == plain and whole["choices"][0]["token_ids"] == plain
    after = metrics(draft_server)
    n_drafted = metric(after, "strata_draft_tokens_total", source="suffix") - \
        metric(mid, "strata_draft_tokens_total", source="suffix")
    n_accepted = metric(after, "strata_draft_accepted_tokens_total", source="suffix") - \
        metric(mid, "strata_draft_accepted_tokens_total", source="suffix")
    assert n_drafted > 0 and 0 < n_accepted <= n_drafted


def test_slots_show_acceptance(draft_server):
    wait_idle(draft_server)
    seen = []
    with draft_server.http(timeout=300) as client:
        done = threading.Event()

        def poll():
            with draft_server.http(timeout=30) as poller:
                while not done.is_set():
                    seen.extend(s for s in poller.get("/slots").json()["slots"] if "draft_acceptance" in s)

        thread = threading.Thread(target=poll)
        thread.start()
        try:
            client.post("/v1/chat/completions", json=_body(True, max_tokens=120))
        finally:
            done.set()
            thread.join()
    assert seen, "no /slots answer showed a drafting slot"
    assert all(0 <= s["draft_acceptance"] <= 1 and s["draft_accepted"] <= s["draft_tokens"] for s in seen)


def test_bad_speculative_value(draft_server):
    with draft_server.http(timeout=60) as client:
        r = client.post("/v1/chat/completions", json=_body(True) | {"speculative": "yes"})
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["param"] == "speculative" and "boolean" in error["message"]

"""A client that goes away cancels its request: the slot frees at once (GET /slots), the request is
counted as cancelled (GET /metrics), and the server serves the next request as before."""

from __future__ import annotations

import time

import httpx
import pytest
from server_helpers import metric, metrics, wait_idle

LONG = {"model": "smollm2-135m", "prompt": "Count: 1, 2,", "max_tokens": 400, "ignore_eos": True}


def _generated_tokens(server) -> float:
    return metric(metrics(server), "strata_generation_tokens_total")


def test_stream_disconnect_frees_the_slot(server, http):
    wait_idle(server)
    before = metric(metrics(server), "strata_requests_total", outcome="cancelled")
    with http.stream("POST", "/v1/completions", json={**LONG, "stream": True}) as response:
        assert response.status_code == 200
        seen = 0
        for line in response.iter_lines():
            seen += line.startswith("data: ")
            if seen == 3:
                break
        state = http.get("/slots").json()
        assert state["busy_slots"] == 1
        (slot,) = [s for s in state["slots"] if s["state"] != "idle"]
        assert slot["generated_tokens"] >= 3
    seconds = wait_idle(server, timeout=5)
    assert seconds < 2.0
    assert metric(metrics(server), "strata_requests_total", outcome="cancelled") == before + 1
    generated = _generated_tokens(server)
    time.sleep(0.3)
    assert _generated_tokens(server) == generated                   # nothing keeps running for it
    after = http.post("/v1/completions", json={**LONG, "max_tokens": 3}).json()
    assert after["usage"]["completion_tokens"] == 3


def test_non_stream_disconnect_frees_the_slot(server):
    wait_idle(server)
    before = metric(metrics(server), "strata_requests_total", outcome="cancelled")
    with httpx.Client(base_url=server.url, timeout=httpx.Timeout(10, read=1.0)) as impatient:
        with pytest.raises(httpx.ReadTimeout):
            impatient.post("/v1/completions", json=LONG)        # 400 tokens take longer than 1 s here
    wait_idle(server, timeout=5)
    assert metric(metrics(server), "strata_requests_total", outcome="cancelled") == before + 1


def test_many_disconnects_leave_the_server_clean(server, http):
    wait_idle(server)
    before = metric(metrics(server), "strata_requests_total", outcome="cancelled")
    for _ in range(6):
        with http.stream("POST", "/v1/chat/completions",
                         json={"model": "smollm2-135m", "messages": [{"role": "user", "content": "Tell a story"}],
                               "max_tokens": 300, "ignore_eos": True, "stream": True}) as response:
            next(response.iter_lines())
    wait_idle(server, timeout=5)
    assert metric(metrics(server), "strata_requests_total", outcome="cancelled") == before + 6
    r = http.post("/v1/chat/completions", json={"model": "smollm2-135m", "max_tokens": 2,
                                                "messages": [{"role": "user", "content": "Hi"}]})
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 2

"""Strata's promise over HTTP for the new request kinds: JSON schemas, forced tool calls, grammars,
penalties, logit bias, min_tokens and n=2, mixed with plain requests, sent concurrently with staggered
starts on a 4-slot server — every choice's token ids equal the same request sent alone."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from server_helpers import chat_body, wait_idle

pytestmark = pytest.mark.exactness

TOOL = {"type": "function", "function": {"name": "lookup", "parameters": {
    "type": "object", "properties": {"query": {"type": "string", "maxLength": 16}}, "required": ["query"]}}}
SCHEMA = {"type": "object", "properties": {"title": {"type": "string", "maxLength": 16},
                                           "score": {"type": "integer", "minimum": 0, "maximum": 10}},
          "required": ["title", "score"], "additionalProperties": False}

REQUESTS = [
    chat_body("Rate a film as JSON.", temperature=0.8, seed=1, max_tokens=40,
              response_format={"type": "json_schema", "json_schema": {"name": "r", "schema": SCHEMA}}),
    chat_body("Tell me about Rome.", temperature=0.9, seed=2, max_tokens=12),
    chat_body("Find the population of Lyon.", temperature=0.7, seed=3, max_tokens=40, tools=[TOOL],
              tool_choice="required"),
    chat_body("Write about the sea.", temperature=0.9, seed=4, max_tokens=12, presence_penalty=1.2,
              frequency_penalty=0.8, repetition_penalty=1.3),
    chat_body("Pick a fruit.", temperature=0, max_tokens=10, logit_bias={"28": 6, "30": -100}, min_tokens=6),
    chat_body("Say yes or no.", temperature=0.9, seed=6, max_tokens=6, grammar='start: "yes" | "no"'),
    chat_body("Name an animal.", temperature=1.0, seed=7, max_tokens=8, n=2),
    chat_body("Count to ten.", temperature=0, max_tokens=12),
]


def _ids(server, body) -> list[list[int]]:
    with server.http() as http:
        r = http.post("/v1/chat/completions", json={**body, "return_token_ids": True})
    assert r.status_code == 200, r.text
    return [c["token_ids"] for c in r.json()["choices"]]


def test_new_request_kinds_equal_their_solo_runs(api_server):
    solo = [_ids(api_server, body) for body in REQUESTS]
    wait_idle(api_server)

    def staggered(item):
        i, body = item
        time.sleep(0.15 * (i % 4))        # admissions land mid-prefill and mid-decode of the others
        return _ids(api_server, body)

    with ThreadPoolExecutor(len(REQUESTS)) as pool:
        batched = list(pool.map(staggered, enumerate(REQUESTS)))
    for body, want, got in zip(REQUESTS, solo, batched):
        assert got == want, f"{body['messages'][0]['content']!r} diverged from its solo run"
    assert len(solo[6]) == 2 and solo[6][0] != solo[6][1]

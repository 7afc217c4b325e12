"""Bad structured-output, tool and sampling input gets a 400 in OpenAI's shape naming the field and
disturbs nothing (the next request is answered exactly as before); CORS only for the configured
origin; SSE keep-alive comments while a request waits; the vLLM-named metrics with model_name."""

from __future__ import annotations

import threading

import httpx
import pytest
from server_helpers import MODEL, chat_body, metric, metrics, sse_events, wait_idle

TOOL = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object",
                                                                         "properties": {"q": {"type": "string"}}}}}

BAD = [
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nonsense"}}}},
     "response_format"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": "not a schema"}}},
     "response_format.json_schema.schema"),
    ({"response_format": {"type": "xml"}}, "response_format.type"),
    ({"response_format": {"type": "json_schema"}}, "response_format.json_schema"),
    ({"grammar": "start: undefined_rule"}, "grammar"),
    ({"grammar": "root ::= [unclosed"}, "grammar"),
    ({"grammar": ""}, "grammar"),
    ({"grammar": 'start: "a"', "response_format": {"type": "json_object"}}, "grammar"),
    ({"tools": [TOOL], "tool_choice": {"type": "function", "function": {"name": "missing"}}}, "tool_choice"),
    ({"tools": [TOOL], "tool_choice": "sometimes"}, "tool_choice"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": [{"type": "function", "function": {"parameters": {}}}]}, "tools[0].function"),
    ({"tools": [TOOL, TOOL]}, "tools[1]"),
    ({"tools": [TOOL], "tool_choice": "required", "response_format": {"type": "json_object"}}, "tool_choice"),
    ({"presence_penalty": 2.5}, "presence_penalty"),
    ({"frequency_penalty": -3}, "frequency_penalty"),
    ({"frequency_penalty": "high"}, "frequency_penalty"),
    ({"repetition_penalty": 0}, "repetition_penalty"),
    ({"repetition_penalty": 3.0}, "repetition_penalty"),
    ({"logit_bias": {"abc": 1}}, "logit_bias"),
    ({"logit_bias": {"1.5": 1}}, "logit_bias"),
    ({"logit_bias": {"-3": 1}}, "logit_bias"),
    ({"logit_bias": {"12": 150}}, "logit_bias"),
    ({"logit_bias": {"12": "up"}}, "logit_bias"),
    ({"logit_bias": {"99999999": 1}}, "logit_bias"),
    ({"logit_bias": [1, 2]}, "logit_bias"),
    ({"n": 0}, "n"),
    ({"n": 500}, "n"),
    ({"min_tokens": 50, "max_tokens": 10}, "min_tokens"),
    ({"min_tokens": -1}, "min_tokens"),
    ({"stop_token_ids": ["x"]}, "stop_token_ids"),
    ({"parallel_tool_calls": "yes"}, "parallel_tool_calls"),
    ({"messages": [{"role": "assistant", "content": None, "tool_calls": [{"function": "x"}]}]},
     "messages[0].tool_calls[0].function"),
]


def _reference(http) -> list[int]:
    body = chat_body("Count to five.", temperature=0, max_tokens=8, return_token_ids=True,
                     response_format={"type": "json_object"})
    return http.post("/v1/chat/completions", json=body).json()["choices"][0]["token_ids"]


@pytest.fixture
def api_http(api_server):
    with api_server.http() as client:
        yield client


def test_bad_inputs_get_400_and_change_nothing(api_http, api_server):
    before = _reference(api_http)
    for extra, param in BAD:
        body = {**chat_body("hi", max_tokens=4), **extra}
        r = api_http.post("/v1/chat/completions", json=body)
        assert r.status_code == 400, (extra, r.text)
        error = r.json()["error"]
        assert error["type"] == "invalid_request_error" and error["param"] == param, (extra, error)
        assert error["message"]
    wait_idle(api_server)
    assert _reference(api_http) == before


def test_completions_take_the_same_knobs(api_http):
    r = api_http.post("/v1/completions", json={"model": MODEL, "prompt": "The colours are", "max_tokens": 12,
                                                 "temperature": 0, "n": 2, "logit_bias": {"28": -100},
                                                 "grammar": 'start: " red" | " green" | " blue"'})
    assert r.status_code == 200, r.text
    choices = r.json()["choices"]
    assert [c["index"] for c in choices] == [0, 1]
    assert all(c["text"] in (" red", " green", " blue") for c in choices)


def test_cors_only_for_the_configured_origin(api_http, server):
    pre = api_http.options("/v1/chat/completions", headers={
        "Origin": "http://allowed.test", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type"})
    assert pre.status_code == 204
    assert pre.headers["Access-Control-Allow-Origin"] == "http://allowed.test"
    assert "POST" in pre.headers["Access-Control-Allow-Methods"]
    assert pre.headers["Access-Control-Allow-Headers"] == "authorization, content-type"
    r = api_http.get("/v1/models", headers={"Origin": "http://allowed.test"})
    assert r.headers["Access-Control-Allow-Origin"] == "http://allowed.test"
    other = api_http.get("/v1/models", headers={"Origin": "http://evil.test"})
    assert other.status_code == 200 and "Access-Control-Allow-Origin" not in other.headers
    with server.http() as plain:       # the default: no CORS at all
        r = plain.get("/v1/models", headers={"Origin": "http://allowed.test"})
        assert "Access-Control-Allow-Origin" not in r.headers


def test_sse_keep_alive_while_queued(api_server):
    """Four long requests fill the slots; a fifth streams while it waits, so it gets ': ping' comments
    (every 50 ms of silence) before its first token, and its stream stays valid."""
    body = chat_body("Tell me a long story.", temperature=0, max_tokens=48, ignore_eos=True)
    fillers = [threading.Thread(target=lambda: httpx.post(f"{api_server.url}/v1/chat/completions", json=body,
                                                          timeout=300)) for _ in range(4)]
    for t in fillers:
        t.start()
    try:
        with httpx.stream("POST", f"{api_server.url}/v1/chat/completions", timeout=300,
                          json=chat_body("Hi", temperature=0, max_tokens=4, stream=True)) as r:
            lines = list(r.iter_lines())
    finally:
        for t in fillers:
            t.join()
    assert ": ping" in lines
    events = sse_events(lines)
    assert events[-1] == "[DONE]" and events[-2]["choices"][0]["finish_reason"] in ("stop", "length")


def test_vllm_metrics_with_model_name(api_http, api_server):
    api_http.post("/v1/chat/completions", json=chat_body("Hello", max_tokens=3, temperature=0))
    wait_idle(api_server)
    text = metrics(api_server)
    label = {"model_name": MODEL}
    assert metric(text, "vllm:generation_tokens_total", **label) >= 3
    assert metric(text, "vllm:prompt_tokens_total", **label) > 0
    assert metric(text, "vllm:time_to_first_token_seconds_count", **label) >= 1
    assert metric(text, "vllm:e2e_request_latency_seconds_count", **label) >= 1
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"):
        assert f'{name}{{model_name="{MODEL}"}}' in text
    assert metric(text, "vllm:num_requests_running", **label) == 0

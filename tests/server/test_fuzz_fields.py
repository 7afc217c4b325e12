"""Every request field with values of every JSON type (and extreme numbers): the server answers
each with 200 or a 4xx in the OpenAI error shape — never a 500 — and keeps serving."""

from __future__ import annotations

import pytest
from server_helpers import MODEL, wait_idle

VALUES = [None, True, False, 0, -1, 1, 3, 10**30, -(10**30), 0.5, 1e308, -1e308, "", "x", [], [1], ["a"], [[1]],
          {}, {"a": 1}, {"type": "text"}]

CHAT_FIELDS = ["model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "min_p",
               "seed", "stop", "n", "stream", "stream_options", "logprobs", "top_logprobs", "return_token_ids",
               "ignore_eos", "stop_token_ids", "presence_penalty", "frequency_penalty", "logit_bias", "user",
               "tools", "tool_choice", "response_format", "chat_template_kwargs", "repetition_penalty", "grammar",
               "min_tokens", "choice_index", "parallel_tool_calls"]
COMPLETION_FIELDS = ["prompt", "max_tokens", "logprobs", "echo", "suffix", "best_of", "stream", "seed", "stop"]
MESSAGE_FIELDS = ["role", "content", "name", "tool_calls", "tool_call_id"]


def _cases():
    for name in CHAT_FIELDS:
        yield "/v1/chat/completions", name, None
    for name in COMPLETION_FIELDS:
        yield "/v1/completions", name, None
    for name in MESSAGE_FIELDS:
        yield "/v1/chat/completions", name, "message"
    for name in ("prompt", "messages", "add_special_tokens", "model"):
        yield "/tokenize", name, None
    for name in ("tokens", "model"):
        yield "/detokenize", name, None


def _base(path: str) -> dict:
    if path == "/v1/chat/completions":
        return {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}
    if path == "/v1/completions":
        return {"model": MODEL, "prompt": "Hi", "max_tokens": 1}
    return {"prompt": "Hi"} if path == "/tokenize" else {"tokens": [1, 2]}


@pytest.mark.parametrize("path,name,where", list(_cases()), ids=lambda v: str(v))
def test_any_value_of_any_field_is_never_a_500(server, http, path, name, where):
    for value in VALUES:
        body = _base(path)
        if path.startswith("/v1/") and name != "stream":
            body["stream"] = True        # the status comes with the headers; leaving then cancels the work
        if where == "message":
            body["messages"] = [{**body["messages"][0], name: value}]
        else:
            body[name] = value
        if name in ("max_tokens", "max_completion_tokens") and isinstance(value, int) and value > 4:
            continue                     # a long generation proves nothing here
        with http.stream("POST", path, json=body) as r:
            assert r.status_code < 500, f"{name}={value!r}: {r.status_code} {r.read()[:300]}"
            if r.status_code >= 400:
                r.read()
                error = r.json()["error"]
                assert error["message"] and error["type"].endswith("_error"), r.text
    wait_idle(server)

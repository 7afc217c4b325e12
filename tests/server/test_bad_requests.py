"""Every kind of bad request gets its status and an OpenAI-shaped error naming what was wrong, never
a 500; and after each one the server answers a valid request exactly as before."""

from __future__ import annotations

import json

import pytest
from server_helpers import CTX, MODEL, metric, metrics

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
USER = [{"role": "user", "content": "Hi"}]
REFERENCE = {"model": MODEL, "messages": [{"role": "user", "content": "Name a color."}], "temperature": 0,
             "max_tokens": 3, "return_token_ids": True}


def chat(**fields):
    return {"model": MODEL, "messages": USER, "max_tokens": 2, **fields}


def completion(**fields):
    return {"model": MODEL, "prompt": "Hi", "max_tokens": 2, **fields}


# (path, body: dict or raw bytes, status, param, code)
CASES = {
    "malformed JSON": (CHAT, b'{"model": "smollm2-135m", "messages": [', 400, None, "invalid_json"),
    "not UTF-8": (CHAT, b'{"model": "\xff"}', 400, None, "invalid_json"),
    "body is an array": (CHAT, b"[1, 2]", 400, None, "invalid_json"),
    "empty body": (CHAT, b"", 400, None, "invalid_json"),
    "NaN": (CHAT, b'{"messages": [{"role": "user", "content": "Hi"}], "temperature": NaN}', 400, None, "invalid_json"),
    "lone surrogate in a prompt": (COMPLETIONS, b'{"prompt": "Hi \\ud800 there", "max_tokens": 1}', 400, None,
                                   "invalid_json"),
    "lone surrogate in content": (CHAT, b'{"messages": [{"role": "user", "content": "\\udfff"}]}', 400, None,
                                  "invalid_json"),
    "messages missing": (CHAT, {"model": MODEL}, 400, "messages", None),
    "messages not an array": (CHAT, chat(messages="Hi"), 400, "messages", None),
    "messages empty": (CHAT, chat(messages=[]), 400, "messages", None),
    "message not an object": (CHAT, chat(messages=["Hi"]), 400, "messages[0]", None),
    "unknown role": (CHAT, chat(messages=[{"role": "wizard", "content": "Hi"}]), 400, "messages[0].role", None),
    "content a number": (CHAT, chat(messages=[{"role": "user", "content": 5}]), 400, "messages[0].content", None),
    "content missing": (CHAT, chat(messages=[{"role": "user"}]), 400, "messages[0].content", None),
    "unknown content part": (CHAT, chat(messages=[{"role": "user", "content": [{"type": "audio"}]}]), 400,
                             "messages[0].content[0].type", None),
    "text part without text": (CHAT, chat(messages=[{"role": "user", "content": [{"type": "text"}]}]), 400,
                               "messages[0].content[0].text", None),
    "image on a text model": (CHAT, chat(messages=[{"role": "user", "content": [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}]}]),
        400, "messages[0].content[1]", "images_not_supported"),
    "template kwargs overriding messages": (CHAT, chat(chat_template_kwargs={"messages": []}), 400,
                                            "chat_template_kwargs", None),
    "model not a string": (CHAT, chat(model=3), 400, "model", None),
    "unknown model": (CHAT, chat(model="gpt-4o"), 404, "model", "model_not_found"),
    "temperature a string": (CHAT, chat(temperature="hot"), 400, "temperature", None),
    "temperature negative": (CHAT, chat(temperature=-0.5), 400, "temperature", None),
    "top_p zero": (CHAT, chat(top_p=0), 400, "top_p", None),
    "top_p above one": (CHAT, chat(top_p=1.5), 400, "top_p", None),
    "top_k a float": (CHAT, chat(top_k=2.5), 400, "top_k", None),
    "min_p one": (CHAT, chat(min_p=1), 400, "min_p", None),
    "max_tokens zero": (CHAT, chat(max_tokens=0), 400, "max_tokens", None),
    "max_tokens a float": (CHAT, chat(max_tokens=2.0), 400, "max_tokens", None),
    "max_tokens a bool": (CHAT, chat(max_tokens=True), 400, "max_tokens", None),
    "max_completion_tokens a string": (CHAT, chat(max_completion_tokens="2"), 400, "max_completion_tokens", None),
    "max_tokens past the context": (CHAT, chat(max_tokens=CTX), 400, "max_tokens", "context_length_exceeded"),
    "chat prompt too long": (CHAT, chat(messages=[{"role": "user", "content": "word " * CTX}]), 400, "messages",
                             "context_length_exceeded"),
    "completion prompt too long": (COMPLETIONS, completion(prompt=[1] * CTX), 400, "prompt",
                                   "context_length_exceeded"),
    "seed a string": (CHAT, chat(seed="42"), 400, "seed", None),
    "seed too large": (CHAT, chat(seed=1 << 70), 400, "seed", None),
    "stop a number": (CHAT, chat(stop=7), 400, "stop", None),
    "stop list with a number": (CHAT, chat(stop=["a", 7]), 400, "stop", None),
    "stop too many": (CHAT, chat(stop=[str(i) for i in range(17)]), 400, "stop", None),
    "n zero": (CHAT, chat(n=0), 400, "n", None),
    "stream a string": (CHAT, chat(stream="yes"), 400, "stream", None),
    "stream_options without stream": (CHAT, chat(stream_options={"include_usage": True}), 400, "stream_options",
                                      None),
    "include_usage a string": (CHAT, chat(stream=True, stream_options={"include_usage": "yes"}), 400,
                               "stream_options.include_usage", None),
    "logprobs a number in chat": (CHAT, chat(logprobs=2), 400, "logprobs", None),
    "top_logprobs without logprobs": (CHAT, chat(top_logprobs=2), 400, "top_logprobs", None),
    "top_logprobs too many": (CHAT, chat(logprobs=True, top_logprobs=21), 400, "top_logprobs", None),
    "completion logprobs too many": (COMPLETIONS, completion(logprobs=50), 400, "logprobs", None),
    "presence_penalty out of range": (CHAT, chat(presence_penalty=2.5), 400, "presence_penalty", None),
    "logit_bias key not an id": (CHAT, chat(logit_bias={"x42": 10}), 400, "logit_bias", None),
    "tools without a name": (CHAT, chat(tools=[{"type": "function", "function": {}}]), 400, "tools[0].function",
                             None),
    "response_format unknown": (CHAT, chat(response_format={"type": "xml"}), 400, "response_format.type", None),
    "return_token_ids a string": (CHAT, chat(return_token_ids="yes"), 400, "return_token_ids", None),
    "ignore_eos a number": (CHAT, chat(ignore_eos=1), 400, "ignore_eos", None),
    "prompt missing": (COMPLETIONS, {"model": MODEL}, 400, "prompt", None),
    "prompt empty": (COMPLETIONS, completion(prompt=""), 400, "prompt", None),
    "prompt no ids": (COMPLETIONS, completion(prompt=[]), 400, "prompt", None),
    "prompt id out of range": (COMPLETIONS, completion(prompt=[1, 10**6]), 400, "prompt", None),
    "prompt id negative": (COMPLETIONS, completion(prompt=[-1]), 400, "prompt", None),
    "prompt id a bool": (COMPLETIONS, completion(prompt=[1, True]), 400, "prompt", None),
    "prompt id a float": (COMPLETIONS, completion(prompt=[1.5]), 400, "prompt", None),
    "several prompts": (COMPLETIONS, completion(prompt=["a", "b"]), 400, "prompt", None),
    "prompt an object": (COMPLETIONS, completion(prompt={"text": "Hi"}), 400, "prompt", None),
    "echo": (COMPLETIONS, completion(echo=True), 400, "echo", None),
    "best_of": (COMPLETIONS, completion(best_of=3), 400, "best_of", None),
    "stop_token_ids with a string": (COMPLETIONS, completion(stop_token_ids=["x"]), 400, "stop_token_ids", None),
    "detokenize ids out of range": ("/detokenize", {"tokens": [10**7]}, 400, "tokens", None),
    "detokenize not ids": ("/detokenize", {"tokens": "abc"}, 400, "tokens", None),
    "tokenize without prompt": ("/tokenize", {}, 400, "prompt", None),
    "unknown route": ("/v1/embeddings", completion(), 404, None, "not_found"),
}


@pytest.fixture(scope="module")
def reference(server):
    with server.http() as http:
        return http.post(CHAT, json=REFERENCE).json()["choices"][0]


@pytest.mark.parametrize("name", list(CASES))
def test_bad_request_gets_its_status_and_the_server_keeps_serving(name, http, reference):
    path, body, status, param, code = CASES[name]
    if isinstance(body, bytes):
        r = http.post(path, content=body, headers={"Content-Type": "application/json"})
    else:
        r = http.post(path, json=body)
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert isinstance(error["message"], str) and len(error["message"]) > 10
    assert error["type"] == ("invalid_request_error" if status == 400 else "not_found_error")
    assert error["param"] == param
    if code is not None:
        assert error["code"] == code
    after = http.post(CHAT, json=REFERENCE)
    assert after.status_code == 200 and after.json()["choices"][0] == reference


def test_wrong_method_is_405(http):
    r = http.get(CHAT)
    assert r.status_code == 405 and r.json()["error"]["code"] == "method_not_allowed"


def test_streamed_bad_request_is_plain_json_before_any_event(http):
    r = http.post(CHAT, json=chat(stream=True, temperature=-1))
    assert r.status_code == 400 and r.json()["error"]["param"] == "temperature"


def test_refusals_are_counted(server, http):
    before = metric(metrics(server), "strata_requests_total", outcome="invalid")
    http.post(CHAT, content=b"{")
    http.post(CHAT, json=chat(n=0))
    assert metric(metrics(server), "strata_requests_total", outcome="invalid") == before + 2


def test_error_message_says_what_is_allowed(http):
    error = http.post(CHAT, json=chat(top_p=2)).json()["error"]
    assert "top_p must be in (0, 1], got 2" in error["message"]
    error = http.post(COMPLETIONS, json=completion(prompt=[1] * CTX)).json()["error"]
    assert f"at most {CTX - 1} prompt tokens" in error["message"]
    error = http.post(CHAT, json=chat(model="gpt-4o")).json()["error"]
    assert MODEL in error["message"]


def test_json_body_is_not_required_to_have_content_type(http):
    r = http.post(CHAT, content=json.dumps(chat(max_tokens=1)).encode())
    assert r.status_code == 200

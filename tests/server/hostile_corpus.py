"""The corpus of bad requests: what a careless or hostile client sends, and the 4xx each one must get.

A case is (name, method, path, body, headers, status, param, code): `body` is raw bytes, or a JSON value
that is sent as JSON; `param`/`code` of None are not checked. Cases come in families (the body as JSON,
each field of each endpoint with wrong types, out-of-range and non-finite values, huge and deep values,
token ids, image parts, routes and methods). A crash found by the fuzz test (test_openapi_fuzz.py) is
added here as a case. test_hostile_corpus.py sends each one and checks the answer, the counters, and a
reference stream running meanwhile.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from server_helpers import CTX, MODEL

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
TOKENIZE = "/tokenize"
DETOKENIZE = "/detokenize"
VOCAB = 49152                  # SmolLM2-135M's
JSON_ROUTES = {CHAT: {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2},
               COMPLETIONS: {"model": MODEL, "prompt": "Hi", "max_tokens": 2},
               TOKENIZE: {"prompt": "Hi"},
               DETOKENIZE: {"tokens": [1, 2]}}
TEXT_PARAM = {CHAT: "messages", COMPLETIONS: "prompt", TOKENIZE: "prompt"}


@dataclass(frozen=True)
class Case:
    name: str
    path: str
    body: object = None                  # bytes: sent as is; else sent as JSON (None: no body)
    status: int = 400
    param: str | None = None
    code: str | None = None
    method: str = "POST"
    headers: dict = field(default_factory=dict)

    def content(self) -> bytes | None:
        if self.body is None:
            return None
        return self.body if isinstance(self.body, bytes) else json.dumps(self.body).encode()

    def request_headers(self) -> dict:
        if isinstance(self.body, bytes) or self.body is None:
            return dict(self.headers)
        return {"Content-Type": "application/json", **self.headers}


def _with(path: str, **fields) -> dict:
    return {**JSON_ROUTES[path], **fields}


def _message(**fields) -> dict:
    return _with(CHAT, messages=[{"role": "user", "content": "Hi", **fields}])


def _deep(levels: int, opener: str = "[", closer: str = "]") -> bytes:
    return (opener * levels + closer * levels).encode()


def _json_level_cases():
    """What is wrong with the body as JSON, for every JSON endpoint."""
    raw = {
        "malformed": (b'{"model": "x", "messages": [', 400, "invalid_json"),
        "not UTF-8": (b'{"prompt": "\xff\xfe"}', 400, "invalid_json"),
        "overlong UTF-8": (b'{"prompt": "\xc0\xaf"}', 400, "invalid_json"),
        "truncated UTF-8": (b'{"prompt": "\xe2\x82"}', 400, "invalid_json"),
        "an array": (b"[1, 2]", 400, "invalid_json"),
        "a string": (b'"hello"', 400, "invalid_json"),
        "a number": (b"42", 400, "invalid_json"),
        "null": (b"null", 400, "invalid_json"),
        "empty": (b"", 400, "invalid_json"),
        "whitespace": (b"  \n ", 400, "invalid_json"),
        "NaN": (b'{"temperature": NaN, "prompt": "Hi", "tokens": [1]}', 400, "invalid_json"),
        "Infinity": (b'{"temperature": Infinity, "prompt": "Hi", "tokens": [1]}', 400, "invalid_json"),
        "-Infinity": (b'{"top_p": -Infinity, "prompt": "Hi", "tokens": [1]}', 400, "invalid_json"),
        "1e999": (b'{"temperature": 1e999, "prompt": "Hi", "tokens": [1]}', 400, "invalid_json"),
        "-1e999": (b'{"x": [-1e999], "prompt": "Hi", "tokens": [1]}', 400, "invalid_json"),
        "20000 nested arrays": (_deep(20000), 400, "invalid_json"),
        "20000 nested objects": (b'{"a":' * 20000 + b"1" + b"}" * 20000, 400, "invalid_json"),
        "33 nested arrays in a field": (b'{"prompt": "Hi", "x": ' + _deep(33) + b"}", 400, "invalid_json"),
        "lone surrogate": (b'{"prompt": "a\\ud800b", "messages": [{"role": "user", "content": "\\udfff"}]}', 400,
                           "invalid_json"),
        "trailing garbage": (b'{"prompt": "Hi"} trailing', 400, "invalid_json"),
        "a huge integer": (b'{"prompt": "Hi", "max_tokens": 1' + b"0" * 5000 + b"}", 400, "invalid_json"),
        "control character in a string": (b'{"prompt": "a\x01b"}', 400, "invalid_json"),
    }
    for path in JSON_ROUTES:
        for name, (body, status, code) in raw.items():
            yield Case(f"{path} body {name}", path, body, status, None, code,
                       headers={"Content-Type": "application/json"})
        good = json.dumps(JSON_ROUTES[path]).encode()
        for mime in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
                     "application/xml"):
            yield Case(f"{path} sent as {mime.split(';')[0]}", path, good, 415, None, "unsupported_media_type",
                       headers={"Content-Type": mime})


def _field_cases():
    """Each field of the generation endpoints with a wrong type or an out-of-range value."""
    wrong = {
        "model": [3, [], {}], "temperature": ["hot", -0.5, 101, [1]], "top_p": [0, 1.5, -1, "x"],
        "top_k": [2.5, -2, 1 << 40, "5"], "min_p": [1, -0.1, "x"], "max_tokens": [0, -1, 2.0, True, "2", 10**30],
        "seed": ["42", 1 << 70, -(1 << 64), 1.5], "stop": [7, ["a", 7], [str(i) for i in range(17)], [""], ["x" * 300]],
        "n": [129, 0, "1"], "stream": ["yes", 1, []], "stream_options": [{"include_usage": True}, "x"],
        "return_token_ids": ["yes", 1], "ignore_eos": [1, "true"], "stop_token_ids": [["x"], [1 << 40], [1.5], 5],
        "presence_penalty": [2.5, "x"], "frequency_penalty": [-3, "x"], "repetition_penalty": [0, 2.5, "x"],
        "logit_bias": [{"x42": 10}, {"42": 101}, [1]], "min_tokens": [-1, "x"], "choice_index": [-1, 1.5],
        "grammar": [5, "", "start: undefined_rule"], "user": [5, []],
    }
    for path in (CHAT, COMPLETIONS):
        for name, values in wrong.items():
            for value in values:
                param = "stream_options" if name == "stream_options" else name
                status = 404 if (name == "model" and isinstance(value, str)) else 400
                yield Case(f"{path} {name}={json.dumps(value)[:40]}", path, _with(path, **{name: value}), status, param)
    chat_only = {"messages": ["Hi", [], ["Hi"], [{}], None, {"role": "user"}], "logprobs": [2, "yes"],
                 "top_logprobs": [21, -1, 2], "max_completion_tokens": ["2", 0], "tools": ["x", 5],
                 "tool_choice": ["sometimes", 5], "parallel_tool_calls": ["yes"],
                 "response_format": ["json", 5], "chat_template_kwargs": [{"messages": []}, 5]}
    params = {"messages": "messages", "max_completion_tokens": None}      # the range error names max_tokens
    for name, values in chat_only.items():
        for value in values:
            body = _with(CHAT, **{name: value})
            if value is None:
                body.pop(name)
            yield Case(f"chat {name}={json.dumps(value)[:40]}", CHAT, body, 400, params.get(name, name) if name in params
                       else name)
    completion_only = {"prompt": ["", [], [[1], [2]], ["a", "b"], {"text": "Hi"}, None, 5], "logprobs": [50, -1, True],
                       "echo": [True, "x"], "suffix": ["tail", 5], "best_of": [3, "x"]}
    for name, values in completion_only.items():
        for value in values:
            body = _with(COMPLETIONS, **{name: value})
            if value is None:
                body.pop(name)
            yield Case(f"completion {name}={json.dumps(value)[:40]}", COMPLETIONS, body, 400, name)


def _message_cases():
    for name, fields, param in [
        ("role missing", {"role": None}, "messages[0].role"),
        ("role unknown", {"role": "wizard"}, "messages[0].role"),
        ("role a number", {"role": 1}, "messages[0].role"),
        ("content a number", {"content": 5}, "messages[0].content"),
        ("content an object", {"content": {"text": "Hi"}}, "messages[0].content"),
        ("content null for a user", {"content": None}, "messages[0].content"),
        ("name a number", {"name": 5}, "messages[0].name"),
        ("part not an object", {"content": ["Hi"]}, "messages[0].content[0]"),
        ("part without type", {"content": [{"text": "Hi"}]}, "messages[0].content[0].type"),
        ("part of unknown type", {"content": [{"type": "audio"}]}, "messages[0].content[0].type"),
        ("text part without text", {"content": [{"type": "text"}]}, "messages[0].content[0].text"),
        ("text part with a number", {"content": [{"type": "text", "text": 5}]}, "messages[0].content[0].text"),
    ]:
        body = _message(**fields)
        if fields.get("role", "") is None:
            body["messages"][0].pop("role")
        yield Case(f"chat message {name}", CHAT, body, 400, param)


def _size_cases():
    """Huge values: refused from their size, before any tokenizing."""
    huge_text = "word " * 40_000                      # more characters than a 512-token slot can take
    yield Case("chat content past the context bound", CHAT, _message(content=huge_text), 400, "messages",
               "context_length_exceeded")
    yield Case("chat many messages past the bound", CHAT,
               _with(CHAT, messages=[{"role": "user", "content": "x" * 10_000}] * 20), 400, "messages",
               "context_length_exceeded")
    yield Case("chat text part past the bound", CHAT, _message(content=[{"type": "text", "text": huge_text}]), 400,
               "messages", "context_length_exceeded")
    yield Case("chat template kwargs past the bound", CHAT, _with(CHAT, chat_template_kwargs={"x": huge_text}),
               400, "messages", "context_length_exceeded")
    yield Case("completion prompt past the bound", COMPLETIONS, _with(COMPLETIONS, prompt=huge_text), 400, "prompt",
               "context_length_exceeded")
    yield Case("tokenize prompt past the bound", TOKENIZE, {"prompt": huge_text}, 400, "prompt",
               "context_length_exceeded")
    yield Case("tokenize messages past the bound", TOKENIZE, {"messages": [{"role": "user", "content": huge_text}]},
               400, "messages", "context_length_exceeded")
    yield Case("chat prompt just too long", CHAT, _message(content="word " * CTX), 400, "messages",
               "context_length_exceeded")
    yield Case("completion ids one too many", COMPLETIONS, _with(COMPLETIONS, prompt=[1] * CTX), 400, "prompt",
               "context_length_exceeded")
    yield Case("max_tokens past the context", CHAT, _with(CHAT, max_tokens=CTX), 400, "max_tokens",
               "context_length_exceeded")
    body = b'{"prompt": "' + b"a" * (3 * 1024 * 1024) + b'"}'
    for path in JSON_ROUTES:
        yield Case(f"{path} 3 MB body", path, body, 413, None, "body_too_large",
                   headers={"Content-Type": "application/json"})


def _token_id_cases():
    for name, ids in [("vocab size", [VOCAB]), ("negative", [-1]), ("2**63", [1 << 63]), ("a float", [1.5]),
                      ("a bool", [True]), ("a string", ["1"]), ("null", [None]), ("nested", [[1]])]:
        yield Case(f"completion prompt id {name}", COMPLETIONS, _with(COMPLETIONS, prompt=[1, *ids]), 400, "prompt")
        yield Case(f"detokenize id {name}", DETOKENIZE, {"tokens": [1, *ids]}, 400, "tokens")
    yield Case("detokenize tokens a string", DETOKENIZE, {"tokens": "abc"}, 400, "tokens")
    yield Case("detokenize tokens missing", DETOKENIZE, {}, 400, "tokens")
    yield Case("tokenize nothing", TOKENIZE, {}, 400, "prompt")
    yield Case("tokenize prompt a number", TOKENIZE, {"prompt": 5}, 400, "prompt")
    yield Case("tokenize messages a string", TOKENIZE, {"messages": "Hi"}, 400, "messages")
    yield Case("tokenize add_special_tokens a string", TOKENIZE, {"prompt": "Hi", "add_special_tokens": "no"}, 400,
               "add_special_tokens")
    yield Case("tokenize unknown model", TOKENIZE, {"prompt": "Hi", "model": "gpt-4o"}, 404, "model",
               "model_not_found")


def _image_cases():
    """Image parts of every scheme and escape; the text model refuses each as an image before reading it."""
    urls = ["data:image/png;base64,iVBORw0KGgo=", "file:///etc/passwd", "file:///media/ok.png%00.txt",
            "../../etc/passwd", "%2e%2e/%2e%2e/etc/passwd", "http://127.0.0.1:1/x.png", "http://169.254.169.254/",
            "http://2130706433/", "https://[::1]/x.png", "ftp://example.com/x.png", "gopher://127.0.0.1:25/",
            "javascript:alert(1)", "/proc/self/environ"]
    for url in urls:
        yield Case(f"image {url[:40]} on a text model", CHAT,
                   _message(content=[{"type": "image_url", "image_url": {"url": url}}]), 400, "messages[0].content[0]",
                   "images_not_supported")


def _route_cases():
    for path in (CHAT, COMPLETIONS, TOKENIZE, DETOKENIZE):
        yield Case(f"GET {path}", path, None, 405, None, "method_not_allowed", method="GET")
        yield Case(f"PUT {path}", path, JSON_ROUTES[path], 405, None, "method_not_allowed", method="PUT")
    for path in ("/health", "/metrics", "/slots", "/v1/models", "/openapi.json"):
        yield Case(f"POST {path}", path, {}, 405, None, "method_not_allowed")
        yield Case(f"DELETE {path}", path, None, 405, None, "method_not_allowed", method="DELETE")
    for path in ("/v1/embeddings", "/v1/chat", "/admin", "/v1/chat/completions/x", "/%2e%2e/etc/passwd",
                 "/v1/../../etc/passwd", "/.env"):
        yield Case(f"unknown route {path}", path, None, 404, None, "not_found", method="GET")
    yield Case("unknown model card", "/v1/models/gpt-4o", None, 404, "model", "model_not_found", method="GET")
    yield Case("unknown model in chat", CHAT, _with(CHAT, model="gpt-4o"), 404, "model", "model_not_found")


def cases() -> list[Case]:
    out = [*_json_level_cases(), *_field_cases(), *_message_cases(), *_size_cases(), *_token_id_cases(),
           *_image_cases(), *_route_cases()]
    names = [c.name for c in out]
    assert len(names) == len(set(names)), "case names must be unique"
    return out


# Bytes that never become a request: hypercorn answers them itself (server/h11_errors.py).
RAW_HTTP_CASES = {
    "garbage bytes": (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\0" * 64 + b"\r\n\r\n", 400),
    "not HTTP": (b"HELLO WORLD\r\n\r\n", 400),
    "bad chunk size": (b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                       b"Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n", 400),
    "content-length and chunked": (b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
                                   b"Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", 400),
    "negative content-length": (b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n", 400),
    "no Host header": (b"GET /health HTTP/1.1\r\n\r\n", 400),
    "space in a header name": (b"GET /health HTTP/1.1\r\nHost: x\r\nBad Header: 1\r\n\r\n", 400),
    "1 MB header": (b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (1024 * 1024) + b"\r\n\r\n", 431),
    "100 KB URL": (b"GET /" + b"a" * 100_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 431),
}

"""The API key: every route but /health needs 'Authorization: Bearer <key>' when the server has one;
a missing or wrong key is a 401 in the OpenAI shape, counted, and changes nothing."""

from __future__ import annotations

import httpx
import pytest
from server_helpers import MODEL, metric, start_server

GUARDED = [
    ("GET", "/v1/models", None),
    ("GET", f"/v1/models/{MODEL}", None),
    ("POST", "/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}],
                                      "max_tokens": 1}),
    ("POST", "/v1/completions", {"model": MODEL, "prompt": "Hi", "max_tokens": 1}),
    ("GET", "/metrics", None),
    ("GET", "/slots", None),
    ("POST", "/tokenize", {"prompt": "Hi"}),
    ("POST", "/detokenize", {"tokens": [1]}),
]


def _send(server, method, path, body, headers):
    return httpx.request(method, server.url + path, json=body, headers=headers, timeout=60)


@pytest.mark.parametrize("method,path,body", GUARDED)
def test_routes_need_the_key(key_server, method, path, body):
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "test-key-123"},
                    {"Authorization": "Basic test-key-123"}):
        r = _send(key_server, method, path, body, headers)
        assert r.status_code == 401, (headers, r.text)
        assert r.headers["WWW-Authenticate"] == "Bearer"
        error = r.json()["error"]
        assert error["type"] == "authentication_error" and error["code"] == "invalid_api_key"
        assert "Authorization: Bearer" in error["message"]
    r = _send(key_server, method, path, body, key_server.headers())
    assert r.status_code == 200, r.text


def test_health_stays_open(key_server):
    r = httpx.get(f"{key_server.url}/health")
    assert r.status_code == 200 and r.json()["status"] == "ok"


def test_refused_keys_are_counted(key_server):
    read = lambda: metric(httpx.get(f"{key_server.url}/metrics", headers=key_server.headers()).text,  # noqa: E731
                          "strata_requests_total", outcome="unauthorized")
    before = read()
    _send(key_server, *GUARDED[2], {"Authorization": "Bearer nope"})
    assert read() == before + 1


def test_no_key_needed_when_none_is_set(server):
    assert httpx.get(f"{server.url}/v1/models", headers={"Authorization": "Bearer anything"}).status_code == 200


def test_key_from_the_environment(model_available, tmp_path):
    server = start_server(tmp_path, "--batch", "1", env={"STRATA_API_KEY": "from-env"})
    try:
        assert httpx.get(f"{server.url}/v1/models").status_code == 401
        assert httpx.get(f"{server.url}/v1/models", headers={"Authorization": "Bearer from-env"}).status_code == 200
        assert httpx.get(f"{server.url}/health").status_code == 200
        assert "API key required" in server.log()
    finally:
        server.stop()

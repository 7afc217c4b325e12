"""GET /openapi.json describes the API, and a property-based fuzz run from it never gets a 500.

Bodies are drawn by openapi_strategies from the document the server publishes, with a fixed seed
(derandomize) and a bounded number of examples, so CI runs the same short sequence every time. For a
longer run: STRATA_FUZZ_EXAMPLES=2000 pytest tests/server/test_openapi_fuzz.py (docs/security.md).
Every crash it finds becomes a case in hostile_corpus.py.
"""

from __future__ import annotations

import os

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from openapi_strategies import request_bodies
from server_helpers import MODEL, wait_idle

EXAMPLES = int(os.environ.get("STRATA_FUZZ_EXAMPLES", "40"))
FUZZ = settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
GENERATION = ("/v1/chat/completions", "/v1/completions")


@pytest.fixture(scope="module")
def document(server):
    r = httpx.get(f"{server.url}/openapi.json", timeout=30)
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/json")
    return r.json()


def test_document_describes_every_route(server, document):
    assert document["openapi"].startswith("3.1")
    assert MODEL in document["info"]["description"]
    with server.http() as http:
        for path, operations in document["paths"].items():
            for method, operation in operations.items():
                assert operation["summary"] and "200" in operation["responses"]
                assert operation["responses"]["400"]["content"]["application/json"]["schema"] == \
                    {"$ref": "#/components/schemas/Error"}
                if "requestBody" in operation:
                    continue                     # fuzzed below
                if path == "/slots/{id_slot}":
                    continue                     # needs --slot-save-path: test_prefix_cache_http.py
                r = http.request(method.upper(), path.replace("{model}", MODEL))
                assert r.status_code == 200, (method, path, r.text[:300])
    body_paths = {p for p, ops in document["paths"].items() for op in ops.values() if "requestBody" in op}
    assert body_paths == {"/v1/chat/completions", "/v1/completions", "/tokenize", "/detokenize"}


def _schema(document, path):
    return document["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]


def _tame(body: dict) -> dict:
    """Keeps generation short: a fuzz run is about input handling, not about decoding 500 tokens."""
    for name in ("max_tokens", "max_completion_tokens"):
        if isinstance(body.get(name), int) and not isinstance(body[name], bool) and body[name] > 3:
            body[name] = 3
    if "max_tokens" not in body and "max_completion_tokens" not in body:
        body["max_tokens"] = 2
    return body


def _check(http: httpx.Client, path: str, body: dict) -> None:
    with http.stream("POST", path, json=body) as r:
        content = r.read()
        assert r.status_code < 500, (path, body, r.status_code, content[:500])
        if r.status_code >= 400:
            error = r.json()["error"]
            assert set(error) == {"message", "type", "param", "code"} and error["message"], (body, error)
        elif r.headers["content-type"].startswith("application/json"):
            assert isinstance(r.json(), dict)
        else:
            assert content.rstrip().endswith(b"data: [DONE]"), content[-200:]


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions", "/tokenize", "/detokenize"])
def test_fuzz_from_the_document(server, document, path):
    strategy = request_bodies(_schema(document, path))
    with server.http(timeout=120) as http:

        @FUZZ
        @given(strategy)
        def run(body):
            _check(http, path, _tame(body) if path in GENERATION else body)

        run()
        assert http.get("/health").status_code == 200
    wait_idle(server)

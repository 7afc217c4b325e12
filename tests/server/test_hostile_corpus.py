"""Every case of the bad-request corpus (hostile_corpus.py): a 4xx in OpenAI's error shape, counted in /metrics
by status (and as `invalid` on the generation routes), while reference streams run exactly as alone."""

from __future__ import annotations

import json
import socket

import pytest
from hostile_corpus import CHAT, COMPLETIONS, RAW_HTTP_CASES, cases
from reference_streams import ReferenceStreams
from server_helpers import metric

CASES = cases()
GENERATION = (CHAT, COMPLETIONS)


@pytest.fixture(scope="module")
def references(server):
    streams = ReferenceStreams(server)
    yield streams
    streams.check()


def test_the_corpus_is_large():
    assert len(CASES) + len(RAW_HTTP_CASES) >= 150


def _check_error(response, status: int, param: str | None, code: str | None) -> dict:
    assert response.status_code == status, response.text[:500]
    assert response.headers["content-type"].startswith("application/json"), response.headers
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert isinstance(error["message"], str) and len(error["message"]) > 10
    assert error["type"] == ("not_found_error" if status == 404 else "invalid_request_error")
    if param is not None:
        assert error["param"] == param or error["param"].startswith((param + "[", param + ".")), error
    if code is not None:
        assert error["code"] == code, error
    return error


@pytest.fixture(scope="module")
def scrape(server):
    """GET /metrics over one kept-alive connection (a new httpx client per scrape costs an SSL context)."""
    with server.http() as client:
        yield lambda: client.get("/metrics").text


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_request(case, http, references, scrape):
    before = scrape()
    with references.during(case.name):
        response = http.request(case.method, case.path, content=case.content(), headers=case.request_headers())
    _check_error(response, case.status, case.param, case.code)
    after = scrape()
    code = str(case.status)
    assert metric(after, "strata_http_responses_total", code=code) == \
        metric(before, "strata_http_responses_total", code=code) + 1
    if case.path in GENERATION and case.method == "POST":
        assert metric(after, "strata_requests_total", outcome="invalid") == \
            metric(before, "strata_requests_total", outcome="invalid") + 1


def _raw_exchange(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        try:
            s.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass                        # the server may answer and close before reading everything
        reply = b""
        try:
            while chunk := s.recv(65536):
                reply += chunk
        except ConnectionResetError:
            pass
    return reply


@pytest.mark.parametrize("name", list(RAW_HTTP_CASES))
def test_malformed_http_gets_an_openai_error_body(name, server, references, scrape):
    data, status = RAW_HTTP_CASES[name]
    before = scrape()
    with references.during(name):
        reply = _raw_exchange(server.port, data)
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(f"HTTP/1.1 {status} ".encode()), head[:200]
    assert b"content-type: application/json" in head.lower()
    error = json.loads(body)["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["type"] == "invalid_request_error"
    assert metric(scrape(), "strata_http_responses_total", code=str(status)) == \
        metric(before, "strata_http_responses_total", code=str(status)) + 1


def test_reference_streams_stayed_exact(references):
    """Runs last in this module: every reference stream that overlapped the corpus equals its solo run."""
    assert references.check() >= 2


@pytest.mark.gpu
def test_the_corpus_on_the_gpu(model_available, tmp_path):
    """The whole corpus against a CUDA server, reference streams exact throughout (run on the H200)."""
    from server_helpers import start_server

    from strata import _ffi

    if _ffi.cuda_device_count() == 0:
        pytest.skip("no CUDA device")
    server = start_server(tmp_path, "--device", "cuda:0", "--batch", "8")
    try:
        streams = ReferenceStreams(server)
        with server.http() as http:
            for case in CASES:
                with streams.during(case.name):
                    response = http.request(case.method, case.path, content=case.content(),
                                            headers=case.request_headers())
                _check_error(response, case.status, case.param, case.code)
            for name, (data, status) in RAW_HTTP_CASES.items():
                with streams.during(name):
                    assert _raw_exchange(server.port, data).startswith(f"HTTP/1.1 {status} ".encode())
        assert streams.check() >= 2
    finally:
        server.stop()

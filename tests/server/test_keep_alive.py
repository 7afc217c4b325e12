"""A response that starts before its request's body was read (a 404, a 405) keeps the connection reusable
(server/body_drain.py): over raw sockets the body follows its headers a moment later, then a second
request on the same connection gets its answer. Without the drain the server answered before the body
came, closed the connection after the response, and clients that reuse keep-alive connections failed
their next request. A body that never comes gets `Connection: close` on the response, after DRAIN_S."""

from __future__ import annotations

import json
import socket
import time

import pytest
from server_helpers import MODEL

BODY = json.dumps({"model": MODEL, "prompt": "Hi", "max_tokens": 1}).encode()


def _headers(method: str, path: str, length: int) -> bytes:
    return (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\n\r\n").encode()


def _response(sock: socket.socket) -> tuple[int, dict, bytes]:
    """One whole response (Content-Length framed): its status, header fields and body; 0 if the server closed."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return 0, {}, b""
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    fields = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
    length = int(fields["content-length"])
    while len(rest) < length:
        chunk = sock.recv(65536)
        assert chunk, "the server closed the connection inside a response"
        rest += chunk
    return int(lines[0].split()[1]), fields, rest[:length]


@pytest.mark.parametrize("method, path, status", [("POST", "/v1/embeddings", 404), ("PUT", "/v1/completions", 405)],
                         ids=["unknown-route", "wrong-method"])
def test_the_connection_survives_a_response_sent_before_the_body(server, method, path, status):
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(_headers(method, path, len(BODY)))
        time.sleep(0.3)                                          # the app has its answer by now
        sock.sendall(BODY)
        got, fields, _ = _response(sock)
        assert got == status and fields.get("connection", "").lower() != "close"
        sock.sendall(_headers("POST", "/v1/completions", len(BODY)) + BODY)
        got, _, body = _response(sock)
        assert got == 200, "the server closed the connection after answering before the body"
        assert json.loads(body)["usage"]["completion_tokens"] == 1


def test_a_body_that_never_comes_gets_connection_close(server):
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(_headers("POST", "/v1/embeddings", len(BODY)))
        started = time.monotonic()
        got, fields, _ = _response(sock)
        assert got == 404 and fields.get("connection", "").lower() == "close"
        assert time.monotonic() - started < 20
        sock.settimeout(10)
        assert sock.recv(1) == b""                               # and the server closes it, as it said

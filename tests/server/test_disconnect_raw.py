"""Clients that leave with a FIN, a half-close or an RST, right after sending their request or once the
answer has begun, over raw sockets: each request is cancelled (counted as such, never as `length`), its
slot frees, and the server then answers as before."""

from __future__ import annotations

import json
import socket
import struct
import time

import pytest
from server_helpers import metric, metrics, wait_idle

BODY = {"model": "smollm2-135m", "prompt": "Count: 1, 2,", "max_tokens": 300, "ignore_eos": True}


def _request(stream: bool) -> bytes:
    body = json.dumps({**BODY, "stream": stream}).encode()
    return (b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body)) + body


def _cancelled(server) -> float:
    return metric(metrics(server), "strata_requests_total", outcome="cancelled")


def _wait_cancelled(server, before: float, at_least: int, timeout: float) -> float:
    """Waits until `at_least` more requests count as cancelled, then until the slots are idle; returns how
    many more did. Idle slots alone are not enough: right after the client leaves, its request may not
    have reached the engine yet (the slots look idle, and the cancel is counted a moment later)."""
    deadline = time.monotonic() + timeout
    while _cancelled(server) - before < at_least and time.monotonic() < deadline:
        time.sleep(0.02)
    wait_idle(server, timeout=10)
    return _cancelled(server) - before


def _leave(sock: socket.socket, how: str) -> None:
    if how == "fin":
        sock.close()
    elif how == "half-close":
        sock.shutdown(socket.SHUT_WR)       # we keep the socket open for reading, and never read
    else:                                   # rst: linger 0 makes close() send a reset
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()


@pytest.mark.parametrize("how", ["fin", "half-close", "rst"])
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
@pytest.mark.parametrize("when", ["right-after-request", "after-response-began"])
def test_client_leaving_cancels_its_request(server, http, how, stream, when):
    if when == "after-response-began" and not stream:
        pytest.skip("a whole answer sends nothing before it is done")
    wait_idle(server)
    before = metrics(server)
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    try:
        sock.sendall(_request(stream))
        if when == "after-response-began":
            assert sock.recv(4096).startswith(b"HTTP/1.1 200")
        _leave(sock, how)
        # a reset may reach the server before it read the request: the kernel then drops the unread bytes,
        # and there was never a request to cancel (the slot is idle either way), so that case waits less
        maybe_never = how == "rst" and when == "right-after-request"
        cancelled = _wait_cancelled(server, metric(before, "strata_requests_total", outcome="cancelled"), 1,
                                    timeout=2 if maybe_never else 20)
    finally:
        sock.close()
    after = metrics(server)
    if maybe_never:
        assert cancelled in (0, 1)
    else:
        assert cancelled == 1
    assert metric(after, "strata_requests_total", outcome="length") == \
        metric(before, "strata_requests_total", outcome="length")
    generated = metric(after, "strata_generation_tokens_total") - metric(before, "strata_generation_tokens_total")
    assert generated < BODY["max_tokens"]
    r = http.post("/v1/completions", json={**BODY, "max_tokens": 2})
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 2


def test_a_storm_of_immediate_closes(server, http):
    wait_idle(server)
    before = _cancelled(server)
    socks = []
    for i in range(12):
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
        sock.sendall(_request(stream=bool(i % 2)))
        _leave(sock, ["fin", "half-close", "rst"][i % 3])
        socks.append(sock)
    cancelled = _wait_cancelled(server, before, 8, timeout=30)
    for sock in socks:
        sock.close()
    assert 8 <= cancelled <= 12          # the four resets may come before their request was read (see above)


def _counted(server, *outcomes: str) -> float:
    text = metrics(server)
    return sum(metric(text, "strata_requests_total", outcome=o) for o in outcomes)


def test_leaving_while_a_long_prompt_is_prepared_is_counted_once(server, http):
    """The client leaves while its long prompt (too long for a slot, but not refused before tokenizing) is
    being prepared. Whether the handler is cancelled there or gets as far as refusing the prompt, the
    request is counted exactly once — cancelled or invalid — never under no outcome, and the server serves
    on. (The handler cancelled with no response is server/client_gone.py's `on_unaccounted`, unit-tested
    in test_client_gone.py.)"""
    wait_idle(server)
    before = _counted(server, "cancelled", "invalid")
    body = json.dumps({**BODY, "prompt": "count the words of this sentence " * 4_800, "stream": True}).encode()
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n" % len(body) + body)
    _leave(sock, "fin")
    deadline = time.monotonic() + 20
    while _counted(server, "cancelled", "invalid") == before and time.monotonic() < deadline:
        time.sleep(0.02)
    wait_idle(server)
    time.sleep(0.2)                                  # a second count would come within the same exchange
    assert _counted(server, "cancelled", "invalid") - before == 1
    r = http.post("/v1/completions", json={**BODY, "max_tokens": 2})
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 2

"""DisconnectWatch (server/client_gone.py) on a bare ASGI app, no server: a generation request whose client
left is counted exactly once whatever the handler was doing, and nothing else is counted by it."""

from __future__ import annotations

import asyncio

import pytest

from server.client_gone import DisconnectWatch, client_of

PATHS = frozenset({"/v1/completions"})


def _receive_then_leave():
    messages = [{"type": "http.request", "body": b"{}", "more_body": False}, {"type": "http.disconnect"}]

    async def receive():
        return messages.pop(0) if messages else {"type": "http.disconnect"}
    return receive


async def _send(message):
    pass


async def _run(app, path="/v1/completions"):
    counted = []
    watch = DisconnectWatch(app, PATHS, on_unaccounted=lambda: counted.append(1))
    scope = {"type": "http", "path": path}
    try:
        await watch(scope, _receive_then_leave(), _send)
    except asyncio.CancelledError:
        pass
    return len(counted), client_of(scope)


async def _cancelled_before_the_engine(scope, receive, send):
    """As Quart does on http.disconnect: the handler task ends (here it raises) with no response."""
    await receive()
    await receive()
    raise asyncio.CancelledError


async def _submitted_then_cancelled(scope, receive, send):
    client_of(scope).accounted = True          # as _generate does before it hands the request over
    await receive()
    await receive()
    raise asyncio.CancelledError


async def _answered(scope, receive, send):
    await receive()
    await receive()
    await send({"type": "http.response.start", "status": 400, "headers": []})
    await send({"type": "http.response.body", "body": b"{}"})


async def _client_stays(scope, receive, send):
    await receive()


@pytest.mark.parametrize("app, path, expected", [
    (_cancelled_before_the_engine, "/v1/completions", 1),
    (_cancelled_before_the_engine, "/slots", 0),              # only generation requests have an outcome
    (_submitted_then_cancelled, "/v1/completions", 0),        # the engine counts it
    (_answered, "/v1/completions", 0),                        # the after-request hook counted the response
    (_client_stays, "/v1/completions", 0),                    # a handler that ends while the client is there
], ids=["cancelled-before-engine", "other-path", "submitted", "answered", "client-stays"])
async def test_a_request_whose_client_left_is_counted_once(app, path, expected):
    counted, client = await _run(app, path)
    assert counted == expected
    assert client.gone                                        # nothing outlives the exchange

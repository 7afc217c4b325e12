"""OpenAI-shaped bodies for the errors hypercorn answers itself, below the app.

Hypercorn refuses what never becomes a request (431 for oversized headers,
400 for bad chunking or bytes that are not HTTP, and a 500 when an app sends
no response) with an empty body. Clients of an OpenAI-compatible server
read `error.message` from every failure, so `install()` swaps in subclasses
of hypercorn's HTTP/1.1 protocol and stream whose only change is that the
response carries the error JSON (and its Content-Length). They are counted
here, since no app code sees them, and /metrics reports the counts.
"""

from __future__ import annotations

import json
from collections import Counter
from itertools import chain

import h11
import hypercorn.protocol
import hypercorn.protocol.h11
from hypercorn.protocol.events import Body, EndBody, Response
from hypercorn.protocol.h11 import H11Protocol
from hypercorn.protocol.http_stream import ASGIHTTPState, HTTPStream

from .errors import error_body

# status -> count of errors answered below the app (process-wide: hypercorn's protocol objects can't reach the app)
COUNTS: Counter = Counter()

MESSAGES = {
    400: ("the request is not valid HTTP/1.1 (malformed request line, headers or chunked body)", "bad_http_request"),
    404: ("no such host on this server", "not_found"),
    408: ("the request took too long to arrive", "request_timeout"),
    413: ("the request is too large", "body_too_large"),
    414: ("the request URL is too long", "uri_too_long"),
    431: ("the request headers are too large (at most 16 KiB in all)", "headers_too_large"),
    500: ("internal server error: the application sent no response", "internal_error"),
}


def error_bytes(status: int) -> bytes:
    message, code = MESSAGES.get(status, ("the request could not be processed", "bad_http_request"))
    return json.dumps(error_body(status, message, code=code)).encode()


class JSONErrorH11Protocol(H11Protocol):
    async def _send_error_response(self, status_code: int) -> None:
        COUNTS[status_code] += 1
        body = error_bytes(status_code)
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                   (b"connection", b"close")]
        await self._send_h11_event(h11.Response(status_code=status_code,
                                                headers=list(chain(headers, self.config.response_headers("h11")))))
        await self._send_h11_event(h11.Data(data=body))
        await self._send_h11_event(h11.EndOfMessage())


class JSONErrorHTTPStream(HTTPStream):
    async def _send_error_response(self, status_code: int) -> None:
        COUNTS[status_code] += 1
        body = error_bytes(status_code)
        await self.send(Response(stream_id=self.stream_id, status_code=status_code,
                                 headers=[(b"content-type", b"application/json"),
                                          (b"content-length", str(len(body)).encode()), (b"connection", b"close")]))
        await self.send(Body(stream_id=self.stream_id, data=body))
        await self.send(EndBody(stream_id=self.stream_id))
        self.state = ASGIHTTPState.CLOSED


def install() -> None:
    """Makes hypercorn's HTTP/1.1 connections use the JSON-error classes (idempotent)."""
    for name in ("_send_error_response", "_send_h11_event"):
        if not hasattr(H11Protocol, name):
            raise RuntimeError(f"this hypercorn has no H11Protocol.{name}; server/h11_errors.py needs updating")
    hypercorn.protocol.H11Protocol = JSONErrorH11Protocol
    hypercorn.protocol.h11.HTTPStream = JSONErrorHTTPStream

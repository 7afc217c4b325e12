"""Server-sent events: one request's engine events as OpenAI stream chunks.

The order is what OpenAI clients expect: (chat) a first chunk with the role,
one chunk per token that shows something, a chunk with an empty delta and
the finish_reason, a usage chunk with empty choices when the client asked
for it, then `data: [DONE]`. A request that ends without a finish reason
(the server shutting down, an engine failure) ends with an OpenAI error
event instead, then `[DONE]`, so clients see why their answer stopped.

Leaving the generator early (the client disconnected and Quart cancelled
the response) closes the RequestStream, which cancels the request: its slot
frees within one engine step.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

from strata.engine.stream import RequestStream

from .errors import error_body
from .responses import Formatter

DONE = b"data: [DONE]\n\n"
HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
CONTENT_TYPE = "text/event-stream; charset=utf-8"
FINISH_REASONS = ("stop", "length")


def sse(data: dict) -> bytes:
    return b"data: " + json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"


async def stream_chunks(stream: RequestStream, fmt: Formatter) -> AsyncIterator[bytes]:
    try:
        for chunk in fmt.opening_chunks():
            yield sse(chunk)
        ended = False
        async for event in stream:
            if event.final and event.finish_reason not in FINISH_REASONS:
                yield sse(_error_event(event.finish_reason, event.error))
                ended = True
                break
            chunk = fmt.delta_chunk(event)
            if chunk is not None:
                yield sse(chunk)
            if event.final:
                yield sse(fmt.finish_chunk(event.finish_reason))
                if fmt.options.include_usage:
                    yield sse(fmt.usage_chunk(event.prompt_tokens, event.completion_tokens))
                ended = True
                break
        if not ended:
            yield sse(_error_event("error", "the request ended without a final event"))
        yield DONE
    finally:
        await stream.aclose()


class EventStreamBody:
    """The response body of a streamed request. Closing it cancels the request even when the
    body was never iterated (the client left before the first chunk was sent)."""

    def __init__(self, stream: RequestStream, fmt: Formatter):
        self._stream = stream
        self._chunks = stream_chunks(stream, fmt)

    def __aiter__(self) -> "EventStreamBody":
        return self

    async def __anext__(self) -> bytes:
        return await self._chunks.__anext__()

    async def aclose(self) -> None:
        try:
            await self._chunks.aclose()
        finally:
            await self._stream.aclose()


def _error_event(reason: str | None, message: str | None) -> dict:
    if reason == "cancelled":
        return error_body(503, message or "the request was cancelled", code="request_aborted")
    return error_body(500, message or "the request failed inside the engine", code="internal_error")

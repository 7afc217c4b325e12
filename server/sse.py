"""Server-sent events: one request's engine events as OpenAI stream chunks.

The order is what OpenAI clients expect: (chat) a first chunk with the role
per choice, one chunk per token that shows something (tagged with its
choice's index; the n choices interleave as they are generated), a chunk
with an empty delta and the finish_reason per choice, a usage chunk with
empty choices when the client asked for it, then `data: [DONE]`. While
nothing arrives for `ping_interval` seconds (queued, or a long prefill) an
SSE comment line `: ping` keeps proxies and clients from timing out. A
request that ends without a finish reason (the server shutting down, an
engine failure) ends with an OpenAI error event instead, then `[DONE]`, so
clients see why their answer stopped.

Leaving the generator early (the client disconnected and Quart cancelled
the response) closes the ChoiceSet, which cancels its requests: their slots
free within one engine step.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

from .choices import PING, ChoiceSet
from .errors import error_body
from .responses import Formatter

DONE = b"data: [DONE]\n\n"
HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
CONTENT_TYPE = "text/event-stream; charset=utf-8"
FINISH_REASONS = ("stop", "length")


def sse(data: dict) -> bytes:
    return b"data: " + json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"


PING_COMMENT = b": ping\n\n"


async def stream_chunks(choices: ChoiceSet, fmt: Formatter, ping_interval: float | None = None
                        ) -> AsyncIterator[bytes]:
    try:
        for chunk in fmt.opening_chunks():
            yield sse(chunk)
        running = set(range(choices.n))
        prompt_tokens = completion_tokens = cached_tokens = 0
        while running:
            item = await choices.next(ping_interval)
            if item is PING:
                yield PING_COMMENT
                continue
            if item is None:
                yield sse(_error_event("error", "the request ended without a final event"))
                break
            index, event = item
            if event.final and event.finish_reason not in FINISH_REASONS:
                yield sse(_error_event(event.finish_reason, event.error))
                break
            chunk = fmt.delta_chunk(event, index)
            if chunk is not None:
                yield sse(chunk)
            if event.final:
                yield sse(fmt.finish_chunk(event.finish_reason, index))
                running.discard(index)
                if index == 0:
                    prompt_tokens, cached_tokens = event.prompt_tokens, event.cached_tokens
                completion_tokens += event.completion_tokens
        if not running and fmt.options.include_usage:
            yield sse(fmt.usage_chunk(prompt_tokens, completion_tokens, cached_tokens))
        yield DONE
    finally:
        await choices.aclose()


class EventStreamBody:
    """The response body of a streamed request. Closing it cancels the request even when the
    body was never iterated (the client left before the first chunk was sent)."""

    def __init__(self, stream: ChoiceSet, fmt: Formatter, ping_interval: float | None = None):
        self._stream = stream
        self._chunks = stream_chunks(stream, fmt, ping_interval)

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

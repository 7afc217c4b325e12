"""RequestStream: what a caller holds for one submitted request.

An async iterator of Events (one per generated token, the last one carrying
the finish reason and usage). Leaving it early, or calling cancel(), cancels
the request: the engine frees its slot within one step.
"""

from __future__ import annotations

from .output import Event


class RequestStream:
    def __init__(self, engine, request, receive):
        self.engine = engine
        self.request = request
        self._receive = receive

    @property
    def request_id(self) -> str:
        return self.request.request_id

    def cancel(self) -> None:
        self.engine.cancel(self.request)

    def __aiter__(self):
        return self

    async def __anext__(self) -> Event:
        try:
            return await self._receive.receive()
        except Exception as exc:   # EndOfStream / ClosedResourceError: the request is over
            import anyio

            if isinstance(exc, (anyio.EndOfStream, anyio.ClosedResourceError)):
                raise StopAsyncIteration from None
            raise

    async def collect(self) -> "Completion":
        """Waits for the whole request and returns its tokens, text and finish reason."""
        completion = Completion(self.request_id)
        async for event in self:
            completion.add(event)
        return completion

    async def aclose(self) -> None:
        if not self.request.finished:
            self.cancel()
        self._receive.close()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.aclose()


class Completion:
    """A finished request's result, accumulated from its events."""

    def __init__(self, request_id: str):
        self.request_id = request_id
        self.token_ids: list[int] = []
        self.text = ""
        self.logprobs: list = []
        self.finish_reason: str | None = None
        self.error: str | None = None
        self.prompt_tokens = 0
        self.cached_tokens = 0
        self.completion_tokens = 0

    def add(self, event: Event) -> None:
        self.token_ids += event.token_ids
        self.text += event.text
        if event.logprobs:
            self.logprobs += event.logprobs
        if event.final:
            self.finish_reason = event.finish_reason
            self.error = event.error
            self.prompt_tokens = event.prompt_tokens
            self.cached_tokens = event.cached_tokens
            self.completion_tokens = event.completion_tokens

    def __repr__(self):
        return f"Completion({self.request_id}, {self.finish_reason}, {self.text!r})"

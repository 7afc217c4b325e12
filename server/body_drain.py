"""Keeping a connection reusable when a response starts before its request's body was read.

Quart answers some requests without reading their body (a 404 for an unknown
route, a 405, a 401 from the API key check), and its handler may finish
while the body's bytes are still on their way. Hypercorn ends the exchange
when the response's last byte is sent; if the request is unfinished then,
it closes the connection, though the response never said
`Connection: close`. A client that reuses its keep-alive connection (httpx,
requests, the OpenAI SDKs all do) then fails its next request with "server
disconnected without sending a response".

So when a response starts before the request body's last chunk (or a
disconnect) was received, this middleware first reads the rest of the body
and throws it away — at most DRAIN_BYTES bytes, for at most DRAIN_S seconds
— and then lets the response go: the exchange ends complete and the
connection stays open. A body too large or too slow for that gets
`Connection: close` on its response instead, so the client knows. Requests
whose body the app read (every generation request) pay one flag check.
"""

from __future__ import annotations

import anyio

DRAIN_BYTES = 1 << 20
DRAIN_S = 2.0


class DrainBody:
    """ASGI middleware: see the module docstring."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope.get("type") != "http":
            return await self.app(scope, receive, send)
        state = _BodyState()

        async def watched_receive():
            message = await receive()
            state.saw(message)
            return message

        async def guarded_send(message):
            if message.get("type") == "http.response.start" and not state.done:
                if not await state.drain(watched_receive):
                    message = {**message, "headers": [*message.get("headers", ()), (b"connection", b"close")]}
            return await send(message)

        return await self.app(scope, watched_receive, guarded_send)


class _BodyState:
    def __init__(self) -> None:
        self.done = False                  # the body's last chunk, or a disconnect, was received
        self._event: anyio.Event | None = None
        self._read = 0

    def saw(self, message: dict) -> None:
        if message.get("type") == "http.request":
            self._read += len(message.get("body", b""))
            if message.get("more_body", False):
                return
        self.done = True
        if self._event is not None:
            self._event.set()

    async def drain(self, receive) -> bool:
        """Reads the body's rest (the app's own reader may take chunks meanwhile); whether it was all read."""
        self._event = anyio.Event()
        limit = self._read + DRAIN_BYTES

        async def pull() -> None:
            while not self.done and self._read <= limit:
                await receive()            # watched: saw() counts the chunk and ends the wait on the last
            self._event.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(pull)
            with anyio.move_on_after(DRAIN_S):
                await self._event.wait()
            tg.cancel_scope.cancel()
        return self.done

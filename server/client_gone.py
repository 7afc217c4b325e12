"""Knowing, without task cancellation, that a client has gone: an ASGI wrapper that watches receive().

Why not rely on Quart: Quart learns of a disconnect (hypercorn's
`http.disconnect`, sent on FIN, half-close or RST) in a receiver task and
cancels the handler task. When the client closes right after its request,
the body's last chunk and the disconnect arrive in the same loop iteration,
and the handler is just then inside `asyncio.wait_for(request.body)`
(Request.get_data); on Python 3.11 wait_for returns the finished result and
swallows the cancellation, so the handler runs on and its request decodes to
max_tokens for nobody. Here the disconnect is recorded on the request's ASGI
scope, the routes register what to do about it (cancel the engine request),
and that runs whatever the handler task is doing.

The same cancellation can also end a handler before its request reached the
engine (say, while the prompt was being tokenized) and before any response
was made. Such a request would be counted under no outcome at all, so the
middleware reports it (`on_unaccounted`) unless the route took charge of it
(`accounted`: submitted to the engine, which counts its outcome, or counted
itself) or a response started (the app's after-request hook counted that).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

log = logging.getLogger("strata.server")

SCOPE_KEY = "strata.client"


class ClientConnection:
    """One HTTP request's client: `gone` once it disconnected; callbacks run at that moment."""

    def __init__(self) -> None:
        self.gone = False
        self.accounted = False       # the route counted the request's outcome, or handed it to the engine
        self._callbacks: list[Callable[[], None]] = []

    def on_gone(self, callback: Callable[[], None]) -> None:
        """Runs callback when the client disconnects, or now if it already has."""
        if self.gone:
            callback()
        else:
            self._callbacks.append(callback)

    def discard(self, callback: Callable[[], None]) -> None:
        try:
            self._callbacks.remove(callback)
        except ValueError:
            pass

    def mark_gone(self) -> None:
        if self.gone:
            return
        self.gone = True
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            try:
                callback()
            except Exception:        # one failing callback must not keep the others from running
                log.exception("a disconnect callback failed")


class DisconnectWatch:
    """ASGI middleware: puts a ClientConnection on each HTTP scope and marks it on http.disconnect.

    on_unaccounted(): called for a request on `paths` whose client left and that ended with no response
    started and not `accounted` (see the module docstring)."""

    def __init__(self, app, paths: frozenset[str] = frozenset(),
                 on_unaccounted: Callable[[], None] | None = None) -> None:
        self.app, self.paths, self.on_unaccounted = app, paths, on_unaccounted

    async def __call__(self, scope, receive, send):
        if scope.get("type") != "http":
            return await self.app(scope, receive, send)
        client = ClientConnection()
        scope[SCOPE_KEY] = client

        async def watched_receive():
            message = await receive()
            if message.get("type") == "http.disconnect":
                client.mark_gone()
            return message

        async def watched_send(message):
            if message.get("type") == "http.response.start":
                client.accounted = True
            return await send(message)

        try:
            return await self.app(scope, watched_receive, watched_send)
        finally:
            left = client.gone
            client.mark_gone()       # the exchange is over either way; nothing may outlive it
            if left and not client.accounted and self.on_unaccounted is not None and scope.get("path") in self.paths:
                self.on_unaccounted()


def client_of(scope) -> ClientConnection:
    """The request's ClientConnection (a fresh one when the app runs without the middleware, as in unit tests)."""
    client = scope.get(SCOPE_KEY)
    if client is None:
        client = scope[SCOPE_KEY] = ClientConnection()
    return client

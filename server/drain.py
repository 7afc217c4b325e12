"""Draining: on SIGTERM stop admitting, let the requests in flight finish, then stop — within a bound.

A replica behind a load balancer leaves the rotation by failing its health
check: from the first signal on, GET /health answers 503 and every new
request gets 503 with Retry-After (the balancer retries it on another
replica), while the requests already admitted run to their natural end.
Once none is left, or after --drain-timeout seconds, or at a second signal,
the server shuts down as before: whatever still runs ends with a final event
and `[DONE]` (ServerState.begin_shutdown), then hypercorn closes the
connections. docs/scaling.md describes the whole path with the balancer.

"In flight" is counted at the ASGI boundary, from a generation request's
arrival to its response's last byte: that covers a request still being
tokenized (not yet in the engine's queue) and a stream whose last events are
still being written after the engine finished it.
"""

from __future__ import annotations

import asyncio
import logging

log = logging.getLogger("strata.server")

POLL_S = 0.05


class InFlight:
    """ASGI middleware: counts the HTTP requests on `paths` from arrival to the end of their response."""

    def __init__(self, app, paths: frozenset[str]) -> None:
        self.app, self.paths = app, paths
        self.count = 0

    async def __call__(self, scope, receive, send):
        if scope.get("type") != "http" or scope.get("path") not in self.paths:
            return await self.app(scope, receive, send)
        self.count += 1
        try:
            return await self.app(scope, receive, send)
        finally:
            self.count -= 1


async def drain(state, timeout_s: float, now: asyncio.Event) -> int:
    """Refuses new work and waits for the work in flight; returns how many requests were still running.

    Waits until no generation request is in flight and the engine is idle, `timeout_s` seconds have
    passed, or `now` is set (a second signal). state.draining is what /health and the routes read.
    """
    state.draining = True
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(timeout_s, 0.0)
    running = _running(state)
    if running and timeout_s > 0:
        log.info("draining: %d request(s) in flight; new ones get 503 (up to %gs; send the signal again to end "
                 "them now)", running, timeout_s)
    while running and not now.is_set() and loop.time() < deadline:
        try:
            await asyncio.wait_for(now.wait(), min(POLL_S, max(deadline - loop.time(), 0.0)))
        except asyncio.TimeoutError:
            pass
        running = _running(state)
    if running:
        log.info("drain ended with %d request(s) in flight: ending them", running)
    elif timeout_s > 0:
        log.info("drained: no request in flight")
    return running


def _running(state) -> int:
    scheduler = state.engine.scheduler
    in_flight = state.in_flight.count if state.in_flight is not None else 0
    return max(in_flight, scheduler.busy_slots + scheduler.queue_len)

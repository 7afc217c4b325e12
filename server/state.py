"""ServerState: the engine, the settings, and the engine loop's life inside the app.

The engine loop runs as a background task of the app from before serving
until shutdown. `begin_shutdown` refuses new work and stops the loop, which
gives every stream in flight its final event (Engine.run's `finally`), so
hypercorn's graceful close finds the connections already finishing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

import anyio
from quart import current_app

from strata.engine.engine import Engine

from .drain import InFlight
from .input_bounds import InputBounds
from .request_workers import RequestWorkers
from .settings import ServerSettings

log = logging.getLogger("strata.server")


@dataclass
class ServerState:
    engine: Engine
    settings: ServerSettings
    started_at: int = field(default_factory=lambda: int(time.time()))
    draining: bool = False
    engine_task: asyncio.Task | None = None
    _engine_scope: anyio.CancelScope | None = None
    outcomes: dict[str, int] = field(default_factory=dict)   # requests refused before the engine saw them
    responses: dict[int, int] = field(default_factory=dict)  # every HTTP response of the app by status
    workers: RequestWorkers = field(default_factory=RequestWorkers)   # request CPU work off the event loop
    bounds: InputBounds | None = None                        # size bounds from the context (create_app)
    openapi: dict | None = None                              # GET /openapi.json, built on first use
    in_flight: InFlight | None = None                        # generation requests until their last byte (drain)

    @property
    def engine_running(self) -> bool:
        return self.engine_task is not None and not self.engine_task.done()

    def count_outcome(self, outcome: str) -> None:
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1

    def count_response(self, status: int) -> None:
        self.responses[status] = self.responses.get(status, 0) + 1

    def start_engine(self) -> None:
        self._engine_scope = anyio.CancelScope()
        self.engine_task = asyncio.create_task(self._run_engine(self._engine_scope), name="strata-engine")
        self.engine_task.add_done_callback(self._engine_stopped)

    async def _run_engine(self, scope: anyio.CancelScope) -> None:
        # Stopped through an anyio cancel scope, not Task.cancel(): anyio then lets a step running in
        # the worker thread finish first, so the device is never closed under it.
        with scope:
            await self.engine.run()

    def _engine_stopped(self, task: asyncio.Task) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("the engine loop stopped", exc_info=task.exception())

    async def begin_shutdown(self) -> None:
        """New requests get 503 from now on; requests in flight end with a final event."""
        self.draining = True
        task = self.engine_task
        if task is not None and not task.done():
            self._engine_scope.cancel()
            try:
                await task
            except Exception:
                pass          # already logged by _engine_stopped


def current_state() -> ServerState:
    return current_app.extensions["strata"]

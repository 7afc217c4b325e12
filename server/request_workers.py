"""RequestWorkers: the bounded thread pool for a request's CPU work, so that it never runs on the event loop.

Parsing a large body, rendering a chat template, tokenizing and decoding
images take milliseconds to seconds; on the event loop they would stall
every other stream and /health for that long. Here at most `num_threads`
such jobs run at once (anyio worker threads; the tokenizer and the image
decoders release the GIL for their heavy parts), and at most `max_waiting`
requests wait for a thread; past that a request gets 503 with Retry-After,
as a full engine queue does, instead of piling up bodies in memory.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from functools import partial
from typing import Any

import anyio

from .errors import APIError

DEFAULT_THREADS = max(1, min(4, os.cpu_count() or 1))
DEFAULT_MAX_WAITING = 256


class WorkersBusy(Exception):
    """Too many requests are already waiting for a worker thread."""


class RequestWorkers:
    def __init__(self, num_threads: int = DEFAULT_THREADS, max_waiting: int = DEFAULT_MAX_WAITING):
        if num_threads < 1 or max_waiting < 0:
            raise ValueError("RequestWorkers: num_threads must be at least 1 and max_waiting at least 0")
        self.num_threads = num_threads
        self.max_waiting = max_waiting
        self.num_pending = 0                 # running or waiting
        self._limiter: anyio.CapacityLimiter | None = None

    async def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """fn(*args, **kwargs) in a worker thread; WorkersBusy when the wait is full."""
        if self.num_pending >= self.num_threads + self.max_waiting:
            raise WorkersBusy(f"{self.num_pending} requests are being prepared or waiting for a worker thread")
        if self._limiter is None:            # created inside the running loop
            self._limiter = anyio.CapacityLimiter(self.num_threads)
        self.num_pending += 1
        try:
            return await anyio.to_thread.run_sync(partial(fn, *args, **kwargs), limiter=self._limiter)
        finally:
            self.num_pending -= 1


@contextlib.contextmanager
def workers_or_503(state):
    """WorkersBusy inside becomes a 503 with Retry-After, counted as rejected."""
    try:
        yield
    except WorkersBusy as exc:
        state.count_outcome("rejected")
        raise APIError(503, f"the server is busy preparing other requests ({exc}); retry after a moment",
                       code="overloaded", headers={"Retry-After": str(state.settings.retry_after_s)}) from None

"""Giving memory back to the system after a request that needed a lot of it.

glibc keeps freed memory in its heaps (and raises its mmap threshold after
large frees, so later large blocks land there too): after one request with
big images or a big body, the server's RSS would stay at that high-water
mark for good. malloc_trim(0) returns the free pages of every arena. It runs
in a worker thread after the response was sent, at most once per
MIN_INTERVAL_S; elsewhere than glibc it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading
import time

import anyio

LARGE_REQUEST_BYTES = 1024 * 1024       # bodies past this (or requests with images) trim afterwards
MIN_INTERVAL_S = 0.5
SCOPE_KEY = "strata.trim_memory"

_lock = threading.Lock()
_last = 0.0


def _load_trim():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc.malloc_trim
    except (OSError, AttributeError):
        return None


_malloc_trim = _load_trim()


def available() -> bool:
    return _malloc_trim is not None


def trim() -> bool:
    """Returns free heap pages to the system (blocking; milliseconds); False when skipped."""
    global _last
    if _malloc_trim is None:
        return False
    with _lock:
        now = time.monotonic()
        if now - _last < MIN_INTERVAL_S:
            return False
        _last = now
        _malloc_trim(0)
    return True


class ReturnMemory:
    """ASGI middleware: after a request marked large (json_body, image requests), trim in a worker thread."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send):
        try:
            return await self.app(scope, receive, send)
        finally:
            if scope.get(SCOPE_KEY):
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(trim)

"""Freed memory goes back to the system: heap pages that glibc would keep after a large request (freed
blocks below a live one, where its automatic trimming at the heap's top can't reach) are returned by
server.memory.trim(), and the process's RSS falls (glibc only)."""

from __future__ import annotations

import time

import pytest

from server import memory
from strata.vision.media import MAX_CONCURRENT_DECODES


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


@pytest.mark.skipif(not memory.available(), reason="malloc_trim is glibc's")
def test_trim_returns_freed_heap_pages():
    time.sleep(memory.MIN_INTERVAL_S)
    memory.trim()
    start = _rss_mb()
    blocks = [bytearray(b"x" * 100_000) for _ in range(3000)]     # 300 MB in blocks under the mmap threshold
    pin = bytearray(b"y" * 100_000)                                 # a live block above them on the heap
    del blocks
    kept = _rss_mb()
    time.sleep(memory.MIN_INTERVAL_S)
    assert memory.trim()
    after = _rss_mb()
    del pin
    assert kept - start > 200, (start, kept)          # glibc kept the freed pages...
    assert after < start + 50, (start, kept, after)   # ...until trim gave them back


def test_trim_is_rate_limited():
    time.sleep(memory.MIN_INTERVAL_S)
    assert memory.trim() is memory.available()
    assert memory.trim() is False                     # a burst of large requests trims once


def test_decodes_are_bounded_process_wide():
    assert 1 <= MAX_CONCURRENT_DECODES <= 4

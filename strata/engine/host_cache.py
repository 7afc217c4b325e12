"""HostCache: the host-memory tier of the prefix cache (`--host-cache GiB`, docs/kv_pool.md).

When the device pool evicts a cached page (kv_pool.py), its bytes are copied
here, keyed by the same hash chain, token ids and salt (page_salt.py),
instead of being lost.
Memory comes from libstrata host buffers: page-locked on CUDA (the copies
run at full bus speed), aligned plain memory on the CPU. At most
`limit_bytes` of pages are held; past that the least recently spilled page
is dropped. A prefix hit that runs into pages held here takes them back out
(`take`) and, once admission has found free device pages for them, copies
each into its page (`restore`, libstrata's write_page) before the request's
first prefill step, on the same stream.

A slot-file save (slot_files.py) may read a page here while the engine
goes on: it `hold`s the page, and a page that leaves the tier while held
(dropped, restored, discarded) keeps its buffer until the last `unhold`.

The bytes travel verbatim both ways, so a page that comes back holds the
bits it left with: the K/V a prefill of its tokens writes. A hit from this
tier is therefore exact like a device hit (docs/kv_pool.md, "Why a hit is
bit-identical to a miss").
"""

from __future__ import annotations

import collections
from dataclasses import dataclass

import logging

from .. import _ffi

log = logging.getLogger("strata.engine")


@dataclass(eq=False)
class HostPage:
    tokens: tuple[int, ...]        # the page's PAGE_CELLS token ids (compared on a hit, as on the device)
    buffer: _ffi.HostBuffer        # the page's bytes, page_bytes of them
    salt: bytes | None = None      # its salt (page_salt.py), compared on a hit like the ids
    holds: int = 0                 # saves reading the buffer now: it is not reused before they end
    gone: bool = False             # left the tier while held: the buffer is reused at the last unhold


class HostCache:
    def __init__(self, ctx: _ffi.Context, slots: _ffi.Slots, limit_bytes: int):
        self.ctx, self.slots = ctx, slots
        self.page_bytes = slots.page_bytes()
        self.limit_bytes = int(limit_bytes)
        self.capacity = self.limit_bytes // self.page_bytes if self.page_bytes else 0   # pages
        self.pages: collections.OrderedDict[bytes, HostPage] = collections.OrderedDict()   # oldest first
        self._spare: list[_ffi.HostBuffer] = []    # buffers of dropped or restored pages, reused
        self.num_spilled = 0       # pages copied in from the device
        self.num_dropped = 0       # pages dropped to stay within the limit
        self.num_restored = 0      # pages copied back for a hit
        self.restored_tokens = 0   # their tokens (prompt tokens served from this tier)

    @property
    def num_bytes(self) -> int:
        return len(self.pages) * self.page_bytes

    def get(self, key: bytes) -> HostPage | None:
        return self.pages.get(key)

    def spill(self, key: bytes, tokens: tuple[int, ...], page: int, salt: bytes | None = None) -> None:
        """Copies device page `page` (holding `tokens`, salted `salt`, under `key`) here, dropping the
        oldest to fit."""
        if self.capacity == 0:
            return
        if key in self.pages:          # same key and tokens: the same bits (chunk invariance)
            self.pages.move_to_end(key)
            return
        while len(self.pages) >= self.capacity:
            _, old = self.pages.popitem(last=False)
            self._recycle(old)
            self.num_dropped += 1
        try:
            buffer = self._spare.pop() if self._spare else _ffi.HostBuffer(self.ctx, self.page_bytes)
        except Exception:                  # host memory refused (e.g. page-locking): the page is just dropped
            log.exception("host cache: allocating a page buffer failed; page dropped")
            return
        try:
            self.slots.read_page(page, out=buffer.array)      # waits for queued work first
        except Exception:
            log.exception("host cache: reading page %d failed; page dropped", page)
            self._spare.append(buffer)
            return
        self.pages[key] = HostPage(tokens, buffer, salt)
        self.num_spilled += 1

    def take(self, key: bytes) -> HostPage:
        """Removes a page a hit will bring back (so no later spill can drop it first)."""
        return self.pages.pop(key)

    def restore(self, entry: HostPage, page: int) -> bool:
        """Copies a taken page's bytes into device page `page` (its buffer is reused after); False when
        the copy failed (logged): the caller computes that part of the prompt instead."""
        try:
            self.slots.write_page(page, entry.buffer.array)
        except Exception:
            log.exception("host cache: writing page %d back failed; its prefix is computed instead", page)
            return False
        finally:
            self._recycle(entry)
        self.num_restored += 1
        self.restored_tokens += len(entry.tokens)
        return True

    def forget(self, entry: HostPage) -> None:
        """A taken page that will not be restored after all: its buffer is reused."""
        self._recycle(entry)

    def discard(self, key: bytes) -> None:
        """Drops a page the device cache holds again (computed anew), so it is never held twice."""
        entry = self.pages.pop(key, None)
        if entry is not None:
            self._recycle(entry)

    def hold(self, entry: HostPage) -> None:
        """Keeps the page's buffer from reuse (a slot-file save reads it) until `unhold`."""
        entry.holds += 1

    def unhold(self, entry: HostPage) -> None:
        entry.holds -= 1
        if entry.holds == 0 and entry.gone:
            entry.gone = False
            self._spare.append(entry.buffer)

    def _recycle(self, entry: HostPage) -> None:
        """A page left the tier: its buffer is reused now, or after the last hold ends."""
        if entry.holds:
            entry.gone = True
        else:
            self._spare.append(entry.buffer)

    def clear(self) -> None:
        while self.pages:
            self._recycle(self.pages.popitem()[1])

    def close(self) -> None:
        self.clear()
        for buffer in self._spare:
            buffer.close()
        self._spare = []

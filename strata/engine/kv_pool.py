"""KvPool: which KV pages each running request holds, and the exact prefix cache.

Pure bookkeeping (no device): the runner maps the pages handed out here into
the slot's page table (libstrata's paged pool, docs/kv_pool.md). The policy:

- Admission reserves a request's worst case, ceil(min(prompt + max_tokens +
  drafts, ctx) / 64) pages, less the cached prefix it maps, so a running
  request never needs a page it cannot get. When the pool cannot cover the
  request now it waits in the queue; one that could never fit is refused at
  submission (`check_fits`).
- A cached page is a full page of 64 tokens whose K/V its request computed,
  keyed by a hash chain over the token ids of every page up to it (so a key
  names the whole prefix) and, for a page that is not plain text, its salt:
  a digest of its positions and image embedding rows (page_salt.py). The ids
  and the salt are kept beside the key and compared on a hit, so a hash
  collision can never map the wrong K/V.
- A hit maps only pages wholly below the prompt's last token: that token is
  always computed again (its logits give the first sampled token), and no
  request ever writes a page it shares.
- Pages no running request holds stay cached until the pool needs them;
  the least recently used go first. Requests with caching off neither use
  nor fill the cache.
- With a host tier (`host`, host_cache.py) an evicted cached page is copied
  to host memory first; a hit may continue into pages held there, which
  admission copies back into fresh device pages (exact: the same bytes).

Because prefill is chunk-invariant (docs/design.md, invariant 1), a cached
page holds exactly the bits a fresh prefill of the same prefix would write,
so a hit gives the same tokens as a miss.
"""

from __future__ import annotations

import collections
import hashlib
from dataclasses import dataclass

from ..config import PAGE_CELLS
from .page_salt import page_salt
from .sampling import InvalidRequest


@dataclass(eq=False)
class _Cached:
    page: int
    tokens: tuple[int, ...]     # the page's PAGE_CELLS token ids
    refs: int = 0               # running requests that map it
    salt: bytes | None = None   # what else decides its K/V (page_salt.py); None for plain text


def _chain(parent: bytes, tokens, salt: bytes | None = None) -> bytes:
    data = parent + b"|" + ",".join(map(str, tokens)).encode()
    if salt is not None:        # a plain text page keeps the key it had before salts existed
        data += b"#" + salt
    return hashlib.blake2b(data, digest_size=16).digest()


class KvPool:
    def __init__(self, n_pages: int, ctx: int, extra_cells: int = 0, cache: bool = True, host=None,
                 axes: tuple[int, ...] = (0,)):
        """extra_cells: cells a request may write past prompt + max_tokens (speculative drafts);
        host: a HostCache (host_cache.py) that evicted cached pages spill to, or None;
        axes: the position axes the model's rope reads (page_salt.rope_axes)."""
        self.n_pages, self.ctx, self.extra_cells, self.cache_on = n_pages, ctx, extra_cells, cache
        self.axes = tuple(axes)
        self.host = host if cache else None
        self.free: list[int] = list(range(n_pages - 1, -1, -1))      # a stack: page 0 first
        self.cached: dict[bytes, _Cached] = {}
        self.idle: collections.OrderedDict[bytes, _Cached] = collections.OrderedDict()  # refs == 0, LRU first
        self.num_cached_tokens = 0     # prompt tokens served from the cache (metrics)
        self.num_hits = 0              # requests that mapped at least one cached page

    # ------------------------------------------------------------ sizes

    def pages_for(self, num_prompt: int, max_tokens: int) -> int:
        cells = min(num_prompt + max_tokens + self.extra_cells, self.ctx)
        return -(-cells // PAGE_CELLS)

    def check_fits(self, num_prompt: int, max_tokens: int) -> None:
        """InvalidRequest (400) when the request could not be admitted even into an empty pool."""
        need = self.pages_for(num_prompt, max_tokens)
        if need > self.n_pages:
            room = self.n_pages * PAGE_CELLS - self.extra_cells - num_prompt
            raise InvalidRequest(
                f"this request may need {need} KV pages ({num_prompt} prompt tokens + max_tokens {max_tokens}, "
                f"{PAGE_CELLS} tokens a page) but the KV pool holds {self.n_pages} (--kv-pages); "
                + (f"send max_tokens <= {room}" if room >= 1 else "send a shorter prompt"),
                "max_tokens", code="context_length_exceeded")

    @property
    def num_free(self) -> int:
        """Pages an admission may take now: never used, or cached by no running request."""
        return len(self.free) + len(self.idle)

    # ------------------------------------------------------------ admission and release

    def _caches(self, request) -> bool:
        return self.cache_on and getattr(request.params, "cache_prompt", True)

    def salt(self, request, index: int) -> bytes | None:
        """The salt of the request's page `index` (page_salt.py): None for a plain text page."""
        return page_salt(request, index, self.axes)

    def _lookup(self, request) -> list[tuple[bytes, object]]:
        """The cached prefix: (key, _Cached on the device | HostPage in the host tier) per page."""
        hits: list[tuple[bytes, object]] = []
        if not self._caches(request):
            return hits
        key, ids = b"", request.prompt_ids
        for i in range((request.num_prompt - 1) // PAGE_CELLS):
            tokens, salt = tuple(ids[i * PAGE_CELLS:(i + 1) * PAGE_CELLS]), self.salt(request, i)
            key = _chain(key, tokens, salt)
            entry = self.cached.get(key)
            if entry is None and self.host is not None:
                entry = self.host.get(key)
            if entry is None or entry.tokens != tokens or entry.salt != salt:
                break
            hits.append((key, entry))
        return hits

    def admit(self, request) -> bool:
        """Gives the request its pages (request.kv_pages, cached prefix first) and skips its cached
        prompt tokens (num_computed); False, changing nothing, when the pool cannot cover it now."""
        hits = self._lookup(request)
        on_device = [(k, e) for k, e in hits if isinstance(e, _Cached)]
        need = self.pages_for(request.num_prompt, request.params.max_tokens) - len(on_device)
        taken_idle = sum(1 for _, e in on_device if e.refs == 0)
        if need > len(self.free) + len(self.idle) - taken_idle:
            return False
        for key, entry in on_device:
            if entry.refs == 0:
                del self.idle[key]
            entry.refs += 1
        # Host-held hits leave the host tier before any page is evicted below (an eviction spills and
        # may drop the oldest host page), then come back into fresh pages, cached and held again.
        hits = [(k, e if isinstance(e, _Cached) else self.host.take(k)) for k, e in hits]
        pages = []
        for i, (key, entry) in enumerate(hits):      # in page order: the two tiers may interleave
            if not isinstance(entry, _Cached):
                page = self.free.pop() if self.free else self._evict()
                if not self.host.restore(entry, page):
                    self.free.append(page)
                    hits = self._cut(hits, i)        # the prefix ends here: the rest is computed
                    break
                self.cached[key] = _Cached(page, entry.tokens, refs=1, salt=entry.salt)
            pages.append(self.cached[key].page)
        need = self.pages_for(request.num_prompt, request.params.max_tokens) - len(pages)
        for _ in range(need):
            pages.append(self.free.pop() if self.free else self._evict())
        request.kv_pages = pages
        request.kv_keys = [k for k, _ in hits]      # grows as share_prompt caches its own pages
        request.num_cached = len(hits) * PAGE_CELLS
        request.num_computed = request.num_cached
        if hits:
            self.num_hits += 1
            self.num_cached_tokens += request.num_cached
        return True

    def _cut(self, hits, n: int):
        """hits[:n], after giving back hits[n + 1:] (hits[n] failed; restore took its buffer back):
        device entries unheld (a cut frees at least as many pages as it adds to the request's need),
        host entries' buffers to the host tier."""
        for key, entry in hits[n + 1:]:
            if isinstance(entry, _Cached):
                self._unref(key, entry)
            else:
                self.host.forget(entry)
        return hits[:n]

    def share_prompt(self, request) -> None:
        """Puts the full prompt pages the request has computed so far into the cache while it runs (a
        long system prompt is shared by requests that overlap in time). It never writes those cells
        again. Stops at a page whose prefix another request cached first (this one keeps its copy)."""
        if request.kv_pages is None or not self._caches(request):
            return
        keys, ids = request.kv_keys, request.prompt_ids
        key = keys[-1] if keys else b""
        for i in range(len(keys), min(request.num_computed, request.num_prompt) // PAGE_CELLS):
            tokens, salt = tuple(ids[i * PAGE_CELLS:(i + 1) * PAGE_CELLS]), self.salt(request, i)
            key = _chain(key, tokens, salt)
            if key in self.cached:
                return
            self.cached[key] = _Cached(request.kv_pages[i], tokens, refs=1, salt=salt)
            self._drop_host(key)
            keys.append(key)

    def _evict(self, spill: bool = True) -> int:
        key, entry = self.idle.popitem(last=False)
        del self.cached[key]
        if spill and self.host is not None:
            self.host.spill(key, entry.tokens, entry.page, entry.salt)
        return entry.page

    def _drop_host(self, key: bytes) -> None:
        if self.host is not None:
            self.host.discard(key)

    def release(self, request, keep: bool = True) -> None:
        """Returns the request's pages: full pages of computed tokens join the cache (when `keep` and the
        request caches), the rest are free again."""
        pages = getattr(request, "kv_pages", None)
        if pages is None:
            return
        request.kv_pages = None
        keys = request.kv_keys
        tokens = request.prompt_ids + request.output_ids
        n_full = min(request.num_computed, len(tokens)) // PAGE_CELLS if keep and self._caches(request) else 0
        key = b""
        for i, page in enumerate(pages):
            if i < len(keys):                        # a page this request mapped from or put in the cache
                key = keys[i]
                self._unref(key, self.cached[key])
                continue
            if i < n_full:
                chunk, salt = tuple(tokens[i * PAGE_CELLS:(i + 1) * PAGE_CELLS]), self.salt(request, i)
                key = _chain(key, chunk, salt)
                if key not in self.cached:
                    entry = _Cached(page, chunk, salt=salt)
                    self.cached[key] = entry
                    self.idle[key] = entry
                    self._drop_host(key)
                    continue
            self.free.append(page)

    def _unref(self, key: bytes, entry: _Cached) -> None:
        entry.refs -= 1
        if entry.refs == 0:
            self.idle[key] = entry       # most recently used last

    # ------------------------------------------------------------ slot files (slot_files.py)

    def salts(self, request, n_pages: int) -> list[bytes | None]:
        return [self.salt(request, i) for i in range(n_pages)]

    def chain(self, tokens: list[int], salts=None, host: bool = False) -> list[tuple[bytes, object]]:
        """The cached entries of the longest prefix of `tokens` in full pages (no last-token cap); salts[i]
        is page i's salt (None: plain text pages). With `host`, the prefix may run on into pages held in
        the host tier (their entries are HostPages)."""
        out: list[tuple[bytes, object]] = []
        key = b""
        for i in range(len(tokens) // PAGE_CELLS):
            chunk, salt = tuple(tokens[i * PAGE_CELLS:(i + 1) * PAGE_CELLS]), salts[i] if salts else None
            key = _chain(key, chunk, salt)
            entry = self.cached.get(key)
            if entry is None and host and self.host is not None:
                entry = self.host.get(key)
            if entry is None or entry.tokens != chunk or entry.salt != salt:
                break
            out.append((key, entry))
        return out

    def hold(self, entries) -> None:
        """Keeps entries of `chain` from eviction (a save reads them) until `unhold`; a host-tier page
        may still leave its tier meanwhile, but its buffer is not reused before the unhold."""
        for key, entry in entries:
            if not isinstance(entry, _Cached):
                self.host.hold(entry)
                continue
            if entry.refs == 0:
                del self.idle[key]
            entry.refs += 1

    def unhold(self, entries) -> None:
        for key, entry in entries:
            if isinstance(entry, _Cached):
                self._unref(key, entry)
            else:
                self.host.unhold(entry)

    def take(self, n: int) -> list[int] | None:
        """n pages out of the pool's hands (free first, then the least recently used cached), or None."""
        if n > self.num_free:
            return None
        return [self.free.pop() if self.free else self._evict() for _ in range(n)]

    def give_back(self, pages: list[int]) -> None:
        self.free.extend(pages)

    def insert(self, tokens: list[int], pages: list[int], first: int = 0, salts=None) -> int:
        """Puts pages holding the K/V of full pages first, first + 1, ... of `tokens` (page i salted with
        salts[i], none when salts is None) into the cache; a page whose prefix is cached already is freed.
        Returns how many pages joined the cache."""
        key, added = b"", 0
        for i in range(first + len(pages)):
            chunk, salt = tuple(tokens[i * PAGE_CELLS:(i + 1) * PAGE_CELLS]), salts[i] if salts else None
            key = _chain(key, chunk, salt)
            if i < first:
                continue
            page = pages[i - first]
            if key in self.cached:
                self.free.append(page)
                continue
            entry = _Cached(page, chunk, salt=salt)
            self.cached[key] = entry
            self.idle[key] = entry
            self._drop_host(key)
            added += 1
        return added

    def clear(self) -> int:
        """Drops every cached page no running request maps, and the host tier; returns how many device pages."""
        n = len(self.idle)
        while self.idle:
            self.free.append(self._evict(spill=False))
        if self.host is not None:
            self.host.clear()
        return n

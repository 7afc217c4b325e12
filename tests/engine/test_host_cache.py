"""The host tier of the prefix cache (host_cache.py through KvPool) on a small real slot set: an evicted
cached page spills to host memory with its bytes, a hit brings it back into a fresh device page with the
same bytes (also when device- and host-held pages interleave in one prefix), the limit drops the oldest
host pages first, a page computed again leaves the host tier, and clear() empties both tiers."""

import numpy as np
import pytest

from strata import _ffi
from strata.config import PAGE_CELLS as P
from strata.engine.host_cache import HostCache
from strata.engine.kv_pool import KvPool, _chain
from strata.engine.request import Request
from strata.engine.sampling import SamplingParams

_TIERS: list[HostCache] = []      # closed after each test: their buffers belong to the context


@pytest.fixture
def slots(device):
    ctx = _ffi.Context(device, 1)
    s = _ffi.Slots(ctx, n_slots=2, n_layers=1, n_ctx=8 * P, n_kv_heads=1, head_dim=8, n_pages=6)
    yield s
    while _TIERS:
        _TIERS.pop().close()
    s.close()
    ctx.close()


def tier(slots, pages: float, n_pages=4) -> tuple[KvPool, HostCache]:
    host = HostCache(slots.ctx, slots, int(pages * slots.page_bytes()))
    _TIERS.append(host)
    return KvPool(n_pages=n_pages, ctx=8 * P, host=host), host


def fill(slots, request) -> None:
    """Writes a recognisable pattern into each page the request computes (stands in for its prefill)."""
    for i, page in enumerate(request.kv_pages):
        data = np.full(slots.page_bytes(), (request.prompt_ids[0] + i) % 251, dtype=np.uint8)
        slots.write_page(page, data)


def run(pool, slots, prompt, n_out=0, max_tokens=8):
    r = Request(list(prompt), SamplingParams(max_tokens=max_tokens))
    assert pool.admit(r)
    if r.num_cached == 0:
        fill(slots, r)
    pages = list(r.kv_pages)
    r.output_ids = list(range(7, 7 + n_out))
    r.num_computed = r.num_tokens - 1
    pool.release(r)
    return r, pages


def page_value(slots, page) -> int:
    data = np.frombuffer(slots.read_page(page), dtype=np.uint8)
    assert (data == data[0]).all()
    return int(data[0])


def test_evicted_pages_come_back_with_their_bytes(slots):
    pool, host = tier(slots, pages=8)
    a = list(range(1, 3 * P + 1))                      # 3 full pages below the last token + 1
    run(pool, slots, a, n_out=1)                       # 3 pages cached (3P + 1 tokens, 3P computed)
    assert len(pool.idle) == 3
    run(pool, slots, range(100, 100 + 3 * P), max_tokens=P)   # takes all 4 pages: 3 cached spill
    assert len(host.pages) == 3 and host.num_spilled == 3 and host.num_bytes == 3 * slots.page_bytes()
    b = Request(a + [5], SamplingParams(max_tokens=8))
    assert pool.admit(b)
    assert b.num_cached == 3 * P and host.num_restored == 3 and host.restored_tokens == 3 * P
    assert [page_value(slots, p) for p in b.kv_pages[:3]] == [1, 2, 3]    # the bytes they left with
    assert not set(b.kv_keys) & set(host.pages)        # back on the device, held by b
    assert all(pool.cached[k].refs == 1 for k in b.kv_keys)


def test_interleaved_tiers_map_in_page_order(slots):
    pool, host = tier(slots, pages=8)
    a = list(range(1, 3 * P + 1))
    run(pool, slots, a, n_out=1)
    # Evict only the LRU (the first page: release queues pages 0, 1, 2 in that order).
    c = Request(list(range(200, 210)), SamplingParams(max_tokens=P - 10))
    assert pool.admit(c) and len(c.kv_pages) == 1                 # the one free page
    d = Request(list(range(300, 310)), SamplingParams(max_tokens=P - 10))
    assert pool.admit(d) and len(host.pages) == 1                 # page 0 of a spilled
    b = Request(a + [5], SamplingParams(max_tokens=8))
    pool.release(c)
    pool.release(d)
    assert pool.admit(b) and b.num_cached == 3 * P and host.num_restored == 1
    assert [page_value(slots, p) for p in b.kv_pages[:3]] == [1, 2, 3]


def test_limit_drops_the_oldest(slots):
    pool, host = tier(slots, pages=2.5, n_pages=6)     # room for 2 host pages
    assert host.capacity == 2
    first = list(range(1, 2 * P + 1))
    second = list(range(1000, 1000 + 2 * P))
    run(pool, slots, first, n_out=1)                   # 2 pages cached
    run(pool, slots, second, n_out=1)                  # 2 more; LRU order: first 0, 1, second 0, 1
    run(pool, slots, range(5000, 5000 + 5 * P), max_tokens=P)   # 6 pages: 2 free + all 4 cached evicted
    assert host.num_spilled == 4 and host.num_dropped == 2 and len(host.pages) == 2
    assert host.num_bytes == 2 * slots.page_bytes() <= host.limit_bytes
    assert [e.tokens[0] for e in host.pages.values()] == [1000, 1000 + P]     # first's pages were dropped
    assert pool._lookup(Request(first + [9], SamplingParams(max_tokens=8))) == []
    hit = Request(second + [9], SamplingParams(max_tokens=8))
    assert pool.admit(hit) and hit.num_cached == 2 * P and host.num_restored == 2
    assert [page_value(slots, p) for p in hit.kv_pages[:2]] == [1000 % 251, 1001 % 251]


def test_recomputed_page_leaves_the_host_tier_and_clear_empties_both(slots):
    pool, host = tier(slots, pages=8)
    a = list(range(1, 2 * P + 1))
    run(pool, slots, a, n_out=1)
    run(pool, slots, range(100, 100 + 3 * P), max_tokens=P)
    key = _chain(b"", tuple(a[:P]))
    assert len(host.pages) == 2 and key in host.pages
    again = Request(a + [1], SamplingParams(max_tokens=8, cache_prompt=False))   # computes, caches nothing
    assert pool.admit(again) and again.num_cached == 0
    pool.release(again)
    assert key in host.pages
    pool.insert(a, pool.take(1))                       # page 0 of `a` cached on the device again
    assert key not in host.pages and key in pool.cached
    pool.clear()
    assert not host.pages and not pool.idle


def test_a_held_page_keeps_its_buffer_until_unheld(slots):
    """A slot-file save holds the host pages it reads (KvPool.hold): one dropped at the limit meanwhile
    keeps its bytes, its buffer is not handed to the next spill, and it is reused after the unhold."""
    pool, host = tier(slots, pages=1.5, n_pages=6)     # room for 1 host page
    first, second = list(range(1, P + 1)), list(range(1000, 1000 + P))
    run(pool, slots, first, n_out=1)
    run(pool, slots, range(5000, 5000 + 5 * P), max_tokens=P)    # first's page spills
    held = pool.chain(first, host=True)
    assert [type(e).__name__ for _, e in held] == ["HostPage"]
    pool.hold(held)
    entry = held[0][1]
    run(pool, slots, second, n_out=1)
    run(pool, slots, range(6000, 6000 + 5 * P), max_tokens=P)    # second's page spills: first's is dropped
    assert host.num_dropped >= 1 and held[0][0] not in host.pages and entry.gone
    assert all(e.buffer is not entry.buffer for e in host.pages.values())
    assert (entry.buffer.array == 1).all()              # still the bytes `fill` wrote for first's page 0
    pool.unhold(held)
    assert not entry.gone and entry.buffer in host._spare


def test_zero_capacity_spills_nothing(slots):
    pool, host = tier(slots, pages=0.5)
    assert host.capacity == 0
    run(pool, slots, range(1, 2 * P + 1), n_out=1)
    run(pool, slots, range(100, 100 + 3 * P), max_tokens=P)
    assert not host.pages and host.num_spilled == 0


def test_flag_range():
    from strata.config import ConfigError, EngineConfig

    EngineConfig(host_cache=0).check()
    EngineConfig(host_cache=0.5).check()
    for bad in (-1, "8", True, 1e9):
        with pytest.raises(ConfigError, match="--host-cache"):
            EngineConfig(host_cache=bad).check()


class _FailingWrites:
    """The slot set with write_page failing, as a device error would."""

    def __init__(self, slots):
        self._slots = slots

    def __getattr__(self, name):
        return getattr(self._slots, name)

    def write_page(self, page, data):
        raise _ffi.StrataError(_ffi.Status.ERR_STATE, "injected")


def test_failed_restore_computes_the_rest(slots):
    """A page that cannot be written back ends the prefix there: the request computes the rest and the
    pool's pages all stay accounted for."""
    pool, host = tier(slots, pages=8)
    a = list(range(1, 3 * P + 1))
    run(pool, slots, a, n_out=1)
    c = Request(list(range(200, 210)), SamplingParams(max_tokens=P - 10))
    d = Request(list(range(300, 310)), SamplingParams(max_tokens=P - 10))
    assert pool.admit(c) and pool.admit(d) and len(host.pages) == 1      # page 0 of a on the host
    pool.release(c)
    pool.release(d)
    host.slots = _FailingWrites(slots)
    b = Request(a + [5], SamplingParams(max_tokens=8))
    assert pool.admit(b) and b.num_cached == 0 and b.num_computed == 0 and b.kv_keys == []
    assert len(set(b.kv_pages)) == 4 and host.num_restored == 0
    pool.release(b, keep=False)
    assert pool.num_free == 4 and not any(e.refs for e in pool.cached.values())

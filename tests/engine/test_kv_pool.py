"""KvPool's bookkeeping with plain requests, no device: reservations, waiting
when the pool is short, the prefix cache's keys (token ids compared, not only
hashed), reference counts, LRU eviction, sharing a running prompt, and the
400 of a request that could never fit."""

import pytest

from strata.config import PAGE_CELLS as P
from strata.engine.kv_pool import KvPool
from strata.engine.request import Request
from strata.engine.sampling import InvalidRequest, SamplingParams


def req(prompt, max_tokens=8, **kw):
    return Request(list(prompt), SamplingParams(max_tokens=max_tokens, **kw))


def finish(pool, request, n_out=0, computed=None):
    request.output_ids = list(range(7, 7 + n_out))
    request.num_computed = request.num_tokens - 1 if computed is None else computed
    pool.release(request)


def test_reserves_worst_case_and_waits_when_short():
    pool = KvPool(n_pages=5, ctx=10 * P)
    a = req(range(P + 10), max_tokens=P)          # 2P + 10 cells -> 3 pages
    assert pool.admit(a) and len(a.kv_pages) == 3 and a.num_computed == 0
    b = req(range(1000, 1000 + P), max_tokens=P)  # 2 pages
    assert pool.admit(b) and pool.num_free == 0
    c = req(range(5))
    assert not pool.admit(c) and c.kv_pages is None   # waits; nothing taken
    finish(pool, b, computed=0)
    assert pool.admit(c) and len(set(a.kv_pages + c.kv_pages)) == 4


def test_drafts_and_ctx_bound_the_reservation():
    pool = KvPool(n_pages=100, ctx=3 * P, extra_cells=8)
    assert pool.pages_for(P - 8, 0) == 1 and pool.pages_for(P - 7, 0) == 2
    assert pool.pages_for(10, 10 ** 6) == 3            # never more than a slot holds


def test_check_fits_names_the_limit():
    pool = KvPool(n_pages=2, ctx=100 * P)
    pool.check_fits(P, P)
    with pytest.raises(InvalidRequest) as e:
        pool.check_fits(P, P + 1)
    assert "--kv-pages" in str(e.value) and "max_tokens <= 64" in str(e.value) and e.value.param == "max_tokens"


def test_hit_maps_full_pages_below_the_last_prompt_token():
    pool = KvPool(n_pages=20, ctx=20 * P)
    prompt = list(range(3 * P))
    a = req(prompt)
    assert pool.admit(a) and a.num_cached == 0
    finish(pool, a, n_out=4)                      # 3P + 3 computed: pages 0..2 cached
    assert len(pool.idle) == 3
    b = req(prompt)                               # same prompt: the last page is recomputed
    assert pool.admit(b)
    assert b.num_cached == b.num_computed == 2 * P and b.kv_pages[:2] == a_pages_of(pool, prompt, 2)
    assert b.kv_pages[2] not in a_pages_of(pool, prompt, 3)   # never a shared page it will write
    c = req(prompt[:P] + [999] * P + [5])         # diverges in page 1
    assert pool.admit(c) and c.num_cached == P
    d = req(prompt, cache_prompt=False)
    assert pool.admit(d) and d.num_cached == 0 and pool.num_hits == 2


def a_pages_of(pool, prompt, n):
    probe = req(prompt + [0])
    return [e.page for _, e in pool._lookup(probe)][:n]


def test_generated_turn_is_cached_for_the_next_turn():
    pool = KvPool(n_pages=20, ctx=20 * P)
    a = req(range(P + 5), max_tokens=2 * P)
    pool.admit(a)
    finish(pool, a, n_out=P)                      # 2P + 5 tokens, 2P + 4 computed
    turn2 = req(list(range(P + 5)) + list(range(7, 7 + P)) + [1, 2, 3])
    assert pool.admit(turn2) and turn2.num_cached == 2 * P


def test_tokens_are_compared_not_only_hashed(monkeypatch):
    from strata.engine import kv_pool

    monkeypatch.setattr(kv_pool, "_chain", lambda parent, tokens, salt=None: b"same key for every page")
    pool = KvPool(n_pages=8, ctx=8 * P)
    a = req(range(2 * P))
    pool.admit(a)
    finish(pool, a)
    b = req(range(100, 100 + 2 * P))              # the colliding key must not map a's page
    assert pool.admit(b) and b.num_cached == 0


def test_refcounts_and_lru_eviction():
    pool = KvPool(n_pages=6, ctx=4 * P)
    a, b = req(range(2 * P), max_tokens=1), req(range(500, 500 + 2 * P), max_tokens=1)   # 3 pages each
    assert pool.admit(a) and pool.admit(b)
    finish(pool, a, n_out=1)
    finish(pool, b, n_out=1)                      # 2P computed each: 2 cached pages, 1 free
    assert len(pool.idle) == 4 and len(pool.free) == 2
    a2 = req(list(range(2 * P)) + [1], max_tokens=1)   # hits a's two pages: in use, not evictable
    assert pool.admit(a2) and a2.num_cached == 2 * P and len(pool.idle) == 2
    new = req(range(900, 900 + P), max_tokens=P)  # 2 pages: the free one, then b's page 0 (LRU)
    assert pool.admit(new)
    assert set(new.kv_pages).isdisjoint(a2.kv_pages)
    assert pool._lookup(req(list(range(500, 500 + 2 * P)) + [1])) == []   # b's chain starts at a gone page
    finish(pool, a2, computed=0)                  # a's pages go back to the cache, refs 0
    assert len(pool.idle) == 3 and pool.num_free == 4


def test_running_prompt_is_shared():
    pool = KvPool(n_pages=10, ctx=10 * P)
    a = req(range(3 * P + 1))
    pool.admit(a)
    a.num_computed = 2 * P                        # two prefill chunks done
    pool.share_prompt(a)
    b = req(range(3 * P + 1))
    assert pool.admit(b) and b.kv_pages[:2] == a.kv_pages[:2] and b.num_cached == 2 * P
    a.num_computed = 3 * P + 1
    pool.share_prompt(a)                          # page 2 too now
    finish(pool, a)
    finish(pool, b, computed=3 * P + 1)           # b's own page 2 duplicates a's: freed, not cached
    assert len(pool.cached) == 3 and len(pool.idle) == 3


def test_error_finish_caches_nothing():
    pool = KvPool(n_pages=4, ctx=4 * P)
    a = req(range(2 * P))
    pool.admit(a)
    a.num_computed = 2 * P
    pool.release(a, keep=False)
    assert not pool.cached and len(pool.free) == 4

"""A conversation continued from the host tier keeps Strata's promise: its tokens equal a cache-less run.

Two conversations (greedy and seeded) are replayed turn by turn on an engine
with a small KV pool (--kv-pages 16) and a host tier, staggered beside
unrelated traffic. Between turns a long filler request takes the whole pool,
so every cached page of the conversations is evicted to host memory; the
next turn's hit must come back from there (write_page into fresh pages) and
its size is known exactly. Every stream must equal the same request run
alone on an engine without any cache. Negative control: a host-held page of
the last turn is corrupted (every F16 sign flipped) and the tokens change;
with `cache_prompt: false` they are right again.
"""

import dataclasses

import pytest

from strata.config import PAGE_CELLS
from strata.engine.host_cache import HostPage
from strata.engine.request import Request

from .harness import Job, run_script, solo
from .prompts import CHAT_QUESTIONS, chat_prompt
from .test_prefix_cache import FOLLOW_UPS, GREEDY, SEEDED, next_user_turn

pytestmark = pytest.mark.exactness

POOL_PAGES = 16
FILLER = dataclasses.replace(GREEDY, max_tokens=8)


async def flush(engine, salt: int) -> None:
    """Runs a request whose reservation is the whole pool: every idle cached page is evicted (spilled)."""
    pool = engine.pool
    ids = [(97 * i + salt) % 20000 + 300 for i in range(POOL_PAGES * PAGE_CELLS - FILLER.max_tokens)]
    assert pool.pages_for(len(ids), FILLER.max_tokens) == POOL_PAGES
    await solo(engine, ids, FILLER)
    # The filler's own pages are cached now; the conversations' pages all live in the host tier.


async def test_conversation_from_host_tier_equals_a_cacheless_run(make_engine, loaded):
    _, model = loaded
    engine = make_engine(batch=3, chunk=32, kv_pages=POOL_PAGES, host_cache=0.25)
    host = engine.pool.host
    assert host is not None and host.capacity > 3 * POOL_PAGES
    convs = [chat_prompt(model.tokenizer, model.chat_template, CHAT_QUESTIONS[0], repeat_context=1),
             chat_prompt(model.tokenizer, model.chat_template, CHAT_QUESTIONS[2])]
    params = [GREEDY, SEEDED]
    prompts, outs = [], []
    for turn in range(3):
        if turn:
            await flush(engine, turn)
            for conv in convs:                       # nothing of the conversations is left on the device
                chain = engine.pool._lookup(Request(list(conv), GREEDY))
                assert chain and all(isinstance(e, HostPage) for _, e in chain)
            restored_before = host.restored_tokens
        other = chat_prompt(model.tokenizer, model.chat_template, CHAT_QUESTIONS[3 + turn], repeat_context=turn % 2)
        jobs = [Job(convs[0], params[0], at_step=0), Job(other, GREEDY, at_step=1),
                Job(convs[1], params[1], at_step=3)]
        results, _ = await run_script(engine, jobs)
        prompts.append([j.prompt for j in jobs])
        outs.append(results)
        if turn:
            hits = sum(results[i].request.num_cached for i in (0, 2))
            assert host.restored_tokens - restored_before >= hits > 0, "the hits must come from the host tier"
        follow = next_user_turn(model, FOLLOW_UPS[turn % len(FOLLOW_UPS)])
        convs = [convs[i] + results[2 * i].token_ids + follow for i in range(2)]

    reference = make_engine(batch=1, chunk=512, prefix_cache=False)
    for turn, (turn_prompts, results) in enumerate(zip(prompts, outs)):
        for i, (prompt, result) in enumerate(zip(turn_prompts, results)):
            want = (await solo(reference, prompt, [GREEDY, GREEDY, SEEDED][i])).token_ids
            assert result.token_ids == want, f"turn {turn} request {i} (cached {result.request.num_cached})"
    for turn in (1, 2):
        for conv in (0, 1):
            prev = len(prompts[turn - 1][2 * conv]) + len(outs[turn - 1][2 * conv].token_ids) - 1   # computed
            got = outs[turn][2 * conv].request.num_cached
            assert got == PAGE_CELLS * (prev // PAGE_CELLS) > 0, f"turn {turn} conversation {conv}"
    assert engine.metrics.cached_prompt_tokens >= host.restored_tokens > 0

    # Negative control: the last greedy turn again, its prefix evicted to the host tier and corrupted there.
    last, want = prompts[2][0], outs[2][0].token_ids
    await flush(engine, 99)
    chain = engine.pool._lookup(Request(list(last), GREEDY))
    held = [entry for _, entry in chain if isinstance(entry, HostPage)]
    assert chain and len(held) == len(chain), "the whole prefix must be in the host tier"
    for entry in held:
        entry.buffer.array[1::2] ^= 0x80             # flips the sign bit of every F16 K/V value
    restored = host.num_restored
    corrupted = await solo(engine, last, GREEDY)
    assert corrupted.request.num_cached == len(chain) * PAGE_CELLS and host.num_restored == restored + len(chain)
    assert corrupted.token_ids != want, "a corrupted host-held page went unnoticed"
    fresh = await solo(engine, last, dataclasses.replace(GREEDY, cache_prompt=False))
    assert fresh.request.num_cached == 0 and fresh.token_ids == want

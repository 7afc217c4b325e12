"""Strata's promise with an int8 KV pool (--kv-dtype int8): every stream equals its solo run.

Concurrent, staggered (admitted mid-prefill and mid-decode), chunked at
different sizes, greedy and seeded: each request's tokens must be bit-identical
to the same request run alone on an int8 engine with one slot and one chunk.
A prefix-cache hit must equal a miss (the conversation replay of
test_prefix_cache.py on int8 pages), and the hits must happen; so must a hit
on int8 pages that were evicted to the host tier and came back. Negative
control: the int8 engine really stores int8 (page size) and overwriting the
cached int8 pages changes the tokens. Runs on the CPU and on cuda:0 (gpu-marked).
"""

import pytest

from strata.config import PAGE_CELLS
from strata.engine.request import Request
from strata.engine.sampling import SamplingParams

from .harness import Job, run_script, solo
from .prompts import CHAT_QUESTIONS, chat_prompt
from .test_host_cache_exactness import POOL_PAGES, flush
from .test_prefix_cache import FOLLOW_UPS, GREEDY, SEEDED, next_user_turn, replay

pytestmark = pytest.mark.exactness


def int8_engine(make_engine, device, **settings):
    return make_engine(kv_dtype="int8", **settings)


async def test_int8_concurrent_staggered_chunked_equal_solo(make_engine, loaded, device):
    _, model = loaded
    prompts = [chat_prompt(model.tokenizer, model.chat_template, CHAT_QUESTIONS[i % len(CHAT_QUESTIONS)],
                           repeat_context=i % 3) for i in range(6)]
    jobs = [Job(p, GREEDY if i % 2 == 0 else SamplingParams(temperature=0.7, top_p=0.95, seed=40 + i,
                                                            max_tokens=24, ignore_eos=True), at_step=2 * i)
            for i, p in enumerate(prompts)]
    reference = int8_engine(make_engine, device, batch=1, chunk=512, prefix_cache=False)
    assert reference.runner.slots.kv_dtype == "int8"
    spec = model.spec
    assert reference.runner.slots.page_bytes() == spec.n_layers * 2 * spec.n_kv_heads * PAGE_CELLS * (spec.head_dim + 4)
    expected = [(await solo(reference, j.prompt, j.params)).token_ids for j in jobs]
    for batch, chunk in ((3, 32), (4, 17)):
        engine = int8_engine(make_engine, device, batch=batch, chunk=chunk, prefix_cache=False)
        results, steps = await run_script(engine, jobs)
        assert max(len(s.decode) + len({r for r, _, _ in s.prefill}) for s in steps) == batch   # really batched
        for i, (result, want) in enumerate(zip(results, expected)):
            assert result.finish_reason == "length"
            assert result.token_ids == want, f"batch {batch} chunk {chunk}: request {i} diverged from solo"


async def test_int8_prefix_hit_equals_miss(make_engine, loaded, device):
    _, model = loaded
    engine = int8_engine(make_engine, device, batch=3, chunk=32)
    prompts, outs = await replay(engine, model, turns=2)
    reference = int8_engine(make_engine, device, batch=1, chunk=512, prefix_cache=False)
    for turn, (turn_prompts, results) in enumerate(zip(prompts, outs)):
        for i, (prompt, result) in enumerate(zip(turn_prompts, results)):
            want = (await solo(reference, prompt, [GREEDY, GREEDY, SEEDED][i])).token_ids
            assert result.token_ids == want, f"turn {turn} request {i} (cached {result.request.num_cached})"
    assert outs[1][0].request.num_cached > 0 and outs[1][2].request.num_cached > 0, "the second turn must hit"

    # Negative control: the cached int8 pages the last greedy turn maps, overwritten with another page.
    last, want = prompts[1][0], outs[1][0].token_ids
    chain = [entry.page for _, entry in engine.pool._lookup(Request(list(last), GREEDY))]
    assert chain
    stranger = next(e.page for e in engine.pool.cached.values() if e.page not in chain)
    for page in chain:
        engine.runner.slots.copy_page(page, stranger)
    corrupted = await solo(engine, last, GREEDY)
    assert corrupted.request.num_cached > 0 and corrupted.token_ids != want, "corrupted int8 pages went unnoticed"


async def test_int8_pages_from_host_tier_equal_a_cacheless_run(make_engine, loaded, device):
    """int8 pages (values then scales) spill to host memory and come back exact."""
    from strata.engine.host_cache import HostPage

    _, model = loaded
    engine = int8_engine(make_engine, device, batch=2, chunk=32, kv_pages=POOL_PAGES, host_cache=0.25)
    host = engine.pool.host
    conv = chat_prompt(model.tokenizer, model.chat_template, CHAT_QUESTIONS[0], repeat_context=1)
    first = await solo(engine, conv, GREEDY)
    conv = conv + first.token_ids + next_user_turn(model, FOLLOW_UPS[0])
    await flush(engine, 7)
    chain = engine.pool._lookup(Request(list(conv), GREEDY))
    assert chain and all(isinstance(e, HostPage) for _, e in chain), "the prefix must be in the host tier"
    other = chat_prompt(model.tokenizer, model.chat_template, CHAT_QUESTIONS[4])
    results, _ = await run_script(engine, [Job(conv, SEEDED, at_step=0), Job(other, GREEDY, at_step=2)])
    assert results[0].request.num_cached == len(chain) * PAGE_CELLS and host.restored_tokens > 0
    reference = int8_engine(make_engine, device, batch=1, chunk=512, prefix_cache=False)
    for job_prompt, params, result in ((conv, SEEDED, results[0]), (other, GREEDY, results[1])):
        assert result.token_ids == (await solo(reference, job_prompt, params)).token_ids


def test_kv_dtype_config_and_sizing():
    """A bad --kv-dtype is a one-line config error; sizing counts int8 pages."""
    from types import SimpleNamespace

    from strata.config import ConfigError, EngineConfig
    from strata.engine.sizing import page_bytes

    with pytest.raises(ConfigError, match="--kv-dtype must be f16 or int8"):
        EngineConfig(kv_dtype="int4").resolve("cpu", 2048)
    assert EngineConfig(kv_dtype="int8").resolve("cuda", 2048).kv_dtype == "int8"
    assert EngineConfig(kv_dtype="int8").resolve("cpu", 2048).kv_dtype == "int8"
    with pytest.raises(ConfigError, match="layer split"):
        EngineConfig(kv_dtype="int8", devices=("cpu", "cpu")).check()
    spec = SimpleNamespace(n_layers=30, n_kv_heads=3, head_dim=64)
    assert page_bytes(spec) == 30 * 2 * 3 * PAGE_CELLS * 64 * 2
    assert page_bytes(spec, "int8") == 30 * 2 * 3 * PAGE_CELLS * (64 + 4)

"""The prefix cache keeps Strata's promise: a hit gives the tokens of a miss, bit for bit.

Two conversations (greedy and seeded) are replayed turn by turn on an
engine with the cache on, staggered beside unrelated traffic; each turn's
prompt is the previous prompt, its answer and a new user message, so later
turns map the earlier prompt and generated pages. Every stream must equal
the same request run alone with the cache off, and the hits must really
happen (their size is known exactly). Negative control: the cached pages
are overwritten with another page and the same comparison fails; with
`cache_prompt: false` the request ignores them and is exact again. Also:
a small pool makes admission wait (nothing lost, all exact), and a request
that could never fit is refused with the limit named.
"""

import dataclasses

import pytest

from strata.config import PAGE_CELLS
from strata.engine.request import Request
from strata.engine.sampling import InvalidRequest, SamplingParams

from .harness import Job, run_script, solo
from .prompts import CHAT_QUESTIONS, chat_prompt

pytestmark = pytest.mark.exactness

GREEDY = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
SEEDED = SamplingParams(temperature=0.8, top_p=0.95, seed=21, max_tokens=24, ignore_eos=True)
FOLLOW_UPS = ["Tell me more.", "Now say it in French.", "Thanks! One more fact, please."]


def next_user_turn(model, question: str) -> list[int]:
    """The tokens a chat template puts after an assistant answer for the next user message."""
    text = model.chat_template.render([{"role": "user", "content": question}], add_generation_prompt=True)
    ids = model.tokenizer.encode(text, add_special=False)
    end = model.tokenizer.encode("<|im_end|>\n", add_special=False)
    return end + ids[_after_system(model, ids):]


def _after_system(model, ids: list[int]) -> int:
    """Index of the user message in a rendered one-message chat (skips the default system prompt)."""
    start = model.tokenizer.encode("<|im_start|>user", add_special=False)
    for i in range(len(ids) - len(start) + 1):
        if ids[i:i + len(start)] == start:
            return i
    return 0


async def replay(engine, model, turns: int):
    """Runs both conversations turn by turn with traffic beside them; returns (prompts, completions)."""
    convs = [chat_prompt(model.tokenizer, model.chat_template, CHAT_QUESTIONS[0], repeat_context=1),
             chat_prompt(model.tokenizer, model.chat_template, CHAT_QUESTIONS[2])]
    params = [GREEDY, SEEDED]
    prompts, outs = [], []
    for turn in range(turns):
        other = chat_prompt(model.tokenizer, model.chat_template, CHAT_QUESTIONS[3 + turn], repeat_context=turn % 2)
        jobs = [Job(convs[0], params[0], at_step=0), Job(other, GREEDY, at_step=1),
                Job(convs[1], params[1], at_step=3)]
        results, _ = await run_script(engine, jobs)
        prompts.append([j.prompt for j in jobs])
        outs.append(results)
        follow = next_user_turn(model, FOLLOW_UPS[turn % len(FOLLOW_UPS)])
        convs = [convs[i] + results[2 * i].token_ids + follow for i in range(2)]
    return prompts, outs


async def test_conversation_replay_hits_equal_misses(make_engine, loaded):
    _, model = loaded
    engine = make_engine(batch=3, chunk=32)
    prompts, outs = await replay(engine, model, turns=3)
    reference = make_engine(batch=1, chunk=512, prefix_cache=False)
    for turn, (turn_prompts, results) in enumerate(zip(prompts, outs)):
        for i, (prompt, result) in enumerate(zip(turn_prompts, results)):
            p = [GREEDY, GREEDY, SEEDED][i]
            want = (await solo(reference, prompt, p)).token_ids
            assert result.token_ids == want, f"turn {turn} request {i} (cached {result.request.num_cached})"
    for turn in (1, 2):
        for conv in (0, 1):
            prev = len(prompts[turn - 1][2 * conv]) + len(outs[turn - 1][2 * conv].token_ids) - 1   # computed
            got = outs[turn][2 * conv].request.num_cached
            assert got == PAGE_CELLS * (prev // PAGE_CELLS) > 0, f"turn {turn} conversation {conv}"
    assert engine.metrics.cached_prompt_tokens > 0 and reference.metrics.cached_prompt_tokens == 0

    # Negative control: overwrite the pages the last greedy turn would map with another cached page.
    last, want = prompts[2][0], outs[2][0].token_ids
    pool = engine.pool
    probe = Request(list(last), GREEDY)
    chain = [entry.page for _, entry in pool._lookup(probe)]
    assert chain, "the last turn must hit the cache"
    stranger = next(e.page for e in pool.cached.values() if e.page not in chain)
    for page in chain:
        engine.runner.slots.copy_page(page, stranger)
    corrupted = await solo(engine, last, GREEDY)
    assert corrupted.request.num_cached > 0
    assert corrupted.token_ids != want, "a corrupted cached page went unnoticed"
    fresh = await solo(engine, last, dataclasses.replace(GREEDY, cache_prompt=False))
    assert fresh.request.num_cached == 0 and fresh.token_ids == want


async def test_short_pool_queues_and_stays_exact(make_engine, loaded):
    """7 pages for 4 slots: two of these requests (3 pages each) fit at once; the rest wait and all
    finish exactly."""
    _, model = loaded
    prompts = [chat_prompt(model.tokenizer, model.chat_template, CHAT_QUESTIONS[i], repeat_context=1)
               for i in range(5)]
    jobs = [Job(p, GREEDY if i % 2 else SEEDED, at_step=i) for i, p in enumerate(prompts)]
    reference = make_engine(batch=1, chunk=512, prefix_cache=False)
    expected = [(await solo(reference, j.prompt, j.params)).token_ids for j in jobs]
    engine = make_engine(batch=4, chunk=32, kv_pages=7, prefix_cache=False)
    need = [engine.pool.pages_for(len(p), 24) for p in prompts]
    assert need == [3] * 5, need
    results, steps = await run_script(engine, jobs)
    for job, result, want in zip(jobs, results, expected):
        assert result.finish_reason == "length" and result.token_ids == want
    running = [len(set(s.decode) | {r for r, _, _ in s.prefill}) for s in steps]
    assert max(running) == 2, "admission should have waited for pages with slots free"
    assert engine.pool.num_free == 7
    with pytest.raises(InvalidRequest) as e:
        engine.submit(prompts[0], SamplingParams(max_tokens=7 * PAGE_CELLS))
    assert "--kv-pages" in str(e.value) and e.value.code == "context_length_exceeded"

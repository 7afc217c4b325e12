"""Strata's promise, tested on the real default model: every batched stream equals its solo run.

Batched, staggered (admitted mid-prefill and mid-decode), chunked at any size,
cancelled and reused, and right after bad input — the token ids of each
request must be bit-identical to the same request run alone.
"""

import pytest

from strata.engine.sampling import InvalidRequest, SamplingParams

from .harness import Job, run_script, solo
from .prompts import CHAT_QUESTIONS, chat_prompt

pytestmark = pytest.mark.exactness

GREEDY = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)


def seeded(seed: int, **kw) -> SamplingParams:
    return SamplingParams(temperature=0.7, top_p=0.95, top_k=50, seed=seed, max_tokens=24, ignore_eos=True, **kw)


def prompts_of(model, n: int, long_every: int = 3) -> list[list[int]]:
    out = []
    for i in range(n):
        question = CHAT_QUESTIONS[i % len(CHAT_QUESTIONS)]
        out.append(chat_prompt(model.tokenizer, model.chat_template, question,
                               repeat_context=(i % 4) if i % long_every == 0 else 0))
    return out


async def solo_streams(make_engine, jobs: list[Job]) -> list[list[int]]:
    engine = make_engine(batch=1, chunk=512)
    return [(await solo(engine, job.prompt, job.params)).token_ids for job in jobs]


async def test_batch(make_engine, loaded):
    """N concurrent requests (N >= 2 x slots; greedy and seeded; prompt lengths differ) equal solo."""
    _, model = loaded
    prompts = prompts_of(model, 9)
    jobs = [Job(p, GREEDY if i % 2 == 0 else seeded(100 + i)) for i, p in enumerate(prompts)]
    expected = await solo_streams(make_engine, jobs)
    engine = make_engine(batch=4, chunk=64)
    results, steps = await run_script(engine, jobs)
    assert len({len(p) for p in prompts}) > 3
    assert max(len(s.decode) + len({r for r, _, _ in s.prefill}) for s in steps) == 4   # really batched
    for job, result, want in zip(jobs, results, expected):
        assert result.finish_reason == "length"
        assert result.token_ids == want, f"prompt of {len(job.prompt)} tokens diverged from its solo run"


async def test_interleave(make_engine, loaded):
    """Admitted mid-prefill and mid-decode, long prompts over many chunks: every stream equals solo,
    and decode tokens are emitted between a long prompt's chunks (BYIELD/resume, docs/design.md)."""
    _, model = loaded
    long_a = chat_prompt(model.tokenizer, model.chat_template, CHAT_QUESTIONS[0], repeat_context=4)
    long_d = chat_prompt(model.tokenizer, model.chat_template, CHAT_QUESTIONS[3], repeat_context=3)
    jobs = [
        Job(long_a, GREEDY, at_step=0, name="A"),
        Job(prompts_of(model, 2)[1], seeded(7), at_step=2, name="B"),        # during A's prefill
        Job(prompts_of(model, 3)[2], GREEDY, at_step=14, name="C"),          # while A and B decode
        Job(long_d, seeded(11), at_step=16, name="D"),                        # long, beside decodes
        Job(prompts_of(model, 5)[4], seeded(13), at_step=20, name="E"),
    ]
    expected = await solo_streams(make_engine, jobs)
    engine = make_engine(batch=3, chunk=16)
    results, steps = await run_script(engine, jobs)
    for job, result, want in zip(jobs, results, expected):
        assert result.token_ids == want, f"request {job.name} diverged from its solo run"
    a_id = results[0].request.request_id
    a_chunks = [i for i, s in enumerate(steps) if any(r == a_id for r, _, _ in s.prefill)]
    assert len(a_chunks) >= len(long_a) // 16, "the long prompt was not read in chunks"
    mixed = [s for s in steps if s.prefill and s.decode]
    assert mixed, "no step decoded one request while another was mid-prefill"
    assert all(sum(n for _, _, n in s.prefill) <= 16 for s in steps), "a step exceeded the chunk budget"


async def test_prefill_hold(make_engine, loaded, monkeypatch):
    """STRATA_PREFILL_HOLD_MS (fresh prompts wait beside decoding rows for a fuller step,
    strata/engine/scheduler.py): staggered requests still equal their solo runs, and the run really
    held a prompt (admitted in one step, read in a later one while others decoded). Negative
    control of the scheduling: the same script without the hold reads every short prompt at once."""
    _, model = loaded
    jobs = [
        Job(prompts_of(model, 2)[1], GREEDY, at_step=0, name="A"),
        Job(prompts_of(model, 3)[2], seeded(21), at_step=3, name="B"),       # while A decodes: held
        Job(prompts_of(model, 5)[4], GREEDY, at_step=5, name="C"),
        Job(prompts_of(model, 7)[6], seeded(23), at_step=6, name="D"),
    ]
    expected = await solo_streams(make_engine, jobs)

    def held_requests(results, steps):
        ids = {r.request.request_id for r in results}
        held = set()
        for rid in ids:
            admitted = next(i for i, s in enumerate(steps) if rid in s.admitted)
            first_read = next(i for i, s in enumerate(steps) if any(r == rid for r, _, _ in s.prefill))
            if first_read > admitted and all(steps[i].decode for i in range(admitted, first_read)):
                held.add(rid)
        return held

    engine = make_engine(batch=4, chunk=512, prefix_cache=False)
    results, steps = await run_script(engine, jobs)
    assert held_requests(results, steps) == set(), "without the hold a prompt waited"
    monkeypatch.setenv("STRATA_PREFILL_HOLD_MS", "10000")
    engine = make_engine(batch=4, chunk=512, prefix_cache=False)
    results, steps = await run_script(engine, jobs)
    for job, result, want in zip(jobs, results, expected):
        assert result.token_ids == want, f"request {job.name} diverged from its solo run under the prefill hold"
    assert held_requests(results, steps), "no prompt was held"


@pytest.mark.parametrize("chunk", [1, 7, 64, 512])
async def test_chunk_invariance(make_engine, loaded, chunk, chunk_reference):
    """One request read with chunk sizes 1, 7, 64 and 512 gives identical tokens."""
    prompt, params, want = chunk_reference
    engine = make_engine(batch=1, chunk=chunk)
    got = await solo(engine, prompt, params)
    assert got.token_ids == want


@pytest.fixture(scope="module")
def chunk_reference_cache():
    return {}


@pytest.fixture
async def chunk_reference(make_engine, loaded, device, chunk_reference_cache):
    if device not in chunk_reference_cache:
        _, model = loaded
        prompt = chat_prompt(model.tokenizer, model.chat_template, CHAT_QUESTIONS[6], repeat_context=2)
        params = seeded(5)
        engine = make_engine(batch=1, chunk=1024)
        reference = await solo(engine, prompt, params)
        chunk_reference_cache[device] = (prompt, params, reference.token_ids)
    return chunk_reference_cache[device]


async def test_cancel_and_reuse(make_engine, loaded):
    """Cancel one request in prefill and one in decode; new requests reuse the slots; all equal solo."""
    _, model = loaded
    long_a = chat_prompt(model.tokenizer, model.chat_template, CHAT_QUESTIONS[1], repeat_context=4)
    prompts = prompts_of(model, 6)
    jobs = [
        Job(long_a, GREEDY, cancel_at_step=2, name="cancelled in prefill"),
        Job(prompts[1], seeded(3), cancel_after_tokens=4, name="cancelled in decode"),
        Job(prompts[2], GREEDY, name="beside"),
        Job(prompts[4], seeded(4), at_step=12, name="reuse 1"),
        Job(prompts[5], GREEDY, at_step=13, name="reuse 2"),
    ]
    engine = make_engine(batch=3, chunk=16)
    results, steps = await run_script(engine, jobs)
    assert results[0].finish_reason == "cancelled" and results[0].token_ids == []
    assert results[1].finish_reason == "cancelled" and 4 <= len(results[1].token_ids) <= 5
    expected = await solo_streams(make_engine, jobs)
    assert results[1].token_ids == expected[1][: len(results[1].token_ids)]
    for job, result, want in list(zip(jobs, results, expected))[2:]:
        assert result.token_ids == want, f"{job.name} diverged from its solo run"
    a_id = results[0].request.request_id
    last_a = max(i for i, s in enumerate(steps) if any(r == a_id for r, _, _ in s.prefill))
    assert last_a <= 2, "the cancelled prefill kept running after its cancel step"
    assert engine.scheduler.busy_slots == 0 and sorted(engine.scheduler.free_slots) == [0, 1, 2]


async def test_cancel_frees_slot_within_one_step(make_engine, loaded):
    _, model = loaded
    prompt = prompts_of(model, 1)[0]
    engine = make_engine(batch=1, chunk=64)
    job = Job(prompt, SamplingParams(temperature=0, max_tokens=200, ignore_eos=True), cancel_after_tokens=3)
    freed_at = {}

    def watch(plan, result):
        if engine.scheduler.busy_slots == 0 and "step" not in freed_at:
            freed_at["step"] = engine.metrics.steps
            freed_at["tokens"] = engine.metrics.generated_tokens

    engine.step_observers.append(watch)
    results, _ = await run_script(engine, [job])
    assert results[0].finish_reason == "cancelled"
    assert freed_at["tokens"] <= 4, "the cancelled request kept decoding for more than one step"


async def test_bad_input_then_exact(make_engine, loaded):
    """Bad requests are refused with a clear error and change nothing; the next one equals solo."""
    _, model = loaded
    engine = make_engine(batch=1, chunk=64, ctx_len=256)
    vocab = model.spec.vocab
    good = prompts_of(model, 2)[1]
    bad = [
        ([1, 2, vocab], GREEDY, "out of range"),
        ([1, -5, 3], GREEDY, "out of range"),
        ([], GREEDY, "at least one token"),
        (list(range(5, 5 + 300)), GREEDY, "slot holds 256"),
        (good, SamplingParams(temperature=-1), "temperature"),
        (good, SamplingParams(top_p=0.0), "top_p"),
        (good, SamplingParams(top_k="many"), "top_k"),
        (good, SamplingParams(max_tokens=0), "max_tokens"),
        (good, SamplingParams(min_p=1.5), "min_p"),
    ]
    for prompt, params, message in bad:
        with pytest.raises(InvalidRequest, match=message):
            engine.submit(prompt, params)
    assert engine.scheduler.queue_len == 0 and engine.scheduler.busy_slots == 0
    reference = await solo(make_engine(batch=1, chunk=64, ctx_len=256), good, seeded(9))
    got = await solo(engine, good, seeded(9))
    assert got.token_ids == reference.token_ids


async def test_seed_reproducible_and_sensitive(make_engine, loaded):
    """Same seed, same tokens; another seed, other tokens (so the seeded tests can fail)."""
    _, model = loaded
    prompt = prompts_of(model, 2)[1]
    engine = make_engine(batch=2, chunk=64)
    a = await solo(engine, prompt, seeded(1))
    b = await solo(engine, prompt, seeded(1))
    c = await solo(engine, prompt, seeded(2))
    assert a.token_ids == b.token_ids
    assert a.token_ids != c.token_ids

"""Decode-ahead (strata/engine/decode_ahead.py) forced on the CPU backend, queued 1 and 2 steps deep: with
requests of different token budgets finishing, new ones admitted mid-decode and one cancelled, every
stream equals its solo run without decode-ahead, and guesses were both taken and dropped.

On CUDA the runner keeps guesses queued by itself; on the CPU it does not (the CPU computes at once), so
the CPU suite would never run the guess path without forcing it here."""

import pytest

from strata.engine.decode_ahead import DecodeAhead
from strata.engine.sampling import SamplingParams

from .harness import Job, run_script, solo
from .prompts import CHAT_QUESTIONS, chat_prompt

pytestmark = pytest.mark.exactness


def params(i: int) -> SamplingParams:
    budget = 6 + 3 * i                    # requests end at different steps: guesses of the others drop
    if i % 2:
        return SamplingParams(temperature=0.7, top_p=0.95, top_k=50, seed=40 + i, max_tokens=budget, ignore_eos=True)
    return SamplingParams(temperature=0, max_tokens=budget, ignore_eos=True)


@pytest.mark.parametrize("depth", [1, 2])
async def test_guessed_steps_change_no_token(make_engine, loaded, depth):
    _, model = loaded
    prompts = [chat_prompt(model.tokenizer, model.chat_template, CHAT_QUESTIONS[i % len(CHAT_QUESTIONS)])
               for i in range(5)]
    jobs = [Job(p, params(i), at_step=4 * (i // 3)) for i, p in enumerate(prompts)]
    jobs.append(Job(prompts[0], params(6), cancel_after_tokens=5))
    reference = make_engine(batch=1, chunk=512)
    expected = [(await solo(reference, job.prompt, job.params)).token_ids for job in jobs]

    engine = make_engine(batch=3, chunk=512)
    runner = engine.runner
    if runner.ahead is not None:           # CUDA keeps one of its own (1 deep); the CPU backend runs without it
        runner.ahead.close()
    runner.ahead = DecodeAhead(runner.ctx, runner.io, runner.max_logits, depth)
    try:
        results, _ = await run_script(engine, jobs)
        hits, misses = runner.ahead.hits, runner.ahead.misses
    finally:
        runner.ahead.close()
        runner.ahead = None
    assert hits > 10 and misses > 0
    for job, result, want in zip(jobs, results, expected):
        if job.cancel_after_tokens is not None:
            assert result.token_ids == want[:len(result.token_ids)]
        else:
            assert result.finish_reason == "length"
            assert result.token_ids == want

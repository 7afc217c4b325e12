"""Decode-ahead (strata/engine/decode_ahead.py) forced on the CPU backend, queued 1 and 2 steps deep: with
requests of different token budgets finishing, new ones admitted mid-decode and one cancelled, every stream
equals its solo run without decode-ahead; guesses were taken as guessed, and guesses whose plan changed (a
prompt chunk joined the decode rows, a request left) served those steps' decode rows (`take_covering`; with
STRATA_DECODE_AHEAD_REUSE=0 they are dropped instead). Negative control: a reuse that hands each decode row
another row's guessed token makes streams differ from their solo runs, so the comparison would catch a wrong
reuse.

On CUDA the runner keeps guesses queued by itself; on the CPU it does not (the CPU computes at once), so the
CPU suite would never run the guess path without forcing it here."""

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


class RotatedReuse(DecodeAhead):
    """The negative control: a reused guess whose rows are read one place off (each decode row gets the
    token another row's sequence produced)."""

    def take_covering(self, rows):
        launched = super().take_covering(rows)
        if launched is not None and len(launched.expected) > 1:
            launched.expected = launched.expected[1:] + launched.expected[:1]
        return launched


async def run_with_guesses(make_engine, model, depth: int, ahead_class=DecodeAhead):
    prompts = [chat_prompt(model.tokenizer, model.chat_template, CHAT_QUESTIONS[i % len(CHAT_QUESTIONS)])
               for i in range(6)]
    # Staggered: prompts arrive while others decode (their chunks join decoding steps), and the later ones
    # wait for a slot that a finishing request frees (release and admission in one step).
    jobs = [Job(p, params(i), at_step=(0, 0, 3, 7, 11, 15)[i]) for i, p in enumerate(prompts)]
    jobs.append(Job(prompts[0], params(6), cancel_after_tokens=5))
    reference = make_engine(batch=1, chunk=512)
    expected = [(await solo(reference, job.prompt, job.params)).token_ids for job in jobs]

    engine = make_engine(batch=3, chunk=512)
    runner = engine.runner
    if runner.ahead is not None:           # CUDA keeps one of its own (1 deep); the CPU backend runs without it
        runner.ahead.close()
    runner.ahead = ahead_class(runner.ctx, runner.io, runner.max_logits, depth)
    reuse_plans = []
    step_after_guess = runner._step_after_guess

    def observed(plan, guessed):
        reuse_plans.append(bool(plan.prefill))
        return step_after_guess(plan, guessed)

    runner._step_after_guess = observed
    try:
        results, steps = await run_script(engine, jobs)
        counts = runner.ahead.hits, runner.ahead.reused, runner.ahead.misses
    finally:
        runner.ahead.close()
        runner.ahead = None
    held = sum(1 for st in steps if st.admitted and st.decode and not st.prefill)   # admitted, prompt left for later
    return jobs, results, expected, counts, reuse_plans, held


def equal_to_solo(job, result, want) -> bool:
    if job.cancel_after_tokens is not None:
        return result.token_ids == want[:len(result.token_ids)]
    return result.finish_reason == "length" and result.token_ids == want


@pytest.mark.parametrize("depth,reuse,hold", [(1, "1", "0"), (2, "1", "0"), (1, "0", "0"), (1, "1", "10000")])
async def test_guessed_steps_change_no_token(make_engine, loaded, monkeypatch, depth, reuse, hold):
    """reuse "0" (STRATA_DECODE_AHEAD_REUSE=0): a guess whose plan changed is dropped, as before. hold: with
    STRATA_PREFILL_HOLD_MS, requests are admitted in decoding steps that leave their prompts for later; such
    a step is the guessed plan, so its guess is taken and the next one queued, and none is dropped."""
    _, model = loaded
    monkeypatch.setenv("STRATA_DECODE_AHEAD_REUSE", reuse)
    monkeypatch.setenv("STRATA_PREFILL_HOLD_MS", hold)
    jobs, results, expected, (hits, reused, misses), reuse_plans, held = await run_with_guesses(make_engine, model,
                                                                                                depth)
    print(f"depth {depth}, reuse {reuse}, hold {hold}: {hits} guesses taken, {reused} reused by steps of another "
          f"plan ({sum(reuse_plans)} with a prompt chunk), {misses} dropped")
    assert hits > 10
    if reuse == "1":
        assert reused == len(reuse_plans) and (any(reuse_plans) or hold != "0")
        assert misses == 0 or depth > 1
        assert (held > 0) == (hold != "0")
    else:
        assert reused == 0 and misses > 0
    for job, result, want in zip(jobs, results, expected):
        assert equal_to_solo(job, result, want), job


def test_unknown_reuse_value_is_refused(monkeypatch):
    from strata.engine.runner import ahead_reuse

    monkeypatch.setenv("STRATA_DECODE_AHEAD_REUSE", "yes")
    with pytest.raises(ValueError, match="0 or 1"):
        ahead_reuse()


async def test_wrong_reuse_is_caught(make_engine, loaded):
    """Negative control: reusing a guess with its rows read one place off changes some stream."""
    _, model = loaded
    jobs, results, expected, (_, reused, _), _, _ = await run_with_guesses(make_engine, model, 1, RotatedReuse)
    assert reused > 0
    assert not all(equal_to_solo(job, result, want) for job, result, want in zip(jobs, results, expected))

"""Strata's promise with rope, the KV store and attention fused for decode steps
(strata_rope_kv_store_attention; STRATA_FUSED_ATTENTION, on and off): requests admitted at
staggered steps (steps mix prompt chunks and decode rows, so both the fused and the separate calls
run), greedy and seeded, on the default model, give every request its solo run's tokens bit for
bit, with the fused path on and off (the control), and both settings give the same streams. The
fused call must really run in decode-only steps (counted), and never in a step that holds a prompt
chunk or draft rows (rows of one slot: the call's guarantee would not hold; checked by recording
which steps the runner marks). On the CPU backend the fused call is the separate calls composed;
on CUDA (gpu) it is one kernel."""

import pytest

from strata import _ffi
from strata.engine.sampling import SamplingParams

from .harness import Job, run_script, solo
from .prompts import CHAT_QUESTIONS, chat_prompt

pytestmark = pytest.mark.exactness

GREEDY = SamplingParams(temperature=0, max_tokens=16, ignore_eos=True)


def seeded(seed: int) -> SamplingParams:
    return SamplingParams(temperature=0.8, top_p=0.9, top_k=40, seed=seed, max_tokens=16, ignore_eos=True)


def jobs_of(model):
    tok, tmpl = model.tokenizer, model.chat_template
    prompts = [chat_prompt(tok, tmpl, CHAT_QUESTIONS[i % len(CHAT_QUESTIONS)], repeat_context=i % 3)
               for i in range(4)]
    return [Job(prompts[0], GREEDY, at_step=0, name="A"), Job(prompts[1], seeded(5), at_step=2, name="B"),
            Job(prompts[2], GREEDY, at_step=9, name="C"), Job(prompts[3], seeded(17), at_step=12, name="D")]


async def test_fused_on_and_off_equal_solo_runs(make_engine, loaded, monkeypatch):
    _, model = loaded
    jobs = jobs_of(model)
    fused_calls = []
    real = _ffi.rope_kv_store_attention

    def counting(*args, **kw):
        fused_calls.append(args[7])  # n_rows
        return real(*args, **kw)

    monkeypatch.setattr(_ffi, "rope_kv_store_attention", counting)
    streams = {}
    for setting in ("1", "0"):
        monkeypatch.setenv("STRATA_FUSED_ATTENTION", setting)
        fused_calls.clear()
        expected = [(await solo(make_engine(batch=1, chunk=64), job.prompt, job.params)).token_ids for job in jobs]
        assert len({tuple(t) for t in expected}) == len(expected), f"streams are degenerate: {expected}"
        results, steps = await run_script(make_engine(batch=3, chunk=16), jobs)
        assert any(s.prefill and s.decode for s in steps), "no step mixed prefill and decode"
        for job, result, want in zip(jobs, results, expected):
            assert result.token_ids == want, (
                f"STRATA_FUSED_ATTENTION={setting}: request {job.name} diverged from its solo run")
        if setting == "1":
            assert fused_calls, "the fused call never ran"
        else:
            assert not fused_calls, "STRATA_FUSED_ATTENTION=0 still fused"
        streams[setting] = [r.token_ids for r in results]
    assert streams["1"] == streams["0"]


async def test_runner_marks_only_distinct_slot_decode_steps(make_engine, loaded, monkeypatch):
    """The runner's mark (StepIO.distinct_slots) is set exactly for steps of decode rows only; a
    step with a prompt chunk is never fused."""
    _, model = loaded
    jobs = jobs_of(model)[:3]
    engine = make_engine(batch=3, chunk=16)
    runner = engine.runner
    marks = []
    record = runner.model.decoder.record

    def spy(io, act, slots, n_rows, n_decode, n_logits, *args, **kw):
        marks.append((bool(io.distinct_slots), n_rows, n_decode))
        return record(io, act, slots, n_rows, n_decode, n_logits, *args, **kw)

    monkeypatch.setattr(runner.model.decoder, "record", spy)
    try:
        await run_script(engine, jobs)
    finally:
        monkeypatch.undo()
    assert marks, "nothing was recorded"
    assert any(m for m, _, _ in marks), "no step was marked (the fused path never applies)"
    for marked, n_rows, n_decode in marks:
        if marked:
            assert n_rows == n_decode, f"a step with prompt rows ({n_rows} rows, {n_decode} decode) was marked"

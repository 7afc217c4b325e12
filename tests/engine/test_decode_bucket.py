"""The decode graphs' row buckets (strata/engine/runner.py `decode_bucket`): powers of two, except 33 to 48
decode rows, which run a 48-row graph (the CUDA tile kernel's 48-row route), capped at the batch
(STRATA_DECODE_BUCKET_48=0: powers of two only). And steps of 33-34 decoding requests in a batch of 48 run on
that graph with every stream equal to its solo run: padding rows change no real row."""

import pytest

from strata.engine.runner import decode_bucket
from strata.engine.sampling import SamplingParams

from .harness import Job, run_script, solo
from .prompts import CHAT_QUESTIONS, chat_prompt


@pytest.mark.parametrize("n_rows,max_rows,bucket", [
    (1, 64, 1), (2, 64, 2), (3, 64, 4), (9, 64, 16), (17, 64, 32), (32, 64, 32), (33, 64, 48), (40, 64, 48),
    (48, 64, 48), (49, 64, 64), (64, 64, 64), (65, 256, 128), (100, 256, 128), (200, 256, 256),
    (40, 40, 40), (33, 40, 40), (20, 24, 24),
])
def test_buckets(n_rows, max_rows, bucket):
    assert decode_bucket(n_rows, max_rows) == bucket


def test_the_48_row_bucket_can_be_turned_off(monkeypatch):
    from strata.engine.runner import bucket_48

    assert decode_bucket(40, 64, bucket_48=False) == 64
    monkeypatch.setenv("STRATA_DECODE_BUCKET_48", "0")
    assert bucket_48() is False
    monkeypatch.setenv("STRATA_DECODE_BUCKET_48", "2")
    with pytest.raises(ValueError, match="0 or 1"):
        bucket_48()


def test_speculation_leaves_few_rows_unpadded():
    assert decode_bucket(5, 64, speculating=True) == 5
    assert decode_bucket(17, 64, speculating=True) == 32
    assert decode_bucket(40, 64, speculating=True) == 48


@pytest.mark.exactness
async def test_a_48_row_graph_step_equals_solo_runs(make_engine, loaded):
    _, model = loaded
    n = 34
    prompts = [chat_prompt(model.tokenizer, model.chat_template, CHAT_QUESTIONS[i % len(CHAT_QUESTIONS)])
               for i in range(n)]
    jobs = [Job(p, SamplingParams(temperature=0.8 if i % 2 else 0, top_k=40, seed=100 + i, max_tokens=8,
                                  ignore_eos=True)) for i, p in enumerate(prompts)]
    reference = make_engine(batch=1, chunk=512)
    expected = [(await solo(reference, job.prompt, job.params)).token_ids for job in jobs]
    engine = make_engine(batch=48, chunk=512)
    results, steps = await run_script(engine, jobs)
    assert any(33 <= len(s.decode) and not s.prefill for s in steps)     # decode-only steps of 33 or 34 rows
    assert 48 in engine.runner.graphs and 64 not in engine.runner.graphs
    for job, result, want in zip(jobs, results, expected):
        assert result.token_ids == want

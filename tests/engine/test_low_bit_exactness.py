"""Strata's promise on the low-bit weight types: Q2_K, Q3_K and IQ3_S models give every request
the tokens it gets alone.

Tiny random-weight llama files written by `strata synth --pure` hold every matrix (the
embedding and output included) in one of the three types, so the engine's embedding gather
and every matmul of a step run the new decoders. Requests are admitted mid-prefill and
mid-decode beside each other, greedy and seeded, prompts read in chunks of 8, and each
stream must equal its solo run bit for bit. The streams must also differ from each other:
a model whose decoders produced zeros or constants would make every stream trivially "equal".
"""

import pytest

from strata.engine.sampling import SamplingParams

from .harness import Job, run_script, solo
from .synth_models import devices, engine_factory, loaded_model, tiny_gguf

pytestmark = [pytest.mark.exactness]

GREEDY = SamplingParams(temperature=0, max_tokens=10, ignore_eos=True)


def seeded(seed: int) -> SamplingParams:
    return SamplingParams(temperature=0.9, top_k=50, seed=seed, max_tokens=10, ignore_eos=True)


@pytest.fixture(scope="module", params=["Q2_K", "Q3_K_M", "IQ3_S"])
def low_bit_file(request, tmp_path_factory):
    return tiny_gguf(tmp_path_factory, request.param, seed=7, folder="low_bit")


@pytest.fixture(scope="module", params=devices())
def loaded(request, low_bit_file):
    yield from loaded_model(request.param, low_bit_file)


@pytest.fixture
def make_engine(loaded):
    yield from engine_factory(loaded, "low-bit", 256)


async def test_staggered_streams_equal_their_solo_runs(loaded, make_engine):
    _, _, model = loaded
    tok = model.tokenizer.encode
    prompts = [tok("The quick brown fox jumps over the lazy dog. " * 3), tok("Once upon a time"),
               tok("1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12"), tok("Hello")]
    jobs = [Job(prompts[0], GREEDY, at_step=0, name="A"), Job(prompts[1], seeded(3), at_step=1, name="B"),
            Job(prompts[2], GREEDY, at_step=4, name="C"), Job(prompts[3], seeded(11), at_step=7, name="D")]
    expected = [(await solo(make_engine(batch=1, chunk=64), job.prompt, job.params)).token_ids for job in jobs]
    results, steps = await run_script(make_engine(batch=3, chunk=8), jobs)
    assert any(s.prefill and s.decode for s in steps), "no step mixed prefill and decode"
    for job, result, want in zip(jobs, results, expected):
        assert result.token_ids == want, f"request {job.name} ({len(job.prompt)} tokens) diverged from its solo run"
    assert len({tuple(t) for t in expected}) == len(expected), f"streams are degenerate: {expected}"

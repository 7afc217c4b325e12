"""(gpu) Strata's promise with programmatic dependent launch (libstrata/src/cuda/cuda_pdl.cuh): the
engine's recorded decode graphs with STRATA_PDL=1 (the default on Hopper) and STRATA_PDL=0 give
every request the same tokens and the same logprobs, bit for bit, and both equal the request's solo
run. Tiny `strata synth --pure` models: Q4_0 (the integer matmul kernels) and Q4_K (the tensor-core
matmul); four requests admitted at staggered steps, greedy and seeded, so steps mix prefill chunks
and decode rows. CUDA only: the CPU backend has no kernel launches to make programmatic.

The same holds with STRATA_INT_EARLY_STAGES=1 (the dot kernels request every stage buffer's part of their
first tile before the wait) and STRATA_ATTENTION_EARLY_KV=1 (decode attention asks L2 for its first K and V
rows before the wait): under STRATA_INT_DOT_SHAPE=8:1 (one slice a part) with
STRATA_HANDOFF_LOCAL_PARTS=0 (so no producer takes the hand-off's own CTA shape), the tiny model's
512-wide down has two parts, and every request still equals its solo run and the default's tokens and
logprobs."""

import pytest

from strata import _ffi
from strata.engine.sampling import SamplingParams

from .harness import Job, run_script, solo
from .synth_models import engine_factory, loaded_model, tiny_gguf

pytestmark = [pytest.mark.exactness, pytest.mark.gpu]

GREEDY = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True, logprobs=True)


def seeded(seed: int) -> SamplingParams:
    return SamplingParams(temperature=0.9, top_p=0.95, seed=seed, max_tokens=12, ignore_eos=True, logprobs=True)


@pytest.fixture(scope="module", params=["Q4_0", "Q4_K"])
def model_file(request, tmp_path_factory):
    return tiny_gguf(tmp_path_factory, request.param, seed=9, folder="pdl")


@pytest.fixture(scope="module")
def loaded(model_file):
    if _ffi.cuda_device_count() == 0:
        pytest.skip("no CUDA device")
    yield from loaded_model("cuda:0", model_file)


@pytest.fixture
def make_engine(loaded):
    yield from engine_factory(loaded, "pdl", 256)


def fingerprint(completion):
    """Token ids and every logprob as exact floats (repr round-trips a float's bits)."""
    return tuple(completion.token_ids), repr(completion.logprobs)


async def test_pdl_on_and_off_equal_solo_runs(loaded, make_engine, monkeypatch):
    _, _, model = loaded
    tok = model.tokenizer.encode
    prompts = [tok("The quick brown fox jumps over the lazy dog. " * 4), tok("Once upon a time, "),
               tok("1, 2, 3, 4, 5, 6, 7, 8, 9, 10, " * 3), tok("Hello there! How are you doing today?")]
    jobs = [Job(prompts[0], GREEDY, at_step=0, name="A"), Job(prompts[1], seeded(3), at_step=1, name="B"),
            Job(prompts[2], GREEDY, at_step=2, name="C"), Job(prompts[3], seeded(11), at_step=4, name="D")]
    settings = {"PDL on": {"STRATA_PDL": "1"}, "PDL off": {"STRATA_PDL": "0"},
                "early stages": {"STRATA_PDL": "1", "STRATA_INT_DOT_SHAPE": "8:1", "STRATA_HANDOFF_LOCAL_PARTS": "0",
                                 "STRATA_INT_EARLY_STAGES": "1", "STRATA_ATTENTION_EARLY_KV": "1"}}
    runs = {}
    for name, env in settings.items():
        for var in ("STRATA_INT_DOT_SHAPE", "STRATA_HANDOFF_LOCAL_PARTS", "STRATA_INT_EARLY_STAGES",
                    "STRATA_ATTENTION_EARLY_KV"):
            monkeypatch.delenv(var, raising=False)
        for var, value in env.items():
            monkeypatch.setenv(var, value)
        solos = [fingerprint(await solo(make_engine(batch=1, chunk=64), job.prompt, job.params)) for job in jobs]
        results, steps = await run_script(make_engine(batch=4, chunk=16), jobs)
        assert any(s.prefill and s.decode for s in steps), "no step mixed prefill and decode"
        for job, result, want in zip(jobs, results, solos):
            assert fingerprint(result) == want, f"{name} ({env}): request {job.name} diverged from its solo run"
        runs[name] = solos
    # Greedy streams of a random model may repeat one token; their logprobs still differ.
    assert len(set(runs["PDL on"])) == len(jobs), f"streams are degenerate: {runs['PDL on']}"
    for name in settings:
        assert runs[name] == runs["PDL on"], f"{name} and PDL on give different tokens or logprobs"

"""Strata's promise with the activation hand-off between a layer's matmuls (STRATA_HANDOFF; strata.h,
docs/cuda_backend.md): with the hand-off on (local: CUDA's one-row kernel rounds the next matmul's int8
activations from its own outputs in its epilogue where it can; 1: the CTA completing each chunk of them does), as
pre-pass launches (prepass) and off (the default), and local with each layer's one-row o, gate_up and down in
a matmul chain (STRATA_MATMUL_CHAIN=1: one CUDA kernel with grid barriers where they qualify; 2: the chain also
holds the next layer's qkv), every request gets
the same tokens and logprobs, bit for bit, and each equals its solo run. Four requests admitted at
staggered steps, greedy and seeded, so steps mix prefill chunks (many rows: the pre-pass route) and
decode rows (one row: the epilogue route), through the engine's recorded decode graphs. Tiny `strata
synth` models: pure Q4_0 (one matrix per [q | k | v] and [gate | up]), pure Q4_1 (the default model's type, on
the integer path since 2026-12-04) and llama-quantize's Q4_K_M mix (stacked runs of one type: several consumers
of one hand-off). On the CPU the flags are checked and
ignored (the same plan runs through the API's checks)."""

import pytest

from strata.engine.sampling import SamplingParams
from strata.models.decoder import LayerHandoff

from .harness import Job, run_script, solo
from .synth_models import engine_factory, loaded_model, tiny_gguf

pytestmark = pytest.mark.exactness

GREEDY = SamplingParams(temperature=0, max_tokens=10, ignore_eos=True, logprobs=True)


def seeded(seed: int) -> SamplingParams:
    return SamplingParams(temperature=0.9, top_p=0.95, seed=seed, max_tokens=10, ignore_eos=True, logprobs=True)


@pytest.fixture(scope="module", params=[("Q4_0", True), ("Q4_1", True), ("Q4_K_M", False)], ids=["Q4_0", "Q4_1", "Q4_K_M"])
def model_file(request, tmp_path_factory):
    dtype, pure = request.param
    return tiny_gguf(tmp_path_factory, dtype, seed=13, folder="handoff", pure=pure)


def fingerprint(completion):
    """Token ids and every logprob as exact floats (repr round-trips a float's bits)."""
    return tuple(completion.token_ids), repr(completion.logprobs)


async def run_mode(device, path, mode, monkeypatch):
    # local-chain: the local hand-off with each layer's one-row o, gate_up and down in a matmul chain
    # (STRATA_MATMUL_CHAIN; on CUDA one kernel with grid barriers where they pass their blocks locally);
    # local-chain2: the chain also holds the next layer's qkv matmuls
    chain = "2" if mode.endswith("-chain2") else "1" if mode.endswith("-chain") else "0"
    monkeypatch.setenv("STRATA_MATMUL_CHAIN", chain)
    mode = mode.removesuffix("-chain2").removesuffix("-chain")
    monkeypatch.setenv("STRATA_HANDOFF", mode)
    gen = loaded_model(device, path)
    loaded = next(gen)
    make_gen = engine_factory(loaded, "handoff", 256)
    make_engine = next(make_gen)
    try:
        _, _, model = loaded
        plan = model.decoder._handoff
        if mode == "off":
            assert plan == []
        else:
            assert plan and all(isinstance(h, LayerHandoff) for h in plan), "the decoder planned no hand-off"
        tok = model.tokenizer.encode
        prompts = [tok("The quick brown fox jumps over the lazy dog. " * 4), tok("Once upon a time, "),
                   tok("1, 2, 3, 4, 5, 6, 7, 8, 9, 10, " * 3), tok("Hello there! How are you doing today?")]
        jobs = [Job(prompts[0], GREEDY, at_step=0, name="A"), Job(prompts[1], seeded(3), at_step=1, name="B"),
                Job(prompts[2], GREEDY, at_step=2, name="C"), Job(prompts[3], seeded(11), at_step=4, name="D")]
        solos = [fingerprint(await solo(make_engine(batch=1, chunk=64), job.prompt, job.params)) for job in jobs]
        results, steps = await run_script(make_engine(batch=4, chunk=16), jobs)
        assert any(s.prefill and s.decode for s in steps), "no step mixed prefill and decode"
        for job, result, want in zip(jobs, results, solos):
            assert fingerprint(result) == want, f"STRATA_HANDOFF={mode}: request {job.name} diverged from its solo run"
        return solos
    finally:
        for g in (make_gen, gen):
            try:
                next(g)
            except StopIteration:
                pass


async def test_handoff_modes_equal_solo_runs(device, model_file, monkeypatch):
    modes = ("local", "local-chain", "local-chain2", "1", "prepass", "off")
    runs = {mode: await run_mode(device, model_file, mode, monkeypatch) for mode in modes}
    assert len(set(runs["local"])) == 4, f"streams are degenerate: {runs['local']}"
    assert all(runs[m] == runs["off"] for m in modes), "the hand-off modes give different tokens or logprobs"

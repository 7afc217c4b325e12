"""Strata's promise through the integer matmul's many-row kernel: on Q4_0, Q8_0, Q4_K and Q6_K models,
steps of 64 rows and more (long prompts read in big chunks, prefill beside decode) can run
CUDA's int8 tile kernel (libstrata/src/cuda/cuda_int_mma_tiles.cu; at `auto` only on matrices
large enough, so the tiny model's matrices need STRATA_INT_MATMUL=tiles), and every request
must still get the tokens it gets alone.

Tiny random-weight llama files written by `strata synth --pure` hold every matrix in one type;
the Q4_K_M file is llama-quantize's mix (Q4_K, and Q6_K for the output and layer 1's attn_v /
ffn_down: both on the integer path, Q6_K through the dp4a kernel below the tile kernel's rows),
so one step runs both types' kernels.
Solo runs read each prompt (150 to 230 tokens) in one chunk; the batched run admits four
requests at staggered steps and reads prompts in chunks of 96 beside the others' decode rows,
so the matmuls of a step see different row counts and tile positions. On CUDA the batched run
is repeated with STRATA_INT_MATMUL=legacy (no tile kernel), =tiles (the tile kernel at every
row count, single-row decode included), =tiles:128x16d0o, =tiles:128x32d2o and =tiles:128x48d0o (its
16-, 32- and 48-row tiles, which auto takes for 9-48 rows on wide matrices only, at every row count), =tiles:32x64d2ok and
=tiles:64x64d2ok (the K split: two warp groups on alternate slices, at every row count), =rows (the few-row kernel, cuda_int_rows.cu, at every row
count: at `auto` it takes 2 to 32 rows at k > 1024 on matrices of at most 4096 outputs only,
beyond this model) and =norows, and with the gemv kernel (cuda_int_gemv.cu: 1 to 8 rows, off by
default) for 1-8 rows (STRATA_INT_GEMV=8, after the pre-pass and, with STRATA_INT_GEMV_FUSE=1,
quantizing its rows itself), single rows only (=1) and 1-4 rows (=4), and with the L2 hint for the
next matmul's weights (STRATA_L2_PREFETCH_MB=16), other one-row launch shapes (STRATA_INT_DOT_SHAPE) and
the warpgroup MMA kernel (cuda_int_wgmma.cu, STRATA_INT_WGMMA=all in both of its configurations, and =1),
and the tile kernel with its idle warps skipping their work (STRATA_INT_TILES_SKIP_DEAD=1, =tiles), and
the tail split (STRATA_INT_TILES_TAIL=127:always at auto, and =32, where it pays: the rows of a step past its last whole row tile on a
launch of their own, e.g. 32 of a 96-row chunk on 64-row tiles):
all must equal the solo runs bit for bit. The streams must
differ from each other (a degenerate model would make every check trivial).
"""

import pytest

from strata.engine.sampling import SamplingParams

from .harness import Job, run_script, solo
from .synth_models import devices, engine_factory, loaded_model, tiny_gguf

pytestmark = [pytest.mark.exactness]

GREEDY = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)


def seeded(seed: int) -> SamplingParams:
    return SamplingParams(temperature=0.9, top_k=50, seed=seed, max_tokens=8, ignore_eos=True)


@pytest.fixture(scope="module", params=["Q4_0", "Q8_0", "Q4_K", "Q6_K", "Q4_K_M"])
def model_file(request, tmp_path_factory):
    mix = request.param == "Q4_K_M"
    return tiny_gguf(tmp_path_factory, request.param, seed=5, folder="int_tiles", pure=not mix)


@pytest.fixture(scope="module", params=devices())
def loaded(request, model_file):
    yield from loaded_model(request.param, model_file)


@pytest.fixture
def make_engine(loaded):
    yield from engine_factory(loaded, "int-tiles", 512)


def long_prompts(tok):
    texts = ["The quick brown fox jumps over the lazy dog. ", "Once upon a time, in a land far away, ",
             "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, ", "Hello there! How are you doing today? "]
    lengths = [230, 150, 200, 170]
    out = []
    for text, n in zip(texts, lengths):
        ids = tok(text * 40)
        assert len(ids) >= n
        out.append(ids[:n])
    return out


async def test_many_row_steps_equal_solo_runs(loaded, make_engine, monkeypatch):
    device, _, model = loaded
    prompts = long_prompts(model.tokenizer.encode)
    jobs = [Job(prompts[0], GREEDY, at_step=0, name="A"), Job(prompts[1], seeded(3), at_step=1, name="B"),
            Job(prompts[2], GREEDY, at_step=3, name="C"), Job(prompts[3], seeded(11), at_step=5, name="D")]
    expected = [(await solo(make_engine(batch=1, chunk=256), job.prompt, job.params)).token_ids for job in jobs]
    assert len({tuple(t) for t in expected}) == len(expected), f"streams are degenerate: {expected}"
    # tiles:128x16d0o, tiles:128x32d2o and tiles:128x48d0o: the 16-, 32- and 48-row tiles (at auto only for 9-48
    # rows on matrices of at least 128 x SMs outputs, beyond this model) forced at every row count.
    kernels = (["auto", "legacy", "tiles", "rows", "norows", "tiles:128x16d0o", "tiles:128x32d2o", "tiles:128x48d0o",
                "tiles:32x64d2ok", "tiles:64x64d2ok"]
               if device.startswith("cuda") else ["auto"])
    settings = [(kernel, None) for kernel in kernels]
    if device.startswith("cuda"):  # the gemv kernel (off by default) for 1-8 rows, single rows, 1-4 rows,
        # and for 1-8 rows quantizing its rows itself (STRATA_INT_GEMV_FUSE=1: no pre-pass launch)
        settings += [("auto", "8"), ("norows", "1"), ("auto", "4"), ("auto", "8+fuse")]
    for kernel, gemv in settings:
        monkeypatch.setenv("STRATA_INT_MATMUL", kernel)
        monkeypatch.setenv("STRATA_INT_GEMV_FUSE", "1" if gemv and gemv.endswith("+fuse") else "0")
        gemv = gemv.removesuffix("+fuse") if gemv else gemv
        if gemv is None:
            monkeypatch.delenv("STRATA_INT_GEMV", raising=False)
        else:
            monkeypatch.setenv("STRATA_INT_GEMV", gemv)
        results, steps = await run_script(make_engine(batch=4, chunk=96), jobs)
        assert any(s.prefill and s.decode for s in steps), "no step mixed prefill and decode"
        for job, result, want in zip(jobs, results, expected):
            assert result.token_ids == want, (
                f"STRATA_INT_MATMUL={kernel} STRATA_INT_GEMV={gemv}: request {job.name} ({len(job.prompt)} tokens) diverged from its solo run")
    if not device.startswith("cuda"):
        return
    # A cache hint and the one-row kernel's launch shapes: neither may move a bit (solo one-row decode
    # and the batched script, against the default solo runs).
    monkeypatch.setenv("STRATA_INT_MATMUL", "auto")
    monkeypatch.delenv("STRATA_INT_GEMV", raising=False)
    monkeypatch.setenv("STRATA_INT_GEMV_FUSE", "0")
    # The wgmma kernel (cuda_int_wgmma.cu, off by default; Q4_0, Q8_0, Q4_1 and Q4_K: the Q6_K file keeps its
    # kernels, the Q4_K_M mix runs both) at every row count in both configurations, and where its tiles fill the GPU (=1, as an A/B runs it).
    for var, value in [("STRATA_L2_PREFETCH_MB", "16"), ("STRATA_INT_DOT_SHAPE", "legacy"),
                       ("STRATA_INT_DOT_SHAPE", "4:32"), ("STRATA_INT_WGMMA", "all"), ("STRATA_INT_WGMMA", "all+banks1"),
                       ("STRATA_INT_WGMMA", "1"), ("STRATA_INT_TILES_SKIP_DEAD", "1"),
                       ("STRATA_INT_TILES_TAIL", "127:always"), ("STRATA_INT_TILES_TAIL", "32")]:
        # The tile kernel's idle warps (a partial last row tile's warps with no live row skip their work):
        # forced onto the tile kernel at every row count, so the tiny model's matrices take it.
        monkeypatch.setenv("STRATA_INT_MATMUL", "tiles" if var == "STRATA_INT_TILES_SKIP_DEAD" else "auto")
        if value.endswith("+banks1"):
            value = value.removesuffix("+banks1")
            monkeypatch.setenv("STRATA_INT_WGMMA_BANKS", "1")
        else:
            monkeypatch.delenv("STRATA_INT_WGMMA_BANKS", raising=False)
        monkeypatch.setenv(var, value)
        alone = await solo(make_engine(batch=1, chunk=256), jobs[1].prompt, jobs[1].params)
        assert alone.token_ids == expected[1], f"{var}={value}: the solo run of B changed"
        results, _ = await run_script(make_engine(batch=4, chunk=96), jobs)
        for job, result, want in zip(jobs, results, expected):
            assert result.token_ids == want, f"{var}={value}: request {job.name} diverged from its solo run"
        monkeypatch.delenv(var)

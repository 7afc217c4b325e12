"""The integer matmul's activation rounding computed in two places gives the same bits.

CUDA's integer path (Q4_0, Q8_0) rounds x to int8 blocks either inside the dot kernel (1 to 8
row tiles with few blocks to round: one launch) or in a separate pre-pass (longer rows, and the
tensor-core kernels: two launches); docs/cuda_backend.md, "integer matmul". Here each row alone
must equal the same row inside batches that take the other route. On an H200: at k = 16384 one
row is rounded inside the dot kernel and 3, 8 or 12 rows by the pre-pass (before the few-row
kernel, cuda_int_rows.cu); at k = 4096 up to 4 rows inside, 5 to 16 rows by the pre-pass before
the few-row kernel, 300 rows by the pre-pass before the tile kernel (cuda_int_mma_tiles.cu). Every prologue, bias and accumulate,
misaligned x rows, a zero row and a large value. On the CPU (one arithmetic for every batch) the same checks hold trivially.
"""

import numpy as np
import pytest

from test_matmul_ex import EPS, PROLOGUES, run_ex, width_of
from kernel_refs import make_weights
from strata import _ffi as S

pytestmark = pytest.mark.exactness
P = S.MatmulPrologue


@pytest.fixture(autouse=True)
def fuse_rounds(monkeypatch):
    """The fused route is off by default (STRATA_INT_FUSE_ROUNDS, read by libstrata at each call)."""
    monkeypatch.setenv("STRATA_INT_FUSE_ROUNDS", "8")


@pytest.mark.parametrize("prologue", PROLOGUES, ids=lambda p: p.name)
@pytest.mark.parametrize("dtype", [S.DType.Q4_0, S.DType.Q8_0], ids=lambda d: d.name)
def test_rows_alone_equal_rows_in_batches_of_either_route(ctx, rng, dtype, prologue):
    k, n_out = 16384, 45
    raw, _ = make_weights(rng, dtype, n_out, k)
    width = width_of(prologue, k)
    x = rng.standard_normal((12, width + 1), dtype=np.float32)  # +1: misaligned rows
    x[2] = 0.0
    x[4, 5] = 3e4
    norm = (1 + 0.1 * rng.standard_normal(k)).astype(np.float32) if prologue == P.RMSNORM else None
    bias = rng.standard_normal(n_out).astype(np.float32)
    y0 = rng.standard_normal((12, n_out)).astype(np.float32)

    def run(rows):
        return run_ex(ctx, x[rows], k, raw, dtype, n_out, prologue, norm, bias, y0=y0[rows], accumulate=True,
                      stride=width + 1)

    full = run(np.arange(12))  # two tiles of 8 rows, the second partial
    for r in range(12):
        assert np.array_equal(run(np.array([r])).view(np.uint32), full[r:r + 1].view(np.uint32)), f"row {r} alone"
    for rows in (np.arange(3), np.array([11, 2, 7]), np.arange(8)):
        assert np.array_equal(run(rows).view(np.uint32), full[rows].view(np.uint32)), f"rows {list(rows)}"


@pytest.mark.parametrize("prologue", PROLOGUES, ids=lambda p: p.name)
def test_small_k_rows_alone_equal_the_tensor_core_batch(ctx, rng, prologue):
    """k = 4096, the 8B model's q/o/gate_up."""
    k, n_out, n = 4096, 1100, 300
    raw, _ = make_weights(rng, S.DType.Q4_0, n_out, k)
    width = width_of(prologue, k)
    x = rng.standard_normal((n, width), dtype=np.float32)
    norm = (1 + 0.1 * rng.standard_normal(k)).astype(np.float32) if prologue == P.RMSNORM else None

    def run(rows):
        return run_ex(ctx, x[rows], k, raw, S.DType.Q4_0, n_out, prologue, norm)

    full = run(np.arange(n))
    for m in (1, 2, 4, 5, 8, 9, 16):
        assert np.array_equal(run(np.arange(m)).view(np.uint32), full[:m].view(np.uint32)), f"batch of {m}"
    assert np.array_equal(run(np.array([n - 1])).view(np.uint32), full[n - 1:].view(np.uint32)), "last row alone"


def test_one_launch_for_few_rows(ctx, rng, backend, monkeypatch):
    """A recorded integer matmul runs one kernel for 1 row of 576 values and 8 rows of 2048 (the dot
    kernel rounds its own rows) and, on CUDA, two for 8 and 300 rows of 576 (the pre-pass, then the
    tile kernel, which takes short k from 2 rows on) and for 8 rows of 16384 values (the pre-pass,
    then the few-row kernel, which takes 2 to 32 rows at longer k). The routing without the 1-8-row
    gemv kernel (STRATA_INT_GEMV=0; its own launches are tests/kernels/test_int_gemv.py's)."""
    monkeypatch.setenv("STRATA_INT_GEMV", "0")
    n_out = 1100
    cuda = backend.startswith("cuda")
    raw, _ = make_weights(rng, S.DType.Q4_0, n_out, 16384)
    w = S.Buffer.from_array(ctx, raw)
    x = S.Buffer.from_array(ctx, rng.standard_normal((300, 16384), dtype=np.float32))
    y = S.Buffer(ctx, 300 * n_out * 4)
    params = S.matmul_params(P.NONE, False, EPS, None, 0, None, 0, 0)
    for rows, k, want in ((1, 576, 1), (8, 2048, 1), (8, 576, 2 if cuda else 1), (300, 576, 2 if cuda else 1),
                          (8, 16384, 2 if cuda else 1)):
        ctx.graph_begin()
        S.matmul_ex(ctx, params, x, 0, rows, k, w, 0, S.DType.Q4_0, n_out, y, 0)  # x rows of k values
        graph = ctx.graph_end()
        assert graph.kernel_count() == want, f"{rows} rows of {k}"
        graph.close()
    for b in (w, x, y):
        b.close()


@pytest.mark.parametrize("ctas", ["1", "2"])
@pytest.mark.parametrize("prologue", PROLOGUES, ids=lambda p: p.name)
@pytest.mark.parametrize("dtype", [S.DType.Q4_0, S.DType.Q8_0], ids=lambda d: d.name)
def test_fused_grid_of_few_ctas_per_sm_equals_the_pre_pass(ctx, rng, monkeypatch, dtype, prologue, ctas):
    """STRATA_INT_FUSE_CTAS caps the fused dot kernel's grid at 1 or 2 CTAs per SM, so each CTA rounds its
    row once and walks many output tiles (8,200 outputs: ~513 tiles of 16, several a CTA on any GPU of
    fewer than 256 SMs). One row at k = 4096 (the 8B's o / qkv / gate_up) equals the pre-pass route's
    bits, which STRATA_INT_FUSE_ROUNDS=0 takes; the last tile is partial (8,200 is not a multiple of 16)."""
    k, n_out = 4096, 8200
    raw, _ = make_weights(rng, dtype, n_out, k)
    x = rng.standard_normal((1, width_of(prologue, k)), dtype=np.float32)
    x[0, 7] = 3e4
    norm = (1 + 0.1 * rng.standard_normal(k)).astype(np.float32) if prologue == P.RMSNORM else None
    bias = rng.standard_normal(n_out).astype(np.float32)
    y0 = rng.standard_normal((1, n_out)).astype(np.float32)
    monkeypatch.setenv("STRATA_INT_FUSE_CTAS", ctas)
    assert recorded_kernels(ctx, raw, dtype, n_out, k) == 1  # the fused kernel runs: no pre-pass launch
    fused = run_ex(ctx, x, k, raw, dtype, n_out, prologue, norm, bias, y0=y0, accumulate=True)
    monkeypatch.setenv("STRATA_INT_FUSE_ROUNDS", "0")
    two_launches = run_ex(ctx, x, k, raw, dtype, n_out, prologue, norm, bias, y0=y0, accumulate=True)
    assert np.array_equal(fused.view(np.uint32), two_launches.view(np.uint32))


def recorded_kernels(ctx, raw, dtype, n_out, k):
    """Kernels of one recorded one-row matmul (NONE prologue) of these weights under the current settings."""
    w = S.Buffer.from_array(ctx, raw)
    x = S.Buffer.from_array(ctx, np.ones((1, k), np.float32))
    y = S.Buffer(ctx, n_out * 4)
    params = S.matmul_params(P.NONE, False, EPS, None, 0, None, 0, 0)
    ctx.graph_begin()
    S.matmul_ex(ctx, params, x, 0, 1, k, w, 0, dtype, n_out, y, 0)
    graph = ctx.graph_end()
    try:
        return graph.kernel_count()
    finally:
        graph.close()
        for b in (w, x, y):
            b.close()

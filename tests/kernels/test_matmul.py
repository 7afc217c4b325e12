"""strata_matmul against float64 NumPy for every weight dtype, with bias,
accumulation and operand offsets; and batch invariance (each output row bit
for bit the same for batch sizes 1..N and any row order).

Tolerance (kernel_refs.matmul_tolerance): the weights are dequantized exactly
(float32 values of the GGUF blocks, the same as gguf.quants.dequantize). On the
CPU (and for F32 weights on CUDA) the only error is float32 accumulation over
k: |y - ref| <= 3e-6 * sqrt(k) * sum_i |x_i * w_i| + 1e-30 (about 1e-4 of the
absolute-value sum for k = 1536, far below the error a mis-decoded block or a
wrong scale gives). CUDA's tensor cores round each activation block to f16
(bf16 for BF16 weights) after a power-of-two scale: 2^-11 (2^-8) of the sum.
CUDA's integer path (Q4_0, Q8_0, Q4_1, Q4_K, Q6_K) rounds each 32-value block of x to int8; the
reference models that rounding (kernel_refs.int8_activations), so only the
float fold of exact block integers is left as error; a hand-built row checks
the rounding rule itself (ties to even, zero blocks, the clamp) on CUDA, and
that the CPU does not round (its activations stay float32).
"""

import numpy as np
import pytest

from kernel_refs import (BLOCK_VALUES, INT8_DTYPES, WEIGHT_DTYPES, buffer_of, int8_accumulation_tolerance,
                         int8_activations, make_weights, matmul_tolerance)
from strata import _ffi as S

# (n_rows, k, n_out) per block size; k must be a multiple of the block.
SHAPES = {
    1: [(1, 1, 1), (3, 7, 5), (5, 33, 9), (2, 100, 31), (17, 576, 13)],
    32: [(1, 32, 1), (3, 64, 7), (5, 96, 45), (17, 576, 11), (2, 1536, 5)],
    256: [(1, 256, 3), (6, 512, 7), (13, 768, 5)],
}


def run_matmul(ctx, x, w_raw, dtype, n_out, bias=None, y0=None, accumulate=False, x_pad=0, w_pad=0):
    n_rows, k = x.shape
    bx, x_off = buffer_of(ctx, x.astype(np.float32), x_pad)
    bw, w_off = buffer_of(ctx, w_raw, w_pad)
    bb = None
    if bias is not None:
        bb, b_off = buffer_of(ctx, bias.astype(np.float32), 8)
    y_init = np.zeros((n_rows, n_out), np.float32) if y0 is None else y0.astype(np.float32)
    by, y_off = buffer_of(ctx, y_init, 12)
    S.matmul(ctx, bx, x_off, n_rows, k, bw, w_off, dtype, n_out, bb, 8 if bb else 0, by, y_off, accumulate)
    y = by.to_numpy(np.float32, (n_rows, n_out), y_off)
    for b in (bx, bw, bb, by):
        if b is not None:
            b.close()
    return y


def check_close(y, ref, bound, k, device="cpu", dtype=S.DType.F32, xw=None):
    tol = matmul_tolerance(device, dtype, k, bound, xw=xw)
    err = np.abs(y.astype(np.float64) - ref)
    assert (err <= tol).all(), f"max error {err.max():.3g}, worst ratio {(err / tol).max():.3g}"


@pytest.mark.parametrize("dtype", WEIGHT_DTYPES, ids=lambda d: d.name)
def test_matmul_matches_float64(ctx, rng, dtype):
    for n_rows, k, n_out in SHAPES[BLOCK_VALUES[dtype]]:
        raw, w = make_weights(rng, dtype, n_out, k)
        x = rng.standard_normal((n_rows, k), dtype=np.float32)
        y = run_matmul(ctx, x, raw, dtype, n_out, x_pad=4 * int(rng.integers(0, 5)), w_pad=(4 if dtype == S.DType.F32 else 2) * int(rng.integers(0, 9)))
        if ctx.device.startswith("cuda") and dtype in INT8_DTYPES:
            xq = int8_activations(x)
            err = np.abs(y.astype(np.float64) - xq @ w.T)
            tol = int8_accumulation_tolerance(k, np.abs(xq) @ np.abs(w).T)
            assert (err <= tol).all(), f"max error {err.max():.3g}, worst ratio {(err / tol).max():.3g}"
            continue
        ref = x.astype(np.float64) @ w.T
        check_close(y, ref, np.abs(x.astype(np.float64)) @ np.abs(w).T, k, ctx.device, dtype, (x.astype(np.float64), w))


@pytest.mark.parametrize("dtype", INT8_DTYPES, ids=lambda d: d.name)
def test_int8_rounding_rule(ctx, rng, dtype):
    """CUDA's activation rounding on its integer path, seen through the products: a block
    whose max is 127 has step 1 (halves round to even, both signs), a zero block contributes
    nothing, a block with max 63.5 has step 0.5 (x/0.5 ties again), and a random block
    matches the model. The CPU keeps x in float32: its result is x @ w, not the rounded one."""
    k, n_out = (128 if BLOCK_VALUES[dtype] == 32 else 256), 9  # Q4_K: one super-block (the rest zero blocks)
    x = np.zeros((1, k), np.float32)
    x[0, :12] = [127, 2.5, 3.5, -2.5, -3.5, 0.5, -0.5, 1.5, 126.5, -126.5, 1e-3, -7.25]
    x[0, 64:70] = [63.5, 0.25, 0.75, -0.25, 1.25, -63.5]   # step 0.5: x/step = 127, .5, 1.5, -.5, 2.5, -127
    x[0, 96:128] = rng.standard_normal(32).astype(np.float32)
    expect_q = np.zeros(k)
    expect_q[:12] = [127, 2, 4, -2, -4, 0, -0, 2, 126, -126, 0, -7]
    expect_q[64:70] = [127, 0, 2, -0, 2, -127]
    raw, w = make_weights(rng, dtype, n_out, k)
    y = run_matmul(ctx, x, raw, dtype, n_out).astype(np.float64)
    xq = int8_activations(x)
    assert np.array_equal(xq[0, :96], expect_q[:96] * np.repeat([1.0, 1.0, 0.5], 32))
    # The two answers are far apart compared with either tolerance, so each check can fail.
    rounded, exact = xq @ w.T, x.astype(np.float64) @ w.T
    assert np.abs(rounded - exact).max() > 1e-2
    if ctx.device.startswith("cuda"):
        assert (np.abs(y - rounded) <= int8_accumulation_tolerance(k, np.abs(xq) @ np.abs(w).T)).all()
    else:
        bound = np.abs(x.astype(np.float64)) @ np.abs(w).T
        assert (np.abs(y - exact) <= matmul_tolerance("cpu", dtype, k, bound)).all()


@pytest.mark.parametrize("dtype", [S.DType.F32, S.DType.Q4_1, S.DType.Q6_K], ids=lambda d: d.name)
def test_matmul_bias_and_accumulate(ctx, rng, dtype):
    k = 256 if BLOCK_VALUES[dtype] == 256 else 64
    n_rows, n_out = 3, 7
    raw, w = make_weights(rng, dtype, n_out, k)
    x = rng.standard_normal((n_rows, k), dtype=np.float32)
    bias = rng.standard_normal(n_out, dtype=np.float32)
    y0 = rng.standard_normal((n_rows, n_out), dtype=np.float32)
    bound = np.abs(x.astype(np.float64)) @ np.abs(w).T + np.abs(bias) + np.abs(y0)
    plain = x.astype(np.float64) @ w.T
    dev, xw = ctx.device, (x.astype(np.float64), w)
    check_close(run_matmul(ctx, x, raw, dtype, n_out, bias=bias), plain + bias, bound, k, dev, dtype, xw)
    check_close(run_matmul(ctx, x, raw, dtype, n_out, y0=y0, accumulate=True), plain + y0, bound, k, dev, dtype, xw)
    check_close(run_matmul(ctx, x, raw, dtype, n_out, bias=bias, y0=y0, accumulate=True), plain + bias + y0, bound,
                k, dev, dtype, xw)
    # accumulate=False overwrites whatever y held.
    check_close(run_matmul(ctx, x, raw, dtype, n_out, y0=y0), plain, bound, k, dev, dtype, xw)


@pytest.mark.exactness
@pytest.mark.parametrize("dtype", WEIGHT_DTYPES, ids=lambda d: d.name)
def test_matmul_batch_invariant(ctx, rng, dtype):
    k = {1: 67, 32: 160, 256: 512}[BLOCK_VALUES[dtype]]
    n_rows, n_out = 11, 37
    raw, _ = make_weights(rng, dtype, n_out, k)
    x = rng.standard_normal((n_rows, k), dtype=np.float32)
    full = run_matmul(ctx, x, raw, dtype, n_out)
    for n in range(1, n_rows + 1):
        part = run_matmul(ctx, x[:n], raw, dtype, n_out)
        assert np.array_equal(part.view(np.uint32), full[:n].view(np.uint32)), f"batch of {n} rows differs"
    for _ in range(3):
        order = rng.permutation(n_rows)
        shuffled = run_matmul(ctx, x[order], raw, dtype, n_out)
        assert np.array_equal(shuffled.view(np.uint32), full[order].view(np.uint32)), "row order changed a result"
    # Every row alone, also placed at a different offset in its buffer.
    for r in range(n_rows):
        alone = run_matmul(ctx, x[r:r + 1], raw, dtype, n_out, x_pad=4 * (r + 1))
        assert np.array_equal(alone[0].view(np.uint32), full[r].view(np.uint32))


def test_matmul_large_batch_invariant_default_shape(ctx, rng):
    """The default model's Q8_0 output shape at prefill size, rows against solo rows."""
    raw, _ = make_weights(rng, S.DType.Q8_0, 301, 576)
    x = rng.standard_normal((70, 576), dtype=np.float32)
    full = run_matmul(ctx, x, raw, S.DType.Q8_0, 301)
    for r in rng.choice(70, 6, replace=False):
        alone = run_matmul(ctx, x[r:r + 1], raw, S.DType.Q8_0, 301)
        assert np.array_equal(alone[0].view(np.uint32), full[r].view(np.uint32))

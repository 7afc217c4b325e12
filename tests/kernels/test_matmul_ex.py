"""strata_matmul_ex: the fused prologues (none, RMSNorm, SiLU-gated product)
in front of the matmul, against float64 NumPy for every weight dtype, with
bias, accumulation, odd n_out, k from 32 to 14336 and misaligned x rows; bit
identity of every row across batch sizes that cross each kernel-path boundary
(CUDA: decode tiles of 8 rows up to 16 rows, wide tiles of 16 rows up to 96,
then of 64) and across row orders; the CPU's fused result is bit for bit
rmsnorm-then-matmul; y rows at a stride (y_row_stride: one part of a wider
row, as the decoder's [q | k | v]) give the dense call's bits and leave the
other columns alone; argument errors.

Tolerances: kernel_refs.matmul_tolerance (per backend and weight precision,
derived there), applied to sum_i |x'_i * w_i| with x' the float64 prologue.
"""

import numpy as np
import pytest

from kernel_refs import BLOCK_VALUES, WEIGHT_DTYPES, buffer_of, make_weights, matmul_tolerance
from strata import _ffi as S

P = S.MatmulPrologue
PROLOGUES = [P.NONE, P.RMSNORM, P.SILU_MUL]
EPS = 1e-5


def prologue_f64(x, prologue, k, norm):
    """x' (float64) of rows x ([n, width] float32)."""
    x = x.astype(np.float64)
    if prologue == P.RMSNORM:
        return x[:, :k] / np.sqrt((x[:, :k] ** 2).mean(axis=1, keepdims=True) + EPS) * norm.astype(np.float64)
    if prologue == P.SILU_MUL:
        g, u = x[:, :k], x[:, k:2 * k]
        return g / (1.0 + np.exp(-g)) * u
    return x[:, :k]


def run_ex(ctx, x, k, raw, dtype, n_out, prologue=P.NONE, norm=None, bias=None, y0=None, accumulate=False,
           stride=0, x_pad=0, w_pad=0):
    """x: float32 [n_rows, stride or width] (only the first width values of each row are operands)."""
    n_rows = x.shape[0]
    bx, x_off = buffer_of(ctx, np.ascontiguousarray(x, np.float32), x_pad)
    bw, w_off = buffer_of(ctx, raw, w_pad)
    bn = bb = None
    if norm is not None:
        bn, n_off = buffer_of(ctx, norm.astype(np.float32), 4)
    if bias is not None:
        bb, b_off = buffer_of(ctx, bias.astype(np.float32), 8)
    y_init = np.zeros((n_rows, n_out), np.float32) if y0 is None else y0.astype(np.float32)
    by, y_off = buffer_of(ctx, y_init, 12)
    params = S.matmul_params(prologue, accumulate, EPS, bn, 4 if bn else 0, bb, 8 if bb else 0, stride)
    S.matmul_ex(ctx, params, bx, x_off, n_rows, k, bw, w_off, dtype, n_out, by, y_off)
    y = by.to_numpy(np.float32, (n_rows, n_out), y_off)
    for b in (bx, bw, bn, bb, by):
        if b is not None:
            b.close()
    return y


def run_ex_strided(ctx, x, k, raw, dtype, n_out, y_stride, column, prologue=P.NONE, norm=None, bias=None,
                   y0=None, accumulate=False):
    """run_ex with y as columns [column, column + n_out) of rows y_stride wide (y_row_stride = y_stride):
    returns (those columns, the whole wide rows before, after). The wide rows start as random values
    (y0 in the written columns), so a stray write anywhere shows."""
    n_rows = x.shape[0]
    rng = np.random.default_rng(n_rows * 7919 + n_out)
    wide = rng.standard_normal((n_rows, y_stride)).astype(np.float32)
    if y0 is not None:
        wide[:, column:column + n_out] = y0
    bx, x_off = buffer_of(ctx, np.ascontiguousarray(x, np.float32), 0)
    bw, w_off = buffer_of(ctx, raw, 0)
    bn = bb = None
    if norm is not None:
        bn, _ = buffer_of(ctx, norm.astype(np.float32), 4)
    if bias is not None:
        bb, _ = buffer_of(ctx, bias.astype(np.float32), 8)
    by, y_off = buffer_of(ctx, wide, 12)
    params = S.matmul_params(prologue, accumulate, EPS, bn, 4 if bn else 0, bb, 8 if bb else 0,
                             y_row_stride=y_stride)
    S.matmul_ex(ctx, params, bx, x_off, n_rows, k, bw, w_off, dtype, n_out, by, y_off + 4 * column)
    after = by.to_numpy(np.float32, (n_rows, y_stride), y_off)
    for b in (bx, bw, bn, bb, by):
        if b is not None:
            b.close()
    return after[:, column:column + n_out], wide, after


def assert_strided_equals_dense(ctx, rng, dtype, n_rows, k, n_out, prologue=P.RMSNORM, raw=None):
    """The strided call's columns have the dense call's bits (with bias and accumulate, then without), and
    every other value of the wide rows is untouched; three strides / column offsets."""
    if raw is None:
        raw, _ = make_weights(rng, dtype, n_out, k)
    x = rng.standard_normal((n_rows, width_of(prologue, k)), dtype=np.float32)
    norm = (1 + 0.1 * rng.standard_normal(k)).astype(np.float32) if prologue == P.RMSNORM else None
    bias = rng.standard_normal(n_out).astype(np.float32)
    y0 = rng.standard_normal((n_rows, n_out)).astype(np.float32)
    for use_bias, acc in ((True, True), (False, False)):
        b, y_init = (bias if use_bias else None), (y0 if acc else None)
        dense = run_ex(ctx, x, k, raw, dtype, n_out, prologue, norm, b, y_init, acc)
        for y_stride, column in ((n_out, 0), (n_out + 3, 3), (2 * n_out + 5, n_out + 1)):
            cols, before, after = run_ex_strided(ctx, x, k, raw, dtype, n_out, y_stride, column, prologue, norm, b,
                                                 y_init, acc)
            where = f"{dtype.name} {n_rows}x{k}->{n_out} stride {y_stride} column {column} bias/acc {use_bias}"
            n = int((cols.view(np.uint32) != dense.view(np.uint32)).sum())
            assert n == 0, f"{where}: {n} outputs differ from the dense call"
            gap = np.ones(y_stride, bool)
            gap[column:column + n_out] = False
            assert np.array_equal(after[:, gap].view(np.uint32), before[:, gap].view(np.uint32)), \
                f"{where}: columns outside the part were written"


def width_of(prologue, k):
    return 2 * k if prologue == P.SILU_MUL else k


def check(ctx, y, xp, w, dtype, k, bias=None, y0=None):
    ref = xp @ w.T
    bound = np.abs(xp) @ np.abs(w).T
    extra = np.abs(ref)
    if bias is not None:
        ref = ref + bias
        extra = extra + np.abs(bias)
    if y0 is not None:
        ref = ref + y0
        extra = extra + np.abs(y0)
    tol = matmul_tolerance(ctx.device, dtype, k, bound, extra, (xp, w))
    err = np.abs(y.astype(np.float64) - ref)
    assert np.isfinite(y).all()
    assert (err <= tol).all(), f"max error {err.max():.3g}, worst ratio {(err / tol).max():.3g}"


SHAPES = {  # (n_rows, k, n_out, stride extra, x_pad)
    1: [(1, 40, 3, 0, 0), (5, 600, 37, 3, 4), (3, 1176, 9, 1, 0)],
    32: [(1, 32, 1, 0, 0), (7, 576, 37, 3, 4), (19, 1056, 130, 0, 8), (3, 14336, 5, 1, 0)],
    256: [(2, 256, 3, 0, 0), (9, 1280, 37, 2, 4), (3, 14336, 5, 0, 0)],
}


@pytest.mark.parametrize("prologue", PROLOGUES, ids=lambda p: p.name)
@pytest.mark.parametrize("dtype", WEIGHT_DTYPES, ids=lambda d: d.name)
def test_matmul_ex_matches_float64(ctx, rng, dtype, prologue):
    for n_rows, k, n_out, extra, x_pad in SHAPES[BLOCK_VALUES[dtype]]:
        raw, w = make_weights(rng, dtype, n_out, k)
        width = width_of(prologue, k)
        x = rng.standard_normal((n_rows, width + extra), dtype=np.float32)
        norm = (1 + 0.1 * rng.standard_normal(k)).astype(np.float32) if prologue == P.RMSNORM else None
        bias = rng.standard_normal(n_out).astype(np.float32) if n_rows % 2 else None
        y0 = rng.standard_normal((n_rows, n_out)).astype(np.float32) if n_out % 2 else None
        y = run_ex(ctx, x, k, raw, dtype, n_out, prologue, norm, bias, y0, y0 is not None, width + extra, x_pad,
                   (4 if dtype == S.DType.F32 else 2) * int(rng.integers(0, 5)))
        check(ctx, y, prologue_f64(x, prologue, k, norm), w, dtype, k, bias, y0)


@pytest.mark.parametrize("dtype", WEIGHT_DTYPES, ids=lambda d: d.name)
def test_matmul_ex_none_equals_matmul(ctx, rng, dtype):
    """The prologue-less entry and strata_matmul are one computation."""
    k = {1: 600, 32: 576, 256: 512}[BLOCK_VALUES[dtype]]
    raw, _ = make_weights(rng, dtype, 37, k)
    x = rng.standard_normal((21, k), dtype=np.float32)
    bias = rng.standard_normal(37).astype(np.float32)
    y0 = rng.standard_normal((21, 37)).astype(np.float32)
    ex = run_ex(ctx, x, k, raw, dtype, 37, bias=bias, y0=y0, accumulate=True)
    bx, bw, bb, by = (S.Buffer.from_array(ctx, a) for a in (x, raw, bias, y0))
    S.matmul(ctx, bx, 0, 21, k, bw, 0, dtype, 37, bb, 0, by, 0, True)
    plain = by.to_numpy(np.float32, (21, 37))
    for b in (bx, bw, bb, by):
        b.close()
    assert np.array_equal(ex.view(np.uint32), plain.view(np.uint32))


BATCHES = [1, 2, 7, 8, 9, 16, 31, 64, 65, 127, 128, 129, 300, 513, 1024]


@pytest.mark.exactness
@pytest.mark.parametrize("prologue", PROLOGUES, ids=lambda p: p.name)
@pytest.mark.parametrize("dtype", WEIGHT_DTYPES, ids=lambda d: d.name)
def test_matmul_ex_batch_invariant(ctx, rng, dtype, prologue):
    """Each row bit for bit the same at every batch size in BATCHES and in shuffled order."""
    k = {1: 600, 32: 1056, 256: 1280}[BLOCK_VALUES[dtype]]  # 2-3 slices, a partial block for plain types
    n_out = 131  # two 128-output tiles, odd
    raw, _ = make_weights(rng, dtype, n_out, k)
    width = width_of(prologue, k)
    x = rng.standard_normal((max(BATCHES), width + 1), dtype=np.float32)  # misaligned rows
    x[3] = 0.0
    x[5, 7] = 3e4
    norm = (1 + 0.1 * rng.standard_normal(k)).astype(np.float32) if prologue == P.RMSNORM else None
    bias = rng.standard_normal(n_out).astype(np.float32)

    def run(rows):
        return run_ex(ctx, x[rows], k, raw, dtype, n_out, prologue, norm, bias, stride=width + 1)

    full = run(np.arange(max(BATCHES)))
    for n in BATCHES[:-1]:
        part = run(np.arange(n))
        assert np.array_equal(part.view(np.uint32), full[:n].view(np.uint32)), f"batch of {n} rows differs"
    for n in (9, 129, 513):
        order = rng.permutation(max(BATCHES))[:n]
        shuffled = run(order)
        assert np.array_equal(shuffled.view(np.uint32), full[order].view(np.uint32)), f"shuffled {n} rows differ"


@pytest.mark.exactness
@pytest.mark.parametrize("prologue", PROLOGUES, ids=lambda p: p.name)
@pytest.mark.parametrize("dtype", WEIGHT_DTYPES, ids=lambda d: d.name)
def test_matmul_ex_y_row_stride(ctx, rng, dtype, prologue):
    """y_row_stride > n_out: each row's values land at its stride with the dense call's bits."""
    k = {1: 600, 32: 1056, 256: 512}[BLOCK_VALUES[dtype]]
    for n_rows in (1, 5, 17):
        assert_strided_equals_dense(ctx, rng, dtype, n_rows, k, 37, prologue)


def test_cpu_fused_is_rmsnorm_then_matmul(rng):
    """On the CPU the fused prologue is exactly the separate kernels."""
    with S.Context("cpu") as ctx:
        k, n_out, n_rows = 576, 19, 6
        raw, _ = make_weights(rng, S.DType.Q8_0, n_out, k)
        x = rng.standard_normal((n_rows, 2 * k), dtype=np.float32)
        norm = (1 + 0.1 * rng.standard_normal(k)).astype(np.float32)
        fused_rms = run_ex(ctx, x, k, raw, S.DType.Q8_0, n_out, P.RMSNORM, norm, stride=2 * k)
        fused_silu = run_ex(ctx, x, k, raw, S.DType.Q8_0, n_out, P.SILU_MUL)
        bx, bn, bw = S.Buffer.from_array(ctx, x), S.Buffer.from_array(ctx, norm), S.Buffer.from_array(ctx, raw)
        h, y = S.Buffer(ctx, n_rows * k * 4), S.Buffer(ctx, n_rows * n_out * 4)
        for r in range(n_rows):
            S.rmsnorm(ctx, bx, r * 2 * k * 4, bn, 0, h, r * k * 4, 1, k, EPS)
        S.matmul(ctx, h, 0, n_rows, k, bw, 0, S.DType.Q8_0, n_out, None, 0, y, 0)
        assert np.array_equal(y.to_numpy(np.float32, (n_rows, n_out)).view(np.uint32), fused_rms.view(np.uint32))
        S.silu_mul(ctx, bx, 0, 2 * k, bx, k * 4, 2 * k, h, 0, n_rows, k)
        S.matmul(ctx, h, 0, n_rows, k, bw, 0, S.DType.Q8_0, n_out, None, 0, y, 0)
        assert np.array_equal(y.to_numpy(np.float32, (n_rows, n_out)).view(np.uint32), fused_silu.view(np.uint32))
        for b in (bx, bn, bw, h, y):
            b.close()


def test_matmul_ex_in_a_graph(ctx, rng):
    """Recorded and replayed, the fused call gives the eager bits."""
    k, n_out, n_rows = 512, 33, 5
    raw, _ = make_weights(rng, S.DType.Q4_K, n_out, k)
    x = rng.standard_normal((n_rows, k), dtype=np.float32)
    norm = (1 + 0.1 * rng.standard_normal(k)).astype(np.float32)
    eager = run_ex(ctx, x, k, raw, S.DType.Q4_K, n_out, P.RMSNORM, norm)
    bx, bw, bn = S.Buffer.from_array(ctx, x), S.Buffer.from_array(ctx, raw), S.Buffer.from_array(ctx, norm)
    by = S.Buffer(ctx, n_rows * n_out * 4)
    params = S.matmul_params(P.RMSNORM, False, EPS, bn, 0)
    ctx.graph_begin()
    S.matmul_ex(ctx, params, bx, 0, n_rows, k, bw, 0, S.DType.Q4_K, n_out, by, 0)
    graph = ctx.graph_end()
    by.fill(0)
    graph.launch()
    assert np.array_equal(by.to_numpy(np.float32, (n_rows, n_out)).view(np.uint32), eager.view(np.uint32))
    graph.close()
    for b in (bx, bw, bn, by):
        b.close()


def expect_error(fragment, fn, *args):
    with pytest.raises(S.StrataError) as info:
        fn(*args)
    assert info.value.status == S.Status.ERR_INVALID_ARGUMENT and fragment in info.value.message, info.value.message
    assert info.value.message.startswith("strata_matmul_ex: ")


def test_matmul_ex_argument_errors(ctx):
    x, w, y, n = (S.Buffer(ctx, 4096) for _ in range(4))
    Q = S.DType.Q4_0
    ok = S.matmul_params()
    S.matmul_ex(ctx, ok, x, 0, 1, 64, w, 0, Q, 4, y, 0)
    expect_error("params is NULL", S.matmul_ex, ctx, S.ffi.NULL, x, 0, 1, 64, w, 0, Q, 4, y, 0)
    expect_error("prologue=7", S.matmul_ex, ctx, S.matmul_params(7), x, 0, 1, 64, w, 0, Q, 4, y, 0)
    before = np.arange(1024, dtype=np.float32)
    y.upload(before)
    for stride in (-1, 1, 3):
        expect_error(f"y_row_stride={stride} must be 0 (dense) or at least n_out=4", S.matmul_ex, ctx,
                     S.matmul_params(y_row_stride=stride), x, 0, 2, 64, w, 0, Q, 4, y, 0)
    expect_error("y needs", S.matmul_ex, ctx, S.matmul_params(y_row_stride=600), x, 0, 3, 64, w, 0, Q, 4, y, 0)
    assert np.array_equal(y.to_numpy(np.float32, (1024,)), before), "a refused call wrote y"
    S.matmul_ex(ctx, S.matmul_params(y_row_stride=500), x, 0, 2, 64, w, 0, Q, 4, y, 0)  # 500 + 4 values fit
    expect_error("norm_weight is NULL", S.matmul_ex, ctx, S.matmul_params(P.RMSNORM, eps=1e-5), x, 0, 1, 64, w, 0,
                 Q, 4, y, 0)
    expect_error("not RMSNORM", S.matmul_ex, ctx, S.matmul_params(P.NONE, norm_weight=n), x, 0, 1, 64, w, 0, Q, 4,
                 y, 0)
    expect_error("eps must be", S.matmul_ex, ctx, S.matmul_params(P.RMSNORM, eps=2.0, norm_weight=n), x, 0, 1, 64,
                 w, 0, Q, 4, y, 0)
    expect_error("row stride 100 is smaller than the row width 128", S.matmul_ex, ctx,
                 S.matmul_params(P.SILU_MUL, x_row_stride=100), x, 0, 2, 64, w, 0, Q, 4, y, 0)
    expect_error("x_row_stride=-1", S.matmul_ex, ctx, S.matmul_params(x_row_stride=-1), x, 0, 1, 64, w, 0, Q, 4, y,
                 0)
    expect_error("x needs", S.matmul_ex, ctx, S.matmul_params(P.SILU_MUL), x, 0, 9, 64, w, 0, Q, 4, y, 0)
    expect_error("overlap", S.matmul_ex, ctx, ok, x, 0, 1, 64, w, 0, Q, 4, x, 128)
    expect_error("overlap", S.matmul_ex, ctx, S.matmul_params(bias=y, bias_offset=0), x, 0, 1, 64, w, 0, Q, 4, y, 0)
    expect_error("not a multiple of 32", S.matmul_ex, ctx, ok, x, 0, 1, 40, w, 0, Q, 4, y, 0)
    for b in (x, w, y, n):
        b.close()

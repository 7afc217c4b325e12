"""strata_matmul_prefetch: the L2 hint a matmul call may carry for the weights of the next matmul.

A hint changes no result, on any backend: the CPU ignores it, CUDA's one-row integer kernel asks L2
for the lines as it ends (docs/cuda_backend.md, "L2 prefetch"). Here: results with and without a hint
are the same bits (eager and recorded, one row and many, every integer type and the float path), the
hint is taken by the next matmul call only (and dropped when that call fails), and bad hints are
clear errors that leave no hint behind.
"""

import numpy as np
import pytest

from kernel_refs import make_weights
from strata import _ffi as S
from test_matmul_ex import P, run_ex

pytestmark = pytest.mark.exactness

DTYPES = [S.DType.Q4_0, S.DType.Q8_0, S.DType.Q4_K, S.DType.Q6_K, S.DType.Q4_1, S.DType.F16]


def bits(a):
    return a.view(np.uint32)


def matmul_once(ctx, x, w_buf, dtype, k, n_out, hint=None):
    """One strata_matmul of x's rows by the weights in w_buf, with an optional (buffer, offset, n_bytes) hint."""
    n_rows = x.shape[0]
    bx = S.Buffer.from_array(ctx, x)
    by = S.Buffer.from_array(ctx, np.zeros((n_rows, n_out), np.float32))
    try:
        if hint is not None:
            S.matmul_prefetch(ctx, *hint)
        S.matmul(ctx, bx, 0, n_rows, k, w_buf, 0, dtype, n_out, None, 0, by, 0, False)
        return by.to_numpy(np.float32, (n_rows, n_out))
    finally:
        bx.close()
        by.close()


@pytest.mark.parametrize("n_rows", [1, 3, 70])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_hint_changes_no_bit(ctx, rng, dtype, n_rows):
    k, n_out = 2048, 96
    raw, _ = make_weights(rng, dtype, n_out, k)
    nxt, _ = make_weights(rng, dtype, 300, k)  # "the next matmul's weights"
    x = rng.standard_normal((n_rows, k), dtype=np.float32)
    bw, bn = S.Buffer.from_array(ctx, raw), S.Buffer.from_array(ctx, nxt)
    try:
        plain = matmul_once(ctx, x, bw, dtype, k, n_out)
        hinted = matmul_once(ctx, x, bw, dtype, k, n_out, (bn, 0, nxt.nbytes))
        partial = matmul_once(ctx, x, bw, dtype, k, n_out, (bn, 130, 1000))  # unaligned, part of a line
        own = matmul_once(ctx, x, bw, dtype, k, n_out, (bw, 0, raw.nbytes))  # its own weights
        for other in (hinted, partial, own):
            assert np.array_equal(bits(plain), bits(other))
    finally:
        bw.close()
        bn.close()


def test_hint_with_every_prologue_changes_no_bit(ctx, rng):
    k, n_out = 4096, 64
    raw, _ = make_weights(rng, S.DType.Q4_0, n_out, k)
    nxt, _ = make_weights(rng, S.DType.Q4_0, 512, k)
    bn = S.Buffer.from_array(ctx, nxt)
    try:
        for prologue in (P.NONE, P.RMSNORM, P.SILU_MUL):
            wide = 2 * k if prologue == P.SILU_MUL else k
            x = rng.standard_normal((1, wide), dtype=np.float32)
            norm = np.ones(k, np.float32) if prologue == P.RMSNORM else None
            plain = run_ex(ctx, x, k, raw, S.DType.Q4_0, n_out, prologue, norm)
            S.matmul_prefetch(ctx, bn, 0, nxt.nbytes)
            hinted = run_ex(ctx, x, k, raw, S.DType.Q4_0, n_out, prologue, norm)
            assert np.array_equal(bits(plain), bits(hinted)), prologue.name
    finally:
        bn.close()


def test_recorded_hint_replays_the_same_bits(ctx, rng):
    k, n_out = 4096, 256
    raw, _ = make_weights(rng, S.DType.Q4_0, n_out, k)
    nxt, _ = make_weights(rng, S.DType.Q4_0, 1024, k)
    x = rng.standard_normal((1, k), dtype=np.float32)
    bx, bw, bn = (S.Buffer.from_array(ctx, a) for a in (x, raw, nxt))
    by = S.Buffer.from_array(ctx, np.zeros((1, n_out), np.float32))
    try:
        S.matmul(ctx, bx, 0, 1, k, bw, 0, S.DType.Q4_0, n_out, None, 0, by, 0, False)
        eager = by.to_numpy(np.float32, (1, n_out))
        ctx.graph_begin()
        S.matmul_prefetch(ctx, bn, 0, nxt.nbytes)
        S.matmul(ctx, bx, 0, 1, k, bw, 0, S.DType.Q4_0, n_out, None, 0, by, 0, False)
        graph = ctx.graph_end()
        by.upload(np.full((1, n_out), np.nan, np.float32), 0)
        graph.launch()
        graph.launch()
        assert np.array_equal(bits(by.to_numpy(np.float32, (1, n_out))), bits(eager))
        graph.close()
    finally:
        for b in (bx, bw, bn, by):
            b.close()


def test_bad_hints_are_refused(ctx, rng):
    w = S.Buffer.from_array(ctx, np.zeros(1000, np.uint8))
    try:
        with pytest.raises(S.StrataError, match="w"):
            S.matmul_prefetch(ctx, w, 900, 101)  # past the end
        with pytest.raises(S.StrataError, match="w"):
            S.matmul_prefetch(ctx, None, 0, 16)
        S.matmul_prefetch(ctx, None, 0, 0)  # n_bytes 0: drops a hint, needs no buffer
        S.matmul_prefetch(ctx, w, 0, 1000)
        S.matmul_prefetch(ctx, w, 0, 0)
    finally:
        w.close()


def test_hint_is_taken_by_the_next_call_even_when_it_fails(ctx, rng):
    """A failed matmul consumes the hint; destroying the hinted buffer drops it (no prefetch of freed memory)."""
    k, n_out = 1024, 32
    raw, _ = make_weights(rng, S.DType.Q4_0, n_out, k)
    x = rng.standard_normal((1, k), dtype=np.float32)
    bx, bw = S.Buffer.from_array(ctx, x), S.Buffer.from_array(ctx, raw)
    by = S.Buffer.from_array(ctx, np.zeros((1, n_out), np.float32))
    scratch = S.Buffer.from_array(ctx, np.zeros(4096, np.uint8))
    try:
        S.matmul_prefetch(ctx, scratch, 0, 4096)
        with pytest.raises(S.StrataError, match="k"):
            S.matmul(ctx, bx, 0, 1, k + 1, bw, 0, S.DType.Q4_0, n_out, None, 0, by, 0, False)
        S.matmul_prefetch(ctx, scratch, 0, 4096)
        scratch.close()  # drops the pending hint
        scratch = None
        S.matmul(ctx, bx, 0, 1, k, bw, 0, S.DType.Q4_0, n_out, None, 0, by, 0, False)
        ctx.synchronize()
        assert np.isfinite(by.to_numpy(np.float32, (1, n_out))).all()
    finally:
        for b in (bx, bw, by, scratch):
            if b is not None:
                b.close()

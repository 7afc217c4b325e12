"""Embedding, RMSNorm, SiLU-gated product, GELU, add and row gathers against
float64 NumPy (embedding and add: bit for bit; the rest within a few float32
ulps, tolerances per test)."""

import math

import numpy as np
import pytest
from gguf.quants import dequantize

from kernel_refs import BLOCK_VALUES, GGUF_TYPE, WEIGHT_DTYPES, buffer_of, make_weights
from strata import _ffi as S


def download(buf, offset, shape, dtype=np.float32):
    return buf.to_numpy(dtype, shape, offset)


@pytest.mark.parametrize("dtype", WEIGHT_DTYPES, ids=lambda d: d.name)
def test_embed_equals_gguf_dequantize(ctx, rng, dtype):
    dim = {1: 45, 32: 96, 256: 512}[BLOCK_VALUES[dtype]]
    n_vocab, n_rows = 23, 9
    raw, _ = make_weights(rng, dtype, n_vocab, dim)
    ids = rng.integers(0, n_vocab, n_rows).astype(np.int32)
    ids[2], ids[5] = -1, n_vocab  # out of range -> zeros
    table, t_off = buffer_of(ctx, raw, 6 if dtype != S.DType.F32 else 8)
    bids, i_off = buffer_of(ctx, ids, 4)
    out = S.Buffer(ctx, n_rows * dim * 4 + 8)
    S.embed(ctx, table, t_off, dtype, n_vocab, dim, bids, i_off, n_rows, out, 8)
    got = download(out, 8, (n_rows, dim))
    ref = dequantize(raw, GGUF_TYPE[dtype]).reshape(n_vocab, dim).astype(np.float32)
    for r, i in enumerate(ids):
        expect = ref[i] if 0 <= i < n_vocab else np.zeros(dim, np.float32)
        assert np.array_equal(got[r].view(np.uint32), expect.view(np.uint32)), f"row {r} (id {i})"
    for b in (table, bids, out):
        b.close()


@pytest.mark.parametrize("n_rows,dim", [(1, 1), (3, 7), (5, 64), (2, 576), (4, 1001)])
def test_rmsnorm(ctx, rng, n_rows, dim):
    x = rng.standard_normal((n_rows, dim), dtype=np.float32) * rng.uniform(0.1, 10)
    w = rng.standard_normal(dim, dtype=np.float32)
    eps = 1e-5
    bx, x_off = buffer_of(ctx, x, 4)
    bw, w_off = buffer_of(ctx, w, 0)
    out = S.Buffer(ctx, x.nbytes)
    S.rmsnorm(ctx, bx, x_off, bw, w_off, out, 0, n_rows, dim, eps)
    x64 = x.astype(np.float64)
    inv = 1 / np.sqrt((x64 ** 2).mean(axis=1, keepdims=True) + eps)
    ref = x64 * inv * w
    got = download(out, 0, (n_rows, dim))
    # float32: sum of squares (~dim ulps worst case), sqrt, two products.
    assert np.abs(got - ref).max() <= 4e-7 * (8 + math.sqrt(dim)) * np.abs(x64 * inv * w).max()
    # In place gives the same bits.
    S.rmsnorm(ctx, bx, x_off, bw, w_off, bx, x_off, n_rows, dim, eps)
    assert np.array_equal(download(bx, x_off, (n_rows, dim)), got)
    for b in (bx, bw, out):
        b.close()


@pytest.mark.parametrize("n_rows,n_cols", [(1, 1), (2, 9), (3, 64), (5, 1536)])
def test_silu_mul(ctx, rng, n_rows, n_cols):
    gate_stride, up_stride = n_cols + 3, 2 * n_cols + 1
    gate = rng.standard_normal((n_rows, gate_stride), dtype=np.float32) * 6
    gate[0, 0] = -100.0 if n_cols > 0 else gate[0, 0]
    up = rng.standard_normal((n_rows, up_stride), dtype=np.float32)
    bg, g_off = buffer_of(ctx, gate, 4)
    bu, u_off = buffer_of(ctx, up, 0)
    out = S.Buffer(ctx, n_rows * n_cols * 4)
    S.silu_mul(ctx, bg, g_off, gate_stride, bu, u_off, up_stride, out, 0, n_rows, n_cols)
    g, u = gate[:, :n_cols].astype(np.float64), up[:, :n_cols].astype(np.float64)
    ref = g / (1 + np.exp(-g)) * u
    got = download(out, 0, (n_rows, n_cols))
    assert np.all(np.abs(got - ref) <= 2e-6 * np.abs(ref) + 1e-30)  # a few float32 ulps
    for b in (bg, bu, out):
        b.close()


@pytest.mark.parametrize("n", [1, 7, 8, 1000])
def test_gelu_exact_erf(ctx, rng, n):
    x = (rng.standard_normal(n, dtype=np.float32) * 3).astype(np.float32)
    bx, x_off = buffer_of(ctx, x, 4)
    out = S.Buffer(ctx, x.nbytes)
    S.gelu(ctx, bx, x_off, out, 0, n)
    ref = np.array([v * 0.5 * (1 + math.erf(v / math.sqrt(2))) for v in x.astype(np.float64)])
    got = download(out, 0, (n,))
    # 1 + erf(x/sqrt 2) cancels for negative x: allow a few ulps of 1.
    assert np.all(np.abs(got - ref) <= 3e-7 * np.maximum(1, np.abs(x)))
    S.gelu(ctx, bx, x_off, bx, x_off, n)
    assert np.array_equal(download(bx, x_off, (n,)), got)
    for b in (bx, out):
        b.close()


@pytest.mark.parametrize("n", [1, 5, 8, 77])
def test_add_bit_exact(ctx, rng, n):
    a, b = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    ba, _ = buffer_of(ctx, a)
    bb, _ = buffer_of(ctx, b)
    out = S.Buffer(ctx, a.nbytes + 12)
    S.add(ctx, ba, 0, bb, 0, out, 12, n)
    assert np.array_equal(download(out, 12, (n,)), a + b)
    S.add(ctx, ba, 0, bb, 0, bb, 0, n)  # out == b
    assert np.array_equal(download(bb, 0, (n,)), a + b)
    for buf in (ba, bb, out):
        buf.close()


def test_gather_rows(ctx, rng):
    n_src, row_bytes, n_rows = 10, 12, 8
    src = rng.integers(0, 2 ** 31, (n_src, row_bytes // 4), dtype=np.int32)
    idx = np.array([3, 0, 9, -1, 10, 3, 7, 2], dtype=np.int32)
    bs, s_off = buffer_of(ctx, src, 4)
    bi, _ = buffer_of(ctx, idx)
    dst = S.Buffer(ctx, n_rows * row_bytes)
    dst.fill(0xFF)
    S.gather_rows(ctx, bs, s_off, n_src, row_bytes, bi, 0, n_rows, dst, 0)
    got = download(dst, 0, (n_rows, row_bytes // 4), np.int32)
    for r, i in enumerate(idx):
        expect = src[i] if 0 <= i < n_src else np.zeros(row_bytes // 4, np.int32)
        assert np.array_equal(got[r], expect)
    for b in (bs, bi, dst):
        b.close()


def test_buffer_fill_copy_roundtrip(ctx, rng):
    data = rng.integers(0, 256, 100, dtype=np.uint8)
    a = S.Buffer.from_array(ctx, data)
    b = S.Buffer(ctx, 100)
    b.fill(7)
    b.copy_from(a, dst_offset=10, src_offset=20, n_bytes=50)
    got = b.to_numpy(np.uint8, (100,))
    expect = np.full(100, 7, np.uint8)
    expect[10:60] = data[20:70]
    assert np.array_equal(got, expect)
    a.fill(3, offset=5, n_bytes=2)
    assert list(a.to_numpy(np.uint8, (4,), offset=4)) == [data[4], 3, 3, data[7]]
    assert a.size == 100
    a.close()
    b.close()

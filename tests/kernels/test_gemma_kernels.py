"""The kernels Gemma 3 added: gelu_tanh_mul, scale and sliding-window
attention, against float64 NumPy on every backend, and the window's batch
invariance bit for bit (a row alone, in a decode batch, and inside a prefill
chunk of 300 rows that share staged tiles on CUDA), with a negative control
(the window really hides the older cells)."""

import math

import numpy as np
import pytest

from kernel_refs import attention_reference, buffer_of, rows_array
from strata import _ffi as S


def download(buf, offset, shape, dtype=np.float32):
    return buf.to_numpy(dtype, shape, offset)


def gelu_tanh_reference(g):
    return 0.5 * g * (1 + np.tanh(math.sqrt(2 / math.pi) * (g + 0.044715 * g ** 3)))


@pytest.mark.parametrize("n_rows,n_cols", [(1, 1), (2, 9), (3, 64), (5, 2048)])
def test_gelu_tanh_mul(ctx, rng, n_rows, n_cols):
    gate_stride, up_stride = n_cols + 3, 2 * n_cols + 1
    gate = rng.standard_normal((n_rows, gate_stride), dtype=np.float32) * 4
    gate[0, 0] = -30.0
    up = rng.standard_normal((n_rows, up_stride), dtype=np.float32)
    bg, g_off = buffer_of(ctx, gate, 4)
    bu, u_off = buffer_of(ctx, up, 0)
    out = S.Buffer(ctx, n_rows * n_cols * 4)
    S.gelu_tanh_mul(ctx, bg, g_off, gate_stride, bu, u_off, up_stride, out, 0, n_rows, n_cols)
    g, u = gate[:, :n_cols].astype(np.float64), up[:, :n_cols].astype(np.float64)
    ref = gelu_tanh_reference(g) * u
    got = download(out, 0, (n_rows, n_cols))
    # 1 + tanh(inner) cancels for negative g: allow a few float32 ulps of |g·u|.
    assert np.all(np.abs(got - ref) <= 4e-7 * np.maximum(np.abs(g * u), np.abs(ref)) + 1e-30)
    for b in (bg, bu, out):
        b.close()


@pytest.mark.parametrize("n", [1, 7, 8, 1000])
def test_scale_bit_exact(ctx, rng, n):
    x = rng.standard_normal(n, dtype=np.float32)
    factor = np.float32(math.sqrt(640))
    bx, x_off = buffer_of(ctx, x, 4)
    out = S.Buffer(ctx, x.nbytes)
    S.scale(ctx, bx, x_off, out, 0, n, float(factor))
    assert np.array_equal(download(out, 0, (n,)), x * factor)  # one float32 multiply
    S.scale(ctx, bx, x_off, bx, x_off, n, float(factor))
    assert np.array_equal(download(bx, x_off, (n,)), x * factor)
    with pytest.raises(S.StrataError, match="factor"):
        S.scale(ctx, bx, x_off, out, 0, n, float("nan"))
    for b in (bx, out):
        b.close()


def _filled_slots(ctx, rng, n_slots, n_ctx, n_kv, hd, layer=0):
    slots = S.Slots(ctx, n_slots, 1, n_ctx, n_kv, hd)
    keys = rng.standard_normal((n_slots, n_ctx, n_kv * hd), dtype=np.float32) * 2
    values = rng.standard_normal((n_slots, n_ctx, n_kv * hd), dtype=np.float32)
    for s in range(n_slots):
        bk, _ = buffer_of(ctx, keys[s])
        bv, _ = buffer_of(ctx, values[s])
        br, _ = buffer_of(ctx, rows_array([(s, i) for i in range(n_ctx)]))
        S.kv_store(ctx, slots, layer, bk, 0, n_kv * hd, bv, 0, n_kv * hd, br, 0, n_ctx)
        for b in (bk, bv, br):
            b.close()
    return slots, keys, values


def _attend_window(ctx, slots, q, n_heads, pairs, scale, window):
    n_rows = q.shape[0]
    bq, q_off = buffer_of(ctx, q, 8)
    br, _ = buffer_of(ctx, rows_array(pairs))
    out = S.Buffer(ctx, n_rows * n_heads * slots.head_dim * 4)
    out.fill(0x7F)
    S.attention_window(ctx, slots, 0, bq, q_off, q.shape[1], n_rows, n_heads, br, 0, scale, window, out, 0)
    got = out.to_numpy(np.float32, (n_rows, n_heads * slots.head_dim))
    for b in (bq, br, out):
        b.close()
    return got


@pytest.mark.parametrize("n_heads,n_kv,hd,window", [(4, 1, 256, 40), (4, 2, 64, 33), (2, 2, 6, 1), (8, 1, 80, 512)])
def test_attention_window_reference(ctx, rng, n_heads, n_kv, hd, window):
    n_slots, n_ctx, scale = 2, 600, 1 / 16
    slots, keys, values = _filled_slots(ctx, rng, n_slots, n_ctx, n_kv, hd)
    with slots:
        pairs = [(0, 0), (0, window - 1), (0, window), (1, window + 31), (-1, 3), (1, n_ctx - 1), (0, 257)]
        pairs = [(s, min(i, n_ctx - 1)) for s, i in pairs]
        q = rng.standard_normal((len(pairs), n_heads * hd), dtype=np.float32)
        got = _attend_window(ctx, slots, q, n_heads, pairs, scale, window)
        full = _attend_window(ctx, slots, q, n_heads, pairs, scale, 0)
    k16 = keys.astype(np.float16).astype(np.float64).reshape(n_slots, n_ctx, n_kv, hd)
    v16 = values.astype(np.float16).astype(np.float64).reshape(n_slots, n_ctx, n_kv, hd)
    for r, (s, i) in enumerate(pairs):
        if s < 0:
            assert not got[r].any(), "padding row must get zeros"
            continue
        lo = max(0, i - window + 1)
        ref = attention_reference(q[r].reshape(n_heads, hd).astype(np.float64), k16[s, lo:i + 1], v16[s, lo:i + 1],
                                  scale)
        assert np.abs(got[r] - ref).max() <= 2e-5 * np.abs(v16).max(), f"row {r} (slot {s}, index {i})"
        if lo > 0:   # negative control: the window hides cells full attention sees
            assert not np.array_equal(got[r], full[r]), f"row {r}: the window changed nothing"


def test_attention_window_zero_is_attention(ctx, rng):
    n_heads, n_kv, hd = 4, 1, 256
    slots, _, _ = _filled_slots(ctx, rng, 1, 300, n_kv, hd)
    with slots:
        pairs = [(0, i) for i in (0, 31, 32, 200, 299)]
        q = rng.standard_normal((len(pairs), n_heads * hd), dtype=np.float32)
        got = _attend_window(ctx, slots, q, n_heads, pairs, 1 / 16, 0)
        bq, _ = buffer_of(ctx, q)
        br, _ = buffer_of(ctx, rows_array(pairs))
        out = S.Buffer(ctx, got.nbytes)
        S.attention(ctx, slots, 0, bq, 0, q.shape[1], len(pairs), n_heads, br, 0, 1 / 16, out, 0)
        assert np.array_equal(out.to_numpy(np.float32, got.shape), got)
        for b in (bq, br, out):
            b.close()


def test_attention_window_batch_invariant(ctx, rng):
    """Rows of a 300-row prefill chunk of one slot (CUDA: rows share staged tiles, and the tiles
    below the chunk's lowest window start are skipped) equal the same rows alone and in a mixed
    decode batch, bit for bit."""
    n_heads, n_kv, hd, window, n_ctx = 4, 1, 256, 64, 700
    slots, _, _ = _filled_slots(ctx, rng, 2, n_ctx, n_kv, hd)
    with slots:
        chunk = [(0, i) for i in range(380, 680)]
        q = rng.standard_normal((len(chunk), n_heads * hd), dtype=np.float32)
        together = _attend_window(ctx, slots, q, n_heads, chunk, 1 / 16, window)
        for r in (0, 1, 63, 64, 150, 299):
            alone = _attend_window(ctx, slots, q[r:r + 1], n_heads, [chunk[r]], 1 / 16, window)
            assert np.array_equal(alone[0], together[r]), f"row {r} alone differs from the chunk"
        picks = [5, 299, 0, 120]
        mixed_pairs = [(1, 3), chunk[5], (1, 650), chunk[299], (-1, 0), chunk[0], chunk[120]]
        mixed_q = np.concatenate([rng.standard_normal((1, q.shape[1]), dtype=np.float32), q[5:6],
                                  rng.standard_normal((1, q.shape[1]), dtype=np.float32), q[299:300],
                                  rng.standard_normal((1, q.shape[1]), dtype=np.float32), q[0:1], q[120:121]])
        mixed = _attend_window(ctx, slots, mixed_q, n_heads, mixed_pairs, 1 / 16, window)
        for row, r in zip((1, 3, 5, 6), picks):
            assert np.array_equal(mixed[row], together[r]), f"chunk row {r} differs inside a decode batch"


def test_attention_window_refuses_negative(ctx, rng):
    slots, _, _ = _filled_slots(ctx, rng, 1, 8, 1, 8)
    with slots:
        q = np.zeros((1, 8), dtype=np.float32)
        with pytest.raises(S.StrataError, match="window"):
            _attend_window(ctx, slots, q, 1, [(0, 1)], 1.0, -1)

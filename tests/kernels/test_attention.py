"""KV stores, causal GQA attention over slot caches and segment-wise dense
attention against float64 NumPy, plus positions_decode.

Tolerance: keys and values are F16 in the cache, so the reference uses the
F16-rounded inputs; what remains is float32 dot products and the online
softmax: |out - ref| <= 2e-5 * max|v| (a wrong mask, head mapping or block
merge is off by O(|v|))."""

import numpy as np
import pytest

from kernel_refs import attention_reference, buffer_of, rows_array
from strata import _ffi as S


def store(ctx, slots, layer, k, v, pairs):
    """kv_store of k, v [n_rows, n_kv_heads * head_dim] at the {slot, index} pairs."""
    n_rows, width = k.shape
    bk, k_off = buffer_of(ctx, np.pad(k, ((0, 0), (0, 2))), 4)
    bv, v_off = buffer_of(ctx, v, 0)
    br, _ = buffer_of(ctx, rows_array(pairs))
    S.kv_store(ctx, slots, layer, bk, k_off, width + 2, bv, v_off, width, br, 0, n_rows)
    for b in (bk, bv, br):
        b.close()


def attend(ctx, slots, layer, q, n_heads, pairs, scale):
    n_rows = q.shape[0]
    bq, q_off = buffer_of(ctx, q, 8)
    br, _ = buffer_of(ctx, rows_array(pairs))
    out = S.Buffer(ctx, n_rows * n_heads * slots.head_dim * 4)
    out.fill(0x7F)
    S.attention(ctx, slots, layer, bq, q_off, q.shape[1], n_rows, n_heads, br, 0, scale, out, 0)
    got = out.to_numpy(np.float32, (n_rows, n_heads * slots.head_dim))
    for b in (bq, br, out):
        b.close()
    return got


def test_kv_store_rounds_to_f16(ctx, rng):
    """A single cached cell attends to itself with weight 1: out == f16(v) exactly."""
    n_kv, hd = 2, 6
    with S.Slots(ctx, 2, 2, 3, n_kv, hd) as slots:
        k = rng.standard_normal((1, n_kv * hd), dtype=np.float32)
        v = (rng.standard_normal((1, n_kv * hd)) * 1000).astype(np.float32)
        store(ctx, slots, 1, k, v, [(1, 0)])
        q = rng.standard_normal((1, n_kv * hd), dtype=np.float32)
        got = attend(ctx, slots, 1, q, n_kv, [(1, 0)], 0.5)
    assert np.array_equal(got[0], v[0].astype(np.float16).astype(np.float32))


@pytest.mark.parametrize("n_heads,n_kv,hd,n_ctx", [(4, 2, 8, 50), (9, 3, 64, 100), (2, 2, 6, 70), (6, 1, 80, 33)])
def test_attention_causal_gqa(ctx, rng, n_heads, n_kv, hd, n_ctx):
    n_slots, layer, scale = 3, 1, 1 / np.sqrt(hd)
    lengths = [n_ctx, int(rng.integers(1, n_ctx)), 1]
    with S.Slots(ctx, n_slots, 2, n_ctx, n_kv, hd) as slots:
        keys = rng.standard_normal((n_slots, n_ctx, n_kv * hd), dtype=np.float32) * 2
        values = rng.standard_normal((n_slots, n_ctx, n_kv * hd), dtype=np.float32)
        for s in range(n_slots):
            # In chunks, out of order, to show cells are addressed by index only.
            cells = rng.permutation(lengths[s])
            for chunk in np.array_split(cells, 3):
                if len(chunk):
                    store(ctx, slots, layer, keys[s, chunk], values[s, chunk], [(s, int(i)) for i in chunk])
        pairs = [(s, int(i)) for s in range(n_slots) for i in rng.choice(lengths[s], min(4, lengths[s]), replace=False)]
        pairs.insert(2, (-1, 5))
        q = rng.standard_normal((len(pairs), n_heads * hd), dtype=np.float32)
        got = attend(ctx, slots, layer, q, n_heads, pairs, scale)
    k16 = keys.astype(np.float16).astype(np.float64).reshape(n_slots, n_ctx, n_kv, hd)
    v16 = values.astype(np.float16).astype(np.float64).reshape(n_slots, n_ctx, n_kv, hd)
    for r, (s, i) in enumerate(pairs):
        if s < 0:
            assert not got[r].any(), "padding row must get zeros"
            continue
        ref = attention_reference(q[r].reshape(n_heads, hd).astype(np.float64), k16[s, :i + 1], v16[s, :i + 1], scale)
        assert np.abs(got[r] - ref).max() <= 2e-5 * np.abs(v16).max(), f"row {r} (slot {s}, index {i})"


@pytest.mark.parametrize("n_heads,hd,segments", [(2, 8, [0, 5, 5, 40]), (3, 80, [0, 64]), (1, 6, [0, 1, 2, 33, 70])])
def test_attention_dense_segments(ctx, rng, n_heads, hd, segments):
    n_tokens = segments[-1]
    stride = 3 * n_heads * hd  # q, k, v interleaved in one qkv row
    qkv = rng.standard_normal((n_tokens, stride), dtype=np.float32)
    width = n_heads * hd
    buf, off = buffer_of(ctx, qkv, 4)
    seg, _ = buffer_of(ctx, np.asarray(segments, np.int32))
    out = S.Buffer(ctx, n_tokens * width * 4)
    scale = 1 / np.sqrt(hd)
    S.attention_dense(ctx, buf, off, buf, off + width * 4, buf, off + 2 * width * 4, stride, n_tokens, n_heads, hd,
                      seg, 0, len(segments) - 1, scale, out, 0)
    got = out.to_numpy(np.float32, (n_tokens, width))
    q, k, v = (qkv[:, i * width:(i + 1) * width].astype(np.float64) for i in range(3))
    for a, b in zip(segments[:-1], segments[1:]):
        for t in range(a, b):
            ref = attention_reference(q[t].reshape(n_heads, hd), k[a:b].reshape(b - a, n_heads, hd),
                                      v[a:b].reshape(b - a, n_heads, hd), scale)
            assert np.abs(got[t] - ref).max() <= 2e-5 * np.abs(v).max(), f"token {t}"
    for b in (buf, seg, out):
        b.close()


def test_positions_decode(ctx, rng):
    with S.Slots(ctx, 3, 0, 10, 1, 2) as slots:
        slots.set_delta(1, -4)
        slots.set_delta(2, 7)
        before = [slots.read_positions(s, 0, 10) for s in range(3)]
        pairs = [(1, 6), (2, 0), (-1, 3), (0, 9), (1, 10)]
        br, _ = buffer_of(ctx, rows_array(pairs))
        S.positions_decode(ctx, slots, br, 0, len(pairs))
        br.close()
        after = [slots.read_positions(s, 0, 10) for s in range(3)]
        expect = [b.copy() for b in before]
        expect[1][6] = 6 - 4
        expect[2][0] = 0 + 7
        expect[0][9] = 9
        for s in range(3):
            assert np.array_equal(after[s], expect[s])
        assert [slots.length(s) for s in range(3)] == [0, 0, 0], "lengths are host bookkeeping"

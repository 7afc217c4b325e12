"""Causal attention at the lengths and shapes that exercise every tiling
boundary (contexts 1, 63, 64, 65, 1000, 4100; GQA ratios 1, 3, 4, 8; head_dim
64, 80, 128) against float64, with the cells past each row's index poisoned
with NaN; and exactness: a row's output bits do not depend on the batch size
(1..N, across the size, 256 rows, where the CUDA backend starts sharing K/V
tiles between rows of one slot), the row order, the slot holding the history, rows of one
slot interleaved with other slots, padding rows, or graph replay."""

import numpy as np
import pytest

from kernel_refs import attention_reference, buffer_of, rows_array
from strata import _ffi as S

CONTEXTS = [1, 63, 64, 65, 1000, 4100]


def bits(a):
    return np.ascontiguousarray(a).view(np.uint32)


def store_cells(ctx, slots, layer, slot, first, k, v):
    """kv_store rows k, v [n, kv_width] into cells first.. of `slot`."""
    n, width = k.shape
    bk, bv = S.Buffer.from_array(ctx, k), S.Buffer.from_array(ctx, v)
    br = S.Buffer.from_array(ctx, rows_array([(slot, first + i) for i in range(n)]))
    S.kv_store(ctx, slots, layer, bk, 0, width, bv, 0, width, br, 0, n)
    for b in (bk, bv, br):
        b.close()


def attend(ctx, slots, layer, q, n_heads, pairs, scale):
    bq, q_off = buffer_of(ctx, q, 16)
    br, _ = buffer_of(ctx, rows_array(pairs))
    out = S.Buffer(ctx, len(pairs) * q.shape[1] * 4)
    out.fill(0x7F)
    S.attention(ctx, slots, layer, bq, q_off, q.shape[1], len(pairs), n_heads, br, 0, scale, out, 0)
    got = out.to_numpy(np.float32, (len(pairs), q.shape[1]))
    for b in (bq, br, out):
        b.close()
    return got


@pytest.mark.parametrize("hd", [64, 80, 128])
@pytest.mark.parametrize("ratio", [1, 3, 4, 8])
def test_attention_contexts_against_float64(ctx, rng, hd, ratio):
    n_kv, n_ctx, layer = 2, 4160, 0
    n_heads = n_kv * ratio
    kv_w = n_kv * hd
    scale = 1 / np.sqrt(hd)
    # Slot s holds cells 0..lengths[s]-1; every cell after that holds NaN K and V.
    lengths = [4100, 1000, 65]
    hist_k = [rng.standard_normal((n, kv_w), dtype=np.float32) * 2 for n in lengths]
    hist_v = [rng.standard_normal((n, kv_w), dtype=np.float32) for n in lengths]
    nan = np.full((n_ctx, kv_w), np.nan, np.float32)
    with S.Slots(ctx, 3, 1, n_ctx, n_kv, hd) as slots:
        for s, n in enumerate(lengths):
            store_cells(ctx, slots, layer, s, 0, hist_k[s], hist_v[s])
            store_cells(ctx, slots, layer, s, n, nan[:n_ctx - n], nan[:n_ctx - n])
        pairs = [(0, c - 1) for c in CONTEXTS] + [(1, 999), (2, 64), (2, 62), (-1, 7), (2, 0)]
        q = rng.standard_normal((len(pairs), n_heads * hd), dtype=np.float32)
        got = attend(ctx, slots, layer, q, n_heads, pairs, scale)
    for r, (s, i) in enumerate(pairs):
        if s < 0:
            assert not got[r].any(), "padding row must get zeros"
            continue
        k16 = hist_k[s][:i + 1].astype(np.float16).astype(np.float64).reshape(i + 1, n_kv, hd)
        v16 = hist_v[s][:i + 1].astype(np.float16).astype(np.float64).reshape(i + 1, n_kv, hd)
        ref = attention_reference(q[r].reshape(n_heads, hd).astype(np.float64), k16, v16, scale)
        assert np.isfinite(got[r]).all(), f"NaN leaked into row {r} (slot {s}, index {i})"
        assert np.abs(got[r] - ref).max() <= 2e-5 * np.abs(v16).max(), f"row {r} (slot {s}, index {i})"


SHAPES = [  # n_heads, n_kv, head_dim: 135M, 8B and an MHA shape with head_dim 80
    (9, 3, 64), (8, 2, 128), (2, 2, 80)]


@pytest.mark.exactness
@pytest.mark.parametrize("n_heads,n_kv,hd", SHAPES, ids=lambda v: str(v))
def test_attention_rows_are_batch_invariant(ctx, rng, n_heads, n_kv, hd):
    """270 rows: a 240-row prompt chunk of slot 0 interleaved with decode rows
    of slots 1 and 3 (the same history) and 2, plus padding. Each row's bits
    equal the row computed alone, in any batch, order or slot."""
    n_slots, n_ctx, layer = 4, 1300, 1
    kv_w, width = n_kv * hd, n_heads * hd
    scale = 1 / np.sqrt(hd)
    lengths = [760, 1290, 300, 1290]
    hist = {s: (rng.standard_normal((lengths[s], kv_w), dtype=np.float32) * 2,
                rng.standard_normal((lengths[s], kv_w), dtype=np.float32)) for s in range(3)}
    hist[3] = hist[1]
    nan = np.full((n_ctx, kv_w), np.nan, np.float32)
    chunk = [(0, 500 + i) for i in range(240)]
    decode = [(1, 1289), (2, 299), (3, 1289), (1, 700), (2, 255), (2, 256), (3, 31), (1, 32), (2, 0), (3, 1000),
              (1, 511), (2, 100), (3, 257), (1, 64), (2, 299), (3, 1288), (1, 5), (2, 63), (3, 64), (1, 1024),
              (2, 128), (3, 1), (1, 900), (2, 200), (3, 600), (1, 300), (2, 50)]
    pairs = []
    for i in range(240):  # interleave: runs of chunk rows, decode rows between
        pairs.append(chunk[i])
        if i % 9 in (2, 3, 7) and decode:
            pairs.append(decode.pop())
    pairs += decode + [(-1, 3), (n_slots, 2), (0, n_ctx)]
    n = len(pairs)
    assert n >= 257
    q_all = rng.standard_normal((n, width), dtype=np.float32)

    with S.Slots(ctx, n_slots, 2, n_ctx, n_kv, hd) as slots:
        for s in range(n_slots):
            k, v = hist[s]
            store_cells(ctx, slots, layer, s, 0, k, v)
            store_cells(ctx, slots, layer, s, len(k), nan[:n_ctx - len(k)], nan[:n_ctx - len(k)])

        def run(order, moved=None):
            rows = [pairs[r] for r in order]
            if moved is not None:  # the decode rows of slot 1 read slot 3 instead, and back
                rows = [(4 - s, i) if s in (1, 3) else (s, i) for s, i in rows]
            return attend(ctx, slots, layer, q_all[order], n_heads, rows, scale)

        full = run(list(range(n)))
        assert np.isfinite(full[:n - 3]).all() and not full[n - 3:].any()
        for m in [1, 2, 3, 5, 13, 31, 64, 65, 255, 256, n - 1]:
            assert np.array_equal(bits(run(list(range(m)))), bits(full[:m])), f"batch of {m}"
        for _ in range(2):
            order = list(rng.permutation(n))
            assert np.array_equal(bits(run(order)), bits(full[order])), "row order"
        for r in range(0, n, 7):
            assert np.array_equal(bits(run([r])), bits(full[r:r + 1])), f"row {r} alone"
        assert np.array_equal(bits(run(list(range(n)), moved=True)), bits(full)), "slot 1 <-> 3 changed a result"
        # Negative control: a different history must change the result.
        other = attend(ctx, slots, layer, q_all[:1], n_heads, [(2, pairs[0][1] % 300)], scale)
        assert not np.array_equal(bits(other), bits(full[:1]))


@pytest.mark.parametrize("n_rows", [1, 3, 70])
def test_attention_and_rope_kv_store_in_a_graph(ctx, rng, n_rows):
    """Recorded and replayed (twice, with new row contents) = run eagerly, bit for bit;
    long slots so the CUDA backend splits single rows over a cluster of blocks."""
    n_heads, n_kv, hd, n_ctx = 8, 2, 64, 3000
    q_w, kv_w = n_heads * hd, n_kv * hd
    stride = q_w + 2 * kv_w
    pq = S.rope_params(S.RopeMode.HALF, n_heads, hd)
    pk = S.rope_params(S.RopeMode.HALF, n_kv, hd)
    history = rng.standard_normal((n_ctx, kv_w), dtype=np.float32)
    with S.Slots(ctx, 2, 1, n_ctx, n_kv, hd) as slots:
        for s in range(2):
            slots.write_positions(s, 0, np.repeat(np.arange(n_ctx, dtype=np.int32)[:, None], 4, axis=1))
            store_cells(ctx, slots, 0, s, 0, history, history)
        qkv = S.Buffer(ctx, n_rows * stride * 4)
        rows = S.Buffer(ctx, n_rows * 8)
        out = S.Buffer(ctx, n_rows * q_w * 4)

        def inputs(step):
            x = rng.standard_normal((n_rows, stride), dtype=np.float32)
            r = rows_array([(i % 2, 2500 + 7 * i + step) for i in range(n_rows)])
            return x, r

        def enqueue():
            S.rope_kv_store(ctx, pq, pk, slots, 0, qkv, 0, stride, n_rows, rows, 0)
            S.attention(ctx, slots, 0, qkv, 0, stride, n_rows, n_heads, rows, 0, 0.125, out, 0)

        def restore_history():  # a step writes cells that rows of earlier steps read
            for s in range(2):
                store_cells(ctx, slots, 0, s, 0, history, history)

        steps = [inputs(step) for step in range(3)]
        eager = []
        for x, r in steps:
            qkv.upload(x)
            rows.upload(r)
            enqueue()
            eager.append(out.to_numpy(np.float32, (n_rows, q_w)))
        restore_history()
        ctx.graph_begin()
        enqueue()
        graph = ctx.graph_end()
        try:
            restore_history()
            for (x, r), want in zip(steps, eager):
                qkv.upload(x)
                rows.upload(r)
                graph.launch()
                assert np.array_equal(bits(out.to_numpy(np.float32, (n_rows, q_w))), bits(want))
        finally:
            graph.close()
            for b in (qkv, rows, out):
                b.close()

"""Batch invariance of every row kernel: each output row is bit-identical
whatever the batch size (1..N), the row order, the other rows, and which slot
(or where in the token sequence, for dense attention) the row uses. Matmul has
its own, per dtype, in test_matmul.py."""

import numpy as np
import pytest

from kernel_refs import make_weights, rows_array
from strata import _ffi as S

pytestmark = pytest.mark.exactness
N = 9


def bits(a):
    return np.ascontiguousarray(a).view(np.uint32 if a.dtype.itemsize == 4 else np.uint8)


def check_invariant(run, rng, n=N):
    """run(order) -> per-row outputs [len(order), ...] for input rows `order`."""
    full = run(list(range(n)))
    for m in range(1, n + 1):
        assert np.array_equal(bits(run(list(range(m)))), bits(full[:m])), f"batch of {m}"
    for _ in range(3):
        order = list(rng.permutation(n))
        assert np.array_equal(bits(run(order)), bits(full[order])), f"order {order}"
    for r in range(n):
        assert np.array_equal(bits(run([r])), bits(full[r:r + 1])), f"row {r} alone"


def test_embed_rmsnorm_silu_gelu_add_invariant(ctx, rng):
    dim = 96
    raw, _ = make_weights(rng, S.DType.Q4_1, 30, dim)
    table = S.Buffer.from_array(ctx, raw)
    weight = S.Buffer.from_array(ctx, rng.standard_normal(dim, dtype=np.float32))
    ids_all = rng.integers(0, 30, N).astype(np.int32)
    x_all = rng.standard_normal((N, 2 * dim), dtype=np.float32) * 3

    def run(order):
        n = len(order)
        ids = S.Buffer.from_array(ctx, ids_all[order])
        x = S.Buffer.from_array(ctx, x_all[order])               # [n, 2 * dim]: gate | up
        xn = S.Buffer.from_array(ctx, x_all[order][:, dim:] * 2)  # [n, dim]
        e, h, g = S.Buffer(ctx, n * dim * 4), S.Buffer(ctx, n * dim * 4), S.Buffer(ctx, n * dim * 4)
        S.embed(ctx, table, 0, S.DType.Q4_1, 30, dim, ids, 0, n, e, 0)
        S.rmsnorm(ctx, xn, 0, weight, 0, h, 0, n, dim, 1e-6)
        S.silu_mul(ctx, x, 0, 2 * dim, x, dim * 4, 2 * dim, g, 0, n, dim)
        S.add(ctx, g, 0, e, 0, g, 0, n * dim)
        S.gelu(ctx, h, 0, h, 0, n * dim)
        out = np.concatenate([e.to_numpy(np.float32, (n, dim)), h.to_numpy(np.float32, (n, dim)),
                              g.to_numpy(np.float32, (n, dim))], axis=1)
        for b in (ids, x, xn, e, h, g):
            b.close()
        return out

    check_invariant(run, rng)
    table.close()
    weight.close()


def test_gather_argmax_sample_invariant(ctx, rng):
    vocab = 1000
    logits_all = rng.standard_normal((N, vocab), dtype=np.float32)
    params_all = np.zeros(N, S.SAMPLING_PARAMS_DTYPE)
    params_all["temperature"], params_all["top_p"], params_all["top_k"] = 0.9, 0.9, 100
    params_all["min_p"], params_all["seed"], params_all["position"] = 0.01, np.arange(N) * 7, np.arange(N) + 100
    src = S.Buffer.from_array(ctx, logits_all)

    def run(order):
        n = len(order)
        idx = S.Buffer.from_array(ctx, np.asarray(order, np.int32))
        logits = S.Buffer(ctx, n * vocab * 4)
        params = S.Buffer.from_array(ctx, params_all[order])
        ids = S.Buffer(ctx, 8 * n)
        S.gather_rows(ctx, src, 0, N, vocab * 4, idx, 0, n, logits, 0)
        S.argmax(ctx, logits, 0, n, vocab, ids, 0)
        S.sample(ctx, logits, 0, n, vocab, params, 0, ids, 4 * n)
        out = np.concatenate([logits.to_numpy(np.float32, (n, vocab)).view(np.int32),
                              ids.to_numpy(np.int32, (2, n)).T], axis=1)
        for b in (idx, logits, params, ids):
            b.close()
        return out

    check_invariant(run, rng)
    src.close()


def test_rope_kv_attention_invariant_across_batches_and_slots(ctx, rng):
    """Slots 0, 2 and 3 hold the same history (slot 1 another); row r queries
    cell index[r] of its slot. Outputs depend only on (q, history, index)."""
    n_slots, n_ctx, n_heads, n_kv, hd = 4, 70, 6, 2, 16
    width, kv_width = n_heads * hd, n_kv * hd
    hist_k = rng.standard_normal((n_ctx, kv_width), dtype=np.float32)
    hist_v = rng.standard_normal((n_ctx, kv_width), dtype=np.float32)
    other = rng.standard_normal((n_ctx, kv_width), dtype=np.float32)
    q_all = rng.standard_normal((N, width), dtype=np.float32)
    index_all = rng.integers(0, n_ctx, N)
    same_slots = [0, 2, 3]
    rope = S.rope_params(S.RopeMode.MROPE, n_heads, hd, hd, 10000.0, 1.0, (2, 3, 3, 0))
    pos = rng.integers(0, 500, (n_ctx, 4)).astype(np.int32)

    def run(order, slot_of_row):
        n = len(order)
        with S.Slots(ctx, n_slots, 1, n_ctx, n_kv, hd) as slots:
            for s in range(n_slots):
                slots.write_positions(s, 0, pos)
                k = S.Buffer.from_array(ctx, other if s == 1 else hist_k)
                v = S.Buffer.from_array(ctx, other if s == 1 else hist_v)
                all_rows = S.Buffer.from_array(ctx, rows_array([(s, i) for i in range(n_ctx)]))
                S.kv_store(ctx, slots, 0, k, 0, kv_width, v, 0, kv_width, all_rows, 0, n_ctx)
                for b in (k, v, all_rows):
                    b.close()
            rows = S.Buffer.from_array(ctx, rows_array([(slot_of_row[r], index_all[r]) for r in order]))
            q = S.Buffer.from_array(ctx, q_all[order])
            out = S.Buffer(ctx, n * width * 4)
            S.rope(ctx, rope, q, 0, width, n, slots, rows, 0)
            S.attention(ctx, slots, 0, q, 0, width, n, n_heads, rows, 0, 0.25, out, 0)
            result = np.concatenate([q.to_numpy(np.float32, (n, width)), out.to_numpy(np.float32, (n, width))], axis=1)
            for b in (rows, q, out):
                b.close()
        return result

    baseline = run(list(range(N)), [0] * N)
    for trial in range(3):
        slot_of_row = [int(rng.choice(same_slots)) for _ in range(N)]
        check_invariant(lambda order: run(order, slot_of_row), rng)
        assert np.array_equal(bits(run(list(range(N)), slot_of_row)), bits(baseline)), "slot changed a result"
    with_other = run(list(range(N)), [1] + [0] * (N - 1))
    assert not np.array_equal(bits(with_other[0]), bits(baseline[0])), "negative control: slot 1 differs"
    assert np.array_equal(bits(with_other[1:]), bits(baseline[1:]))


def test_debug_share_table_breaks_rope_exactness(ctx, rng):
    """Negative control: sharing a table changes a row's result, so exactness checks can see it."""
    with S.Slots(ctx, 2, 0, 8, 1, 2) as slots:
        slots.write_positions(0, 0, np.full((8, 4), 3, np.int32))
        slots.write_positions(1, 0, np.full((8, 4), 4, np.int32))
        params = S.rope_params(S.RopeMode.ADJACENT, 1, 8)
        x = rng.standard_normal((1, 8), dtype=np.float32)
        rows = S.Buffer.from_array(ctx, rows_array([(1, 5)]))

        def once():
            buf = S.Buffer.from_array(ctx, x)
            S.rope(ctx, params, buf, 0, 8, 1, slots, rows, 0)
            out = buf.to_numpy(np.float32, (8,))
            buf.close()
            return out

        own = once()
        slots.debug_share_table(1, 0)
        assert not np.array_equal(own, once())
        rows.close()


def test_dense_attention_invariant_to_neighbours(ctx, rng):
    """An image's tokens give the same bits alone or after other images."""
    n_heads, hd = 2, 40
    width = n_heads * hd
    image = rng.standard_normal((3, 37, width), dtype=np.float32)  # q, k, v of 37 tokens

    def run(prefix_tokens):
        before = rng.standard_normal((3, prefix_tokens, width), dtype=np.float32)
        q, k, v = (np.concatenate([before[i], image[i]]) for i in range(3))
        n = prefix_tokens + 37
        segs = [0, prefix_tokens, n] if prefix_tokens else [0, n]
        bq, bk, bv = (S.Buffer.from_array(ctx, a) for a in (q, k, v))
        seg = S.Buffer.from_array(ctx, np.asarray(segs, np.int32))
        out = S.Buffer(ctx, n * width * 4)
        S.attention_dense(ctx, bq, 0, bk, 0, bv, 0, width, n, n_heads, hd, seg, 0, len(segs) - 1, 0.1, out, 0)
        result = out.to_numpy(np.float32, (n, width))[prefix_tokens:]
        for b in (bq, bk, bv, seg, out):
            b.close()
        return result

    alone = run(0)
    for prefix in (1, 5, 31, 64):
        assert np.array_equal(bits(run(prefix)), bits(alone)), f"after {prefix} other tokens"


def test_cpu_results_do_not_depend_on_thread_count(rng):
    """The CPU split (chunks claimed by however many threads) never changes a value."""
    raw, _ = make_weights(rng, S.DType.Q4_1, 301, 576)
    x = rng.standard_normal((13, 576), dtype=np.float32)
    logits = rng.standard_normal((3, 5000), dtype=np.float32)
    params = np.zeros(3, S.SAMPLING_PARAMS_DTYPE)
    params["temperature"], params["top_p"], params["seed"], params["position"] = 1.0, 0.9, 5, [1, 2, 3]
    results = []
    for threads in (1, 2, 3):
        with S.Context("cpu", threads) as ctx:
            bufs = [S.Buffer.from_array(ctx, a) for a in (raw, x, logits, params)]
            y, ids = S.Buffer(ctx, 13 * 301 * 4), S.Buffer(ctx, 12)
            S.matmul(ctx, bufs[1], 0, 13, 576, bufs[0], 0, S.DType.Q4_1, 301, None, 0, y, 0)
            S.sample(ctx, bufs[2], 0, 3, 5000, bufs[3], 0, ids, 0)
            results.append((y.to_numpy(np.float32, (13 * 301,)).view(np.uint32), ids.to_numpy(np.int32, (3,))))
            for b in bufs + [y, ids]:
                b.close()
    for y, ids in results[1:]:
        assert np.array_equal(y, results[0][0]) and np.array_equal(ids, results[0][1])

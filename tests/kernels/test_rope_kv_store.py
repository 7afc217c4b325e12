"""strata_rope_kv_store (the fused rope(q) + rope(k) + kv_store over [q | k | v]
rows) against the three separate calls on the same backend — bit for bit: the
rotated q and k left in the buffer and the cache contents they produce — and
against the float64 rope reference. The cache is read back through attention:
identical caches give identical attention bits for random queries, and a
query with scale 0 averages V exactly as stored."""

import numpy as np
import pytest

from kernel_refs import buffer_of, rope_reference, rows_array
from strata import _ffi as S

CASES = [
    # mode, n_heads, n_kv, head_dim, rot_dim, sections, freq_factors
    (S.RopeMode.ADJACENT, 9, 3, 64, 64, (0, 0, 0, 0), False),
    (S.RopeMode.ADJACENT, 4, 2, 16, 10, (0, 0, 0, 0), True),
    (S.RopeMode.HALF, 8, 2, 128, 128, (0, 0, 0, 0), True),
    (S.RopeMode.HALF, 6, 1, 80, 64, (0, 0, 0, 0), False),
    (S.RopeMode.MROPE, 4, 2, 32, 32, (4, 6, 6, 0), False),
]
N_SLOTS, N_CTX, LAYER = 3, 40, 1


def bits(a):
    return np.ascontiguousarray(a).view(np.uint32)


def make_rows(rng, n_rows):
    """Distinct (slot, index) cells; rows 2 and 4 are padding when there are that many."""
    pairs = [(int(c) // N_CTX, int(c) % N_CTX) for c in rng.permutation(N_SLOTS * N_CTX)[:n_rows]]
    if n_rows > 4:
        pairs[2] = (-1, 3)          # padding
        pairs[4] = (N_SLOTS, 1)     # out-of-range slot: padding too
    return pairs


def read_cache(ctx, slots, n_heads, pairs, q_probe):
    """Attention of random probe queries at every stored row (bits depend on every K and V
    cell up to the index), and scale-0 attention (the exact mean of V up to the index)."""
    br, _ = buffer_of(ctx, rows_array(pairs))
    bq, _ = buffer_of(ctx, q_probe)
    width = n_heads * slots.head_dim
    outs = []
    for scale in (0.37, 0.0):
        out = S.Buffer(ctx, len(pairs) * width * 4)
        S.attention(ctx, slots, LAYER, bq, 0, width, len(pairs), n_heads, br, 0, scale, out, 0)
        outs.append(out.to_numpy(np.float32, (len(pairs), width)))
        out.close()
    br.close()
    bq.close()
    return outs


# 1 and 12 rows: a row's heads spread over several CUDA blocks; 100: a block per row walking its heads.
@pytest.mark.parametrize("n_rows", [12, 1, 100])
@pytest.mark.parametrize("mode,n_heads,n_kv,hd,rot_dim,sections,use_ff", CASES, ids=lambda v: str(v))
def test_fused_equals_separate_calls(ctx, rng, mode, n_heads, n_kv, hd, rot_dim, sections, use_ff, n_rows):
    q_w, kv_w = n_heads * hd, n_kv * hd
    stride = q_w + 2 * kv_w + 5
    qkv = rng.standard_normal((n_rows, stride), dtype=np.float32)
    pairs = make_rows(rng, n_rows)
    tables = rng.integers(0, 3000, (N_SLOTS, N_CTX, 4)).astype(np.int32)
    ff = rng.uniform(1, 8, rot_dim // 2).astype(np.float32) if use_ff else None
    pq = S.rope_params(mode, n_heads, hd, rot_dim, 10000.0, 1.0, sections)
    pk = S.rope_params(mode, n_kv, hd, rot_dim, 10000.0, 1.0, sections)
    valid = [r for r, (s, _) in enumerate(pairs) if 0 <= s < N_SLOTS]
    probe = rng.standard_normal((len(valid), q_w), dtype=np.float32)
    results = []
    for fused in (True, False):
        with S.Slots(ctx, N_SLOTS, 2, N_CTX, n_kv, hd) as slots:
            for s in range(N_SLOTS):
                slots.write_positions(s, 0, tables[s])
            # Every cell gets a value first, so attention over 0..index reads only written cells.
            fill_k = S.Buffer.from_array(ctx, np.full((N_CTX, kv_w), 0.5, np.float32))
            fill_rows = [S.Buffer.from_array(ctx, rows_array([(s, i) for i in range(N_CTX)])) for s in range(N_SLOTS)]
            for fr in fill_rows:
                S.kv_store(ctx, slots, LAYER, fill_k, 0, kv_w, fill_k, 0, kv_w, fr, 0, N_CTX)
            buf, off = buffer_of(ctx, qkv, 12)
            br, r_off = buffer_of(ctx, rows_array(pairs), 8)
            bf = S.Buffer.from_array(ctx, ff) if ff is not None else None
            if fused:
                S.rope_kv_store(ctx, pq, pk, slots, LAYER, buf, off, stride, n_rows, br, r_off, bf, 0)
            else:
                S.rope(ctx, pq, buf, off, stride, n_rows, slots, br, r_off, bf, 0)
                S.rope(ctx, pk, buf, off + q_w * 4, stride, n_rows, slots, br, r_off, bf, 0)
                S.kv_store(ctx, slots, LAYER, buf, off + q_w * 4, stride, buf, off + (q_w + kv_w) * 4, stride,
                           br, r_off, n_rows)
            got = buf.to_numpy(np.float32, qkv.shape, off)
            cache = read_cache(ctx, slots, n_heads, [pairs[r] for r in valid], probe)
            for b in [fill_k, buf, br, bf] + fill_rows:
                if b is not None:
                    b.close()
        results.append((got, cache))
    (fused_x, fused_cache), (sep_x, sep_cache) = results
    assert np.array_equal(bits(fused_x), bits(sep_x)), "rotated q/k differ from rope + rope"
    for a, b in zip(fused_cache, sep_cache):
        assert np.array_equal(bits(a), bits(b)), "cache differs from kv_store"

    # Against float64: q and k rotated, v untouched, padding rows untouched.
    for r, (s, i) in enumerate(pairs):
        if not 0 <= s < N_SLOTS:
            assert np.array_equal(bits(fused_x[r]), bits(qkv[r])), "padding row modified"
            continue
        pos = tables[s, i][None]
        angle_ulps = 4 * float(pos.max()) * 2.0 ** -23
        for lo, width, heads in ((0, q_w, n_heads), (q_w, kv_w, n_kv)):
            ref = rope_reference(qkv[r:r + 1, lo:lo + width], pos, mode, hd, rot_dim, 10000.0, 1.0, sections, ff)
            err = np.abs(fused_x[r, lo:lo + width] - ref[0]).max()
            assert err <= (2e-6 + angle_ulps) * np.abs(qkv[r]).max(), f"row {r} heads at {lo}"
        assert np.array_equal(bits(fused_x[r, q_w + kv_w:]), bits(qkv[r, q_w + kv_w:])), "v or tail modified"
    # Scale-0 attention at a row that is the only stored cell of its slot... is the mean of V over
    # cells 0..index; check one row's V made it into the cache rounded to F16.
    r = valid[0]
    s, i = pairs[r]
    others = {c for (sl, c) in (pairs[k] for k in valid) if sl == s and c < i}
    v16 = qkv[r, q_w + kv_w:q_w + 2 * kv_w].astype(np.float16).astype(np.float64).reshape(n_kv, hd)
    stored = np.full((i + 1, n_kv, hd), 0.5)
    stored[i] = v16
    for k in valid:
        sl, c = pairs[k]
        if sl == s and c in others:
            stored[c] = qkv[k, q_w + kv_w:q_w + 2 * kv_w].astype(np.float16).reshape(n_kv, hd)
    mean = stored.mean(axis=0)  # [n_kv, hd]
    group = n_heads // n_kv
    expect = np.repeat(mean, group, axis=0).reshape(-1)
    assert np.abs(fused_cache[1][0] - expect).max() <= 1e-5 * np.abs(stored).max()


def test_fused_checks(ctx):
    with S.Slots(ctx, 1, 1, 4, 2, 8) as slots:
        qkv = S.Buffer(ctx, 4 * 64 * 4)
        rows = S.Buffer.from_array(ctx, rows_array([(0, 0)]))
        pq = S.rope_params(S.RopeMode.HALF, 4, 8)
        with pytest.raises(S.StrataError, match="k_params.n_heads=3 must equal"):
            S.rope_kv_store(ctx, pq, S.rope_params(S.RopeMode.HALF, 3, 8), slots, 0, qkv, 0, 64, 1, rows, 0)
        with pytest.raises(S.StrataError, match="head_dim"):
            S.rope_kv_store(ctx, S.rope_params(S.RopeMode.HALF, 4, 16), S.rope_params(S.RopeMode.HALF, 2, 16),
                            slots, 0, qkv, 0, 64, 1, rows, 0)
        with pytest.raises(S.StrataError, match="qkv: row stride"):
            S.rope_kv_store(ctx, pq, S.rope_params(S.RopeMode.HALF, 2, 8), slots, 0, qkv, 0, 63, 1, rows, 0)
        with pytest.raises(S.StrataError, match="layer"):
            S.rope_kv_store(ctx, pq, S.rope_params(S.RopeMode.HALF, 2, 8), slots, 1, qkv, 0, 64, 1, rows, 0)
        S.rope_kv_store(ctx, pq, S.rope_params(S.RopeMode.HALF, 2, 8), slots, 0, qkv, 0, 64, 1, rows, 0)
        qkv.close()
        rows.close()

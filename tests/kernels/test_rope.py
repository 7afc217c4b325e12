"""strata_rope in its four modes against a float64 reference that shares
transformers' float32 angle computation (inverse frequencies and position x
frequency products in float32, cos/sin in float64), positions read from the
slot tables; plus padding rows, freq_factors, freq_scale and the debug table
share. Tolerance: 2e-6 * max|x| (cosf/sinf and two products per value)."""

import numpy as np
import pytest

from kernel_refs import buffer_of, rope_reference, rows_array
from strata import _ffi as S

CASES = [
    # mode, n_heads, head_dim, rot_dim, sections
    (S.RopeMode.ADJACENT, 3, 64, 64, (0, 0, 0, 0)),
    (S.RopeMode.ADJACENT, 2, 10, 6, (0, 0, 0, 0)),
    (S.RopeMode.HALF, 5, 32, 32, (0, 0, 0, 0)),
    (S.RopeMode.HALF, 1, 16, 8, (0, 0, 0, 0)),
    (S.RopeMode.MROPE, 4, 32, 32, (4, 6, 6, 0)),
    (S.RopeMode.MROPE, 2, 16, 16, (2, 2, 2, 2)),
    (S.RopeMode.VISION, 3, 16, 16, (4, 4, 0, 0)),
]


def run_rope(ctx, x, params, slots, rows, stride, freq_factors=None):
    n_rows = x.shape[0]
    bx, x_off = buffer_of(ctx, x, 8)
    br, r_off = buffer_of(ctx, rows, 4)
    bf = S.Buffer.from_array(ctx, np.asarray(freq_factors, np.float32)) if freq_factors is not None else None
    S.rope(ctx, params, bx, x_off, stride, n_rows, slots, br, r_off, bf, 0)
    out = bx.to_numpy(np.float32, x.shape, x_off)
    for b in (bx, br, bf):
        if b is not None:
            b.close()
    return out


@pytest.mark.parametrize("mode,n_heads,head_dim,rot_dim,sections", CASES, ids=lambda v: str(v))
def test_rope_modes(ctx, rng, mode, n_heads, head_dim, rot_dim, sections):
    n_slots, n_ctx, n_rows = 3, 40, 7
    theta, scale = 10000.0, 1.0
    with S.Slots(ctx, n_slots, 0, n_ctx, 1, 2) as slots:
        tables = rng.integers(0, 300, (n_slots, n_ctx, 4)).astype(np.int32)
        for s in range(n_slots):
            slots.write_positions(s, 0, tables[s])
        pairs = [(int(rng.integers(0, n_slots)), int(rng.integers(0, n_ctx))) for _ in range(n_rows)]
        pairs[3] = (-1, 0)          # padding
        pairs[5] = (n_slots, 2)     # out of range slot -> padding
        stride = n_heads * head_dim + 3
        x = rng.standard_normal((n_rows, stride), dtype=np.float32)
        params = S.rope_params(mode, n_heads, head_dim, rot_dim, theta, scale, sections)
        got = run_rope(ctx, x, params, slots, rows_array(pairs), stride)
    width = n_heads * head_dim
    for r, (s, i) in enumerate(pairs):
        if not 0 <= s < n_slots:
            assert np.array_equal(got[r], x[r]), "padding row was modified"
            continue
        ref = rope_reference(x[r:r + 1, :width], tables[s, i][None], mode, head_dim, rot_dim, theta, scale, sections)
        # float32 angles (pos * inv) reach ~300 rad here; one ulp of inv or angle (a backend's pow
        # may round differently from numpy's) moves cos/sin by up to |angle| * 2^-23.
        angle_ulps = 4 * float(tables[s, i].max()) * 2.0 ** -23
        assert np.abs(got[r, :width] - ref[0]).max() <= (2e-6 + angle_ulps) * np.abs(x[r]).max(), f"row {r}"
        assert np.array_equal(got[r, width:], x[r, width:]), "bytes past the heads were modified"


def test_rope_freq_factors_and_scale(ctx, rng):
    n_heads, head_dim = 2, 16
    ff = rng.uniform(1, 8, head_dim // 2).astype(np.float32)
    with S.Slots(ctx, 1, 0, 8, 1, 2) as slots:
        pos = np.repeat(np.arange(100, 108, dtype=np.int32)[:, None], 4, axis=1)
        slots.write_positions(0, 0, pos)
        x = rng.standard_normal((8, n_heads * head_dim), dtype=np.float32)
        params = S.rope_params(S.RopeMode.ADJACENT, n_heads, head_dim, head_dim, 500000.0, 0.25)
        got = run_rope(ctx, x, params, slots, rows_array([(0, i) for i in range(8)]), n_heads * head_dim, ff)
    ref = rope_reference(x, pos, S.RopeMode.ADJACENT, head_dim, head_dim, 500000.0, 0.25, freq_factors=ff)
    assert np.abs(got - ref).max() <= 2e-6 * np.abs(x).max()


def test_rope_debug_share_reads_target_table(ctx, rng):
    with S.Slots(ctx, 2, 0, 4, 1, 2) as slots:
        slots.write_positions(0, 0, np.full((4, 4), 11, np.int32))
        slots.write_positions(1, 0, np.full((4, 4), 222, np.int32))
        x = rng.standard_normal((1, 8), dtype=np.float32)
        params = S.rope_params(S.RopeMode.HALF, 1, 8)
        own = run_rope(ctx, x, params, slots, rows_array([(1, 2)]), 8)
        slots.debug_share_table(1, 0)
        shared = run_rope(ctx, x, params, slots, rows_array([(1, 2)]), 8)
        slot0 = run_rope(ctx, x, params, slots, rows_array([(0, 2)]), 8)
        assert not np.array_equal(own, shared)
        assert np.array_equal(shared, slot0)
        slots.debug_share_table(1, 1)
        assert np.array_equal(run_rope(ctx, x, params, slots, rows_array([(1, 2)]), 8), own)

"""libstrata's CUDA switches refuse values they do not take (libstrata/src/core/env_switch.h): a matmul that
reads STRATA_INT_Q4_1, STRATA_INT_FUSE_ROUNDS, STRATA_INT_FUSE_CTAS or STRATA_INT_EARLY_STAGES with a typo in it fails with an
error naming the variable and what it takes, and leaves y as it was. Before 2026-12-06 the first read any
value but "0" as on and the second took atoi's reading ("abc" was 0), so a typo silently timed the other
route of an A/B. The tile kernel's switches, STRATA_PDL, STRATA_INT_GEMV_FUSE and STRATA_MATMUL_ROPE have
their refusal tests beside their kernels (test_int_tiles.py, test_pdl.py, test_int_gemv.py,
test_matmul_rope_kv_store.py)."""

import numpy as np
import pytest

from kernel_refs import make_weights
from strata import _ffi as S

pytestmark = pytest.mark.gpu


def refused(ctx, rng, monkeypatch, dtype, n_rows, settings, match):
    """A matmul of n_rows under `settings` fails with `match`; y keeps its bits. Then, the settings
    removed, the same call succeeds and writes y (so the refusal, not the shape, stopped it)."""
    k, n_out = 256, 40
    raw, _ = make_weights(rng, dtype, n_out, k)
    x = rng.standard_normal((n_rows, k), dtype=np.float32)
    y0 = rng.standard_normal((n_rows, n_out)).astype(np.float32)
    bx, bw, by = (S.Buffer.from_array(ctx, a) for a in (x, raw, y0))
    try:
        for var, value in settings.items():
            monkeypatch.setenv(var, value)
        with pytest.raises(S.StrataError, match=match):
            S.matmul(ctx, bx, 0, n_rows, k, bw, 0, dtype, n_out, None, 0, by, 0, False)
        ctx.synchronize()
        assert np.array_equal(by.to_numpy(np.float32, (n_rows, n_out)).view(np.uint32), y0.view(np.uint32))
        for var in settings:
            monkeypatch.delenv(var)
        S.matmul(ctx, bx, 0, n_rows, k, bw, 0, dtype, n_out, None, 0, by, 0, False)
        ctx.synchronize()
        assert not np.array_equal(by.to_numpy(np.float32, (n_rows, n_out)).view(np.uint32), y0.view(np.uint32))
    finally:
        for b in (bx, bw, by):
            b.close()


@pytest.mark.parametrize("value", ["on", "off", "true", "2", " 1"])
def test_int_q4_1_takes_0_or_1(cuda_ctx, rng, monkeypatch, value):
    refused(cuda_ctx, rng, monkeypatch, S.DType.Q4_1, 70, {"STRATA_INT_Q4_1": value},
            rf"STRATA_INT_Q4_1={value}: expected 1 \(the default")


@pytest.mark.parametrize("value", ["abc", "-1", "1.5", "8x"])
def test_fuse_rounds_takes_a_whole_number(cuda_ctx, rng, monkeypatch, value):
    # One row on the legacy kernels: the dot kernel's route, where the fused form is asked about.
    refused(cuda_ctx, rng, monkeypatch, S.DType.Q4_0, 1, {"STRATA_INT_MATMUL": "legacy", "STRATA_INT_FUSE_ROUNDS": value},
            rf"STRATA_INT_FUSE_ROUNDS={value}: expected a whole number of rounds")


@pytest.mark.parametrize("value", ["abc", "-1", "65", "2x"])
def test_fuse_ctas_takes_a_whole_number_up_to_64(cuda_ctx, rng, monkeypatch, value):
    # Read only where the fused form runs: one row of a short k under STRATA_INT_FUSE_ROUNDS.
    refused(cuda_ctx, rng, monkeypatch, S.DType.Q4_0, 1,
            {"STRATA_INT_MATMUL": "legacy", "STRATA_INT_FUSE_ROUNDS": "8", "STRATA_INT_FUSE_CTAS": value},
            rf"STRATA_INT_FUSE_CTAS={value}: expected a whole number of CTAs per SM")


@pytest.mark.parametrize("value", ["2", "yes", "01", " 1"])
def test_early_stages_takes_0_or_1(cuda_ctx, rng, monkeypatch, value):
    # Read where a dot kernel launches: one row on the legacy kernels.
    refused(cuda_ctx, rng, monkeypatch, S.DType.Q4_0, 1, {"STRATA_INT_MATMUL": "legacy", "STRATA_INT_EARLY_STAGES": value},
            rf"STRATA_INT_EARLY_STAGES={value}: expected 0 or 1")

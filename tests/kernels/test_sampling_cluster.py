"""Seeded sampling at vocabulary sizes around the CUDA sampler's split points: a row
is split into 8 slices of a multiple of 4 ids (one per CTA of a cluster; 16 slices
above 65,536 ids), each slice into per-thread chunks of an odd length over 256
threads, so sizes below 32 leave CTAs empty, sizes around 8 x 4 x 256 change the
chunk length, and 65,536 / 65,537 switch the cluster size. Every row must equal the float64
reference of strata.h's rule (where no decision is within rounding of a
boundary), and its own draw sampled alone and among other row counts
(exactness); the CPU runs the same checks. The CUDA sampler's exact integer
definition is checked draw for draw by libstrata/cuda_emu/test_sample.cpp."""

import numpy as np
import pytest

from test_sampling import run_sample
from test_sampling_blocks import check_reference, rows_for, shaped_logits

SPLITS = [5, 31, 32, 33, 2047, 2048, 2049, 8191, 8193, 65536, 65537, 262144]


@pytest.mark.parametrize("n_vocab", SPLITS)
def test_sample_around_the_split_points_matches_reference(ctx, rng, n_vocab):
    rows = rows_for(rng, 16)
    logits = shaped_logits(rng, len(rows), n_vocab) if n_vocab > 60 else \
        (rng.standard_normal((len(rows), n_vocab)) * 2).astype(np.float32)
    got = run_sample(ctx, logits, rows)
    assert ((got >= 0) & (got < n_vocab)).all()
    assert check_reference(logits, rows, got) >= 10


@pytest.mark.exactness
@pytest.mark.parametrize("n_vocab", [2049, 8193])
@pytest.mark.parametrize("n_rows", [1, 3, 64, 130])
def test_sample_rows_equal_their_solo_draws_at_any_row_count(ctx, rng, n_vocab, n_rows):
    rows = rows_for(rng, n_rows)
    logits = shaped_logits(rng, n_rows, n_vocab)
    together = run_sample(ctx, logits, rows)
    for r in sorted({0, n_rows // 2, n_rows - 1}):
        assert run_sample(ctx, logits[r:r + 1], [rows[r]])[0] == together[r], f"row {r}"
    # negative control: the same row under other seeds gives other draws, so equality above means something
    draws = run_sample(ctx, np.repeat(logits[0:1], 16, axis=0), [dict(rows[0], temperature=1.0, top_k=0, top_p=1.0,
                                                                     min_p=0.0, seed=s) for s in range(16)])
    assert len(set(draws.tolist())) > 1


def test_sample_vocab_beyond_the_slices_is_refused_on_cuda(ctx, backend, rng):
    """1,000,000 ids do not fit 16 slices of a CTA's shared memory: CUDA refuses the call with a
    clear error (and stays usable); the CPU samples it."""
    from kernel_refs import buffer_of
    from strata import _ffi as S

    n = 1_000_000
    logits = rng.standard_normal((1, n)).astype(np.float32)
    rows = [dict(temperature=0.8, top_p=0.9, top_k=0, min_p=0.0, seed=1, position=2)]
    if backend == "cpu":
        assert 0 <= run_sample(ctx, logits, rows)[0] < n
        return
    from test_sampling import params_array
    bl, _ = buffer_of(ctx, logits)
    bp, p_off = buffer_of(ctx, params_array(rows), 8)
    out = S.Buffer(ctx, 4)
    try:
        with pytest.raises(S.StrataError) as e:
            S.sample(ctx, bl, 0, 1, n, bp, p_off, out, 0)
        assert e.value.status == S.Status.ERR_INVALID_ARGUMENT
        assert "shared memory" in e.value.message, e.value.message
    finally:
        for b in (bl, bp, out):
            b.close()
    small = rng.standard_normal((1, 1000)).astype(np.float32)
    assert 0 <= run_sample(ctx, small, rows)[0] < 1000  # still serving

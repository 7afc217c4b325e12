"""Seeded sampling across row counts (127 and 129: around the previous CUDA sampler's
128-block cap; the cluster sampler launches one 8-CTA cluster per row) and top-k
settings (k 256 / 300 / 2000, many tied logits at the k-th, rows masked to -inf but
for a few ids). Every row must equal the float64
reference of strata.h's rule (where no decision is within rounding of a
boundary) and its own draw sampled alone (exactness); the CPU runs the same
checks."""

import numpy as np
import pytest

from test_sampling import run_sample, uniform_reference
from test_sampling_vocab import model_like_logits, reference_with_margins

SETTINGS = [
    dict(temperature=0.8),
    dict(temperature=0.8, top_k=40, top_p=0.95),
    dict(temperature=0.8, top_p=0.95),
    dict(temperature=0.7, top_k=256),   # k = 256: the largest k of the candidate-list route
    dict(temperature=0.7, top_k=300),   # k > 256: the radix select over the whole row
    dict(temperature=1.2, top_k=2000, top_p=0.9),
    dict(temperature=0.8, min_p=0.05),
    dict(temperature=0.0),
]


def rows_for(rng, n_rows):
    return [dict(dict(top_p=1.0, min_p=0.0, top_k=0) | SETTINGS[r % len(SETTINGS)],
                 seed=int(rng.integers(0, 2 ** 62)), position=int(rng.integers(0, 10 ** 6))) for r in range(n_rows)]


def shaped_logits(rng, n_rows, n_vocab):
    """Model-like rows; every 5th has its logits rounded to integers (many ties at the k-th
    largest), every 7th is masked to -inf but for 50 ids (a grammar mask)."""
    logits = model_like_logits(rng, n_rows, n_vocab)
    for r in range(0, n_rows, 5):
        logits[r] = np.round(logits[r])
    for r in range(3, n_rows, 7):
        keep = rng.choice(n_vocab, 50, replace=False)
        masked = np.full(n_vocab, -np.inf, np.float32)
        masked[keep] = logits[r, keep]
        logits[r] = masked
    return logits


def check_reference(logits, rows, got):
    checked = 0
    for r, row in enumerate(rows):
        u = uniform_reference(row["seed"], row["position"])
        token, margin = reference_with_margins(logits[r], row["temperature"], row["top_k"], row["top_p"],
                                               row["min_p"], u)
        if margin > 1e-5:  # leave out decisions within float32 rounding of a boundary
            assert got[r] == token, f"row {r} ({row})"
            checked += 1
    return checked


@pytest.mark.exactness
@pytest.mark.parametrize("n_rows", [127, 129])
def test_sample_rows_around_the_block_cap(ctx, rng, n_rows):
    n_vocab = 49152
    rows = rows_for(rng, n_rows)
    logits = shaped_logits(rng, n_rows, n_vocab)
    together = run_sample(ctx, logits, rows)
    assert check_reference(logits, rows, together) >= n_rows * 3 // 4
    for r in (0, 1, 3, 4, 126, n_rows - 1):  # the last rows share a block with the first when n_rows > 128
        assert run_sample(ctx, logits[r:r + 1], [rows[r]])[0] == together[r], f"row {r}"
    order = rng.permutation(n_rows)
    permuted = run_sample(ctx, np.ascontiguousarray(logits[order]), [rows[i] for i in order])
    assert list(permuted) == [together[i] for i in order]


@pytest.mark.exactness
@pytest.mark.parametrize("n_vocab", [128256, 1000, 4099])
def test_sample_top_k_routes_and_masks(ctx, rng, n_vocab):
    rows = rows_for(rng, 24)
    logits = shaped_logits(rng, len(rows), n_vocab)
    together = run_sample(ctx, logits, rows)
    assert check_reference(logits, rows, together) >= 16
    for r in range(len(rows)):
        assert run_sample(ctx, logits[r:r + 1], [rows[r]])[0] == together[r], f"row {r}"
    # negative control: one row at T = 2 under 32 seeds must not always give one token
    draws = run_sample(ctx, np.repeat(logits[2:3], 32, axis=0),
                       [dict(rows[2], temperature=2.0, top_p=1.0, seed=s) for s in range(32)])
    assert len(set(draws.tolist())) > 3, "different seeds on one row must give different draws"

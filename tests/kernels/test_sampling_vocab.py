"""Seeded sampling at real vocabulary sizes (49,152: SmolLM2; 151,936: Qwen2.5;
50,001: odd, so rows after the first are not 16-byte aligned, nor the CUDA
sampler's slices; 152k: 76 KB of shared memory per CTA of its cluster): every filter
setting against the float64 reference of strata.h's rule, and each row's token
equal to that row sampled alone and in a permuted batch (exactness)."""

import numpy as np
import pytest

from test_sampling import run_sample, uniform_reference

VOCABS = [49152, 151936, 50001]

SETTINGS = [  # the settings bench/gpu_sample.py times, and a few more
    dict(temperature=0.8),
    dict(temperature=0.8, top_k=40),
    dict(temperature=0.8, top_p=0.95),
    dict(temperature=0.8, top_k=40, top_p=0.95),
    dict(temperature=0.8, min_p=0.05),
    dict(temperature=1.0, top_k=1000, top_p=0.5),
    dict(temperature=0.6, top_p=0.8, min_p=0.02),
    dict(temperature=0.0),
]


def model_like_logits(rng, n_rows, n_vocab):
    """A model's spread (normal, std 3) with a few strong candidates per row, placed anywhere
    in the vocabulary (so on CUDA also in the global tail of a 152k row)."""
    logits = rng.standard_normal((n_rows, n_vocab)).astype(np.float32) * 3
    for r in range(n_rows):
        top = rng.choice(n_vocab, 8, replace=False)
        logits[r, top] = 12 + rng.standard_normal(8).astype(np.float32) * 2
    return logits


def reference_with_margins(logits, temperature, top_k=0, top_p=1.0, min_p=0.0, u=0.0):
    """strata.h's rule in float64: (token, margin), the margin being the smallest relative
    distance of a float-rounding-sensitive decision (the top-p cut, the draw) from its boundary."""
    l = logits.astype(np.float64)
    if not temperature > 0:
        return int(np.argmax(l)), 1.0
    w = np.exp((l - l.max()) / temperature)
    if 0 < top_k < len(l):
        w[l < np.sort(l)[::-1][top_k - 1]] = 0
    margin = 1.0
    if top_p < 1:
        order = np.sort(w[w > 0])[::-1]
        cum = np.cumsum(order)
        target = top_p * cum[-1]
        j = int(np.searchsorted(cum, target))
        margin = abs(cum[j] - target) / cum[-1]
        if j > 0:
            margin = min(margin, abs(cum[j - 1] - target) / cum[-1])
        w[w < order[j]] = 0
    if min_p > 0:
        w[w < min_p] = 0
    cum = np.cumsum(w)
    target = u * cum[-1]
    token = int(np.argmax(cum > target))
    return token, min(margin, np.abs(cum[w > 0] - target).min() / cum[-1])


@pytest.mark.parametrize("n_vocab", VOCABS)
def test_sample_large_vocab_matches_reference(ctx, rng, n_vocab):
    rows = [dict(dict(top_p=1.0, min_p=0.0, top_k=0) | SETTINGS[r % len(SETTINGS)],
                 seed=int(rng.integers(0, 2 ** 62)), position=int(rng.integers(0, 10 ** 6))) for r in range(16)]
    logits = model_like_logits(rng, len(rows), n_vocab)
    got = run_sample(ctx, logits, rows)
    checked = 0
    for r, row in enumerate(rows):
        u = uniform_reference(row["seed"], row["position"])
        token, margin = reference_with_margins(logits[r], row["temperature"], row["top_k"], row["top_p"],
                                               row["min_p"], u)
        if margin > 1e-5:  # leave out decisions within float32 rounding of a boundary
            assert got[r] == token, f"row {r} ({row})"
            checked += 1
    assert checked >= 12


@pytest.mark.exactness
@pytest.mark.parametrize("n_vocab", VOCABS)
def test_sample_large_vocab_rows_equal_their_solo_draws(ctx, rng, n_vocab):
    rows = [dict(dict(top_p=1.0, min_p=0.0, top_k=0) | SETTINGS[r % len(SETTINGS)],
                 seed=int(rng.integers(0, 2 ** 62)), position=r) for r in range(10)]
    logits = model_like_logits(rng, len(rows), n_vocab)
    together = run_sample(ctx, logits, rows)
    for r in (0, 3, 5, 9):
        assert run_sample(ctx, logits[r:r + 1], [rows[r]])[0] == together[r], f"row {r}"
    order = rng.permutation(len(rows))
    permuted = run_sample(ctx, np.ascontiguousarray(logits[order]), [rows[i] for i in order])
    assert list(permuted) == [together[i] for i in order]
    # negative control: one row's logits under 32 seeds must not give one token
    draws = run_sample(ctx, np.repeat(logits[0:1], 32, axis=0), [dict(rows[0], seed=s) for s in range(32)])
    assert len(set(draws.tolist())) > 3, "different seeds on one row must give different draws"

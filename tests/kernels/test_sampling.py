"""argmax and seeded sampling: tie and NaN rules, the splitmix64 uniform, the
top-k/top-p/min-p semantics of strata.h against a float64 reference, the
empirical distribution, and that a draw depends only on (seed, position) and
the row's logits."""

import numpy as np
import pytest

from kernel_refs import buffer_of
from strata import _ffi as S

MASK = (1 << 64) - 1


def splitmix64(z):
    z = (z + 0x9E3779B97F4A7C15) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def uniform_reference(seed, position):
    h = splitmix64(seed ^ splitmix64(position & MASK))
    return (h >> 40) * 2.0 ** -24


def run_argmax(ctx, logits):
    bl, _ = buffer_of(ctx, logits.astype(np.float32))
    out = S.Buffer(ctx, 4 * logits.shape[0])
    S.argmax(ctx, bl, 0, logits.shape[0], logits.shape[1], out, 0)
    ids = out.to_numpy(np.int32, (logits.shape[0],))
    bl.close()
    out.close()
    return ids


def params_array(rows):
    p = np.zeros(len(rows), S.SAMPLING_PARAMS_DTYPE)
    for i, row in enumerate(rows):
        for key, value in row.items():
            p[i][key] = value
    return p


def run_sample(ctx, logits, rows):
    bl, l_off = buffer_of(ctx, logits.astype(np.float32), 4)
    bp, p_off = buffer_of(ctx, params_array(rows), 8)
    out = S.Buffer(ctx, 4 * len(rows))
    S.sample(ctx, bl, l_off, len(rows), logits.shape[1], bp, p_off, out, 0)
    ids = out.to_numpy(np.int32, (len(rows),))
    for b in (bl, bp, out):
        b.close()
    return ids


def sample_reference(logits, temperature, top_p=1.0, min_p=0.0, top_k=0, u=0.0):
    """The strata.h rule in float64: returns (token, distance of u*total to the nearest boundary / total)."""
    l = logits.astype(np.float64)
    w = np.where(np.isnan(l), 0.0, np.exp((l - np.nanmax(l)) / temperature))
    if 0 < top_k < len(l):
        kth = np.sort(l[~np.isnan(l)])[::-1][top_k - 1]
        w[~(l >= kth)] = 0
    if top_p < 1:
        order = np.sort(w[w > 0])[::-1]
        cut = order[np.searchsorted(np.cumsum(order), top_p * w.sum())]
        w[w < cut] = 0
    if min_p > 0:
        w[w < min_p] = 0
    cum = np.cumsum(w)
    target = u * cum[-1]
    token = int(np.argmax(cum > target))
    return token, np.abs(cum[w > 0] - target).min() / cum[-1]


def test_random_uniform_matches_splitmix(rng):
    for _ in range(200):
        seed, pos = int(rng.integers(0, 2 ** 63)) * 2 + 1, int(rng.integers(-2 ** 40, 2 ** 40))
        assert S.random_uniform(seed, pos) == uniform_reference(seed, pos)
    assert S.random_uniform(0, 0) == uniform_reference(0, 0)


def test_argmax_ties_nan_inf(ctx, rng):
    n = 1000
    logits = rng.standard_normal((6, n), dtype=np.float32)
    logits[0, [17, 400, 999]] = 9.0                      # tie: the lowest index wins
    logits[1, :] = np.nan
    logits[1, 33] = -5.0                                 # NaN never wins
    logits[2, :] = -np.inf                               # all -inf: the first
    logits[3, :] = np.nan                                # all NaN: 0
    logits[4, 5], logits[4, 6] = np.inf, np.nan
    logits[5, :] = 0.0
    logits[5, 3] = -0.0
    ids = run_argmax(ctx, logits)
    assert list(ids) == [17, 33, 0, 0, 5, 0]
    plain = rng.standard_normal((9, 257), dtype=np.float32)
    assert list(run_argmax(ctx, plain)) == list(plain.argmax(axis=1))


def test_sample_greedy_is_argmax(ctx, rng):
    logits = rng.standard_normal((5, 301), dtype=np.float32)
    rows = [dict(temperature=t, top_p=1.0, seed=i, position=i) for i, t in enumerate([0.0, -1.0, 0.0, 0.0, -0.5])]
    assert list(run_sample(ctx, logits, rows)) == list(logits.argmax(axis=1))


@pytest.mark.parametrize("settings", [
    dict(temperature=1.0),
    dict(temperature=0.7, top_k=5),
    dict(temperature=1.3, top_p=0.6),
    dict(temperature=1.0, min_p=0.2),
    dict(temperature=0.9, top_k=8, top_p=0.8, min_p=0.05),
])
def test_sample_matches_reference(ctx, rng, settings):
    n_vocab, n_rows = 40, 64
    logits = (rng.permutation(n_vocab)[None, :] * 0.15 + rng.standard_normal((n_rows, 1))).astype(np.float32)
    logits = np.ascontiguousarray(np.take_along_axis(logits, rng.permuted(np.tile(np.arange(n_vocab), (n_rows, 1)),
                                                                          axis=1), axis=1))
    full = dict(top_p=1.0, min_p=0.0, top_k=0) | settings
    rows = [dict(full, seed=int(rng.integers(0, 2 ** 62)), position=int(rng.integers(0, 10 ** 6))) for _ in range(n_rows)]
    got = run_sample(ctx, logits, rows)
    checked = 0
    for r, row in enumerate(rows):
        u = uniform_reference(row["seed"], row["position"])
        token, margin = sample_reference(logits[r], full["temperature"], full["top_p"], full["min_p"], full["top_k"], u)
        if margin > 1e-5:  # skip draws that land on a boundary within float32 rounding
            assert got[r] == token, f"row {r}"
            checked += 1
    assert checked > n_rows // 2


def test_sample_distribution(ctx):
    probs = np.array([0.5, 0.25, 0.15, 0.1])
    logits = np.log(probs).astype(np.float32)[None, :].repeat(4000, axis=0)
    rows = [dict(temperature=1.0, top_p=1.0, seed=1234, position=p) for p in range(4000)]
    counts = np.bincount(run_sample(ctx, logits, rows), minlength=4)
    expected = probs * 4000
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert chi2 < 16.3, f"chi2 {chi2:.1f} for counts {counts}"  # p = 0.001 at 3 degrees of freedom


def test_sample_top_k_keeps_ties(ctx):
    logits = np.array([[1.0, 5.0, 0.0, 5.0, 5.0, 4.9]], np.float32).repeat(300, axis=0)
    rows = [dict(temperature=1.0, top_p=1.0, top_k=1, seed=9, position=p) for p in range(300)]
    assert set(run_sample(ctx, logits, rows)) == {1, 3, 4}


def test_sample_depends_only_on_seed_position_and_logits(ctx, rng):
    n_vocab = 500
    target = rng.standard_normal(n_vocab, dtype=np.float32)
    row = dict(temperature=1.5, top_p=0.95, top_k=50, min_p=0.01, seed=77, position=12)
    alone = run_sample(ctx, target[None], [row])[0]
    for n_rows in (2, 5, 9):
        logits = rng.standard_normal((n_rows, n_vocab), dtype=np.float32)
        at = int(rng.integers(0, n_rows))
        logits[at] = target
        rows = [dict(temperature=1.0, top_p=1.0, seed=int(rng.integers(0, 1000)), position=i) for i in range(n_rows)]
        rows[at] = row
        assert run_sample(ctx, logits, rows)[at] == alone
    draws = {run_sample(ctx, target[None], [dict(row, position=p)])[0] for p in range(40)}
    assert len(draws) > 3, "different positions must give different draws"


@pytest.mark.exactness
def test_sample_many_rows_equal_their_solo_draws(ctx, rng):
    """More rows than CUDA's 128 sampling blocks (each block then takes every 128th row and
    reuses its scratch): every row's token equals that row sampled alone, for a mix of
    top-k, top-p, min-p, greedy and plain rows; one row is a copy of another row's logits
    with another seed (negative control: the draws must not all repeat the copied row's)."""
    n_rows, n_vocab = 300, 1000
    logits = (rng.standard_normal((n_rows, n_vocab)) * rng.uniform(0.5, 4, (n_rows, 1))).astype(np.float32)
    settings = [dict(temperature=0.8, top_k=40, top_p=1.0), dict(temperature=1.0, top_p=0.9),
                dict(temperature=0.7, top_k=20, top_p=0.95, min_p=0.02), dict(temperature=0.0, top_p=1.0),
                dict(temperature=1.3, top_p=1.0, min_p=0.05), dict(temperature=1.0, top_p=1.0)]
    rows = [dict(settings[r % len(settings)], seed=int(rng.integers(0, 2 ** 62)), position=r) for r in range(n_rows)]
    together = run_sample(ctx, logits, rows)
    for r in list(range(0, n_rows, 7)) + [127, 128, 129, 255, 256, 299]:
        assert run_sample(ctx, logits[r:r + 1], [rows[r]])[0] == together[r], f"row {r}"
    copies = np.repeat(logits[1:2], 64, axis=0)
    draws = run_sample(ctx, copies, [dict(rows[1], seed=s) for s in range(64)])
    assert len(set(draws.tolist())) > 3, "different seeds on one row must give different draws"

"""The CUDA sampler's top-k / top-p machinery (STRATA_SAMPLE_ROUTE, read on every call): the early
route (default: the bin routes with top-k's histogram keyed on the logit and built in the load
pass), the bin routes (one histogram pass of its own for top-k, then a select among the few
listed elements of one bin), the routes before them (legacy: top-k over thread-maxima candidates, radix top-p) and radix
selects only must draw the same token on every row, bit for bit, at 8- and 16-CTA cluster
sizes; rows include the cases where the bin routes give up and fall back to radix (flat mass
in one bin, ties at the threshold, masks, a k-th logit beyond 2^10 below the max, logits
around and beyond the early route's key window of +-2^11). The cluster barriers' form
(STRATA_SAMPLE_FENCE: cluster, the default, where the barriers that only publish shared memory
fence it alone, or membar, every barrier a full release) must not change a token either, on
every route. Every row
also matches the float64 reference where no decision is within rounding of a boundary. The
integer definition is checked draw for draw by libstrata/cuda_emu/test_sample.cpp."""

import numpy as np
import pytest

from test_sampling import run_sample
from test_sampling_blocks import check_reference
from test_sampling_vocab import model_like_logits

from strata import _ffi as S

SETTINGS = [
    dict(temperature=0.8, top_p=0.95),
    dict(temperature=0.8, top_k=40),
    dict(temperature=0.8, top_k=40, top_p=0.95),
    dict(temperature=0.8, top_p=0.5, min_p=0.05),
    dict(temperature=0.8, top_p=0.999, min_p=0.3),
    dict(temperature=1.0, top_p=0.99999994),
    dict(temperature=50.0, top_p=1e-3),
    dict(temperature=0.7, top_p=0.0),
    dict(temperature=0.7, top_k=256, top_p=0.9),
    dict(temperature=0.7, top_k=1),
    dict(temperature=1.2, top_k=2000, top_p=0.9),
    dict(temperature=0.01, top_k=100, top_p=0.9),
]


def rows_for(rng, n_rows):
    return [dict(dict(top_p=1.0, min_p=0.0, top_k=0) | SETTINGS[r % len(SETTINGS)],
                 seed=int(rng.integers(0, 2 ** 62)), position=int(rng.integers(0, 10 ** 6))) for r in range(n_rows)]


def route_logits(rng, n_rows, n_vocab):
    """Model-like rows, and every few rows one that sends a bin route to its fallback or to a
    boundary: flat (every weight in one bin), rounded (ties at w* and at the k-th), masked to
    -inf but for 40 ids, one logit 2000 above the rest, half NaN, 600 or 800 ties below one."""
    logits = model_like_logits(rng, n_rows, n_vocab)
    for r in range(n_rows):
        kind = r % 7
        if kind == 1:
            logits[r] = 1.0 + 1e-3 * (np.arange(n_vocab) % 7)
        elif kind == 2:
            logits[r] = np.round(logits[r] * 2) / 2
        elif kind == 3:
            keep = rng.choice(n_vocab, 40, replace=False)
            masked = np.full(n_vocab, -np.inf, np.float32)
            masked[keep] = logits[r, keep]
            logits[r] = masked
        elif kind == 4:
            logits[r, rng.integers(n_vocab)] = 2000.0
        elif kind == 5:
            logits[r, 1::2] = np.nan
        elif kind == 6 and r % 14 == 6:
            logits[r] = logits[r] - 3000.0 if r % 28 == 6 else 2040.0 + logits[r]  # the early key's window edges
        elif kind == 6:  # 600 or 800 tied logits spread over the row, one above, the rest massless: w* (or
            # the k-th) in a bin of 600 / 800 listed ids, which the publishing gather takes beside the words
            # other CTAs read (at most 640) or after a full barrier (more)
            ties = min(600 if r % 28 == 13 else 800, n_vocab // 2)
            row = np.full(n_vocab, -40.0, np.float32)
            row[np.arange(ties) * (n_vocab // ties)] = 0.0
            row[-1] = 1.0
            logits[r] = row
    return logits.astype(np.float32)


def draws_by_route(ctx, monkeypatch, logits, rows):
    out = {}
    for route in ("early", "bins", "legacy", "radix"):
        monkeypatch.setenv("STRATA_SAMPLE_ROUTE", route)
        out[route] = run_sample(ctx, logits, rows)
    monkeypatch.delenv("STRATA_SAMPLE_ROUTE", raising=False)
    return out


@pytest.mark.exactness
@pytest.mark.parametrize("n_vocab", [1000, 49152, 65537, 151936])
def test_sample_routes_draw_the_same_tokens(ctx, backend, rng, monkeypatch, n_vocab):
    if backend == "cpu":
        pytest.skip("STRATA_SAMPLE_ROUTE selects between CUDA kernels")
    rows = rows_for(rng, 42)
    logits = route_logits(rng, len(rows), n_vocab)
    out = draws_by_route(ctx, monkeypatch, logits, rows)
    assert np.array_equal(out["early"], out["bins"]), "the early route and the bin routes drew differently"
    assert np.array_equal(out["early"], out["legacy"]), "the early route and the legacy routes drew differently"
    assert np.array_equal(out["early"], out["radix"]), "the early route and the radix selects drew differently"
    assert ((out["early"] >= 0) & (out["early"] < n_vocab)).all()
    clean = [r for r in range(len(rows)) if not np.isnan(logits[r]).any()]  # the float64 reference takes no NaN
    assert check_reference(logits[clean], [rows[r] for r in clean], out["early"][clean]) >= len(rows) // 3
    # negative control: other seeds give other draws, so equal draws above mean something
    seeds = [dict(rows[0], temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=s) for s in range(16)]
    assert len(set(run_sample(ctx, np.repeat(logits[0:1], 16, axis=0), seeds).tolist())) > 1


@pytest.mark.exactness
@pytest.mark.parametrize("n_vocab", [1000, 49152, 151936])
def test_sample_fences_draw_the_same_tokens(ctx, backend, rng, monkeypatch, n_vocab):
    if backend == "cpu":
        pytest.skip("STRATA_SAMPLE_FENCE selects between CUDA barrier forms")
    rows = rows_for(rng, 42)
    logits = route_logits(rng, len(rows), n_vocab)
    out = {}
    for fence in ("cluster", "membar"):
        monkeypatch.setenv("STRATA_SAMPLE_FENCE", fence)
        out[fence] = draws_by_route(ctx, monkeypatch, logits, rows)
    monkeypatch.delenv("STRATA_SAMPLE_FENCE", raising=False)
    for route in out["membar"]:
        assert np.array_equal(out["cluster"][route], out["membar"][route]), f"the fences drew differently ({route})"
        assert np.array_equal(out["cluster"][route], out["cluster"]["early"]), f"route {route} drew differently"
    # the default is the cluster form: an unset variable draws the same
    assert np.array_equal(run_sample(ctx, logits, rows), out["cluster"]["early"])


def test_sample_fence_rejects_unknown_values(ctx, backend, rng, monkeypatch):
    if backend == "cpu":
        pytest.skip("STRATA_SAMPLE_FENCE selects between CUDA barrier forms")
    monkeypatch.setenv("STRATA_SAMPLE_FENCE", "none")
    rows = rows_for(rng, 1)
    with pytest.raises(S.StrataError, match="STRATA_SAMPLE_FENCE"):
        run_sample(ctx, rng.standard_normal((1, 100)).astype(np.float32), rows)
    monkeypatch.delenv("STRATA_SAMPLE_FENCE", raising=False)
    assert 0 <= run_sample(ctx, rng.standard_normal((1, 100)).astype(np.float32), rows)[0] < 100


def test_sample_route_rejects_unknown_values(ctx, backend, rng, monkeypatch):
    if backend == "cpu":
        pytest.skip("STRATA_SAMPLE_ROUTE selects between CUDA kernels")
    monkeypatch.setenv("STRATA_SAMPLE_ROUTE", "fast")
    rows = rows_for(rng, 1)
    with pytest.raises(S.StrataError, match="STRATA_SAMPLE_ROUTE"):
        run_sample(ctx, rng.standard_normal((1, 100)).astype(np.float32), rows)
    monkeypatch.delenv("STRATA_SAMPLE_ROUTE", raising=False)
    assert 0 <= run_sample(ctx, rng.standard_normal((1, 100)).astype(np.float32), rows)[0] < 100

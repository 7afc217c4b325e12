"""The one-row integer dot kernel's CTA shape switch (STRATA_INT_DOT_SHAPE=auto|legacy|NO:PS,
libstrata/src/cuda/cuda_int_matmul.cu dot_shape) on the device: the earlier choice (legacy) and any
outputs-per-CTA / slices-per-part choice give the same bits as the default shape, and a malformed
value is an error that leaves y as it was. STRATA_INT_EARLY_STAGES (how many of
the first tile's parts a CTA requests before it waits for the previous kernel) keeps the bits too; its
refusals are in test_env_refusals.py.

Every output adds its slices' sums in slice order whatever NO and PS are, so the switch moves only
the launch (how many CTAs, how many bytes each has in flight, how many parts it waits for): these
tests are what lets bench/gpu_matmul.py A/B it on real shapes. Q4_0, Q8_0, Q4_K and Q6_K (every type
routed to the integer path), every prologue, k with a partial slice, the 8B decode shapes.
"""

import numpy as np
import pytest

from kernel_refs import make_weights
from strata import _ffi as S
from test_int_tiles import random_blocks
from test_matmul_ex import P, PROLOGUES, check, prologue_f64, run_ex, width_of

pytestmark = pytest.mark.gpu

DTYPES = [S.DType.Q4_0, S.DType.Q8_0, S.DType.Q4_K, S.DType.Q6_K]
SHAPES = ["legacy", "auto", "1:1", "2:56", "4:32", "8:16", "16:16", "32:8", "64:4", "4:64"]


def under_shapes(monkeypatch, run, shapes):
    """run() with STRATA_INT_DOT_SHAPE unset, then once per value in `shapes`."""
    monkeypatch.delenv("STRATA_INT_DOT_SHAPE", raising=False)
    out = [run()]
    for shape in shapes:
        monkeypatch.setenv("STRATA_INT_DOT_SHAPE", shape)
        out.append(run())
    monkeypatch.delenv("STRATA_INT_DOT_SHAPE")
    return out


def differ(a, b):
    return int((a.view(np.uint32) != b.view(np.uint32)).sum())


@pytest.mark.exactness
@pytest.mark.parametrize("prologue", PROLOGUES, ids=lambda p: p.name)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_dot_shape_bit_identical(cuda_ctx, rng, monkeypatch, dtype, prologue):
    super_block = dtype in (S.DType.Q4_K, S.DType.Q6_K)
    cases = [(2304, 77), (4096, 40)] if super_block else [(1056, 77), (4096, 40), (14336, 9)]
    for k, n_out in cases:
        raw, w = make_weights(rng, dtype, n_out, k)
        wide = width_of(prologue, k)
        x = rng.standard_normal((1, wide), dtype=np.float32)
        x[0, :32] = 0.0  # a zero block: dx = 0
        norm = (1 + 0.1 * rng.standard_normal(k)).astype(np.float32) if prologue == P.RMSNORM else None
        bias = rng.standard_normal(n_out).astype(np.float32)
        y0 = rng.standard_normal((1, n_out)).astype(np.float32)

        def run():
            return run_ex(cuda_ctx, x, k, raw, dtype, n_out, prologue, norm, bias, y0, True)

        outs = under_shapes(monkeypatch, run, SHAPES)
        for shape, other in zip(SHAPES, outs[1:]):
            n = differ(outs[0], other)
            assert n == 0, f"{dtype.name} 1x{k}->{n_out}: {n} outputs differ under STRATA_INT_DOT_SHAPE={shape}"
        check(cuda_ctx, outs[0], prologue_f64(x, prologue, k, norm), w, dtype, k, bias, y0)


@pytest.mark.exactness
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_dot_shape_bit_identical_on_llama_8b_shapes(cuda_ctx, rng, monkeypatch, dtype):
    """The 8B decode matrices at one row (q/o, k/v, qkv, gate_up, down) under the shapes the benchmark tries."""
    for n_out, k in [(4096, 4096), (1024, 4096), (6144, 4096), (28672, 4096), (4096, 14336)]:
        raw = random_blocks(rng, dtype, n_out, k)
        x = rng.standard_normal((1, k), dtype=np.float32)
        outs = under_shapes(monkeypatch, lambda: run_ex(cuda_ctx, x, k, raw, dtype, n_out, P.RMSNORM,
                                                         np.ones(k, np.float32)), SHAPES)
        for shape, other in zip(SHAPES, outs[1:]):
            n = differ(outs[0], other)
            assert n == 0, f"{dtype.name} 1x{k}->{n_out}: {n} outputs differ under STRATA_INT_DOT_SHAPE={shape}"


@pytest.mark.parametrize("value", ["8", "8:", ":16", "0:16", "8:0", "65:1", "16:17", "8:16x", "a:b", "legacy2", "Auto"])
def test_malformed_dot_shape_is_refused(cuda_ctx, rng, monkeypatch, value):
    """A malformed or out-of-range value is an error naming the form, and y is left as it was."""
    k, n_out = 2048, 40
    raw, _ = make_weights(rng, S.DType.Q4_0, n_out, k)
    x = rng.standard_normal((1, k), dtype=np.float32)
    y0 = rng.standard_normal((1, n_out)).astype(np.float32)
    bx, bw, by = (S.Buffer.from_array(cuda_ctx, a) for a in (x, raw, y0))
    monkeypatch.setenv("STRATA_INT_DOT_SHAPE", value)
    with pytest.raises(S.StrataError, match=r"STRATA_INT_DOT_SHAPE=.*expected auto, legacy or NO:PS"):
        S.matmul(cuda_ctx, bx, 0, 1, k, bw, 0, S.DType.Q4_0, n_out, None, 0, by, 0, False)
    monkeypatch.delenv("STRATA_INT_DOT_SHAPE")
    cuda_ctx.synchronize()
    assert np.array_equal(by.to_numpy(np.float32, (1, n_out)).view(np.uint32), y0.view(np.uint32))
    for b in (bx, bw, by):
        b.close()


EARLY_CASES = [  # (n_out, k, rows, STRATA_INT_DOT_SHAPE, STRATA_INT_MATMUL): one part, two, many
    (4096, 4096, 1, "auto", "auto"), (4096, 14336, 1, "auto", "auto"), (77, 2304, 1, "32:8", "auto"),
    (77, 2304, 1, "8:4", "auto"), (40, 14336, 1, "16:16", "auto"),
    # several rows: the dot kernel's 8-row tiles (legacy keeps the few-row and tile kernels out) ...
    (40, 4096, 5, "auto", "legacy"), (77, 2304, 8, "auto", "legacy"), (9, 14336, 3, "auto", "legacy"),
    # ... and the few-row kernel (2-32 rows), whose parts in flight come before the wait too
    (4096, 14336, 4, "auto", "rows"), (1024, 4096, 13, "auto", "rows"), (77, 2304, 32, "auto", "rows:16")]


@pytest.mark.exactness
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_early_stages_bit_identical(cuda_ctx, rng, monkeypatch, dtype):
    """STRATA_INT_EARLY_STAGES=1 (the dot kernels request every stage buffer's part of their first tile before
    the wait, not part 0 alone; the few-row kernel the parts it stages ahead, not none) gives the default's
    bits: the same bytes land in the same places."""
    for n_out, k, rows, shape, route in EARLY_CASES:
        if route.startswith("rows") and dtype not in (S.DType.Q4_0, S.DType.Q8_0):
            continue  # the few-row kernel takes Q4_0, Q8_0 and Q4_1 only
        raw = random_blocks(rng, dtype, n_out, k)
        x = rng.standard_normal((rows, k), dtype=np.float32)
        norm = (1 + 0.1 * rng.standard_normal(k)).astype(np.float32)
        y0 = rng.standard_normal((rows, n_out)).astype(np.float32)
        monkeypatch.setenv("STRATA_INT_DOT_SHAPE", shape)
        monkeypatch.setenv("STRATA_INT_MATMUL", route)
        outs = []
        for early in ("0", "1"):
            monkeypatch.setenv("STRATA_INT_EARLY_STAGES", early)
            outs.append(run_ex(cuda_ctx, x, k, raw, dtype, n_out, P.RMSNORM, norm, None, y0, True))
        n = differ(outs[0], outs[1])
        assert n == 0, f"{dtype.name} {rows}x{k}->{n_out} {route} shape {shape}: {n} outputs differ with early stages"

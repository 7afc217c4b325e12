"""The CUDA integer matmul's few-row kernel (libstrata/src/cuda/cuda_int_rows.cu: decode of 2 to
~32 sequences) against the older integer kernels, bit for bit on the device.

STRATA_INT_MATMUL=rows (rows:16/32/64: one CTA width) runs the few-row kernel at every row count,
=legacy never uses it nor the tile kernel, =norows is the routing before it, =tiles forces the
tile kernel: each case runs them on the same buffers and every output must have the same bits.
Its A/B switches too: STRATA_INT_ROWS_WARPS=16 (CTAs of 16 warps) and STRATA_INT_ROWS_WIDE=1 (auto
also on matrices of more than 4096 outputs).
Q4_0, Q8_0 and Q4_1 (the types the few-row kernel takes), every prologue, bias and accumulate, 1 to 64
rows (odd counts, one row tile of 8/16/32 or several), n_out not a multiple of the CTA, k with
partial slices, misaligned weights; the results also within kernel_refs' float64 tolerance; the
emulator's libstrata/cuda_emu/test_int_rows.cpp covers the same types on the CPU.
"""

import numpy as np
import pytest

from kernel_refs import make_weights
from strata import _ffi as S
from test_int_tiles import random_blocks
from test_matmul_ex import P, PROLOGUES, check, prologue_f64, run_ex, width_of

pytestmark = pytest.mark.gpu

DTYPES = [S.DType.Q4_0, S.DType.Q8_0, S.DType.Q4_1]
CASES = [  # (n_rows, k, n_out, w_pad): CTAs of 16/32/64 outputs x 8/16/32 rows, slices of 256 values
    (1, 1056, 77, 2),
    (2, 4096, 131, 0),
    (3, 1280, 45, 4),
    (7, 14336, 40, 2),
    (8, 2080, 160, 0),
    (13, 4096, 99, 6),
    (16, 1312, 64, 0),
    (17, 2048, 150, 2),
    (32, 4096, 33, 4),
    (45, 1056, 70, 0),
    (64, 1280, 48, 2),
]


def kernels(monkeypatch, run, names, warps="8"):
    """run() once per STRATA_INT_MATMUL value in `names` (a name "VALUE+16w+wide" also sets
    STRATA_INT_ROWS_WARPS=16 / STRATA_INT_ROWS_WIDE=1 for that run), the few-row CTAs of `warps` warps."""
    out = []
    for name in names:
        value, *flags = name.split("+")
        monkeypatch.setenv("STRATA_INT_MATMUL", value)
        monkeypatch.setenv("STRATA_INT_ROWS_WARPS", "16" if "16w" in flags else warps)
        monkeypatch.setenv("STRATA_INT_ROWS_WIDE", "1" if "wide" in flags else "0")
        out.append(run())
    for var in ("STRATA_INT_MATMUL", "STRATA_INT_ROWS_WARPS", "STRATA_INT_ROWS_WIDE"):
        monkeypatch.delenv(var)
    return out


def same_bits(a, b):
    return int((a.view(np.uint32) != b.view(np.uint32)).sum())


@pytest.mark.exactness
@pytest.mark.parametrize("warps", ["8", "16"])
@pytest.mark.parametrize("width", ["rows", "rows:16", "rows:32", "rows:64"])
@pytest.mark.parametrize("prologue", PROLOGUES, ids=lambda p: p.name)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_rows_bit_identical_to_legacy(cuda_ctx, rng, monkeypatch, dtype, prologue, width, warps):
    for i, (n_rows, k, n_out, w_pad) in enumerate(CASES):
        raw, w = make_weights(rng, dtype, n_out, k)
        wide = width_of(prologue, k)
        x = rng.standard_normal((n_rows, wide + 1), dtype=np.float32)  # misaligned rows
        x[0, :32] = 0.0  # a zero block: dx = 0
        norm = (1 + 0.1 * rng.standard_normal(k)).astype(np.float32) if prologue == P.RMSNORM else None
        bias = rng.standard_normal(n_out).astype(np.float32) if i % 2 else None
        y0 = rng.standard_normal((n_rows, n_out)).astype(np.float32) if i % 3 == 1 else None

        def run():
            return run_ex(cuda_ctx, x, k, raw, dtype, n_out, prologue, norm, bias, y0, y0 is not None, wide + 1, 4,
                          w_pad)

        legacy, rows = kernels(monkeypatch, run, ("legacy", width), warps)
        differ = same_bits(legacy, rows)
        assert differ == 0, f"{n_rows}x{k}->{n_out}: {differ} outputs differ between the legacy and few-row kernels"
        check(cuda_ctx, rows, prologue_f64(x, prologue, k, norm), w, dtype, k, bias, y0)


@pytest.mark.exactness
@pytest.mark.parametrize("n_rows", [2, 4, 5, 8, 16, 32])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_rows_bit_identical_on_llama_8b_shapes(cuda_ctx, rng, monkeypatch, dtype, n_rows):
    """The benchmark's decode shapes (q/o, k/v, qkv, gate_up, down): the default routing (the few-row
    kernel), its A/B switches (16-warp CTAs, wide matrices too, both; the 16-warp kernel forced), the
    routing before it, the older kernels and the tile kernel give the same bits."""
    others = ("auto+16w", "auto+wide", "auto+16w+wide", "rows+16w", "norows", "legacy", "tiles")
    for n_out, k in [(4096, 4096), (1024, 4096), (6144, 4096), (28672, 4096), (4096, 14336)]:
        raw = random_blocks(rng, dtype, n_out, k)
        x = rng.standard_normal((n_rows, k), dtype=np.float32)
        outs = kernels(monkeypatch, lambda: run_ex(cuda_ctx, x, k, raw, dtype, n_out, P.RMSNORM,
                                                    np.ones(k, np.float32)), ("auto",) + others)
        for name, other in zip(others, outs[1:]):
            differ = same_bits(outs[0], other)
            assert differ == 0, f"{n_rows}x{k}->{n_out}: {differ} outputs differ between auto and {name}"


@pytest.mark.exactness
@pytest.mark.parametrize("warps", ["8", "16"])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_rows_independent_of_batch(cuda_ctx, rng, monkeypatch, dtype, warps):
    """Default routing (few-row CTAs of 8 or 16 warps): every row the same alone (the one-row kernel), in
    2..32-row batches (the few-row kernel) and in a 100-row batch (the tile kernel)."""
    k, n_out = 4096, 131
    raw, _ = make_weights(rng, dtype, n_out, k)
    x = rng.standard_normal((100, k), dtype=np.float32)
    monkeypatch.delenv("STRATA_INT_MATMUL", raising=False)
    monkeypatch.setenv("STRATA_INT_ROWS_WARPS", warps)
    full = run_ex(cuda_ctx, x, k, raw, dtype, n_out)
    for rows in (np.arange(1), np.arange(2), np.arange(3, 8), np.arange(9), rng.permutation(100)[:16],
                 np.arange(70, 87), rng.permutation(100)[:32], np.array([99])):
        part = run_ex(cuda_ctx, x[rows], k, raw, dtype, n_out)
        assert np.array_equal(part.view(np.uint32), full[rows].view(np.uint32)), f"{len(rows)} rows differ"


def test_unknown_kernel_name_is_refused(cuda_ctx, rng, monkeypatch):
    """A typo of the new values is an error naming every choice, and y is left as it was."""
    k, n_out = 2048, 40
    raw, _ = make_weights(rng, S.DType.Q4_0, n_out, k)
    x = rng.standard_normal((4, k), dtype=np.float32)
    y0 = rng.standard_normal((4, n_out)).astype(np.float32)
    bx, bw, by = (S.Buffer.from_array(cuda_ctx, a) for a in (x, raw, y0))
    for typo in ("row", "rows:8", "no-rows"):
        monkeypatch.setenv("STRATA_INT_MATMUL", typo)
        with pytest.raises(S.StrataError, match="rows, rows:16, rows:32, rows:64, norows or legacy"):
            S.matmul(cuda_ctx, bx, 0, 4, k, bw, 0, S.DType.Q4_0, n_out, None, 0, by, 0, False)
    monkeypatch.delenv("STRATA_INT_MATMUL")
    cuda_ctx.synchronize()
    assert np.array_equal(by.to_numpy(np.float32, (4, n_out)).view(np.uint32), y0.view(np.uint32))
    for b in (bx, bw, by):
        b.close()


@pytest.mark.parametrize("var,value,choices", [("STRATA_INT_ROWS_WARPS", "32", "8 .the default. or 16"),
                                               ("STRATA_INT_ROWS_WARPS", "16w", "8 .the default. or 16"),
                                               ("STRATA_INT_ROWS_WIDE", "yes", "0 .the default. or 1")])
def test_unknown_rows_switch_is_refused(cuda_ctx, rng, monkeypatch, var, value, choices):
    """A typo in the few-row kernel's A/B switches is an error naming the values, and y is left as it was."""
    k, n_out = 2048, 40
    raw, _ = make_weights(rng, S.DType.Q4_0, n_out, k)
    x = rng.standard_normal((4, k), dtype=np.float32)
    y0 = rng.standard_normal((4, n_out)).astype(np.float32)
    bx, bw, by = (S.Buffer.from_array(cuda_ctx, a) for a in (x, raw, y0))
    monkeypatch.setenv(var, value)
    with pytest.raises(S.StrataError, match=f"{var}={value}: expected {choices}"):
        S.matmul(cuda_ctx, bx, 0, 4, k, bw, 0, S.DType.Q4_0, n_out, None, 0, by, 0, False)
    monkeypatch.delenv(var)
    cuda_ctx.synchronize()
    assert np.array_equal(by.to_numpy(np.float32, (4, n_out)).view(np.uint32), y0.view(np.uint32))
    for b in (bx, bw, by):
        b.close()

"""The CUDA integer matmul's memory-bound kernel for 1 to 8 rows (libstrata/src/cuda/cuda_int_gemv.cu:
decode) against the routing without it, bit for bit on the device.

STRATA_INT_GEMV=N runs the kernel for matmuls of 1..N rows, =0 never (the few-row, tile and dot
kernels as before); STRATA_INT_GEMV_FUSE=1 has it quantize its rows itself (no pre-pass launch), and
every case runs both ways. Each case runs the same buffers under several values, so a row count is
computed by the gemv kernel in one run and by another kernel in the next: every output must have
the same bits. Q4_0, Q8_0, Q4_1, Q4_K and Q6_K (the types routed to the integer path), every prologue, bias
and accumulate, 1 to 9 rows (8 = the widest row template, 9 = the first row count it never
takes), k of 1, 2.25 (a partial last slice), 16, 32 and 56 slices (a row in two chunks), rows that are not
16-byte aligned (k = 576: 324-byte Q4_0 rows),
misaligned weights, and the matrices of the 8B, 1B and 135M benchmark models; the results also
within kernel_refs' float64 tolerance (the emulator's libstrata/cuda_emu/test_int_gemv.cpp covers the
same types on the CPU). An unknown value is refused with an error naming the
choices, leaving y as it was.
"""

import numpy as np
import pytest

from kernel_refs import make_weights
from strata import _ffi as S
from test_int_tiles import random_blocks
from test_matmul_ex import P, PROLOGUES, check, prologue_f64, run_ex, width_of

pytestmark = pytest.mark.gpu

DTYPES = [S.DType.Q4_0, S.DType.Q8_0, S.DType.Q4_1, S.DType.Q4_K, S.DType.Q6_K]
CASES = [  # (n_rows, k, n_out, w_pad)
    (1, 576, 77, 2),
    (2, 1056, 131, 0),
    (3, 576, 45, 4),
    (4, 4096, 40, 0),
    (5, 1280, 160, 6),
    (7, 14336, 33, 0),
    (8, 2080, 70, 2),
    (9, 1056, 99, 0),
    (1, 256, 50, 0),  # one slice
    (1, 14336, 300, 2),  # 56 slices (a row in two chunks of 32), rows not 16-byte aligned
    (6, 8192, 21, 4),  # 32 slices: one row a warp unit
]
SETTINGS = ("0", "1", "4", "8", "auto")  # off; one row only; up to 4; up to 8; the default routing
FUSE = ("0", "1")  # STRATA_INT_GEMV_FUSE: after the pre-pass launch; the kernel quantizing its rows itself
MODEL_SHAPES = [  # (n_out, k): Llama-3.1-8B, Llama-3.2-1B and SmolLM2-135M projections (bench/gpu_matmul.py)
    (6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336), (128256, 4096),
    (3072, 2048), (2048, 2048), (16384, 2048), (2048, 8192),
    (960, 576), (576, 576), (3072, 576), (576, 1536), (49152, 576),
]


def k_for(dtype, k):
    """Q4_K and Q6_K take whole super-blocks of 256 values (at least one)."""
    return max(256, k // 256 * 256) if dtype in (S.DType.Q4_K, S.DType.Q6_K) else k


def under(monkeypatch, run, values, fuse="0"):
    """run() once per STRATA_INT_GEMV value, with STRATA_INT_MATMUL at its default and
    STRATA_INT_GEMV_FUSE=fuse."""
    monkeypatch.delenv("STRATA_INT_MATMUL", raising=False)
    monkeypatch.setenv("STRATA_INT_GEMV_FUSE", fuse)
    out = []
    for value in values:
        monkeypatch.setenv("STRATA_INT_GEMV", value)
        out.append(run())
    monkeypatch.delenv("STRATA_INT_GEMV")
    monkeypatch.delenv("STRATA_INT_GEMV_FUSE")
    return out


def differ(a, b):
    return int((a.view(np.uint32) != b.view(np.uint32)).sum())


@pytest.mark.exactness
@pytest.mark.parametrize("prologue", PROLOGUES, ids=lambda p: p.name)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_gemv_bit_identical_to_the_other_kernels(cuda_ctx, rng, monkeypatch, dtype, prologue):
    for i, (n_rows, k0, n_out, w_pad) in enumerate(CASES):
        k = k_for(dtype, k0)
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

        outs = under(monkeypatch, run, SETTINGS)
        fused = under(monkeypatch, run, SETTINGS[1:], fuse="1")
        for value, other, other_fused in zip(SETTINGS[1:], outs[1:], fused):
            d = differ(outs[0], other)
            assert d == 0, f"{n_rows}x{k}->{n_out}: {d} outputs differ between STRATA_INT_GEMV=0 and ={value}"
            d = differ(outs[0], other_fused)
            assert d == 0, (f"{n_rows}x{k}->{n_out}: {d} outputs differ between STRATA_INT_GEMV=0 and ={value} "
                            "with STRATA_INT_GEMV_FUSE=1")
        check(cuda_ctx, outs[-1], prologue_f64(x, prologue, k, norm), w, dtype, k, bias, y0)


@pytest.mark.exactness
@pytest.mark.parametrize("n_rows", [1, 2, 3, 4, 8, 9])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_gemv_bit_identical_on_model_shapes(cuda_ctx, rng, monkeypatch, dtype, n_rows):
    """The benchmark models' matrices with RMSNORM (k = 576: rows not 16-byte aligned): on (after the
    pre-pass, and quantizing its rows itself) and off agree."""
    for n_out, k0 in MODEL_SHAPES:
        k = k_for(dtype, k0)
        raw = random_blocks(rng, dtype, n_out, k)
        x = rng.standard_normal((n_rows, k), dtype=np.float32)
        norm = (1 + 0.1 * rng.standard_normal(k)).astype(np.float32)
        run = lambda: run_ex(cuda_ctx, x, k, raw, dtype, n_out, P.RMSNORM, norm)  # noqa: E731
        on, off = under(monkeypatch, run, ("8", "0"))
        (on_fused,) = under(monkeypatch, run, ("8",), fuse="1")
        for name, got in (("", on), (" with STRATA_INT_GEMV_FUSE=1", on_fused)):
            d = differ(got, off)
            assert d == 0, f"{n_rows}x{k}->{n_out}: {d} outputs differ between STRATA_INT_GEMV=8{name} and =0"


@pytest.mark.exactness
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_gemv_rows_independent_of_batch(cuda_ctx, rng, monkeypatch, dtype):
    """Default routing (auto), and the gemv kernel for 1-8 rows (also quantizing its rows itself): every
    row the same alone and in batches of 2 to 9 and 40 rows (other kernels)."""
    k, n_out = 4096, 131
    raw = random_blocks(rng, dtype, n_out, k)
    x = rng.standard_normal((40, k), dtype=np.float32)
    monkeypatch.delenv("STRATA_INT_MATMUL", raising=False)
    for gemv, fuse in ((None, "0"), ("8", "0"), ("8", "1")):
        monkeypatch.setenv("STRATA_INT_GEMV_FUSE", fuse)
        if gemv is None:
            monkeypatch.delenv("STRATA_INT_GEMV", raising=False)
        else:
            monkeypatch.setenv("STRATA_INT_GEMV", gemv)
        full = run_ex(cuda_ctx, x, k, raw, dtype, n_out)
        for rows in (np.array([0]), np.array([39]), np.arange(2), rng.permutation(40)[:3], np.arange(4, 8),
                     np.arange(30, 38), rng.permutation(40)[:9]):
            part = run_ex(cuda_ctx, x[rows], k, raw, dtype, n_out)
            assert np.array_equal(part.view(np.uint32), full[rows].view(np.uint32)), f"{len(rows)} rows differ"


def test_unknown_gemv_value_is_refused(cuda_ctx, rng, monkeypatch):
    """A STRATA_INT_GEMV value other than auto and 0..8, or a STRATA_INT_GEMV_FUSE value other than 0 and 1, is an
    error naming the choices, and y is left as it was."""
    k, n_out = 2048, 40
    raw, _ = make_weights(rng, S.DType.Q4_0, n_out, k)
    x = rng.standard_normal((4, k), dtype=np.float32)
    y0 = rng.standard_normal((4, n_out)).astype(np.float32)
    bx, bw, by = (S.Buffer.from_array(cuda_ctx, a) for a in (x, raw, y0))
    for bad in ("9", "16", "on", "-1", "08", " 4"):
        monkeypatch.setenv("STRATA_INT_GEMV", bad)
        with pytest.raises(S.StrataError, match=r"STRATA_INT_GEMV=.*expected auto \(the default\), 0 \(off\) or 1 to 8"):
            S.matmul(cuda_ctx, bx, 0, 4, k, bw, 0, S.DType.Q4_0, n_out, None, 0, by, 0, False)
    monkeypatch.delenv("STRATA_INT_GEMV")
    for bad in ("2", "on", "01", " 1"):
        monkeypatch.setenv("STRATA_INT_GEMV_FUSE", bad)
        with pytest.raises(S.StrataError, match=r"STRATA_INT_GEMV_FUSE=.*expected 0 .* or 1"):
            S.matmul(cuda_ctx, bx, 0, 4, k, bw, 0, S.DType.Q4_0, n_out, None, 0, by, 0, False)
    monkeypatch.delenv("STRATA_INT_GEMV_FUSE")
    cuda_ctx.synchronize()
    assert np.array_equal(by.to_numpy(np.float32, (4, n_out)).view(np.uint32), y0.view(np.uint32))
    for b in (bx, bw, by):
        b.close()

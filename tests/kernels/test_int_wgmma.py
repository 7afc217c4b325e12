"""The integer matmul on Hopper's warpgroup MMA (libstrata/src/cuda/cuda_int_wgmma.cu, off by default:
STRATA_INT_WGMMA=N puts Q4_0 / Q8_0 / Q4_1 / Q4_K matmuls of at least N rows whose tiles fill the GPU on it,
=all every one) against the older integer kernels, bit for bit on the device: each case runs with
STRATA_INT_MATMUL=legacy (which the switch never overrides) and with STRATA_INT_WGMMA=all on the same buffers, in both configurations
(STRATA_INT_WGMMA_BANKS 2 and 1), every prologue, bias and accumulate, 1 to 512 rows, n_out and k not
multiples of a tile or a slice, misaligned weights and y rows with a gap; the results also within
kernel_refs' float64 tolerance. The same cases' logic runs on the CPU under the host emulator
(libstrata/cuda_emu/test_int_wgmma.cpp, through tests/kernels/test_emulator_kernels.py); this file is
what checks the emulator's reading of the wgmma layouts against the hardware. The switch's values
are checked on every machine.
"""

import numpy as np
import pytest

from kernel_refs import make_weights
from strata import _ffi as S
from test_int_tiles import k_for
from test_matmul_ex import P, PROLOGUES, assert_strided_equals_dense, check, prologue_f64, run_ex, width_of

DTYPES = [S.DType.Q4_0, S.DType.Q8_0, S.DType.Q4_1, S.DType.Q4_K]
CASES = [  # (n_rows, k, n_out, w_pad): row tiles of 64, output tiles of 128, slices of 256 values
    (1, 576, 77, 2),
    (9, 1056, 131, 0),
    (63, 1280, 45, 4),
    (64, 4096, 160, 0),
    (65, 576, 131, 6),
    (130, 14336, 40, 2),
    (512, 1056, 300, 0),
]


def legacy_and_wgmma(monkeypatch, run, banks):
    """run() with the legacy kernels, then with the wgmma kernel at every row count."""
    monkeypatch.setenv("STRATA_INT_MATMUL", "legacy")
    legacy = run()
    monkeypatch.delenv("STRATA_INT_MATMUL")
    monkeypatch.setenv("STRATA_INT_WGMMA", "all")
    monkeypatch.setenv("STRATA_INT_WGMMA_BANKS", banks)
    try:
        return legacy, run()
    finally:
        monkeypatch.delenv("STRATA_INT_WGMMA")
        monkeypatch.delenv("STRATA_INT_WGMMA_BANKS")


@pytest.mark.gpu
@pytest.mark.exactness
@pytest.mark.parametrize("banks", ["2", "1"])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_wgmma_bit_identical_to_legacy(cuda_ctx, rng, monkeypatch, dtype, banks):
    for i, (n_rows, k, n_out, w_pad) in enumerate(CASES):
        prologue = PROLOGUES[(i + int(banks)) % len(PROLOGUES)]
        k = k_for(dtype, k)  # Q4_K: whole super-blocks of 256 values
        raw, w = make_weights(rng, dtype, n_out, k)
        width = width_of(prologue, k)
        x = rng.standard_normal((n_rows, width + 1), dtype=np.float32)  # misaligned rows
        x[0, :32] = 0.0  # a zero block: dx = 0
        norm = (1 + 0.1 * rng.standard_normal(k)).astype(np.float32) if prologue == P.RMSNORM else None
        bias = rng.standard_normal(n_out).astype(np.float32) if i % 2 else None
        y0 = rng.standard_normal((n_rows, n_out)).astype(np.float32) if i % 3 == 1 else None

        def run():
            return run_ex(cuda_ctx, x, k, raw, dtype, n_out, prologue, norm, bias, y0, y0 is not None, width + 1, 4,
                          w_pad)

        legacy, wgmma = legacy_and_wgmma(monkeypatch, run, banks)
        bad = np.argwhere(legacy.view(np.uint32) != wgmma.view(np.uint32))
        assert len(bad) == 0, (f"{n_rows}x{k}->{n_out}: {len(bad)} outputs differ between the legacy and wgmma "
                               f"kernels; first (row, output, legacy, wgmma): "
                               f"{[(int(r), int(o), float(legacy[r, o]), float(wgmma[r, o])) for r, o in bad[:6]]}")
        check(cuda_ctx, wgmma, prologue_f64(x, prologue, k, norm), w, dtype, k, bias, y0)


@pytest.mark.gpu
@pytest.mark.exactness
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_wgmma_strided_y_rows(cuda_ctx, rng, monkeypatch, dtype):
    """y rows with a gap (strata_matmul_ex's y_row_stride) on the wgmma kernel: the dense call's bits, every
    other value of the wide rows untouched."""
    monkeypatch.setenv("STRATA_INT_WGMMA", "all")
    assert_strided_equals_dense(cuda_ctx, rng, dtype, 70, 1024, 200)


@pytest.mark.parametrize("env,value", [("STRATA_INT_WGMMA", "yes"), ("STRATA_INT_WGMMA", "-4"),
                                       ("STRATA_INT_WGMMA", "64x"), ("STRATA_INT_WGMMA", "All"),
                                       ("STRATA_INT_WGMMA_BANKS", "3")])
def test_bad_switch_values_are_refused(rng, monkeypatch, env, value):
    """A typo must not time or test the wrong kernel: the integer path refuses it with a clear error (on a
    CUDA device; the CPU backend has no such kernel and the env value is ignored there)."""
    if S.cuda_device_count() == 0:
        pytest.skip("the switches are read by the CUDA backend")
    ctx = S.Context("cuda:0")
    try:
        raw, _ = make_weights(rng, S.DType.Q4_0, 64, 256)
        x = rng.standard_normal((80, 256), dtype=np.float32)
        if env == "STRATA_INT_WGMMA_BANKS":
            monkeypatch.setenv("STRATA_INT_WGMMA", "all")
        monkeypatch.setenv(env, value)
        with pytest.raises(S.StrataError, match=env):
            run_ex(ctx, x, 256, raw, S.DType.Q4_0, 64)
    finally:
        ctx.close()

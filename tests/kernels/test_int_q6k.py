"""Q6_K on CUDA's integer path (libstrata/src/cuda/cuda_int_q6k.cuh), bit for bit on the device.

A dtype may take the integer path only if every row count it can see goes through kernels with
the same bits: for Q6_K the dp4a kernel (1 row; tiles of 8 rows, which also take the row counts
the tile kernel does not) and the tile kernel (64 rows and more at `auto`, every row count with
STRATA_INT_MATMUL=tiles); `legacy`, `rows` and `norows` leave Q6_K on the dp4a kernel (it has no
8/16-row int8 mma kernel nor a few-row kernel). Checked: each row of a 520-row batch equals the
same row in batches of 1 to 512 rows and in shuffled subsets, under every STRATA_INT_MATMUL
value, with every prologue, bias and accumulate, within kernel_refs' float64 tolerance; every
STRATA_INT_MATMUL value gives the same bits as every other; and on the 8B model's Q6_K shapes
(the output matrix, 49152 x 4096 as in bench/gpu_matmul.py, and ffn_down, 4096 x 14336) the
routings agree with single rows at 1 to 512 rows.
"""

import numpy as np
import pytest

from kernel_refs import make_weights
from strata import _ffi as S
from test_int_tiles import random_blocks
from test_matmul_ex import P, PROLOGUES, check, prologue_f64, run_ex, width_of

pytestmark = [pytest.mark.gpu, pytest.mark.exactness]

Q6 = S.DType.Q6_K
KERNELS = ["auto", "legacy", "tiles", "rows", "norows", "tiles:v5", "tiles:32x64d2", "tiles:128x128d2"]
COUNTS = [1, 2, 5, 8, 9, 16, 33, 63, 64, 65, 130, 512]


def with_kernel(monkeypatch, name, run):
    monkeypatch.setenv("STRATA_INT_MATMUL", name)
    try:
        return run()
    finally:
        monkeypatch.delenv("STRATA_INT_MATMUL")


@pytest.mark.parametrize("prologue", PROLOGUES, ids=lambda p: p.name)
def test_q6k_rows_independent_of_batch_and_kernel(cuda_ctx, rng, monkeypatch, prologue):
    k, n_out = 1280, 131  # 5 super-blocks (their 16-byte phases all differ), two 128-output tiles, odd
    raw, w = make_weights(rng, Q6, n_out, k)
    width = width_of(prologue, k)
    x = rng.standard_normal((520, width + 1), dtype=np.float32)  # misaligned rows
    x[3, :32] = 0.0  # a zero block: dx = 0
    norm = (1 + 0.1 * rng.standard_normal(k)).astype(np.float32) if prologue == P.RMSNORM else None
    bias = rng.standard_normal(n_out).astype(np.float32)
    y0 = rng.standard_normal((520, n_out)).astype(np.float32)

    def run(rows, accumulate):
        return run_ex(cuda_ctx, x[rows], k, raw, Q6, n_out, prologue, norm, bias, y0[rows] if accumulate else None,
                      accumulate, width + 1, 4, 2)

    every = np.arange(520)
    reference = with_kernel(monkeypatch, "legacy", lambda: run(every, False))
    check(cuda_ctx, reference, prologue_f64(x, prologue, k, norm), w, Q6, k, bias)
    for name in KERNELS:
        full = with_kernel(monkeypatch, name, lambda: run(every, False))
        differ = int((full.view(np.uint32) != reference.view(np.uint32)).sum())
        assert differ == 0, f"STRATA_INT_MATMUL={name}: {differ} outputs differ from legacy (the dp4a kernel)"
        for n in COUNTS:
            part = with_kernel(monkeypatch, name, lambda: run(every[:n], False))
            assert np.array_equal(part.view(np.uint32), full[:n].view(np.uint32)), f"{name}: {n} rows differ"
        rows = rng.permutation(520)[:77]
        part = with_kernel(monkeypatch, name, lambda: run(rows, True))
        want = with_kernel(monkeypatch, name, lambda: run(every, True))[rows]
        assert np.array_equal(part.view(np.uint32), want.view(np.uint32)), f"{name}: shuffled rows differ"


@pytest.mark.parametrize("n_out,k", [(49152, 4096), (4096, 14336)], ids=["lm_head", "ffn_down"])
def test_q6k_llama_8b_shapes(cuda_ctx, rng, monkeypatch, n_out, k):
    """Single rows (the decode step) against 8 to 512-row batches under each routing."""
    raw = random_blocks(rng, Q6, n_out, k)
    x = rng.standard_normal((512, k), dtype=np.float32)
    norm = np.ones(k, np.float32)

    def run(n):
        return run_ex(cuda_ctx, x[:n], k, raw, Q6, n_out, P.RMSNORM, norm)

    singles = [with_kernel(monkeypatch, "auto", lambda: run_ex(cuda_ctx, x[r:r + 1], k, raw, Q6, n_out, P.RMSNORM,
                                                                     norm))[0] for r in range(4)]
    for name in ("auto", "legacy", "tiles", "tiles:v5"):
        for n in (8, 16, 64, 512):
            y = with_kernel(monkeypatch, name, lambda: run(n))
            for r in range(4):
                assert np.array_equal(y[r].view(np.uint32), singles[r].view(np.uint32)), (
                    f"{name}: row {r} of {n} rows differs from the row alone ({n_out}x{k})")

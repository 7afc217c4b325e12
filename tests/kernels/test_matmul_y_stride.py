"""strata_matmul_ex's y_row_stride on the device, kernel family by kernel family: with each CUDA
matmul kernel forced (the integer path's dot, int8 mma, few-row, tile and gemv kernels, the fused
variants without a pre-pass, and the f16 tensor-core and plain kernels of the other types), a call
writing columns of wider rows gives every output the bits of the dense call under the same routing,
and leaves every other column of those rows untouched.

The stride only moves where a finished value is stored (y + row * stride + column instead of
y + row * n_out + column), so any difference here is an addressing bug, never arithmetic. Rows 1 /
4 / 16 / 64 / 100 cross the one-row, 8-row and 16-row tiles, the few-row and the many-row kernels.
"""

import numpy as np
import pytest

from kernel_refs import make_weights
from strata import _ffi as S
from test_int_tiles import random_blocks
from test_matmul_ex import P, assert_strided_equals_dense, run_ex, run_ex_strided

pytestmark = pytest.mark.gpu

INT_DTYPES = [S.DType.Q4_0, S.DType.Q8_0, S.DType.Q4_1, S.DType.Q4_K, S.DType.Q6_K]
ROWS = [1, 4, 16, 64, 100]
# (what the routing forces, the environment that forces it)
INT_ROUTES = [
    ("legacy: dot / int8 mma tiles", {"STRATA_INT_MATMUL": "legacy"}),
    ("few-row kernel", {"STRATA_INT_MATMUL": "rows"}),
    ("many-row tile kernel", {"STRATA_INT_MATMUL": "tiles"}),
    ("auto without the few-row kernel", {"STRATA_INT_MATMUL": "norows"}),
    ("gemv kernel", {"STRATA_INT_GEMV": "8"}),
    ("gemv kernel, no pre-pass", {"STRATA_INT_GEMV": "8", "STRATA_INT_GEMV_FUSE": "1"}),
    ("dot kernel, no pre-pass", {"STRATA_INT_MATMUL": "legacy", "STRATA_INT_FUSE_ROUNDS": "1000000"}),
]
ROUTE_VARS = ("STRATA_INT_MATMUL", "STRATA_INT_GEMV", "STRATA_INT_GEMV_FUSE", "STRATA_INT_FUSE_ROUNDS")


def routed(monkeypatch, env):
    for name in ROUTE_VARS:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)


@pytest.mark.exactness
@pytest.mark.parametrize("route", INT_ROUTES, ids=lambda r: r[0])
@pytest.mark.parametrize("dtype", INT_DTYPES, ids=lambda d: d.name)
def test_y_row_stride_integer_kernels(cuda_ctx, rng, monkeypatch, dtype, route):
    routed(monkeypatch, route[1])
    k = 2304 if dtype in (S.DType.Q4_K, S.DType.Q6_K) else 2112   # several slices; Q4_0/Q8_0 a partial one
    raw, _ = make_weights(rng, dtype, 77, k)
    for n_rows in ROWS:
        for prologue in (P.RMSNORM, P.NONE):
            assert_strided_equals_dense(cuda_ctx, rng, dtype, n_rows, k, 77, prologue, raw)
    assert_strided_equals_dense(cuda_ctx, rng, dtype, 4, k, 77, P.SILU_MUL, make_weights(rng, dtype, 77, k)[0])


@pytest.mark.exactness
@pytest.mark.parametrize("dtype", [S.DType.F16, S.DType.Q4_1, S.DType.BF16, S.DType.F32], ids=lambda d: d.name)
def test_y_row_stride_float_kernels(cuda_ctx, rng, monkeypatch, dtype):
    """The f16 tensor-core kernels (decode and wide tiles) and the plain kernel, where these types go
    (Q4_1 under STRATA_INT_Q4_1=0; by default it takes the integer path)."""
    routed(monkeypatch, {})
    monkeypatch.setenv("STRATA_INT_Q4_1", "0")
    k = 1024
    raw, _ = make_weights(rng, dtype, 131, k)
    for n_rows in ROWS:
        for prologue in (P.RMSNORM, P.SILU_MUL):
            assert_strided_equals_dense(cuda_ctx, rng, dtype, n_rows, k, 131, prologue, raw)


@pytest.mark.exactness
@pytest.mark.parametrize("dtype", INT_DTYPES, ids=lambda d: d.name)
def test_y_row_stride_on_llama_8b_qkv(cuda_ctx, rng, monkeypatch, dtype):
    """The 8B q+k part (5120 outputs) and v (1024) at decode row counts under the default routing,
    as the decoder writes them into [q | k | v] rows of 6144."""
    routed(monkeypatch, {})
    k = 4096
    for n_out, column in ((5120, 0), (1024, 5120)):
        raw = random_blocks(rng, dtype, n_out, k)
        norm = np.ones(k, np.float32)
        for n_rows in (1, 4, 16):
            x = rng.standard_normal((n_rows, k), dtype=np.float32)
            dense = run_ex(cuda_ctx, x, k, raw, dtype, n_out, P.RMSNORM, norm)
            cols, before, after = run_ex_strided(cuda_ctx, x, k, raw, dtype, n_out, 6144, column, P.RMSNORM, norm)
            assert np.array_equal(cols.view(np.uint32), dense.view(np.uint32)), f"{dtype.name} {n_rows} rows"
            gap = np.ones(6144, bool)
            gap[column:column + n_out] = False
            assert np.array_equal(after[:, gap].view(np.uint32), before[:, gap].view(np.uint32))

"""The integer path (Q4_0, Q8_0: libstrata/src/core/int8_path.h) computes the same bits on
the CPU and on CUDA (GPU machine only).

Both backends round each 32-value block of x to int8 by the same rule, take exact
integer block products and fold them in the same order (acc = fmaf(d*dx, I, acc) per
block, slices of 8 blocks added in order, then bias and accumulate): docs/kernels.md.
So strata_matmul without a prologue must agree bit for bit across backends for every
row count (CUDA's dp4a and int8 tensor-core kernels included) and every k, also with a
partial last slice. The negative control: F16 weights (CUDA rounds x to f16, the CPU
keeps float32) must differ somewhere, so the comparison can see a difference.
"""

import numpy as np
import pytest

from kernel_refs import INT8_DTYPES, make_weights
from strata import _ffi as S

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(S.cuda_device_count() == 0, reason="needs a CUDA device")]

ROWS = [1, 2, 5, 8, 9, 16, 17, 64, 129, 300]
SHAPES = [(32, 7), (224, 33), (576, 131), (1536, 64), (4096, 19)]  # (k, n_out): 224 = 7 blocks, a partial slice


@pytest.fixture(scope="module")
def pair():
    cpu, cuda = S.Context("cpu"), S.Context("cuda:0")
    yield cpu, cuda
    cpu.close()
    cuda.close()


def run(ctx, x, raw, dtype, n_out, bias, y0):
    bufs = [S.Buffer.from_array(ctx, np.ascontiguousarray(a)) for a in (x, raw, bias, y0)]
    bx, bw, bb, by = bufs
    S.matmul(ctx, bx, 0, x.shape[0], x.shape[1], bw, 0, dtype, n_out, bb, 0, by, 0, True)
    y = by.to_numpy(np.float32, (x.shape[0], n_out))
    for b in bufs:
        b.close()
    return y


def one_case(pair, rng, dtype, n_rows, k, n_out):
    raw, _ = make_weights(rng, dtype, n_out, k)
    x = (rng.standard_normal((n_rows, k)) * rng.uniform(0.1, 10, (n_rows, 1))).astype(np.float32)
    if n_rows % 3 == 0:
        x[:, :32] = 0  # a zero block (step 0) on some shapes
    bias = rng.standard_normal(n_out).astype(np.float32)
    y0 = rng.standard_normal((n_rows, n_out)).astype(np.float32)
    return [run(c, x, raw, dtype, n_out, bias, y0) for c in pair]


@pytest.mark.exactness
@pytest.mark.parametrize("dtype", INT8_DTYPES, ids=lambda d: d.name)
def test_integer_path_same_bits_on_both_backends(pair, rng, dtype):
    for k, n_out in SHAPES:
        for n_rows in ROWS:
            a, b = one_case(pair, rng, dtype, n_rows, k, n_out)
            assert np.array_equal(a.view(np.uint32), b.view(np.uint32)), \
                f"k={k} rows={n_rows}: {int((a != b).sum())} elements differ, max {np.abs(a - b).max():.3g}"


def test_negative_control_f16_differs(pair, rng):
    a, b = one_case(pair, rng, S.DType.F16, 17, 1536, 64)
    assert not np.array_equal(a.view(np.uint32), b.view(np.uint32))

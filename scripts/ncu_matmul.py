"""Runs one matmul shape a few times, eagerly, for a profiler (ncu) to read.

    ncu --clock-control none -k regex:mma --launch-skip 2 --launch-count 1 \
        python3 scripts/ncu_matmul.py --dtype Q4_0 --n-out 28672 --k 4096 --rows 1
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from strata import _ffi as S  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dtype", default="Q4_0")
    ap.add_argument("--n-out", type=int, required=True)
    ap.add_argument("--k", type=int, required=True)
    ap.add_argument("--rows", type=int, default=1)
    ap.add_argument("--calls", type=int, default=4)
    ap.add_argument("--device", default="cuda:0")
    a = ap.parse_args()
    ctx = S.Context(a.device)
    values, nbytes = S.dtype_block(S.DType[a.dtype])
    w_bytes = a.n_out * (a.k // values * nbytes)
    rng = np.random.default_rng(0)
    w = S.Buffer.from_array(ctx, rng.integers(0, 256, w_bytes, dtype=np.uint8))
    if a.dtype in ("F16", "BF16"):  # finite values: random bytes would hold NaNs
        w.upload(rng.standard_normal(w_bytes // 2).astype(np.float16).view(np.uint8))
    x = S.Buffer.from_array(ctx, rng.standard_normal((a.rows, a.k), dtype=np.float32))
    y = S.Buffer(ctx, a.rows * a.n_out * 4)
    params = S.matmul_params(S.MatmulPrologue.NONE, False, 1e-5, None, 0)
    for _ in range(a.calls):
        S.matmul_ex(ctx, params, x, 0, a.rows, a.k, w, 0, S.DType[a.dtype], a.n_out, y, 0)
    ctx.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())

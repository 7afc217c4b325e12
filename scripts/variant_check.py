"""Checks that builds of libstrata with different matmul tuning knobs compute the same bits.

    python3 scripts/variant_check.py build/libstrata.so build/var_*/libstrata.so

Each library runs in its own process (a process loads one libstrata) on the same inputs: every
tensor-core weight dtype, several k, 1..100 rows, each prologue; the SHA-256 of all outputs must
match the first library's. Prints one line per library.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def emit() -> str:
    import numpy as np
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "tests" / "kernels"))
    from kernel_refs import make_weights
    from strata import _ffi as S

    ctx = S.Context(os.environ.get("VARIANT_DEVICE", "cuda:0"))
    h = hashlib.sha256()
    rng = np.random.default_rng(7)
    for dt in ("F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q4_K", "Q6_K"):
        dtype = S.DType[dt]
        for n_out, k in ((200, 768), (1100, 4096), (96, 1536)):
            raw, _ = make_weights(rng, dtype, n_out, k)
            w = S.Buffer.from_array(ctx, raw)
            for pro in (S.MatmulPrologue.NONE, S.MatmulPrologue.RMSNORM, S.MatmulPrologue.SILU_MUL):
                width = 2 * k if pro == S.MatmulPrologue.SILU_MUL else k
                norm = S.Buffer.from_array(ctx, rng.standard_normal(k).astype(np.float32))
                params = S.matmul_params(pro, False, 1e-5, norm if pro == S.MatmulPrologue.RMSNORM else None, 0)
                for rows in (1, 2, 3, 8, 9, 16, 17, 64, 100):
                    x = S.Buffer.from_array(ctx, rng.standard_normal((rows, width)).astype(np.float32))
                    y = S.Buffer(ctx, rows * n_out * 4)
                    S.matmul_ex(ctx, params, x, 0, rows, k, w, 0, dtype, n_out, y, 0)
                    h.update(y.to_numpy(np.float32, (rows * n_out,)).tobytes())
                    x.close()
                    y.close()
                norm.close()
            w.close()
    return h.hexdigest()


def main() -> int:
    if sys.argv[1:2] == ["--emit"]:
        print(emit())
        return 0
    ref = None
    bad = 0
    for lib in sys.argv[1:]:
        env = dict(os.environ, STRATA_LIB=str(Path(lib).resolve()))
        r = subprocess.run([sys.executable, __file__, "--emit"], env=env, capture_output=True, text=True)
        digest = r.stdout.strip() if r.returncode == 0 else "ERROR " + r.stderr.strip().splitlines()[-1]
        ref = ref or digest
        same = digest == ref and not digest.startswith("ERROR")
        bad += not same
        print(f"{'same' if same else 'DIFFERENT'}  {digest[:16]}  {lib}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

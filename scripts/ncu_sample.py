"""One seeded-sampler setting, run for Nsight Compute (docs/gpu.md, the session of 2026-12-06, second).

Each named setting (bench/gpu_sample.py's SETTINGS) runs twice on the same logits (normal, std 3), eagerly:
the first call warms the kernel up, ncu profiles the second (`--launch-skip 1 --launch-count 1` with one
setting per process).

    python3 scripts/ncu_sample.py --setting "top-p 0.95" --rows 64 --vocab 49152
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

from gpu_sample import SETTINGS, sampling_params  # noqa: E402
from strata import _ffi as S  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--setting", required=True, choices=sorted(SETTINGS))
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--vocab", type=int, default=49152)
    ap.add_argument("--device", default="cuda:0")
    args = ap.parse_args(argv)
    ctx = S.Context(args.device)
    rng = np.random.default_rng(0)
    try:
        logits = S.Buffer.from_array(ctx, rng.standard_normal((args.rows, args.vocab), dtype=np.float32) * 3)
        out_ids = S.Buffer(ctx, 4 * args.rows)
        p = S.Buffer.from_array(ctx, sampling_params(args.setting, args.rows))
        for _ in range(2):
            S.sample(ctx, logits, 0, args.rows, args.vocab, p, 0, out_ids, 0)
        ctx.synchronize()
        print(args.setting, out_ids.to_numpy(np.int32, (args.rows,))[:8])
        for b in (p, out_ids, logits):
            b.close()
    finally:
        ctx.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

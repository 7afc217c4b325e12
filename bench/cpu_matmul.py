"""bench/cpu_matmul.py — CPU matmul speed on the default model's decode shapes.

Streams the weights of a SmolLM2-135M-shaped model (30 layers of Q4_1
576x576, 192x576, 192x576, 576x576, 1536x576, 1536x576, 576x1536, plus the
Q8_0 49152x576 tied output matrix) through strata_matmul at batch 1 in
forward-pass order, so weights come from DRAM as in a real decode step, and
prints a table: per shape time and GB/s, and the implied tokens/s for the
matmuls alone. Also times prefill-sized batches. Usage:

    python bench/cpu_matmul.py [--threads N] [--steps S]
"""

import argparse
import time

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf.quants import quantize

from strata import _ffi as S

LAYER_SHAPES = [("q", 576, 576), ("k", 192, 576), ("v", 192, 576), ("o", 576, 576),
                ("gate", 1536, 576), ("up", 1536, 576), ("down", 576, 1536)]
N_LAYERS = 30


def quantized(rng, n_out, k, qtype):
    return quantize(rng.standard_normal((n_out, k), dtype=np.float32) * 0.05, qtype)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    ctx = S.Context("cpu", args.threads)
    print(f"{ctx.info().name}; {S.build_info()}")

    # One buffer per layer matrix, so the working set (~98 MB) exceeds the caches.
    mats = []  # (name, n_out, k, dtype, buffer)
    for layer in range(N_LAYERS):
        for name, n_out, k in LAYER_SHAPES:
            mats.append((name, n_out, k, S.DType.Q4_1, S.Buffer.from_array(ctx, quantized(rng, n_out, k, T.Q4_1))))
    mats.append(("output", 49152, 576, S.DType.Q8_0, S.Buffer.from_array(ctx, quantized(rng, 49152, 576, T.Q8_0))))
    x = S.Buffer.from_array(ctx, rng.standard_normal(64 * 1536, dtype=np.float32))
    y = S.Buffer(ctx, 64 * 49152 * 4)

    per_name = {}
    step_times = []
    for step in range(args.steps + 2):
        t_step = time.perf_counter()
        for name, n_out, k, dtype, w in mats:
            t0 = time.perf_counter()
            S.matmul(ctx, x, 0, 1, k, w, 0, dtype, n_out, None, 0, y, 0)
            if step >= 2:
                dt, nbytes = per_name.get(name, (0.0, 0))
                per_name[name] = (dt + time.perf_counter() - t0, nbytes + w.size)
        if step >= 2:
            step_times.append(time.perf_counter() - t_step)

    total_bytes = sum(m[4].size for m in mats)
    print(f"\nbatch 1, {args.steps} decode steps, weights {total_bytes / 1e6:.1f} MB per step")
    print(f"{'matrix':>8} {'shape':>12} {'type':>5} {'us/call':>9} {'GB/s':>7}")
    for name, n_out, k, dtype, w in mats[:len(LAYER_SHAPES)] + mats[-1:]:
        dt, nbytes = per_name[name]
        calls = args.steps * (1 if name == "output" else N_LAYERS)
        print(f"{name:>8} {f'{n_out}x{k}':>12} {dtype.name:>5} {dt / calls * 1e6:9.1f} {nbytes / dt / 1e9:7.2f}")
    best, median = min(step_times), float(np.median(step_times))
    print(f"matmuls per step: median {median * 1e3:.2f} ms ({total_bytes / median / 1e9:.1f} GB/s) -> "
          f"{1 / median:.0f} tokens/s; best {best * 1e3:.2f} ms -> {1 / best:.0f} tokens/s")

    print(f"\nprefill (rows x 576x576 Q4_1 and 1536x576)")
    print(f"{'rows':>5} {'shape':>10} {'ms':>8} {'GFLOP/s':>8}")
    for n_rows in (4, 16, 64):
        for name, n_out, k, dtype, w in (mats[0], mats[4]):
            S.matmul(ctx, x, 0, n_rows, k, w, 0, dtype, n_out, None, 0, y, 0)
            t0 = time.perf_counter()
            reps = 20
            for _ in range(reps):
                S.matmul(ctx, x, 0, n_rows, k, w, 0, dtype, n_out, None, 0, y, 0)
            dt = (time.perf_counter() - t0) / reps
            print(f"{n_rows:5d} {f'{n_out}x{k}':>10} {dt * 1e3:8.3f} {2 * n_rows * n_out * k / dt / 1e9:8.1f}")

    for m in mats:
        m[4].close()
    x.close()
    y.close()
    ctx.close()


if __name__ == "__main__":
    main()

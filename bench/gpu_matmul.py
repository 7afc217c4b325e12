"""Matmul speed per shape on the GPU: µs per call, weight GB/s (and % of what
the card reaches in a device-to-device copy: bench/roofline.py) and TFLOP/s, for every
weight dtype, the Llama shapes of the benchmark models (docs/design.md) and 1..512 rows.

Each figure is one call inside a captured graph of `--calls` back-to-back
matmuls that cycle over enough copies of the weights (>= --rotate-mb, default
200 MB) that they cannot stay in the 50 MB L2, replayed `--replays` times; so
launch overhead is excluded but the gap between kernels of a graph is not
(as in a decode step). Weight bytes are random: the kernels' speed does not
depend on the values.

    python bench/gpu_matmul.py                       # everything (a few minutes)
    python bench/gpu_matmul.py --models 8b --dtypes Q4_0 --rows 1 64 512
    python bench/gpu_matmul.py --prologue RMSNORM    # the fused strata_matmul_ex prologue
    python bench/gpu_matmul.py --models 8b --dtypes Q4_0 Q8_0 --rows 64 512 --int-kernels legacy tiles
                                                     # the integer path's kernels side by side
                                                     # (STRATA_INT_MATMUL per line; see strata/env.py)
    python bench/gpu_matmul.py --models 8b 1b --dtypes Q4_0 Q8_0 --rows 1 2 4 8 16 32 64 --int-kernels norows auto rows
                                                     # the few-row kernel (auto: 2-32 rows) against the routing before it
    bash scripts/gpu_ab.sh - STRATA_INT_ROWS_WARPS=16 STRATA_INT_ROWS_WIDE=1 \
        "STRATA_INT_ROWS_WARPS=16 STRATA_INT_ROWS_WIDE=1" -- python3 bench/gpu_matmul.py --models 8b --dtypes Q4_0 --rows 4 8 16 32
                                                     # the few-row kernel's A/B switches (strata/env.py)
    bash scripts/gpu_ab.sh STRATA_INT_GEMV=0 STRATA_INT_GEMV=8 -- \
        python3 bench/gpu_matmul.py --models 8b 1b 135m --dtypes Q4_0 Q8_0 Q4_K --rows 1 2 4 8
                                                     # the gemv kernel (1-8 rows, libstrata/src/cuda/cuda_int_gemv.cu)
                                                     # against the routing before it (STRATA_INT_GEMV: strata/env.py;
                                                     # an --int-kernels value that forces a kernel turns it off)
    python bench/gpu_matmul.py --models 8b --dtypes Q4_0 --rows 16 64 128 512 \
        --int-kernels routings                       # the tile kernel's routings v1-v9 and legacy (A/B in one run)
    python bench/gpu_matmul.py --models 8b --dtypes Q4_0 --rows 64 512 --int-kernels configs
                                                     # every tile configuration (tiles:NOxROWSdD) forced

--int-kernels takes STRATA_INT_MATMUL values: auto, auto:v1..v10, legacy, norows, rows, rows:16/32/64 (the few-row kernel), tiles, tiles:v1..v10 (routings),
tiles:128/64/32 (a 64-row shape at 2 stages), tiles:NOxROWSdD[o] (NO 128/64/32 x 64 rows, 128 x 128, 128 x 16, 128 x 32 or 128 x 48,
pipeline depth D 0-2, o: Q4_0's offset out of the nibbles, at D 0 and 2; tiles:NOx64d2k / d2ok (NO 32 or 64): the K split,
two warp groups on alternate slices;
libstrata/src/cuda/cuda_int_mma_tiles.cu), and `routings` / `configs` as shorthands for all routings /
all configurations.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
# bench/'s own modules (roofline, llama_peer) also when this file is loaded from elsewhere (tests)
sys.path.insert(1, str(Path(__file__).resolve().parent))

from strata import _ffi as S  # noqa: E402

from roofline import H200_COPY_TBS, card_roofline, describe  # noqa: E402  (bench/, beside this script)


# (model, name, n_out, k): Llama-3.1-8B, Llama-3.2-1B, SmolLM2-135M projections.
SHAPES = [
    ("8b", "q/o", 4096, 4096), ("8b", "k/v", 1024, 4096), ("8b", "qkv", 6144, 4096),
    ("8b", "gate_up", 28672, 4096), ("8b", "down", 4096, 14336), ("8b", "lm_head", 49152, 4096),
    ("1b", "q/o", 2048, 2048), ("1b", "k/v", 512, 2048), ("1b", "qkv", 3072, 2048),
    ("1b", "gate_up", 16384, 2048), ("1b", "down", 2048, 8192),
    ("135m", "q/o", 576, 576), ("135m", "k/v", 192, 576), ("135m", "qkv", 960, 576),
    ("135m", "gate_up", 3072, 576), ("135m", "down", 576, 1536),
]
DTYPES = ["Q4_0", "Q8_0", "F16", "BF16", "Q4_1", "Q4_K", "Q6_K"]


ROUTINGS = ["legacy", "tiles:v1", "tiles:v2", "tiles:v3", "tiles:v4", "tiles:v5", "tiles:v6", "tiles:v7", "tiles:v8",
            "tiles:v9", "tiles:v10"]
CONFIGS = [f"tiles:{no}x{rows}d{d}{o}" for o in ("", "o") for d in (0, 1, 2) for no, rows in
           ((128, 64), (64, 64), (32, 64), (128, 128), (128, 16), (128, 32), (128, 48)) if d != 1 or not (o or rows == 128)
           ] + ["tiles:32x64d2k", "tiles:32x64d2ok", "tiles:64x64d2k", "tiles:64x64d2ok"]
_INT_KERNEL = re.compile(r"auto(:v([1-9]|10))?|legacy|norows|rows(:16|:32|:64)?"
                         r"|tiles(:v([1-9]|10)|:(128|64|32)|:((128|64|32)x64|128x(128|16|32|48))(d[012]|d[02]o)|:(32|64)x64d2o?k)?")


def chosen_int_kernels(names, environ):
    """The values to time: --int-kernels' (None when not given), else the environment's STRATA_INT_MATMUL (an A/B
    through scripts/gpu_ab.sh, which sets it per run; main() sets it per timed call, so it must be read first),
    else auto."""
    return int_kernel_values(names if names is not None else [environ.get("STRATA_INT_MATMUL") or "auto"])


def int_kernel_values(names):
    """--int-kernels: STRATA_INT_MATMUL values in order, `routings` and `configs` expanded."""
    out = []
    for name in names:
        expanded = ROUTINGS if name == "routings" else CONFIGS if name == "configs" else [name]
        for value in expanded:
            if not _INT_KERNEL.fullmatch(value):
                raise SystemExit(f"--int-kernels: {value!r} is not a STRATA_INT_MATMUL value (see --help)")
            if value not in out:
                out.append(value)
    return out


def row_bytes(dtype, k):
    values, nbytes = S.dtype_block(dtype)
    return k // values * nbytes


def upload_weights(ctx, pool, dtype, n_out, k, rotate_bytes):
    """Enough copies of an [n_out, k] weight matrix of random bytes to cycle through L2-cold."""
    w_bytes = n_out * row_bytes(dtype, k)
    copies = max(2, -(-rotate_bytes // w_bytes))
    data = pool[:w_bytes] if pool.size >= w_bytes else np.resize(pool, w_bytes)
    weights = []
    for c in range(copies):
        buf = S.Buffer(ctx, w_bytes)
        buf.upload(np.roll(data, 64 * c) if c else data)
        weights.append(buf)
    return weights, w_bytes


def time_rows(ctx, weights, dtype, n_out, k, n_rows, prologue, calls, replays):
    """Microseconds per call of an n_rows matmul (graph replay, weights rotated)."""
    width = 2 * k if prologue == S.MatmulPrologue.SILU_MUL else k
    x = S.Buffer.from_array(ctx, np.random.default_rng(1).standard_normal((n_rows, width), dtype=np.float32))
    y = S.Buffer(ctx, n_rows * n_out * 4)
    norm = S.Buffer.from_array(ctx, np.ones(k, np.float32)) if prologue == S.MatmulPrologue.RMSNORM else None
    params = S.matmul_params(prologue, False, 1e-5, norm, 0)
    ctx.graph_begin()
    for i in range(calls):
        S.matmul_ex(ctx, params, x, 0, n_rows, k, weights[i % len(weights)], 0, dtype, n_out, y, 0)
    graph = ctx.graph_end()
    graph.launch()
    ctx.synchronize()
    t0 = time.perf_counter()
    for _ in range(replays):
        graph.launch()
    ctx.synchronize()
    us = (time.perf_counter() - t0) / (replays * calls) * 1e6
    graph.close()
    for b in [x, y] + ([norm] if norm else []):
        b.close()
    return us


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--models", nargs="*", default=["8b", "1b", "135m"])
    ap.add_argument("--dtypes", nargs="*", default=DTYPES)
    ap.add_argument("--rows", nargs="*", type=int, default=[1, 4, 16, 64, 512])
    ap.add_argument("--prologue", default="NONE", choices=[p.name for p in S.MatmulPrologue])
    ap.add_argument("--calls", type=int, default=12)
    ap.add_argument("--replays", type=int, default=20)
    ap.add_argument("--rotate-mb", type=int, default=200)
    ap.add_argument("--int-kernels", nargs="*", default=None,
                    help="STRATA_INT_MATMUL values to time in turn, or routings / configs (Q4_0/Q8_0/Q4_K only; "
                         "default: the environment's STRATA_INT_MATMUL, so scripts/gpu_ab.sh can A/B it, else auto)")
    ap.add_argument("--roofline-tbs", type=float, default=None,
                    help=f"the memory roofline in TB/s for the %%roof column (default: measured on the device; "
                         f"{H200_COPY_TBS} reproduces the tables before 2026-12-05's fourth session)")
    args = ap.parse_args(argv)
    int_kernels = chosen_int_kernels(args.int_kernels, os.environ)
    try:
        _, roofline = card_roofline(args.device, args.roofline_tbs)
    except ValueError as exc:
        ap.error(str(exc))
    roofline_gbs = roofline / 1e9

    ctx = S.Context(args.device)
    info = ctx.info()
    prologue = S.MatmulPrologue[args.prologue]
    pool = np.random.default_rng(0).integers(0, 256, 256 << 20, dtype=np.uint8)  # random weight bytes
    print(f"# {info.name}, {S.build_info()}, prologue {prologue.name}, "
          f"{args.calls} calls/graph x {args.replays} replays, weights rotated over >= {args.rotate_mb} MB")
    print(describe(info.name, roofline, args.roofline_tbs is not None))
    print(f"{'dtype':6} {'model':5} {'shape':8} {'n_out x k':>12} {'rows':>5} {'kernel':>15} {'us':>9} {'GB/s':>8} "
          f"{'%roof':>6} {'TFLOP/s':>8}")
    for dtype_name in args.dtypes:
        dtype = S.DType[dtype_name]
        for model, name, n_out, k in SHAPES:
            if model not in args.models:
                continue
            weights, w_bytes = upload_weights(ctx, pool, dtype, n_out, k, args.rotate_mb << 20)
            kernels = int_kernels if dtype_name in ("Q4_0", "Q8_0", "Q4_K", "Q6_K") else ["auto"]
            for n_rows in args.rows:
                for kernel in kernels:
                    # libstrata reads STRATA_INT_MATMUL at each matmul call (graph capture included)
                    os.environ["STRATA_INT_MATMUL"] = kernel
                    us = time_rows(ctx, weights, dtype, n_out, k, n_rows, prologue, args.calls, args.replays)
                    gbs = w_bytes / us / 1e3
                    tflops = 2.0 * n_rows * n_out * k / us / 1e6
                    print(f"{dtype_name:6} {model:5} {name:8} {f'{n_out}x{k}':>12} {n_rows:5d} {kernel:>15} "
                          f"{us:9.2f} {gbs:8.0f} {100 * gbs / roofline_gbs:5.0f}% {tflops:8.1f}", flush=True)
            for b in weights:
                b.close()
    ctx.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Per-kernel time breakdown of one decode step (where the time of a token goes).

Runs the model's decode step eagerly, synchronizing after every kernel, and
sums the time per kernel kind (matmuls by role and shape). Each figure
includes one launch + synchronize (measured separately as `sync overhead`),
so small kernels look slower than inside a captured graph; the graph time of
the whole step, and the number of kernels it launches, are printed beside the
sum for comparison. Under STRATA_MATMUL_CHAIN the captured graph keeps the
chain (one kernel for the calls it holds); the synchronized sum runs them one by one.

    python bench/gpu_profile.py --model /tmp/strata-synth/synth-8b-Q4_0.gguf --rows 1
    python bench/gpu_profile.py --model /tmp/strata-synth/synth-8b-Q4_0.gguf --prefill 512

With --ncu-window the script also replays the captured step once between
cuProfilerStart and cuProfilerStop, so Nsight Compute started with
`--profile-from-start off` measures exactly one step's kernels as the graph
launches them (bench/ncu_step.py turns its CSV into a table):

    ncu --profile-from-start off --clock-control none --cache-control none \
        --metrics gpu__time_duration.sum --csv --page raw \
        python bench/gpu_profile.py --model ... --rows 1 --ncu-window > step.csv
    python bench/ncu_step.py step.csv
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
# bench/'s own modules (roofline) also when this file is loaded from elsewhere (tests)
sys.path.insert(1, str(Path(__file__).resolve().parent))

from strata import _ffi  # noqa: E402
from strata.config import EngineConfig  # noqa: E402
from strata.engine.runner import ModelRunner  # noqa: E402
from strata.models import decoder as decoder_module  # noqa: E402
from strata.models.loader import load_model  # noqa: E402

from roofline import copy_bandwidth  # noqa: E402  (bench/, beside this script)


class TimingProxy:
    """Stands in for the _ffi module inside the decoder: times every kernel call."""

    def __init__(self, ctx, spec):
        self.ctx, self.spec = ctx, spec
        self.totals: dict[str, list[float]] = collections.defaultdict(list)

    def __getattr__(self, name):
        real = getattr(_ffi, name)
        if not callable(real) or name[0].isupper() or name in ("rope_params",):
            return real
        if name in ("matmul_chain_begin", "matmul_chain_end"):
            # STRATA_MATMUL_CHAIN: a chain allows no synchronize inside it, so the timed step runs its calls
            # one by one (the same bits); the captured graph above keeps the chain
            return lambda *args, **kw: None

        def timed(*args, **kw):
            self.ctx.synchronize()
            t0 = time.perf_counter()
            real(*args, **kw)
            self.ctx.synchronize()
            self.totals[self._label(name, args)].append(time.perf_counter() - t0)

        return timed

    def _label(self, name, args):
        if name == "matmul":
            n_rows, k, dtype, n_out = args[3], args[4], args[7], args[8]
        elif name == "matmul_ex":
            n_rows, k, dtype, n_out = args[4], args[5], args[8], args[9]
        else:
            return name
        return f"matmul {_ffi.DType(dtype).name} {n_out}x{k}"


def profiler_window(launch, synchronize) -> None:
    """Runs `launch` once between the driver's cuProfilerStart and cuProfilerStop (the profiler's window)."""
    import ctypes

    cuda = ctypes.CDLL("libcuda.so.1")
    synchronize()
    if cuda.cuProfilerStart() != 0:
        raise RuntimeError("cuProfilerStart failed (is a CUDA context current on this thread?)")
    launch()
    synchronize()
    cuda.cuProfilerStop()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None)
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--rows", type=int, default=1, help="decode rows (concurrent sequences)")
    ap.add_argument("--context", type=int, default=128, help="tokens already in each slot")
    ap.add_argument("--prefill", type=int, default=0,
                    help="profile one prompt chunk of this many tokens (one sequence) instead of decode rows")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--ncu-window", action="store_true",
                    help="replay the captured step once inside cuProfilerStart/Stop (for ncu --profile-from-start off)")
    args = ap.parse_args(argv)

    ctx = _ffi.Context(args.device)
    roofline = copy_bandwidth(ctx)  # before the weights take the device's memory
    model = load_model(args.model, ctx)
    spec = model.spec
    n = args.prefill
    batch, chunk = (1, n) if n else (args.rows, 64)
    cfg = EngineConfig(batch=batch, chunk=chunk, ctx=max(args.context + 16, n, 256)).resolve(
        "cuda" if args.device.startswith("cuda") else "cpu", spec.ctx_train)
    runner = ModelRunner(ctx, model, cfg)
    io = runner.io
    if n:       # one sequence's prompt chunk: positions 0..n-1 of slot 0, the last row sampled
        rows, n_decode, n_logits = n, 0, 1
        runner.slots.write_positions(0, 0, np.repeat(np.arange(n, dtype=np.int32)[:, None], 4, axis=1))
        io.ids[:n] = 100
        io.rows[:n, 0] = 0
        io.rows[:n, 1] = np.arange(n)
        io.logit_idx[0] = n - 1
    else:
        rows = n_decode = n_logits = args.rows
        for slot in range(rows):
            positions = np.repeat(np.arange(args.context + 1, dtype=np.int32)[:, None], 4, axis=1)
            runner.slots.write_positions(slot, 0, positions)
        io.ids[:rows] = 100
        io.rows[:rows, 0] = np.arange(rows)
        io.rows[:rows, 1] = args.context
        io.logit_idx[:rows] = np.arange(rows)
    io.clear(rows, n_logits)
    io.upload()

    def step():
        model.decoder.record(io, runner.act, runner.slots, rows, n_decode, n_logits)

    step()
    ctx.synchronize()
    ctx.graph_begin()
    step()
    graph = ctx.graph_end()
    kernels = graph.kernel_count()
    graph.launch()
    ctx.synchronize()
    t0 = time.perf_counter()
    for _ in range(20):
        graph.launch()
    ctx.synchronize()
    graph_ms = (time.perf_counter() - t0) / 20 * 1e3
    if args.ncu_window:
        profiler_window(graph.launch, ctx.synchronize)

    proxy = TimingProxy(ctx, spec)
    decoder_module.F = proxy
    try:
        for _ in range(args.repeat):
            step()
    finally:
        decoder_module.F = _ffi
    t0 = time.perf_counter()
    for _ in range(200):
        ctx.synchronize()
    sync_us = (time.perf_counter() - t0) / 200 * 1e6

    rows_out = []
    for label, times in proxy.totals.items():
        per_step = sum(times) / args.repeat
        rows_out.append((per_step, label, len(times) // args.repeat))
    total = sum(r[0] for r in rows_out)
    what = f"a prompt chunk of {n} tokens" if n else f"{rows} decode rows, context {args.context}"
    print(f"model {model.path.name}: {model.weights.nbytes / 2**20:,.0f} MiB of weights, {what}, device {args.device}")
    print(f"captured graph: {graph_ms:.3f} ms/step ({rows * 1e3 / graph_ms:,.0f} tokens/s), {kernels} kernels/step; "
          f"weights at {roofline / 1e12:.2f} TB/s ({ctx.info().name}'s device-to-device copy, bench/roofline.py): "
          f"{model.weights.nbytes / roofline * 1e3:.3f} ms")
    print(f"sum of synchronized kernels: {total * 1e3:.3f} ms/step; sync overhead ~{sync_us:.0f} us per call")
    print("| kernel | calls/step | ms/step | share |")
    print("| --- | ---: | ---: | ---: |")
    for per_step, label, calls in sorted(rows_out, reverse=True):
        print(f"| {label} | {calls} | {per_step * 1e3:.3f} | {100 * per_step / total:.1f}% |")
    graph.close()
    runner.close()
    model.close()
    ctx.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The engine's host cost per decode step on the CPU backend, libstrata's compute taken out.

Runs the real engine loop (Engine + anyio, one stream per request consumed token by token, as
bench/gpu_decode.py does) on a tiny synthesized llama (strata synth's `tiny` shape; its tokenizer
from STRATA_SYNTH_TOKENIZER or the default model) and, for each concurrency, times the steady
decode steps only: those whose plan is every request's decode row and nothing else. A step spans
the end of the previous step to its own end. The process's CPU time over that span, less the
CPU time spent inside libstrata calls that compute (a graph launch, an eager recording, a wait on
a marker; with one compute thread libstrata computes in the calling thread, so that thread's CPU
time around the call is the compute), is the host's own work per step: scheduling, the runner's
bookkeeping, the worker-thread hand-off, token acceptance, detokenization, stream delivery (the
client tasks run while the worker thread computes, so wall time would hide them; CPU time does
not, and it does not count the time a loaded machine spends running other processes).

By default (--compute stub) the steady steps' graph launches only write made-up token ids, so the
loop runs with no compute at all, as the host of a GPU sees it; --compute real lets the CPU compute
and subtracts its CPU time (what is left then also holds the cache misses that compute causes).
Decode-ahead (decode_ahead.py), off on the CPU backend, can be forced on to time the CUDA engine's
host path; STRATA_DECODE_AHEAD_DEPTH and STRATA_DEVICE_THREAD (strata/env.py) apply as in serving.

    python bench/host_step.py                       # 1 and 16 requests, decode-ahead off and on
    python bench/host_step.py --concurrency 1 4 16 64 --tokens 96
    STRATA_DEVICE_THREAD=anyio python bench/host_step.py --ahead on   # the hand-off before 2026-12-02
    python bench/host_step.py --model path.gguf     # any GGUF instead of the tiny synthesized one
    python bench/host_step.py --profile 16          # also cProfile the loop at 16 requests (host functions)

A benchmark, not a test: the numbers depend on the machine and its load (bench/RESULTS.md).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from strata import _ffi  # noqa: E402
from strata.config import EngineConfig  # noqa: E402
from strata.engine.engine import Engine  # noqa: E402
from strata.engine.sampling import SamplingParams  # noqa: E402


class ComputeClock:
    """Accumulates the CPU seconds spent inside libstrata's compute calls (patched in place)."""

    def __init__(self):
        self.total = 0.0
        self._undo = []

    def patch(self, owner, name: str) -> None:
        original = getattr(owner, name)
        clock = self

        def timed(*args, **kwargs):
            start = time.thread_time()
            try:
                return original(*args, **kwargs)
            finally:
                clock.total += time.thread_time() - start

        setattr(owner, name, timed)
        self._undo.append((owner, name, original))

    def unpatch(self) -> None:
        for owner, name, original in reversed(self._undo):
            setattr(owner, name, original)
        self._undo.clear()


def stub_graphs(engine: Engine) -> None:
    """Replaces every graph launch (the steady decode steps) with writing made-up token ids where the
    graph writes its sampled ids: the loop then runs with no compute at all, as the host of a GPU
    sees it (the CPU's compute also evicts the host's caches, which a GPU's does not)."""
    io = engine.runner.io
    counter = [0]

    def launch(graph):
        counter[0] += 1
        ids = (np.arange(io.max_logits, dtype=np.int32) * 7919 + counter[0]) % 30000 + 100
        io.buffer.upload(ids, io.out_off)

    _ffi.Graph.launch = launch


def tiny_model(folder: Path) -> str:
    from strata.synth.writer import write_llama_gguf

    return str(write_llama_gguf(folder / "tiny-Q8_0.gguf", "tiny", "Q8_0", seed=1, pure=True).path)


async def serve(engine: Engine, prompts: list[list[int]], max_tokens: int) -> None:
    params = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
    async with anyio.create_task_group() as tg:
        await tg.start(engine.run)

        async def one(prompt):
            async for _ in engine.submit(prompt, params):
                pass

        async with anyio.create_task_group() as clients:
            for p in prompts:
                clients.start_soon(one, p)
        tg.cancel_scope.cancel()


def measure(engine: Engine, clock: ComputeClock, n: int, tokens: int, profile: bool) -> dict:
    """Runs n requests of `tokens` greedy tokens; the host CPU seconds of each steady decode step,
    all of it and the runner's share (its worker thread's CPU less compute)."""
    marks = []     # (wall, process CPU, compute CPU so far, runner-thread CPU so far, steady) at each step's end
    runner_cpu = [0.0]

    def observer(plan, result):
        steady = len(plan.decode) == n and not plan.prefill and not plan.admitted
        marks.append((time.perf_counter(), time.process_time(), clock.total, runner_cpu[0], steady))

    profiler = cProfile.Profile() if profile else None
    worker = cProfile.Profile() if profile else None      # the runner's steps run in a worker thread
    step = engine.runner.step

    def timed_step(*args):
        start = time.thread_time()
        if worker is not None:
            worker.enable()
        try:
            return step(*args)
        finally:
            if worker is not None:
                worker.disable()
            runner_cpu[0] += time.thread_time() - start

    engine.runner.step = timed_step
    engine.step_observers.append(observer)
    prompts = [[(i * 7919 + 13 * r) % 30000 + 100 for i in range(32)] for r in range(n)]
    try:
        if profiler is not None:
            profiler.enable()
        anyio.run(serve, engine, prompts, tokens)
    finally:
        if profiler is not None:
            profiler.disable()
        engine.step_observers.remove(observer)
        del engine.runner.step
    host, runner, wall = [], [], []
    for (w0, p0, c0, r0, _), (w1, p1, c1, r1, steady) in zip(marks, marks[1:]):
        if steady:
            wall.append(w1 - w0)
            host.append((p1 - p0) - (c1 - c0))
            runner.append((r1 - r0) - (c1 - c0))
    return {"host": host, "runner": runner, "wall": wall, "profilers": (profiler, worker)}


def print_profile(profilers, limit: int) -> None:
    """The event loop's and the worker thread's profiles, merged, by own time (the worker's times
    are wall times and include its waits for the GIL)."""
    stats = pstats.Stats(profilers[0])
    stats.add(profilers[1])
    stats.sort_stats("tottime").print_stats(limit)


def set_ahead(engine: Engine, on: bool) -> None:
    """Decode-ahead (decode_ahead.py) on the CPU backend too, where it is off by default: the CPU
    computes the guessed step at once, but the host does what it does on CUDA (STRATA_DECODE_AHEAD_DEPTH
steps deep)."""
    from strata.engine.decode_ahead import DecodeAhead
    from strata.engine.runner import ahead_depth

    runner = engine.runner
    if runner.ahead is not None:
        runner.ahead.close()
    runner.ahead = DecodeAhead(runner.ctx, runner.io, runner.max_logits, ahead_depth()) if on else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="a GGUF (default: a tiny synthesized llama, Q8_0)")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 16])
    ap.add_argument("--ahead", choices=["off", "on", "both"], default="both",
                    help="decode-ahead as on CUDA (on), as the CPU backend runs (off), or each")
    ap.add_argument("--tokens", type=int, default=64, help="greedy tokens per request")
    ap.add_argument("--repeat", type=int, default=3, help="runs per concurrency (the steps of all are pooled)")
    ap.add_argument("--threads", type=int, default=1, help="CPU compute threads (1: compute runs in the "
                    "calling thread, which the CPU-time accounting needs)")
    ap.add_argument("--compute", choices=["stub", "real"], default="stub",
                    help="stub: graph launches only write made-up token ids (the host as a GPU's sees it); "
                         "real: the CPU computes, its CPU time subtracted (its cache misses stay in)")
    ap.add_argument("--profile", type=int, default=0, metavar="N", help="cProfile one run at N requests")
    ap.add_argument("--profile-lines", type=int, default=40)
    args = ap.parse_args()
    modes = {"off": [False], "on": [True], "both": [False, True]}[args.ahead]

    with tempfile.TemporaryDirectory() as tmp:
        path = args.model or tiny_model(Path(tmp))
        ctx = _ffi.Context("cpu", args.threads)
        from strata.models.loader import load_model

        model = load_model(path, ctx)
        batch = max(args.concurrency + [args.profile])
        config = EngineConfig(model=path, device="cpu", batch=batch, chunk=512, ctx=512, graphs=True,
                              prefix_cache=False, max_queue=0).resolve("cpu", model.spec.ctx_train)
        engine = Engine(ctx, model, config)
        clock = ComputeClock()
        original_launch = _ffi.Graph.launch
        measure(engine, clock, 1, 8, False)              # warm-up: captures the graphs of small buckets
        for n in args.concurrency + [args.profile] if args.profile else args.concurrency:
            measure(engine, clock, n, 4, False)          # each bucket's graph
        if args.compute == "stub":
            stub_graphs(engine)
        clock.patch(_ffi.Graph, "launch")
        clock.patch(_ffi, "wait")
        clock.patch(type(model.decoder), "record")
        try:
            rows = []
            for ahead in modes:
                set_ahead(engine, ahead)
                for n in args.concurrency:
                    host, runner, wall = [], [], []
                    for _ in range(args.repeat):
                        r = measure(engine, clock, n, args.tokens, False)
                        host += r["host"]
                        runner += r["runner"]
                        wall += r["wall"]
                    rows.append((n, "on" if ahead else "off", len(host), statistics.median(host),
                                 statistics.fmean(host), statistics.median(runner), statistics.median(wall)))
            print(f"host CPU per steady decode step, compute excluded ({Path(path).name}, cpu, compute "
                  f"{args.compute}, {args.threads} thread(s), {args.tokens} tokens x {args.repeat} runs)")
            print(f"{'requests':>8} {'ahead':>5} {'steps':>6} {'host µs med':>12} {'host µs mean':>13} "
                  f"{'runner µs med':>14} {'wall µs med':>12}")
            for n, ahead, steps, med, mean, run, wmed in rows:
                print(f"{n:>8} {ahead:>5} {steps:>6} {med * 1e6:>12.1f} {mean * 1e6:>13.1f} {run * 1e6:>14.1f} "
                      f"{wmed * 1e6:>12.1f}")
            if args.profile:
                r = measure(engine, clock, args.profile, args.tokens, True)
                print_profile(r["profilers"], args.profile_lines)
        finally:
            clock.unpatch()
            _ffi.Graph.launch = original_launch
            set_ahead(engine, False)
            engine.runner.close()
            model.close()
            ctx.close()


if __name__ == "__main__":
    main()

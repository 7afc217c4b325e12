"""GPU serving speed against llama.cpp's on the same models (its figures from this run, or the ANCHORS below), through Strata's engine.

For each model: prompt tokens/s (one 512-token prompt), batch-1 decode
tokens/s (128 tokens), and aggregate decode tokens/s with 1, 4, 16 and 64
concurrent sequences of 128 prompt + 128 generated tokens each — all through
the real engine (scheduler, runner, captured decode graphs, exactness on).
Prints one table with each figure's share of the memory roofline (the card's
device-to-device copy, measured first: bench/roofline.py; --roofline-tbs gives
it instead) and its ratio to llama.cpp.

    python bench/gpu_decode.py                       # synth 135m/1b/8b x Q4_0/Q8_0/F16 + the default model
    python bench/gpu_decode.py --shapes 135m --types Q4_0 --concurrency 1 4
    python bench/gpu_decode.py --shapes 1b 8b --types Q5_K_M IQ4_XS   # the mixes users download
    python bench/gpu_decode.py --devices cuda:0,cuda:1 --shapes 8b --types Q4_0   # the layer split
    python bench/gpu_decode.py --devices cuda:0,cuda:1 --batch-groups 2 --shapes 8b --types Q4_0

With --devices the model is split by layers (--layer-split, default balanced by weight bytes;
docs/layer-split.md); the split replays a decode graph per stage and passes activations between
stages through host memory,
so compare it with the same model on one device (--devices cuda:0,cuda:0 measures the split's own
cost without a second GPU).

Synthesized checkpoints are written to --synth-dir once (strata synth) and reused.

The ratios are against llama.cpp's figures measured in the same run where they are given
(--llama-bench GGUF=FILE, --llama-batched GGUF=FILE: its tools' output for that file, markdown or
JSON; bench/llama_peer.py), else against the ANCHORS below; the last column says which:

    llama-bench -m M -ngl 99 -fa 1 -p 512 -n 128 -r 3 -o json > lb.json
    llama-batched-bench -m M -ngl 99 -fa on -c 40000 -npp 128 -ntg 128 -npl 1,64 > lbb.md
    python bench/gpu_decode.py --model M --concurrency 1 64 --llama-bench M=lb.json --llama-batched M=lbb.md
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
# bench/'s own modules (roofline, llama_peer) also when this file is loaded from elsewhere (tests)
sys.path.insert(1, str(Path(__file__).resolve().parent))

from strata import _ffi  # noqa: E402
from strata.config import EngineConfig  # noqa: E402
from strata.engine.engine import Engine  # noqa: E402
from strata.engine.sampling import SamplingParams  # noqa: E402

from llama_peer import Peer, PeerError, load_peers  # noqa: E402  (bench/, beside this script)
from roofline import H200_COPY_TBS, card_roofline, describe  # noqa: E402

# (shape, type) -> (pp512, tg128) of llama.cpp's `llama-bench -p 512 -n 128 -r 3` on one H200 (flash attention,
# all layers on the GPU): Q4_0 and Q4_K_M from the 2026-12-02 night run, Q8_0 / F16 from 2026-11-29; concurrent
# figures (llama-batched-bench S_TG, 128 + 128 tokens per sequence, 2026-12-02 night) for 8b Q4_0 only.
ANCHORS = {
    ("135m", "Q4_0"): (52493, 948), ("135m", "Q8_0"): (52646, 920), ("135m", "F16"): (86570, 978),
    ("1b", "Q4_0"): (42960, 1091), ("1b", "Q8_0"): (48011, 871), ("1b", "F16"): (70375, 859),
    ("8b", "Q4_0"): (11120, 350), ("8b", "Q8_0"): (11012, 256), ("8b", "F16"): (23019, 214),
    ("8b", "Q4_K_M"): (9216, 286), ("135m", "Q4_1"): (49126, 949),   # 135m Q4_1: the default model, --default-model
}
ANCHOR_CONCURRENT = {("8b", "Q4_0"): {1: 341, 4: 970, 16: 2290, 64: 5271}}


async def timed_requests(engine: Engine, prompts: list[list[int]], max_tokens: int) -> dict:
    """Runs the prompts concurrently; returns first/last token times and token counts."""
    params = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
    out = {"first": [], "done": [], "tokens": [], "times": []}
    async with anyio.create_task_group() as tg:
        await tg.start(engine.run)
        start = time.perf_counter()

        async def one(prompt):
            stream = engine.submit(prompt, params)
            times = []
            async for event in stream:
                if event.token_ids:
                    times.append(time.perf_counter())
            out["first"].append(times[0] - start)
            out["done"].append(times[-1] - start)
            out["tokens"].append(len(times))
            out["times"].append(times)

        async with anyio.create_task_group() as clients:
            for p in prompts:
                clients.start_soon(one, p)
        tg.cancel_scope.cancel()
    return out


def decode_rate(result: dict) -> float:
    """Generated tokens per second once every prompt is done (llama-batched-bench's S_TG)."""
    all_started = max(times[0] for times in result["times"])
    last = max(times[-1] for times in result["times"])
    after = sum(sum(1 for t in times if t > all_started) for times in result["times"])
    return after / (last - all_started) if last > all_started else float("nan")


def bench_model(path: str, device: str, concurrency: list[int], devices: tuple[str, ...] | None = None,
                layer_split: tuple[int, ...] | None = None, batch_groups: int = 1, depths: tuple[int, ...] = ()) -> dict:
    from strata.models.loader import load_model

    if devices:
        from strata.models.layer_split import load_split_model

        device = devices[0]
        ctx = _ffi.Context(device)
        model = load_split_model(path, ctx, devices[1:], layer_split)
    else:
        ctx = _ffi.Context(device)
        model = load_model(path, ctx)
    spec = model.spec
    weight_bytes = model.weights.nbytes
    results = {"weight_bytes": weight_bytes}
    rng_ids = [(i * 7919 + 13) % 30000 + 100 for i in range(max([4096, *depths]))]

    def engine(batch, chunk, ctx=1024):
        # No prefix cache: the warm-up sends the same prompt, and a cache hit would time no prefill at all.
        cfg = EngineConfig(model=path, device=device, batch=batch, chunk=chunk, ctx=ctx, devices=devices,
                           layer_split=layer_split, batch_groups=min(batch_groups, batch),
                           prefix_cache=False).resolve("cuda", spec.ctx_train)
        return Engine(ctx, model, cfg)

    e = engine(1, 512)
    anyio.run(timed_requests, e, [rng_ids[:512]], 4)        # warm-up: graphs, caches
    r = anyio.run(timed_requests, e, [rng_ids[:512]], 1)
    results["pp512"] = 512 / r["first"][0]
    r = anyio.run(timed_requests, e, [rng_ids[:32]], 129)
    t = r["times"][0]
    results["tg128"] = 128 / (t[-1] - t[0])
    e.runner.close()
    # tg128 after a context of d tokens (llama-bench -n 128 -d d): one d-token prompt, then 128 tokens timed.
    results["depth"] = {}
    for d in depths:
        e = engine(1, 512, ctx=d + 256)
        anyio.run(timed_requests, e, [rng_ids[:d]], 4)       # warm-up: graphs at this context
        r = anyio.run(timed_requests, e, [rng_ids[:d]], 129)
        t = r["times"][0]
        results["depth"][d] = 128 / (t[-1] - t[0])
        e.runner.close()
    results["concurrent"] = {}
    for n in concurrency:
        e = engine(n, 512)
        prompts = [rng_ids[i * 17: i * 17 + 128] for i in range(n)]
        anyio.run(timed_requests, e, prompts, 4)           # warm-up (captures the graph buckets)
        r = anyio.run(timed_requests, e, prompts, 128)
        results["concurrent"][n] = decode_rate(r)
        e.runner.close()
    model.close()
    ctx.close()
    return results


def ensure_synth(shape: str, dtype: str, directory: Path) -> Path:
    from strata.synth.writer import write_llama_gguf

    path = directory / f"synth-{shape}-{dtype}.gguf"
    if not path.exists():
        directory.mkdir(parents=True, exist_ok=True)
        write_llama_gguf(path, shape, dtype, seed=0, num_threads=os.cpu_count() or 4)
    return path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--shapes", nargs="*", default=["135m", "1b", "8b"])
    ap.add_argument("--types", nargs="*", default=["Q4_0", "Q8_0", "F16"],
                    help="strata synth types, also the mixes Q4_K_M Q5_K_M IQ4_XS Q3_K_M Q2_K IQ3_S")
    ap.add_argument("--concurrency", nargs="*", type=int, default=[1, 4, 16, 64])
    ap.add_argument("--synth-dir", default="/tmp/strata-synth")
    ap.add_argument("--default-model", action="store_true", help="also the real default model (Q4_1)")
    ap.add_argument("--model", action="append", default=[], metavar="GGUF",
                    help="also this GGUF file (repeatable; --shapes with no values benches only these)")
    ap.add_argument("--llama-bench", action="append", default=[], metavar="GGUF=FILE",
                    help="llama-bench's output (markdown or -o json) for that GGUF, measured in this run: its pp512 "
                         "and tg128 replace the anchors in the ratios (repeatable, one file per model)")
    ap.add_argument("--llama-batched", action="append", default=[], metavar="GGUF=FILE",
                    help="llama-batched-bench's output (markdown or jsonl; -npp 128 -ntg 128) for that GGUF: its "
                         "S_TG per number of sequences replaces the anchors (repeatable)")
    ap.add_argument("--depth", nargs="*", type=int, default=[], metavar="N",
                    help="also batch-1 decode of 128 tokens after an N-token context (tg128 @ dN, llama-bench -d N), "
                         "in a table of its own")
    ap.add_argument("--json", default=None, help="write the raw figures here")
    ap.add_argument("--devices", default=None, help="split the model by layers over these, e.g. cuda:0,cuda:1")
    ap.add_argument("--layer-split", default=None, help="with --devices: first layer of each later device, e.g. 16")
    ap.add_argument("--batch-groups", type=int, default=1,
                    help="with --devices: slots in N groups pipelined over the stages (capped at each batch)")
    ap.add_argument("--roofline-tbs", type=float, default=None,
                    help=f"the memory roofline in TB/s for the %% column (default: measured on the device; "
                         f"{H200_COPY_TBS} reproduces the tables before 2026-12-05's fourth session)")
    args = ap.parse_args(argv)
    if any(d < 1 for d in args.depth):
        ap.error("--depth: contexts of at least 1 token")
    try:
        peers = load_peers(args.llama_bench, args.llama_batched)
    except PeerError as exc:
        ap.error(str(exc))
    devices = tuple(args.devices.split(",")) if args.devices else None
    layer_split = tuple(int(b) for b in args.layer_split.split(",")) if args.layer_split else None
    try:
        card, roofline = card_roofline(devices[0] if devices else args.device, args.roofline_tbs)
    except ValueError as exc:
        ap.error(str(exc))
    print(describe(card, roofline, args.roofline_tbs is not None), flush=True)

    rows = []
    todo = [(s, t, None) for s in args.shapes for t in args.types]
    if args.default_model:
        from strata.model_store import resolve_model

        todo.insert(0, ("135m*", "Q4_1", str(resolve_model("smollm2-135m"))))
    for i, model in enumerate(args.model):
        path = Path(model).expanduser()
        if not path.is_file():
            ap.error(f"--model {model}: no such file")
        todo.insert(i, (path.stem, "file", str(path)))
    for shape, dtype, path in todo:
        path = path or str(ensure_synth(shape, dtype, Path(args.synth_dir)))
        t0 = time.time()
        res = bench_model(path, args.device, args.concurrency, devices, layer_split, args.batch_groups,
                          tuple(args.depth))
        where = args.devices or args.device
        res.update(shape=shape, dtype=dtype, seconds=time.time() - t0, path=str(Path(path).resolve()),
                   devices=f"{where} x{args.batch_groups} groups" if devices and args.batch_groups > 1 else where)
        rows.append(res)
        print(f"# {shape} {dtype}: {json.dumps({k: v for k, v in res.items() if k != 'weight_bytes'})}",
              flush=True)
    for gguf in sorted(set(peers) - {r["path"] for r in rows}):
        print(f"# warning: llama.cpp's figures for {gguf} match no model benched here", file=sys.stderr)
    for r in rows:
        peer = peers.get(r["path"])
        if peer:
            r["llama"] = {"tests": peer.tests, "s_tg": peer.s_tg}
    print_table(rows, args.concurrency, peers, roofline)
    if args.depth:
        print_depth_table(rows, args.depth, peers)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


def _ratio(value: float, peer: float | None, show_peer: bool) -> str:
    if not peer:
        return ""
    return f" ({peer:,.0f}, {value / peer:.2f}x)" if show_peer else f" ({value / peer:.2f}x)"


def print_table(rows, concurrency, peers: dict[str, Peer] | None = None, roofline: float = H200_COPY_TBS * 1e12) -> None:
    """One row per model: Strata's figures, each with its ratio to llama.cpp's (and llama.cpp's own figure
    where it was measured in this run); tg128's share of `roofline` (bytes/s) reading the weights once a token."""
    peers = peers or {}
    head = "| model | devices | type | MiB | pp512 tok/s (x llama.cpp) | tg128 tok/s (% roofline, x llama.cpp) |"
    head += "".join(f" {n} seq tok/s |" for n in concurrency) + " llama.cpp figures |"
    print(head)
    print("|" + " --- |" * (7 + len(concurrency)))
    for r in rows:
        peer = peers.get(r.get("path", ""))
        if peer:
            pp_a, tg_a = (peer.tests.get(t, (None,))[0] for t in ("pp512", "tg128"))
            conc_a, source = peer.s_tg, "this run"
        else:
            key = (r["shape"].rstrip("*"), r["dtype"])
            pp_a, tg_a = ANCHORS.get(key, (None, None))
            conc_a = ANCHOR_CONCURRENT.get(key, {})
            source = "anchors" if pp_a or conc_a else "none"
        roof = roofline / r["weight_bytes"]
        pp = f"{r['pp512']:,.0f}" + _ratio(r["pp512"], pp_a, bool(peer))
        tg_vs = ""
        if tg_a:
            tg_vs = f", {tg_a:,.0f}, {r['tg128'] / tg_a:.2f}x" if peer else f", {r['tg128'] / tg_a:.2f}x"
        tg = f"{r['tg128']:,.0f} ({100 * r['tg128'] / roof:.0f}%{tg_vs})"
        conc = ""
        for n in concurrency:
            v = r["concurrent"].get(n, float("nan"))
            conc += f" {v:,.0f}" + _ratio(v, conc_a.get(n), bool(peer)) + " |"
        print(f"| {r['shape']} | {r['devices']} | {r['dtype']} | {r['weight_bytes'] / 2**20:,.0f} | {pp} | {tg} |{conc}"
              f" {source} |")


def print_depth_table(rows, depths, peers: dict[str, Peer] | None = None) -> None:
    """Batch-1 decode tok/s after each context of `depths` tokens, with llama.cpp's tg128 @ dN from this run
    where given (no anchors: none were measured)."""
    peers = peers or {}
    print()
    print("| model | devices | type |" + "".join(f" tg128 @ d{d} tok/s (x llama.cpp) |" for d in depths))
    print("|" + " --- |" * (3 + len(depths)))
    for r in rows:
        peer = peers.get(r.get("path", ""))
        cells = ""
        for d in depths:
            v = r.get("depth", {}).get(d, float("nan"))
            ref = peer.tests.get(f"tg128@d{d}", (None,))[0] if peer else None
            cells += f" {v:,.0f}" + _ratio(v, ref, bool(peer)) + " |"
        print(f"| {r['shape']} | {r['devices']} | {r['dtype']} |{cells}")


if __name__ == "__main__":
    sys.exit(main())

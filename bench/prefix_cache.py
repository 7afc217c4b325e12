"""Multi-turn chats with the prompt cache off, then on: time to first token per turn and prompt tokens served from cache.

The load generator's conversation mode (strata/loadgen, `strata bench --turns`) runs --conversations chats
side by side, each --turns turns long (turn t sends the conversation so far plus a follow-up question),
twice on one server: first with `"cache_prompt": false` on every request, then with `"cache_prompt": true`.
Strata and llama-server both read that field, so the script compares them on the same GGUF. It prints one
row per turn (TTFT p50 off / on, cached and prompt tokens with the cache on) and how many streams were the
same with the cache on as off — all of them on Strata, which promises that caching never changes a token
(docs/kv_pool.md). Greedy by default; `--sampling mix` adds seeded requests.

    python3 bench/prefix_cache.py --url http://127.0.0.1:8080 --conversations 8 --turns 6 --max-tokens 64
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # run from a checkout without installing

from strata.loadgen.report import summarize  # noqa: E402
from strata.loadgen.runner import Target, discover_model, run_load  # noqa: E402
from strata.loadgen.workload import SAMPLING_MODES, Workload  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8080")
    parser.add_argument("--model", default=None, help="model id (default: the first of /v1/models)")
    parser.add_argument("--conversations", type=int, default=4)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--prompt-tokens", type=int, default=400, help="approximate length of the first turn")
    parser.add_argument("--sampling", choices=SAMPLING_MODES, default="greedy")
    args = parser.parse_args()
    target = Target(args.url)
    model = args.model or asyncio.run(discover_model(target))
    runs = {}
    for cache in (False, True):
        workload = Workload(model=model, num_requests=args.conversations, prompt_tokens=(args.prompt_tokens,),
                            max_tokens=args.max_tokens, sampling=args.sampling, turns=args.turns, cache_prompt=cache)
        runs[cache] = asyncio.run(run_load(target, workload, args.conversations, stagger_s=0.0, solo_check=False))
    off, on = summarize(runs[False]), summarize(runs[True])
    print(f"{args.conversations} conversations x {args.turns} turns, {args.max_tokens} tokens an answer, "
          f"{args.sampling}, {target.v1}, model {model}")
    print("| turn | TTFT p50 off (ms) | TTFT p50 on (ms) | cached / prompt tokens (on) |")
    print("| ---: | ---: | ---: | ---: |")
    for a, b in zip(off["per_turn"], on["per_turn"]):
        cached = "-" if b["cached_tokens"] is None else f"{b['cached_tokens']:,}"
        print(f"| {a['turn']} | {a['ttft_p50_ms']} | {b['ttft_p50_ms']} | {cached} / {b['prompt_tokens']:,} |")
    streams_off = {(r.index, r.turn): r for r in runs[False].concurrent if r.ok}
    pairs = [(r, streams_off[r.index, r.turn]) for r in runs[True].concurrent if r.ok and (r.index, r.turn) in streams_off]
    same = sum(a.same_output(b) for a, b in pairs)
    print(f"streams identical with the cache on and off: {same} / {len(pairs)}; "
          f"errors off / on: {off['errors']} / {on['errors']}")
    return 1 if off["errors"] or on["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())

"""The command line of the load generator, shared by `strata bench` and `bench/serve_load.py`.

    strata bench --url http://127.0.0.1:8080 --clients 64 --max-tokens 128
    python bench/serve_load.py --url http://127.0.0.1:8081 --clients 64 --json
    strata bench --clients 8 --turns 6 --cache-prompt off     # multi-turn chats, prompt cache off

Prints a table (or `--json`); exits 1 when a request failed, and with
`--require-equal` 3 when a stream differed from its solo rerun.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

import httpx

from . import server_cpu
from .report import format_table, summarize
from .runner import Target, discover_model, run_load
from .workload import SAMPLING_MODES, Workload

DESCRIPTION = ("N concurrent streaming clients against an OpenAI-compatible server (Strata, llama-server, "
               "vLLM, ...): aggregate tokens/s, TTFT and inter-token latency p50/p99, and how many streams "
               "equal the same request rerun alone (token ids where the server returns them, text otherwise); "
               "against Strata also its engine steps meanwhile (decode-only and with prompt tokens: how many, "
               "their mean time and rows, from its /metrics).")


def configure_parser(parser: argparse.ArgumentParser) -> None:
    from strata import env

    parser.add_argument("--url", default="http://127.0.0.1:8080",
                        help="server base URL, with or without /v1 (default: http://127.0.0.1:8080)")
    parser.add_argument("--api-key", default=env.get("STRATA_API_KEY"),
                        help="sent as 'Authorization: Bearer KEY' (default: $STRATA_API_KEY)")
    parser.add_argument("--model", default=None, help="model id to request (default: the first of /v1/models)")
    parser.add_argument("--clients", type=int, default=8, help="concurrent streaming clients (default: 8)")
    parser.add_argument("--requests", type=int, default=None,
                        help="requests in all, shared by the clients (default: one per client)")
    parser.add_argument("--prompt-tokens", default="8,64,384,1200",
                        help="approximate prompt lengths in tokens, cycled over requests (default: 8,64,384,1200)")
    parser.add_argument("--max-tokens", type=int, default=64, help="tokens per request (default: 64)")
    parser.add_argument("--sampling", choices=SAMPLING_MODES, default="mix",
                        help="greedy, seeded (temperature/top-p/top-k with a seed per request), or mix (default)")
    parser.add_argument("--seed", type=int, default=1234, help="base of the prompts and per-request seeds")
    parser.add_argument("--stagger-ms", type=float, default=50.0,
                        help="client i starts i x this many ms after the first (default: 50)")
    parser.add_argument("--no-ignore-eos", action="store_true",
                        help="let requests stop at end-of-sequence (default: ignore_eos, every request "
                             "generates --max-tokens)")
    parser.add_argument("--no-token-ids", action="store_true",
                        help="don't ask for return_token_ids; compare streams by text")
    parser.add_argument("--turns", type=int, default=1,
                        help="turns per conversation: turn t sends the conversation so far (the server's "
                             "earlier replies) plus a follow-up question; a table per turn shows TTFT and "
                             "cached prompt tokens (default: 1, single requests)")
    parser.add_argument("--cache-prompt", choices=("on", "off"), default=None,
                        help="send \"cache_prompt\": true/false on every request (Strata and llama-server "
                             "read it); default: not sent, the server's default applies")
    parser.add_argument("--no-solo", action="store_true", help="skip rerunning each request alone")
    parser.add_argument("--require-equal", action="store_true",
                        help="exit 3 when any stream differs from its solo rerun")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per request (default: 600)")
    parser.add_argument("--server-pid", type=int, default=None,
                        help="a local server's process id: also report its CPU time per generated token, on its "
                             "main thread (the event loop) and on all its threads (Linux /proc; measured over "
                             "the concurrent phase, the one whose tokens it divides by)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON instead of a table")


def run(args: argparse.Namespace) -> int:
    try:
        prompt_tokens = tuple(int(p) for p in args.prompt_tokens.split(",") if p.strip())
        target = Target(args.url, args.api_key, args.timeout)
        model = args.model or asyncio.run(discover_model(target))
        workload = Workload(model=model, num_requests=args.requests or args.clients, prompt_tokens=prompt_tokens,
                            max_tokens=args.max_tokens, sampling=args.sampling, seed=args.seed,
                            ignore_eos=not args.no_ignore_eos, token_ids=not args.no_token_ids, turns=args.turns,
                            cache_prompt=None if args.cache_prompt is None else args.cache_prompt == "on")
        load = asyncio.run(run_load(target, workload, args.clients, args.stagger_ms / 1000, not args.no_solo,
                                    server_pid=args.server_pid))
    except (ValueError, RuntimeError, OSError, httpx.HTTPError) as exc:
        print(f"error: {args.url}: {exc}", file=sys.stderr)
        return 2
    summary = {"url": target.v1, "model": model, **summarize(load)}
    if load.cpu is not None:
        summary.update(server_cpu.per_token_us(*load.cpu, summary["generated_tokens"]))
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(format_table(summary, title=f"{target.v1}  model {model}"))
    if summary["errors"] or summary.get("solo_errors"):
        return 1
    if args.require_equal and summary.get("differ"):
        return 3
    return 0


def main(argv: list[str] | None = None, prog: str = "strata bench") -> int:
    parser = argparse.ArgumentParser(prog=prog, description=DESCRIPTION)
    configure_parser(parser)
    return run(parser.parse_args(argv))

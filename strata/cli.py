"""The `strata` command: serve, generate, models, synth, bench, top.

    strata serve                      # the default model on :8080, the GPU when present
    strata generate --chat --prompt "What is the capital of France?" --temperature 0
    strata models fetch               # the default model into the cache
    strata synth --shape 8b --dtype Q4_0 --out /tmp/8b.gguf
    strata bench --url http://127.0.0.1:8080 --clients 16
    strata top                        # live slots, queue, tokens/s of the server on :8080
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from . import env

EPILOG = "environment variables:\n" + "{env}" + "\n\nRun `strata COMMAND --help` for a command's flags."


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["models"]:          # its own parser: argparse's REMAINDER would swallow `models --help`
        from . import model_store

        return model_store.main(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    return args.handler(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="strata", description="Strata: an LLM server whose answers never depend on who else is served.",
        epilog=EPILOG.format(env=env.describe()), formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    serve = commands.add_parser("serve", help="serve the OpenAI-compatible HTTP API",
                                description="Serve a model over an OpenAI-compatible HTTP API (hypercorn + Quart).",
                                epilog="environment variables:\n" + env.describe(),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_engine_flags(serve)
    add_serve_flags(serve)
    serve.set_defaults(handler=_serve)

    generate = commands.add_parser("generate", help="generate text for one prompt, streamed to stdout",
                                   description="Generate text for one prompt and stream it to stdout.")
    add_engine_flags(generate)
    add_generate_flags(generate)
    generate.set_defaults(handler=_generate)

    models = commands.add_parser("models", help="list, fetch, remove or locate cached models (aliases, Hugging Face names)", add_help=False)
    models.add_argument("rest", nargs=argparse.REMAINDER)
    models.set_defaults(handler=_models)

    from . import synth

    synth_parser = commands.add_parser("synth", help="write a random-weight GGUF of a llama shape",
                                       description="Write a random-weight llama GGUF (for benchmarks and tests).",
                                       epilog=synth.describe_shapes(),
                                       formatter_class=argparse.RawDescriptionHelpFormatter)
    synth.configure_parser(synth_parser)
    synth_parser.set_defaults(handler=synth.run)

    from .loadgen import cli as loadgen_cli

    bench = commands.add_parser("bench", help="load-test a running OpenAI-compatible server",
                                description=loadgen_cli.DESCRIPTION)
    loadgen_cli.configure_parser(bench)
    bench.set_defaults(handler=loadgen_cli.run)

    from .top import cli as top_cli

    top = commands.add_parser("top", help="watch a running server's slots, queue and speed",
                              description=top_cli.DESCRIPTION)
    top_cli.configure_parser(top)
    top.set_defaults(handler=top_cli.run)
    return parser


def add_engine_flags(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("model and engine")
    g.add_argument("--model", default=None,
                   help="a GGUF file, a Hugging Face checkpoint directory, an alias (default: smollm2-135m), or a "
                        "Hugging Face repository: org/name or org/name:Q4_K_M (fetched into the hub cache)")
    g.add_argument("--hf-repo", default=None, help="a Hugging Face repository (org/name) to serve, with --hf-file")
    g.add_argument("--hf-file", default=None, help="the GGUF file of --hf-repo to serve")
    g.add_argument("--device", default=None,
                   help="cpu, cuda or cuda:N (default: $STRATA_DEVICE, else the GPU when present, else cpu)")
    g.add_argument("--devices", type=_device_list, default=None,
                   help="split the model by layers over these devices, e.g. cuda:0,cuda:1 (or cpu,cpu): each "
                        "holds only its layers' weights and KV; tokens are the same as on one device "
                        "(default: off, one --device)")
    g.add_argument("--layer-split", type=_int_list, default=None,
                   help="with --devices: the first layer of each device after the first, e.g. 12,24 for three "
                        "devices (default: balanced by weight bytes)")
    g.add_argument("--batch-groups", type=int, default=1,
                   help="with --devices: the slots in N groups pipelined over the stages (while one group runs "
                        "on a stage, the next runs on the stage before); tokens unchanged; steps then run "
                        "eagerly (default: 1, no pipelining)")
    g.add_argument("--batch", type=int, default=None,
                   help="slots: requests decoded together (default: 4 on cpu, 32 on cuda)")
    g.add_argument("--ctx", type=int, default=None,
                   help="tokens per slot (default: the model's context, at most 4096 on cpu, 8192 on cuda)")
    g.add_argument("--chunk", type=int, default=None,
                   help="prompt tokens read per step, less the step's decode rows so that its rows end on a multiple of "
                        "the chunk (STRATA_PREFILL_ALIGN); longer prompts resume next step (default: 128 cpu, 512 cuda)")
    g.add_argument("--max-queue", type=int, default=256,
                   help="requests that may wait for a slot before new ones get 503 (default: 256)")
    g.add_argument("--threads", type=int, default=None,
                   help="CPU backend worker threads (default: $STRATA_NUM_THREADS, else one per core)")
    g.add_argument("--no-graphs", action="store_true", help="run decode steps eagerly instead of as graphs")
    g.add_argument("--kv-pages", type=int, default=None,
                   help="KV pool size in pages of 64 tokens, shared by all slots; a request reserves the pages "
                        "of its prompt + max_tokens at admission and waits while the pool is short "
                        "(default: batch x ctx / 64, as much as every slot full, or what fits in 85%% of the "
                        "memory left after the model when that is less; the server logs the choice)")
    g.add_argument("--kv-dtype", default="f16", choices=["f16", "int8"],
                   help="how the KV pool stores keys and values: f16, or int8 with one float32 scale per "
                        "token and KV head (about half the memory; exact and batch-invariant either way, "
                        "docs/kv_pool.md)")
    g.add_argument("--no-prefix-cache", action="store_true",
                   help="do not reuse the KV pages of earlier prompts (on by default; the tokens are "
                        "bit-identical either way, docs/kv_pool.md)")
    g.add_argument("--host-cache", type=float, default=None, metavar="GIB",
                   help="host memory (GiB) that cached KV pages evicted from the device spill to and come back "
                        "from on a prefix hit, oldest dropped first (page-locked on cuda, allocated as pages "
                        "spill; 0 = off; default: 8, at most a quarter of the machine's RAM)")
    g.add_argument("--draft", default=None, choices=["suffix", "model", "mtp"],
                   help="speculative decoding (the tokens never change, only the speed): suffix = look the "
                        "continuation up in the request's own prompt and output; model = a draft model "
                        "(--draft-model); mtp = the model's multi-token-prediction layers (default: off)")
    g.add_argument("--draft-max", type=int, default=None,
                   help="most tokens drafted per request and step, 1-32 (default: 4 on cpu, 8 on cuda)")
    g.add_argument("--draft-model", default=None,
                   help="the draft model of --draft model: a GGUF or alias with the same tokenizer")
    g.add_argument("--draft-vocab", type=int, default=None,
                   help="--draft mtp: draft only among the first N token ids (BPE order, most frequent "
                        "first); a smaller, faster head (default: the whole vocabulary)")


def add_serve_flags(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("server")
    g.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    g.add_argument("--port", type=int, default=8080, help="port to listen on (default: 8080)")
    g.add_argument("--api-key", default=None,
                   help="require 'Authorization: Bearer KEY' on /v1 and admin routes (default: $STRATA_API_KEY)")
    g.add_argument("--log-level", default=None, choices=["debug", "info", "warning", "error"],
                   help="log verbosity (default: $STRATA_LOG_LEVEL, else info)")
    g.add_argument("--served-model-name", default=None,
                   help="the model id clients use (default: the --model value or the alias)")
    g.add_argument("--media-dir", default=None,
                   help="directory image_url file paths may read from (default: none; $STRATA_MEDIA_DIR)")
    g.add_argument("--allow-remote-media", action="store_true",
                   help="let image_url fetch http(s) URLs (default: off; $STRATA_ALLOW_REMOTE_MEDIA)")
    g.add_argument("--reasoning-format", default="split", choices=["split", "none"],
                   help="split: text inside <think>...</think> goes to reasoning_content; none: it stays in "
                        "content (default: split)")
    g.add_argument("--sse-ping-interval", type=float, default=15.0,
                   help="seconds without a token after which a streamed answer gets an SSE ': ping' comment "
                        "(queued, long prefill); 0 = never (default: 15)")
    g.add_argument("--cors-origin", action="append", default=[],
                   help="an origin browsers may call the API from (repeatable; '*' for any); default: no "
                        "CORS headers")
    g.add_argument("--drain-timeout", type=float, default=30.0,
                   help="on SIGTERM/SIGINT: /health turns 503, new requests get 503 with Retry-After, and the "
                        "requests in flight may finish for up to this many seconds before they are ended; a "
                        "second signal ends them at once; 0 = end them at once (default: 30)")
    g.add_argument("--slot-save-path", default=None,
                   help="directory where POST /slots/{id}?action=save|restore&filename=NAME writes and reads a "
                        "slot's cached prefix (default: off)")
    g.add_argument("--allow-private-media", action="store_true",
                   help="let those fetches reach loopback, private, link-local and other non-public addresses "
                        "(default: off, only public addresses; $STRATA_ALLOW_PRIVATE_MEDIA)")


def add_generate_flags(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("generation")
    g.add_argument("--prompt", required=True, help="the prompt text (the user message with --chat)")
    g.add_argument("--chat", action="store_true", help="wrap the prompt in the model's chat template")
    g.add_argument("--system", default=None, help="a system message (with --chat)")
    g.add_argument("--max-tokens", type=int, default=256, help="tokens to generate at most (default: 256)")
    g.add_argument("--temperature", type=float, default=0.8, help="0 = greedy (default: 0.8)")
    g.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling mass (default: 1, off)")
    g.add_argument("--top-k", type=int, default=0, help="keep the k most likely tokens (default: 0, off)")
    g.add_argument("--min-p", type=float, default=0.0, help="drop tokens below min-p x the top probability")
    g.add_argument("--seed", type=int, default=None, help="seed for sampling (default: random)")
    g.add_argument("--stop", action="append", default=[], help="a stop string (repeatable)")


def engine_config(args):
    from .config import EngineConfig
    from .model_store import model_from_flags

    # A hub name becomes its cached path here (fetched when missing); it stays the served model name.
    args.model, hub_name = model_from_flags(args.model, args.hf_repo, args.hf_file)
    if hub_name and getattr(args, "served_model_name", "") is None:
        args.served_model_name = hub_name
    threads = args.threads if args.threads is not None else int(env.get("STRATA_NUM_THREADS") or 0)
    return EngineConfig(model=args.model or "smollm2-135m", device=args.device, batch=args.batch, ctx=args.ctx,
                        chunk=args.chunk, max_queue=args.max_queue, num_threads=threads,
                        graphs=not args.no_graphs, draft=args.draft, draft_max=args.draft_max,
                        draft_model=args.draft_model, draft_vocab=args.draft_vocab, kv_pages=args.kv_pages,
                        prefix_cache=not args.no_prefix_cache, kv_dtype=args.kv_dtype,
                        host_cache=_host_cache(getattr(args, "host_cache", None)), devices=args.devices,
                        layer_split=args.layer_split, batch_groups=args.batch_groups)


def _device_list(text: str) -> tuple[str, ...]:
    devices = tuple(d.strip() for d in text.split(","))
    if len(devices) < 2 or not all(devices):
        raise argparse.ArgumentTypeError(f"give two or more devices separated by commas, e.g. cuda:0,cuda:1 "
                                         f"(got {text!r})")
    return devices


def _int_list(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"give layer numbers separated by commas, e.g. 12,24 (got {text!r})") from None


def _host_cache(gib: float | None) -> float:
    """--host-cache in GiB; its default is 8 (the seed system's), at most a quarter of physical memory."""
    if gib is not None:
        return gib
    try:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0.0
    return round(min(8.0, ram / 4 / (1 << 30)), 2)


def _generate(args) -> int:
    from .config import ConfigError
    from .engine.sampling import InvalidRequest, SamplingParams
    from .llm import LLM

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        params = SamplingParams(max_tokens=args.max_tokens, temperature=args.temperature, top_p=args.top_p,
                                top_k=args.top_k, min_p=args.min_p, seed=args.seed, stop=tuple(args.stop))
        params.validated()
        config = engine_config(args)
        settings = {k: v for k, v in config.__dict__.items() if k != "model"}
        if settings["batch"] is None:
            settings["batch"] = 1
        with LLM(config.model, **settings) as llm:
            if args.chat:
                messages = ([{"role": "system", "content": args.system}] if args.system else [])
                ids = llm.render_chat(messages + [{"role": "user", "content": args.prompt}])
            else:
                ids = llm.encode_prompt(args.prompt)
            for event in llm.stream(ids, params):
                sys.stdout.write(event.text)
                sys.stdout.flush()
                if event.error:
                    print(f"\nerror: {event.error}", file=sys.stderr)
                    return 1
            sys.stdout.write("\n")
        return 0
    except (InvalidRequest, ConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # model files, devices: say what failed, no traceback for users
        if logging.getLogger().isEnabledFor(logging.DEBUG):
            raise
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


def _serve(args) -> int:
    # The command sits above both packages: strata serve reaches the server package through
    # server.serve.serve only (library code under strata/ never imports server).
    from server.serve import serve

    from .model_store import ModelStoreError

    try:
        config = engine_config(args)
    except ModelStoreError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return serve(args, config)


def _models(args) -> int:
    from . import model_store

    return model_store.main(args.rest)


if __name__ == "__main__":
    sys.exit(main())

"""`strata synth`: write a random-weight llama GGUF of a benchmark shape, fast.

    strata synth --shape 8b --dtype Q4_0 --out /models/llama8b-q4_0.gguf [--seed N] [--pure]

Shapes are the benchmark shapes of docs/design.md (135m, 1b, 8b) plus `tiny`; types are
every weight type libstrata supports, mixed as llama-quantize mixes them
(strata/synth/plan.py). The lead's CLI wires `configure_parser` and `run` in
as the `synth` subcommand; `main` runs it standalone (python -m strata.synth).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from strata.synth.plan import FILE_TYPES
from strata.synth.shapes import OVERRIDES, PRESETS, SynthError
from strata.synth.writer import write_llama_gguf

_OVERRIDE_HELP = {
    "layers": "number of transformer blocks",
    "hidden": "embedding width (a multiple of --heads; of 32 for quantized types)",
    "ffn": "feed-forward width",
    "heads": "attention heads",
    "kv_heads": "key/value heads (divides --heads)",
    "vocab": "vocabulary size (the SmolLM2 tokenizer is cut or padded to it)",
    "ctx": "context length recorded in the file (default 8192)",
}


def configure_parser(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Adds synth's arguments to `parser` (a standalone parser or the `synth` subparser)."""
    parser.add_argument("--shape", required=True, type=str.lower, choices=list(PRESETS),
                        help="model shape: " + ", ".join(PRESETS))
    parser.add_argument("--dtype", required=True, type=str.upper, choices=list(FILE_TYPES),
                        help="file type: " + ", ".join(FILE_TYPES))
    parser.add_argument("--out", required=True, metavar="PATH", help="GGUF file to write (replaced if present)")
    parser.add_argument("--seed", type=_non_negative, default=0, help="random seed; same seed, same bytes (default 0)")
    parser.add_argument("--pure", action="store_true",
                        help="use --dtype for every matrix (no Q6_K output matrix, no fallbacks); norms stay F32")
    parser.add_argument("--tokenizer-from", metavar="PATH",
                        help="GGUF whose tokenizer to copy (default: $STRATA_SYNTH_TOKENIZER, else SmolLM2-135M-Instruct from the model store/cache)")
    parser.add_argument("--threads", type=_positive, default=None, help="generator threads (default: one per core)")
    parser.add_argument("--quiet", action="store_true", help="print only the summary")
    overrides = parser.add_argument_group("shape overrides")
    for key in OVERRIDES:
        overrides.add_argument("--" + key.replace("_", "-"), dest=key, type=_positive, metavar="N",
                               help=_OVERRIDE_HELP[key])
    return parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="strata synth", description=__doc__.split("\n\n")[0],
                                     epilog=describe_shapes(), formatter_class=argparse.RawDescriptionHelpFormatter)
    return configure_parser(parser)


def describe_shapes() -> str:
    """One line per preset shape, for --help."""
    lines = ["shapes (vocab 49152, SmolLM2's tokenizer; weights std 0.02, norms 1.0):"]
    for shape in PRESETS.values():
        lines.append(f"  {shape.name:<5} {shape.num_layers} layers, hidden {shape.hidden_size}, "
                     f"{shape.num_heads} heads / {shape.num_kv_heads} KV (head dim {shape.head_dim}), "
                     f"ffn {shape.ffn_size}, rope base {shape.rope_base:g}, "
                     f"{'tied' if shape.tied_embeddings else 'untied'} embeddings")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Runs a parsed `synth` command; returns the exit status."""
    progress = None if args.quiet else (lambda line: print(line, file=sys.stderr, flush=True))
    try:
        report = write_llama_gguf(
            args.out, args.shape, args.dtype, args.seed, pure=args.pure, tokenizer_from=args.tokenizer_from,
            num_threads=args.threads, progress=progress, **{key: getattr(args, key) for key in OVERRIDES})
    except (SynthError, OSError) as exc:
        print(f"strata synth: error: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, SynthError) else 1
    print(report.summary())
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser().parse_args(argv))


def _positive(text: str) -> int:
    value = _integer(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def _non_negative(text: str) -> int:
    value = _integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a non-negative integer, got {text!r}")
    return value


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None


if __name__ == "__main__":
    sys.exit(main())

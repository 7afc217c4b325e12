"""Speculative decoding speed: tokens/s with and without drafting, acceptance, identical output.

Tasks where drafting has something to find (tests/engine/spec_prompts.py):
`rewrite` (rewrite a given paragraph with one change) and `code` (continue a
code file). Each batch size runs the same greedy requests twice through the
engine — plain, then with `--draft` — and checks the token ids are identical.
tokens/s = generated tokens / wall time from submission to the last token
(prompt reading included in both). `--draft oracle` replays the plain output
with the first `--oracle-accept` of every `--draft-max` drafts right and the
rest wrong: a fixed acceptance, for measuring the verification mechanics of
MTP / draft-model shapes on synthesized models, where the acceptance of
random weights means nothing. The verification overhead per drafted token is
(time per drafting step - time per plain step) / drafts per step.

    python bench/spec_decode.py [--device cpu] [--batch 1 16] [--task rewrite code] [--draft suffix]
    python bench/spec_decode.py --model /tmp/strata-synth/synth-1b-Q4_0.gguf --draft oracle --oracle-accept 3
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from strata import _ffi  # noqa: E402
from strata.config import EngineConfig, backend_of, default_device  # noqa: E402
from strata.engine.drafting.base import Drafter  # noqa: E402
from strata.engine.engine import Engine  # noqa: E402
from strata.engine.sampling import SamplingParams  # noqa: E402
from strata.models.loader import load_model  # noqa: E402
from tests.engine.spec_prompts import CODE, PARAGRAPH  # noqa: E402

WORDS = ["software", "engineering", "mathematics", "physics", "biology", "music", "cooking", "gardening",
         "writing", "painting", "sailing", "farming", "medicine", "law", "teaching", "chess"]


class FixedAcceptance(Drafter):
    """Replays the plain output: the first `right` drafts of each proposal correct, the rest wrong."""

    source = "oracle"

    def __init__(self, references: dict[tuple, list[int]], right: int, vocab: int):
        self.references, self.right, self.vocab = references, right, vocab

    def propose(self, wants):
        out = {}
        for request, k in wants:
            ref, done = self.references[tuple(request.prompt_ids)], len(request.output_ids)
            drafts = ref[done: done + k]
            out[request] = [t if j < self.right else (t + 1) % self.vocab for j, t in enumerate(drafts)]
        return out


def prompts(model, task: str, n: int) -> list[list[int]]:
    tok, tpl = model.tokenizer, model.chat_template
    out = []
    for i in range(n):
        if task == "rewrite":
            content = (f"Rewrite the following paragraph, replacing the word 'computing' with '{WORDS[i % 16]}' "
                       f"and changing nothing else:\n\n{PARAGRAPH}")
            text = tpl.render([{"role": "user", "content": content}], add_generation_prompt=True)
            out.append(tok.encode(text, add_special=False))
        else:
            out.append(tok.encode(CODE.replace("standard_deviation", f"standard_deviation_{i}"), add_special=False))
    return out


async def run(engine: Engine, batch: list[list[int]], max_tokens: int) -> tuple[list[list[int]], float, int]:
    params = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
    outputs: list = [None] * len(batch)
    steps0 = engine.metrics.steps
    async with anyio.create_task_group() as tg:
        await tg.start(engine.run)
        start = time.perf_counter()

        async def one(i):
            outputs[i] = (await engine.submit(batch[i], params).collect()).token_ids

        async with anyio.create_task_group() as clients:
            for i in range(len(batch)):
                clients.start_soon(one, i)
        seconds = time.perf_counter() - start
        tg.cancel_scope.cancel()
    return outputs, seconds, engine.metrics.steps - steps0


def make(ctx, model, device, batch, args, drafter=None, draft=None) -> Engine:
    config = EngineConfig(model=args.model, device=device, batch=batch, ctx=args.ctx, draft=draft,
                          draft_max=args.draft_max, draft_model=args.draft_model if draft == "model" else None,
                          prefix_cache=False)  # every configuration computes every prompt
    config = config.resolve(backend_of(device), model.spec.ctx_train)
    return Engine(ctx, model, config, drafter=drafter)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--device", default=None)
    parser.add_argument("--draft", default="suffix", choices=["suffix", "model", "mtp", "oracle"])
    parser.add_argument("--draft-model", default=None)
    parser.add_argument("--draft-max", type=int, default=None)
    parser.add_argument("--oracle-accept", type=int, default=None, help="right drafts per proposal (oracle)")
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--task", nargs="+", default=["rewrite", "code"], choices=["rewrite", "code"])
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--ctx", type=int, default=1024)
    args = parser.parse_args()
    device = args.device or default_device()
    ctx = _ffi.Context(device)
    model = load_model(args.model, ctx)
    print(f"model {model.path.name}, device {device}, draft {args.draft}, max {args.max_tokens} tokens, greedy")
    print("| task | batch | plain tok/s | drafted tok/s | speed-up | drafted | accepted | acceptance | "
          "tokens/step plain -> drafted | overhead/draft ms | identical |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | --- |")
    for task in args.task:
        for batch in args.batch:
            inputs = prompts(model, task, batch)
            plain_engine = make(ctx, model, device, batch, args)
            anyio.run(run, plain_engine, inputs[:1], 8)                          # warm-up (graphs)
            plain, plain_s, plain_steps = anyio.run(run, plain_engine, inputs, args.max_tokens)
            plain_engine.runner.close()
            drafter, draft = None, args.draft
            if args.draft == "oracle":
                k = args.draft_max or 4
                right = k if args.oracle_accept is None else args.oracle_accept
                drafter, draft = FixedAcceptance({tuple(p): o for p, o in zip(inputs, plain)}, right,
                                                 model.spec.vocab), None
            engine = make(ctx, model, device, batch, args, drafter, draft)
            anyio.run(run, engine, inputs[:1], 8)
            engine.metrics.drafts.drafted.clear()
            engine.metrics.drafts.accepted.clear()
            got, spec_s, spec_steps = anyio.run(run, engine, inputs, args.max_tokens)
            counts = engine.metrics.drafts
            drafted, accepted = sum(counts.drafted.values()), sum(counts.accepted.values())
            tokens = sum(len(o) for o in plain)
            per_step = (spec_s / spec_steps - plain_s / plain_steps) * 1e3
            overhead = per_step / (drafted / spec_steps) if drafted else float("nan")
            print(f"| {task} | {batch} | {tokens / plain_s:.1f} | {tokens / spec_s:.1f} | {plain_s / spec_s:.2f}x "
                  f"| {drafted} | {accepted} | {accepted / max(drafted, 1):.2f} | "
                  f"{tokens / plain_steps:.2f} -> {tokens / spec_steps:.2f} | {overhead:.2f} | "
                  f"{'yes' if got == plain else 'NO'} |")
            engine.runner.close()
    model.close()
    ctx.close()


if __name__ == "__main__":
    main()

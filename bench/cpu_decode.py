"""CPU speed of the default model at batch 1, beside transformers on the same prompts.

Strata runs the real SmolLM2-135M-Instruct GGUF (Q4_1 blocks, float32
arithmetic) through its engine (`LLM`, the same loop `strata serve` uses);
transformers runs the same GGUF dequantized to float32 with its own Llama,
in the same process, on the same prompts. Prompt speed = prompt tokens /
time to first token; decode speed = generated tokens after the first / the
time they took. Prints one table.

    python bench/cpu_decode.py [--tokens 128] [--threads 2] [--no-transformers]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from strata import LLM, SamplingParams  # noqa: E402
from strata.model_store import resolve_model  # noqa: E402

QUESTIONS = [
    "Explain, in a few paragraphs, how a CPU cache hierarchy works and why it matters for performance.",
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "Summarize the causes and consequences of the French Revolution for a high-school student.",
    "Describe how to bake sourdough bread, step by step, including the starter.",
]


def strata_speed(llm: LLM, prompts: list[list[int]], tokens: int) -> tuple[float, float]:
    params = SamplingParams(temperature=0, max_tokens=tokens, ignore_eos=True)
    llm.generate([prompts[0]], SamplingParams(temperature=0, max_tokens=8))      # warm-up
    prompt_s = decode_s = 0.0
    n_prompt = n_decode = 0
    for ids in prompts:
        start = time.perf_counter()
        times = [time.perf_counter() for event in llm.stream(ids, params) if event.token_ids]
        prompt_s += times[0] - start
        decode_s += times[-1] - times[0]
        n_prompt += len(ids)
        n_decode += len(times) - 1
    return n_prompt / prompt_s, n_decode / decode_s


def transformers_speed(path: Path, prompts: list[list[int]], tokens: int, threads: int) -> tuple[float, float]:
    import torch
    import transformers

    torch.set_num_threads(threads)
    model = transformers.AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                                              dtype=torch.float32)
    model.eval()
    prompt_s = decode_s = 0.0
    n_prompt = n_decode = 0
    with torch.no_grad():
        model(torch.tensor([prompts[0][:16]]))                                       # warm-up
        for ids in prompts:
            start = time.perf_counter()
            out = model(torch.tensor([ids]), use_cache=True)
            token = int(out.logits[0, -1].argmax())
            prompt_s += time.perf_counter() - start
            past = out.past_key_values
            start = time.perf_counter()
            for _ in range(tokens - 1):
                out = model(torch.tensor([[token]]), past_key_values=past, use_cache=True)
                past = out.past_key_values
                token = int(out.logits[0, -1].argmax())
            decode_s += time.perf_counter() - start
            n_prompt += len(ids)
            n_decode += tokens - 1
    return n_prompt / prompt_s, n_decode / decode_s


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=128, help="tokens generated per prompt")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--no-transformers", action="store_true")
    args = ap.parse_args(argv)

    path = resolve_model("smollm2-135m")
    # No prefix cache: prompt speed means computing the prompt, as transformers does.
    with LLM(str(path), device="cpu", batch=1, ctx=1024, num_threads=args.threads, prefix_cache=False) as llm:
        prompts = [llm.render_chat([{"role": "user", "content": q}]) for q in QUESTIONS]
        ours = strata_speed(llm, prompts, args.tokens)
    theirs = None if args.no_transformers else transformers_speed(path, prompts, args.tokens, args.threads)

    print(f"SmolLM2-135M-Instruct Q4_1, batch 1, {args.threads} threads, {len(prompts)} prompts of "
          f"{min(map(len, prompts))}-{max(map(len, prompts))} tokens, {args.tokens} generated each")
    print("| engine | prompt tok/s | decode tok/s |")
    print("| --- | ---: | ---: |")
    print(f"| Strata (CPU backend) | {ours[0]:,.0f} | {ours[1]:,.1f} |")
    if theirs:
        print(f"| transformers (float32) | {theirs[0]:,.0f} | {theirs[1]:,.1f} |")
        print(f"| ratio | {ours[0] / theirs[0]:.2f}x | {ours[1] / theirs[1]:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

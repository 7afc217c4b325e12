"""Multi-turn chat with the prefix cache on and off: time to first token and prompt tokens served from cache.

Each of --conversations chats runs --turns turns in order (the chats run side by side). A turn sends
the whole conversation so far plus a new question, streamed, greedy, and reads the usage. The same
workload runs twice on one server: first with `"cache_prompt": false` on every request, then with
`"cache_prompt": true`. Strata and llama-server both read that field, so the script also compares
them on the same GGUF. It prints one row per turn (mean TTFT off/on, cached prompt tokens, prompt
tokens) and whether every answer was the same with the cache on as off, which Strata promises
(docs/kv_pool.md).

    python3 bench/prefix_cache.py --url http://127.0.0.1:8080 --conversations 8 --turns 6 --max-tokens 64
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import httpx

QUESTIONS = ["Tell me about the history of the printing press.", "Who improved it next, and how?",
             "What did that change for science?", "And for religion?", "Summarize all of that in three lines.",
             "What would have happened without it?", "Name a modern equivalent.", "Why that one?"]
CONTEXT = ("We are writing a long report on the history of information technology, from clay tablets to "
           "the internet. Keep answers factual and short. ") * 6


def turn(client: httpx.Client, model: str, messages: list, max_tokens: int, cache: bool) -> tuple[float, str, dict]:
    body = {"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}, "cache_prompt": cache}
    start, ttft, text, usage = time.perf_counter(), None, [], {}
    with client.stream("POST", "/v1/chat/completions", json=body) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            for choice in chunk.get("choices") or []:
                delta = choice.get("delta", {}).get("content")
                if delta:
                    ttft = ttft if ttft is not None else time.perf_counter() - start
                    text.append(delta)
            usage = chunk.get("usage") or usage
    return ttft if ttft is not None else time.perf_counter() - start, "".join(text), usage


def conversation(url: str, model: str, index: int, turns: int, max_tokens: int, cache: bool) -> list:
    messages = [{"role": "system", "content": f"Report #{index}. {CONTEXT}"}]
    out = []
    with httpx.Client(base_url=url, timeout=600) as client:
        for t in range(turns):
            messages.append({"role": "user", "content": QUESTIONS[t % len(QUESTIONS)]})
            ttft, text, usage = turn(client, model, messages, max_tokens, cache)
            messages.append({"role": "assistant", "content": text})
            cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
            out.append((ttft, text, cached, usage.get("prompt_tokens", 0)))
    return out


def run(args, cache: bool) -> list:
    with ThreadPoolExecutor(args.conversations) as pool:
        return list(pool.map(lambda i: conversation(args.url, args.model, i, args.turns, args.max_tokens, cache),
                             range(args.conversations)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8080")
    parser.add_argument("--model", default="default")
    parser.add_argument("--conversations", type=int, default=4)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=64)
    args = parser.parse_args()
    off, on = run(args, cache=False), run(args, cache=True)
    print(f"{args.conversations} conversations x {args.turns} turns, {args.max_tokens} tokens an answer, {args.url}")
    print("| turn | TTFT off (s) | TTFT on (s) | cached / prompt tokens (on) |")
    print("| ---: | ---: | ---: | ---: |")
    for t in range(args.turns):
        a = statistics.mean(c[t][0] for c in off)
        b = statistics.mean(c[t][0] for c in on)
        cached, prompt = sum(c[t][2] for c in on), sum(c[t][3] for c in on)
        print(f"| {t + 1} | {a:.3f} | {b:.3f} | {cached:,} / {prompt:,} |")
    same = sum(x[1] == y[1] for co, cn in zip(off, on) for x, y in zip(co, cn))
    print(f"answers identical with the cache on and off: {same} / {args.conversations * args.turns}")


if __name__ == "__main__":
    main()

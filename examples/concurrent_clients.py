"""Many concurrent streaming clients against one Strata server, with the async Strata SDK.

    make serve                              # in another terminal: the default model on :8080
    python examples/concurrent_clients.py --clients 16 --max-tokens 48

Each client streams its own question; the script prints every client's text,
its time to first token, and the aggregate generated tokens per second. Add
--check to run every request again alone afterwards and confirm that the
batched answers are the same tokens (they are: that is Strata's promise).
"""

from __future__ import annotations

import argparse
import sys
import time

import anyio

from strata.client import AsyncClient, StrataClientError

TOPICS = ["the sea", "a robot", "Paris", "winter", "a cat", "music", "the moon", "bread", "trains", "bees"]


async def one_client(client: AsyncClient, i: int, args, results: list) -> None:
    start = time.monotonic()
    first = None
    text, ids = [], []
    question = f"Write two sentences about {TOPICS[i % len(TOPICS)]}."
    async for chunk in client.chat_stream(question, max_tokens=args.max_tokens, temperature=args.temperature,
                                          seed=i):
        if chunk.token_ids and first is None:
            first = time.monotonic() - start
        text.append(chunk.text)
        ids += chunk.token_ids
    results[i] = {"question": question, "text": "".join(text), "ids": ids, "ttft": first,
                  "seconds": time.monotonic() - start}


async def run(args) -> int:
    results: list = [None] * args.clients
    async with AsyncClient(args.url, api_key=args.api_key, timeout=600) as client:
        start = time.monotonic()
        async with anyio.create_task_group() as tg:
            for i in range(args.clients):
                tg.start_soon(one_client, client, i, args, results)
        elapsed = time.monotonic() - start
        for i, r in enumerate(results):
            print(f"--- client {i}: {r['question']}  (first token {r['ttft'] or 0:.2f}s, {len(r['ids'])} tokens)")
            print(r["text"].strip())
        total = sum(len(r["ids"]) for r in results)
        print(f"\n{args.clients} clients, {total} tokens in {elapsed:.1f}s: {total / elapsed:.1f} tokens/s aggregate")
        if args.check:
            same = 0
            for i, r in enumerate(results):
                alone = await client.chat(r["question"], max_tokens=args.max_tokens, temperature=args.temperature,
                                          seed=i)
                same += alone.token_ids == r["ids"]
            print(f"{same}/{args.clients} answers identical to the same request run alone")
            return 0 if same == args.clients else 1
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://127.0.0.1:8080", help="the server (default: %(default)s)")
    parser.add_argument("--api-key", default=None, help="the server's --api-key, if it has one")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--temperature", type=float, default=0.8, help="each client i samples with seed i")
    parser.add_argument("--check", action="store_true", help="re-run each request alone and compare the tokens")
    args = parser.parse_args()
    try:
        return anyio.run(run, args)
    except StrataClientError as exc:
        print(f"error: {exc} — is `make serve` running at {args.url}?", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

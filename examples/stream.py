"""Stream an answer from a Strata server with the official `openai` package.

    make serve                              # in another terminal: the default model on :8080
    pip install openai
    python examples/stream.py "Tell me a short story about a lighthouse."

Any OpenAI client works the same way: point its base URL at the server's
/v1. The api_key must be the server's --api-key when it has one (any string
otherwise). `return_token_ids` is a Strata extension: each chunk also
carries the ids of the tokens it holds.
"""

from __future__ import annotations

import argparse
import sys

from openai import OpenAI


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("prompt", nargs="?", default="Tell me a short story about a lighthouse.")
    parser.add_argument("--url", default="http://127.0.0.1:8080/v1", help="the server's /v1 (default: %(default)s)")
    parser.add_argument("--api-key", default="none", help="the server's --api-key, if it has one")
    parser.add_argument("--model", default=None, help="the model id (default: the first the server lists)")
    parser.add_argument("--max-tokens", type=int, default=200)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()

    client = OpenAI(base_url=args.url, api_key=args.api_key)
    model = args.model or client.models.list().data[0].id
    stream = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": args.prompt}], max_tokens=args.max_tokens,
        temperature=args.temperature, seed=args.seed, stream=True, stream_options={"include_usage": True},
        extra_body={"return_token_ids": True})
    num_ids = 0
    for chunk in stream:
        if chunk.choices:
            print(chunk.choices[0].delta.content or "", end="", flush=True)
            num_ids += len((chunk.choices[0].model_extra or {}).get("token_ids", []))
            if chunk.choices[0].finish_reason:
                print(f"\n[finish_reason: {chunk.choices[0].finish_reason}]", file=sys.stderr)
        if chunk.usage:
            print(f"[{chunk.usage.prompt_tokens} prompt + {chunk.usage.completion_tokens} generated tokens; "
                  f"{num_ids} token ids streamed]", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

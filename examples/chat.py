"""Chat with a Strata server through the Strata SDK (strata.client).

    make serve                              # in another terminal: the default model on :8080
    python examples/chat.py "What is the capital of France?"
    python examples/chat.py --stream --temperature 0.8 --seed 7 "Write a haiku about the sea."

Greedy (temperature 0) or seeded answers are reproducible: the same request
gives the same tokens however busy the server is.
"""

from __future__ import annotations

import argparse
import sys

from strata.client import APIError, Client, StrataClientError


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("prompt", nargs="?", default="What is the capital of France?")
    parser.add_argument("--url", default="http://127.0.0.1:8080", help="the server (default: %(default)s)")
    parser.add_argument("--api-key", default=None, help="the server's --api-key, if it has one")
    parser.add_argument("--system", default=None, help="a system message")
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--stream", action="store_true", help="print the answer as it is generated")
    args = parser.parse_args()

    messages = ([{"role": "system", "content": args.system}] if args.system else [])
    messages.append({"role": "user", "content": args.prompt})
    options = {"max_tokens": args.max_tokens, "temperature": args.temperature, "seed": args.seed}
    try:
        with Client(args.url, api_key=args.api_key) as client:
            if args.stream:
                for chunk in client.chat_stream(messages, **options):
                    print(chunk.text, end="", flush=True)
                    if chunk.usage:
                        usage = chunk.usage
                print()
            else:
                answer = client.chat(messages, **options)
                print(answer.text)
                usage = answer.usage
    except APIError as exc:
        print(f"the server refused: {exc.message} (HTTP {exc.status_code})", file=sys.stderr)
        return 1
    except StrataClientError as exc:
        print(f"error: {exc} — is `make serve` running at {args.url}?", file=sys.stderr)
        return 1
    print(f"[{usage.prompt_tokens} prompt + {usage.completion_tokens} generated tokens]", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

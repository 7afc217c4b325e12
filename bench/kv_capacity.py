"""KV cache capacity, fixed slots against the paged pool: a table computed from model shapes, no device.

Before the paged pool (docs/kv_pool.md), every slot reserved --ctx cells of F16 K/V whether a request
used them or not. Now a request reserves ceil((prompt + max_tokens) / 64) pages from the shared pool.
This script prints the KV bytes per token of a shape and how many requests fit in a device's memory
after the weights, with the default 85% of what is left (strata/engine/sizing.py):
  - fixed: slots of --ctx cells (the old layout, and the paged pool when every request fills its slot);
  - paged: requests that each use `used` tokens (prompt + max_tokens) under the same --ctx limit.

    python3 bench/kv_capacity.py [--used 1024]
"""

from __future__ import annotations

import argparse

PAGE = 64
FRACTION = 0.85
GIB = 2 ** 30

# name: (n_layers, n_kv_heads, head_dim, weight bytes)
SHAPES = {
    # Llama 3 8B in Q4_0 with a Q6_K output matrix (llama-quantize's mix): 0.5625 B/value for Q4_0,
    # 210/256 B/value for Q6_K; embeddings Q4_0.
    "llama-8b Q4_0": (32, 8, 128, (128256 * 4096 + 32 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336))
                      * 0.5625 + 128256 * 4096 * 210 / 256),
}
DEVICES = {"24 GiB card": 24 * GIB, "H200 (139 GiB usable)": 139 * GIB}


def kv_bytes_per_token(n_layers: int, n_kv_heads: int, head_dim: int) -> int:
    return n_layers * 2 * n_kv_heads * head_dim * 2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--used", type=int, default=1024, help="tokens a request really uses (prompt + max_tokens)")
    args = parser.parse_args()
    print(f"| shape | KV bytes / token | device | --ctx | fixed slots that fit | paged requests of {args.used} "
          "tokens that fit |")
    print("| --- | ---: | --- | ---: | ---: | ---: |")
    for name, (layers, kv_heads, head_dim, weights) in SHAPES.items():
        per_token = kv_bytes_per_token(layers, kv_heads, head_dim)
        for device, total in DEVICES.items():
            pool_bytes = max(0, (total - weights) * FRACTION)
            pages = int(pool_bytes // (per_token * PAGE))
            for ctx in (2048, 8192, 32768):
                fixed = pages // (ctx // PAGE)
                paged = pages // -(-min(args.used, ctx) // PAGE)
                print(f"| {name} | {per_token:,} | {device} | {ctx:,} | {fixed:,} | {paged:,} |")


if __name__ == "__main__":
    main()

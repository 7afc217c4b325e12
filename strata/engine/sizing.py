"""Sizing the KV page pool from the device memory left once the model is loaded.

Without --kv-pages the pool is batch x ceil(ctx / 64) pages: every slot full
(docs/kv_pool.md). When that does not fit in FREE_FRACTION of the free
memory, the pool takes what fits instead: slots and ctx stay limits, and
admission waits while the pool is short. If one request of the default ctx
would not fit, the default ctx shrinks to what does. A setting the user
gave (--kv-pages, --ctx) is never changed: when it cannot fit, the error
says why in one line and what would fit.
"""

from __future__ import annotations

from dataclasses import replace

from ..config import PAGE_CELLS, ConfigError, EngineConfig

FREE_FRACTION = 0.85     # of the free memory after the model; the rest is activations, graphs and headroom


def page_bytes(spec) -> int:
    """Bytes of one page: every layer's K and V (F16) for PAGE_CELLS cells."""
    return spec.n_layers * 2 * spec.n_kv_heads * PAGE_CELLS * spec.head_dim * 2


def _gib(n: float) -> str:
    return f"{n / 2 ** 30:.2f} GiB"


def fit_pool(config: EngineConfig, spec, free_bytes: int, explicit: frozenset[str]) -> tuple[EngineConfig, str]:
    """(config with kv_pages and maybe ctx fitted, the line that says what was chosen); ConfigError when
    a setting in `explicit` ("ctx", "kv_pages") cannot fit."""
    size = page_bytes(spec)
    if size == 0:
        return config, "KV pool: the model has no KV cache"
    budget = int(free_bytes * FREE_FRACTION) // size
    usable = f"{_gib(free_bytes)} free after the model, {FREE_FRACTION:.0%} usable"
    pages = config.kv_pages
    if pages > budget and "kv_pages" in explicit:
        raise ConfigError(f"--kv-pages {pages} needs {_gib(pages * size)} of KV cache but {usable}: "
                          f"use --kv-pages <= {budget}")
    ctx_pages = -(-config.ctx // PAGE_CELLS)
    if budget < 1 or (budget < ctx_pages and budget * PAGE_CELLS < 16):
        raise ConfigError(f"not even one KV page of {PAGE_CELLS} tokens ({size / 2 ** 20:.1f} MiB) fits: {usable}; "
                          "serve a smaller model or use a device with more memory")
    if budget < ctx_pages:
        if "ctx" in explicit:
            raise ConfigError(f"--ctx {config.ctx} needs {_gib(ctx_pages * size)} of KV cache for one request but "
                              f"{usable}: use --ctx <= {budget * PAGE_CELLS}")
        config = replace(config, ctx=budget * PAGE_CELLS)
    if pages > budget:
        config = replace(config, kv_pages=budget)
        note = "shrunk to fit"
    else:
        note = "fits"
    line = (f"KV pool: {config.kv_pages} pages of {PAGE_CELLS} tokens = {config.kv_pages * PAGE_CELLS} tokens, "
            f"{_gib(config.kv_pages * size)} ({note}; {usable}); {config.batch} slots of up to {config.ctx} tokens")
    return config, line

"""The Gemma 3 hyperparameters a GGUF implies beyond the common ones.

llama.cpp's `gemma3` files state the sliding window but not which layers use
it, their RoPE base or the attention scale; those follow Gemma 3's published
configuration, as llama.cpp and transformers both fix them: every sixth layer
(5, 11, 17, ...) is global and the others are local (sliding window, RoPE
base 10,000); the global layers use `gemma3.rope.freq_base` (and the file's
linear RoPE scaling, if any); the embedding is multiplied by sqrt(hidden);
queries are scaled by 1/sqrt(head_dim) (1/sqrt(hidden/heads) for the 27B
model, whose 62 layers identify it).
"""

from __future__ import annotations

import math

import numpy as np

from .model import ModelFormatError

GLOBAL_EVERY = 6           # layer i is global when (i + 1) % 6 == 0
LOCAL_ROPE_BASE = 10000.0


def gemma3_fields(reader, hidden: int, n_heads: int, head_dim: int, n_layers: int) -> dict:
    """ModelSpec keyword arguments for a gemma3 GGUF (see the module docstring)."""
    def field_value(_, key, default=None):
        field = reader.get_field(key)
        return default if field is None else field.contents()

    window = int(field_value(reader, "gemma3.attention.sliding_window", 0) or 0)
    if window <= 0:
        raise ModelFormatError("gemma3 GGUF lacks gemma3.attention.sliding_window")
    if field_value(reader, "gemma3.final_logit_softcapping") or field_value(reader, "gemma3.attn_logit_softcapping"):
        raise ModelFormatError("gemma3 logit soft-capping is not supported")
    scale = 1.0 / math.sqrt(hidden / n_heads) if n_layers == 62 else 1.0 / math.sqrt(head_dim)
    return dict(
        sliding_window=window,
        local_layers=tuple((i + 1) % GLOBAL_EVERY != 0 for i in range(n_layers)),
        rope_base_local=LOCAL_ROPE_BASE,
        embed_scale=float(np.float32(math.sqrt(hidden))),
        attn_scale=scale,
    )

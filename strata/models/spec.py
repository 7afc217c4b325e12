"""ModelSpec: the hyperparameters a forward pass needs, whatever file they came from.

Loaders (GGUF, Hugging Face) fill one of these; the decoder reads only this.
"""

from __future__ import annotations

from dataclasses import dataclass

from .._ffi import RopeMode


@dataclass(frozen=True)
class ModelSpec:
    arch: str                 # "llama", "qwen2", "qwen2_5_vl", "gemma3"
    n_layers: int
    hidden: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    ctx_train: int
    rms_eps: float
    rope_mode: RopeMode
    rope_dim: int
    rope_base: float
    rope_sections: tuple[int, int, int, int] = (0, 0, 0, 0)
    rope_freq_scale: float = 1.0
    tied_output: bool = False
    qkv_bias: bool = False
    n_nextn: int = 0          # multi-token-prediction layers after the n_layers decoder layers (models/mtp_head.py)
    name: str = ""
    # Gemma 3 (models/gemma3.py): per-layer sliding windows with their own RoPE base, embedding
    # scale, Q/K RMSNorm, norms after attention and feed-forward, GELU (tanh) gating.
    sliding_window: int = 0                # cells a local layer sees (0: every layer is global)
    local_layers: tuple[bool, ...] = ()    # per layer: True = sliding window, local RoPE base
    rope_base_local: float = 0.0
    embed_scale: float = 1.0               # embeddings are multiplied by this (Gemma: sqrt(hidden))
    attn_scale: float = 0.0                # 0: 1/sqrt(head_dim)

    def __post_init__(self):
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads {self.n_heads} is not a multiple of n_kv_heads {self.n_kv_heads}")
        if self.rope_dim % 2 or self.rope_dim > self.head_dim:
            raise ValueError(f"rope dimension {self.rope_dim} must be even and <= head_dim {self.head_dim}")

    @property
    def q_dim(self) -> int:
        return self.n_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.n_kv_heads * self.head_dim

    @property
    def uses_mrope(self) -> bool:
        return self.rope_mode == RopeMode.MROPE

    def kv_bytes_per_token(self) -> int:
        return self.n_layers * 2 * self.kv_dim * 2

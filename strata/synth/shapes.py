"""Llama shapes that `strata synth` writes: the presets we benchmark and checked overrides.

The presets are the benchmark shapes of docs/design.md (SmolLM2-135M, Llama-3.2-1B,
Llama-3.1-8B), all with SmolLM2's 49152-token vocabulary, plus `tiny` for
tests. Overrides change one hyperparameter of a preset; `validate` says what
is wrong with a shape in words a user can act on.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

SMOLLM2_VOCAB_SIZE = 49152


class SynthError(ValueError):
    """A request `strata synth` can't satisfy; the message says what is allowed."""


@dataclass(frozen=True)
class LlamaShape:
    name: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    ffn_size: int
    rope_base: float
    tied_embeddings: bool
    vocab_size: int = SMOLLM2_VOCAB_SIZE
    context_len: int = 8192
    rms_eps: float = 1e-5

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim

    def validate(self) -> None:
        """Raises SynthError naming the first inconsistent hyperparameter."""
        for field in ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "ffn_size", "vocab_size", "context_len"):
            if getattr(self, field) < 1:
                raise SynthError(f"{_FLAG[field]} must be a positive integer, got {getattr(self, field)}")
        if self.hidden_size % self.num_heads:
            raise SynthError(f"--hidden {self.hidden_size} must be a multiple of --heads {self.num_heads}")
        if self.head_dim % 2:
            raise SynthError(f"head dim (hidden/heads = {self.head_dim}) must be even for RoPE")
        if self.num_heads % self.num_kv_heads:
            raise SynthError(f"--heads {self.num_heads} must be a multiple of --kv-heads {self.num_kv_heads}")


PRESETS: dict[str, LlamaShape] = {
    "tiny": LlamaShape("tiny", num_layers=2, hidden_size=256, num_heads=4, num_kv_heads=2, ffn_size=512,
                       rope_base=10000.0, tied_embeddings=True),
    "135m": LlamaShape("135m", num_layers=30, hidden_size=576, num_heads=9, num_kv_heads=3, ffn_size=1536,
                       rope_base=100000.0, tied_embeddings=True),
    "1b": LlamaShape("1b", num_layers=16, hidden_size=2048, num_heads=32, num_kv_heads=8, ffn_size=8192,
                     rope_base=500000.0, tied_embeddings=True),
    "8b": LlamaShape("8b", num_layers=32, hidden_size=4096, num_heads=32, num_kv_heads=8, ffn_size=14336,
                     rope_base=500000.0, tied_embeddings=False),
}

# Override keyword (as on the command line, without dashes) -> LlamaShape field.
OVERRIDES: dict[str, str] = {
    "layers": "num_layers",
    "hidden": "hidden_size",
    "ffn": "ffn_size",
    "heads": "num_heads",
    "kv_heads": "num_kv_heads",
    "vocab": "vocab_size",
    "ctx": "context_len",
}
_FLAG = {field: "--" + key.replace("_", "-") for key, field in OVERRIDES.items()}


def resolve_shape(shape: str | LlamaShape, **overrides: int | None) -> LlamaShape:
    """A preset (by name) or a given shape with overrides applied, validated."""
    if isinstance(shape, str):
        preset = PRESETS.get(shape.lower())
        if preset is None:
            raise SynthError(f"unknown shape {shape!r}; choose one of: {', '.join(PRESETS)}")
        shape = preset
    changes = {}
    for key, value in overrides.items():
        if key not in OVERRIDES:
            raise SynthError(f"unknown shape override {key!r}; allowed: {', '.join(OVERRIDES)}")
        if value is not None:
            changes[OVERRIDES[key]] = int(value)
    resolved = dataclasses.replace(shape, **changes)
    resolved.validate()
    return resolved

"""Reading a GGUF file's model description: architecture, hyperparameters, tensors.

Uses the `gguf` package's reader (memory-mapped; nothing is copied here).
Architectures: `llama` (adjacent-pair RoPE: llama.cpp's converter permutes
Q/K rows, docs/design.md "RoPE layouts"), `qwen2` (half-split RoPE, q/k/v
biases), `qwen3` (half-split RoPE, per-head Q/K RMSNorm, no biases) and
`gemma3` (half-split RoPE; its extra hyperparameters in models/gemma3_spec.py).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .model import ModelFormatError, TensorInfo
from .._ffi import DType, RopeMode
from .spec import ModelSpec

SUPPORTED_ARCHS = {"llama": RopeMode.ADJACENT, "qwen2": RopeMode.HALF, "qwen3": RopeMode.HALF,
                   "gemma3": RopeMode.HALF}
# GGUF tensor type ids libstrata's matmul and embedding accept.
SUPPORTED_TYPES = {int(t): t.name for t in DType if t is not DType.I32}


def _reader_class():
    import gguf

    class FastReader(gguf.GGUFReader):
        """gguf's reader, slicing a plain ndarray view instead of the np.memmap: the same bytes,
        without a memmap object per metadata item (opening SmolLM2's 100k tokenizer strings
        drops from ~4 s to ~1 s)."""

        def _get(self, offset, dtype, count=1, override_order=None):
            plain = self.__dict__.get("_plain")
            if plain is None or plain.base is not self.data:
                plain = self.__dict__["_plain"] = self.data.view(np.ndarray)
            count = int(count)
            itemsize = int(np.dtype(dtype).itemsize)
            arr = plain[offset: offset + itemsize * count].view(dtype=dtype)[:count]
            return arr.view(arr.dtype.newbyteorder(self.byte_order if override_order is None else override_order))

    return FastReader


def _FastReader(path, mode):
    return _reader_class()(path, mode)


def open_reader(path: str | Path):
    """A GGUFReader over `path`; raises ModelFormatError for files it cannot read."""
    try:
        return _FastReader(str(path), "r")
    except Exception as exc:  # the reader raises plain ValueError/struct errors on bad files
        raise ModelFormatError(f"{path} is not a readable GGUF file: {exc}") from exc


def field_value(reader, key: str, default=None):
    field = reader.get_field(key)
    if field is None:
        return default
    return field.contents()


def read_spec(reader) -> ModelSpec:
    arch = field_value(reader, "general.architecture")
    if arch not in SUPPORTED_ARCHS:
        raise ModelFormatError(
            f"GGUF architecture {arch!r} is not supported; supported: {', '.join(sorted(SUPPORTED_ARCHS))}")

    def need(key: str):
        value = field_value(reader, f"{arch}.{key}")
        if value is None:
            raise ModelFormatError(f"GGUF metadata lacks {arch}.{key}")
        return value

    hidden = int(need("embedding_length"))
    n_heads = int(need("attention.head_count"))
    n_kv = int(field_value(reader, f"{arch}.attention.head_count_kv", n_heads))
    head_dim = int(field_value(reader, f"{arch}.attention.key_length", hidden // n_heads))
    tensors = {t.name for t in reader.tensors}
    vocab = field_value(reader, f"{arch}.vocab_size")
    if vocab is None:
        tokens = reader.get_field("tokenizer.ggml.tokens")
        if tokens is None:
            raise ModelFormatError(f"GGUF metadata lacks {arch}.vocab_size and tokenizer.ggml.tokens")
        vocab = len(tokens.data)
    if arch == "gemma3":
        from .gemma3_spec import gemma3_fields

        extra = gemma3_fields(reader, hidden, n_heads, head_dim, int(need("block_count")))
    else:
        extra = {}
    scaling = field_value(reader, f"{arch}.rope.scaling.type", "none")
    factor = float(field_value(reader, f"{arch}.rope.scaling.factor", 1.0) or 1.0)
    if scaling not in ("none", "linear") and scaling is not None:
        raise ModelFormatError(f"RoPE scaling {scaling!r} is not supported (supported: none, linear)")
    n_nextn = int(field_value(reader, f"{arch}.nextn_predict_layers", 0) or 0)   # counted in block_count
    return ModelSpec(
        arch=arch,
        n_layers=int(need("block_count")) - n_nextn,
        n_nextn=n_nextn,
        hidden=hidden,
        n_heads=n_heads,
        n_kv_heads=n_kv,
        head_dim=head_dim,
        ffn=int(need("feed_forward_length")),
        vocab=int(vocab),
        ctx_train=int(field_value(reader, f"{arch}.context_length", 4096)),
        rms_eps=float(field_value(reader, f"{arch}.attention.layer_norm_rms_epsilon", 1e-5)),
        rope_mode=SUPPORTED_ARCHS[arch],
        rope_dim=int(field_value(reader, f"{arch}.rope.dimension_count", head_dim)),
        rope_base=float(field_value(reader, f"{arch}.rope.freq_base", 10000.0)),
        rope_freq_scale=1.0 / factor if scaling == "linear" else 1.0,
        tied_output="output.weight" not in tensors,
        qkv_bias="blk.0.attn_q.bias" in tensors,
        name=str(field_value(reader, "general.name", "") or ""),
        **extra,
    )


def read_tensors(reader) -> dict[str, TensorInfo]:
    out = {}
    for t in reader.tensors:
        dtype = int(t.tensor_type)
        if dtype not in SUPPORTED_TYPES:
            raise ModelFormatError(
                f"tensor {t.name} has type {t.tensor_type.name}, which Strata does not support; "
                f"supported: {', '.join(SUPPORTED_TYPES.values())}")
        shape = tuple(int(n) for n in reversed([int(x) for x in t.shape]))
        out[t.name] = TensorInfo(t.name, dtype, shape, t.data)
    return out

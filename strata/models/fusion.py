"""Fusing projections at load time: q/k/v into one matrix, gate/up into another.

Rows of a GGUF or safetensors matrix are contiguous and quantized along k,
so stacking matrices of the same type and k is a byte concatenation. One
matmul then produces a row [q | k | v] (read in place by rope_kv_store and
attention) or [gate | up] (read by the down projection's SILU_MUL
prologue), which saves launches on every layer. Layers whose matrices differ
in type stay unfused; the decoder runs them the long way.
"""

from __future__ import annotations

import numpy as np

from .model import TensorInfo

QKV = ("attn_q", "attn_k", "attn_v")
GATE_UP = ("ffn_gate", "ffn_up")


def fuse_projections(tensors: dict[str, TensorInfo], n_layers: int) -> dict[str, TensorInfo]:
    """Returns the tensors with blk.N.attn_qkv / blk.N.ffn_gate_up in place of their parts where possible."""
    out = dict(tensors)
    for i in range(n_layers):
        _fuse(out, f"blk.{i}.", QKV, "attn_qkv")
        _fuse(out, f"blk.{i}.", GATE_UP, "ffn_gate_up")
    return out


def _fuse(tensors: dict[str, TensorInfo], prefix: str, parts: tuple[str, ...], fused: str) -> None:
    weights = [tensors.get(f"{prefix}{p}.weight") for p in parts]
    if any(w is None for w in weights):
        return
    if len({w.dtype for w in weights}) != 1 or len({w.shape[1] for w in weights}) != 1:
        return
    biases = [tensors.get(f"{prefix}{p}.bias") for p in parts]
    if any(b is not None for b in biases) and any(b is None for b in biases):
        return
    rows = sum(w.shape[0] for w in weights)
    data = np.concatenate([np.ascontiguousarray(w.data).reshape(-1).view(np.uint8) for w in weights])
    tensors[f"{prefix}{fused}.weight"] = TensorInfo(f"{prefix}{fused}.weight", weights[0].dtype,
                                                    (rows, weights[0].shape[1]), data)
    if biases[0] is not None:
        bias = np.concatenate([np.ascontiguousarray(b.data).reshape(-1).view(np.uint8) for b in biases])
        tensors[f"{prefix}{fused}.bias"] = TensorInfo(f"{prefix}{fused}.bias", biases[0].dtype, (rows,), bias)
    for p in parts:
        tensors.pop(f"{prefix}{p}.weight")
        tensors.pop(f"{prefix}{p}.bias", None)

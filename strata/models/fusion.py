"""Fusing projections at load time: q/k/v into [q | k | v] rows, gate/up into [gate | up] rows.

Rows of a GGUF or safetensors matrix are contiguous and quantized along k,
so stacking matrices of the same type and k is a byte concatenation. One
matmul then produces a row [q | k | v] (read in place by rope_kv_store and
attention) or [gate | up] (read by the down projection's SILU_MUL
prologue), which saves launches on every layer.

Where the parts differ in type (llama-quantize's Q4_K_M gives attn_v Q6_K in
about half the layers, attn_q / attn_k Q4_K), the consecutive parts that do
share a type and k are still stacked (attn_q + attn_k -> blk.N.attn_qk), and
the row is produced by one matmul per group, each writing its columns of the
wide row (strata_matmul_ex's y_row_stride). `row_parts` gives that recipe:
the groups in row order with their first column. Every column is computed by
the same kernel whatever the grouping, so it only changes launch counts.
STRATA_FUSE_MIXED=0 (strata/env.py) restores the earlier rule, for A/B timing:
only layers whose parts all share one type are stacked, the others take the
decoder's long way.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from .. import env
from .model import TensorInfo

QKV = ("attn_q", "attn_k", "attn_v")
GATE_UP = ("ffn_gate", "ffn_up")


def fuse_projections(tensors: dict[str, TensorInfo], n_layers: int) -> dict[str, TensorInfo]:
    """Returns the tensors with each run of same-type parts stacked under its fused name (fused_name)."""
    out = dict(tensors)
    for i in range(n_layers):
        _fuse(out, f"blk.{i}.", QKV)
        _fuse(out, f"blk.{i}.", GATE_UP)
    return out


def mixed_fusion_enabled() -> bool:
    """STRATA_FUSE_MIXED (strata/env.py), read when a model is loaded: whether layers whose parts differ in
    type are still stacked by runs and run as one matmul per run (1, default) or take the long way (0)."""
    return (env.get("STRATA_FUSE_MIXED") or "1").strip().lower() not in ("0", "false", "no", "off")


def fused_name(parts: tuple[str, ...]) -> str:
    """The name of consecutive parts stacked: attn_q + attn_k + attn_v -> attn_qkv, attn_q + attn_k ->
    attn_qk, ffn_gate + ffn_up -> ffn_gate_up; a single part keeps its name."""
    if len(parts) == 1:
        return parts[0]
    stem = parts[0].split("_")[0] + "_"
    tails = [p[len(stem):] for p in parts]
    return stem + ("" if all(len(t) == 1 for t in tails) else "_").join(tails)


def row_parts(lookup: Callable[[str], object], prefix: str, parts: tuple[str, ...]) -> list[tuple[str, int]]:
    """The recipe of one wide row ([q | k | v] or [gate | up]) of layer `prefix`: (tensor name without
    .weight, first column) for each stored matrix in row order, the longest fused run first. `lookup(name)`
    returns the weight (with .rows) or None. [] where some part is stored nowhere."""
    out, column, i = [], 0, 0
    while i < len(parts):
        for j in range(len(parts), i, -1):
            name = prefix + fused_name(parts[i:j])
            weight = lookup(name + ".weight")
            if weight is not None:
                out.append((name, column))
                column += weight.rows
                i = j
                break
        else:
            return []
    return out


def _fuse(tensors: dict[str, TensorInfo], prefix: str, parts: tuple[str, ...]) -> None:
    weights = [tensors.get(f"{prefix}{p}.weight") for p in parts]
    if any(w is None for w in weights):
        return
    biases = [tensors.get(f"{prefix}{p}.bias") for p in parts]
    if not mixed_fusion_enabled() and not all(_same(weights[0], biases[0], w, b) for w, b in zip(weights, biases)):
        return
    start = 0
    for end in range(1, len(parts) + 1):   # runs of one type, k and bias presence
        if end < len(parts) and _same(weights[start], biases[start], weights[end], biases[end]):
            continue
        if end - start > 1:
            _stack(tensors, prefix, parts[start:end], weights[start:end], biases[start:end])
        start = end


def _same(w0: TensorInfo, b0, w1: TensorInfo, b1) -> bool:
    return w0.dtype == w1.dtype and w0.shape[1] == w1.shape[1] and (b0 is None) == (b1 is None)


def _stack(tensors: dict[str, TensorInfo], prefix: str, parts: tuple[str, ...], weights: list, biases: list) -> None:
    fused = prefix + fused_name(parts)
    rows = sum(w.shape[0] for w in weights)
    data = np.concatenate([np.ascontiguousarray(w.data).reshape(-1).view(np.uint8) for w in weights])
    tensors[f"{fused}.weight"] = TensorInfo(f"{fused}.weight", weights[0].dtype, (rows, weights[0].shape[1]), data)
    if biases[0] is not None:
        bias = np.concatenate([np.ascontiguousarray(b.data).reshape(-1).view(np.uint8) for b in biases])
        tensors[f"{fused}.bias"] = TensorInfo(f"{fused}.bias", biases[0].dtype, (rows,), bias)
    for p in parts:
        tensors.pop(f"{prefix}{p}.weight")
        tensors.pop(f"{prefix}{p}.bias", None)

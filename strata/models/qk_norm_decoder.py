"""Qwen3's decoder: the Llama/Qwen2 layer with an RMSNorm on every query and key head.

transformers' Qwen3Attention normalizes q and k per head (weights
`attn_q_norm` / `attn_k_norm`, head_dim values) after the projections and
before RoPE; everything else is the Llama layer with half-split RoPE and no
biases. The q and k projections stay separate matmuls (dense rows the
per-head RMSNorm can run on in place), so the fused qkv path is not used.
"""

from __future__ import annotations

from .. import _ffi as F
from .decoder import Decoder


class QKNormDecoder(Decoder):
    def __init__(self, ctx: F.Context, spec, weights):
        super().__init__(ctx, spec, weights)
        self.qk_norms = [(weights[f"blk.{i}.attn_q_norm.weight"], weights[f"blk.{i}.attn_k_norm.weight"])
                         for i in range(spec.n_layers)]

    def _attention_block(self, index, layer, io, act, slots, n_rows):
        ctx, s, A = self.ctx, self.spec, act.buffer
        n = layer.attn_norm
        F.rmsnorm(ctx, A, act.x, n.buffer, n.offset, A, act.h, n_rows, s.hidden, s.rms_eps)
        self._matmul(act.h, n_rows, layer.q, act.q, A, layer.q_bias)
        self._matmul(act.h, n_rows, layer.k, act.k, A, layer.k_bias)
        self._matmul(act.h, n_rows, layer.v, act.v, A, layer.v_bias)
        q_norm, k_norm = self.qk_norms[index]
        F.rmsnorm(ctx, A, act.q, q_norm.buffer, q_norm.offset, A, act.q, n_rows * s.n_heads, s.head_dim, s.rms_eps)
        F.rmsnorm(ctx, A, act.k, k_norm.buffer, k_norm.offset, A, act.k, n_rows * s.n_kv_heads, s.head_dim, s.rms_eps)
        F.rope(ctx, self.rope_q, A, act.q, s.q_dim, n_rows, slots, io.buffer, io.rows_off, None, 0)
        F.rope(ctx, self.rope_k, A, act.k, s.kv_dim, n_rows, slots, io.buffer, io.rows_off, None, 0)
        F.kv_store(ctx, slots, index, A, act.k, s.kv_dim, A, act.v, s.kv_dim, io.buffer, io.rows_off, n_rows)
        F.attention(ctx, slots, index, A, act.q, s.q_dim, n_rows, s.n_heads, io.buffer, io.rows_off, self.scale,
                    A, act.att)
        self._matmul(act.att, n_rows, layer.o, act.x, A, accumulate=True)

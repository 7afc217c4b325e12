"""The Gemma 3 decoder stack composed from libstrata kernels.

Per layer, as transformers' Gemma3DecoderLayer computes it:

    h = attn_norm(x); q, k, v = h·Wqᵀ, h·Wkᵀ, h·Wvᵀ
    q, k = q_norm(q), k_norm(k)         (RMSNorm per head)
    rope (local layers: base 10,000; global: the file's base and scaling)
    a = attention (local layers: the row's last `sliding_window` cells)
    x = x + post_attention_norm(a·Woᵀ)
    h = ffn_norm(x)
    x = x + post_ffw_norm((gelu_tanh(h·Wgᵀ) * h·Wuᵀ)·Wdᵀ)

and the embedding rows are multiplied by sqrt(hidden) first. llama.cpp's
converter stores every Gemma norm weight as (1 + w), so each norm is a plain
RMSNorm here. The window is a property of each row's own position
(strata_attention_window), so a row's logits never depend on the batch.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import _ffi as F
from .decoder import Decoder


@dataclass(frozen=True)
class Gemma3Layer:
    attn_norm: object
    q: object
    k: object
    v: object
    q_norm: object
    k_norm: object
    o: object
    post_attn_norm: object
    ffn_norm: object
    gate: object
    up: object
    down: object
    post_ffn_norm: object
    local: bool


class Gemma3Decoder(Decoder):
    def __init__(self, ctx: F.Context, spec, weights):
        super().__init__(ctx, spec, weights)
        s = spec
        self.scale = s.attn_scale or self.scale
        self.rope_q_local = F.rope_params(s.rope_mode, s.n_heads, s.head_dim, s.rope_dim, s.rope_base_local, 1.0,
                                          s.rope_sections)
        self.rope_k_local = F.rope_params(s.rope_mode, s.n_kv_heads, s.head_dim, s.rope_dim, s.rope_base_local, 1.0,
                                          s.rope_sections)

    def _layer(self, i: int) -> Gemma3Layer:
        w, p = self.weights, f"blk.{i}."
        return Gemma3Layer(
            attn_norm=w[p + "attn_norm.weight"], q=w[p + "attn_q.weight"], k=w[p + "attn_k.weight"],
            v=w[p + "attn_v.weight"], q_norm=w[p + "attn_q_norm.weight"], k_norm=w[p + "attn_k_norm.weight"],
            o=w[p + "attn_output.weight"], post_attn_norm=w[p + "post_attention_norm.weight"],
            ffn_norm=w[p + "ffn_norm.weight"], gate=w[p + "ffn_gate.weight"], up=w[p + "ffn_up.weight"],
            down=w[p + "ffn_down.weight"], post_ffn_norm=w[p + "post_ffw_norm.weight"],
            local=bool(self.spec.local_layers[i]))

    def record(self, io, act, slots, n_rows, n_decode, n_logits, inject=None, adjust=None) -> None:
        s = self.spec

        def scaled(buffer, offset):
            F.scale(self.ctx, buffer, offset, buffer, offset, n_rows * s.hidden, s.embed_scale)
            if inject is not None:
                inject(buffer, offset)

        super().record(io, act, slots, n_rows, n_decode, n_logits, scaled, adjust)

    def _norm(self, x_off, weight, n_rows, dim, A, out_off=None):
        F.rmsnorm(self.ctx, A, x_off, weight.buffer, weight.offset, A, x_off if out_off is None else out_off, n_rows,
                  dim, self.spec.rms_eps)

    def _attention_block(self, index, layer: Gemma3Layer, io, act, slots, n_rows):
        ctx, s, A = self.ctx, self.spec, act.buffer
        self._norm(act.x, layer.attn_norm, n_rows, s.hidden, A, act.h)
        self._matmul(act.h, n_rows, layer.q, act.q, A)
        self._matmul(act.h, n_rows, layer.k, act.k, A)
        self._matmul(act.h, n_rows, layer.v, act.v, A)
        self._norm(act.q, layer.q_norm, n_rows * s.n_heads, s.head_dim, A)
        self._norm(act.k, layer.k_norm, n_rows * s.n_kv_heads, s.head_dim, A)
        rope_q, rope_k = (self.rope_q_local, self.rope_k_local) if layer.local else (self.rope_q, self.rope_k)
        F.rope(ctx, rope_q, A, act.q, s.q_dim, n_rows, slots, io.buffer, io.rows_off, None, 0)
        F.rope(ctx, rope_k, A, act.k, s.kv_dim, n_rows, slots, io.buffer, io.rows_off, None, 0)
        F.kv_store(ctx, slots, index, A, act.k, s.kv_dim, A, act.v, s.kv_dim, io.buffer, io.rows_off, n_rows)
        F.attention_window(ctx, slots, index, A, act.q, s.q_dim, n_rows, s.n_heads, io.buffer, io.rows_off,
                           self.scale, s.sliding_window if layer.local else 0, A, act.att)
        self._matmul(act.att, n_rows, layer.o, act.h, A)
        self._norm(act.h, layer.post_attn_norm, n_rows, s.hidden, A)
        F.add(ctx, A, act.x, A, act.h, A, act.x, n_rows * s.hidden)

    def _mlp_block(self, layer: Gemma3Layer, act, n_rows):
        ctx, s, A = self.ctx, self.spec, act.buffer
        self._norm(act.x, layer.ffn_norm, n_rows, s.hidden, A, act.h)
        self._matmul(act.h, n_rows, layer.gate, act.gate, A)
        self._matmul(act.h, n_rows, layer.up, act.up, A)
        F.gelu_tanh_mul(ctx, A, act.gate, s.ffn, A, act.up, s.ffn, A, act.act, n_rows, s.ffn)
        self._matmul(act.act, n_rows, layer.down, act.h, A)
        self._norm(act.h, layer.post_ffn_norm, n_rows, s.hidden, A)
        F.add(ctx, A, act.x, A, act.h, A, act.x, n_rows * s.hidden)

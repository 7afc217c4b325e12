"""The Llama / Qwen2 decoder stack composed from libstrata kernels.

`Decoder.record` enqueues one forward pass for the rows described by a StepIO
(token ids, {slot, index} rows, which rows to sample) and leaves the sampled
ids in it. The same code runs eagerly and under graph capture: every buffer
it touches is allocated once, at a fixed address. Each kernel is
batch-invariant, so a row's logits never depend on the other rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .. import _ffi as F
from .spec import ModelSpec
from .weights import WeightArena


@dataclass(frozen=True)
class LayerWeights:
    attn_norm: object
    q: object
    k: object
    v: object
    o: object
    q_bias: object | None
    k_bias: object | None
    v_bias: object | None
    ffn_norm: object
    gate: object
    up: object
    down: object


class Activations:
    """Scratch regions of one device buffer, sized for max_rows rows and max_logits sampled rows."""

    def __init__(self, ctx: F.Context, spec: ModelSpec, max_rows: int, max_logits: int):
        regions = {
            "x": max_rows * spec.hidden, "h": max_rows * spec.hidden,
            "q": max_rows * spec.q_dim, "k": max_rows * spec.kv_dim, "v": max_rows * spec.kv_dim,
            "att": max_rows * spec.q_dim, "gate": max_rows * spec.ffn, "up": max_rows * spec.ffn,
            "act": max_rows * spec.ffn, "xs": max_logits * spec.hidden, "logits": max_logits * spec.vocab,
        }
        self.offsets, total = {}, 0
        for name, n in regions.items():
            self.offsets[name] = total
            total += -(-n * 4 // 256) * 256
        self.buffer = F.Buffer(ctx, total)
        self.nbytes = total

    def __getattr__(self, name):
        try:
            return self.__dict__["offsets"][name]
        except KeyError:
            raise AttributeError(name) from None

    def close(self):
        self.buffer.close()


class Decoder:
    def __init__(self, ctx: F.Context, spec: ModelSpec, weights: WeightArena):
        self.ctx, self.spec, self.weights = ctx, spec, weights
        w = weights
        self.embedding = w["token_embd.weight"]
        self.output = w["token_embd.weight"] if spec.tied_output else w["output.weight"]
        self.output_norm = w["output_norm.weight"]
        self.freq_factors = w.get("rope_freqs.weight")
        self.layers = [self._layer(i) for i in range(spec.n_layers)]
        self.rope_q = F.rope_params(spec.rope_mode, spec.n_heads, spec.head_dim, spec.rope_dim, spec.rope_base,
                                    spec.rope_freq_scale, spec.rope_sections)
        self.rope_k = F.rope_params(spec.rope_mode, spec.n_kv_heads, spec.head_dim, spec.rope_dim, spec.rope_base,
                                    spec.rope_freq_scale, spec.rope_sections)
        self.scale = 1.0 / math.sqrt(spec.head_dim)

    def _layer(self, i: int) -> LayerWeights:
        w, p = self.weights, f"blk.{i}."
        return LayerWeights(
            attn_norm=w[p + "attn_norm.weight"], q=w[p + "attn_q.weight"], k=w[p + "attn_k.weight"],
            v=w[p + "attn_v.weight"], o=w[p + "attn_output.weight"], q_bias=w.get(p + "attn_q.bias"),
            k_bias=w.get(p + "attn_k.bias"), v_bias=w.get(p + "attn_v.bias"), ffn_norm=w[p + "ffn_norm.weight"],
            gate=w[p + "ffn_gate.weight"], up=w[p + "ffn_up.weight"], down=w[p + "ffn_down.weight"])

    def record(self, io, act: Activations, slots: F.Slots, n_rows: int, n_decode: int, n_logits: int,
               inject=None) -> None:
        """Enqueues the forward pass and sampling for rows [0, n_rows) of `io`.

        Rows [0, n_decode) are decode rows: their table cells get index + delta first.
        `inject(buffer, offset)` may overwrite embedding rows (image features) before layer 0.
        """
        ctx, s, A, io_buf = self.ctx, self.spec, act.buffer, io.buffer
        if n_decode:
            F.positions_decode(ctx, slots, io_buf, io.rows_off, n_decode)
        e = self.embedding
        F.embed(ctx, e.buffer, e.offset, e.dtype, s.vocab, s.hidden, io_buf, io.ids_off, n_rows, A, act.x)
        if inject is not None:
            inject(A, act.x)
        for index, layer in enumerate(self.layers):
            self._attention_block(index, layer, io, act, slots, n_rows)
            self._mlp_block(layer, act, n_rows)
        if n_logits == 0:            # prefill chunks that complete no prompt: nothing to sample
            return
        if n_logits == 0:
            return          # a prompt chunk that does not end its prompt: nothing to sample yet
        F.gather_rows(ctx, A, act.x, n_rows, s.hidden * 4, io_buf, io.logit_idx_off, n_logits, A, act.xs)
        n = self.output_norm
        F.rmsnorm(ctx, A, act.xs, n.buffer, n.offset, A, act.xs, n_logits, s.hidden, s.rms_eps)
        self._matmul(act.xs, n_logits, self.output, act.logits, A)
        F.sample(ctx, A, act.logits, n_logits, s.vocab, io_buf, io.params_off, io_buf, io.out_off)

    def _attention_block(self, index, layer: LayerWeights, io, act, slots, n_rows):
        ctx, s, A = self.ctx, self.spec, act.buffer
        n = layer.attn_norm
        F.rmsnorm(ctx, A, act.x, n.buffer, n.offset, A, act.h, n_rows, s.hidden, s.rms_eps)
        self._matmul(act.h, n_rows, layer.q, act.q, A, layer.q_bias)
        self._matmul(act.h, n_rows, layer.k, act.k, A, layer.k_bias)
        self._matmul(act.h, n_rows, layer.v, act.v, A, layer.v_bias)
        ff = self.freq_factors
        ff_buf, ff_off = (ff.buffer, ff.offset) if ff is not None else (None, 0)
        F.rope(ctx, self.rope_q, A, act.q, s.q_dim, n_rows, slots, io.buffer, io.rows_off, ff_buf, ff_off)
        F.rope(ctx, self.rope_k, A, act.k, s.kv_dim, n_rows, slots, io.buffer, io.rows_off, ff_buf, ff_off)
        F.kv_store(ctx, slots, index, A, act.k, s.kv_dim, A, act.v, s.kv_dim, io.buffer, io.rows_off, n_rows)
        F.attention(ctx, slots, index, A, act.q, s.q_dim, n_rows, s.n_heads, io.buffer, io.rows_off, self.scale,
                    A, act.att)
        self._matmul(act.att, n_rows, layer.o, act.x, A, accumulate=True)

    def _mlp_block(self, layer: LayerWeights, act, n_rows):
        ctx, s, A = self.ctx, self.spec, act.buffer
        n = layer.ffn_norm
        F.rmsnorm(ctx, A, act.x, n.buffer, n.offset, A, act.h, n_rows, s.hidden, s.rms_eps)
        self._matmul(act.h, n_rows, layer.gate, act.gate, A)
        self._matmul(act.h, n_rows, layer.up, act.up, A)
        F.silu_mul(ctx, A, act.gate, s.ffn, A, act.up, s.ffn, A, act.act, n_rows, s.ffn)
        self._matmul(act.act, n_rows, layer.down, act.x, A, accumulate=True)

    def _matmul(self, x_off, n_rows, w, y_off, A, bias=None, accumulate=False):
        F.matmul(self.ctx, A, x_off, n_rows, w.cols, w.buffer, w.offset, w.dtype, w.rows,
                 None if bias is None else bias.buffer, 0 if bias is None else bias.offset, A, y_off, accumulate)

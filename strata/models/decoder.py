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
from .. import env
from .fusion import GATE_UP, QKV, mixed_fusion_enabled, row_parts
from .spec import ModelSpec
from .weights import WeightArena


@dataclass(frozen=True)
class LayerWeights:
    attn_norm: object
    o: object
    ffn_norm: object
    down: object
    q: object = None            # unfused projections, where stored apart (the long way, QKNormDecoder)
    k: object = None
    v: object = None
    q_bias: object = None
    k_bias: object = None
    v_bias: object = None
    gate: object = None
    up: object = None
    # How the [q | k | v] and [gate | up] rows are produced (models/fusion.py row_parts): one
    # (weight, first column, matmul_ex params: RMSNORM prologue + that part's bias + the row's stride)
    # per stored matrix; () where the layer takes the long way.
    qkv_parts: tuple = ()
    gate_up_parts: tuple = ()


@dataclass(frozen=True)
class LayerHandoff:
    """matmul_ex params of one layer's activation hand-off chain (strata.h, handoff_*): attention prepares
    o's input (strata_attention_handoff; when `o_use` is set), o gate_up's, gate_up down's (one stored
    matrix only), down the next layer's qkv (not after the last layer). `qkv` / `gate_up`: params per
    stored matrix, as LayerWeights' parts; `o_use`: o's params when attention prepared its input, `o`
    when not (STRATA_FUSED_ATTENTION's call prepares nothing)."""
    qkv: tuple
    o: object
    gate_up: tuple
    down: object
    o_use: object = None


class Activations:
    """Scratch regions of one device buffer, sized for max_rows rows and max_logits sampled rows."""

    def __init__(self, ctx: F.Context, spec: ModelSpec, max_rows: int, max_logits: int):
        regions = {
            "x": max_rows * spec.hidden, "h": max_rows * spec.hidden,
            "q": max_rows * spec.q_dim, "k": max_rows * spec.kv_dim, "v": max_rows * spec.kv_dim,
            "att": max_rows * spec.q_dim, "gate": max_rows * spec.ffn, "up": max_rows * spec.ffn,
            "act": max_rows * spec.ffn, "xs": max_logits * spec.hidden, "logits": max_logits * spec.vocab,
            "qkv": max_rows * (spec.q_dim + 2 * spec.kv_dim), "gu": max_rows * 2 * spec.ffn,
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
    # The L2 hints of the step being recorded (record sets them; 0 / None outside it, so the split stages
    # and the MTP head, which call the blocks directly, issue none).
    _prefetch_mb: int = 0
    _prefetch_after = None
    # STRATA_MATMUL_CHAIN while `record` runs: whether this layer's o, gate_up and down form a matmul chain,
    # and whether one is open on the context now (with 2 it stays open into the next layer's qkv matmuls).
    _chain = False
    _chain_open = False

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
        self.silu_down = F.matmul_params(F.MatmulPrologue.SILU_MUL, accumulate=True)
        self.head_params = _norm_params(self.output_norm, spec.rms_eps)
        self._handoff = self._handoff_plan()

    # The current layer's hand-off params while `record` runs (None outside it: the split stages and the
    # MTP head call the blocks directly and take no hand-off), and the plan per layer ([]: none).
    _hp = None
    _handoff: list = []

    def _handoff_plan(self) -> list:
        """LayerHandoff per layer (None: that layer's matmuls each round their own input), or [] when
        STRATA_HANDOFF=off or a subclass replaces the blocks that run the chain."""
        cls = type(self)
        if handoff_mode() == "off" or cls._attention_block is not Decoder._attention_block \
                or cls._mlp_block is not Decoder._mlp_block:
            return []
        layers, P = self.layers, F.MatmulPrologue
        att = handoff_attention_enabled()
        fused = [bool(layer.qkv_parts and layer.gate_up_parts) for layer in layers]
        plan = []
        for i, layer in enumerate(layers):
            if not fused[i]:
                plan.append(None)
                continue
            use_qkv = i > 0 and fused[i - 1]
            qkv = tuple(F.matmul_params_handoff(params, handoff_use=use_qkv) for _, _, params in layer.qkv_parts)
            o_emit = dict(accumulate=True, handoff_emit=True, handoff_prologue=P.RMSNORM,
                          handoff_dtype=layer.gate_up_parts[0][0].dtype, handoff_norm_weight=layer.ffn_norm.buffer,
                          handoff_norm_weight_offset=layer.ffn_norm.offset)
            o = F.matmul_params(**o_emit)
            o_use = F.matmul_params(handoff_use=True, **o_emit) if att else None
            one = len(layer.gate_up_parts) == 1     # [gate | up] from one call: it can prepare down's input
            gate_up = tuple(F.matmul_params_handoff(params, handoff_use=True, handoff_emit=one,
                                                    handoff_prologue=P.SILU_MUL, handoff_dtype=layer.down.dtype)
                            for _, _, params in layer.gate_up_parts)
            nxt = layers[i + 1] if i + 1 < len(layers) and fused[i + 1] else None
            down = F.matmul_params_handoff(
                self.silu_down, handoff_use=one, handoff_emit=nxt is not None,
                handoff_prologue=P.RMSNORM if nxt is not None else P.NONE,
                handoff_dtype=nxt.qkv_parts[0][0].dtype if nxt is not None else 0,
                handoff_norm_weight=nxt.attn_norm.buffer if nxt is not None else None,
                handoff_norm_weight_offset=nxt.attn_norm.offset if nxt is not None else 0)
            plan.append(LayerHandoff(qkv=qkv, o=o, gate_up=gate_up, down=down, o_use=o_use))
        return plan

    def _layer(self, i: int) -> LayerWeights:
        w, p, s = self.weights, f"blk.{i}.", self.spec
        attn_norm, ffn_norm = w[p + "attn_norm.weight"], w[p + "ffn_norm.weight"]
        parts = dict(attn_norm=attn_norm, o=w[p + "attn_output.weight"], ffn_norm=ffn_norm,
                     down=w[p + "ffn_down.weight"])
        parts.update(q=w.get(p + "attn_q.weight"), k=w.get(p + "attn_k.weight"), v=w.get(p + "attn_v.weight"),
                     q_bias=w.get(p + "attn_q.bias"), k_bias=w.get(p + "attn_k.bias"),
                     v_bias=w.get(p + "attn_v.bias"), gate=w.get(p + "ffn_gate.weight"),
                     up=w.get(p + "ffn_up.weight"))
        parts.update(qkv_parts=self._row_parts(p, QKV, attn_norm, s.q_dim + 2 * s.kv_dim),
                     gate_up_parts=self._row_parts(p, GATE_UP, ffn_norm, 2 * s.ffn))
        return LayerWeights(**parts)

    def _row_parts(self, prefix: str, names: tuple[str, ...], norm, width: int) -> tuple:
        """(weight, first column, params) per stored matrix of a wide row, each a matmul_ex with `norm` fused
        in writing its columns of rows `width` apart; () unless they make exactly `width` columns over k = hidden."""
        w, eps = self.weights, self.spec.rms_eps
        recipe = row_parts(w.get, prefix, names)
        weights = [w[name + ".weight"] for name, _ in recipe]
        if not recipe or any(m.cols != self.spec.hidden for m in weights) or sum(m.rows for m in weights) != width:
            return ()
        if len(recipe) == len(names) > 1 and not mixed_fusion_enabled():
            return ()       # STRATA_FUSE_MIXED=0: parts of different types take the long way, as before
        stride = 0 if len(recipe) == 1 else width     # one matrix: the dense call, as before
        return tuple((m, column, _norm_params(norm, eps, w.get(name + ".bias"), stride))
                     for m, (name, column) in zip(weights, recipe))

    def record(self, io, act: Activations, slots: F.Slots, n_rows: int, n_decode: int, n_logits: int,
               inject=None, adjust=None) -> None:
        """Enqueues the forward pass and sampling for rows [0, n_rows) of `io`.

        `adjust` (a LogitTable) adds the per-row masks, bias and penalties before sampling:
        each sampled row reads its slot's table rows, picked by io.adjust (-1: untouched).
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
        self._prefetch_mb = l2_prefetch_mb(ctx)
        # STRATA_MATMUL_CHAIN: one row, the hand-off on, no prefetch hints (a chain allows matmul_ex alone).
        chain = chain_mode() if n_rows == 1 and self._prefetch_mb <= 0 else 0
        chains = [chain > 0 and bool(self._handoff) and self._handoff[i] is not None
                  and bool(layer.qkv_parts and layer.gate_up_parts) for i, layer in enumerate(self.layers)]
        try:
            for index, layer in enumerate(self.layers):
                self._hp = self._handoff[index] if self._handoff else None
                self._chain = chains[index]
                self._attention_block(index, layer, io, act, slots, n_rows)
                nxt = self.layers[index + 1] if index + 1 < len(self.layers) else None
                self._prefetch_after = (nxt.qkv_parts[0][0] if nxt is not None and nxt.qkv_parts
                                        else self.output if nxt is None else None)
                self._mlp_block(layer, act, n_rows)
                # 2: the chain stays open for the next layer's qkv matmuls (_qkv_attention ends it before rope).
                if not (chain == 2 and nxt is not None and chains[index + 1]):
                    self._end_chain()
        except BaseException:
            try:
                self._end_chain()  # the context must not stay in a chain; the first error is the one to report
            except F.StrataError:
                pass
            raise
        finally:
            self._prefetch_mb, self._prefetch_after, self._hp, self._chain = 0, None, None, False
        if n_logits == 0:
            return          # a prompt chunk that does not end its prompt: nothing to sample yet
        F.gather_rows(ctx, A, act.x, n_rows, s.hidden * 4, io_buf, io.logit_idx_off, n_logits, A, act.xs)
        o = self.output
        F.matmul_ex(ctx, self.head_params, A, act.xs, n_logits, s.hidden, o.buffer, o.offset, o.dtype, o.rows,
                    A, act.logits)
        if adjust is not None:
            F.logits_adjust(ctx, A, act.logits, n_logits, s.vocab, io_buf, io.adjust_off, adjust.buffer, 0,
                            adjust.n_slots)
        F.sample(ctx, A, act.logits, n_logits, s.vocab, io_buf, io.params_off, io_buf, io.out_off)

    def _attention_block(self, index, layer: LayerWeights, io, act, slots, n_rows):
        ctx, s, A = self.ctx, self.spec, act.buffer
        ff = self.freq_factors
        ff_buf, ff_off = (ff.buffer, ff.offset) if ff is not None else (None, 0)
        if layer.qkv_parts:   # a matmul per stored matrix (norm fused in) into [q | k | v], rope + store, attention
            width = s.q_dim + 2 * s.kv_dim
            self._prefetch(layer.o)
            hp = self._hp
            fused = getattr(io, "distinct_slots", False) and fused_attention_enabled()
            if len(layer.qkv_parts) == 1 and not fused and not self._chain_open:
                # One matrix for the whole [q | k | v] row: the matmul, rope and KV store as one call (one
                # kernel on CUDA at one row), then attention. The same bits as the calls below.
                w, _, params = layer.qkv_parts[0]
                F.matmul_rope_kv_store(ctx, hp.qkv[0] if hp else params, A, act.x, n_rows, s.hidden, w.buffer,
                                       w.offset, w.dtype, w.rows, A, act.qkv, self.rope_q, self.rope_k, slots, index,
                                       io.buffer, io.rows_off, ff_buf, ff_off)
                prepared = self._attend(index, layer, io, act, slots, act.qkv, width, n_rows)
            else:
                prepared = self._qkv_attention(index, layer, io, act, slots, n_rows, fused)
        else:
            self._unfused_attention(index, layer, act, io, slots, n_rows)
            prepared = False
        if layer.qkv_parts and layer.gate_up_parts:
            self._prefetch(layer.gate_up_parts[0][0])
        if self._hp is not None:  # o also prepares gate_up's input (the hand-off)
            o = layer.o
            if self._chain and not self._chain_open:  # o, gate_up and down between chain begin and end (_end_chain)
                F.matmul_chain_begin(ctx)
                self._chain_open = True
            F.matmul_ex(ctx, self._hp.o_use if prepared else self._hp.o, A, act.att, n_rows, o.cols, o.buffer,
                        o.offset, o.dtype, o.rows, A, act.x)
            return
        self._matmul(act.att, n_rows, layer.o, act.x, A, accumulate=True)

    def _end_chain(self) -> None:
        """Ends the matmul chain _attention_block opened for this layer, if any (the held calls run)."""
        if self._chain_open:
            self._chain_open = False
            F.matmul_chain_end(self.ctx)

    def _qkv_attention(self, index, layer: LayerWeights, io, act, slots, n_rows, fused: bool):
        """A matmul per stored matrix of [q | k | v] (norm fused in), then rope + store and attention: as one
        call for decode rows of distinct slots with STRATA_FUSED_ATTENTION, else two. Returns whether the
        attention call prepared o's input (_attend)."""
        ctx, s, A = self.ctx, self.spec, act.buffer
        ff = self.freq_factors
        ff_buf, ff_off = (ff.buffer, ff.offset) if ff is not None else (None, 0)
        width = s.q_dim + 2 * s.kv_dim
        hp = self._hp
        for j, (w, column, params) in enumerate(layer.qkv_parts):
            F.matmul_ex(ctx, hp.qkv[j] if hp else params, A, act.x, n_rows, s.hidden, w.buffer, w.offset,
                        w.dtype, w.rows, A, act.qkv + 4 * column)
        self._end_chain()  # STRATA_MATMUL_CHAIN=2: the previous layer's chain held these matmuls too
        if fused:
            # Decode rows of distinct slots: one call (one kernel on CUDA), the same bits.
            F.rope_kv_store_attention(ctx, self.rope_q, self.rope_k, slots, index, A, act.qkv, width, n_rows,
                                      io.buffer, io.rows_off, ff_buf, ff_off, self.scale, 0, A, act.att)
            return False
        F.rope_kv_store(ctx, self.rope_q, self.rope_k, slots, index, A, act.qkv, width, n_rows, io.buffer,
                        io.rows_off, ff_buf, ff_off)
        return self._attend(index, layer, io, act, slots, act.qkv, width, n_rows)

    def _attend(self, index, layer: LayerWeights, io, act, slots, q_off, q_stride, n_rows) -> bool:
        """Attention of the rows' queries (at q_off, q_stride apart) into act.att; also prepares o's input
        when the layer's hand-off plan asks for it (strata_attention_handoff). Returns whether it did."""
        ctx, s, A, hp = self.ctx, self.spec, act.buffer, self._hp
        if hp is not None and hp.o_use is not None:
            F.attention_handoff(ctx, slots, index, A, q_off, q_stride, n_rows, s.n_heads, io.buffer, io.rows_off,
                                self.scale, 0, layer.o.dtype, A, act.att)
            return True
        F.attention(ctx, slots, index, A, q_off, q_stride, n_rows, s.n_heads, io.buffer, io.rows_off,
                    self.scale, A, act.att)
        return False

    def _unfused_attention(self, index, layer: LayerWeights, act, io, slots, n_rows):
        """Separate norm, q / k / v matmuls, rope, store and attention (layers without fused qkv parts)."""
        ctx, s, A = self.ctx, self.spec, act.buffer
        ff = self.freq_factors
        ff_buf, ff_off = (ff.buffer, ff.offset) if ff is not None else (None, 0)
        n = layer.attn_norm
        F.rmsnorm(ctx, A, act.x, n.buffer, n.offset, A, act.h, n_rows, s.hidden, s.rms_eps)
        self._matmul(act.h, n_rows, layer.q, act.q, A, layer.q_bias)
        self._matmul(act.h, n_rows, layer.k, act.k, A, layer.k_bias)
        self._matmul(act.h, n_rows, layer.v, act.v, A, layer.v_bias)
        F.rope(ctx, self.rope_q, A, act.q, s.q_dim, n_rows, slots, io.buffer, io.rows_off, ff_buf, ff_off)
        F.rope(ctx, self.rope_k, A, act.k, s.kv_dim, n_rows, slots, io.buffer, io.rows_off, ff_buf, ff_off)
        F.kv_store(ctx, slots, index, A, act.k, s.kv_dim, A, act.v, s.kv_dim, io.buffer, io.rows_off, n_rows)
        F.attention(ctx, slots, index, A, act.q, s.q_dim, n_rows, s.n_heads, io.buffer, io.rows_off,
                    self.scale, A, act.att)

    def _mlp_block(self, layer: LayerWeights, act, n_rows):
        ctx, s, A = self.ctx, self.spec, act.buffer
        d = layer.down
        if layer.gate_up_parts:  # [gate | up] with the norm fused in; silu(gate) * up fused into down
            self._prefetch(d)
            hp = self._hp
            for j, (w, column, params) in enumerate(layer.gate_up_parts):
                F.matmul_ex(ctx, hp.gate_up[j] if hp else params, A, act.x, n_rows, s.hidden, w.buffer, w.offset,
                            w.dtype, w.rows, A, act.gu + 4 * column)
            self._prefetch(self._prefetch_after)
            F.matmul_ex(ctx, hp.down if hp else self.silu_down, A, act.gu, n_rows, s.ffn, d.buffer, d.offset,
                        d.dtype, d.rows, A, act.x)
            return
        n = layer.ffn_norm
        F.rmsnorm(ctx, A, act.x, n.buffer, n.offset, A, act.h, n_rows, s.hidden, s.rms_eps)
        self._matmul(act.h, n_rows, layer.gate, act.gate, A)
        self._matmul(act.h, n_rows, layer.up, act.up, A)
        F.silu_mul(ctx, A, act.gate, s.ffn, A, act.up, s.ffn, A, act.act, n_rows, s.ffn)
        self._matmul(act.act, n_rows, d, act.x, A, accumulate=True)

    def _prefetch(self, w) -> None:
        """Has the next matmul call bring up to STRATA_L2_PREFETCH_MB of `w` (the weights of the matmul after
        it) into the GPU's L2 (strata_matmul_prefetch; a hint, no result depends on it)."""
        mb = self._prefetch_mb
        if mb <= 0 or w is None:
            return
        values, block = F.dtype_block(w.dtype)
        n_bytes = min(w.rows * (w.cols // values) * block, mb << 20)
        F.matmul_prefetch(self.ctx, w.buffer, w.offset, n_bytes)

    def _matmul(self, x_off, n_rows, w, y_off, A, bias=None, accumulate=False):
        F.matmul(self.ctx, A, x_off, n_rows, w.cols, w.buffer, w.offset, w.dtype, w.rows,
                 None if bias is None else bias.buffer, 0 if bias is None else bias.offset, A, y_off, accumulate)


def l2_prefetch_mb(ctx: F.Context) -> int:
    """STRATA_L2_PREFETCH_MB (strata/env.py): how many MB of the next matmul's weights each one-row integer
    matmul asks the GPU's L2 for as it ends (0: none). Read when a step is recorded; CUDA only."""
    if not str(getattr(ctx, "device", "cpu")).startswith("cuda"):
        return 0
    return env.number("STRATA_L2_PREFETCH_MB", int, 0, 1024, "MB")


HANDOFF_MODES = ("off", "local", "1", "prepass")


def handoff_mode() -> str:
    """STRATA_HANDOFF (strata/env.py): local (default), off, 1 or prepass; read when a model is loaded. The
    decoder asks for the hand-off unless off; libstrata reads local / 1 / prepass itself (the figures
    behind the default: strata/env.py, bench/RESULTS.md)."""
    raw = (env.get("STRATA_HANDOFF") or "local").strip().lower()
    if raw not in HANDOFF_MODES:
        raise ValueError(f"STRATA_HANDOFF={raw!r}: expected one of {', '.join(HANDOFF_MODES)} (default local)")
    return raw


def handoff_attention_enabled() -> bool:
    """STRATA_HANDOFF_ATTENTION (strata/env.py): with the hand-off on, whether attention also prepares o's
    input (strata_attention_handoff). Read when a model is loaded; on (1) by default."""
    return env.switch("STRATA_HANDOFF_ATTENTION")


def chain_mode() -> int:
    """STRATA_MATMUL_CHAIN (strata/env.py): 0 = no matmul chain, 1 = each layer's one-row o, gate_up and down
    in one chain, 2 = also the next layer's qkv matmuls in it. Read when a step is recorded."""
    return env.number("STRATA_MATMUL_CHAIN", int, 0, 2)


def fused_attention_enabled() -> bool:
    """STRATA_FUSED_ATTENTION (strata/env.py): whether steps of distinct-slot decode rows fuse rope, the
    KV store and attention. Read when a step is recorded. Off by default: on the H200 (2026-12-02) the
    fused kernel made one-row decode slower (8B tg128 355 against 373 tok/s, 135M 755 against 794)."""
    return (env.get("STRATA_FUSED_ATTENTION") or "0").strip().lower() not in ("0", "false", "no", "off")


def _norm_params(norm, eps: float, bias=None, y_row_stride: int = 0):
    """matmul_ex options: RMSNorm with `norm`'s weight fused in front of the product (+ bias), y rows
    y_row_stride apart (0: dense)."""
    return F.matmul_params(F.MatmulPrologue.RMSNORM, eps=eps, norm_weight=norm.buffer, norm_weight_offset=norm.offset,
                           bias=None if bias is None else bias.buffer, bias_offset=0 if bias is None else bias.offset,
                           y_row_stride=y_row_stride)

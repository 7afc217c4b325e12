"""MtpHead: a model's multi-token-prediction ("nextn") layer, as DeepSeek-V3 / GLM-4.5 ship it.

The layer after the decoder's last one predicts the token after next: for the
main model's final hidden state h_i (before the output norm) and the next
token t_{i+1},

    x = E · enorm(embed(t_{i+1})) + H · hnorm(h_i)      (eh_proj = [E | H], split at load)
    x = block(x)                                         (one more decoder block, its own KV cache)
    logits = head(shared_head_norm(x))                   (the model's output head unless the layer has one)

and x, fed back with the drafted token, predicts the one after. GGUF names
(llama.cpp's): blk.L.nextn.{eh_proj, enorm, hnorm, shared_head_norm,
embed_tokens?, shared_head_head?} and the block's usual blk.L.* tensors, with
L = block_count - nextn_predict_layers. `split_nextn` turns eh_proj into the
two [hidden, hidden] halves at load time (a byte slice of each row, so any
block type whose block divides hidden).
"""

from __future__ import annotations

import numpy as np

from .. import _ffi as F
from .gguf_spec import ModelFormatError, TensorInfo

REQUIRED = ("eh_proj", "enorm", "hnorm", "shared_head_norm")


def nextn_prefix(layer: int) -> str:
    return f"blk.{layer}.nextn."


def split_nextn(tensors: dict[str, TensorInfo], layer: int) -> dict[str, TensorInfo]:
    """Replaces blk.L.nextn.eh_proj [hidden, 2 hidden] by eh_proj_e and eh_proj_h [hidden, hidden]."""
    p = nextn_prefix(layer)
    missing = [n for n in REQUIRED if f"{p}{n}.weight" not in tensors]
    if missing:
        raise ModelFormatError(f"the nextn layer {layer} lacks {', '.join(p + m + '.weight' for m in missing)}")
    w = tensors[f"{p}eh_proj.weight"]
    rows, cols = w.shape
    if cols != 2 * rows:
        raise ModelFormatError(f"{p}eh_proj.weight is {rows}x{cols}; a nextn projection is [hidden, 2 hidden]")
    block, block_bytes = F.dtype_block(w.dtype)
    if rows % block:
        raise ModelFormatError(f"{p}eh_proj.weight: hidden {rows} is not a multiple of its type's block {block}")
    data = np.ascontiguousarray(w.data).reshape(-1).view(np.uint8).reshape(rows, -1)   # [hidden, row bytes]
    half = data.shape[1] // 2
    out = dict(tensors)
    del out[f"{p}eh_proj.weight"]
    for suffix, part in (("e", data[:, :half]), ("h", data[:, half:])):
        name = f"{p}eh_proj_{suffix}.weight"
        out[name] = TensorInfo(name, w.dtype, (rows, rows), np.ascontiguousarray(part).reshape(-1))
    return out


class MtpHead:
    """The nextn layer's weights on the device and one batched pass over it."""

    def __init__(self, decoder, layer: int, vocab_subset: int | None = None):
        spec, w, p = decoder.spec, decoder.weights, nextn_prefix(layer)
        self.decoder, self.spec, self.layer_index = decoder, spec, layer
        self.embedding = w.get(p + "embed_tokens.weight") or decoder.embedding
        self.e_proj, self.h_proj = w[p + "eh_proj_e.weight"], w[p + "eh_proj_h.weight"]
        self.block = decoder._layer(layer)
        self.head = w.get(p + "shared_head_head.weight") or decoder.output
        norm = lambda n, acc: F.matmul_params(F.MatmulPrologue.RMSNORM, accumulate=acc, eps=spec.rms_eps,
                                              norm_weight=w[p + n].buffer, norm_weight_offset=w[p + n].offset)
        self.e_params = norm("enorm.weight", False)
        self.h_params = norm("hnorm.weight", True)
        self.head_params = norm("shared_head_norm.weight", False)
        # A head over the first n_vocab rows only: ids past them are never drafted.
        self.n_vocab = min(vocab_subset or spec.vocab, spec.vocab)

    def record(self, io, act, slots, n_rows: int, n_decode: int, hidden, hidden_off: int, n_logits: int) -> None:
        """One pass for rows [0, n_rows) of `io` (ids: the next tokens; rows: {slot, cell}) whose input
        hidden states are rows of `hidden` at hidden_off; rows [0, n_decode) get their positions from
        the slot's delta, the others' are in the table. Leaves the block output in act.x and the
        sampled drafts of io.logit_idx's rows in io's output."""
        ctx, s, A, d = self.decoder.ctx, self.spec, act.buffer, self.decoder
        if n_decode:
            F.positions_decode(ctx, slots, io.buffer, io.rows_off, n_decode)
        e = self.embedding
        # act.h holds the embeddings until the projection (the block uses it only afterwards)
        F.embed(ctx, e.buffer, e.offset, e.dtype, s.vocab, s.hidden, io.buffer, io.ids_off, n_rows, A, act.h)
        F.matmul_ex(ctx, self.e_params, A, act.h, n_rows, s.hidden, self.e_proj.buffer, self.e_proj.offset,
                    self.e_proj.dtype, s.hidden, A, act.x)
        F.matmul_ex(ctx, self.h_params, hidden, hidden_off, n_rows, s.hidden, self.h_proj.buffer,
                    self.h_proj.offset, self.h_proj.dtype, s.hidden, A, act.x)
        d._attention_block(0, self.block, io, act, slots, n_rows)
        d._mlp_block(self.block, act, n_rows)
        if n_logits == 0:
            return
        F.gather_rows(ctx, A, act.x, n_rows, s.hidden * 4, io.buffer, io.logit_idx_off, n_logits, A, act.xs)
        o = self.head
        F.matmul_ex(ctx, self.head_params, A, act.xs, n_logits, s.hidden, o.buffer, o.offset, o.dtype,
                    self.n_vocab, A, act.logits)
        F.sample(ctx, A, act.logits, n_logits, self.n_vocab, io.buffer, io.params_off, io.buffer, io.out_off)

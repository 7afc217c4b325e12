"""Writes a tiny random-weight llama GGUF that carries one nextn (multi-token-prediction) layer.

llama.cpp's layout: block_count counts the nextn layer, `llama.nextn_predict_layers` says how many
of the last blocks are nextn layers, and the layer's extra tensors are blk.L.nextn.*. The
tokenizer is SmolLM2's (strata synth's copy), so the default model's prompts work unchanged.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter
from gguf.quants import quantize

from strata.synth.tokenizer import add_tokenizer_keys, find_tokenizer_gguf, read_tokenizer_fields, resize_vocab

HIDDEN, HEADS, KV_HEADS, FFN, LAYERS, VOCAB = 64, 4, 2, 128, 2, 49152


def write_mtp_gguf(path: Path, dtype: str = "F16", seed: int = 0, nextn: bool = True, vocab: int = VOCAB) -> Path:
    """dtype: F16 or Q4_0 for every matrix (the nextn layer included); norms F32."""
    rng = np.random.default_rng(seed)
    qtype = GGMLQuantizationType[dtype]
    writer = GGUFWriter(path, "llama")
    writer.add_name(f"tiny mtp test model {dtype}")
    writer.add_context_length(2048)
    writer.add_embedding_length(HIDDEN)
    writer.add_block_count(LAYERS + int(nextn))
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(HIDDEN // HEADS)
    writer.add_rope_freq_base(10000.0)
    if nextn:
        writer.add_uint32("llama.nextn_predict_layers", 1)
    add_tokenizer_keys(writer, resize_vocab(read_tokenizer_fields(find_tokenizer_gguf(None)), vocab))

    def matrix(name: str, rows: int, cols: int, std: float = 0.08) -> None:
        data = (rng.standard_normal((rows, cols)) * std).astype(np.float32)
        if qtype == GGMLQuantizationType.F16:
            writer.add_tensor(name, data.astype(np.float16))
        else:
            writer.add_tensor(name, quantize(data, qtype), raw_dtype=qtype)

    def norm(name: str) -> None:
        writer.add_tensor(name, (1.0 + 0.1 * rng.standard_normal(HIDDEN)).astype(np.float32))

    head_dim, kv = HIDDEN // HEADS, KV_HEADS * (HIDDEN // HEADS)
    matrix("token_embd.weight", vocab, HIDDEN, std=1.0)
    matrix("output.weight", vocab, HIDDEN, std=0.05)      # logits of a few units: seeded sampling varies
    norm("output_norm.weight")
    for i in range(LAYERS + int(nextn)):
        p = f"blk.{i}."
        norm(p + "attn_norm.weight")
        matrix(p + "attn_q.weight", HEADS * head_dim, HIDDEN)
        matrix(p + "attn_k.weight", kv, HIDDEN)
        matrix(p + "attn_v.weight", kv, HIDDEN)
        matrix(p + "attn_output.weight", HIDDEN, HEADS * head_dim)
        norm(p + "ffn_norm.weight")
        matrix(p + "ffn_gate.weight", FFN, HIDDEN)
        matrix(p + "ffn_up.weight", FFN, HIDDEN)
        matrix(p + "ffn_down.weight", HIDDEN, FFN)
    if nextn:
        p = f"blk.{LAYERS}.nextn."
        matrix(p + "eh_proj.weight", HIDDEN, 2 * HIDDEN)
        norm(p + "enorm.weight")
        norm(p + "hnorm.weight")
        norm(p + "shared_head_norm.weight")
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path

"""Random-weight checkpoints written by transformers, converted to GGUF with the gguf package's writer.

`write_case(case, directory)` builds a tiny transformers model (seeded random
weights), quantizes each matrix to the case's GGUF type, puts the dequantized
values back into the transformers model (so both sides run the same weights),
and writes a GGUF the way llama.cpp's converter lays it out: tensor names,
`llama`'s Q/K row permutation for adjacent-pair RoPE, Llama 3's `rope_freqs`
factors, F32 norms, and SmolLM2's tokenizer metadata (the tests feed ids).
Returns (gguf path, transformers model).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

NAMES = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
         "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm",
         "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
         "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}


@dataclass
class Case:
    name: str
    arch: str                                   # GGUF architecture
    config: dict                                # transformers config keyword arguments
    types: dict = field(default_factory=dict)   # GGUF part name -> quant type name (default: default_type)
    default_type: str = "Q8_0"
    vocab: int = 2048


def _permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's converter: rows of each head reordered from half-split to adjacent pairs."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _config(case: Case):
    import transformers

    classes = {"llama": transformers.LlamaConfig, "qwen2": transformers.Qwen2Config, "qwen3": transformers.Qwen3Config}
    return classes[case.arch](vocab_size=case.vocab, **case.config)


def write_case(case: Case, directory):
    import gguf
    import torch
    import transformers
    from gguf.quants import dequantize, quantize

    from strata.synth.tokenizer import add_tokenizer_keys, find_tokenizer_gguf, read_tokenizer_fields, resize_vocab

    torch.manual_seed(sum(map(ord, case.name)))
    config = _config(case)
    config._attn_implementation = "eager"
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():   # wider than the default init, so logits are far from uniform
        for key, p in model.named_parameters():
            noise = torch.randn_like(p)
            p.copy_(1.0 + 0.1 * noise if "norm" in key else 0.1 * noise if key.endswith("bias") else 0.15 * noise)
    state = {k: v.detach().numpy().astype(np.float32) for k, v in model.state_dict().items()}

    path = directory / f"{case.name}.gguf"
    writer = gguf.GGUFWriter(str(path), case.arch)
    c = config
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    writer.add_context_length(c.max_position_embeddings)
    writer.add_embedding_length(c.hidden_size)
    writer.add_block_count(c.num_hidden_layers)
    writer.add_feed_forward_length(c.intermediate_size)
    writer.add_head_count(c.num_attention_heads)
    writer.add_head_count_kv(c.num_key_value_heads)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_rope_dimension_count(head_dim)
    rope = getattr(c, "rope_parameters", None) or {}
    writer.add_rope_freq_base(float(rope.get("rope_theta", getattr(c, "rope_theta", 10000.0))))
    writer.add_layer_norm_rms_eps(c.rms_norm_eps)
    writer.add_vocab_size(case.vocab)
    add_tokenizer_keys(writer, resize_vocab(read_tokenizer_fields(find_tokenizer_gguf()), case.vocab))

    hf_state = {}
    for key, values in state.items():
        if key == "lm_head.weight" and c.tie_word_embeddings:
            continue
        if key == "model.embed_tokens.weight":
            name = "token_embd"
        elif key == "lm_head.weight":
            name = "output"
        elif key == "model.norm.weight":
            name = "output_norm"
        else:
            _, _, layer, rest = key.split(".", 3)
            part, kind = rest.rsplit(".", 1)
            name = f"blk.{layer}.{NAMES[part]}"
            if kind == "bias":
                writer.add_tensor(name + ".bias", values)
                hf_state[key] = values
                continue
        if values.ndim == 1:
            writer.add_tensor(name + ".weight", values)
            hf_state[key] = values
            continue
        qtype = gguf.GGMLQuantizationType[case.types.get(name.split(".")[-1], case.default_type)]
        raw = quantize(values, qtype)
        hf_state[key] = dequantize(raw, qtype).astype(np.float32).reshape(values.shape)
        if case.arch == "llama" and name.endswith(("attn_q", "attn_k")):
            heads = c.num_attention_heads if name.endswith("attn_q") else c.num_key_value_heads
            raw = _permute(raw, heads)   # rows are whole blocks, so permuting rows commutes with quantizing
        writer.add_tensor(name + ".weight", raw, raw_dtype=qtype)
    if case.arch == "llama" and rope.get("rope_type") == "llama3":
        base = 1.0 / (float(rope["rope_theta"]) ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))
        scaled = transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS["llama3"](config, "cpu")[0].double().numpy()
        writer.add_tensor("rope_freqs.weight", (base / scaled).astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()

    with torch.no_grad():
        missing, unexpected = model.load_state_dict({k: torch.from_numpy(v) for k, v in hf_state.items()}, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
    if c.tie_word_embeddings:
        model.tie_weights()
    return path, model

"""transformers' Gemma 3 as the reference for the real gemma3-270m GGUF.

The GGUF's tensors are dequantized to float32 by the `gguf` package and loaded
into transformers' Gemma3ForCausalLM, built from the file's hyperparameters
and transformers' own Gemma 3 defaults (layer pattern, local RoPE base, query
scale); llama.cpp's (1 + w) norm weights get their 1 back off. This is what
`from_pretrained(gguf_file=...)` does, without its slow metadata reader.
Eager attention, so the sliding window is transformers' own mask.
"""

from __future__ import annotations

import numpy as np

HF_NAMES = {
    "attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm", "post_attention_norm": "post_attention_layernorm",
    "ffn_norm": "pre_feedforward_layernorm", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj", "post_ffw_norm": "post_feedforward_layernorm",
}


def load_reference(path):
    import torch
    import transformers
    from gguf.quants import dequantize

    from strata.models.gguf_spec import field_value, open_reader

    reader = open_reader(path)
    meta = lambda key: field_value(reader, f"gemma3.{key}")  # noqa: E731
    config = transformers.Gemma3TextConfig(
        vocab_size=len(reader.get_field("tokenizer.ggml.tokens").data), hidden_size=int(meta("embedding_length")),
        intermediate_size=int(meta("feed_forward_length")), num_hidden_layers=int(meta("block_count")),
        num_attention_heads=int(meta("attention.head_count")), num_key_value_heads=int(meta("attention.head_count_kv")),
        head_dim=int(meta("attention.key_length")), max_position_embeddings=int(meta("context_length")),
        rms_norm_eps=float(meta("attention.layer_norm_rms_epsilon")), sliding_window=int(meta("attention.sliding_window")),
        rope_theta=float(meta("rope.freq_base")), tie_word_embeddings=True,
        bos_token_id=2, eos_token_id=1, pad_token_id=0)
    config._attn_implementation = "eager"
    state = {}
    for t in reader.tensors:
        values = dequantize(np.asarray(t.data), t.tensor_type).astype(np.float32)
        values = values.reshape([int(n) for n in reversed(list(t.shape))])
        name = t.name.removesuffix(".weight")
        if name == "token_embd":
            key = "model.embed_tokens"
        elif name == "output_norm":
            key = "model.norm"
        else:
            _, layer, part = name.split(".", 2)
            key = f"model.layers.{layer}.{HF_NAMES[part]}"
        if name.endswith("norm"):
            values = values - np.float32(1)
        state[key + ".weight"] = torch.from_numpy(np.ascontiguousarray(values))
    model = transformers.Gemma3ForCausalLM(config)
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
    model.tie_weights()
    return model.eval()


def round_integer_path_inputs(model, path, dtypes):
    """Makes `model` (load_reference's) round the input of every layer matrix whose GGUF type is in
    `dtypes` the way CUDA's integer matmul rounds activations (libstrata/src/cuda/cuda_int_matmul.cu):
    per 32 values, step = float32(max|x| / 127), x / step rounded half to even and clamped to ±127,
    the block 0 when the step is 0 or not finite; the matmul then sees step · q. The tied head
    (token_embd) is left float: tests/int8_head.py bounds its rounding instead. Returns the forward
    pre-hook handles (.remove() each to undo)."""
    import torch

    from strata.models.gguf_spec import open_reader

    wanted = {int(d) for d in dtypes}

    def rounded(_module, args):
        x = args[0]
        blocks = x.reshape(*x.shape[:-1], x.shape[-1] // 32, 32)
        a = blocks.abs()
        a = torch.where(a <= torch.finfo(torch.float32).max, a, torch.full_like(a, float("inf")))
        step = a.amax(dim=-1, keepdim=True) / torch.tensor(127.0, dtype=x.dtype)
        usable = (step > 0) & torch.isfinite(step)
        q = torch.clamp(torch.round(blocks / torch.where(usable, step, torch.ones_like(step))), -127, 127)
        return (torch.where(usable, q * step, torch.zeros_like(q)).reshape(x.shape),) + tuple(args[1:])

    handles = []
    for t in open_reader(path).tensors:
        name = t.name.removesuffix(".weight")
        if int(t.tensor_type) not in wanted or name == "token_embd" or name.endswith("norm"):
            continue
        _, layer, part = name.split(".", 2)
        module = model.get_submodule(f"model.layers.{layer}.{HF_NAMES[part]}")
        handles.append(module.register_forward_pre_hook(rounded))
    return handles

"""transformers as the reference: processor inputs, and greedy decoding with the logits of every step.

Pixel values come from transformers' own `Qwen2VLImageProcessorPil` (PyPI
torchvision doesn't import beside this torch, so not the torchvision class);
image pads are already expanded in the prompt ids we pass. Each step runs the
whole sequence again (no cache), so positions come from transformers'
get_rope_index every time.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

F16_CACHE = "strata_f16_cache"


def register_f16_cache_attention() -> str:
    """An attention implementation that rounds K and V to float16 first, like Strata's KV cache."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask
    from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import eager_attention_forward

    def attention(module, query, key, value, attention_mask, **kwargs):
        return eager_attention_forward(module, query, key.half().float(), value.half().float(), attention_mask,
                                       **kwargs)

    AttentionInterface.register(F16_CACHE, attention)
    AttentionMaskInterface.register(F16_CACHE, eager_mask)
    return F16_CACHE


def processor_inputs(checkpoint: Path, images: list) -> dict:
    """pixel_values and image_grid_thw from transformers' processor, or {} without images."""
    if not images:
        return {}
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    config = json.loads((checkpoint / "preprocessor_config.json").read_text())
    config = {k: v for k, v in config.items() if k not in ("image_processor_type", "processor_class")}
    out = Qwen2VLImageProcessorPil(**config)(images=images, return_tensors="pt")
    return {"pixel_values": out["pixel_values"], "image_grid_thw": out["image_grid_thw"]}


def greedy(model, prompt_ids: list[int], inputs: dict, n_tokens: int, image_pad_id: int):
    """(token ids, logits float32 [n_tokens, vocab]) of greedy decoding."""
    import torch

    ids, rows = list(prompt_ids), []
    with torch.no_grad():
        for _ in range(n_tokens):
            x = torch.tensor([ids])
            out = model(input_ids=x, mm_token_type_ids=(x == image_pad_id).int(), logits_to_keep=1, **inputs)
            row = out.logits[0, -1].float().numpy()
            rows.append(row)
            ids.append(int(row.argmax()))
    return ids[len(prompt_ids):], np.stack(rows)

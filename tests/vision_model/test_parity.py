"""Golden tests: Strata's Qwen2.5-VL (decoder + vision encoder + M-RoPE + injection) against transformers.

Four conversations — text only, one image, two images of different grids,
an image in an earlier turn — are served by the Engine (chunked prefill, so
image rows straddle chunk boundaries) and decoded greedily. Tokens must equal
transformers' greedy tokens, and the logits of every step must be close to
two references: transformers as is (float32 K/V), and transformers with K
and V rounded to float16 first, as Strata's KV cache stores them — the
second isolates everything else and gets a tolerance 10x tighter.
"""

from __future__ import annotations

import numpy as np
import pytest

from .harness import GREEDY, Job, drive, encode, picture, user
from .reference import greedy, processor_inputs
from .tiny_checkpoint import IMAGE_PAD

CAT, WIDE, TALL = picture(170, 140, 1), picture(200, 90, 2), picture(60, 130, 3)
CONVERSATIONS = {
    "text_only": ([user("the cat sat on the mat; what is there?")], []),
    "one_image": ([user("what is in ", CAT, " this picture?")], [CAT]),
    "two_images": ([user(WIDE, "and", TALL, "which one is taller?")], [WIDE, TALL]),
    "image_in_earlier_turn": ([user(CAT, "describe it"), {"role": "assistant", "content": "an orange cat"},
                               user("and what is behind the cat?")], [CAT]),
}
TOLERANCE = 3e-3             # against float32 K/V (Strata's cache is float16)
TOLERANCE_F16_CACHE = 3e-4   # against the same float16 rounding of K/V


@pytest.mark.parametrize("name", list(CONVERSATIONS))
async def test_logits_and_greedy_tokens_match_transformers(make_engine, checkpoint, hf_model, hf_model_f16_cache,
                                                           name):
    messages, images = CONVERSATIONS[name]
    engine = make_engine(batch=1, chunk=16)
    inputs = await encode(engine, messages)
    hf_inputs = processor_inputs(checkpoint, images)
    if images:
        assert list(inputs.vision.grids) == [tuple(g) for g in hf_inputs["image_grid_thw"].tolist()]
    ours = (await drive(engine, [Job(name, inputs)]))[name]
    assert ours.error is None and len(ours.tokens) == GREEDY.max_tokens
    report = {}
    for label, model, tolerance in (("transformers", hf_model, TOLERANCE),
                                    ("transformers, f16 K/V", hf_model_f16_cache, TOLERANCE_F16_CACHE)):
        tokens, logits = greedy(model, inputs.prompt_ids, hf_inputs, GREEDY.max_tokens, IMAGE_PAD)
        assert ours.tokens == tokens, f"{name}: greedy tokens differ from {label}"
        error = float(np.abs(ours.logits - logits).max())
        report[label] = error
        assert error < tolerance, f"{name}: max |logit error| {error:.2e} vs {label} exceeds {tolerance:.0e}"
    print(f"\n{name} ({len(inputs.prompt_ids)} prompt tokens): max |logit error| "
          + ", ".join(f"{k} {v:.2e}" for k, v in report.items()))


@pytest.mark.parametrize("grid_image", [picture(56, 56, 4), picture(170, 140, 5), picture(220, 220, 6)],
                         ids=["1x1_windows", "2x2_windows_partial", "2x2_windows_full"])
def test_vision_encoder_matches_transformers(loaded, checkpoint, hf_model, grid_image):
    import torch

    _, model = loaded
    hf_inputs = processor_inputs(checkpoint, [grid_image])
    grid = tuple(hf_inputs["image_grid_thw"][0].tolist())
    pixels = hf_inputs["pixel_values"].numpy()
    ours = model.vision.encode(pixels, grid)
    with torch.no_grad():
        reference = hf_model.model.visual(hf_inputs["pixel_values"], grid_thw=hf_inputs["image_grid_thw"])
    reference = reference.pooler_output.numpy()
    error = float(np.abs(ours - reference).max())
    print(f"\nvision encoder grid {grid}: max |error| {error:.2e} (max |value| {np.abs(reference).max():.2f})")
    assert ours.shape == reference.shape and error < 1e-5

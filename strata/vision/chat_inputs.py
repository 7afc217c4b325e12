"""OpenAI chat messages, image_url parts included, to what Engine.submit takes.

  messages --chat template--> text with <|vision_start|><|image_pad|><|vision_end|> per image
           --tokenizer--> ids; each image's single pad repeated n_merged_tokens times
  image_url --media (MediaLimits)--> PIL image --preprocess--> patch rows, grid
            --vision encoder, on the device between engine steps--> embeddings
  ids + grids --mrope--> positions, rope_delta;  the whole record --validate_record--> EngineInput

Cheap checks run before the encoder: the image count, the placeholder count,
the prompt length. Every refusal is a VisionError (HTTP 400 in the server)
raised before submission, so no engine state changes. A model without a
vision tower refuses image parts.
"""

from __future__ import annotations

from functools import partial

import anyio
import numpy as np

from strata.vision.engine_inputs import EngineInput, record_limits, to_engine_input
from strata.vision.errors import VisionError
from strata.vision.media import MediaLimits, collect_image_urls, load_processed_images
from strata.vision.mrope import mrope_positions
from strata.vision.preprocess import PreprocessedImage, preprocess_image
from strata.vision.records import ImageEmbedding, VisionRecord, validate_record


async def chat_inputs(engine, messages: list[dict], limits: MediaLimits, *, template_kwargs: dict | None = None,
                      client=None, run_cpu=None) -> EngineInput:
    """The prompt (and images) of a chat request, validated; raises VisionError or ChatTemplateError.

    run_cpu: `await run_cpu(fn)` runs CPU work (templating, tokenizing, decoding) off the event loop; the server
    passes its bounded worker pool, the default is anyio's thread pool.
    """
    run_cpu = run_cpu or anyio.to_thread.run_sync
    model = engine.model
    urls = collect_image_urls(messages, limits)
    if urls and model.vision is None:
        raise VisionError(f"the model {model.name!r} reads text only; send text content, or serve a vision model "
                          "(e.g. Qwen2.5-VL)", "images_not_supported")
    text = await run_cpu(partial(model.chat_template.render, messages, add_generation_prompt=True,
                                 **(template_kwargs or {})))
    ids = await run_cpu(partial(engine.tokenizer.encode, text, add_special=False))
    if not urls:
        return EngineInput(ids)
    encoder = model.vision
    # decoded and preprocessed one at a time (media's decode bound): only the patch rows are kept
    processed = await load_processed_images(urls, limits, partial(preprocess_image, config=encoder.preprocess), client)
    ids = expand_image_pads(ids, [p.n_merged_tokens for p in processed], encoder.spec.image_pad_id)
    n_ctx = engine.config.ctx
    if len(ids) >= n_ctx:
        raise VisionError(f"the prompt with its images has {len(ids)} tokens but a slot holds {n_ctx} "
                          f"(at most {n_ctx - 1}); send smaller or fewer images", "context_length_exceeded")
    embeddings = [await engine.run_on_device(encoder.encode, p.pixels, p.grid_thw) for p in processed]
    record = build_record(ids, processed, embeddings, encoder.spec)
    validate_record(record, record_limits(model, n_ctx, limits.max_images_per_request))
    return to_engine_input(record, encoder.spec.image_pad_id)


def expand_image_pads(ids: list[int], counts: list[int], image_pad_id: int) -> list[int]:
    """Each image's single placeholder token repeated to the image's number of merged tokens."""
    pads = [i for i, t in enumerate(ids) if t == image_pad_id]
    if len(pads) != len(counts):
        raise VisionError(f"the chat template placed {len(pads)} image placeholders for {len(counts)} images; "
                          "image placeholders may only come from image content parts", "invalid_image_placeholder")
    out, last = [], 0
    for at, count in zip(pads, counts):
        out += ids[last:at] + [image_pad_id] * count
        last = at + 1
    return out + ids[last:]


def build_record(ids: list[int], processed: list[PreprocessedImage], embeddings: list[np.ndarray],
                 spec) -> VisionRecord:
    grids = [p.grid_thw for p in processed]
    mrope = mrope_positions(ids, grids, image_pad_id=spec.image_pad_id, vision_start_id=spec.vision_start_id,
                            spatial_merge_size=spec.merge_size)
    images = [ImageEmbedding(e, g) for e, g in zip(embeddings, grids)]
    return VisionRecord(np.asarray(ids, dtype=np.int64), mrope.positions, mrope.rope_delta, images)

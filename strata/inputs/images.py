"""The images of a chat prompt: image_url parts to the rows, positions and ids Engine.submit takes.

  ids (one <|image_pad|> per image, from inputs.prompt)
  image_url --media (MediaLimits)--> PIL image --preprocess--> patch rows, grid
            --vision encoder, on the device between engine steps--> embeddings
  each image's pad repeated n_merged_tokens times; ids + grids --mrope--> positions, rope_delta
  the whole record --> EngineInput, with a digest of each embedding row for the prefix cache's keys

Cheap checks run before the encoder: the placeholder count and the prompt
length (the engine's own check on the expanded ids). The record itself is
validated once, by Engine.submit (the check the vision model hands the
engine), whoever built it. Every refusal comes before anything touches a slot.
"""

from __future__ import annotations

import dataclasses
from functools import partial

import anyio
import numpy as np

from strata.vision.errors import VisionError
from strata.vision.media import MediaLimits, load_processed_images
from strata.vision.mrope import mrope_positions
from strata.vision.preprocess import PreprocessedImage, preprocess_image
from strata.engine.page_salt import row_digests
from strata.vision.records import ImageEmbedding, VisionRecord

from .engine_input import EngineInput, from_record


async def image_input(engine, ids: list[int], urls: list[str], limits: MediaLimits, client=None,
                      run_cpu=None) -> EngineInput:
    """The input of a prompt whose template placed one pad per URL in `urls` (its record checked at submit).
    Each image is decoded and preprocessed before the next is read (within media's process-wide decode
    bound), so a request holds patch rows, never all its decoded images at once."""
    encoder = engine.model.vision
    processed = await load_processed_images(urls, limits, partial(preprocess_image, config=encoder.preprocess),
                                            client, run_cpu)
    ids = expand_image_pads(ids, [p.n_merged_tokens for p in processed], encoder.spec.image_pad_id)
    engine.check_prompt(ids)
    embeddings = [await engine.run_on_device(encoder.encode, p.pixels, p.grid_thw) for p in processed]
    inputs = from_record(build_record(ids, processed, embeddings, encoder.spec), encoder.spec.image_pad_id)
    # Hashed here, off the event loop and off the device, so admission hashes 16 bytes a row (page_salt.py).
    digests = await (run_cpu or anyio.to_thread.run_sync)(row_digests, inputs.vision.embeddings)
    return dataclasses.replace(inputs, vision=dataclasses.replace(inputs.vision, row_digests=digests))


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

"""The check a vision model gives the engine: is a submitted (prompt, positions, images) a sound record?

`check_submission` is what Engine.submit runs for a model with a vision
tower (the encoder hands it over, bound to the model's limits), whoever built
the request: it rebuilds the record from the submitted pieces and runs
`validate_record` on it, so a malformed record is refused with a
VisionRecordError before it can touch a slot (docs/design.md, invariant 3).
`record_limits` is what a loaded model accepts.
"""

from __future__ import annotations

import numpy as np

from strata.vision.errors import VisionRecordError
from strata.vision.mrope import merged_grid, mrope_positions
from strata.vision.records import ImageEmbedding, RecordLimits, VisionRecord, validate_record


def record_limits(encoder, text_spec, n_ctx: int, max_images: int = 8) -> RecordLimits:
    """What a model accepts: its vision encoder's limits beside its text model's (spec.hidden, spec.vocab)."""
    spec = encoder.spec
    return RecordLimits(hidden_size=text_spec.hidden, n_ctx=n_ctx, vocab_size=text_spec.vocab,
                        image_pad_id=spec.image_pad_id, vision_start_id=spec.vision_start_id,
                        merge_size=spec.merge_size, max_patches=encoder.max_patches, max_images=max_images)


def check_submission(prompt_ids: list[int], positions, rope_delta, vision, limits: RecordLimits) -> None:
    """Raises VisionRecordError unless (prompt, positions, rope_delta, images) is a sound record."""
    ids = np.asarray(prompt_ids, dtype=np.int64)
    if positions is None and vision is None:
        try:
            positions = mrope_positions(ids, [], image_pad_id=limits.image_pad_id,
                                        vision_start_id=limits.vision_start_id).positions
        except VisionRecordError as exc:
            raise VisionRecordError(f"vision record: {exc.message}") from None
    images = _images(vision, limits)
    validate_record(VisionRecord(ids, positions, rope_delta, images), limits)
    if vision is not None:
        token_rows = np.asarray(vision.token_rows)
        expected = np.flatnonzero(ids == limits.image_pad_id)
        if token_rows.shape != expected.shape or not np.array_equal(token_rows, expected):
            raise VisionRecordError("vision record: token_rows must list the prompt indices of every image pad "
                                    "token, in order")


def _images(vision, limits: RecordLimits) -> list[ImageEmbedding]:
    if vision is None:
        return []
    embeddings, grids = vision.embeddings, vision.grids
    if not isinstance(embeddings, np.ndarray) or embeddings.ndim != 2:
        raise VisionRecordError("vision record: embeddings must be a 2-D float32 array")
    if not isinstance(grids, (list, tuple)) or not grids:
        raise VisionRecordError("vision record: each image needs its grid (t, h, w)")
    images, first = [], 0
    for index, grid in enumerate(grids):
        try:
            t, h, w = merged_grid(tuple(grid), limits.merge_size)
        except (VisionRecordError, TypeError) as exc:
            raise VisionRecordError(f"vision record: image {index}: {exc}") from None
        images.append(ImageEmbedding(embeddings[first: first + t * h * w], tuple(grid)))
        first += t * h * w
    if first != len(embeddings):
        raise VisionRecordError(f"vision record: the grids need {first} embedding rows but {len(embeddings)} "
                                "were given")
    return images

"""The boundary between vision records and the engine's requests.

`to_engine_input` turns a validated VisionRecord into what Engine.submit
takes: prompt ids, positions, rope_delta and a VisionInput (all images'
embedding rows in prompt order, the prompt indices they replace, the grids).
`check_submission` is what Engine.submit runs for a vision model, whoever
built the request: it rebuilds the record from the submitted pieces and runs
`validate_record` on it, so a malformed record is refused with a
VisionRecordError before it can touch a slot (DESIGN invariant 3).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from strata.vision.errors import VisionRecordError
from strata.vision.mrope import merged_grid, mrope_positions
from strata.vision.records import ImageEmbedding, RecordLimits, VisionRecord, validate_record


@dataclass(frozen=True)
class EngineInput:
    prompt_ids: list[int]
    positions: np.ndarray | None = None   # int32 [n_prompt, 4]; None for text
    rope_delta: int = 0
    vision: object | None = None          # strata.engine.request.VisionInput

    def submit_kwargs(self) -> dict:
        return {"positions": self.positions, "rope_delta": self.rope_delta, "vision": self.vision}


def record_limits(model, n_ctx: int, max_images: int = 8) -> RecordLimits | None:
    """What a loaded model accepts (None for a model without a vision tower)."""
    encoder = getattr(model, "vision", None)
    if encoder is None:
        return None
    spec = encoder.spec
    return RecordLimits(hidden_size=model.spec.hidden, n_ctx=n_ctx, vocab_size=model.spec.vocab,
                        image_pad_id=spec.image_pad_id, vision_start_id=spec.vision_start_id,
                        merge_size=spec.merge_size, max_patches=encoder.max_patches, max_images=max_images)


def to_engine_input(record: VisionRecord, image_pad_id: int) -> EngineInput:
    from strata.engine.request import VisionInput

    ids = np.asarray(record.token_ids)
    vision = VisionInput(
        embeddings=np.concatenate([image.embeddings for image in record.images]).astype(np.float32, copy=False),
        token_rows=np.flatnonzero(ids == image_pad_id).astype(np.int32),
        grids=tuple(tuple(int(v) for v in image.grid_thw) for image in record.images))
    return EngineInput([int(t) for t in ids], record.positions, int(record.rope_delta), vision)


def check_submission(prompt_ids: list[int], positions, rope_delta, vision, limits: RecordLimits | None) -> None:
    """Raises VisionRecordError unless (prompt, positions, rope_delta, images) is a sound record."""
    if limits is None:
        if vision is not None:
            raise VisionRecordError("this model reads text only; it has no vision tower to take images",
                                    "images_not_supported")
        return
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

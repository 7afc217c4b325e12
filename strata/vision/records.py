"""Validation of a vision record before it may touch engine state (docs/design.md, invariant 3).

A vision record is what admission needs to prefill a prompt that holds
images: the prompt's token ids, its M-RoPE positions and rope_delta, and per
image the encoder's output rows and patch grid. Whether it was built here or
arrived from elsewhere, nothing of it reaches a slot until `validate_record`
has checked every size, grid, count and value against the model, and a bad
record is refused with a VisionRecordError naming the field, the image or
token index, and what is allowed, so the engine keeps serving.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from strata.vision.errors import VisionRecordError
from strata.vision.mrope import NUM_POSITION_AXES, find_image_runs, merged_grid, mrope_positions


@dataclass(frozen=True)
class ImageEmbedding:
    """One image after the encoder."""

    embeddings: np.ndarray  # [n_rows, hidden] float32, one row per image pad token
    grid_thw: tuple[int, int, int]  # the encoder's patch grid (t, h, w)


@dataclass(frozen=True)
class VisionRecord:
    """A prompt with images, ready for admission once validated."""

    token_ids: np.ndarray  # [n_tokens] integer
    positions: np.ndarray  # [n_tokens, 4] int32: T, H, W, 0
    rope_delta: int
    images: Sequence[ImageEmbedding]  # in prompt order


@dataclass(frozen=True)
class RecordLimits:
    """What the model and the server accept."""

    hidden_size: int
    n_ctx: int
    vocab_size: int
    image_pad_id: int
    vision_start_id: int
    merge_size: int = 2
    max_patches: int = 12845056 // (14 * 14)  # t*h*w per image: Qwen2.5-VL's hub max_pixels in 14x14 patches
    max_grid_t: int = 1  # still images only
    max_images: int = 8


def _fail(message: str) -> VisionRecordError:
    return VisionRecordError(f"vision record: {message}")


def validate_record(record: VisionRecord, limits: RecordLimits) -> None:
    """Raises VisionRecordError at the first thing wrong with `record`; returns None if it is sound."""
    token_ids = _checked_token_ids(record.token_ids, limits)
    if not isinstance(record.images, Sequence) or len(record.images) > limits.max_images:
        raise _fail(f"at most {limits.max_images} images per prompt, got {_count(record.images)}")
    rows = [_checked_image(index, image, limits) for index, image in enumerate(record.images)]
    _check_placeholders(token_ids, rows, limits)
    positions = _checked_positions(record.positions, token_ids, limits)
    _check_against_mrope(positions, token_ids, record, limits)


def _count(images: object) -> str:
    return str(len(images)) if isinstance(images, Sequence) else type(images).__name__


def _checked_token_ids(token_ids: object, limits: RecordLimits) -> np.ndarray:
    if not isinstance(token_ids, np.ndarray) or token_ids.ndim != 1 or not np.issubdtype(token_ids.dtype, np.integer):
        raise _fail(f"token_ids must be a 1-D integer array, got {_describe(token_ids)}")
    if not 0 < token_ids.size <= limits.n_ctx:
        raise _fail(f"the prompt has {token_ids.size} tokens; 1 to {limits.n_ctx} (the context size) are allowed")
    bad = np.flatnonzero((token_ids < 0) | (token_ids >= limits.vocab_size))
    if bad.size:
        raise _fail(f"token {bad[0]} has id {token_ids[bad[0]]}, outside the vocabulary [0, {limits.vocab_size})")
    return token_ids


def _checked_image(index: int, image: object, limits: RecordLimits) -> int:
    """The image's row count, after checking its grid against limits and its embeddings against the grid."""
    if not isinstance(image, ImageEmbedding):
        raise _fail(f"image {index} must be an ImageEmbedding, got {type(image).__name__}")
    grid = image.grid_thw
    try:
        t, h, w = merged_grid(grid, limits.merge_size)
    except (VisionRecordError, TypeError) as e:
        raise _fail(f"image {index}: {e}") from None
    num_patches = t * h * w * limits.merge_size**2
    if t > limits.max_grid_t or num_patches > limits.max_patches:
        raise _fail(
            f"image {index}: grid {tuple(grid)} has t={t} and {num_patches} patches; "
            f"at most t={limits.max_grid_t} and {limits.max_patches} patches are allowed"
        )
    _check_embeddings(index, image.embeddings, t * h * w, grid, limits)
    return t * h * w


def _check_embeddings(index: int, embeddings: object, num_rows: int, grid: tuple, limits: RecordLimits) -> None:
    if not isinstance(embeddings, np.ndarray) or embeddings.dtype != np.float32 or embeddings.ndim != 2:
        raise _fail(f"image {index}: embeddings must be a float32 [rows, hidden] array, got {_describe(embeddings)}")
    if embeddings.shape != (num_rows, limits.hidden_size):
        raise _fail(
            f"image {index}: embeddings are {list(embeddings.shape)}, but grid {tuple(grid)} and the model need "
            f"[{num_rows}, {limits.hidden_size}] (t*h*w/{limits.merge_size}² rows of hidden size {limits.hidden_size})"
        )
    finite = np.isfinite(embeddings)
    if not finite.all():
        row, col = np.argwhere(~finite)[0]
        value = embeddings[row, col]
        raise _fail(f"image {index}: embeddings hold a non-finite value ({value}) at row {row}, column {col}")


def _check_placeholders(token_ids: np.ndarray, rows: list[int], limits: RecordLimits) -> None:
    try:
        runs = find_image_runs(token_ids, limits.image_pad_id, limits.vision_start_id)
    except VisionRecordError as e:
        raise _fail(str(e)) from None
    if len(runs) != len(rows):
        raise _fail(f"the prompt has {len(runs)} image placeholder runs but the record has {len(rows)} images")
    for index, ((start, end), num_rows) in enumerate(zip(runs, rows)):
        if end - start != num_rows:
            raise _fail(
                f"image {index} has {num_rows} embedding rows but {end - start} placeholder tokens (from token {start})"
            )


def _checked_positions(positions: object, token_ids: np.ndarray, limits: RecordLimits) -> np.ndarray:
    expected_shape = (token_ids.size, NUM_POSITION_AXES)
    if not isinstance(positions, np.ndarray) or positions.dtype != np.int32 or positions.shape != expected_shape:
        raise _fail(f"positions must be an int32 array of shape {list(expected_shape)}, got {_describe(positions)}")
    if positions[:, 3].any():
        raise _fail(f"positions: the reserved 4th component must be 0 (token {np.flatnonzero(positions[:, 3])[0]})")
    out_of_range = np.flatnonzero(((positions < 0) | (positions >= limits.n_ctx)).any(axis=1))
    if out_of_range.size:
        token = out_of_range[0]
        found = positions[token, :3].tolist()
        raise _fail(f"positions of token {token} are {found}; all must lie in [0, {limits.n_ctx}) (the context size)")
    is_text = token_ids != limits.image_pad_id
    text = positions[is_text]
    uneven = np.flatnonzero((text[:, 0] != text[:, 1]) | (text[:, 0] != text[:, 2]))
    if uneven.size:
        raise _fail(f"positions: text token {np.flatnonzero(is_text)[uneven[0]]} must have T = H = W")
    backwards = np.flatnonzero(np.diff(text[:, 0]) <= 0)
    if backwards.size:
        token = np.flatnonzero(is_text)[backwards[0] + 1]
        raise _fail(f"positions: T must increase from each text token to the next (token {token})")
    return positions


def _check_against_mrope(
    positions: np.ndarray, token_ids: np.ndarray, record: VisionRecord, limits: RecordLimits
) -> None:
    """Positions are a function of tokens and grids: they must be exactly that function's value."""
    grids = [image.grid_thw for image in record.images]
    expected = mrope_positions(
        token_ids, grids, image_pad_id=limits.image_pad_id, vision_start_id=limits.vision_start_id,
        spatial_merge_size=limits.merge_size,
    )
    differing = np.flatnonzero((positions != expected.positions).any(axis=1))
    if differing.size:
        token = differing[0]
        raise _fail(
            f"positions of token {token} are {positions[token, :3].tolist()}, "
            f"but M-RoPE gives {expected.positions[token, :3].tolist()}"
        )
    delta = record.rope_delta
    if isinstance(delta, bool) or not isinstance(delta, (int, np.integer)) or delta != expected.rope_delta:
        raise _fail(
            f"rope_delta is {delta!r}, but the positions give {expected.rope_delta} (max position + 1 - tokens)"
        )


def _describe(value: object) -> str:
    if isinstance(value, np.ndarray):
        return f"{value.dtype} array of shape {list(value.shape)}"
    return type(value).__name__

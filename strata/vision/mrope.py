"""M-RoPE position ids for a Qwen2-VL / Qwen2.5-VL prompt (docs/vision.md, "Positions").

Text tokens get T = H = W = p. An image is `<|vision_start|>` then a run of
t*(h/m)*(w/m) `<|image_pad|>` tokens; if its first pad would sit at text
position s, the pad at (frame, row, col) gets (s + frame, s + row, s + col),
and the text after it resumes at s + max(h/m, w/m). So after an image a
token's position is not its cache index: `rope_delta` = (max position + 1) -
n_tokens, and a token generated at cache index c gets c + rope_delta on every
axis. Same arithmetic as transformers' `Qwen2_5_VLModel.get_rope_index` for
still images. Positions are int32 [n_tokens, 4]: (T, H, W, 0), the 4th slot
reserved (llama.cpp passes four per token) and always zero.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from strata.vision.errors import VisionRecordError

NUM_POSITION_AXES = 4  # T, H, W, reserved


@dataclass(frozen=True)
class MropePositions:
    """A prompt's positions and the offset that continues them during decode."""

    positions: np.ndarray  # [n_tokens, 4] int32
    rope_delta: int

    def decode_positions(self, first_cache_index: int, count: int = 1) -> np.ndarray:
        """Positions of `count` tokens appended from cache index `first_cache_index` on."""
        return decode_positions(first_cache_index, count, self.rope_delta)


def decode_positions(first_cache_index: int, count: int, rope_delta: int) -> np.ndarray:
    """[count, 4] int32: c + rope_delta on T, H and W for each cache index c; 0 in the reserved slot."""
    values = np.arange(first_cache_index, first_cache_index + count, dtype=np.int64) + rope_delta
    out = np.zeros((count, NUM_POSITION_AXES), dtype=np.int32)
    out[:, :3] = values[:, None]
    return out


def find_image_runs(token_ids: np.ndarray, image_pad_id: int, vision_start_id: int) -> list[tuple[int, int]]:
    """[start, end) of every run of image pad tokens, each checked to follow `<|vision_start|>`."""
    is_pad = np.concatenate(([False], token_ids == image_pad_id, [False]))
    edges = np.flatnonzero(is_pad[1:] != is_pad[:-1])
    runs = [(int(s), int(e)) for s, e in zip(edges[0::2], edges[1::2])]
    for start, _ in runs:
        if start == 0 or token_ids[start - 1] != vision_start_id:
            raise VisionRecordError(
                f"image placeholder tokens at index {start} do not follow <|vision_start|>; "
                "image placeholders may only come from image content parts"
            )
    return runs


def merged_grid(grid_thw: Sequence[int], merge_size: int) -> tuple[int, int, int]:
    """(t, h/m, w/m): the image's LLM-token grid, after checking the patch grid."""
    if len(grid_thw) != 3:
        raise VisionRecordError(f"image grid must be (t, h, w), got {tuple(grid_thw)!r}")
    t, h, w = grid_thw
    for name, value in (("t", t), ("h", h), ("w", w)):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value <= 0:
            raise VisionRecordError(f"image grid {name} must be a positive integer, got {value!r}")
    if h % merge_size or w % merge_size:
        raise VisionRecordError(f"image grid ({t}, {h}, {w}): h and w must be multiples of the merge size {merge_size}")
    return int(t), int(h) // merge_size, int(w) // merge_size


def mrope_positions(
    token_ids: Sequence[int] | np.ndarray,
    image_grids: Sequence[Sequence[int]],
    *,
    image_pad_id: int,
    vision_start_id: int,
    spatial_merge_size: int = 2,
) -> MropePositions:
    """Positions of a whole prompt; `image_grids` in the order the images appear."""
    ids = np.asarray(token_ids)
    if ids.ndim != 1 or ids.size == 0:
        raise VisionRecordError(f"token ids must be a non-empty 1-D sequence, got shape {ids.shape}")
    runs = find_image_runs(ids, image_pad_id, vision_start_id)
    if len(runs) != len(image_grids):
        raise VisionRecordError(
            f"the prompt has {len(runs)} image placeholder runs but {len(image_grids)} images were given"
        )
    positions = np.zeros((ids.size, NUM_POSITION_AXES), dtype=np.int64)
    next_pos, text_start = 0, 0
    for index, ((start, end), grid) in enumerate(zip(runs, image_grids)):
        next_pos = _place_text(positions, text_start, start, next_pos)
        merged = merged_grid(grid, spatial_merge_size)
        if end - start != merged[0] * merged[1] * merged[2]:
            raise VisionRecordError(
                f"image {index} has {end - start} placeholder tokens but its grid {tuple(int(v) for v in grid)} "
                f"needs t*h*w/{spatial_merge_size}² = {merged[0] * merged[1] * merged[2]}"
            )
        next_pos = _place_image(positions, start, end, merged, next_pos)
        text_start = end
    _place_text(positions, text_start, ids.size, next_pos)
    rope_delta = int(positions[:, :3].max()) + 1 - ids.size
    return MropePositions(positions.astype(np.int32), rope_delta)


def _place_text(positions: np.ndarray, start: int, end: int, first_pos: int) -> int:
    positions[start:end, :3] = np.arange(first_pos, first_pos + end - start)[:, None]
    return first_pos + end - start


def _place_image(positions: np.ndarray, start: int, end: int, grid: tuple[int, int, int], first_pos: int) -> int:
    t, h, w = grid
    frame, row, col = np.meshgrid(np.arange(t), np.arange(h), np.arange(w), indexing="ij")
    positions[start:end, 0] = first_pos + frame.ravel()
    positions[start:end, 1] = first_pos + row.ravel()
    positions[start:end, 2] = first_pos + col.ravel()
    return first_pos + max(h, w)

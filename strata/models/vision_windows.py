"""The index arithmetic of the Qwen2.5-VL vision encoder for one image, in NumPy.

Patch rows arrive from preprocessing with each 2x2 merge block as four
consecutive rows. Window attention wants every window's patches contiguous,
so the encoder reorders merge blocks into window order before block 0 and
restores raster order after the merger. This module computes, from the grid
alone (docs/vision.md, as transformers' `get_vision_window_index`,
`get_vision_position_ids` and `get_vision_cu_seqlens` do):

  - `patch_order`: window-order row i holds patch row patch_order[i];
  - `merged_restore`: output token j is merger row merged_restore[j];
  - `positions`: (row, col) of each window-order patch, for 2D RoPE;
  - `window_segments` / `full_segments`: attention segment boundaries.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class WindowLayout:
    patch_order: np.ndarray       # int32 [n_patches]
    merged_restore: np.ndarray    # int32 [n_merged]
    positions: np.ndarray         # int32 [n_patches, 4]: (row, col, 0, 0) in window order
    window_segments: np.ndarray   # int32 [n_windows + 1], patch boundaries in window order
    full_segments: np.ndarray     # int32 [t + 1]: one segment per frame

    @property
    def n_patches(self) -> int:
        return len(self.patch_order)


def merged_window_order(grid_thw: tuple[int, int, int], merge: int, window: int) -> tuple[np.ndarray, list[int]]:
    """Merged-token indices (frame-major raster) in window order, and each window's token count."""
    t, h, w = grid_thw
    lh, lw = h // merge, w // merge
    order, sizes = [], []
    tokens = np.arange(t * lh * lw).reshape(t, lh, lw)
    for frame in range(t):
        for top in range(0, lh, window):
            for left in range(0, lw, window):
                block = tokens[frame, top: top + window, left: left + window].ravel()
                order.append(block)
                sizes.append(block.size)
    return np.concatenate(order), sizes


def patch_positions(grid_thw: tuple[int, int, int], merge: int) -> np.ndarray:
    """(row, col) of each patch row in preprocessing order (merge blocks raster, then inside each block)."""
    t, h, w = grid_thw
    rows, cols = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
    shape = (h // merge, merge, w // merge, merge)
    rows = rows.reshape(shape).transpose(0, 2, 1, 3).ravel()
    cols = cols.reshape(shape).transpose(0, 2, 1, 3).ravel()
    return np.tile(np.stack([rows, cols], axis=1), (t, 1))    # [t*h*w, 2]


def window_layout(grid_thw: tuple[int, int, int], merge: int, window: int) -> WindowLayout:
    """Everything the encoder needs about one image's grid. `window`: merged tokens per window side."""
    t, h, w = (int(v) for v in grid_thw)
    unit = merge * merge
    merged_order, sizes = merged_window_order((t, h, w), merge, window)
    patch_order = (merged_order[:, None] * unit + np.arange(unit)).ravel()
    positions = np.zeros((len(patch_order), 4), dtype=np.int32)
    positions[:, :2] = patch_positions((t, h, w), merge)[patch_order]
    return WindowLayout(
        patch_order=patch_order.astype(np.int32),
        merged_restore=np.argsort(merged_order, kind="stable").astype(np.int32),
        positions=positions,
        window_segments=np.concatenate([[0], np.cumsum(sizes) * unit]).astype(np.int32),
        full_segments=(np.arange(t + 1) * h * w).astype(np.int32),
    )

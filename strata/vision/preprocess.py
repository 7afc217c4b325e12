"""Qwen2-VL / Qwen2.5-VL image preprocessing: a PIL image to patch rows and a grid.

Reproduces transformers' `Qwen2VLImageProcessorPil` step for step, because the
vision encoder was trained on exactly those pixels: `smart_resize` to a
multiple of patch*merge (28) inside [min_pixels, max_pixels], RGB conversion
(transparency composited onto white), PIL bicubic resize, x rescale_factor in
float64 then float32, normalize with the CLIP mean/std in float32, a still
image repeated to `temporal_patch_size` frames, and patches flattened to rows
of C*T*P*P (1176) values, ordered so that each 2x2 merge block is 4
consecutive rows. Configuration comes from a checkpoint's
preprocessor_config.json in either spelling of the pixel bounds.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from typing import Any

import numpy as np
from PIL import Image

from strata.vision.errors import PreprocessError

CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
MAX_ASPECT_RATIO = 200
NUM_CHANNELS = 3

# preprocessor_config.json switches whose only supported value is true.
_MUST_BE_TRUE = ("do_resize", "do_rescale", "do_normalize", "do_convert_rgb")
_INT_KEYS = ("patch_size", "merge_size", "temporal_patch_size", "resample")


def _config_error(message: str) -> PreprocessError:
    return PreprocessError(f"preprocessor config: {message}", "invalid_config")


@dataclass(frozen=True)
class PreprocessConfig:
    """The image processor's settings; defaults are transformers' class defaults."""

    min_pixels: int = 56 * 56
    max_pixels: int = 28 * 28 * 1280
    patch_size: int = 14
    merge_size: int = 2
    temporal_patch_size: int = 2
    image_mean: tuple[float, float, float] = CLIP_MEAN
    image_std: tuple[float, float, float] = CLIP_STD
    rescale_factor: float = 1 / 255
    resample: int = Image.Resampling.BICUBIC

    def __post_init__(self) -> None:
        for name in ("min_pixels", "max_pixels", "patch_size", "merge_size", "temporal_patch_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise _config_error(f"{name} must be a positive integer, got {value!r}")
        if self.min_pixels > self.max_pixels:
            raise _config_error(f"min_pixels ({self.min_pixels}) exceeds max_pixels ({self.max_pixels})")
        for name in ("image_mean", "image_std"):
            values = getattr(self, name)
            if len(values) != NUM_CHANNELS or not all(math.isfinite(v) for v in values):
                raise _config_error(f"{name} must be {NUM_CHANNELS} finite numbers, got {values!r}")
        if not all(v > 0 for v in self.image_std):
            raise _config_error(f"image_std must be positive, got {self.image_std!r}")
        if not (math.isfinite(self.rescale_factor) and self.rescale_factor > 0):
            raise _config_error(f"rescale_factor must be positive, got {self.rescale_factor!r}")
        if isinstance(self.resample, bool) or self.resample not in set(Image.Resampling):
            raise _config_error(f"resample {self.resample!r} is not a PIL resampling filter")

    @property
    def factor(self) -> int:
        """Resized sides are multiples of this: one merge block in pixels."""
        return self.patch_size * self.merge_size

    @property
    def patch_dim(self) -> int:
        """Values per patch row: C * T * P * P (1176 for Qwen2.5-VL)."""
        return NUM_CHANNELS * self.temporal_patch_size * self.patch_size * self.patch_size

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> PreprocessConfig:
        """From preprocessor_config.json's object; unknown keys are ignored.

        Pixel bounds may be top-level `min_pixels`/`max_pixels` (hub
        checkpoints), `size: {shortest_edge, longest_edge}` (transformers 5) or
        `size: {min_pixels, max_pixels}`; top-level keys win, as in transformers.
        """
        if not isinstance(raw, dict):
            raise PreprocessError("preprocessor config must be a JSON object", "invalid_config")
        for key in _MUST_BE_TRUE:
            if raw.get(key, True) is not True:
                raise _config_error(f"{key}={raw[key]!r} is not supported (only true)")
        fields: dict[str, Any] = dict(_pixel_bounds(raw))
        for key in _INT_KEYS:
            if key in raw:
                fields[key] = raw[key]
        for key in ("image_mean", "image_std"):
            if key in raw:
                fields[key] = _three_floats(key, raw[key])
        if "rescale_factor" in raw:
            fields["rescale_factor"] = _number("rescale_factor", raw["rescale_factor"])
        return cls(**fields)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> PreprocessConfig:
        """From a preprocessor_config.json file, or a checkpoint directory holding one."""
        path = os.fspath(path)
        if os.path.isdir(path):
            path = os.path.join(path, "preprocessor_config.json")
        try:
            with open(path, encoding="utf-8") as f:
                raw = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            raise PreprocessError(f"cannot read preprocessor config {path}: {e}", "invalid_config") from e
        return cls.from_dict(raw)


def _pixel_bounds(raw: dict[str, Any]) -> dict[str, Any]:
    size = raw.get("size") or {}
    if not isinstance(size, dict):
        raise _config_error(f"size must be an object, got {size!r}")
    bounds = {}
    spellings_of = {"min_pixels": ("min_pixels", "shortest_edge"), "max_pixels": ("max_pixels", "longest_edge")}
    for field, spellings in spellings_of.items():
        for key in spellings:
            if size.get(key) is not None:
                bounds[field] = size[key]
        if raw.get(field) is not None:
            bounds[field] = raw[field]
    return bounds


def _number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _config_error(f"{name} must be a number, got {value!r}")
    return float(value)


def _three_floats(name: str, value: Any) -> tuple[float, float, float]:
    if not isinstance(value, (list, tuple)) or len(value) != NUM_CHANNELS:
        raise _config_error(f"{name} must be a list of {NUM_CHANNELS} numbers, got {value!r}")
    a, b, c = (_number(name, v) for v in value)
    return (a, b, c)


@dataclass(frozen=True)
class PreprocessedImage:
    """One image ready for the encoder."""

    pixels: np.ndarray  # [num_patches, patch_dim] float32, 2x2 merge blocks contiguous
    grid_thw: tuple[int, int, int]  # (t, h, w) in patches
    merge_size: int

    @property
    def num_patches(self) -> int:
        t, h, w = self.grid_thw
        return t * h * w

    @property
    def n_merged_tokens(self) -> int:
        """LLM tokens (image pads) this image becomes: t*h*w / merge²."""
        return self.num_patches // (self.merge_size * self.merge_size)


def smart_resize(
    height: int, width: int, factor: int = 28, min_pixels: int = 56 * 56, max_pixels: int = 28 * 28 * 1280
) -> tuple[int, int]:
    """The (height, width) an image is resized to: multiples of `factor`, area
    within [min_pixels, max_pixels], aspect kept as closely as that allows.

    Rounds with Python's round() (half to even), as transformers does, so that
    e.g. a 42-pixel side (1.5 factors) becomes 56 and a 70-pixel side 56.
    """
    if height <= 0 or width <= 0:
        raise PreprocessError(f"image has no pixels ({width}x{height})", "invalid_image")
    ratio = max(height, width) / min(height, width)
    if ratio > MAX_ASPECT_RATIO:
        raise PreprocessError(
            f"image is {width}x{height}, aspect ratio {ratio:.1f}; at most {MAX_ASPECT_RATIO} is supported",
            "invalid_image",
        )
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        scale = math.sqrt(height * width / max_pixels)
        h_bar = max(factor, math.floor(height / scale / factor) * factor)
        w_bar = max(factor, math.floor(width / scale / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        scale = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * scale / factor) * factor
        w_bar = math.ceil(width * scale / factor) * factor
    return h_bar, w_bar


def to_rgb(image: Image.Image) -> Image.Image:
    """RGB, with any transparency (alpha band or palette/tRNS key) composited onto white."""
    has_alpha = "A" in image.getbands() or image.info.get("transparency") is not None
    if not has_alpha:
        return image.convert("RGB")
    rgba = image.convert("RGBA")
    white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
    return Image.alpha_composite(white, rgba).convert("RGB")


def normalize(rgb: np.ndarray, config: PreprocessConfig) -> np.ndarray:
    """uint8 [H, W, 3] -> float32 [H, W, 3]: rescale in float64, cast, then (x - mean) / std in float32."""
    scaled = (rgb.astype(np.float64) * config.rescale_factor).astype(np.float32)
    mean = np.asarray(config.image_mean, dtype=np.float32)
    std = np.asarray(config.image_std, dtype=np.float32)
    return (scaled - mean) / std


def patchify(image: np.ndarray, config: PreprocessConfig) -> np.ndarray:
    """float32 [H, W, C] -> [grid_h * grid_w, C*T*P*P] rows.

    Rows walk merge blocks in raster order and, inside a block, its
    merge x merge patches in raster order; a row is (channel, frame, y, x) with
    the still image repeated in every frame.
    """
    p, m, t = config.patch_size, config.merge_size, config.temporal_patch_size
    height, width, channels = image.shape
    blocks_h, blocks_w = height // (p * m), width // (p * m)
    # [block_row, in_row, y, block_col, in_col, x, c] -> [block_row, block_col, in_row, in_col, c, y, x]
    tiles = image.reshape(blocks_h, m, p, blocks_w, m, p, channels).transpose(0, 3, 1, 4, 6, 2, 5)
    frames = np.broadcast_to(tiles[:, :, :, :, :, None], (*tiles.shape[:5], t, p, p))
    return np.ascontiguousarray(frames.reshape(blocks_h * blocks_w * m * m, channels * t * p * p))


def preprocess_image(image: Image.Image, config: PreprocessConfig) -> PreprocessedImage:
    """One still image -> encoder input (patch rows and their grid)."""
    if not isinstance(image, Image.Image):
        raise TypeError(f"preprocess_image takes a PIL image, got {type(image).__name__}")
    rgb = to_rgb(image)
    height, width = smart_resize(rgb.height, rgb.width, config.factor, config.min_pixels, config.max_pixels)
    resized = rgb.resize((width, height), resample=config.resample)
    pixels = patchify(normalize(np.asarray(resized), config), config)
    grid = (1, height // config.patch_size, width // config.patch_size)
    return PreprocessedImage(pixels=pixels, grid_thw=grid, merge_size=config.merge_size)

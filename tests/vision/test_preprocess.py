"""Golden tests: our Qwen2-VL preprocessing against transformers' PIL image processor.

The reference is `Qwen2VLImageProcessorPil` (torchvision from PyPI doesn't
import beside the installed torch, so the torchvision-backed class can't be
used). Every case must match bit for bit: the same PIL resize, the same
float64 rescale and float32 normalize, the same patch order.
"""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from strata.vision.errors import PreprocessError
from strata.vision.preprocess import PreprocessConfig, preprocess_image, smart_resize

hf_pil = pytest.importorskip("transformers.models.qwen2_vl.image_processing_pil_qwen2_vl")

HUB_CONFIG = {  # Qwen2.5-VL-7B-Instruct's preprocessor_config.json
    "min_pixels": 3136,
    "max_pixels": 12845056,
    "patch_size": 14,
    "temporal_patch_size": 2,
    "merge_size": 2,
    "image_mean": [0.48145466, 0.4578275, 0.40821073],
    "image_std": [0.26862954, 0.26130258, 0.27577711],
    "image_processor_type": "Qwen2VLImageProcessor",
    "processor_class": "Qwen2_5_VLProcessor",
}


def _rgb(width: int, height: int, seed: int) -> Image.Image:
    """Noise over a gradient: smooth regions and sharp edges both exercise the resampler."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:height, 0:width]
    base = np.stack([xx * 255 // max(width - 1, 1), yy * 255 // max(height - 1, 1), (xx + yy) % 256], axis=-1)
    noise = rng.integers(-40, 41, size=(height, width, 3))
    return Image.fromarray(np.clip(base + noise, 0, 255).astype(np.uint8))


def _rgba(width: int, height: int) -> Image.Image:
    image = _rgb(width, height, 1).convert("RGBA")
    alpha = np.random.default_rng(2).integers(0, 256, size=(height, width), dtype=np.uint8)
    image.putalpha(Image.fromarray(alpha))
    return image


def _palette_transparent(width: int, height: int) -> Image.Image:
    image = _rgb(width, height, 3).quantize(colors=16)
    image.info["transparency"] = 5
    return image


CASES = {
    "tiny_30x30_upscaled": lambda: _rgb(30, 30, 10),
    "square_224": lambda: _rgb(224, 224, 11),
    "photo_640x480": lambda: _rgb(640, 480, 12),
    "tall_17x900": lambda: _rgb(17, 900, 13),
    "wide_1000x333": lambda: _rgb(1000, 333, 14),
    "over_max_pixels_1500x1200": lambda: _rgb(1500, 1200, 15),
    "round_half_even_42x70": lambda: _rgb(42, 70, 16),
    "rgba_300x200": lambda: _rgba(300, 200),
    "grayscale_L_123x77": lambda: _rgb(123, 77, 17).convert("L"),
    "grayscale_alpha_LA_64x90": lambda: _rgba(64, 90).convert("LA"),
    "palette_P_250x180": lambda: _rgb(250, 180, 18).quantize(colors=64),
    "palette_transparent_P_99x140": lambda: _palette_transparent(99, 140),
    "bilevel_1_200x50": lambda: _rgb(200, 50, 19).convert("1"),
    "cmyk_160x120": lambda: _rgb(160, 120, 20).convert("CMYK"),
}


def _reference(image: Image.Image, **kwargs) -> tuple[np.ndarray, np.ndarray]:
    out = hf_pil.Qwen2VLImageProcessorPil(**kwargs)(images=[image], return_tensors="np")
    return out["pixel_values"], out["image_grid_thw"]


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_transformers_default_config(name: str) -> None:
    image = CASES[name]()
    ref_pixels, ref_grid = _reference(image)
    ours = preprocess_image(image, PreprocessConfig())
    assert ours.grid_thw == tuple(int(v) for v in ref_grid[0])
    assert ours.pixels.dtype == np.float32 and ours.pixels.shape == ref_pixels.shape
    max_abs_diff = float(np.abs(ours.pixels - ref_pixels).max())
    assert max_abs_diff == 0.0, f"{name}: max abs diff {max_abs_diff}"
    t, h, w = ours.grid_thw
    assert t == 1 and ours.num_patches == h * w == ours.pixels.shape[0]
    assert ours.n_merged_tokens == h * w // 4 and ours.pixels.shape[1] == 1176


@pytest.mark.parametrize(
    "raw",
    [
        HUB_CONFIG,
        {"size": {"shortest_edge": 100 * 28 * 28, "longest_edge": 300 * 28 * 28}},
        {"size": {"min_pixels": 4 * 28 * 28, "max_pixels": 64 * 28 * 28}},
    ],
    ids=["hub_min_max_pixels", "v5_size_edges", "size_min_max_pixels"],
)
def test_matches_transformers_checkpoint_configs(raw: dict) -> None:
    config = PreprocessConfig.from_dict(raw)
    kwargs = {k: v for k, v in raw.items() if k not in ("image_processor_type", "processor_class")}
    if "min_pixels" in raw.get("size", {}):  # transformers reads this old spelling only at top level
        kwargs = {"min_pixels": raw["size"]["min_pixels"], "max_pixels": raw["size"]["max_pixels"]}
    for image in (_rgb(1500, 1200, 30), _rgb(40, 33, 31), _rgb(1000, 333, 32)):
        ref_pixels, ref_grid = _reference(image, **kwargs)
        ours = preprocess_image(image, config)
        assert ours.grid_thw == tuple(int(v) for v in ref_grid[0])
        assert np.array_equal(ours.pixels, ref_pixels), f"max abs diff {np.abs(ours.pixels - ref_pixels).max()}"


def test_pixel_bounds_spellings_and_precedence() -> None:
    assert PreprocessConfig.from_dict(HUB_CONFIG).max_pixels == 12845056
    edges = PreprocessConfig.from_dict({"size": {"shortest_edge": 3136, "longest_edge": 802816}})
    assert (edges.min_pixels, edges.max_pixels) == (3136, 802816)
    both = PreprocessConfig.from_dict({"max_pixels": 1000000, "size": {"shortest_edge": 3136, "longest_edge": 802816}})
    assert both.max_pixels == 1000000  # top-level wins, as in transformers
    assert PreprocessConfig.from_dict({}) == PreprocessConfig()


def test_from_file_reads_a_checkpoint_directory(tmp_path) -> None:
    import json

    (tmp_path / "preprocessor_config.json").write_text(json.dumps(HUB_CONFIG))
    assert PreprocessConfig.from_file(tmp_path) == PreprocessConfig.from_dict(HUB_CONFIG)
    with pytest.raises(PreprocessError, match="cannot read preprocessor config"):
        PreprocessConfig.from_file(tmp_path / "missing.json")


@pytest.mark.parametrize(
    "raw, message",
    [
        ({"min_pixels": 0}, "min_pixels must be a positive integer"),
        ({"max_pixels": 1.5e6}, "max_pixels must be a positive integer"),
        ({"min_pixels": 10000, "max_pixels": 5000}, "exceeds max_pixels"),
        ({"patch_size": True}, "patch_size must be a positive integer"),
        ({"image_mean": [0.5, 0.5]}, "image_mean must be a list of 3 numbers"),
        ({"image_std": [0.5, 0.0, 0.5]}, "image_std must be positive"),
        ({"do_normalize": False}, "do_normalize=False is not supported"),
        ({"resample": 42}, "resample 42 is not a PIL resampling filter"),
        ({"size": 224}, "size must be an object"),
    ],
)
def test_bad_config_is_refused(raw: dict, message: str) -> None:
    with pytest.raises(PreprocessError, match=message):
        PreprocessConfig.from_dict(raw)


def test_smart_resize_matches_transformers_over_many_sizes() -> None:
    reference = hf_pil.smart_resize
    sides = [1, 3, 13, 14, 27, 28, 41, 42, 43, 69, 70, 71, 98, 111, 224, 333, 479, 480, 1000, 1499, 2049, 5000]
    for height in sides:
        for width in sides:
            if max(height, width) / min(height, width) > 200:
                continue
            for bounds in ((3136, 1003520), (3136, 12845056), (100 * 784, 101 * 784)):
                assert smart_resize(height, width, 28, *bounds) == reference(height, width, 28, *bounds), (height, width, bounds)


def test_smart_resize_rounds_half_to_even() -> None:
    # 42/28 = 1.5 -> 2 factors, 70/28 = 2.5 -> 2 factors (not 3)
    assert smart_resize(42, 70 * 2) == (56, 140)
    assert smart_resize(70, 70 * 2) == (56, 140)


def test_extreme_aspect_ratio_is_refused() -> None:
    with pytest.raises(PreprocessError, match=r"aspect ratio 201\.0; at most 200"):
        preprocess_image(_rgb(201, 1, 40), PreprocessConfig())
    assert preprocess_image(_rgb(200, 1, 41), PreprocessConfig()).grid_thw[0] == 1


def test_patch_rows_are_in_merge_block_order() -> None:
    """Row 4*b + 2*i + j is patch (i, j) of merge block b; frames are copies."""
    config = PreprocessConfig()
    image = _rgb(56 * 3, 56 * 2, 50)  # 2x3 merge blocks, no resize needed
    ours = preprocess_image(image, config)
    assert ours.grid_thw == (1, 8, 12)
    pixels = np.asarray(image, dtype=np.float64) / 255
    normalized = ((pixels - np.array(config.image_mean)) / np.array(config.image_std)).astype(np.float32)
    rows = ours.pixels.reshape(-1, 3, 2, 14, 14)
    for block_row in range(4):
        for block_col in range(6):
            for i in range(2):
                for j in range(2):
                    row = rows[(block_row * 6 + block_col) * 4 + i * 2 + j]
                    y, x = (block_row * 2 + i) * 14, (block_col * 2 + j) * 14
                    expected = normalized[y : y + 14, x : x + 14].transpose(2, 0, 1)
                    np.testing.assert_allclose(row[:, 0], expected, atol=1e-6)
                    assert np.array_equal(row[:, 0], row[:, 1])


def test_only_pil_images_are_taken() -> None:
    with pytest.raises(TypeError, match="takes a PIL image"):
        preprocess_image(np.zeros((28, 28, 3), np.uint8), PreprocessConfig())

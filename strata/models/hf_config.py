"""Reading a Hugging Face Qwen2.5-VL config.json into a ModelSpec and a VisionSpec.

Both spellings transformers has written are accepted: hub checkpoints keep
the text hyperparameters at the top level with `rope_theta` and
`rope_scaling: {type: mrope, mrope_section}`; transformers 5 nests them in
`text_config` with `rope_parameters: {rope_theta, mrope_section}`. The vision
tower is `vision_config` (hub names `in_chans`/`spatial_patch_size` too).
Anything Strata can't run (another architecture, RoPE scaling, sliding
windows, a vision activation other than SiLU) is refused with a message that
says what is supported.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from .model import ModelFormatError
from .._ffi import RopeMode
from .spec import ModelSpec

SUPPORTED_MODEL_TYPES = ("qwen2_5_vl",)
DEFAULT_MROPE_SECTION = (16, 24, 24)


@dataclass(frozen=True)
class VisionSpec:
    """The Qwen2.5-VL vision tower's hyperparameters and the prompt tokens that carry images."""

    depth: int
    hidden: int
    n_heads: int
    ffn: int
    out_hidden: int              # the LLM's hidden size: rows the merger emits
    patch_size: int = 14
    temporal_patch_size: int = 2
    merge_size: int = 2
    in_channels: int = 3
    window_size: int = 112       # pixels per window side
    fullatt_blocks: tuple[int, ...] = ()
    rope_theta: float = 10000.0
    rms_eps: float = 1e-6
    image_pad_id: int = 151655
    vision_start_id: int = 151652
    vision_end_id: int = 151653

    def __post_init__(self):
        if self.hidden % self.n_heads:
            raise ModelFormatError(f"vision hidden_size {self.hidden} is not a multiple of num_heads {self.n_heads}")
        if self.head_dim % 4:
            raise ModelFormatError(f"vision head_dim {self.head_dim} must be a multiple of 4 (2D rotary halves)")
        if self.window_size % (self.patch_size * self.merge_size):
            raise ModelFormatError(f"vision window_size {self.window_size} must be a multiple of "
                                   f"patch_size x spatial_merge_size = {self.patch_size * self.merge_size}")
        bad = [i for i in self.fullatt_blocks if not 0 <= i < self.depth]
        if bad:
            raise ModelFormatError(f"vision fullatt_block_indexes {bad} are outside the {self.depth} blocks")

    @property
    def head_dim(self) -> int:
        return self.hidden // self.n_heads

    @property
    def patch_dim(self) -> int:
        """Values per patch row: C x T x P x P (1176)."""
        return self.in_channels * self.temporal_patch_size * self.patch_size * self.patch_size

    @property
    def window_merged(self) -> int:
        """Merged tokens per window side (4 for 112-pixel windows of 14-pixel patches merged 2x2)."""
        return self.window_size // (self.patch_size * self.merge_size)


def read_config(directory: Path) -> dict:
    path = directory / "config.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ModelFormatError(f"{directory} has no config.json; a Hugging Face checkpoint directory needs "
                               "one") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise ModelFormatError(f"cannot read {path}: {exc}") from None


def text_settings(config: dict) -> dict:
    """The text model's keys: `text_config` over the top level (hub files keep them at the top)."""
    nested = config.get("text_config") or {}
    if not isinstance(nested, dict):
        raise ModelFormatError("config.json: text_config must be an object")
    return {**config, **nested}


def read_spec(config: dict, name: str = "") -> ModelSpec:
    model_type = config.get("model_type")
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise ModelFormatError(f"config.json model_type {model_type!r} is not supported; "
                               f"supported Hugging Face checkpoints: {', '.join(SUPPORTED_MODEL_TYPES)}")
    text = text_settings(config)
    if text.get("use_sliding_window"):
        raise ModelFormatError("config.json sets use_sliding_window; Strata runs full attention only")
    hidden, n_heads = _int(text, "hidden_size"), _int(text, "num_attention_heads")
    head_dim = hidden // n_heads
    theta, sections = _rope(text, head_dim)
    tied = bool(config.get("tie_word_embeddings", False) or text.get("tie_word_embeddings", False))
    return ModelSpec(
        arch="qwen2_5_vl", n_layers=_int(text, "num_hidden_layers"), hidden=hidden, n_heads=n_heads,
        n_kv_heads=_int(text, "num_key_value_heads", n_heads), head_dim=head_dim,
        ffn=_int(text, "intermediate_size"), vocab=_int(text, "vocab_size"),
        ctx_train=_int(text, "max_position_embeddings", 32768), rms_eps=float(text.get("rms_norm_eps", 1e-6)),
        rope_mode=RopeMode.MROPE, rope_dim=head_dim, rope_base=theta, rope_sections=(*sections, 0),
        tied_output=tied, qkv_bias=True, name=name,
        n_nextn=_int(text, "num_nextn_predict_layers", 0))   # DeepSeek-V3-style MTP layers after the decoder


def _rope(text: dict, head_dim: int) -> tuple[float, tuple[int, int, int]]:
    params = text.get("rope_parameters") or text.get("rope_scaling") or {}
    if not isinstance(params, dict):
        raise ModelFormatError("config.json: rope_parameters / rope_scaling must be an object")
    kind = params.get("rope_type", params.get("type", "default"))
    if kind not in ("default", "mrope"):
        raise ModelFormatError(f"config.json RoPE type {kind!r} is not supported (supported: default, mrope)")
    theta = float(params.get("rope_theta", text.get("rope_theta", 1000000.0)))
    section = params.get("mrope_section", DEFAULT_MROPE_SECTION)
    if (not isinstance(section, (list, tuple)) or len(section) != 3
            or not all(isinstance(s, int) and s >= 0 for s in section)):
        raise ModelFormatError(f"config.json mrope_section must be three non-negative integers, got {section!r}")
    if sum(section) != head_dim // 2:
        raise ModelFormatError(f"config.json mrope_section {list(section)} sums to {sum(section)}, "
                               f"but head_dim {head_dim} needs {head_dim // 2}")
    return theta, tuple(section)


def read_vision_spec(config: dict) -> VisionSpec | None:
    """None when the checkpoint has no vision tower."""
    vision = config.get("vision_config")
    if not vision:
        return None
    if vision.get("hidden_act", "silu") != "silu":
        raise ModelFormatError(f"vision hidden_act {vision['hidden_act']!r} is not supported (supported: silu)")
    rope = vision.get("rope_parameters") or {}
    return VisionSpec(
        depth=_int(vision, "depth"), hidden=_int(vision, "hidden_size"), n_heads=_int(vision, "num_heads"),
        ffn=_int(vision, "intermediate_size"),
        out_hidden=_int(vision, "out_hidden_size", _int(text_settings(config), "hidden_size")),
        patch_size=_int(vision, "patch_size", _int(vision, "spatial_patch_size", 14)),
        temporal_patch_size=_int(vision, "temporal_patch_size", 2),
        merge_size=_int(vision, "spatial_merge_size", 2),
        in_channels=_int(vision, "in_channels", _int(vision, "in_chans", 3)),
        window_size=_int(vision, "window_size", 112),
        fullatt_blocks=tuple(int(i) for i in vision.get("fullatt_block_indexes", ())),
        rope_theta=float(rope.get("rope_theta", 10000.0)),
        image_pad_id=_int(config, "image_token_id", 151655),
        vision_start_id=_int(config, "vision_start_token_id", 151652),
        vision_end_id=_int(config, "vision_end_token_id", 151653))


def _int(section: dict, key: str, default: int | None = None) -> int:
    value = section.get(key, default)
    if value is None:
        raise ModelFormatError(f"config.json lacks {key}")
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ModelFormatError(f"config.json {key} must be a non-negative integer, got {value!r}")
    return value

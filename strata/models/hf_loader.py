"""Loading a Hugging Face Qwen2.5-VL checkpoint directory onto the device.

config.json -> ModelSpec (+ VisionSpec when there is a vision tower);
safetensors (single or sharded) -> tensors renamed to what the decoder reads
(GGUF-style `blk.N.attn_q.weight`, ...) and, for the vision tower, `v.` plus
the HF name under `visual.`; tokenizer.json and the chat template via
strata.tokenizer; preprocessor_config.json for images. Matrices keep their
type (F32, F16 or BF16: the matmul reads all three); norms and biases become
F32, which the kernels require. The Conv3d patch embedding becomes a
[hidden, 1176] matrix. Vision turns on when the checkpoint has a tower.
"""

from __future__ import annotations

import logging
import re
import time
from pathlib import Path

import numpy as np

from .. import _ffi
from ..chat_template import ChatTemplate
from ..tokenizer import Tokenizer
from ..vision.preprocess import PreprocessConfig
from . import hf_config, safetensors_io
from .decoder import Decoder
from .model import LoadedModel, ModelFormatError, TensorInfo
from .spec import ModelSpec
from .vision_encoder import PREFIX as VISION_PREFIX
from .vision_encoder import VisionEncoder, weight_names
from .fusion import fuse_projections
from .weights import WeightArena

log = logging.getLogger("strata.models")

F32, F16, BF16 = _ffi.DType.F32, _ffi.DType.F16, _ffi.DType.BF16
TEXT_PREFIXES = ("model.language_model.", "language_model.model.", "model.")
VISION_PREFIXES = ("model.visual.", "visual.")
OUTPUT_NAMES = ("lm_head.weight", "language_model.lm_head.weight")
GLOBAL_NAMES = {"embed_tokens.weight": "token_embd.weight", "norm.weight": "output_norm.weight"}
LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight", "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.weight": "attn_k.weight", "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.weight": "attn_v.weight", "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.o_proj.weight": "attn_output.weight", "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight", "mlp.down_proj.weight": "ffn_down.weight",
}
# A multi-token-prediction layer (DeepSeek-V3 layout: model.layers.<num_hidden_layers>.*) -> models/mtp_head.py
NEXTN_NAMES = {
    "eh_proj.weight": "nextn.eh_proj.weight", "enorm.weight": "nextn.enorm.weight",
    "hnorm.weight": "nextn.hnorm.weight", "shared_head.norm.weight": "nextn.shared_head_norm.weight",
    "shared_head.head.weight": "nextn.shared_head_head.weight", "embed_tokens.weight": "nextn.embed_tokens.weight",
}
_LAYER = re.compile(r"layers\.(\d+)\.(.+)")


def strata_name(hf_name: str) -> str | None:
    """The arena name of a checkpoint tensor, or None for one Strata does not use."""
    if hf_name in OUTPUT_NAMES:
        return "output.weight"
    for prefix in VISION_PREFIXES:
        if hf_name.startswith(prefix):
            return VISION_PREFIX + hf_name[len(prefix):]
    for prefix in TEXT_PREFIXES:
        if hf_name.startswith(prefix):
            rest = hf_name[len(prefix):]
            if rest in GLOBAL_NAMES:
                return GLOBAL_NAMES[rest]
            match = _LAYER.fullmatch(rest)
            if match and match.group(2) in LAYER_NAMES:
                return f"blk.{match.group(1)}.{LAYER_NAMES[match.group(2)]}"
            if match and match.group(2) in NEXTN_NAMES:
                return f"blk.{match.group(1)}.{NEXTN_NAMES[match.group(2)]}"
    return None


def as_f32(t: TensorInfo) -> np.ndarray:
    """A tensor's values as float32 (F32 as is, F16 widened, BF16 by placing its bits in the high half)."""
    raw = np.asarray(t.data)
    if t.dtype == F32:
        return raw.view(np.float32).copy()
    if t.dtype == F16:
        return raw.view(np.float16).astype(np.float32)
    return (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)


def convert(name: str, t: TensorInfo, spec_vision: hf_config.VisionSpec | None) -> TensorInfo:
    """Vectors to F32; the Conv3d patch embedding to a [hidden, patch_dim] matrix."""
    if len(t.shape) == 1:
        return TensorInfo(name, F32, t.shape, as_f32(t).view(np.uint8))
    if name == VISION_PREFIX + "patch_embed.proj.weight":
        rows = t.shape[0]
        cols = int(np.prod(t.shape[1:]))
        if spec_vision is not None and cols != spec_vision.patch_dim:
            raise ModelFormatError(f"visual.patch_embed.proj.weight has {cols} values per filter; the vision config "
                                   f"needs {spec_vision.patch_dim}")
        return TensorInfo(name, t.dtype, (rows, cols), t.data)
    if len(t.shape) != 2:
        raise ModelFormatError(f"tensor {t.name} has shape {list(t.shape)}; a matrix or vector was expected")
    return TensorInfo(name, t.dtype, t.shape, t.data)


def map_tensors(raw: dict[str, TensorInfo], spec: ModelSpec, vision: hf_config.VisionSpec | None,
                path: Path) -> dict[str, TensorInfo]:
    out = {}
    for hf_name, t in raw.items():
        name = strata_name(hf_name)
        if name is None or (name == "output.weight" and spec.tied_output):
            log.debug("ignoring tensor %s", hf_name)
            continue
        if name.startswith(VISION_PREFIX) and vision is None:
            continue
        out[name] = convert(name, t, vision)
    missing = [n for n in required_names(spec, vision) if n not in out]
    if missing:
        raise ModelFormatError(f"{path} lacks tensors for {', '.join(missing[:5])}"
                               f"{' and more' if len(missing) > 5 else ''} (Strata names)")
    _check_shapes(out, spec)
    return out


def required_names(spec: ModelSpec, vision: hf_config.VisionSpec | None) -> list[str]:
    names = ["token_embd.weight", "output_norm.weight"] + ([] if spec.tied_output else ["output.weight"])
    for i in range(spec.n_layers):
        names += [f"blk.{i}.{n}" for n in ("attn_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight",
                                           "attn_q.bias", "attn_k.bias", "attn_v.bias", "attn_output.weight",
                                           "ffn_norm.weight", "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight")]
    return names + (weight_names(vision) if vision is not None else [])


def _check_shapes(tensors: dict[str, TensorInfo], spec: ModelSpec) -> None:
    expected = {"token_embd.weight": (spec.vocab, spec.hidden), "blk.0.attn_q.weight": (spec.q_dim, spec.hidden),
                "blk.0.attn_k.weight": (spec.kv_dim, spec.hidden), "blk.0.ffn_gate.weight": (spec.ffn, spec.hidden)}
    for name, shape in expected.items():
        if name in tensors and tensors[name].shape != shape:
            raise ModelFormatError(f"tensor {name} is {list(tensors[name].shape)} but config.json implies "
                                   f"{list(shape)}")


def load_hf_checkpoint(path: Path, ctx: _ffi.Context, name: str) -> LoadedModel:
    start = time.monotonic()
    path = Path(path)
    config = hf_config.read_config(path)
    spec = hf_config.read_spec(config, name)
    vision = hf_config.read_vision_spec(config)
    tokenizer = Tokenizer.from_hf_dir(path)
    if vision is not None:
        _check_vision_tokens(tokenizer, vision, path)
        if vision.out_hidden != spec.hidden:
            raise ModelFormatError(f"vision out_hidden_size {vision.out_hidden} differs from the text hidden_size "
                                   f"{spec.hidden}")
    tensors = fuse_projections(map_tensors(safetensors_io.read_tensors(path), spec, vision, path), spec.n_layers)
    if spec.n_nextn:
        from .mtp_head import split_nextn

        tensors = split_nextn(tensors, spec.n_layers)
    weights = WeightArena(ctx, tensors, label=f"loading {path.name}")
    try:
        decoder = Decoder(ctx, spec, weights)
        encoder = _encoder(ctx, vision, weights, path) if vision is not None else None
    except BaseException:
        weights.close()
        raise
    log.info("loaded %s (%s, %d layers%s, %.0f MB) in %.1fs", path.name, spec.arch, spec.n_layers,
             f", vision tower of {vision.depth} blocks" if vision else "", weights.nbytes / 1e6,
             time.monotonic() - start)
    return LoadedModel(name, path, spec, weights, decoder, tokenizer, ChatTemplate.for_tokenizer(tokenizer), encoder)


def _encoder(ctx, vision: hf_config.VisionSpec, weights, path: Path) -> VisionEncoder:
    preprocess = (PreprocessConfig.from_file(path) if (path / "preprocessor_config.json").is_file()
                  else PreprocessConfig(patch_size=vision.patch_size, merge_size=vision.merge_size,
                                        temporal_patch_size=vision.temporal_patch_size))
    for key in ("patch_size", "merge_size", "temporal_patch_size"):
        ours = getattr(vision, key)
        if getattr(preprocess, key) != ours:
            raise ModelFormatError(f"preprocessor_config.json {key}={getattr(preprocess, key)} but the vision "
                                   f"config has {ours}")
    max_patches = preprocess.max_pixels // (vision.patch_size ** 2)
    return VisionEncoder(ctx, vision, weights, preprocess, max_patches)


def _check_vision_tokens(tokenizer: Tokenizer, vision: hf_config.VisionSpec, path: Path) -> None:
    for token, wanted in (("<|image_pad|>", vision.image_pad_id), ("<|vision_start|>", vision.vision_start_id),
                          ("<|vision_end|>", vision.vision_end_id)):
        found = tokenizer.token_to_id(token)
        if found != wanted:
            raise ModelFormatError(f"{path}: config.json puts {token} at id {wanted} but tokenizer.json has it at "
                                   f"{found}; the checkpoint's tokenizer and config disagree")

"""Loading a model by name: resolve it, read its description, upload its weights.

`load_model` returns everything the engine needs: the spec, the device
weights, the decoder, the tokenizer and the chat template. GGUF files now;
Hugging Face checkpoint directories go through the same shape.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from .. import _ffi
from ..chat_template import ChatTemplate
from ..model_store import resolve_model
from ..tokenizer import Tokenizer
from . import gguf_spec
from .decoder import Decoder
from .fusion import fuse_projections
from .model import LoadedModel
from .spec import ModelSpec
from .weights import WeightArena

log = logging.getLogger("strata.models")


def load_model(name: str | None, ctx: _ffi.Context) -> LoadedModel:
    path = resolve_model(name)
    if path.is_dir():
        from .hf_loader import load_hf_checkpoint   # Hugging Face checkpoint directories

        return load_hf_checkpoint(path, ctx, name or path.name)
    return load_gguf(path, ctx, name or path.stem)


def load_gguf(path: Path, ctx: _ffi.Context, name: str) -> LoadedModel:
    start = time.monotonic()
    reader = gguf_spec.open_reader(path)
    spec = gguf_spec.read_spec(reader)
    tensors = gguf_spec.read_tensors(reader)
    _check_tensors(spec, tensors, path)
    tokenizer = Tokenizer.from_gguf(reader)
    template = ChatTemplate.for_tokenizer(tokenizer, arch=spec.arch)
    if spec.arch == "gemma3":       # Q/K norms need q and k as dense rows: no fused projections
        from .gemma3_decoder import Gemma3Decoder as decoder_class
    elif spec.arch == "qwen3":
        from .qk_norm_decoder import QKNormDecoder as decoder_class
    else:
        tensors = fuse_projections(tensors, spec.n_layers)
        decoder_class = Decoder
    if spec.n_nextn:
        from .mtp_head import split_nextn

        tensors = split_nextn(tensors, spec.n_layers)
    weights = WeightArena(ctx, tensors, label=f"loading {path.name}")
    decoder = decoder_class(ctx, spec, weights)
    log.info("loaded %s (%s, %d layers, %.0f MB) in %.1fs", path.name, spec.arch, spec.n_layers,
             weights.nbytes / 1e6, time.monotonic() - start)
    return LoadedModel(name, path, spec, weights, decoder, tokenizer, template)


def _check_tensors(spec: ModelSpec, tensors: dict, path: Path) -> None:
    needed = ["token_embd.weight", "output_norm.weight"]
    names = ["attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down"]
    if spec.arch == "gemma3":
        names += ["attn_q_norm", "attn_k_norm", "post_attention_norm", "post_ffw_norm"]
    elif spec.arch == "qwen3":
        names += ["attn_q_norm", "attn_k_norm"]
    for i in range(spec.n_layers):
        needed += [f"blk.{i}.{n}.weight" for n in names]
    missing = [n for n in needed if n not in tensors]
    if missing:
        raise gguf_spec.ModelFormatError(f"{path} lacks tensors {', '.join(missing[:5])}"
                                         f"{' and more' if len(missing) > 5 else ''}")
    for name, t in tensors.items():
        if len(t.shape) == 2 and t.dtype not in (_ffi.DType.F32, _ffi.DType.F16, _ffi.DType.BF16):
            block, _ = _ffi.dtype_block(t.dtype)
            if t.shape[1] % block:
                raise gguf_spec.ModelFormatError(f"tensor {name} rows of {t.shape[1]} values are not whole blocks")

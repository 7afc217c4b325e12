"""Loading a model split by layers over several devices (`--devices`, `--layer-split`).

Each stage gets a contiguous range of layers, renumbered from 0 in its own
weight arena on its own context: the embedding only on the first stage, the
output norm and head only on the last (a tied head's embedding table there
too), small shared tensors (RoPE frequency factors) on every stage. The
boundaries are the first layer of each stage after the first; by default
they balance the stages' weight bytes. docs/layer-split.md describes the
split and what it guarantees.
"""

from __future__ import annotations

import logging
import time

from .. import _ffi as F
from ..chat_template import ChatTemplate
from ..model_store import resolve_model
from ..tokenizer import Tokenizer
from . import gguf_spec
from .fusion import fuse_projections
from .loader import _check_tensors      # the single-device loader's check, shared as is
from .model import LoadedModel, ModelFormatError
from .split_decoder import SplitDecoder, Stage, StageDecoder, stage_spec
from .weights import WeightArena

log = logging.getLogger("strata.models")

# The architectures whose layers are independent of their index (no per-layer window pattern):
# a stage renumbers its layers from 0 and runs the plain Decoder blocks.
SPLIT_ARCHS = ("llama", "qwen2")
HEAD_TENSORS = ("output.weight", "output_norm.weight")


class SplitWeights:
    """Every stage's weights, closed (with the stages' buffers and extra contexts) as one."""

    def __init__(self, decoder: SplitDecoder):
        self.decoder = decoder
        self.nbytes = sum(stage.weights.nbytes for stage in decoder.stages)

    def close(self) -> None:
        self.decoder.close()


def load_split_model(name: str | None, ctx: F.Context, more_devices: tuple[str, ...],
                     boundaries: tuple[int, ...] | None, num_threads: int = 0) -> LoadedModel:
    """The model on `ctx` (stage 0) and one new context per device of `more_devices`."""
    start = time.monotonic()
    path = resolve_model(name)
    if path.is_dir():
        raise ModelFormatError(f"{path} is a Hugging Face checkpoint directory; the layer split (--devices) "
                               f"serves GGUF files of {' and '.join(SPLIT_ARCHS)} models")
    reader = gguf_spec.open_reader(path)
    spec = gguf_spec.read_spec(reader)
    if spec.arch not in SPLIT_ARCHS or spec.n_nextn:
        what = f"{spec.arch} with MTP layers" if spec.n_nextn else spec.arch
        raise ModelFormatError(f"the layer split (--devices) supports {' and '.join(SPLIT_ARCHS)} models "
                               f"without MTP layers, not {what}; serve it on one device")
    tensors = gguf_spec.read_tensors(reader)
    _check_tensors(spec, tensors, path)
    tokenizer = Tokenizer.from_gguf(reader)
    template = ChatTemplate.for_tokenizer(tokenizer, arch=spec.arch)
    tensors = fuse_projections(tensors, spec.n_layers)
    n_stages = 1 + len(more_devices)
    bounds = check_boundaries(boundaries, spec.n_layers, n_stages) if boundaries else \
        balanced_boundaries(tensors, spec.n_layers, n_stages, spec.tied_output)
    edges = [0, *bounds, spec.n_layers]
    stages: list[Stage] = []
    try:
        for index in range(n_stages):
            stage_ctx = ctx if index == 0 else F.Context(more_devices[index - 1], num_threads)
            first, last = index == 0, index == n_stages - 1
            part = stage_tensors(tensors, edges[index], edges[index + 1], first, last, spec.tied_output)
            try:
                weights = WeightArena(stage_ctx, part, label=f"loading {path.name} layers {edges[index]}-"
                                                             f"{edges[index + 1] - 1} on {stage_ctx.device}")
            except BaseException:
                if index:
                    stage_ctx.close()
                raise
            decoder = StageDecoder(stage_ctx, stage_spec(spec, edges[index + 1] - edges[index]), weights, first, last)
            stages.append(Stage(stage_ctx, decoder, weights, owns_ctx=index > 0))
    except BaseException:
        for stage in reversed(stages):
            stage.close()
        raise
    decoder = SplitDecoder(spec, stages)
    weights = SplitWeights(decoder)
    log.info("loaded %s (%s, %d layers, %.0f MB) split at layers %s over %s in %.1fs", path.name, spec.arch,
             spec.n_layers, weights.nbytes / 1e6, ",".join(map(str, bounds)),
             ",".join(stage.ctx.device for stage in stages), time.monotonic() - start)
    return LoadedModel(name or path.stem, path, spec, weights, decoder, tokenizer, template)


def stage_tensors(tensors: dict, begin: int, end: int, first: bool, last: bool, tied: bool) -> dict:
    """The tensors of layers [begin, end) renamed blk.0..., plus the embedding (first) and head (last)."""
    part = {}
    for name, tensor in tensors.items():
        if name.startswith("blk."):
            _, layer, rest = name.split(".", 2)
            if begin <= int(layer) < end:
                part[f"blk.{int(layer) - begin}.{rest}"] = tensor
        elif name == "token_embd.weight":
            if first or (last and tied):
                part[name] = tensor
        elif name in HEAD_TENSORS:
            if last:
                part[name] = tensor
        else:
            part[name] = tensor          # small tensors every layer reads (rope_freqs)
    return part


def check_boundaries(boundaries: tuple[int, ...], n_layers: int, n_stages: int) -> tuple[int, ...]:
    if len(boundaries) != n_stages - 1:
        raise ModelFormatError(f"--layer-split needs {n_stages - 1} boundaries for {n_stages} devices, got "
                               f"{len(boundaries)}")
    if any(b <= a for a, b in zip((0, *boundaries), (*boundaries, n_layers))):
        raise ModelFormatError(f"--layer-split boundaries must rise strictly from 1 to {n_layers - 1} (the model "
                               f"has {n_layers} layers; each stage needs one), got {','.join(map(str, boundaries))}")
    return tuple(boundaries)


def balanced_boundaries(tensors: dict, n_layers: int, n_stages: int, tied: bool = False) -> tuple[int, ...]:
    """Boundaries that balance the stages' weight bytes (the embedding counted on the first stage,
    the head on the last — a tied head is a second copy of the embedding), each stage keeping at
    least one layer."""
    if n_stages > n_layers:
        raise ModelFormatError(f"{n_stages} devices for {n_layers} layers: each stage needs a layer")
    layer_bytes = [0] * n_layers
    edge_bytes = 0
    for name, tensor in tensors.items():
        if name.startswith("blk."):
            layer_bytes[int(name.split(".")[1])] += tensor.nbytes
        else:
            edge_bytes += tensor.nbytes
    total = sum(layer_bytes) + edge_bytes + (tensors["token_embd.weight"].nbytes if tied else 0)
    bounds, done, first_bytes = [], 0, tensors["token_embd.weight"].nbytes
    for layer in range(n_layers):
        done += layer_bytes[layer]
        stage = len(bounds) + 1
        if stage < n_stages and first_bytes + done >= total * stage / n_stages:
            bounds.append(layer + 1)
    bounds += [n_layers] * (n_stages - 1 - len(bounds))
    fitted, previous = [], 0                 # every stage at least one layer, the last ones included
    for i, bound in enumerate(bounds):
        previous = min(max(bound, previous + 1), n_layers - (n_stages - 1 - i))
        fitted.append(previous)
    return check_boundaries(tuple(fitted), n_layers, n_stages)

"""Writes a random-weight `llama` GGUF: metadata through gguf's GGUFWriter, tensor data streamed.

`write_llama_gguf` is the Python API behind `strata synth`. The header, the
metadata (llama hyperparameters plus SmolLM2's tokenizer) and the tensor
infos go through GGUFWriter, declared with their raw GGML types; the tensor
data is then appended chunk by chunk (strata.synth.stream), so memory stays
bounded whatever the model size. The file appears under its name only once
complete.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from gguf import GGUFWriter

from strata.synth.plan import TensorSpec, file_type_id, is_quantized, parse_dtype, plan_tensors
from strata.synth.shapes import LlamaShape, SynthError, resolve_shape
from strata.synth.stream import pad_to_alignment, write_tensors
from strata.synth.tokenizer import add_tokenizer_keys, find_tokenizer_gguf, read_tokenizer_fields, resize_vocab

WEIGHT_STD = 0.02


@dataclass
class SynthReport:
    path: Path
    shape: LlamaShape
    dtype: str
    pure: bool
    seed: int
    num_params: int
    tensor_bytes: int  # the model size llama-bench reports (tensor data only)
    file_bytes: int
    seconds: float
    type_counts: dict[str, int] = field(default_factory=dict)

    def summary(self) -> str:
        types = ", ".join(f"{n}×{t}" for t, n in sorted(self.type_counts.items()))
        return (f"wrote {self.path}: llama {self.shape.name} {self.dtype}{' (pure)' if self.pure else ''}, "
                f"{self.num_params / 1e6:.1f} M params, tensors {format_size(self.tensor_bytes)}, "
                f"file {format_size(self.file_bytes)} in {self.seconds:.1f} s, seed {self.seed} [{types}]")


def format_size(num_bytes: int) -> str:
    if num_bytes >= 1 << 30:
        return f"{num_bytes / (1 << 30):.2f} GiB"
    return f"{num_bytes / (1 << 20):.1f} MiB"


def write_llama_gguf(
    path: str | os.PathLike,
    shape: str | LlamaShape = "tiny",
    dtype: str = "Q4_0",
    seed: int = 0,
    *,
    pure: bool = False,
    tokenizer_from: str | os.PathLike | None = None,
    num_threads: int | None = None,
    progress: Callable[[str], None] | None = None,
    **overrides: int | None,
) -> SynthReport:
    """Writes a random-weight llama GGUF and reports what it wrote.

    `shape` is a preset name (tiny, 135m, 1b, 8b) or a LlamaShape; `overrides`
    (layers, hidden, ffn, heads, kv_heads, vocab, ctx) change it. Weights have
    std 0.02 and norms are 1.0; the bytes depend only on the arguments.
    """
    start = time.perf_counter()
    path, dtype = Path(path), parse_dtype(dtype)
    llama = resolve_shape(shape, **overrides)
    specs = plan_tensors(llama, dtype, pure)
    if seed < 0:
        raise SynthError(f"seed must be a non-negative integer, got {seed}")
    if not path.parent.is_dir():
        raise SynthError(f"can't write {path}: directory {path.parent} does not exist")
    source = find_tokenizer_gguf(tokenizer_from)
    if progress is not None:
        progress(f"llama {llama.name} {dtype}: {len(specs)} tensors, {format_size(sum(s.num_bytes for s in specs))}"
                 f"; tokenizer from {source}")
    tokenizer = resize_vocab(read_tokenizer_fields(source), llama.vocab_size)
    partial = path.with_name(path.name + ".partial")
    try:
        _write_header(partial, llama, dtype, seed, specs, tokenizer)
        with open(partial, "ab") as out:
            pad_to_alignment(out)
            write_tensors(out, specs, seed, WEIGHT_STD, num_threads, _progress_by_group(specs, progress, start))
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    return SynthReport(path, llama, dtype, pure, seed,
                       num_params=sum(s.num_params for s in specs),
                       tensor_bytes=sum(s.num_bytes for s in specs),
                       file_bytes=path.stat().st_size,
                       seconds=time.perf_counter() - start,
                       type_counts=dict(Counter(s.qtype.name for s in specs)))


def _write_header(path: Path, llama: LlamaShape, dtype: str, seed: int, specs: list[TensorSpec], tokenizer) -> None:
    writer = GGUFWriter(path, "llama")
    _add_model_keys(writer, llama, dtype, seed)
    add_tokenizer_keys(writer, tokenizer)
    for spec in specs:
        # A non-uint8 dtype makes GGUFWriter take `shape` as the element shape of raw_dtype.
        writer.add_tensor_info(spec.name, spec.shape, np.dtype(np.float32), spec.num_bytes, raw_dtype=spec.qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()


def _add_model_keys(writer: GGUFWriter, llama: LlamaShape, dtype: str, seed: int) -> None:
    writer.add_type("model")
    writer.add_name(f"strata-synth llama {llama.name} {dtype}")
    writer.add_description(f"random weights (std {WEIGHT_STD}, seed {seed}) written by strata synth")
    writer.add_context_length(llama.context_len)
    writer.add_embedding_length(llama.hidden_size)
    writer.add_block_count(llama.num_layers)
    writer.add_feed_forward_length(llama.ffn_size)
    writer.add_head_count(llama.num_heads)
    writer.add_head_count_kv(llama.num_kv_heads)
    writer.add_layer_norm_rms_eps(llama.rms_eps)
    writer.add_rope_dimension_count(llama.head_dim)
    writer.add_rope_freq_base(llama.rope_base)
    writer.add_vocab_size(llama.vocab_size)
    writer.add_file_type(int(file_type_id(dtype)))
    if is_quantized(dtype):
        writer.add_quantization_version(2)  # GGML_QNT_VERSION


def _progress_by_group(specs: list[TensorSpec], progress: Callable[[str], None] | None, start: float):
    """An on_tensor callback that reports one line per finished group (token_embd, blk.N, output)."""
    if progress is None:
        return None
    groups = list(dict.fromkeys(s.group for s in specs))
    members = Counter(s.group for s in specs)
    group_bytes = Counter()
    for s in specs:
        group_bytes[s.group] += s.num_bytes
    done: Counter[str] = Counter()

    def on_tensor(spec: TensorSpec) -> None:
        done[spec.group] += 1
        if done[spec.group] == members[spec.group]:
            index = groups.index(spec.group) + 1
            progress(f"[{index:>{len(str(len(groups)))}}/{len(groups)}] {spec.group:<10} "
                     f"{members[spec.group]:>2} tensors {format_size(group_bytes[spec.group]):>10}  "
                     f"{time.perf_counter() - start:6.1f} s")

    return on_tensor

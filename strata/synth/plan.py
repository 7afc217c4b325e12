"""Which tensors a llama GGUF holds, and each one's type: llama-quantize's default mix.

The mix follows llama.cpp's `llama_tensor_get_type` for the file types we
support, so synthesized files have the sizes llama-quantize gives the
benchmark shapes (docs/design.md, "Benchmark shapes"):

- 1-D tensors (the RMSNorm weights) are always F32.
- Q4_K_M (llama.cpp's `use_more_bits`): attn_v and ffn_down are Q6_K in
  layers i < n/8, i >= 7n/8 and (i - n/8) % 3 == 2; the rest is Q4_K.
- For Q4_0, Q4_1 and Q4_K files the output matrix (`output`, or `token_embd`
  when the embeddings are tied) is Q6_K; other file types keep it in the file
  type (Q8_0 stays Q8_0; F32/F16/BF16 files are not "quantized" at all).
- Q5_K_M gives attn_v and ffn_down Q6_K in the layers llama.cpp's
  use_more_bits picks; IQ4_XS gives attn_v Q5_K when heads >= 4 x KV heads;
  both keep a Q6_K output.
- The low-bit mixes as llama-quantize makes them: Q3_K_M gives attn_v Q5_K in
  the first two layers and Q4_K after, attn_output Q4_K, ffn_down Q5_K in the
  first sixteenth of the layers and Q4_K after; Q2_K gives attn_v Q4_K when
  heads >= 4 x KV heads (else Q3_K), attn_output and ffn_down Q3_K; IQ3_S
  gives attn_v Q4_K when heads >= 4 x KV heads. All three keep a Q6_K output.
- A k-quant (256-value blocks) needs rows that are a multiple of 256 long;
  otherwise llama-quantize falls back: Q6_K -> Q8_0, Q5_K -> Q5_1, IQ4_XS,
  Q3_K, Q2_K and IQ3_S -> IQ4_NL (as llama.cpp), and Q4_K -> Q4_1 (llama.cpp picks Q5_0; kept as it
  was, the benchmark anchors were measured with it). This is
  why SmolLM2-135M (hidden 576) has a Q8_0 `token_embd` in its Q4_0 file.

`pure` uses the file type for every matrix and refuses shapes it can't fit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from math import prod

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as QT, LlamaFileType

from strata.synth.shapes import LlamaShape, SynthError

FILE_TYPES: dict[str, tuple[QT, LlamaFileType]] = {
    "F32": (QT.F32, LlamaFileType.ALL_F32),
    "F16": (QT.F16, LlamaFileType.MOSTLY_F16),
    "BF16": (QT.BF16, LlamaFileType.MOSTLY_BF16),
    "Q8_0": (QT.Q8_0, LlamaFileType.MOSTLY_Q8_0),
    "Q4_0": (QT.Q4_0, LlamaFileType.MOSTLY_Q4_0),
    "Q4_1": (QT.Q4_1, LlamaFileType.MOSTLY_Q4_1),
    # Our Q4_K mix (all Q4_K but a Q6_K output) is closest to llama.cpp's Q4_K_S.
    "Q4_K": (QT.Q4_K, LlamaFileType.MOSTLY_Q4_K_S),
    # llama-quantize's Q4_K_M: Q4_K, with Q6_K for the output and for attn_v and ffn_down in
    # the layers llama.cpp's use_more_bits picks (first and last eighth, every third between).
    "Q4_K_M": (QT.Q4_K, LlamaFileType.MOSTLY_Q4_K_M),
    "Q6_K": (QT.Q6_K, LlamaFileType.MOSTLY_Q6_K),
    # llama-quantize's Q5_K_M: Q5_K, with Q6_K for attn_v and ffn_down in the layers use_more_bits picks.
    "Q5_K_M": (QT.Q5_K, LlamaFileType.MOSTLY_Q5_K_M),
    # IQ4_XS everywhere (attn_v Q5_K when n_heads >= 4 n_kv_heads), as llama-quantize.
    "IQ4_XS": (QT.IQ4_XS, LlamaFileType.MOSTLY_IQ4_XS),
    # llama-quantize's low-bit mixes (per-tensor choices in _mixed_type).
    "Q3_K_M": (QT.Q3_K, LlamaFileType.MOSTLY_Q3_K_M),
    "Q2_K": (QT.Q2_K, LlamaFileType.MOSTLY_Q2_K),
    "IQ3_S": (QT.IQ3_S, LlamaFileType.MOSTLY_IQ3_S),
}
_OUTPUT_TO_Q6_K = {QT.Q4_0, QT.Q4_1, QT.Q4_K, QT.Q5_K, QT.IQ4_XS, QT.Q3_K, QT.Q2_K, QT.IQ3_S}
_K_FALLBACK = {QT.Q4_K: QT.Q4_1, QT.Q6_K: QT.Q8_0, QT.Q5_K: QT.Q5_1, QT.IQ4_XS: QT.IQ4_NL, QT.Q3_K: QT.IQ4_NL,
               QT.Q2_K: QT.IQ4_NL, QT.IQ3_S: QT.IQ4_NL}
_FLOAT_TYPES = {QT.F32, QT.F16, QT.BF16}


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int, ...]  # NumPy order: [rows, row_len]; GGUF lists it reversed
    qtype: QT
    fill: str = "random"  # "random" (std-controlled weights) or "ones" (norms)

    @property
    def num_params(self) -> int:
        return prod(self.shape)

    @property
    def row_bytes(self) -> int:
        block_len, block_bytes = GGML_QUANT_SIZES[self.qtype]
        return self.shape[-1] // block_len * block_bytes

    @property
    def num_bytes(self) -> int:
        return prod(self.shape[:-1]) * self.row_bytes

    @property
    def group(self) -> str:
        """The progress group: token_embd, blk.N or output."""
        match = re.match(r"blk\.\d+", self.name)
        return match.group(0) if match else self.name.split(".")[0].removesuffix("_norm")


def parse_dtype(dtype: str) -> str:
    """The canonical file-type name for a user's spelling (q4_0 -> Q4_0)."""
    name = dtype.upper()
    if name not in FILE_TYPES:
        raise SynthError(f"unknown type {dtype!r}; choose one of: {', '.join(FILE_TYPES)}")
    return name


def file_type_id(dtype: str) -> LlamaFileType:
    return FILE_TYPES[parse_dtype(dtype)][1]


def plan_tensors(shape: LlamaShape, dtype: str, pure: bool = False) -> list[TensorSpec]:
    """Every tensor of the file, in file order, with its type."""
    file_type = parse_dtype(dtype)
    base = FILE_TYPES[file_type][0]
    output_name = "token_embd.weight" if shape.tied_embeddings else "output.weight"
    specs = [_matrix("token_embd.weight", shape.vocab_size, shape.hidden_size, base, output_name, pure)]
    for layer in range(shape.num_layers):
        specs += _layer(shape, layer, file_type, base, pure)
    specs.append(TensorSpec("output_norm.weight", (shape.hidden_size,), QT.F32, "ones"))
    if not shape.tied_embeddings:
        specs.append(_matrix("output.weight", shape.vocab_size, shape.hidden_size, base, output_name, pure))
    return specs


def _use_more_bits(layer: int, n_layers: int) -> bool:
    """llama.cpp's choice of the layers that get more bits in _M mixes (integer arithmetic as there)."""
    eighth = n_layers // 8
    return layer < eighth or layer >= 7 * n_layers // 8 or (layer - eighth) % 3 == 2


def _mixed_type(shape: LlamaShape, layer: int, kind: str, file_type: str, base: QT) -> QT:
    """The _M mixes', IQ4_XS's and the low-bit mixes' per-tensor choices (everything else keeps the file type)."""
    gqa4 = shape.num_heads >= 4 * shape.num_kv_heads
    if file_type in ("Q4_K_M", "Q5_K_M") and kind in ("attn_v", "ffn_down") \
            and _use_more_bits(layer, shape.num_layers):
        return QT.Q6_K
    if base == QT.IQ4_XS and kind == "attn_v" and gqa4:
        return QT.Q5_K
    if file_type == "Q3_K_M":
        if kind == "attn_v":
            return QT.Q5_K if layer < 2 else QT.Q4_K
        if kind == "ffn_down":
            return QT.Q5_K if layer < shape.num_layers // 16 else QT.Q4_K
        if kind == "attn_output":
            return QT.Q4_K
    if file_type == "Q2_K":
        if kind == "attn_v":
            return QT.Q4_K if gqa4 else QT.Q3_K
        if kind in ("attn_output", "ffn_down"):
            return QT.Q3_K
    if file_type == "IQ3_S" and kind == "attn_v" and gqa4:
        return QT.Q4_K
    return base


def _layer(shape: LlamaShape, layer: int, file_type: str, base: QT, pure: bool) -> list[TensorSpec]:
    hidden, kv, ffn = shape.hidden_size, shape.kv_size, shape.ffn_size
    prefix = f"blk.{layer}."

    def matrix(kind, rows, row_len):
        qtype = base if pure else _mixed_type(shape, layer, kind, file_type, base)
        return _matrix(prefix + kind + ".weight", rows, row_len, qtype, "", pure)

    return [
        TensorSpec(prefix + "attn_norm.weight", (hidden,), QT.F32, "ones"),
        matrix("attn_q", hidden, hidden),
        matrix("attn_k", kv, hidden),
        matrix("attn_v", kv, hidden),
        matrix("attn_output", hidden, hidden),
        TensorSpec(prefix + "ffn_norm.weight", (hidden,), QT.F32, "ones"),
        matrix("ffn_gate", ffn, hidden),
        matrix("ffn_up", ffn, hidden),
        matrix("ffn_down", hidden, ffn),
    ]


def _matrix(name: str, rows: int, row_len: int, base: QT, output_name: str, pure: bool) -> TensorSpec:
    qtype = base
    if not pure and name == output_name and base in _OUTPUT_TO_Q6_K:
        qtype = QT.Q6_K
    if row_len % _block_len(qtype) and not pure and qtype in _K_FALLBACK:
        qtype = _K_FALLBACK[qtype]
    if row_len % _block_len(qtype):
        hint = " (or drop --pure)" if pure else ""
        raise SynthError(f"{name} has rows of {row_len} values, not a multiple of the {qtype.name} block "
                         f"({_block_len(qtype)}); pick --hidden/--ffn multiples of {_block_len(qtype)}{hint}")
    return TensorSpec(name, (rows, row_len), qtype)


def _block_len(qtype: QT) -> int:
    return GGML_QUANT_SIZES[qtype][0]


def is_quantized(dtype: str) -> bool:
    return FILE_TYPES[parse_dtype(dtype)][0] not in _FLOAT_TYPES

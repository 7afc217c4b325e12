"""How far CUDA's int8 rounding of the LM head's input can move each logit (a test helper).

CUDA's integer path (libstrata/src/cuda/cuda_int_matmul.cu; Q4_0, Q8_0 and
Q4_K weights) rounds each 32-value block of the head's input x' (the final RMSNorm's
output) to int8 with step max|x'_b|/127; the CPU backend and float references
do not. Per logit v the rounding moves the result by at most
sum over blocks b of max|x'_b|/254 * sum|w_vb| (docs/kernels.md, CUDA matmul
precision). Tests comparing CUDA logits with a float computation add this to
their float tolerance.
"""

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, quants

from strata import _ffi

CUDA_INT8_HEAD = (_ffi.DType.Q4_0, _ffi.DType.Q8_0, _ffi.DType.Q4_1, _ffi.DType.Q4_K, _ffi.DType.Q6_K)  # cuda_int_matmul.cu's types


def head_int8_bound(llm, cpu_as_reference: bool = False) -> np.ndarray:
    """[vocab] float64: the most CUDA's int8 rounding of the LM head's input can move each logit
    of the last step, from `llm`'s final hidden state; zeros off the integer path (a head of
    another type, or `llm` itself on the CPU, whose head is float)."""
    decoder, spec, runner = llm.engine.model.decoder, llm.engine.model.spec, llm.engine.runner
    o = decoder.output
    on_cuda = runner.ctx.info().backend == _ffi.Backend.CUDA
    if o.dtype not in CUDA_INT8_HEAD or (not on_cuda and not cpu_as_reference):
        return np.zeros(spec.vocab)
    act = runner.act
    x = act.buffer.to_numpy(np.float32, (spec.hidden,), act.xs).astype(np.float64)  # gathered, before the norm
    n = decoder.output_norm
    g = n.buffer.to_numpy(np.float32, (spec.hidden,), n.offset).astype(np.float64)
    xp = x / np.sqrt((x ** 2).mean() + spec.rms_eps) * g
    qtype = GGMLQuantizationType(int(o.dtype))
    block, block_bytes = GGML_QUANT_SIZES[qtype]
    raw = o.buffer.to_numpy(np.uint8, (o.rows, o.cols // block * block_bytes), o.offset)
    w = quants.dequantize(raw, qtype).astype(np.float64)  # [vocab, hidden]
    nb = spec.hidden // 32
    step_half = np.abs(xp[:32 * nb]).reshape(nb, 32).max(axis=1) / 254.0
    return np.abs(w[:, :32 * nb]).reshape(o.rows, nb, 32).sum(axis=2) @ step_half

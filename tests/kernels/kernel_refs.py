"""Float64 NumPy references and test-data builders shared by the kernel tests.

Weights for every dtype are built as raw GGUF blocks plus their float64
dequantization by gguf.quants (F16/BF16/Q8_0/Q4_0/Q4_1/Q5_0/Q5_1 quantized by gguf;
Q2_K/Q3_K/Q4_K/Q5_K/Q6_K/IQ3_S/IQ4_NL/IQ4_XS, which gguf cannot write, as valid
random blocks with small finite f16 scales; IQ3_S's random grid indices reach
all 512 codebook entries of gguf's IQ3_S table).
"""

import numpy as np
from gguf import GGMLQuantizationType as QT
from gguf.quants import dequantize, quantize

from strata import _ffi as S

GGUF_TYPE = {
    S.DType.F32: QT.F32, S.DType.F16: QT.F16, S.DType.BF16: QT.BF16, S.DType.Q8_0: QT.Q8_0,
    S.DType.Q4_0: QT.Q4_0, S.DType.Q4_1: QT.Q4_1, S.DType.Q4_K: QT.Q4_K, S.DType.Q6_K: QT.Q6_K,
    S.DType.Q5_0: QT.Q5_0, S.DType.Q5_1: QT.Q5_1, S.DType.Q5_K: QT.Q5_K, S.DType.IQ4_NL: QT.IQ4_NL,
    S.DType.IQ4_XS: QT.IQ4_XS, S.DType.Q2_K: QT.Q2_K, S.DType.Q3_K: QT.Q3_K, S.DType.IQ3_S: QT.IQ3_S,
}
WEIGHT_DTYPES = list(GGUF_TYPE)
BLOCK_VALUES = {S.DType.F32: 1, S.DType.F16: 1, S.DType.BF16: 1, S.DType.Q8_0: 32, S.DType.Q4_0: 32,
                S.DType.Q4_1: 32, S.DType.Q4_K: 256, S.DType.Q6_K: 256, S.DType.Q5_0: 32, S.DType.Q5_1: 32,
                S.DType.Q5_K: 256, S.DType.IQ4_NL: 32, S.DType.IQ4_XS: 256, S.DType.Q2_K: 256,
                S.DType.Q3_K: 256, S.DType.IQ3_S: 256}


def _f16_bytes(values):
    return np.asarray(values, dtype=np.float16).view(np.uint8).reshape(-1, 2)


def _random_q4_k(rng, n_blocks):
    d = _f16_bytes(rng.uniform(0.0005, 0.004, n_blocks))
    dmin = _f16_bytes(rng.uniform(0.0005, 0.004, n_blocks))
    scales = rng.integers(0, 256, (n_blocks, 12), dtype=np.uint8)
    qs = rng.integers(0, 256, (n_blocks, 128), dtype=np.uint8)
    return np.concatenate([d, dmin, scales, qs], axis=1)


def _random_q6_k(rng, n_blocks):
    ql = rng.integers(0, 256, (n_blocks, 128), dtype=np.uint8)
    qh = rng.integers(0, 256, (n_blocks, 64), dtype=np.uint8)
    scales = rng.integers(-128, 128, (n_blocks, 16)).astype(np.int8).view(np.uint8)
    d = _f16_bytes(rng.uniform(0.0002, 0.002, n_blocks))
    return np.concatenate([ql, qh, scales, d], axis=1)


def _random_q5_k(rng, n_blocks):
    d = _f16_bytes(rng.uniform(0.0005, 0.004, n_blocks))
    dmin = _f16_bytes(rng.uniform(0.0005, 0.004, n_blocks))
    rest = rng.integers(0, 256, (n_blocks, 12 + 32 + 128), dtype=np.uint8)   # scales, qh, qs
    return np.concatenate([d, dmin, rest], axis=1)


def _random_iq4_nl(rng, n_blocks):
    return np.concatenate([_f16_bytes(rng.uniform(0.0005, 0.02, n_blocks)),
                           rng.integers(0, 256, (n_blocks, 16), dtype=np.uint8)], axis=1)


def _random_iq4_xs(rng, n_blocks):
    return np.concatenate([_f16_bytes(rng.uniform(0.0002, 0.001, n_blocks)),
                           rng.integers(0, 256, (n_blocks, 2 + 4 + 128), dtype=np.uint8)], axis=1)


def _random_q2_k(rng, n_blocks):
    rest = rng.integers(0, 256, (n_blocks, 16 + 64), dtype=np.uint8)   # scales, qs
    return np.concatenate([rest, _f16_bytes(rng.uniform(0.001, 0.01, n_blocks)),
                           _f16_bytes(rng.uniform(0.0005, 0.005, n_blocks))], axis=1)


def _random_q3_k(rng, n_blocks):
    rest = rng.integers(0, 256, (n_blocks, 32 + 64 + 12), dtype=np.uint8)   # hmask, qs, scales
    return np.concatenate([rest, _f16_bytes(rng.uniform(0.0002, 0.002, n_blocks))], axis=1)


def _random_iq3_s(rng, n_blocks):
    rest = rng.integers(0, 256, (n_blocks, 64 + 8 + 32 + 4), dtype=np.uint8)   # qs, qh, signs, scales
    return np.concatenate([_f16_bytes(rng.uniform(0.0002, 0.002, n_blocks)), rest], axis=1)


RANDOM_BLOCKS = {S.DType.Q4_K: (_random_q4_k, 256), S.DType.Q6_K: (_random_q6_k, 256),
                 S.DType.Q5_K: (_random_q5_k, 256), S.DType.IQ4_NL: (_random_iq4_nl, 32),
                 S.DType.IQ4_XS: (_random_iq4_xs, 256), S.DType.Q2_K: (_random_q2_k, 256),
                 S.DType.Q3_K: (_random_q3_k, 256), S.DType.IQ3_S: (_random_iq3_s, 256)}


def make_weights(rng, dtype, n_rows, k):
    """(raw bytes uint8 [n_rows, row_bytes], float64 values [n_rows, k]) for a weight dtype."""
    qtype = GGUF_TYPE[dtype]
    if dtype == S.DType.F32:
        values = rng.standard_normal((n_rows, k), dtype=np.float32)
        return values.view(np.uint8).reshape(n_rows, -1), values.astype(np.float64)
    if dtype in RANDOM_BLOCKS:       # types gguf cannot quantize: valid random blocks
        make, block = RANDOM_BLOCKS[dtype]
        raw = make(rng, n_rows * k // block).reshape(n_rows, -1)
    else:
        raw = quantize(rng.standard_normal((n_rows, k), dtype=np.float32), qtype)
    values = dequantize(raw, qtype).astype(np.float64).reshape(n_rows, k)
    assert np.isfinite(values).all()
    return np.ascontiguousarray(raw).reshape(n_rows, -1), values


def buffer_of(ctx, array, pad_front=0):
    """A buffer holding `array`'s bytes after `pad_front` junk bytes; returns (buffer, offset)."""
    data = np.ascontiguousarray(array).view(np.uint8).reshape(-1)
    junk = np.full(pad_front, 0xA5, dtype=np.uint8)
    return S.Buffer.from_array(ctx, np.concatenate([junk, data])), pad_front


def paged_slots(ctx, n_slots, n_layers, n_ctx, n_kv, head_dim, page_table, tables, kv_dtype="f16", unmapped=None):
    """A slot set whose pool pages start zeroed, slot s mapped to page_table[s] (one page per PAGE_CELLS
    cells) with position table tables[s]; unmapped = (slot, cell): the page of that cell left unmapped."""
    slot_pages = page_table.shape[1]
    slots = S.Slots(ctx, n_slots, n_layers, n_ctx, n_kv, head_dim, n_pages=page_table.size, kv_dtype=kv_dtype)
    zeros = bytes(slots.page_bytes())   # a new pool's bytes are unspecified: start from zeros
    for p in range(page_table.size):
        slots.write_page(p, zeros)
    for s in range(n_slots):
        slots.write_positions(s, 0, tables[s])
        table = page_table[s]
        if unmapped is not None and s == unmapped[0]:
            cut = unmapped[1] // S.PAGE_CELLS
            if cut > 0:
                slots.map_pages(s, 0, table[:cut])
            if cut + 1 < slot_pages:
                slots.map_pages(s, cut + 1, table[cut + 1:])
        else:
            slots.map_pages(s, 0, table)
    return slots


def run_recorded(ctx, call):
    """Records call()'s launches into a graph on ctx, launches it once and destroys it."""
    ctx.graph_begin()
    call()
    g = ctx.graph_end()
    g.launch()
    g.close()


def rows_array(pairs):
    """int32 [n_rows, 2] {slot, index} row metadata."""
    return np.asarray(pairs, dtype=np.int32).reshape(-1, 2)


def rope_inverse_frequencies(mode, rot_dim, theta_base, sections=(0, 0, 0, 0)):
    """Per-pair float32 inverse frequencies and position components, computed the
    way transformers does (float32 pow, then 1/x)."""
    half = rot_dim // 2
    j = np.arange(half)
    inv = (np.float32(1) / np.power(np.float32(theta_base),
                                    (2 * j).astype(np.float32) / np.float32(rot_dim))).astype(np.float32)
    comp = np.zeros(half, dtype=np.int64)
    if mode in (S.RopeMode.MROPE, S.RopeMode.VISION):
        start = 0
        for c, n in enumerate(sections):
            comp[start:start + n] = c
            if mode == S.RopeMode.VISION:
                i = np.arange(n)
                inv[start:start + n] = np.float32(1) / np.power(
                    np.float32(theta_base), (2 * i).astype(np.float32) / np.float32(2 * n))
            start += n
    return inv, comp


def rope_reference(x, positions, mode, head_dim, rot_dim, theta_base, freq_scale=1.0, sections=(0, 0, 0, 0),
                   freq_factors=None):
    """x: float [n_rows, n_heads * head_dim]; positions: int [n_rows, 4]. float64 result."""
    inv, comp = rope_inverse_frequencies(mode, rot_dim, theta_base, sections)
    if freq_factors is not None:
        inv = (inv / np.asarray(freq_factors, dtype=np.float32)).astype(np.float32)
    out = x.astype(np.float64).copy()
    n_rows = x.shape[0]
    heads = out.reshape(n_rows, -1, head_dim)
    half = rot_dim // 2
    for r in range(n_rows):
        pos = np.float32(positions[r][comp]) * np.float32(freq_scale)
        angle = (pos.astype(np.float32) * inv).astype(np.float32).astype(np.float64)
        c, s = np.cos(angle), np.sin(angle)
        if mode == S.RopeMode.ADJACENT:
            a, b = heads[r, :, 0:rot_dim:2].copy(), heads[r, :, 1:rot_dim:2].copy()
            heads[r, :, 0:rot_dim:2], heads[r, :, 1:rot_dim:2] = a * c - b * s, b * c + a * s
        else:
            a, b = heads[r, :, :half].copy(), heads[r, :, half:rot_dim].copy()
            heads[r, :, :half], heads[r, :, half:rot_dim] = a * c - b * s, b * c + a * s
    return out


def attention_reference(q, keys, values, scale):
    """q: [n_heads, hd]; keys/values: [n_keys, n_kv_heads, hd] (float64). Returns [n_heads * hd]."""
    n_heads, hd = q.shape
    group = n_heads // keys.shape[1]
    out = np.empty((n_heads, hd))
    for h in range(n_heads):
        k, v = keys[:, h // group, :], values[:, h // group, :]
        s = scale * (k @ q[h])
        p = np.exp(s - s.max())
        out[h] = (p @ v) / p.sum()
    return out.reshape(-1)


def int8_activation_bound(xp, w):
    """Per (row, output): sum over 32-value blocks of max|x'_block| / 254 * sum|w_block|,
    the most the int8 rounding of x' (step max|x'|/127, half a step per value) can move
    the exact product. xp: [n_rows, k] float64 activations after the prologue; w: [n_out, k]."""
    n, k = xp.shape
    nb = k // 32
    bm = np.abs(xp[:, :32 * nb]).reshape(n, nb, 32).max(axis=2) / 254.0
    wa = np.abs(w[:, :32 * nb]).reshape(w.shape[0], nb, 32).sum(axis=2)
    return bm @ wa.T


INT8_DTYPES = (S.DType.Q4_0, S.DType.Q8_0, S.DType.Q4_1, S.DType.Q4_K, S.DType.Q6_K)  # the types cuda_int_matmul.cu is routed for


def int8_activations(x):
    """x' as CUDA's integer path sees it: float64 [n_rows, k] of dx * xq, modelling the
    kernels' rounding of float32 x' (docs/kernels.md): per 32-value block, a = max|x'|
    (NaN counts as +inf), dx = float32(a / 127), xq = clamp(rint(x'/dx), +-127) in
    float32 with ties to even, and the whole block 0 when dx is 0 or not finite."""
    x = np.asarray(x, np.float32)
    n, k = x.shape
    blocks = x.reshape(n, k // 32, 32)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        a = np.abs(blocks)
        a = np.where(a <= np.finfo(np.float32).max, a, np.float32(np.inf)).max(axis=2, keepdims=True)
        dx = a / np.float32(127)  # float32 division, correctly rounded as on both backends
        usable = (dx > 0) & np.isfinite(dx)
        q = np.clip(np.rint(blocks / np.where(usable, dx, np.float32(1))), -127, 127)
    q = np.where(usable, q, 0).astype(np.float64)
    return (q * dx.astype(np.float64)).reshape(n, k)


def int8_accumulation_tolerance(k, bound, exact_terms=0.0):
    """CUDA's integer path's float error once the int8 rounding is modelled (int8_activations):
    exact block integers, one fmaf per block whose scale d*dx is a rounded product (Q4_K: two,
    scale then min, each within 2^-24), one add per slice of 8 blocks, then bias / accumulate:
    (k/32 + k/256 + 48) * 2^-23 of bound (sum |x^ w|)."""
    eps32 = 2.0 ** -23
    return (2.0 ** -20 + (k / 32 + k / 256 + 48) * eps32) * bound + 2 * eps32 * exact_terms + 1e-30


def matmul_tolerance(device, dtype, k, bound, exact_terms=0.0, xw=None):
    """Allowed |y - float64 reference| of a matmul on `device` ("cpu", "cuda:N").

    bound: sum_i |x'_i * w_i| per output (x' the activations after any prologue);
    exact_terms: |bias| + |y0| + |reference| (each rounded once or twice in float32);
    xw: (x' [n_rows, k] float64, w [n_out, k]) — needed for the CUDA integer path.

    CPU, and CUDA with F32 weights: x stays float32, so the only error is float32
    accumulation over k: 3e-6 * sqrt(k) * bound.
    CUDA integer path (Q4_0, Q8_0, Q4_1, Q4_K, Q6_K, cuda_int_matmul.cu): each 32-value block of x'
    is rounded to int8 with step max|x'|/127: at most int8_activation_bound (slack 2 %
    for the rounded step); the block products are exact integers, then one fmaf per block
    (its scale a rounded product) and one add per 8 blocks: (k/32 + k/256 + 48) * 2^-23 * bound.
    Q4_K folds each block with two fmafs (scale, then min: 2 * 2^-24 per block, the same
    2^-23 per block); its partial sums can exceed bound by the blocks' min terms, which the
    2^-20 and the 1.25 slack absorb for these data (and the int8 term dwarfs all of it: it
    is ~2^-8 of bound; Q4_1 likewise, its min term exact in dx·sx). Q6_K's block integer sc0·I0 + sc1·I1 is exact too (|I| < 2^24), one fmaf
    per block as Q4_0's.
    (Where x' is known in float32, tests model the rounding itself instead:
    int8_activations, int8_accumulation_tolerance.)
    CUDA tensor cores (F16, BF16, the other K-quants; Q4_1 under STRATA_INT_Q4_1=0): each 32-value block of x' is
    scaled by a power of two and rounded to f16 (bf16 for BF16 weights), a relative
    error of at most u = 2^-11 (2^-8) per value, so |error| <= u * bound; accumulation
    in float32 adds at most (k/32 + 48) * 2^-23 * bound (an mma sums 16 products, then
    one fmaf per block and one add per slice; 2^-23 allows truncating adders). The
    slack factor 1.25 covers the float32 prologue (rmsnorm scale, silu) rounding.
    """
    eps32 = 2.0 ** -23
    if device.startswith("cuda") and dtype in INT8_DTYPES:
        if xw is None:
            raise ValueError("the CUDA integer path's tolerance needs xw=(x', w)")
        acc = 1.25 * (2.0 ** -20 + (k / 32 + k / 256 + 48) * eps32) * bound
        return 1.02 * int8_activation_bound(*xw) + acc + 2 * eps32 * exact_terms + 1e-30
    if device.startswith("cuda") and dtype != S.DType.F32:
        u = 2.0 ** -8 if dtype == S.DType.BF16 else 2.0 ** -11
        return 1.25 * (u + (k / 32 + 48) * eps32) * bound + 2 * eps32 * exact_terms + 1e-30
    return 3e-6 * np.sqrt(k) * bound + 2 * eps32 * exact_terms + 1e-30

"""Random GGUF weight rows drawn directly in each type's block layout, never by quantizing floats.

Every quant payload (Q4 nibbles, Q8 int8s, Q6_K's ql/qh bits) is raw random
bits: any bit pattern is a valid payload, and uniform bits give uniform
quants. Only the scales are drawn with care, so the dequantized weights have
the requested std and a mean of zero:

- a block's f16 scale is base·u with u ~ U[0.75, 1.25]; base comes from the
  exact second moment of that type's quants, so E[x²] = std²;
- Q4_0, Q8_0 (and Q6_K's int8 sub-block scales) take a random sign, as
  llama.cpp's quantizers produce for Q4_0/Q6_K, which cancels the −0.5 bias
  of two's-complement or offset quants;
- Q4_1 blocks are centred (m = −7.5·d); Q4_K sub-blocks get 6-bit scales in
  [16, 61] and mins = scale + δ with δ in [−2, 2], dmin = 7.5·d, so each
  sub-block is nearly centred, as a real quantizer would make it.

With std 0.02, Q6_K's d is an f16 subnormal (~1e-5), exactly as in real
Q6_K files of weights this small; all other scales are normal halves.
"""

from __future__ import annotations

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as QT

JITTER = (0.75, 1.25)
Q4_K_SCALES = (16, 61)  # inclusive range of 6-bit sub-block scales
Q4_K_MIN_DELTA = 2  # mins = scale + δ, |δ| ≤ this
Q6_K_SCALES = (64, 127)  # inclusive range of |int8 sub-block scale|


def _mean_square(values: np.ndarray) -> float:
    return float(np.mean(np.square(np.asarray(values, dtype=np.float64))))


def _jitter_mean_square() -> float:
    lo, hi = JITTER
    return lo * lo + lo * (hi - lo) + (hi - lo) ** 2 / 3


def _q4_k_mean_square() -> float:
    scales = np.arange(Q4_K_SCALES[0], Q4_K_SCALES[1] + 1)
    deltas = np.arange(-Q4_K_MIN_DELTA, Q4_K_MIN_DELTA + 1)
    # x/d = sc·q − 7.5·(sc + δ) = sc·(q − 7.5) − 7.5·δ; the cross term has zero mean.
    return _mean_square(scales) * _mean_square(np.arange(16) - 7.5) + 7.5**2 * _mean_square(deltas)


def _q5_k_mean_square() -> float:
    scales = np.arange(Q4_K_SCALES[0], Q4_K_SCALES[1] + 1)
    deltas = np.arange(-Q4_K_MIN_DELTA, Q4_K_MIN_DELTA + 1)
    # As Q4_K with 5-bit quants centred by dmin = 15.5·d.
    return _mean_square(scales) * _mean_square(np.arange(32) - 15.5) + 15.5**2 * _mean_square(deltas)


IQ4_NL_VALUES = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113])
IQ4_XS_SCALES = (16, 31)  # inclusive range of |ls − 32| (6-bit sub-block scales, random sign)

Q3_K_SCALES = (16, 31)  # inclusive range of |s − 32| (6-bit sub-block scales, random sign)
Q2_K_SCALES = (8, 15)  # inclusive range of the 4-bit sub-block scales (mins = scales, dmin = 1.5·d)


def _iq3_s_grid_mean_square() -> float:
    from gguf.quants import IQ3_S

    IQ3_S.init_grid()
    return _mean_square(IQ3_S.grid)


# E[(x / d)²] for one block of each type, over its random quants and sub-scales.
QUANT_MEAN_SQUARE: dict[QT, float] = {
    QT.Q8_0: _mean_square(np.arange(-128, 128)),
    QT.Q4_0: _mean_square(np.arange(16) - 8),
    QT.Q4_1: _mean_square(np.arange(16) - 7.5),
    QT.Q4_K: _q4_k_mean_square(),
    QT.Q6_K: _mean_square(np.arange(64) - 32) * _mean_square(np.arange(Q6_K_SCALES[0], Q6_K_SCALES[1] + 1)),
    QT.Q5_0: _mean_square(np.arange(32) - 16),
    QT.Q5_1: _mean_square(np.arange(32) - 15.5),
    QT.Q5_K: _q5_k_mean_square(),
    QT.IQ4_NL: _mean_square(IQ4_NL_VALUES),
    QT.IQ4_XS: _mean_square(IQ4_NL_VALUES) * _mean_square(np.arange(IQ4_XS_SCALES[0], IQ4_XS_SCALES[1] + 1)),
    # Q3_K: q in −4..3 (uniform bits), sub-block scale ±[16, 31].
    QT.Q3_K: _mean_square(np.arange(-4, 4)) * _mean_square(np.arange(Q3_K_SCALES[0], Q3_K_SCALES[1] + 1)),
    # Q2_K: x/d = sc·q − 1.5·sc = sc·(q − 1.5), q in 0..3.
    QT.Q2_K: _mean_square(np.arange(4) - 1.5) * _mean_square(np.arange(Q2_K_SCALES[0], Q2_K_SCALES[1] + 1)),
    # IQ3_S: (1 + 2·sc)·(±grid) with random scale nibbles, grid indices and signs.
    QT.IQ3_S: _mean_square(1 + 2 * np.arange(16)) * _iq3_s_grid_mean_square(),
}


def random_bytes(rng: np.random.Generator, num_bytes: int) -> np.ndarray:
    """Uniform random bytes straight from the bit generator (the fastest path NumPy has)."""
    return rng.bit_generator.random_raw((num_bytes + 7) // 8).view(np.uint8)[:num_bytes]


def block_scales(rng: np.random.Generator, num_blocks: int, qtype: QT, std: float, signed: bool) -> np.ndarray:
    """One f16 scale per block, |d| = base·U[0.75, 1.25], so that the weights' std is `std`."""
    base = np.float32(std / np.sqrt(_jitter_mean_square() * QUANT_MEAN_SQUARE[qtype]))
    lo, hi = JITTER
    d = rng.random(num_blocks, dtype=np.float32)  # float32 throughout: float64 -> f16 is slow
    d *= np.float32((hi - lo) * base)
    d += np.float32(lo * base)
    if signed:
        np.negative(d, out=d, where=(random_bytes(rng, num_blocks) & 1).astype(bool))
    return d.astype(np.float16)  # [num_blocks]


def pack_q4_k_scales(scales: np.ndarray, mins: np.ndarray) -> np.ndarray:
    """Packs 8 six-bit scales and mins per block into Q4_K's 12 bytes (the inverse of the unpacking in docs/design.md, "Formats")."""
    sc, m = scales.astype(np.uint8), mins.astype(np.uint8)  # [num_blocks, 8], values 0..63
    packed = np.empty((sc.shape[0], 12), dtype=np.uint8)
    packed[:, 0:4] = sc[:, 0:4] | ((sc[:, 4:8] >> 4) << 6)
    packed[:, 4:8] = m[:, 0:4] | ((m[:, 4:8] >> 4) << 6)
    packed[:, 8:12] = (sc[:, 4:8] & 15) | ((m[:, 4:8] & 15) << 4)
    return packed


def draw_rows(rng: np.random.Generator, qtype: QT, num_rows: int, row_len: int, std: float) -> np.ndarray:
    """`num_rows` rows of `row_len` random weights in `qtype`'s layout, as bytes."""
    if qtype in (QT.F32, QT.F16, QT.BF16):
        return _float_rows(rng, qtype, num_rows * row_len, std)
    block_len, block_bytes = GGML_QUANT_SIZES[qtype]
    num_blocks = num_rows * row_len // block_len
    blocks = random_bytes(rng, num_blocks * block_bytes).reshape(num_blocks, block_bytes)
    _SCALE_WRITERS[qtype](rng, blocks, std)
    return blocks.reshape(-1)


def _float_rows(rng: np.random.Generator, qtype: QT, count: int, std: float) -> np.ndarray:
    x = rng.standard_normal(count, dtype=np.float32)
    x *= np.float32(std)
    if qtype == QT.F32:
        return x.view(np.uint8)
    if qtype == QT.F16:
        return x.astype(np.float16).view(np.uint8)
    bits = x.view(np.uint32)  # BF16: round to nearest even on the top 16 bits
    bits += np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))
    return (bits >> 16).astype(np.uint16).view(np.uint8)


def _set_f16(blocks: np.ndarray, byte_offset: int, values: np.ndarray) -> None:
    """Stores one f16 per block at `byte_offset` (even: every block size is even)."""
    blocks.view(np.uint16)[:, byte_offset // 2] = values.astype(np.float16).view(np.uint16)


def _write_q8_0(rng: np.random.Generator, blocks: np.ndarray, std: float) -> None:
    _set_f16(blocks, 0, block_scales(rng, len(blocks), QT.Q8_0, std, signed=True))


def _write_q4_0(rng: np.random.Generator, blocks: np.ndarray, std: float) -> None:
    _set_f16(blocks, 0, block_scales(rng, len(blocks), QT.Q4_0, std, signed=True))


def _write_q4_1(rng: np.random.Generator, blocks: np.ndarray, std: float) -> None:
    d = block_scales(rng, len(blocks), QT.Q4_1, std, signed=False)
    _set_f16(blocks, 0, d)
    _set_f16(blocks, 2, d.astype(np.float32) * -7.5)


def _write_k_mins(rng: np.random.Generator, blocks: np.ndarray, std: float, qt: QT, mid: float) -> None:
    """Q4_K / Q5_K heads: d, dmin = d · mid (the quant range's middle) and the packed 6-bit sub-block pairs."""
    d = block_scales(rng, len(blocks), qt, std, signed=False)
    scales = rng.integers(Q4_K_SCALES[0], Q4_K_SCALES[1] + 1, size=(len(blocks), 8), dtype=np.uint8)
    deltas = rng.integers(-Q4_K_MIN_DELTA, Q4_K_MIN_DELTA + 1, size=(len(blocks), 8), dtype=np.int8)
    _set_f16(blocks, 0, d)
    _set_f16(blocks, 2, d.astype(np.float32) * mid)
    blocks[:, 4:16] = pack_q4_k_scales(scales, (scales + deltas).astype(np.uint8))


def _write_q4_k(rng: np.random.Generator, blocks: np.ndarray, std: float) -> None:
    _write_k_mins(rng, blocks, std, QT.Q4_K, 7.5)


def _write_q6_k(rng: np.random.Generator, blocks: np.ndarray, std: float) -> None:
    lo, hi = Q6_K_SCALES
    scales = rng.integers(lo, hi + 1, size=(len(blocks), 16), dtype=np.int16)
    scales = np.where(random_bytes(rng, scales.size).reshape(scales.shape) & 1, -scales, scales)
    blocks[:, 192:208] = scales.astype(np.int8).view(np.uint8)
    _set_f16(blocks, 208, block_scales(rng, len(blocks), QT.Q6_K, std, signed=False))


def _write_q5_0(rng: np.random.Generator, blocks: np.ndarray, std: float) -> None:
    _set_f16(blocks, 0, block_scales(rng, len(blocks), QT.Q5_0, std, signed=True))


def _write_q5_1(rng: np.random.Generator, blocks: np.ndarray, std: float) -> None:
    d = block_scales(rng, len(blocks), QT.Q5_1, std, signed=False)
    _set_f16(blocks, 0, d)
    _set_f16(blocks, 2, d.astype(np.float32) * -15.5)


def _write_q5_k(rng: np.random.Generator, blocks: np.ndarray, std: float) -> None:
    _write_k_mins(rng, blocks, std, QT.Q5_K, 15.5)


def _write_iq4_nl(rng: np.random.Generator, blocks: np.ndarray, std: float) -> None:
    _set_f16(blocks, 0, block_scales(rng, len(blocks), QT.IQ4_NL, std, signed=True))


def _write_iq4_xs(rng: np.random.Generator, blocks: np.ndarray, std: float) -> None:
    """Sub-block scales ls − 32 = ±[16, 31] (random sign cancels the table's mean), packed 4 + 2 bits."""
    lo, hi = IQ4_XS_SCALES
    mag = rng.integers(lo, hi + 1, size=(len(blocks), 8), dtype=np.int16)
    ls = (32 + np.where(random_bytes(rng, mag.size).reshape(mag.shape) & 1, -mag, mag)).astype(np.uint16)
    _set_f16(blocks, 0, block_scales(rng, len(blocks), QT.IQ4_XS, std, signed=False))
    high = np.zeros(len(blocks), dtype=np.uint16)
    for j in range(8):
        high |= ((ls[:, j] >> 4) & 3) << (2 * j)
    blocks.view(np.uint16)[:, 1] = high
    blocks[:, 4:8] = ((ls[:, 0::2] & 15) | ((ls[:, 1::2] & 15) << 4)).astype(np.uint8)


def _write_q3_k(rng: np.random.Generator, blocks: np.ndarray, std: float) -> None:
    """Sub-block scales s − 32 = ±[16, 31] (random sign cancels the quants' −0.5 mean), packed 4 + 2 bits."""
    lo, hi = Q3_K_SCALES
    mag = rng.integers(lo, hi + 1, size=(len(blocks), 16), dtype=np.int16)
    s = (32 + np.where(random_bytes(rng, mag.size).reshape(mag.shape) & 1, -mag, mag)).astype(np.uint8)
    blocks[:, 96:104] = (s[:, 0:8] & 15) | ((s[:, 8:16] & 15) << 4)
    high = (s >> 4) & 3   # scale i's high bits go to byte 8 + i % 4, bits 2·(i // 4)
    blocks[:, 104:108] = high[:, 0:4] | (high[:, 4:8] << 2) | (high[:, 8:12] << 4) | (high[:, 12:16] << 6)
    _set_f16(blocks, 108, block_scales(rng, len(blocks), QT.Q3_K, std, signed=False))


def _write_q2_k(rng: np.random.Generator, blocks: np.ndarray, std: float) -> None:
    """4-bit scales in [8, 15], mins equal to the scales and dmin = 1.5·d: each sub-block centred."""
    sc = rng.integers(Q2_K_SCALES[0], Q2_K_SCALES[1] + 1, size=(len(blocks), 16), dtype=np.uint8)
    blocks[:, 0:16] = sc | (sc << 4)
    d = block_scales(rng, len(blocks), QT.Q2_K, std, signed=False)
    _set_f16(blocks, 80, d)
    _set_f16(blocks, 82, d.astype(np.float32) * 1.5)


def _write_iq3_s(rng: np.random.Generator, blocks: np.ndarray, std: float) -> None:
    """Random grid indices, signs and scale nibbles (the bits as drawn); only d is set."""
    _set_f16(blocks, 0, block_scales(rng, len(blocks), QT.IQ3_S, std, signed=False))


_SCALE_WRITERS = {
    QT.Q3_K: _write_q3_k,
    QT.Q2_K: _write_q2_k,
    QT.IQ3_S: _write_iq3_s,
    QT.Q5_0: _write_q5_0,
    QT.Q5_1: _write_q5_1,
    QT.Q5_K: _write_q5_k,
    QT.IQ4_NL: _write_iq4_nl,
    QT.IQ4_XS: _write_iq4_xs,
    QT.Q8_0: _write_q8_0,
    QT.Q4_0: _write_q4_0,
    QT.Q4_1: _write_q4_1,
    QT.Q4_K: _write_q4_k,
    QT.Q6_K: _write_q6_k,
}

// cpu_quant_low.h — the low-bit GGUF types Q2_K, Q3_K and IQ3_S decoded into
// exact integer quants plus per-sub-block float multipliers, for the CPU
// matmul (cpu_matmul_dot_q3.h) and the embedding gather (cpu_embed.cpp).
//
// Layouts and formulas as gguf-py's quants.py dequantizers (the reference the
// tests compare against), 256 values per super-block:
//   Q2_K  {16 bytes scales, 64 bytes qs, f16 d, f16 dmin} (84 bytes), 16
//         sub-blocks of 16: value = (d·(sc_i & 15))·q − (dmin·(sc_i >> 4)),
//         q = 2 bits.
//   Q3_K  {32 bytes hmask, 64 bytes qs, 12 bytes scales, f16 d} (110 bytes),
//         16 sub-blocks of 16: value = (d·(s_i − 32))·q, q = (2 low bits) −
//         4·(1 − high bit) in −4..3; s_i = 6 bits: the low 4 are nibble i of
//         scales[0..7] (low nibbles first), the high 2 are bits 2(i/4).. of
//         scales[8 + i%4].
//   In both, value 128h + 32s + l (h 0..1, s 0..3, l 0..31) takes bits 2s..
//   of qs[32h + l]; Q3_K's high bit is bit 4h + s of hmask[l].
//   IQ3_S {f16 d, 64 bytes qs, 8 bytes qh, 32 bytes signs, 4 bytes scales}
//         (110 bytes), 8 sub-blocks of 32: value v = (d·(1 + 2·nibble j of
//         scales))·(±grid), grid = byte v%4 of kIq3sGrid[qs[v/4] | bit v/4 of
//         qh << 8], negative where bit v of signs is set.
// Every multiplier is one float32 product of the f16 scale and a small
// integer, so the values (multiplier·q, − min) equal gguf's dequantization.
// The quants are unpacked 32 at a time with AVX2 byte operations (exact
// integers, so the order of unpacking cannot change a result).
#pragma once

#include <cstdint>
#include <cstring>

#include "core/iq3s_grid.h"
#include "cpu_simd.h"

namespace strata {
namespace cpu {

inline constexpr uint32_t kIq3sGrid[512] = {STRATA_IQ3S_GRID_WORDS};

// Q2_K and Q3_K: the 2-bit fields of values 128h + 32s .. + 31 (bits 2s.. of qs[32h ..]).
inline __m256i k_low2x32(const uint8_t* qs, int h, int s) {
    const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * h));
    return _mm256_and_si256(_mm256_srli_epi16(bytes, 2 * s), _mm256_set1_epi8(3));
}

// One Q2_K block: q[256] in 0..3, d1[i] = d·sc_i, m1[i] = dmin·m_i (16 sub-blocks).
inline void decode_q2_k(const uint8_t* blk, int8_t* q, float* d1, float* m1) {
    const float d = f16_to_f32(load_u16(blk + 80)), dmin = f16_to_f32(load_u16(blk + 82));
    for (int i = 0; i < 16; i++) {
        d1[i] = d * float(blk[i] & 15);
        m1[i] = dmin * float(blk[i] >> 4);
    }
    for (int c = 0; c < 8; c++)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 32 * c), k_low2x32(blk + 16, c >> 2, c & 3));
}

// One Q3_K block: q[256] in −4..3, d1[i] = d·(s_i − 32) (16 sub-blocks).
inline void decode_q3_k(const uint8_t* blk, int8_t* q, float* d1) {
    const uint8_t* hmask = blk;
    const uint8_t* sc = blk + 96;
    const float d = f16_to_f32(load_u16(blk + 108));
    for (int i = 0; i < 16; i++) {
        const int lo = (sc[i & 7] >> (4 * (i >> 3))) & 15, hi = (sc[8 + (i & 3)] >> (2 * (i >> 2))) & 3;
        d1[i] = d * float((lo | (hi << 4)) - 32);
    }
    const __m256i hm = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(hmask));
    const __m256i one = _mm256_set1_epi8(1), four = _mm256_set1_epi8(4);
    for (int c = 0; c < 8; c++) {   // values 32c .. 32c + 31: high bit c = 4h + s of hmask[l]
        const __m256i high = _mm256_and_si256(_mm256_srli_epi16(hm, c), one);
        const __m256i v = _mm256_sub_epi8(_mm256_add_epi8(k_low2x32(blk + 32, c >> 2, c & 3), _mm256_slli_epi16(high, 2)), four);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 32 * c), v);
    }
}

// One IQ3_S block: q[256] signed grid values in −15..15, db[j] = d·(1 + 2·sc_j) (8 sub-blocks).
inline void decode_iq3_s(const uint8_t* blk, int8_t* q, float* db) {
    const float d = f16_to_f32(load_u16(blk));
    const uint8_t* qs = blk + 2;
    const uint8_t* qh = blk + 66;
    const uint8_t* signs = blk + 74;
    const uint8_t* sc = blk + 106;
    for (int j = 0; j < 8; j++) db[j] = d * float(1 + 2 * ((sc[j >> 1] >> (4 * (j & 1))) & 15));
    for (int g = 0; g < 64; g++) {   // magnitudes: grid word g holds values 4g .. 4g + 3
        const uint32_t word = kIq3sGrid[qs[g] | (((qh[g >> 3] >> (g & 7)) & 1) << 8)];
        std::memcpy(q + 4 * g, &word, 4);
    }
    // Signs, 32 values at a time: byte lane i takes sign byte i/8 and tests its bit i%8; a set bit negates.
    const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                            2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_setr_epi8(1, 2, 4, 8, 16, 32, 64, -128, 1, 2, 4, 8, 16, 32, 64, -128,
                                         1, 2, 4, 8, 16, 32, 64, -128, 1, 2, 4, 8, 16, 32, 64, -128);
    for (int c = 0; c < 8; c++) {
        int32_t four_bytes;
        std::memcpy(&four_bytes, signs + 4 * c, 4);
        const __m256i sb = _mm256_shuffle_epi8(_mm256_set1_epi32(four_bytes), spread);
        const __m256i neg = _mm256_cmpeq_epi8(_mm256_and_si256(sb, bit), bit);   // 0xFF where negative
        __m256i* at = reinterpret_cast<__m256i*>(q + 32 * c);
        const __m256i mag = _mm256_loadu_si256(at);
        _mm256_storeu_si256(at, _mm256_sub_epi8(_mm256_xor_si256(mag, neg), neg));
    }
}

}  // namespace cpu
}  // namespace strata

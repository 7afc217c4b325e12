// cpu_quant_blocks.h — Q5_K, IQ4_NL and IQ4_XS blocks decoded into exact
// integer quants plus per-sub-block float multipliers, for the CPU matmul
// (cpu_matmul_dot_blocks.h) and the embedding gather (cpu_embed.cpp).
//
// Layouts and formulas as gguf-py's quants.py (and ggml's dequantize_row_*):
//   Q5_K   {f16 d, f16 dmin, 12 bytes 6-bit scales/mins (Q4_K's packing),
//           32 bytes qh, 128 bytes qs}, 8 sub-blocks of 32:
//           value = (d·sc_j)·q − (dmin·m_j), q = nibble | (bit j of qh[l]) << 4
//           (chunk c of 64 values: qs[32c + l] low nibble → value 64c + l,
//           sub-block 2c; high nibble → 64c + 32 + l, sub-block 2c + 1).
//   IQ4_NL {f16 d, 16 bytes}: value j = d·kv[nibble j] (Q4_0's nibble order).
//   IQ4_XS {f16 d, u16 scales_h, 4 bytes scales_l, 128 bytes qs}, 8
//           sub-blocks of 32: ls_j = (4 bits of scales_l) | (2 bits of
//           scales_h) << 4; value = (d·(ls_j − 32))·kv[nibble], sub-block j
//           reading qs[16j..16j+15] in Q4_0's nibble order.
// kv is IQ4_NL's non-linear table. Every multiplier is one float32 product
// (no fused multiply-add), so the values equal gguf's dequantization.
#pragma once

#include <cstdint>
#include <cstring>

#include "cpu_simd.h"

namespace strata {
namespace cpu {

inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// Q4_K / Q5_K sub-block j's 6-bit scale and min from the 12 scale bytes s.
inline void k_scale_min(const uint8_t* s, int j, int& sc, int& m) {
    if (j < 4) {
        sc = s[j] & 63;
        m = s[j + 4] & 63;
    } else {
        sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
        m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

// One Q5_K block: q[256] in 0..31, d1[j] = d·sc_j, m1[j] = dmin·m_j.
inline void decode_q5_k(const uint8_t* blk, int8_t* q, float* d1, float* m1) {
    const float d = f16_to_f32(load_u16(blk)), dmin = f16_to_f32(load_u16(blk + 2));
    const uint8_t* qh = blk + 16;
    const uint8_t* qs = blk + 48;
    for (int j = 0; j < 8; j++) {
        int sc, m;
        k_scale_min(blk + 4, j, sc, m);
        d1[j] = d * float(sc);
        m1[j] = dmin * float(m);
    }
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++) {
            const uint8_t byte = qs[32 * c + l];
            q[64 * c + l] = int8_t((byte & 15) | (((qh[l] >> (2 * c)) & 1) << 4));
            q[64 * c + 32 + l] = int8_t((byte >> 4) | (((qh[l] >> (2 * c + 1)) & 1) << 4));
        }
}

// One IQ4_NL block: q[32] table values, *d the block scale.
inline void decode_iq4_nl(const uint8_t* blk, int8_t* q, float* d) {
    *d = f16_to_f32(load_u16(blk));
    for (int j = 0; j < 16; j++) {
        q[j] = kIq4nlValues[blk[2 + j] & 15];
        q[j + 16] = kIq4nlValues[blk[2 + j] >> 4];
    }
}

// One IQ4_XS block: q[256] table values, dl[j] = d·(ls_j − 32).
inline void decode_iq4_xs(const uint8_t* blk, int8_t* q, float* dl) {
    const float d = f16_to_f32(load_u16(blk));
    const uint16_t scales_h = load_u16(blk + 2);
    for (int j = 0; j < 8; j++) {
        const int ls = ((blk[4 + j / 2] >> (4 * (j % 2))) & 15) | (((scales_h >> (2 * j)) & 3) << 4);
        dl[j] = d * float(ls - 32);
        const uint8_t* qs = blk + 8 + 16 * j;
        for (int l = 0; l < 16; l++) {
            q[32 * j + l] = kIq4nlValues[qs[l] & 15];
            q[32 * j + 16 + l] = kIq4nlValues[qs[l] >> 4];
        }
    }
}

}  // namespace cpu
}  // namespace strata

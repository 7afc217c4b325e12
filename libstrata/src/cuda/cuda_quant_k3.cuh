// cuda_quant_k3.cuh — the low-bit GGUF types Q2_K, Q3_K and IQ3_S decoded on
// the GPU: their matmul units (QuantUnit, the unit layout of cuda_quant.cuh)
// and single values for the embedding gather (dequant_value_low). Layouts and
// operation order as gguf.quants' dequantizers; the CPU decoders in
// cpu/cpu_quant_low.h spell out the same formulas:
//   Q2_K  value = (d·(sc_i & 15))·q − (dmin·(sc_i >> 4)), 16-value sub-block i
//   Q3_K  value = (d·(s_i − 32))·q, q = 2 low bits − 4·(1 − hmask bit)
//   IQ3_S value = (d·(1 + 2·sc_j))·(±grid), 32-value sub-block j
// Every product is an explicit __fmul_rn (never contracted into an FMA), so
// every kernel decodes the same bits as gguf.
#pragma once

#include "cuda_common.cuh"
#include "core/iq3s_grid.h"

namespace strata {
namespace cuda {

template <int kDtype> struct QuantUnit;

// IQ3_S's codebook (core/iq3s_grid.h): four magnitudes per word, byte t = value t.
static __device__ const uint32_t kIq3sGridDevice[512] = {STRATA_IQ3S_GRID_WORDS};

// Q2_K sub-block i (0..15) multipliers: d1 = d·(sc & 15), m1 = dmin·(sc >> 4).
__device__ __forceinline__ void q2k_factors(const uint8_t* blk, int i, float& d1, float& m1) {
    const uint32_t sc = ld_u8(blk + i);
    d1 = __fmul_rn(f16_to_f32(ld_u16(blk + 80)), (float)(sc & 15u));
    m1 = __fmul_rn(f16_to_f32(ld_u16(blk + 82)), (float)(sc >> 4));
}

// Q3_K sub-block i (0..15) multiplier d·(s_i − 32): low 4 bits from nibble i of
// scales[0..7] (low nibbles first), high 2 bits from scales[8 + i%4] bits 2(i/4).
__device__ __forceinline__ float q3k_factor(const uint8_t* blk, int i) {
    const uint32_t lo = (ld_u8(blk + 96 + (i & 7)) >> (4 * (i >> 3))) & 15u;
    const uint32_t hi = (ld_u8(blk + 104 + (i & 3)) >> (2 * (i >> 2))) & 3u;
    return __fmul_rn(f16_to_f32(ld_u16(blk + 108)), (float)((int)(lo | (hi << 4)) - 32));
}

// IQ3_S sub-block j (0..7) multiplier d·(1 + 2·nibble j of scales).
__device__ __forceinline__ float iq3s_factor(const uint8_t* blk, int j) {
    const uint32_t sc = (ld_u8(blk + 106 + (j >> 1)) >> (4 * (j & 1))) & 15u;
    return __fmul_rn(f16_to_f32(ld_u16(blk)), (float)(1u + 2u * sc));
}

// IQ3_S grid group g (0..63): its codebook word (index qs[g] | bit g of qh << 8).
__device__ __forceinline__ uint32_t iq3s_word(const uint8_t* blk, int g) {
    const uint32_t idx = ld_u8(blk + 2 + g) | (((ld_u8(blk + 66 + (g >> 3)) >> (g & 7)) & 1u) << 8);
    return __ldg(kIq3sGridDevice + idx);
}

// Q2_K and Q3_K units: unit p (0..15) is values 16p .. 16p + 15, i.e. 128h +
// 32s + 16t .. (h = p/8, s = (p/2)%4, t = p%2), one 16-value sub-block i = p,
// whose 2-bit fields are bits 2s.. of qs[32h + 16t ..] (Q3_K's high bits: bit
// 4h + s = p/2 of hmask[16t ..]); groups of 8 at e[0] and e[0] + 8.
__device__ __forceinline__ void k16_low2(const uint8_t* qs, int p, uint32_t (&q)[16]) {
    const int s = (p >> 1) & 3;
    const uint8_t* at = qs + 32 * (p >> 3) + 16 * (p & 1);
    const uint2 qa = ld_8bytes(at), qb = ld_8bytes(at + 8);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        q[i] = (byte_of(qa, i) >> (2 * s)) & 3u;
        q[8 + i] = (byte_of(qb, i) >> (2 * s)) & 3u;
    }
}

template <> struct QuantUnit<STRATA_Q2_K> {
    static constexpr int kGroups = 2, kUnitsPerBlock = 16, kBlockValues = 256, kBlockBytes = 84;
    __device__ __forceinline__ static void load(const uint8_t* row, int64_t u, float (&w)[8 * kGroups],
                                                int64_t (&e)[kGroups]) {
        const int64_t b = u >> 4;
        const int p = (int)(u & 15);
        const uint8_t* blk = row + b * kBlockBytes;
        float d1, m1;
        q2k_factors(blk, p, d1, m1);
        uint32_t q[16];
        k16_low2(blk + 16, p, q);
#pragma unroll
        for (int i = 0; i < 16; ++i) w[i] = __fsub_rn(__fmul_rn(d1, (float)q[i]), m1);
        e[0] = b * kBlockValues + 16 * p;
        e[1] = e[0] + 8;
    }
};

template <> struct QuantUnit<STRATA_Q3_K> {
    static constexpr int kGroups = 2, kUnitsPerBlock = 16, kBlockValues = 256, kBlockBytes = 110;
    __device__ __forceinline__ static void load(const uint8_t* row, int64_t u, float (&w)[8 * kGroups],
                                                int64_t (&e)[kGroups]) {
        const int64_t b = u >> 4;
        const int p = (int)(u & 15);
        const uint8_t* blk = row + b * kBlockBytes;
        const float d1 = q3k_factor(blk, p);
        uint32_t q[16];
        k16_low2(blk + 32, p, q);
        const uint2 ha = ld_8bytes(blk + 16 * (p & 1)), hb = ld_8bytes(blk + 16 * (p & 1) + 8);
        const int hbit = p >> 1;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            w[i] = __fmul_rn(d1, (float)((int)q[i] - ((byte_of(ha, i) >> hbit) & 1u ? 0 : 4)));
            w[8 + i] = __fmul_rn(d1, (float)((int)q[8 + i] - ((byte_of(hb, i) >> hbit) & 1u ? 0 : 4)));
        }
        e[0] = b * kBlockValues + 16 * p;
        e[1] = e[0] + 8;
    }
};

// IQ3_S: unit p (0..15) is values 16p .. 16p + 15 (sub-block p/2): grid groups
// 4p .. 4p + 3, sign bits from signs bytes 2p, 2p + 1.
template <> struct QuantUnit<STRATA_IQ3_S> {
    static constexpr int kGroups = 2, kUnitsPerBlock = 16, kBlockValues = 256, kBlockBytes = 110;
    __device__ __forceinline__ static void load(const uint8_t* row, int64_t u, float (&w)[8 * kGroups],
                                                int64_t (&e)[kGroups]) {
        const int64_t b = u >> 4;
        const int p = (int)(u & 15);
        const uint8_t* blk = row + b * kBlockBytes;
        const float db = iq3s_factor(blk, p >> 1);
        const uint32_t signs = ld_u16(blk + 74 + 2 * p);
#pragma unroll
        for (int g = 0; g < 4; ++g) {
            const uint32_t word = iq3s_word(blk, 4 * p + g);
#pragma unroll
            for (int t = 0; t < 4; ++t) {
                const int v = 4 * g + t, mag = (int)((word >> (8 * t)) & 255u);
                w[v] = __fmul_rn(db, (float)((signs >> v) & 1u ? -mag : mag));
            }
        }
        e[0] = b * kBlockValues + 16 * p;
        e[1] = e[0] + 8;
    }
};

// Value e of a Q2_K, Q3_K or IQ3_S row (the same bits as the units above).
__device__ __forceinline__ float dequant_value_low(const uint8_t* row, int dtype, int64_t e) {
    const int i = (int)(e & 255), h = i >> 7, s = (i >> 5) & 3, l = i & 31;
    switch (dtype) {
    case STRATA_Q2_K: {
        const uint8_t* blk = row + (e >> 8) * 84;
        float d1, m1;
        q2k_factors(blk, i >> 4, d1, m1);
        return __fsub_rn(__fmul_rn(d1, (float)((ld_u8(blk + 16 + 32 * h + l) >> (2 * s)) & 3u)), m1);
    }
    case STRATA_Q3_K: {
        const uint8_t* blk = row + (e >> 8) * 110;
        const int q = (int)((ld_u8(blk + 32 + 32 * h + l) >> (2 * s)) & 3u) - ((ld_u8(blk + l) >> (i >> 5)) & 1u ? 0 : 4);
        return __fmul_rn(q3k_factor(blk, i >> 4), (float)q);
    }
    case STRATA_IQ3_S: {
        const uint8_t* blk = row + (e >> 8) * 110;
        const int mag = (int)((iq3s_word(blk, i >> 2) >> (8 * (i & 3))) & 255u);
        const bool neg = (ld_u8(blk + 74 + (i >> 3)) >> (i & 7)) & 1u;
        return __fmul_rn(iq3s_factor(blk, i >> 5), (float)(neg ? -mag : mag));
    }
    default: return 0.0f;
    }
}

}  // namespace cuda
}  // namespace strata

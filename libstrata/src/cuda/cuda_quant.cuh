// cuda_quant.cuh — GGUF weight formats decoded on the GPU.
//
// One definition of every dequantization formula (docs/design.md "Formats"; same operation
// order as gguf.quants / ggml's dequantize_row_*: e.g. Q4_K is
// (d·sc)·q − (dmin·m), two roundings, never a fused multiply-add), used both
// by the matmul kernels, which decode weights a "unit" at a time, and by the
// embedding gather, which decodes single values. Explicit __f*_rn intrinsics
// keep the compiler from contracting these into FMAs differently in different
// kernels.
//
// Unit layout (what one lane decodes per step of the matmul): kGroups groups
// of 8 consecutive values of the row, group g starting at element e[g]. Units
// are numbered along the row; unit u belongs to block u / kUnitsPerBlock.
// Only 2-byte alignment is assumed (Q4_0 blocks are 18 bytes, Q6_K 210).
#pragma once

#include "cuda_common.cuh"
#include "cuda_quant_k3.cuh"  // Q2_K, Q3_K, IQ3_S

namespace strata {
namespace cuda {

__device__ __forceinline__ float deq_q4_0(float d, uint32_t q) { return __fmul_rn(d, (float)((int)q - 8)); }
__device__ __forceinline__ float deq_q4_1(float d, float m, uint32_t q) { return __fadd_rn(__fmul_rn(d, (float)q), m); }
__device__ __forceinline__ float deq_q8_0(float d, int q) { return __fmul_rn(d, (float)q); }
// Q5_0: d·(q − 16); Q5_1: d·q + m (q the 5-bit quant: nibble | qh bit << 4).
__device__ __forceinline__ float deq_q5_0(float d, uint32_t q) { return __fmul_rn(d, (float)((int)q - 16)); }
__device__ __forceinline__ float deq_q5_1(float d, float m, uint32_t q) { return __fadd_rn(__fmul_rn(d, (float)q), m); }
// Q4_K: d1 = d·sc, m1 = dmin·m per sub-block; value = d1·q − m1.
__device__ __forceinline__ float deq_q4_k(float d1, float m1, uint32_t q) { return __fsub_rn(__fmul_rn(d1, (float)q), m1); }
// Q6_K: ds = d·scale per 16 values; value = ds·(q − 32).
__device__ __forceinline__ float deq_q6_k(float ds, uint32_t q) { return __fmul_rn(ds, (float)((int)q - 32)); }

// IQ4_NL's non-linear table {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13,
// 25, 38, 53, 69, 89, 113}, as int8 bytes packed in two words (no memory table).
__host__ __device__ __forceinline__ float iq4nl_value(uint32_t n) {
    const uint64_t packed = n < 8 ? 0xF6EADDCFBFAD9881ull : 0x7159453526190D01ull;
    return (float)(int8_t)(uint8_t)((packed >> (8 * (n & 7))) & 0xFFu);
}

// IQ4_XS sub-block j (0..7) multiplier d·(ls_j − 32): ls_j's low 4 bits from
// scales_l (byte 4 + j/2), its high 2 bits from scales_h (bits 2j..).
__device__ __forceinline__ float iq4xs_factor(const uint8_t* blk, int j) {
    const uint32_t ls = ((ld_u8(blk + 4 + j / 2) >> (4 * (j % 2))) & 15u) | (((ld_u16(blk + 2) >> (2 * j)) & 3u) << 4);
    return __fmul_rn(f16_to_f32(ld_u16(blk)), (float)((int)ls - 32));
}

// An IQ4 unit's 16 values from 8 qs bytes: low nibbles to w[0..7], high to w[8..15], each scale·kv[nibble].
__device__ __forceinline__ void iq4_unit_values(float scale, uint2 q, float (&w)[16]) {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        w[i] = __fmul_rn(scale, iq4nl_value(byte_of(q, i) & 15u));
        w[8 + i] = __fmul_rn(scale, iq4nl_value(byte_of(q, i) >> 4));
    }
}

// Q4_K sub-block j (0..7): 6-bit scale and min from the 12 scale bytes.
__device__ __forceinline__ void q4k_scale_min(const uint8_t* s, int j, uint32_t& sc, uint32_t& m) {
    if (j < 4) {
        sc = ld_u8(s + j) & 63u;
        m = ld_u8(s + j + 4) & 63u;
    } else {
        const uint32_t a = ld_u8(s + j + 4), lo = ld_u8(s + j - 4), hi = ld_u8(s + j);
        sc = (a & 15u) | ((lo >> 6) << 4);
        m = (a >> 4) | ((hi >> 6) << 4);
    }
}

// Per-sub-block multipliers of Q4_K block `blk`, sub-block j.
__device__ __forceinline__ void q4k_factors(const uint8_t* blk, int j, float& d1, float& m1) {
    uint32_t sc, m;
    q4k_scale_min(blk + 4, j, sc, m);
    d1 = __fmul_rn(f16_to_f32(ld_u16(blk)), (float)sc);
    m1 = __fmul_rn(f16_to_f32(ld_u16(blk + 2)), (float)m);
}

// ------------------------------------------------------------------ units

template <int kDtype> struct QuantUnit;

template <> struct QuantUnit<STRATA_Q8_0> {
    static constexpr int kGroups = 1, kUnitsPerBlock = 4, kBlockValues = 32, kBlockBytes = 34;
    __device__ __forceinline__ static void load(const uint8_t* row, int64_t u, float (&w)[8 * kGroups],
                                                int64_t (&e)[kGroups]) {
        const int64_t b = u >> 2;
        const int p = (int)(u & 3);
        const uint8_t* blk = row + b * kBlockBytes;
        const float d = f16_to_f32(ld_u16(blk));
        const uint2 q = ld_8bytes(blk + 2 + 8 * p);
#pragma unroll
        for (int i = 0; i < 8; ++i) w[i] = deq_q8_0(d, (int)(int8_t)byte_of(q, i));
        e[0] = b * kBlockValues + 8 * p;
    }
};

// Q4_0 and Q4_1: unit p (0, 1) holds qs bytes 8p..8p+7: low nibbles are values
// 8p.., high nibbles values 16+8p...
template <> struct QuantUnit<STRATA_Q4_0> {
    static constexpr int kGroups = 2, kUnitsPerBlock = 2, kBlockValues = 32, kBlockBytes = 18;
    __device__ __forceinline__ static void load(const uint8_t* row, int64_t u, float (&w)[8 * kGroups],
                                                int64_t (&e)[kGroups]) {
        const int64_t b = u >> 1;
        const int p = (int)(u & 1);
        const uint8_t* blk = row + b * kBlockBytes;
        const float d = f16_to_f32(ld_u16(blk));
        const uint2 q = ld_8bytes(blk + 2 + 8 * p);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            w[i] = deq_q4_0(d, byte_of(q, i) & 15u);
            w[8 + i] = deq_q4_0(d, byte_of(q, i) >> 4);
        }
        e[0] = b * kBlockValues + 8 * p;
        e[1] = e[0] + 16;
    }
};

template <> struct QuantUnit<STRATA_Q4_1> {
    static constexpr int kGroups = 2, kUnitsPerBlock = 2, kBlockValues = 32, kBlockBytes = 20;
    __device__ __forceinline__ static void load(const uint8_t* row, int64_t u, float (&w)[8 * kGroups],
                                                int64_t (&e)[kGroups]) {
        const int64_t b = u >> 1;
        const int p = (int)(u & 1);
        const uint8_t* blk = row + b * kBlockBytes;
        const float d = f16_to_f32(ld_u16(blk));
        const float m = f16_to_f32(ld_u16(blk + 2));
        const uint2 q = ld_8bytes(blk + 4 + 8 * p);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            w[i] = deq_q4_1(d, m, byte_of(q, i) & 15u);
            w[8 + i] = deq_q4_1(d, m, byte_of(q, i) >> 4);
        }
        e[0] = b * kBlockValues + 8 * p;
        e[1] = e[0] + 16;
    }
};

// Q5_0 and Q5_1 ({f16 d, [f16 m,] u32 qh, 16 bytes qs}): unit p (0, 1) as
// Q4_0's, the fifth bit of value j being bit j of qh. They run on the CUDA
// cores (cuda_matmul.cu), float32 activations, like F32 weights.
template <int kOne>
struct Q5Unit {
    static constexpr int kGroups = 2, kUnitsPerBlock = 2, kBlockValues = 32, kBlockBytes = kOne ? 24 : 22;
    __device__ __forceinline__ static void load(const uint8_t* row, int64_t u, float (&w)[8 * kGroups],
                                                int64_t (&e)[kGroups]) {
        const int64_t b = u >> 1;
        const int p = (int)(u & 1);
        const uint8_t* blk = row + b * kBlockBytes;
        const float d = f16_to_f32(ld_u16(blk));
        const float m = kOne ? f16_to_f32(ld_u16(blk + 2)) : 0.0f;
        const uint32_t qh = (uint32_t)ld_u16(blk + (kOne ? 4 : 2)) | ((uint32_t)ld_u16(blk + (kOne ? 6 : 4)) << 16);
        const uint2 q = ld_8bytes(blk + (kOne ? 8 : 6) + 8 * p);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const int j = 8 * p + i;
            const uint32_t lo = (byte_of(q, i) & 15u) | (((qh >> j) & 1u) << 4);
            const uint32_t hi = (byte_of(q, i) >> 4) | (((qh >> (j + 16)) & 1u) << 4);
            w[i] = kOne ? deq_q5_1(d, m, lo) : deq_q5_0(d, lo);
            w[8 + i] = kOne ? deq_q5_1(d, m, hi) : deq_q5_0(d, hi);
        }
        e[0] = b * kBlockValues + 8 * p;
        e[1] = e[0] + 16;
    }
};
template <> struct QuantUnit<STRATA_Q5_0> : Q5Unit<0> {};
template <> struct QuantUnit<STRATA_Q5_1> : Q5Unit<1> {};

// Q4_K: unit p (0..15) = chunk c = p/4 of 64 values, quarter q = p%4: qs bytes
// 32c+8q.. give values 64c+8q.. (low nibbles, sub-block 2c) and 64c+32+8q..
// (high nibbles, sub-block 2c+1).
template <> struct QuantUnit<STRATA_Q4_K> {
    static constexpr int kGroups = 2, kUnitsPerBlock = 16, kBlockValues = 256, kBlockBytes = 144;
    __device__ __forceinline__ static void load(const uint8_t* row, int64_t u, float (&w)[8 * kGroups],
                                                int64_t (&e)[kGroups]) {
        const int64_t b = u >> 4;
        const int p = (int)(u & 15), c = p >> 2, q4 = p & 3;
        const uint8_t* blk = row + b * kBlockBytes;
        float d_lo, m_lo, d_hi, m_hi;
        q4k_factors(blk, 2 * c, d_lo, m_lo);
        q4k_factors(blk, 2 * c + 1, d_hi, m_hi);
        const uint2 q = ld_8bytes(blk + 16 + 32 * c + 8 * q4);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            w[i] = deq_q4_k(d_lo, m_lo, byte_of(q, i) & 15u);
            w[8 + i] = deq_q4_k(d_hi, m_hi, byte_of(q, i) >> 4);
        }
        e[0] = b * kBlockValues + 64 * c + 8 * q4;
        e[1] = e[0] + 32;
    }
};

// Q5_K: Q4_K's units, the fifth bit of value 32j + l being bit j of qh[l]
// (qh: 32 bytes after the scales, qs after qh); value (d·sc)·q − (dmin·m).
template <> struct QuantUnit<STRATA_Q5_K> {
    static constexpr int kGroups = 2, kUnitsPerBlock = 16, kBlockValues = 256, kBlockBytes = 176;
    __device__ __forceinline__ static void load(const uint8_t* row, int64_t u, float (&w)[8 * kGroups],
                                                int64_t (&e)[kGroups]) {
        const int64_t b = u >> 4;
        const int p = (int)(u & 15), c = p >> 2, q4 = p & 3;
        const uint8_t* blk = row + b * kBlockBytes;
        float d_lo, m_lo, d_hi, m_hi;
        q4k_factors(blk, 2 * c, d_lo, m_lo);
        q4k_factors(blk, 2 * c + 1, d_hi, m_hi);
        const uint2 q = ld_8bytes(blk + 48 + 32 * c + 8 * q4);
        const uint2 h = ld_8bytes(blk + 16 + 8 * q4);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const uint32_t hb = byte_of(h, i) >> (2 * c);
            w[i] = deq_q4_k(d_lo, m_lo, (byte_of(q, i) & 15u) | ((hb & 1u) << 4));
            w[8 + i] = deq_q4_k(d_hi, m_hi, (byte_of(q, i) >> 4) | (((hb >> 1) & 1u) << 4));
        }
        e[0] = b * kBlockValues + 64 * c + 8 * q4;
        e[1] = e[0] + 32;
    }
};

// IQ4_NL: Q4_0's units, value d·kv[nibble].
template <> struct QuantUnit<STRATA_IQ4_NL> {
    static constexpr int kGroups = 2, kUnitsPerBlock = 2, kBlockValues = 32, kBlockBytes = 18;
    __device__ __forceinline__ static void load(const uint8_t* row, int64_t u, float (&w)[8 * kGroups],
                                                int64_t (&e)[kGroups]) {
        const int64_t b = u >> 1;
        const int p = (int)(u & 1);
        const uint8_t* blk = row + b * kBlockBytes;
        iq4_unit_values(f16_to_f32(ld_u16(blk)), ld_8bytes(blk + 2 + 8 * p), w);
        e[0] = b * kBlockValues + 8 * p;
        e[1] = e[0] + 16;
    }
};

// IQ4_XS: unit p (0..15) = sub-block j = p/2, half s = p%2: qs bytes
// 16j + 8s.. give values 32j + 8s.. (low nibbles) and 32j + 16 + 8s.. (high);
// value (d·(ls_j − 32))·kv[nibble].
template <> struct QuantUnit<STRATA_IQ4_XS> {
    static constexpr int kGroups = 2, kUnitsPerBlock = 16, kBlockValues = 256, kBlockBytes = 136;
    __device__ __forceinline__ static void load(const uint8_t* row, int64_t u, float (&w)[8 * kGroups],
                                                int64_t (&e)[kGroups]) {
        const int64_t b = u >> 4;
        const int p = (int)(u & 15), j = p >> 1, side = p & 1;
        const uint8_t* blk = row + b * kBlockBytes;
        iq4_unit_values(iq4xs_factor(blk, j), ld_8bytes(blk + 8 + 16 * j + 8 * side), w);
        e[0] = b * kBlockValues + 32 * j + 8 * side;
        e[1] = e[0] + 16;
    }
};

// Q6_K: unit p (0..15) = half n = p/8, quarter q = (p/2)%4, l = 8q..8q+7, and
// nibble side s = p%2. Side 0 gives values 128n+l and 128n+32+l from the low
// nibbles of ql[64n+l] and ql[64n+32+l] with qh[32n+l] bits 0-1 and 2-3 and
// scales 8n+q/2 (+2); side 1 gives values 128n+64+l and 128n+96+l from the
// high nibbles, qh bits 4-5 and 6-7, scales +4 and +6.
template <> struct QuantUnit<STRATA_Q6_K> {
    static constexpr int kGroups = 2, kUnitsPerBlock = 16, kBlockValues = 256, kBlockBytes = 210;
    __device__ __forceinline__ static void load(const uint8_t* row, int64_t u, float (&w)[8 * kGroups],
                                                int64_t (&e)[kGroups]) {
        const int64_t b = u >> 4;
        const int p = (int)(u & 15), n = p >> 3, q4 = (p >> 1) & 3, side = p & 1;
        const uint8_t* blk = row + b * kBlockBytes;
        const float d = f16_to_f32(ld_u16(blk + 208));
        const uint8_t* sc = blk + 192 + 8 * n + (q4 >> 1) + 4 * side;
        const float ds0 = __fmul_rn(d, (float)(int8_t)ld_u8(sc));
        const float ds1 = __fmul_rn(d, (float)(int8_t)ld_u8(sc + 2));
        const uint2 qa = ld_8bytes(blk + 64 * n + 8 * q4);
        const uint2 qb = ld_8bytes(blk + 64 * n + 32 + 8 * q4);
        const uint2 qh = ld_8bytes(blk + 128 + 32 * n + 8 * q4);
        const int nib = 4 * side, hs = 4 * side;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const uint32_t a = (byte_of(qa, i) >> nib) & 15u, bb = (byte_of(qb, i) >> nib) & 15u;
            const uint32_t h = byte_of(qh, i) >> hs;
            w[i] = deq_q6_k(ds0, a | ((h & 3u) << 4));
            w[8 + i] = deq_q6_k(ds1, bb | (((h >> 2) & 3u) << 4));
        }
        e[0] = b * kBlockValues + 128 * n + 64 * side + 8 * q4;
        e[1] = e[0] + 32;
    }
};

// ------------------------------------------------------------------ single values

// Value e of a row stored in `dtype` (any weight dtype). Same formulas, and so
// the same bits, as the unit loaders above.
__device__ __forceinline__ float dequant_value(const uint8_t* row, int dtype, int64_t e) {
    switch (dtype) {
    case STRATA_F32: return __ldg(reinterpret_cast<const float*>(row) + e);
    case STRATA_F16: return f16_to_f32(ld_u16(row + 2 * e));
    case STRATA_BF16: return bf16_to_f32(ld_u16(row + 2 * e));
    case STRATA_Q8_0: {
        const uint8_t* blk = row + (e >> 5) * 34;
        return deq_q8_0(f16_to_f32(ld_u16(blk)), (int)(int8_t)ld_u8(blk + 2 + (e & 31)));
    }
    case STRATA_Q4_0: {
        const uint8_t* blk = row + (e >> 5) * 18;
        const int i = (int)(e & 31);
        const uint32_t byte = ld_u8(blk + 2 + (i & 15));
        return deq_q4_0(f16_to_f32(ld_u16(blk)), i < 16 ? (byte & 15u) : (byte >> 4));
    }
    case STRATA_Q4_1: {
        const uint8_t* blk = row + (e >> 5) * 20;
        const int i = (int)(e & 31);
        const uint32_t byte = ld_u8(blk + 4 + (i & 15));
        return deq_q4_1(f16_to_f32(ld_u16(blk)), f16_to_f32(ld_u16(blk + 2)), i < 16 ? (byte & 15u) : (byte >> 4));
    }
    case STRATA_Q5_0:
    case STRATA_Q5_1: {
        const bool one = dtype == STRATA_Q5_1;
        const uint8_t* blk = row + (e >> 5) * (one ? 24 : 22);
        const int i = (int)(e & 31);
        const uint8_t* qh = blk + (one ? 4 : 2);
        const uint32_t bit = (ld_u8(qh + (i >> 3)) >> (i & 7)) & 1u;
        const uint32_t byte = ld_u8(blk + (one ? 8 : 6) + (i & 15));
        const uint32_t q = (i < 16 ? (byte & 15u) : (byte >> 4)) | (bit << 4);
        const float d = f16_to_f32(ld_u16(blk));
        return one ? deq_q5_1(d, f16_to_f32(ld_u16(blk + 2)), q) : deq_q5_0(d, q);
    }
    case STRATA_Q4_K: {
        const uint8_t* blk = row + (e >> 8) * 144;
        const int i = (int)(e & 255), c = i >> 6, hi = (i >> 5) & 1, l = i & 31;
        float d1, m1;
        q4k_factors(blk, 2 * c + hi, d1, m1);
        const uint32_t byte = ld_u8(blk + 16 + 32 * c + l);
        return deq_q4_k(d1, m1, hi ? (byte >> 4) : (byte & 15u));
    }
    case STRATA_Q5_K: {
        const uint8_t* blk = row + (e >> 8) * 176;
        const int i = (int)(e & 255), c = i >> 6, hi = (i >> 5) & 1, l = i & 31;
        float d1, m1;
        q4k_factors(blk, 2 * c + hi, d1, m1);
        const uint32_t byte = ld_u8(blk + 48 + 32 * c + l);
        const uint32_t bit = (ld_u8(blk + 16 + l) >> (2 * c + hi)) & 1u;
        return deq_q4_k(d1, m1, (hi ? (byte >> 4) : (byte & 15u)) | (bit << 4));
    }
    case STRATA_IQ4_NL: {
        const uint8_t* blk = row + (e >> 5) * 18;
        const int i = (int)(e & 31);
        const uint32_t byte = ld_u8(blk + 2 + (i & 15));
        return __fmul_rn(f16_to_f32(ld_u16(blk)), iq4nl_value(i < 16 ? (byte & 15u) : (byte >> 4)));
    }
    case STRATA_IQ4_XS: {
        const uint8_t* blk = row + (e >> 8) * 136;
        const int i = (int)(e & 255), j = i >> 5, l = i & 31;
        const uint32_t byte = ld_u8(blk + 8 + 16 * j + (l & 15));
        return __fmul_rn(iq4xs_factor(blk, j), iq4nl_value(l < 16 ? (byte & 15u) : (byte >> 4)));
    }
    case STRATA_Q6_K: {
        const uint8_t* blk = row + (e >> 8) * 210;
        const int i = (int)(e & 255), n = i >> 7, quad = (i >> 5) & 3, l = i & 31;
        const uint32_t ql = ld_u8(blk + 64 * n + 32 * (quad & 1) + l);
        const uint32_t qh = (ld_u8(blk + 128 + 32 * n + l) >> (2 * quad)) & 3u;
        const uint32_t q = ((quad >> 1) ? (ql >> 4) : (ql & 15u)) | (qh << 4);
        const float ds = __fmul_rn(f16_to_f32(ld_u16(blk + 208)), (float)(int8_t)ld_u8(blk + 192 + 8 * n + (l >> 4) + 2 * quad));
        return deq_q6_k(ds, q);
    }
    case STRATA_Q2_K:
    case STRATA_Q3_K:
    case STRATA_IQ3_S: return dequant_value_low(row, dtype, e);
    default: return 0.0f;
    }
}

// Bytes of one row of k values (k a multiple of the block), 0 for an unknown dtype.
inline int64_t row_bytes(int dtype, int64_t k) {
    switch (dtype) {
    case STRATA_F32: return 4 * k;
    case STRATA_F16:
    case STRATA_BF16: return 2 * k;
    case STRATA_Q8_0: return k / 32 * 34;
    case STRATA_Q4_0: return k / 32 * 18;
    case STRATA_Q4_1: return k / 32 * 20;
    case STRATA_Q5_0: return k / 32 * 22;
    case STRATA_Q5_1: return k / 32 * 24;
    case STRATA_Q4_K: return k / 256 * 144;
    case STRATA_Q5_K: return k / 256 * 176;
    case STRATA_IQ4_NL: return k / 32 * 18;
    case STRATA_IQ4_XS: return k / 256 * 136;
    case STRATA_Q6_K: return k / 256 * 210;
    case STRATA_Q2_K: return k / 256 * 84;
    case STRATA_Q3_K:
    case STRATA_IQ3_S: return k / 256 * 110;
    default: return 0;
    }
}

}  // namespace cuda
}  // namespace strata

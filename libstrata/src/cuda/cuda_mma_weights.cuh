// cuda_mma_weights.cuh — weight blocks, staged raw in shared memory, turned
// into mma.sync A fragments holding the exact integer quant values (f16:
// q−8, q, int8, q−32; F16/BF16 weights as they are), with the block scale kept
// aside in f32. Part of the tensor-core matmul (cuda_mma_matmul.cu).
//
// The canonical k-order inside a 32-value block (docs/cuda_backend.md): the
// block is two k16 halves h (values 16h..16h+15); within a half, mma slot
// s = 2t + j + 8i (t = lane % 4) holds value
//   quantized types:  4t + 2j + i   (so a lane's 4 slots are 4 consecutive values,
//                                    one 32-bit word of 4-bit or 8-bit quants)
//   F16 / BF16:       s             (identity, the layout ldmatrix reads)
// Both the decode and the prefill kernels take A from here and B from
// cuda_mma_act.cuh, which uses the same order, so every output sees the same
// products in the same mma slots whatever the kernel.
//
// Staged rows may start at any 2-byte boundary (GGUF blocks of 18, 34, 210
// bytes; weights at 2-aligned offsets): 32-bit words are read with
// ld_u32_a2, two aligned loads and a funnel shift.
#pragma once

#include "cuda_mma.cuh"

namespace strata {
namespace cuda {

// The 32-bit little-endian word at a 2-byte aligned shared-memory address.
// (Pointer arithmetic, not integer masking, so the compiler keeps the shared
// address space and emits LDS.)
__device__ __forceinline__ uint32_t ld_u32_a2(const uint8_t* p) {
    const uint32_t mis = (uint32_t)reinterpret_cast<uintptr_t>(p) & 2u;
    const uint32_t* q = reinterpret_cast<const uint32_t*>(p - mis);
    return funnel_r(q[0], q[1], mis * 8u);
}
// The word at blk + kOff + v (v a multiple of 4) when blk's address is known
// to be ≡ kP (mod 4) — kP = 0 or 2; −1: unknown, decided at run time.
template <int kP, int kOff>
__device__ __forceinline__ uint32_t ld_word(const uint8_t* blk, int v) {
    if constexpr (kP < 0) {
        return ld_u32_a2(blk + kOff + v);
    } else if constexpr (((kP + kOff) & 2) == 0) {
        return *reinterpret_cast<const uint32_t*>(blk + kOff + v);
    } else {
        const uint32_t* q = reinterpret_cast<const uint32_t*>(blk + kOff + v - 2);
        return funnel_r(q[0], q[1], 16u);
    }
}
__device__ __forceinline__ uint32_t ld_u16s(const uint8_t* p) { return *reinterpret_cast<const uint16_t*>(p); }
__device__ __forceinline__ float ld_f16s(const uint8_t* p) { return f16_bits_to_f32(ld_u16s(p)); }

// f16x2 constants.
constexpr uint32_t kMagic = 0x64006400u;     // 1024, 1024: 0x64XX is 1024 + XX
constexpr uint32_t kNeg1024 = 0xE400E400u;
constexpr uint32_t kNeg1032 = 0xE408E408u;   // 1024 + 8 (Q4_0 offset)
constexpr uint32_t kNeg1056 = 0xE420E420u;   // 1024 + 32 (Q6_K offset)
constexpr uint32_t kNeg1152 = 0xE480E480u;   // 1024 + 128 (int8 biased by 128)
constexpr uint32_t kSixteenth = 0x2C002C00u; // 1/16
constexpr uint32_t kNeg64 = 0xD400D400u;
constexpr uint32_t kNeg72 = 0xD480D480u;

// One output row's share of a block for lane t: f[h][0] = slots (2t, 2t+1),
// f[h][1] = slots (2t+8, 2t+9) of half h; ws[h] the scale of half h (the same
// for both halves except Q6_K); wm the min coefficient (Q4_1: m; Q4_K: −dmin·m).
struct RowFrag {
    uint32_t f[2][2];
    float ws[2];
    float wm;
};

// 4-bit quants of word w: lo nibbles → (slots of b0, b2), (b1, b3) − off; hi nibbles likewise.
__device__ __forceinline__ void nibbles_lo(uint32_t w, uint32_t neg, uint32_t (&f)[2]) {
    f[0] = hadd2(and_or(w, 0x000F000Fu, kMagic), neg);
    f[1] = hadd2(and_or(w >> 8, 0x000F000Fu, kMagic), neg);
}
__device__ __forceinline__ void nibbles_hi(uint32_t w, uint32_t neg, uint32_t (&f)[2]) {
    f[0] = hfma2(and_or(w, 0x00F000F0u, kMagic), kSixteenth, neg);
    f[1] = hfma2(and_or(w >> 8, 0x00F000F0u, kMagic), kSixteenth, neg);
}
// Bytes of v (each 0..255 after biasing) → f16 (byte − off): slots (b0, b2), (b1, b3).
__device__ __forceinline__ void bytes_to_f16(uint32_t v, uint32_t neg, uint32_t (&f)[2]) {
    f[0] = hadd2(prmt(v, 0x64646464u, 0x4240u), neg);
    f[1] = hadd2(prmt(v, 0x64646464u, 0x4341u), neg);
}

template <int kDtype> struct MmaW;

// Blocks of 32 values: `row` is the staged chunk of one output row, block j at j * kBytes.
// load<kP>: kP = the block start's address mod 4 when known at compile time (−1: not).
template <> struct MmaW<STRATA_Q4_0> {
    static constexpr int kBytes = 18, kBlocksPerUnit = 1;
    static constexpr bool kPlain = false, kMin = false, kSplit = false;
    template <int kP = -1>
    __device__ __forceinline__ static void load(const uint8_t* row, int j, int t, RowFrag& r) {
        const uint8_t* b = row + j * kBytes;
        const uint32_t w = ld_word<kP, 2>(b, 4 * t);
        nibbles_lo(w, kNeg1032, r.f[0]);
        nibbles_hi(w, kNeg72, r.f[1]);
        r.ws[0] = r.ws[1] = ld_f16s(b);
        r.wm = 0.0f;
    }
};

template <> struct MmaW<STRATA_Q4_1> {
    static constexpr int kBytes = 20, kBlocksPerUnit = 1;
    static constexpr bool kPlain = false, kMin = true, kSplit = false;
    template <int kP = -1>
    __device__ __forceinline__ static void load(const uint8_t* row, int j, int t, RowFrag& r) {
        const uint8_t* b = row + j * kBytes;
        const uint32_t w = ld_word<kP, 4>(b, 4 * t);
        nibbles_lo(w, kNeg1024, r.f[0]);
        nibbles_hi(w, kNeg64, r.f[1]);
        r.ws[0] = r.ws[1] = ld_f16s(b);
        r.wm = ld_f16s(b + 2);
    }
};

template <> struct MmaW<STRATA_Q8_0> {
    static constexpr int kBytes = 34, kBlocksPerUnit = 1;
    static constexpr bool kPlain = false, kMin = false, kSplit = false;
    template <int kP = -1>
    __device__ __forceinline__ static void load(const uint8_t* row, int j, int t, RowFrag& r) {
        const uint8_t* b = row + j * kBytes;
        bytes_to_f16(ld_word<kP, 2>(b, 4 * t) ^ 0x80808080u, kNeg1152, r.f[0]);
        bytes_to_f16(ld_word<kP, 18>(b, 4 * t) ^ 0x80808080u, kNeg1152, r.f[1]);
        r.ws[0] = r.ws[1] = ld_f16s(b);
        r.wm = 0.0f;
    }
};

// Super-blocks of 256 values (8 blocks): `row` is the staged super-block.
// K-quants: scales() gives block j's (scale, min) — Q6_K: (scale of half 0,
// of half 1) — which the kernels compute once per chunk into a table;
// quants() the A fragments; load() both (the reference form).
template <> struct MmaW<STRATA_Q4_K> {
    static constexpr int kBytes = 144, kBlocksPerUnit = 8;
    static constexpr bool kPlain = false, kMin = true, kSplit = false;
    __device__ __forceinline__ static float2 scales(const uint8_t* sb, int j) {
        const uint8_t* s = sb + 4;
        uint32_t sc, m;
        if (j < 4) {
            sc = s[j] & 63u;
            m = s[j + 4] & 63u;
        } else {
            sc = (s[j + 4] & 15u) | ((uint32_t)(s[j - 4] >> 6) << 4);
            m = (s[j + 4] >> 4) | ((uint32_t)(s[j] >> 6) << 4);
        }
        return make_float2(__fmul_rn(ld_f16s(sb), (float)sc), -__fmul_rn(ld_f16s(sb + 2), (float)m));
    }
    template <int kP = -1>
    __device__ __forceinline__ static void quants(const uint8_t* sb, int j, int t, RowFrag& r) {
        const uint32_t w0 = ld_word<kP, 16>(sb, 32 * (j >> 1) + 4 * t);
        const uint32_t w1 = ld_word<kP, 32>(sb, 32 * (j >> 1) + 4 * t);
        if (j & 1) {
            nibbles_hi(w0, kNeg64, r.f[0]);
            nibbles_hi(w1, kNeg64, r.f[1]);
        } else {
            nibbles_lo(w0, kNeg1024, r.f[0]);
            nibbles_lo(w1, kNeg1024, r.f[1]);
        }
    }
    template <int kP = -1>
    __device__ __forceinline__ static void load(const uint8_t* sb, int j, int t, RowFrag& r) {
        quants<kP>(sb, j, t, r);
        const float2 sc = scales(sb, j);
        r.ws[0] = r.ws[1] = sc.x;
        r.wm = sc.y;
    }
};

template <> struct MmaW<STRATA_Q6_K> {
    static constexpr int kBytes = 210, kBlocksPerUnit = 8;
    static constexpr bool kPlain = false, kMin = false, kSplit = true;  // a scale per 16 values
    __device__ __forceinline__ static float2 scales(const uint8_t* sb, int j) {
        const float d = ld_f16s(sb + 208);
        const int8_t* sc = reinterpret_cast<const int8_t*>(sb + 192 + 8 * (j >> 2) + 2 * (j & 3));
        return make_float2(__fmul_rn(d, (float)sc[0]), __fmul_rn(d, (float)sc[1]));
    }
    template <int kP = -1>
    __device__ __forceinline__ static void quants(const uint8_t* sb, int j, int t, RowFrag& r) {
        const int n = j >> 2, q = j & 3;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const uint32_t ql = ld_word<kP, 0>(sb, 64 * n + 32 * (q & 1) + 16 * h + 4 * t);
            const uint32_t qh = ld_word<kP, 128>(sb, 32 * n + 16 * h + 4 * t);
            const uint32_t v = ((ql >> (4 * (q >> 1))) & 0x0F0F0F0Fu) | (((qh >> (2 * q)) & 0x03030303u) << 4);
            bytes_to_f16(v, kNeg1056, r.f[h]);
        }
    }
    template <int kP = -1>
    __device__ __forceinline__ static void load(const uint8_t* sb, int j, int t, RowFrag& r) {
        quants<kP>(sb, j, t, r);
        const float2 sc = scales(sb, j);
        r.ws[0] = sc.x;
        r.ws[1] = sc.y;
        r.wm = 0.0f;
    }
};

// F16 / BF16: `row` is the staged chunk (2 bytes per value), block j at 64 * j;
// `valid` values of the block are real (32 except in a partial last block),
// the rest read as 0. Identity slot order.
template <int kDtype> struct MmaWPlain {
    static constexpr int kBytes = 64, kBlocksPerUnit = 1;
    static constexpr bool kPlain = true, kMin = false, kSplit = false;
    template <int kP>
    __device__ __forceinline__ static uint32_t pair(const uint8_t* p, int e, int valid) {
        if (e + 1 < valid) return ld_word<kP, 0>(p, 2 * e);
        return e < valid ? ld_u16s(p + 2 * e) : 0u;
    }
    template <int kP = -1>
    __device__ __forceinline__ static void load(const uint8_t* row, int j, int t, RowFrag& r, int valid) {
        const uint8_t* b = row + 64 * j;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            r.f[h][0] = pair<kP>(b, 16 * h + 2 * t, valid);
            r.f[h][1] = pair<kP>(b, 16 * h + 2 * t + 8, valid);
        }
        r.ws[0] = r.ws[1] = 1.0f;
        r.wm = 0.0f;
    }
};
template <> struct MmaW<STRATA_F16> : MmaWPlain<STRATA_F16> {};
template <> struct MmaW<STRATA_BF16> : MmaWPlain<STRATA_BF16> {};

// Bytes of the staged unit that holds blocks [b0, b1) of a row of k values.
template <int kDtype>
__host__ __device__ __forceinline__ int64_t unit_bytes_begin(int64_t b0) {
    using W = MmaW<kDtype>;
    return W::kBlocksPerUnit == 1 ? b0 * W::kBytes : (b0 / 8) * W::kBytes;
}

}  // namespace cuda
}  // namespace strata

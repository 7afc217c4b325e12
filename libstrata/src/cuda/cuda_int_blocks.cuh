// cuda_int_blocks.cuh — GGUF weight blocks as exact integer dot products with
// int8 activation blocks (the integer-exact matmul, cuda_int_matmul.cu).
//
// A weight block (32 values) times an activation block (32 int8 values xq,
// scale dx, exact sum sx = Σxq) is, per format:
//   Q4_0: I = Σ (q − 8)·xq = Σ q·xq − 8·sx    (d · dx · I)
//   Q8_0: I = Σ q·xq                          (d · dx · I)
//   Q4_1: I = Σ q·xq                          (d · dx · I + m · dx · sx)
// I is an integer (|I| < 2^20), exact however it is computed (dp4a, int8 mma,
// in any order); only the float steps around it need a fixed order, and those
// live in one place: int_block_fold() below.
//
// Blocks are read from shared memory where the staging copied them with the
// same 16-byte alignment they have in global memory (`kC` = the slice's first
// byte modulo 16, even: GGUF blocks are 2-byte aligned). A slice of 8 blocks
// spans a whole number of 16-byte windows for every type here (8 x 18, 34,
// 20 bytes), so kC is the same for every slice of a row and every extraction
// below is resolved at compile time.
#pragma once

#include "cuda_common.cuh"

namespace strata {
namespace cuda {

template <int kDtype>
struct IntW;
template <>
struct IntW<STRATA_Q4_0> {
    static constexpr int kBytes = 18, kQuantOff = 2, kWords = 4;
    static constexpr bool kMin = false, kNibbles = true, kOffset8 = true;
};
template <>
struct IntW<STRATA_Q8_0> {
    static constexpr int kBytes = 34, kQuantOff = 2, kWords = 8;
    static constexpr bool kMin = false, kNibbles = false, kOffset8 = false;
};
template <>
struct IntW<STRATA_Q4_1> {
    static constexpr int kBytes = 20, kQuantOff = 4, kWords = 4;
    static constexpr bool kMin = true, kNibbles = true, kOffset8 = false;
};

constexpr int kIntSliceBlocks = 8;  // blocks per slice: the float fold's fixed structure

// 32 bits from a 2-byte aligned shared-memory address: the two aligned words around it, shifted
// (no branch, so the compiler can schedule the loads of later blocks early).
// The aligned address is q minus an offset (no integer round trip): the compiler keeps the shared
// address space (LDS rather than generic loads).
__device__ __forceinline__ uint32_t lds32_any(const uint8_t* q) {
    const int off = (int)(reinterpret_cast<uintptr_t>(q) & 2);
    const uint32_t* w = reinterpret_cast<const uint32_t*>(q - off);
    return __funnelshift_r(w[0], w[1], (uint32_t)off * 8);
}

// 32 bits from shared-memory address q whose offset modulo 4 is ph (0 or 2, a compile-time constant
// once the block loop is unrolled): one aligned load, or two and a funnel shift.
__device__ __forceinline__ uint32_t lds32_ph(const uint8_t* q, const int ph) {
    if (ph == 0) return *reinterpret_cast<const uint32_t*>(q);
    const uint32_t* w = reinterpret_cast<const uint32_t*>(q - 2);
    return __funnelshift_r(w[0], w[1], 16);
}

// Four nibbles (0..15, one per byte) as the signed bytes q − 8 (exact): q + 120 stays below 256 (no
// carry between bytes) and flipping its top bit subtracts 128 (q >= 8) or adds 128 (q < 8), mod 256.
__device__ __forceinline__ uint32_t nib_minus8(uint32_t x) {
    return (x + 0x78787878u) ^ 0x80808080u;
}

// Byte offset B (even, compile-time) of a word array as a 32-bit word.
template <int B, int N>
__device__ __forceinline__ uint32_t word_at(const uint32_t (&w)[N]) {
    static_assert(B % 2 == 0 && B / 4 + (B % 4 ? 1 : 0) < N, "word_at out of range");
    if constexpr (B % 4 == 0) return w[B / 4];
    else return __funnelshift_r(w[B / 4], w[B / 4 + 1], 16);
}
template <int B, int N>
__device__ __forceinline__ uint16_t half_at(const uint32_t (&w)[N]) {
    return (uint16_t)(w[B / 4] >> (8 * (B % 4)));
}

// q[I..kWords) = the words at bytes kBase + 4I, ... (compile-time recursion).
template <int kBase, int I, int kWords, int N>
__device__ __forceinline__ void fill_words(uint32_t* q, const uint32_t (&w)[N]) {
    if constexpr (I < kWords) {
        q[I] = word_at<kBase + 4 * I>(w);
        fill_words<kBase, I + 1, kWords>(q, w);
    }
}

// One weight block decoded for integer dots: scale, min, quant words.
template <int kDtype>
struct IntBlock {
    float d, m;
    uint32_t q[IntW<kDtype>::kWords];
};

// Block j (compile-time) of a slice whose bytes start at byte kC of `w`
// (the slice's 16-byte windows as words).
template <int kDtype, int kC, int kJ, int N>
__device__ __forceinline__ IntBlock<kDtype> int_block(const uint32_t (&w)[N]) {
    using W = IntW<kDtype>;
    constexpr int B = kC + kJ * W::kBytes;
    IntBlock<kDtype> r;
    r.d = f16_to_f32(half_at<B>(w));
    r.m = W::kMin ? f16_to_f32(half_at<B + 2>(w)) : 0.0f;
    fill_words<B + W::kQuantOff, 0, W::kWords>(r.q, w);
    return r;
}

// The same block from any 2-byte aligned shared-memory address (the slow,
// general path: same bytes, so the same integers).
template <int kDtype>
__device__ __forceinline__ IntBlock<kDtype> int_block_any(const uint8_t* p) {
    using W = IntW<kDtype>;
    const uint16_t* h = reinterpret_cast<const uint16_t*>(p);
    IntBlock<kDtype> r;
    r.d = f16_to_f32(h[0]);
    r.m = W::kMin ? f16_to_f32(h[1]) : 0.0f;
#pragma unroll
    for (int i = 0; i < W::kWords; ++i)
        r.q[i] = (uint32_t)h[W::kQuantOff / 2 + 2 * i] | ((uint32_t)h[W::kQuantOff / 2 + 2 * i + 1] << 16);
    return r;
}

// Σ weight·xq over the block (exact): xa = activation values 0..15, xb = 16..31,
// as int8 words. Q4_0's −8 is applied by the caller with the exact sum sx.
template <int kDtype>
__device__ __forceinline__ int int_block_dot(const IntBlock<kDtype>& b, const uint4& xa, const uint4& xb) {
    using W = IntW<kDtype>;
    int s = 0;
    if constexpr (W::kNibbles) {
        // byte i of word j: low nibble = value 4j + i, high nibble = value 16 + 4j + i
        s = __dp4a((int)(b.q[0] & 0x0F0F0F0Fu), (int)xa.x, s);
        s = __dp4a((int)(b.q[1] & 0x0F0F0F0Fu), (int)xa.y, s);
        s = __dp4a((int)(b.q[2] & 0x0F0F0F0Fu), (int)xa.z, s);
        s = __dp4a((int)(b.q[3] & 0x0F0F0F0Fu), (int)xa.w, s);
        s = __dp4a((int)((b.q[0] >> 4) & 0x0F0F0F0Fu), (int)xb.x, s);
        s = __dp4a((int)((b.q[1] >> 4) & 0x0F0F0F0Fu), (int)xb.y, s);
        s = __dp4a((int)((b.q[2] >> 4) & 0x0F0F0F0Fu), (int)xb.z, s);
        s = __dp4a((int)((b.q[3] >> 4) & 0x0F0F0F0Fu), (int)xb.w, s);
    } else {
        s = __dp4a((int)b.q[0], (int)xa.x, s);
        s = __dp4a((int)b.q[1], (int)xa.y, s);
        s = __dp4a((int)b.q[2], (int)xa.z, s);
        s = __dp4a((int)b.q[3], (int)xa.w, s);
        s = __dp4a((int)b.q[4], (int)xb.x, s);
        s = __dp4a((int)b.q[5], (int)xb.y, s);
        s = __dp4a((int)b.q[6], (int)xb.z, s);
        s = __dp4a((int)b.q[7], (int)xb.w, s);
    }
    return s;
}

// The canonical float steps of one block (every kernel calls exactly this):
// acc = fmaf(d·dx, I, acc); Q4_1: acc = fmaf(m, dx·sx, acc). `dot` is Σq·xq;
// Q4_0 subtracts 8·sx first (integer, exact).
template <int kDtype>
__device__ __forceinline__ float int_block_fold(float acc, float d, float m, int dot, float dx, int sx) {
    using W = IntW<kDtype>;
    const int I = W::kOffset8 ? dot - 8 * sx : dot;
    acc = fmaf(__fmul_rn(d, dx), (float)I, acc);
    if constexpr (W::kMin) acc = fmaf(m, __fmul_rn(dx, (float)sx), acc);
    return acc;
}

}  // namespace cuda
}  // namespace strata

// cuda_int_kquant.cuh — Q4_K super-blocks as blocks of the integer-exact
// matmul (cuda_int_matmul.cu, cuda_int_mma_tiles.cu).
//
// A Q4_K super-block (144 bytes: f16 d, f16 dmin, 12 bytes of packed 6-bit
// scales sc_j and mins m_j, 128 bytes of nibbles) holds 256 values = 8
// sub-blocks of 32, value i of sub-block j = d·sc_j·q − dmin·m_j. Sub-block j
// lines up with one activation block of 32, so it is a Q4_1-like block with
//   scale D_j = d·sc_j,  min M_j = −(dmin·m_j),  I_j = Σ q·xq  (q in 0..15),
// and it goes through int_block_fold's Q4_1 steps unchanged:
//   acc = fmaf(D_j·dx, I_j, acc); acc = fmaf(M_j, dx·sx, acc).
// D_j and M_j are exact in float32 (an 11-bit f16 significand times a 6-bit
// integer), so they are plain values of the weights, not a rounding choice.
// One slice (8 blocks) is exactly one super-block: IntW's kBytes is the mean
// 18 bytes per block (8 x 18 = 144 = 9 x 16), so the staging of whole slices,
// the 16-byte windows and the slice strides are those of Q4_0; only the
// extraction of block j differs and needs the slice's first byte:
//   sub-block 2g = the LOW nibbles of qs bytes 32g..32g+31 (value i = byte i),
//   sub-block 2g+1 = the HIGH nibbles of the same bytes,
// so block j's 8 quant words (values 4n..4n+3 in word n, one per byte, like
// Q8_0's) are the qs words shifted by 4·(j & 1) and masked: the same A
// operand layout as Q8_0 for dp4a and mma (0..15 is the same signed or not).
#pragma once

#include "cuda_int_blocks.cuh"

namespace strata {
namespace cuda {

template <>
struct IntW<STRATA_Q4_K> {
    static constexpr int kBytes = 18, kQuantOff = 16, kWords = 8;  // kBytes: 144 / 8 (slices only)
    static constexpr bool kMin = true, kNibbles = false, kOffset8 = false;
};

// Whether block j of a slice must be extracted from the slice's first byte
// (int_kblock_*) rather than from its own bytes at j·kBytes.
template <int kDtype>
constexpr bool kIntSuper = kDtype == STRATA_Q4_K;

// 32 bits at p, which is kAlign-byte aligned (16 and 4: one aligned load; 2: two halves).
template <int kAlign>
__device__ __forceinline__ uint32_t kq_ld32(const uint8_t* p) {
    if constexpr (kAlign >= 4) return *reinterpret_cast<const uint32_t*>(p);
    else {
        const uint16_t* h = reinterpret_cast<const uint16_t*>(p);
        return (uint32_t)h[0] | ((uint32_t)h[1] << 16);
    }
}

// D_j and M_j of sub-block j of the super-block at sb (2-byte aligned): the
// 6-bit scale and min unpacked as GGUF packs them (j < 4: the low 6 bits of
// bytes j and j+4 of the 12; j >= 4: a nibble of byte j+4 and the top 2 bits
// of bytes j−4 and j).
template <int kAlign>
__device__ __forceinline__ void q4k_scale_min_f(const uint8_t* sb, int j, float& d, float& m) {
    const uint32_t dm = kq_ld32<kAlign>(sb);
    const uint8_t* s = sb + 4;
    uint32_t sc, mn;
    if (j < 4) {
        sc = s[j] & 63u;
        mn = s[j + 4] & 63u;
    } else {
        const uint32_t a = s[j + 4];
        sc = (a & 15u) | ((uint32_t)(s[j - 4] >> 6) << 4);
        mn = (a >> 4) | ((uint32_t)(s[j] >> 6) << 4);
    }
    d = __fmul_rn(f16_to_f32((uint16_t)(dm & 0xffffu)), (float)sc);    // exact
    m = __fmul_rn(f16_to_f32((uint16_t)(dm >> 16)), -(float)mn);       // exact
}

// Quant word n of sub-block j (values 4n..4n+3 as bytes 0..15) from qs word `raw`.
__device__ __forceinline__ uint32_t q4k_word(uint32_t raw, int j) { return (raw >> (4 * (j & 1))) & 0x0F0F0F0Fu; }

// Byte offset of sub-block j's 32 quant bytes in its super-block.
__device__ __forceinline__ int q4k_qs(int j) { return 16 + 32 * (j >> 1); }

// Block j of the Q4_K super-block at sb (kAlign-byte aligned, kAlign in 16, 4, 2).
template <int kAlign>
__device__ __forceinline__ IntBlock<STRATA_Q4_K> int_kblock_q4k(const uint8_t* sb, int j) {
    IntBlock<STRATA_Q4_K> r;
    q4k_scale_min_f<kAlign>(sb, j, r.d, r.m);
    const uint8_t* qs = sb + q4k_qs(j);
    if constexpr (kAlign >= 16) {
        const uint4 a = reinterpret_cast<const uint4*>(qs)[0], b = reinterpret_cast<const uint4*>(qs)[1];
        r.q[0] = q4k_word(a.x, j); r.q[1] = q4k_word(a.y, j); r.q[2] = q4k_word(a.z, j); r.q[3] = q4k_word(a.w, j);
        r.q[4] = q4k_word(b.x, j); r.q[5] = q4k_word(b.y, j); r.q[6] = q4k_word(b.z, j); r.q[7] = q4k_word(b.w, j);
    } else {
#pragma unroll
        for (int n = 0; n < 8; ++n) r.q[n] = q4k_word(kq_ld32<kAlign>(qs + 4 * n), j);
    }
    return r;
}

// Block j of a slice at sb for a super-block type (the dot kernels' entry).
template <int kDtype, int kAlign>
__device__ __forceinline__ IntBlock<kDtype> int_kblock(const uint8_t* sb, int j) {
    static_assert(kDtype == STRATA_Q4_K, "int_kblock: a super-block type");
    return int_kblock_q4k<kAlign>(sb, j);
}

// The alignment a compile-time byte phase kC (even) gives inside a 16-byte aligned window.
template <int kC>
constexpr int kKqAlign = kC % 16 == 0 ? 16 : (kC % 4 == 0 ? 4 : 2);

// The int8 mma's A fragment words of sub-block j for two weight rows (slice
// starts s0: row g, s1: row g+8), lane quarter tq: rows g/g+8 x values
// 4tq..4tq+3 and 16+4tq.., with their D_j, M_j. `ld` loads 32 bits from a
// 2-byte aligned shared-memory address.
template <class Ld>
__device__ __forceinline__ void q4k_mma_a(const uint8_t* s0, const uint8_t* s1, int j, int tq, Ld ld, float (&d)[2],
                                          float (&m)[2], uint32_t (&a)[4]) {
    q4k_scale_min_f<2>(s0, j, d[0], m[0]);
    q4k_scale_min_f<2>(s1, j, d[1], m[1]);
    const int o = q4k_qs(j) + 4 * tq;
    a[0] = q4k_word(ld(s0 + o), j);
    a[1] = q4k_word(ld(s1 + o), j);
    a[2] = q4k_word(ld(s0 + o + 16), j);
    a[3] = q4k_word(ld(s1 + o + 16), j);
}

}  // namespace cuda
}  // namespace strata

// cuda_int_q6k.cuh — Q6_K super-blocks as blocks of the integer-exact matmul
// (cuda_int_matmul.cu's dot kernel, cuda_int_mma_tiles.cu's tiles).
//
// A Q6_K super-block (210 bytes: ql[128] low nibbles, qh[64] high 2-bit
// pairs, 16 int8 scales, f16 d at byte 208) holds 256 values = 16 sub-blocks
// of 16, value i = d·sc_{i/16}·(q_i − 32), q in 0..63. Activation block j of
// the super-block (values 32j..32j+31, half h = j/4, quarter c = j%4, l =
// 0..31) reads
//   q_l = ((ql[64h + 32(c&1) + l] >> 4(c>>1)) & 15) | (((qh[32h + l] >> 2c) & 3) << 4)
// and its two halves l < 16 and l >= 16 carry the scales sc0 = scales[2j],
// sc1 = scales[2j+1]. The canonical integer of block j with the activation
// block (xq, dx) is
//   I = sc0·I0 + sc1·I1,  I0 = Σ_{l<16} (q_l − 32)·xq_l,  I1 = Σ_{l>=16} (q_l − 32)·xq_l
// — exact: |I0|, |I1| <= 16·32·127 < 2^16 and |I| <= 2·128·65024 < 2^24, so
// (float)I (cvt.rn.f32.s32, as __int2float_rn) is exact too. Every kernel then
// folds it with int_block_fold's plain steps: acc = fmaf(d·dx, (float)I, acc)
// (no min, no offset term: the −32 is in the quants, so sx is not used). One
// slice (8 blocks) is one super-block; slices fold in order as for every type.
// The tile kernel forms I0 and I1 with two int8 mmas of zero-padded halves and
// converts sc0·I0 + sc1·I1 with that conversion, NOT with its magic-number trick
// (exact only below 2^22): the same float everywhere.
//
// The super-block is 210 bytes, not a multiple of 16, so the 16-byte phase of
// a slice changes from slice to slice (210 ≡ 2 mod 16): every Q6_K read is from
// a 2-byte aligned address (Q6Src: the two aligned words around it, shifted).
#pragma once

#include "cuda_int_blocks.cuh"

namespace strata {
namespace cuda {

template <>
struct IntW<STRATA_Q6_K> {
    // kBytes 0: Q6_K has no per-block byte size (a slice is 210 bytes: kIntSliceBytes); kWords: the 8
    // words of (q − 32) bytes of one block of 32.
    static constexpr int kBytes = 0, kQuantOff = 0, kWords = 8;
    static constexpr bool kMin = false, kNibbles = false, kOffset8 = false;
};

// Bytes of one slice (8 blocks of 32 values) of a weight row: 8·kBytes, or one super-block.
template <int kDtype>
constexpr int kIntSliceBytes = kIntSliceBlocks * IntW<kDtype>::kBytes;
template <>
constexpr int kIntSliceBytes<STRATA_Q6_K> = 210;

// One Q6_K block of 32 decoded for integer dots: d (the super-block's), the two
// half scales, and the 8 words of (q − 32) as signed bytes (values 4n..4n+3 in
// word n: the same operand layout as Q8_0's for dp4a and the int8 mma).
template <>
struct IntBlock<STRATA_Q6_K> {
    float d, m;
    uint32_t q[8];
    int sc0, sc1;
};

// The words of a super-block at a 2-byte aligned shared-memory address: the
// aligned word at or below it and the shift (0 or 16) that realigns them.
struct Q6Src {
    const uint32_t* w;
    uint32_t sh;
    __device__ __forceinline__ explicit Q6Src(const uint8_t* sb) {
        const int off = (int)(reinterpret_cast<uintptr_t>(sb) & 2);
        w = reinterpret_cast<const uint32_t*>(sb - off);
        sh = (uint32_t)off * 8;
    }
    // 32 bits at byte `b` of the super-block (b a multiple of 4).
    __device__ __forceinline__ uint32_t ld(int b) const { return __funnelshift_r(w[b >> 2], w[(b >> 2) + 1], sh); }
    // 16 bits at byte `b` (b even).
    __device__ __forceinline__ uint32_t ld16(int b) const {
        const int o = b + (int)(sh >> 3);
        return (w[o >> 2] >> (8 * (o & 3))) & 0xffffu;
    }
};

// Byte offsets inside the super-block of block j's quant words (+4n for word n) and scales.
__device__ __forceinline__ int q6k_ql(int j) { return 64 * (j >> 2) + 32 * (j & 1); }
__device__ __forceinline__ int q6k_qh(int j) { return 128 + 32 * (j >> 2); }
constexpr int kQ6Scales = 192, kQ6D = 208;

// Quant word of block j from its ql and qh words: four q in 0..63 as the signed bytes q − 32
// (exact: q | 0x80 − 32 never borrows across bytes).
__device__ __forceinline__ uint32_t q6k_word(uint32_t ql, uint32_t qh, int j) {
    const int c = j & 3;
    const uint32_t q = ((ql >> (4 * (c >> 1))) & 0x0F0F0F0Fu) | (((qh >> (2 * c)) & 0x03030303u) << 4);
    return ((q | 0x80808080u) - 0x20202020u) ^ 0x80808080u;
}

// The half scales of block j: scales[2j] (values 0..15) and scales[2j+1] (16..31), signed.
__device__ __forceinline__ void q6k_scales(uint32_t s16, int& sc0, int& sc1) {
    sc0 = (int)(int8_t)(s16 & 0xffu);
    sc1 = (int)(int8_t)(s16 >> 8);
}

// Block j of the super-block at `src`.
__device__ __forceinline__ IntBlock<STRATA_Q6_K> int_block_q6k(const Q6Src& src, int j) {
    IntBlock<STRATA_Q6_K> r;
    r.d = f16_to_f32((uint16_t)src.ld16(kQ6D));
    r.m = 0.0f;
    q6k_scales(src.ld16(kQ6Scales + 2 * j), r.sc0, r.sc1);
    const int l = q6k_ql(j), h = q6k_qh(j);
#pragma unroll
    for (int n = 0; n < 8; ++n) r.q[n] = q6k_word(src.ld(l + 4 * n), src.ld(h + 4 * n), j);
    return r;
}

// I = sc0·Σ_{0..15} (q − 32)·xq + sc1·Σ_{16..31} (q − 32)·xq (exact): xa = activation values 0..15,
// xb = 16..31 as int8 words. int_block_fold then takes it as the block's integer (kOffset8 false).
template <>
__device__ __forceinline__ int int_block_dot<STRATA_Q6_K>(const IntBlock<STRATA_Q6_K>& b, const uint4& xa,
                                                          const uint4& xb) {
    int i0 = 0, i1 = 0;
    i0 = __dp4a((int)b.q[0], (int)xa.x, i0);
    i0 = __dp4a((int)b.q[1], (int)xa.y, i0);
    i0 = __dp4a((int)b.q[2], (int)xa.z, i0);
    i0 = __dp4a((int)b.q[3], (int)xa.w, i0);
    i1 = __dp4a((int)b.q[4], (int)xb.x, i1);
    i1 = __dp4a((int)b.q[5], (int)xb.y, i1);
    i1 = __dp4a((int)b.q[6], (int)xb.z, i1);
    i1 = __dp4a((int)b.q[7], (int)xb.w, i1);
    return b.sc0 * i0 + b.sc1 * i1;
}

// The int8 mma's A fragments of block j for two weight rows (super-blocks s0: row g, s1: row g+8),
// lane quarter tq, split into the two halves of 16 values: lo = {rows g, g+8 x values 4tq..4tq+3,
// zeros}, hi = {zeros, rows g, g+8 x values 16+4tq..}, so mma(lo) = I0 and mma(hi) = I1 per element;
// with each row's d and half scales.
__device__ __forceinline__ void q6k_mma_a(const Q6Src& s0, const Q6Src& s1, int j, int tq, float (&d)[2],
                                          int (&sc)[2][2], uint32_t (&lo)[4], uint32_t (&hi)[4]) {
    d[0] = f16_to_f32((uint16_t)s0.ld16(kQ6D));
    d[1] = f16_to_f32((uint16_t)s1.ld16(kQ6D));
    q6k_scales(s0.ld16(kQ6Scales + 2 * j), sc[0][0], sc[0][1]);
    q6k_scales(s1.ld16(kQ6Scales + 2 * j), sc[1][0], sc[1][1]);
    const int l = q6k_ql(j) + 4 * tq, h = q6k_qh(j) + 4 * tq;
    lo[0] = q6k_word(s0.ld(l), s0.ld(h), j);
    lo[1] = q6k_word(s1.ld(l), s1.ld(h), j);
    lo[2] = 0u;
    lo[3] = 0u;
    hi[0] = 0u;
    hi[1] = 0u;
    hi[2] = q6k_word(s0.ld(l + 16), s0.ld(h + 16), j);
    hi[3] = q6k_word(s1.ld(l + 16), s1.ld(h + 16), j);
}

// The block integer from the two halves' integers (each exact), as the float every kernel folds: the
// int -> float conversion of int_block_fold (cvt.rn.f32.s32, exact below 2^24).
__device__ __forceinline__ float q6k_int(int sc0, int i0, int sc1, int i1) { return (float)(sc0 * i0 + sc1 * i1); }

// Block j of a Q6_K slice for one warp's tile in the many-row kernel (cuda_int_mma_tiles.cu): the
// super-blocks of rows g and g+8 of m-tile mt start at st + wofs[mt][0 / 1]; b: the activation B
// fragments of the warp's n-tiles, dx their rows' scales (columns 2tq, 2tq+1). `mma(c, a, b0, b1)`
// gives the exact int32 products of one m16n8k32 s8 x s8 tile. Per element: I0 and I1 from the
// zero-padded halves, then int_block_fold's step acc = fmaf(d·dx, (float)(sc0·I0 + sc1·I1), acc).
template <int kMT, int kNT, class Mma>
__device__ __forceinline__ void q6k_tile_block(const uint8_t* st, const int (&wofs)[kMT][2], int j, int tq,
                                               const uint32_t (&b)[kNT][2], const float (&dx)[kNT][2],
                                               float (&acc)[kMT][kNT][4], Mma mma) {
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
        const Q6Src s0(st + wofs[mt][0]), s1(st + wofs[mt][1]);
        float d[2];
        int sc[2][2];
        uint32_t lo[4], hi[4];
        q6k_mma_a(s0, s1, j, tq, d, sc, lo, hi);
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
            int c0[4], c1[4];
            mma(c0, lo, b[nt][0], b[nt][1]);
            mma(c1, hi, b[nt][0], b[nt][1]);
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const float I = q6k_int(sc[e >> 1][0], c0[e], sc[e >> 1][1], c1[e]);
                acc[mt][nt][e] = fmaf(__fmul_rn(d[e >> 1], dx[nt][e & 1]), I, acc[mt][nt][e]);
            }
        }
    }
}

}  // namespace cuda
}  // namespace strata

// cuda_mma_act.cuh — activations for the tensor-core matmul: one 32-value
// block of one f32 row (staged in shared memory) becomes the row's mma.sync B
// fragments for that block, in the k-order of cuda_mma_weights.cuh.
//
// Four consecutive lanes (a quad, t = lane % 4) convert one (row, block): lane
// t owns the 8 values that B-fragment lane t needs, in fragment order
// v[4h + u] = value at slot (2t, 2t+1, 2t+8, 2t+9)[u] of half h. Per block:
//   prologue    x' = x (NONE) | x·g (RMSNORM, g the norm weight; the 1/rms
//               factor is applied to the dot product at the end) |
//               silu(gate)·up (SILU_MUL)
//   scale       M = max |x'| over the block (exact, any order); E = the
//               exponent of M clamped to [−126, 126] (0 for Inf/NaN), so the
//               block max lands in [1, 2); s = 2^−E, inv = 2^E
//   round       x̂ = f16(x'·s) (bf16(x'), s = 1, for BF16 weights)
//   block sum   Sx = f32(Σ x̂·2^24, an exact integer sum) · 2^−24 · inv  (Q4_1, Q4_K)
//   squares     q_t = fmaf chain over lane t's 8 raw x in fragment order;
//               ssq_b = (q_0 + q_1) + (q_2 + q_3)                    (RMSNORM)
// Every result is a function of the row's own block values: the same bits
// whichever kernel, tile or lane converts the block.
#pragma once

#include "cuda_mma.cuh"

namespace strata {
namespace cuda {

enum MmaPrologue { kProNone = 0, kProRmsNorm = 1, kProSiluMul = 2 };

// Where a task's f32 inputs sit in shared memory: the block's first value of
// the row (x), of the up half (SILU_MUL) and of the norm weight (RMSNORM).
struct ActSrc {
    const float* x;
    const float* up;
    const float* g;
};

// Value offset (within the block) of fragment element i (0..7) of lane t.
template <bool kIdentity>
__device__ __forceinline__ int frag_offset(int t, int i) {
    const int h = i >> 2, u = i & 3;
    if (kIdentity) return 16 * h + 2 * t + (u & 1) + 8 * (u >> 1);
    return 16 * h + 4 * t + 2 * (u & 1) + (u >> 1);
}

// Converts one block. All 32 lanes of the warp call it together (quad
// shuffles); lanes with active == false compute on zeros and store nothing.
// valid: values of the block below k (32 except a partial last block of a
// plain-type row); vec16: src.x (and up, g) rows 16-byte aligned at the block.
// Writes 16 bytes of fragments to xh and, from lane t == 0, inv / Sx / ssq.
template <bool kIdentity, bool kBf16, bool kMin>
__device__ __forceinline__ void convert_block(int prologue, const ActSrc& src, int t, int valid, bool vec16,
                                              bool active, uint4* xh, float* inv_out, float* sx_out,
                                              float* ssq_out) {
    float v[8], raw[8];
    if (active && valid == 32 && vec16 && !kIdentity) {
        const float4 a = *reinterpret_cast<const float4*>(src.x + 4 * t);
        const float4 b = *reinterpret_cast<const float4*>(src.x + 16 + 4 * t);
        raw[0] = a.x; raw[1] = a.z; raw[2] = a.y; raw[3] = a.w;
        raw[4] = b.x; raw[5] = b.z; raw[6] = b.y; raw[7] = b.w;
    } else {
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const int off = frag_offset<kIdentity>(t, i);
            raw[i] = (active && off < valid) ? src.x[off] : 0.0f;
        }
    }
    float q = 0.0f;
    if (prologue == kProRmsNorm) {
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const int off = frag_offset<kIdentity>(t, i);
            q = fmaf(raw[i], raw[i], q);
            v[i] = (active && off < valid) ? __fmul_rn(raw[i], src.g[off]) : 0.0f;
        }
    } else if (prologue == kProSiluMul) {
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const int off = frag_offset<kIdentity>(t, i);
            const float u = (active && off < valid) ? src.up[off] : 0.0f;
            v[i] = __fmul_rn(fast_div(raw[i], __fadd_rn(1.0f, fast_exp(-raw[i]))), u);
        }
    } else {
#pragma unroll
        for (int i = 0; i < 8; ++i) v[i] = raw[i];
    }
    float s = 1.0f, inv = 1.0f;
    if (!kBf16) {
        float m = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; ++i) m = fmaxf(m, fabsf(v[i]));
        m = fmaxf(m, __shfl_xor_sync(kFullMask, m, 1));
        m = fmaxf(m, __shfl_xor_sync(kFullMask, m, 2));
        const int e = (int)((__float_as_uint(m) >> 23) & 0xffu);
        int E = e == 255 ? 0 : e - 127;
        E = E < -126 ? -126 : (E > 126 ? 126 : E);
        s = __uint_as_float((uint32_t)(127 - E) << 23);
        inv = __uint_as_float((uint32_t)(127 + E) << 23);
    }
    uint32_t r[4];
#pragma unroll
    for (int p = 0; p < 4; ++p) {
        const float lo = __fmul_rn(v[2 * p], s), hi = __fmul_rn(v[2 * p + 1], s);
        r[p] = kBf16 ? pack_bf16(lo, hi) : pack_f16(lo, hi);
    }
    float sx = 0.0f;
    if (kMin) {
        int isum = 0;
#pragma unroll
        for (int p = 0; p < 4; ++p) {
            isum += f2i_rz(__fmul_rn(f16_bits_to_f32(r[p] & 0xffffu), 16777216.0f));
            isum += f2i_rz(__fmul_rn(f16_bits_to_f32(r[p] >> 16), 16777216.0f));
        }
        isum += __shfl_xor_sync(kFullMask, isum, 1);
        isum += __shfl_xor_sync(kFullMask, isum, 2);
        sx = __fmul_rn(__fmul_rn(i2f_rn(isum), 5.9604644775390625e-8f), inv);
    }
    if (prologue == kProRmsNorm) {
        q = __fadd_rn(q, __shfl_xor_sync(kFullMask, q, 1));
        q = __fadd_rn(q, __shfl_xor_sync(kFullMask, q, 2));
    }
    if (active) {
        *xh = make_uint4(r[0], r[1], r[2], r[3]);
        if (t == 0) {
            *inv_out = inv;
            if (kMin) *sx_out = sx;
            if (prologue == kProRmsNorm) *ssq_out = q;
        }
    }
}

}  // namespace cuda
}  // namespace strata

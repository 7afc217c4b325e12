// cuda_int_act.cuh — step 1 of the integer matmul's canonical arithmetic
// (cuda_int_matmul.cu's header): the per-element expressions that round
// activations to int8 blocks, and the in-kernel quantization of whole rows
// into shared memory that the dot kernel (STRATA_INT_FUSE_ROUNDS) and the gemv
// kernel (STRATA_INT_GEMV_FUSE) run instead of the pre-pass launch. Every
// path computes the same bits as int_prepass_kernel: the max is exact in any
// order, the block sum is an integer, and only the expressions below (and
// RMSNORM's sum-of-squares order, kept exactly) decide the floats.
#pragma once

#include "cuda_common.cuh"

namespace strata {
namespace cuda {

// The per-element steps, shared by the pre-pass and the in-kernel quantizers
// (which distribute the work differently). `x` is the raw value of element e;
// `aux` the norm weights (RMSNORM) or the row's second half (SILU_MUL).
// kL2: SILU_MUL's second half read through L2 (__ldcg), for rows other CTAs of the running kernel
// wrote (the hand-off's emission, cuda_int_matmul.cu): this SM's L1 may hold older copies of them.
template <int kPro, bool kL2 = false>
__device__ __forceinline__ float int_act_value(float x, const float* aux, int64_t e) {
    if (kPro == STRATA_PROLOGUE_RMSNORM) return __fmul_rn(x, __ldg(aux + e));
    if (kPro == STRATA_PROLOGUE_SILU_MUL)
        return __fmul_rn(__fdiv_rn(x, __fadd_rn(1.0f, expf(-x))), kL2 ? __ldcg(aux + e) : aux[e]);
    return x;
}
__device__ __forceinline__ float int_act_abs(float v) {
    const float a = fabsf(v);
    return a <= 3.402823466e38f ? a : __int_as_float(0x7f800000);  // NaN and inf: +inf
}
__device__ __forceinline__ float int_act_scale(float amax) { return __fdiv_rn(amax, 127.0f); }
__device__ __forceinline__ int int_act_quant(float v, float d) {
    return d > 0.0f && d <= 3.402823466e38f ? max(-127, min(127, __float2int_rn(__fdiv_rn(v, d)))) : 0;
}
// One block rounded by the warp that holds its 32 values (lane j: value j; v after the prologue): dx
// from the warp's max, the lane's int8 value (returned) and the block's exact integer sum, as
// meta = {bits of dx, sx}. The pre-pass kernel and the local hand-off emission both run exactly this.
__device__ __forceinline__ int int_act_round_warp(float v, uint2& meta) {
    const float d = int_act_scale(warp_max(int_act_abs(v)));
    const int q = int_act_quant(v, d);
    int s = q;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(kFullMask, s, off);
    meta = make_uint2(__float_as_uint(d), (uint32_t)s);
    return q;
}
// int_act_round_warp for a block held kE values a lane by 32 / kE neighbouring lanes (an aligned group
// of the warp; every lane of the warp calls it): the same max, scale, int8 values (q) and exact sum, so
// the same bits. Returns the block's meta in every lane of the group.
template <int kE>
__device__ __forceinline__ uint2 int_act_round_lanes(const float (&v)[kE], int (&q)[kE]) {
    constexpr int kLanes = 32 / kE;
    float amax = 0.0f;  // |v| >= +0, so starting at +0 changes no max
#pragma unroll
    for (int i = 0; i < kE; ++i) amax = fmaxf(amax, int_act_abs(v[i]));
#pragma unroll
    for (int off = kLanes / 2; off > 0; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(kFullMask, amax, off));
    const float d = int_act_scale(amax);
    int sum = 0;
#pragma unroll
    for (int i = 0; i < kE; ++i) {
        q[i] = int_act_quant(v[i], d);
        sum += q[i];
    }
#pragma unroll
    for (int off = kLanes / 2; off > 0; off >>= 1) sum += __shfl_xor_sync(kFullMask, sum, off);
    return make_uint2(__float_as_uint(d), (uint32_t)sum);
}
template <int kPro>
__device__ __forceinline__ const float* int_act_aux(const float* xr, const float* norm, int64_t k) {
    return kPro == STRATA_PROLOGUE_RMSNORM ? norm : xr + k;
}

// RMSNORM's factor of one row from its ssq per chunk (step 4 of the canonical arithmetic): the
// chunks added in order, then rsqrt(ssq / k + eps), every rounding explicit. Every integer kernel
// (dot, int8 mma, gemv, few-row, tiles) calls this when a tile starts: the chain of loads it begins
// sits on the critical path when it is left to the epilogue.
// kL2: the sums were written earlier in the same kernel by other CTAs (the one-row chain kernel,
// cuda_int_matmul.cu), so they are read through L2 (__ldcg): L1 is not coherent within a kernel.
template <bool kL2 = false>
__device__ __forceinline__ float int_rms_factor(const float* sq, int n_slices, int64_t k, float eps) {
    float ss;
    if constexpr (kL2) {
        ss = __ldcg(sq);
        for (int c = 1; c < n_slices; ++c) ss = __fadd_rn(ss, __ldcg(sq + c));
    } else {
        ss = sq[0];
        for (int c = 1; c < n_slices; ++c) ss = __fadd_rn(ss, sq[c]);
    }
    return __frsqrt_rn(__fadd_rn(__fdiv_rn(ss, (float)k), eps));
}

// The same factor from per-block sums of squares (a local hand-off emission, cuda_int_matmul.cu's
// emit_blocks): each chunk's 8 block sums added in order (+0 past the end, as the pre-pass's
// block_sum over its 8 warps), then the chunks in order: the additions int_rms_factor's input was
// made of, so the same bits.
__device__ __forceinline__ float int_rms_factor_blocks(const float* wsq, int nb, int64_t k, float eps) {
    float ss = 0.0f;
    for (int c = 0; 8 * c < nb; ++c) {
        float sc = wsq[8 * c];
        for (int i = 1; i < 8; ++i) sc = __fadd_rn(sc, 8 * c + i < nb ? wsq[8 * c + i] : 0.0f);
        ss = c == 0 ? sc : __fadd_rn(ss, sc);
    }
    return __frsqrt_rn(__fadd_rn(__fdiv_rn(ss, (float)k), eps));
}

// int_rms_factor_blocks computed by a whole warp with the same additions in the same order, its
// loads in one round trip instead of one per chunk: lane c forms chunk c's sum (its 8 block sums in
// order, +0 past the end), then every lane folds the chunks in order from shuffles and returns the factor.
template <bool kL2 = false>  // as int_rms_factor's
__device__ __forceinline__ float int_rms_factor_blocks_warp(const float* wsq, int nb, int64_t k, float eps) {
    const int lane = threadIdx.x & 31, n_chunks = (nb + 7) / 8;
    float ss = 0.0f;
    for (int base = 0; base < n_chunks; base += 32) {
        const int c = base + lane;
        float sc = 0.0f;
        if (c < n_chunks) {
            float w[8];
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                if constexpr (kL2) w[i] = 8 * c + i < nb ? __ldcg(wsq + 8 * c + i) : 0.0f;
                else w[i] = 8 * c + i < nb ? wsq[8 * c + i] : 0.0f;
            }
            sc = w[0];
#pragma unroll
            for (int i = 1; i < 8; ++i) sc = __fadd_rn(sc, w[i]);
        }
        const int m = min(32, n_chunks - base);
        for (int j = 0; j < m; ++j) {
            const float v = __shfl_sync(kFullMask, sc, j);
            ss = base + j == 0 ? v : __fadd_rn(ss, v);
        }
    }
    return __frsqrt_rn(__fadd_rn(__fdiv_rn(ss, (float)k), eps));
}

// What an in-kernel quantizer reads: rows of x (x_stride floats apart), RMSNORM's norm weights, k,
// its blocks and chunks (= slices of 8 blocks), and the CTA's thread count.
struct IntActSrc {
    const float* x;
    int64_t x_stride, k;
    const float* norm;
    int nb, n_chunks, threads;
};

// Rows [r0, r0 + nr) of x quantized into shared memory by the pre-pass's
// per-element expressions; `lay` places them: lay.xq(r, e) the int8 value of
// element e of row r, lay.meta(r, b) block b's {bits of dx, sx}, lay.ssq(r) the
// row's RMSNORM ssq per chunk and lay.wsq(r) its per-block sums of squares
// (scratch, nb floats). Four lanes per block of 32 values (lane j of the four:
// values j, j+4, …, j+28), a whole warp there. RMSNORM's ssq keeps the
// pre-pass's reduction shape exactly: per block warp_sum's butterfly as lane 0
// sees it (steps 16, 8, 4 inside a lane's values, 2 and 1 across the four
// lanes, own value first), then per chunk the 8 block totals in order, +0 for
// the blocks past the end (block_sum over the chunk's 8 warps). Ends with a
// CTA barrier for RMSNORM (its ssq pass reads every warp's block sums); the
// caller orders the rest. kL2: x is read through L2 (__ldcg; int_act_value says why).
template <int kPro, class L, bool kL2 = false>
__device__ __forceinline__ void int_quant_rows(const IntActSrc& p, const L& lay, int64_t r0, int nr) {
    constexpr int kChunk = 8;  // blocks per chunk: the pre-pass's CTA (one block per warp)
    const int lane = threadIdx.x & 31, j = lane & 3;
    const int units = nr * p.nb;
    // Whole warps run every iteration (the shuffles need all 32 lanes); 8 blocks per warp.
    for (int base = (threadIdx.x >> 5) * 8; base < units; base += (p.threads >> 5) * 8) {
        const int u = base + (lane >> 2);
        const bool ok = u < units;
        const int r = ok ? u / p.nb : 0, b = ok ? u - r * p.nb : 0;
        const float* xr = p.x + (r0 + r) * p.x_stride;
        const float* aux = int_act_aux<kPro>(xr, p.norm, p.k);
        const int64_t e0 = (int64_t)32 * b + j;
        float xv[8], v[8];
        float amax = 0.0f;  // |v| >= +0: the max of the 32 values whatever the order
#pragma unroll
        for (int m = 0; m < 8; ++m) xv[m] = ok ? (kL2 ? __ldcg(xr + e0 + 4 * m) : xr[e0 + 4 * m]) : 0.0f;
#pragma unroll
        for (int m = 0; m < 8; ++m) {
            v[m] = ok ? int_act_value<kPro, kL2>(xv[m], aux, e0 + 4 * m) : 0.0f;
            amax = fmaxf(amax, int_act_abs(v[m]));
        }
        amax = fmaxf(amax, __shfl_xor_sync(kFullMask, amax, 1));
        amax = fmaxf(amax, __shfl_xor_sync(kFullMask, amax, 2));
        const float d = int_act_scale(amax);
        int sum = 0;
#pragma unroll
        for (int m = 0; m < 8; ++m) {
            const int q = int_act_quant(v[m], d);
            sum += q;
            if (ok) *lay.xq(r, (int)e0 + 4 * m) = (int8_t)q;
        }
        sum += __shfl_xor_sync(kFullMask, sum, 1);
        sum += __shfl_xor_sync(kFullMask, sum, 2);
        if (ok && j == 0) *lay.meta(r, b) = make_uint2(__float_as_uint(d), (uint32_t)sum);
        if (kPro == STRATA_PROLOGUE_RMSNORM) {
#pragma unroll
            for (int m = 0; m < 8; ++m) xv[m] = fmaf(xv[m], xv[m], 0.0f);
#pragma unroll
            for (int h = 4; h > 0; h >>= 1)  // butterfly steps 16, 8, 4: values 4 * h apart, same lane
#pragma unroll
                for (int m = 0; m < h; ++m) xv[m] = __fadd_rn(xv[m], xv[m + h]);
            float w = xv[0];
            w = __fadd_rn(w, __shfl_xor_sync(kFullMask, w, 2));
            w = __fadd_rn(w, __shfl_xor_sync(kFullMask, w, 1));
            if (ok && j == 0) lay.wsq(r)[b] = w;
        }
    }
    if (kPro == STRATA_PROLOGUE_RMSNORM) {
        __syncthreads();
        for (int u = threadIdx.x; u < nr * p.n_chunks; u += p.threads) {
            const int r = u / p.n_chunks, c = u - r * p.n_chunks;
            const float* ws = lay.wsq(r) + c * kChunk;
            float ss = ws[0];
            for (int i = 1; i < kChunk; ++i) ss = __fadd_rn(ss, c * kChunk + i < p.nb ? ws[i] : 0.0f);
            lay.ssq(r)[c] = ss;
        }
    }
}

}  // namespace cuda
}  // namespace strata

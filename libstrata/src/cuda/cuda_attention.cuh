// cuda_attention.cuh — the attention core shared by causal (KV cache) and
// dense (vision) attention: one 128-thread block computes one (query, head).
//
// Keys are visited in tiles of kAttnTile cells whose boundaries are fixed by
// the caller (absolute cell indices for the cache, segment-relative token
// indices for dense attention), so the work for a query never depends on what
// else is in the launch. Per tile, in this order:
//   1. scores: warp w scores cells 16w..16w+15 of the tile; a lane multiplies
//      its fixed slice of head dims in ascending order, the warp sums with the
//      xor butterfly, then × scale;
//   2. the tile max (exact), the running max, p_c = exp(s_c − max) per cell
//      and the rescale factor exp(old max − new max);
//   3. every thread rescales its running sum and its output dims, then adds
//      the tile's cells in ascending cell order (single FMA chain per dim).
// Cells past the end are never loaded (the cache may hold garbage there).
// The final output is acc / l. All of it is a function of the query, the key
// range and head_dim only: batch-invariant by construction.
#pragma once

#include "cuda_common.cuh"

namespace strata {
namespace cuda {

constexpr int kAttnTile = 64;  // key cells per tile
constexpr int kAttnThreads = 128;
constexpr int kAttnWarps = kAttnThreads / 32;
constexpr int kCellsPerWarp = kAttnTile / kAttnWarps;
constexpr int kMaxVPerThread = 4;  // output dims per thread: head_dim <= 512

struct AttnShared {
    float s[kAttnTile];
    float p[kAttnTile];
};

// Q: query values per lane (head dims covered = 32 * Q). KV supplies
//   static int dim(int lane, int s)              — head dim of lane slot s
//   void load_k(int64_t cell, int lane, float (&k)[Q])  — the lane's key slice
//   float load_v(int64_t cell, int d)
template <int Q, class KV>
__device__ __forceinline__ void attend(const KV& kv, const float* q, int hd, int64_t begin, int64_t end, float scale,
                                       float* out, AttnShared& sm) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const float kNegInf = __int_as_float(0xff800000);

    float qr[Q];
#pragma unroll
    for (int s = 0; s < Q; ++s) {
        const int d = KV::dim(lane, s);
        qr[s] = d < hd ? q[d] : 0.0f;
    }
    float m_run = kNegInf, l_run = 0.0f;
    float acc[kMaxVPerThread];
#pragma unroll
    for (int v = 0; v < kMaxVPerThread; ++v) acc[v] = 0.0f;

    for (int64_t t0 = begin; t0 < end; t0 += kAttnTile) {
        const int count = (int)min((int64_t)kAttnTile, end - t0);

        // 1. scores
        float part[kCellsPerWarp];
#pragma unroll
        for (int j = 0; j < kCellsPerWarp; ++j) {
            const int c = warp * kCellsPerWarp + j;
            part[j] = 0.0f;
            if (c < count) {
                float kr[Q];
                kv.load_k(t0 + c, lane, kr);
#pragma unroll
                for (int s = 0; s < Q; ++s)
                    if (KV::dim(lane, s) < hd) part[j] = fmaf(qr[s], kr[s], part[j]);
            }
        }
#pragma unroll
        for (int j = 0; j < kCellsPerWarp; ++j) {
            const int c = warp * kCellsPerWarp + j;
            const float dot = warp_sum(part[j]);
            if (lane == 0) sm.s[c] = c < count ? __fmul_rn(dot, scale) : kNegInf;
        }
        __syncthreads();

        // 2. softmax bookkeeping (every warp derives the same max)
        const float m_tile = warp_max(fmaxf(sm.s[lane], sm.s[lane + 32]));
        const float m_new = fmaxf(m_run, m_tile);
        const bool none = m_new == kNegInf;
        if (tid < kAttnTile) sm.p[tid] = none ? 0.0f : expf(__fsub_rn(sm.s[tid], m_new));
        const float corr = none ? 1.0f : expf(__fsub_rn(m_run, m_new));
        m_run = m_new;
        __syncthreads();

        // 3. rescale, then add this tile's cells in ascending order
        l_run = __fmul_rn(l_run, corr);
#pragma unroll
        for (int v = 0; v < kMaxVPerThread; ++v) acc[v] = __fmul_rn(acc[v], corr);
        for (int c = 0; c < count; ++c) {
            const float pc = sm.p[c];
            l_run = __fadd_rn(l_run, pc);
#pragma unroll
            for (int v = 0; v < kMaxVPerThread; ++v) {
                const int d = tid + kAttnThreads * v;
                if (d < hd) acc[v] = fmaf(pc, kv.load_v(t0 + c, d), acc[v]);
            }
        }
        // No barrier needed here: the next tile writes sm.s before its first
        // barrier and sm.p only after it, when every thread is done with sm.p.
    }

#pragma unroll
    for (int v = 0; v < kMaxVPerThread; ++v) {
        const int d = tid + kAttnThreads * v;
        if (d < hd) out[d] = l_run > 0.0f ? __fdiv_rn(acc[v], l_run) : 0.0f;
    }
}

}  // namespace cuda
}  // namespace strata

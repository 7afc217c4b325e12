// cuda_int_gemv.cu — the integer-exact matmul at 1 to 8 rows (decode), built
// to stream the weights at memory speed, computing per output element exactly
// the canonical arithmetic of cuda_int_matmul.cu (per block the exact integer
// product and int_block_fold's float steps, blocks ascending inside a slice of
// 8 from acc = 0, slice totals added in slice order, the same RMSNORM factor,
// bias and accumulate).
//
// Why a kernel of its own (docs/cuda_backend.md, "integer matmul"): the dot
// kernel gives each thread one slice per CTA, so its set-up, staging index
// arithmetic, barriers and shared-memory fold are paid per 8 blocks, and it
// stayed issue-bound at 37-55 % of DRAM bandwidth on the H200. Here:
//  - the grid is persistent (the CTAs that fit at once); warp w of the grid
//    takes work groups w, w + W, w + 2W, ... (W = all warps of the grid), a
//    group being u = 32 / S consecutive weight rows when a row has S <= 32
//    slices (k = 4096: 2 rows, k = 2048: 4, k = 576: 10), else one row walked
//    in chunks of 32 slices (k = 14336: 2 chunks);
//  - weights stream coalesced: a unit's bytes (u whole rows, or a chunk of a
//    row) are contiguous, and the warp copies them with cp.async 16-byte pieces,
//    consecutive lanes on consecutive pieces, from the 16-byte aligned address
//    at or below the first byte (so byte g lands at offset g & 15 of its window,
//    as the dot kernel's staging does), into one of two per-warp stages: the
//    next unit is in flight while this one is computed; only __syncwarp and
//    cp.async.wait_group, no CTA barrier in the loop;
//  - lane = slice: lane l computes slice l % ls of row l / ls of the unit from
//    the stage with compile-time offsets (load_block, cuda_int_slice.cuh: the
//    slice's phase 0/4/8/12, any other even phase through int_block_any; Q6_K
//    through Q6Src), one dp4a chain per block and row; 144- and 272-byte lane
//    strides make the 16-byte shared loads conflict free;
//  - activations once per CTA: the pre-pass's int8 values and block meta of all
//    rows go to shared memory at kernel start, slices padded to 272 / 72 bytes
//    so that lanes on consecutive slices hit distinct banks;
//  - the fold: each lane's slice partial (one float per row) goes to a per-warp
//    buffer; then one lane per (output, row) adds its unit's partials in slice
//    order (carrying the running total across a row's chunks), applies
//    RMSNORM's factor (computed once per CTA and row, the same expression),
//    bias and accumulate.
// Before pdl_wait() each warp issues the copies of its first two units (weights
// only, which no kernel writes, into the warp's own stages: early_gemv_stages).
// Which lane, warp or CTA computes an element and how many rows the launch has
// never change its operations (checked bit for bit by
// libstrata/cuda_emu/test_int_gemv.cpp and tests/kernels/test_int_gemv.py).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>
#include <string>

#include "cuda_int_act.cuh"
#include "cuda_int_blocks.cuh"
#include "cuda_int_gemv.cuh"
#include "cuda_int_kquant.cuh"
#include "cuda_int_q6k.cuh"
#include "cuda_int_slice.cuh"
#include "core/dtype.h"
#include "core/env_switch.h"
#include "cuda_kernels.cuh"
#include "cuda_mma.cuh"
#include "cuda_pdl.cuh"

namespace strata {
namespace cuda {
namespace {

constexpr int kGemvThreads = 256, kGemvMaxWarps = kGemvThreads / 32;  // warps per CTA: 1 to 8 (gemv_shape)
constexpr int kGemvStages = 2;        // per-warp weight stages (the next unit in flight while one is computed)
constexpr int kGemvXSlice = 272;      // shared bytes per slice of int8 activations (256 + 16: no bank conflicts)
constexpr int kGemvMSlice = 72;       // shared bytes per slice of block meta (64 + 8: no bank conflicts)

struct GemvParams : TileParams {  // the operands and sizes (cuda_int_tiles.cuh; n_row_tiles, n_tiles unused)
    // kFused (STRATA_INT_GEMV_FUSE): no pre-pass; each CTA quantizes the rows of x itself (x_stride
    // floats apart; RMSNORM's norm weights), into the same shared layout, plus RMSNORM's ssq per chunk
    // and per block (ssq_off: a_rows x (n_slices + nb) floats).
    const float* x;
    int64_t x_stride;
    const float* norm;
    int ssq_off;
    // The shape (gemv_shape): lanes per row in a unit (min(S, 32)), rows per group, chunks per row,
    // groups; shared memory: activations (a_rows rows of xrow + mrow bytes), then per warp the partials
    // (32 x kR floats) and kGemvStages stages of stage_bytes; warp_off / warp_bytes locate a warp's part.
    int ls, u, chunks;
    int64_t n_groups;
    int a_rows, xrow, mrow, warp_off, warp_bytes, stage_bytes, warps, ctas;
};

// Dynamic shared memory of a CTA.
inline int64_t gemv_smem(const GemvParams& p) { return p.warp_off + (int64_t)p.warps * p.warp_bytes; }

// Shared bytes of one weight stage: 32 slices and the bytes before the first in its 16-byte window.
inline int gemv_stage_bytes(int sb) { return (32 * sb + 16 + 15) / 16 * 16; }

// The shape for kr rows per thread (n_rows <= kr; `fused`: the kernel quantizes them itself): work
// groups, shared-memory layout and the
// persistent grid (as many CTAs as fit on `sms` SMs of `smem_sm` shared bytes each, at most one warp
// per group). False where the activations and two stages per warp do not fit in `smem_cta` bytes.
inline bool gemv_shape(GemvParams& p, int kr, int sb, int sms, int64_t smem_cta, int64_t smem_sm, bool fused) {
    const int S = p.n_slices;
    p.ls = std::min(S, 32);
    p.u = 32 / p.ls;
    p.chunks = (S + 31) / 32;
    p.n_groups = (p.n_out + p.u - 1) / p.u;
    p.a_rows = (int)std::min<int64_t>(kr, p.n_rows);
    p.xrow = S * kGemvXSlice;
    p.mrow = S * kGemvMSlice;
    p.stage_bytes = gemv_stage_bytes(sb);
    p.ssq_off = p.a_rows * (p.xrow + p.mrow) + 32;  // after RMSNORM's factor per row (8 floats)
    const int ssq_bytes = fused ? p.a_rows * (S + p.nb) * 4 : 0;
    p.warp_off = (p.ssq_off + ssq_bytes + 15) / 16 * 16;
    p.warp_bytes = 32 * kr * 4 + kGemvStages * p.stage_bytes;
    // Warps per CTA: the count (8 at most) that puts the most warps on an SM at once given the shared
    // memory (each CTA holds its own copy of the activations; the runtime reserves 1 KB per CTA), the
    // larger on a tie; fewer where there are fewer groups than that per SM (small matrices spread over
    // every SM). H200, Q4_0 at one row, k = 4096: 7 warps, 3 CTAs per SM (8 would fit only 2).
    const int cap = (int)std::max<int64_t>(1, std::min<int64_t>(kGemvMaxWarps, (p.n_groups + sms - 1) / sms));
    int best = 0, best_resident = 0;
    for (int w = cap; w >= 1; --w) {
        p.warps = w;
        const int64_t sm = gemv_smem(p);
        if (sm > smem_cta) continue;
        const int64_t resident = w * std::min<int64_t>(std::min<int64_t>(smem_sm / (sm + 1024), 32), 64 / w);
        if (resident > best_resident) best = w, best_resident = (int)resident;
    }
    if (best == 0) return false;
    p.warps = best;
    const int64_t smem = gemv_smem(p);
    const int64_t per_sm = std::max<int64_t>(1, std::min<int64_t>(smem_sm / (smem + 1024), 64 / p.warps));
    const int64_t need = (p.n_groups + p.warps - 1) / p.warps;
    p.ctas = (int)std::max<int64_t>(1, std::min<int64_t>(per_sm * sms, need));
    return true;
}

// A warp's walk over its work: group g (rows [g*u, g*u + u)), chunk c of it (S > 32: slices
// [32c, 32c + 32) of row g). Units follow each other chunk by chunk, then by a stride of all the
// grid's warps, so one warp runs every chunk of a row in order.
struct GemvUnit {
    int64_t g;
    int c;
    __device__ __forceinline__ void next(const GemvParams& p, int64_t stride) {
        if (++c == p.chunks) c = 0, g += stride;
    }
};

// The first byte of a unit's weights (its first row's slice 32c).
template <int kDtype>
__device__ __forceinline__ const uint8_t* gemv_unit_start(const GemvParams& p, const GemvUnit& t) {
    return p.w + t.g * p.u * p.w_row_bytes + (int64_t)t.c * 32 * kIntSliceBytes<kDtype>;
}

// Copies unit t's weight bytes into `stage` (cp.async, not committed): 16-byte pieces from the
// aligned address at or below its first byte, lane l on pieces l, l + 32, ...; nothing at or past
// w_end is read (zero-filled instead). Weights only: no kernel writes them, so it may run before
// pdl_wait().
template <int kDtype>
__device__ __forceinline__ void gemv_stage_unit(const GemvParams& p, uint8_t* stage, const GemvUnit& t, int lane) {
    constexpr int SB = kIntSliceBytes<kDtype>;
    const uint8_t* s = gemv_unit_start<kDtype>(p, t);
    const uint8_t* e = p.chunks > 1 ? p.w + t.g * p.w_row_bytes + min((int64_t)(t.c + 1) * 32 * SB, p.w_row_bytes)
                                    : p.w + min((t.g + 1) * p.u, p.n_out) * p.w_row_bytes;
    const uint8_t* a = s - (reinterpret_cast<uintptr_t>(s) & 15);
    const int np = (int)((e - a + 15) >> 4);
    const uint8_t* src = a + 16 * lane;
    uint8_t* dst = stage + 16 * lane;
    if (a + 16 * (int64_t)np <= p.w_end) {  // every unit but the weights' last: whole pieces, no clamp
        for (int pc = lane; pc < np; pc += 32, src += 512, dst += 512) cp_async16z(dst, src, 16);
    } else {
        for (int pc = lane; pc < np; pc += 32, src += 512, dst += 512) {
            const int64_t left = p.w_end - src;
            cp_async16z(dst, src, left >= 16 ? 16 : (left > 0 ? (int)left : 0));
        }
    }
}

// Before pdl_wait() (cuda_pdl.cuh): each warp's first kGemvStages units into its stages, one
// committed group each (an empty group where the warp has fewer units), so they stream in while the
// previous kernel drains. Reads only the weights and writes only the warp's own stages.
template <int kDtype, int kR>
__device__ __forceinline__ void early_gemv_stages(const GemvParams& p) {
    const int warp = (int)threadIdx.x >> 5, lane = (int)threadIdx.x & 31;
    const int64_t stride = (int64_t)gridDim.x * p.warps;
    uint8_t* stages = mma_smem() + p.warp_off + warp * p.warp_bytes + 32 * kR * 4;
    GemvUnit t{(int64_t)warp * gridDim.x + blockIdx.x, 0};
    for (int i = 0; i < kGemvStages; ++i) {
        if (t.g < p.n_groups) gemv_stage_unit<kDtype>(p, stages + i * p.stage_bytes, t, lane);
        cp_async_commit_group();
        t.next(p, stride);
    }
}

// Block kJ's dp4a chain and int_block_fold for each of the kR rows: xs / ms are the slice's
// activations and meta of row 0 in shared memory (rows xrow / mrow bytes apart).
template <int kDtype, int kR, int kJ>
__device__ __forceinline__ void gemv_rows(const IntBlock<kDtype>& wb, const uint8_t* xs, const uint8_t* ms, int xrow,
                                          int mrow, int nr, float (&acc)[kR]) {
#pragma unroll
    for (int r = 0; r < kR; ++r) {
        if (kR == 1 || r < nr) {
            const uint4* xp = reinterpret_cast<const uint4*>(xs + r * xrow + 32 * kJ);
            const uint4 xa = xp[0], xb = xp[1];
            const uint2 m = *reinterpret_cast<const uint2*>(ms + r * mrow + 8 * kJ);
            const int dot = int_block_dot<kDtype>(wb, xa, xb);
            acc[r] = int_block_fold<kDtype>(acc[r], wb.d, wb.m, dot, __uint_as_float(m.x), (int)m.y);
        }
    }
}

// Blocks kJ.. of one slice in order from the stage (kFull: all 8, no bounds checks). kC: the
// slice's phase in its 16-byte window (0, 4, 8, 12), or -1: any even phase (int_block_any), or
// Q6_K (Q6Src reads any 2-byte phase). `base` is the slice's first byte rounded down to 16.
template <int kDtype, int kR, int kC, int kJ, bool kFull>
__device__ __forceinline__ void gemv_blocks(const uint8_t* base, int delta, const uint8_t* xs, const uint8_t* ms,
                                            int xrow, int mrow, int nbs, int nr, float (&acc)[kR]) {
    if constexpr (kJ < kIntSliceBlocks) {
        if (kFull || kJ < nbs) {
            IntBlock<kDtype> wb;
            if constexpr (kDtype == STRATA_Q6_K) wb = int_block_q6k(Q6Src(base + delta), kJ);
            else if constexpr (kC >= 0) wb = load_block<kDtype, kC, kJ>(base);
            else if constexpr (kIntSuper<kDtype>) wb = int_kblock<kDtype, 2>(base + delta, kJ);
            else wb = int_block_any<kDtype>(base + delta + kJ * IntW<kDtype>::kBytes);
            gemv_rows<kDtype, kR, kJ>(wb, xs, ms, xrow, mrow, nr, acc);
        }
        gemv_blocks<kDtype, kR, kC, kJ + 1, kFull>(base, delta, xs, ms, xrow, mrow, nbs, nr, acc);
    }
}

template <int kDtype, int kR, int kC>
__device__ __forceinline__ void gemv_slice_at(const uint8_t* base, int delta, const uint8_t* xs, const uint8_t* ms,
                                              int xrow, int mrow, int nbs, int nr, float (&acc)[kR]) {
    if (nbs == kIntSliceBlocks) gemv_blocks<kDtype, kR, kC, 0, true>(base, delta, xs, ms, xrow, mrow, nbs, nr, acc);
    else gemv_blocks<kDtype, kR, kC, 0, false>(base, delta, xs, ms, xrow, mrow, nbs, nr, acc);
}

// The pre-pass's activations and meta of rows [0, a_rows) into shared memory, slices padded (the
// values are copies: no arithmetic), and RMSNORM's factor per row by the dot kernel's expression.
template <int kR>
__device__ __forceinline__ void gemv_load_acts(const GemvParams& p, uint8_t* smem) {
    uint8_t* ax = smem;
    uint8_t* am = smem + p.a_rows * p.xrow;
    float* rms = reinterpret_cast<float*>(am + p.a_rows * p.mrow);
    const int n2 = 2 * p.nb;
    for (int i = threadIdx.x; i < p.a_rows * n2; i += (int)blockDim.x) {
        const int r = i / n2, q = i - r * n2, b = q >> 1;
        *reinterpret_cast<uint4*>(ax + r * p.xrow + (b >> 3) * kGemvXSlice + (b & 7) * 32 + (q & 1) * 16) =
            __ldg(reinterpret_cast<const uint4*>(p.xq + r * p.k + 16 * q));
    }
    for (int i = threadIdx.x; i < p.a_rows * p.nb; i += (int)blockDim.x) {
        const int r = i / p.nb, b = i - r * p.nb;
        *reinterpret_cast<uint2*>(am + r * p.mrow + (b >> 3) * kGemvMSlice + (b & 7) * 8) = __ldg(p.meta + r * p.nbp + b);
    }
    if (p.prologue == STRATA_PROLOGUE_RMSNORM && (int)threadIdx.x < p.a_rows) {
        rms[threadIdx.x] = int_rms_factor(p.ssq + threadIdx.x * p.n_slices, p.n_slices, p.k, p.eps);
    }
}

// The shared layout of the activations for int_quant_rows (cuda_int_act.cuh): the same padded
// slices gemv_load_acts fills, RMSNORM's ssq per chunk and per block after them.
struct GemvActLayout {
    uint8_t* smem;
    int rows, xrow, mrow, ssq_off, n_slices, nb;
    __device__ __forceinline__ int8_t* xq(int r, int e) const {
        return reinterpret_cast<int8_t*>(smem + r * xrow + (e >> 8) * kGemvXSlice + (e & 255));
    }
    __device__ __forceinline__ uint2* meta(int r, int b) const {
        return reinterpret_cast<uint2*>(smem + rows * xrow + r * mrow + (b >> 3) * kGemvMSlice + (b & 7) * 8);
    }
    __device__ __forceinline__ float* ssq(int r) const { return reinterpret_cast<float*>(smem + ssq_off) + r * n_slices; }
    __device__ __forceinline__ float* wsq(int r) const {
        return reinterpret_cast<float*>(smem + ssq_off) + rows * n_slices + r * nb;
    }
};

// kFused: rows [0, a_rows) of x quantized into shared memory by this CTA (the pre-pass's bits), then
// RMSNORM's factor per row from the ssq it left, by the dot kernel's expression.
template <int kPro>
__device__ __forceinline__ void gemv_quant_acts(const GemvParams& p, uint8_t* smem) {
    const IntActSrc src{p.x, p.x_stride, p.k, p.norm, p.nb, p.n_slices, (int)blockDim.x};
    const GemvActLayout lay{smem, p.a_rows, p.xrow, p.mrow, p.ssq_off, p.n_slices, p.nb};
    int_quant_rows<kPro>(src, lay, 0, p.a_rows);
    if (kPro == STRATA_PROLOGUE_RMSNORM) {
        __syncthreads();  // every row's ssq per chunk written
        float* rms = reinterpret_cast<float*>(smem + p.a_rows * (p.xrow + p.mrow));
        if ((int)threadIdx.x < p.a_rows) rms[threadIdx.x] = int_rms_factor(lay.ssq(threadIdx.x), p.n_slices, p.k, p.eps);
    }
}

template <int kDtype, int kR, bool kFused>
__global__ void __launch_bounds__(kGemvThreads) int_gemv_kernel(const GemvParams p) {
    early_gemv_stages<kDtype, kR>(p);  // weights only, before the wait
    pdl_wait();
    pdl_launch_dependents();
    constexpr int SB = kIntSliceBytes<kDtype>;  // a multiple of 16 (Q6_K: 210, read through Q6Src)
    static_assert(SB % 16 == 0 || kDtype == STRATA_Q6_K, "a slice must span whole 16-byte windows");
    uint8_t* smem = mma_smem();
    if constexpr (kFused) {
        switch (p.prologue) {
        case STRATA_PROLOGUE_RMSNORM: gemv_quant_acts<STRATA_PROLOGUE_RMSNORM>(p, smem); break;
        case STRATA_PROLOGUE_SILU_MUL: gemv_quant_acts<STRATA_PROLOGUE_SILU_MUL>(p, smem); break;
        default: gemv_quant_acts<STRATA_PROLOGUE_NONE>(p, smem); break;
        }
    } else {
        gemv_load_acts<kR>(p, smem);
    }
    __syncthreads();  // the last CTA barrier: activations in place
    const int warp = (int)threadIdx.x >> 5, lane = (int)threadIdx.x & 31;
    const uint8_t* ax = smem;
    const uint8_t* am = smem + p.a_rows * p.xrow;
    const float* rms = reinterpret_cast<const float*>(am + p.a_rows * p.mrow);
    float* part = reinterpret_cast<float*>(smem + p.warp_off + warp * p.warp_bytes);  // [kR][32 lanes]
    uint8_t* stages = reinterpret_cast<uint8_t*>(part) + 32 * kR * 4;
    const int nr = p.a_rows;
    const int64_t stride = (int64_t)gridDim.x * p.warps;
    const int rl = lane / p.ls, ll = lane - rl * p.ls;  // this lane's row in a unit and slice in a chunk
    GemvUnit t{(int64_t)warp * gridDim.x + blockIdx.x, 0};  // the unit computed
    GemvUnit nx = t;                                        // the next unit to stage
    for (int i = 0; i < kGemvStages; ++i) nx.next(p, stride);
    float total = 0.0f;
    for (int i = 0; t.g < p.n_groups; ++i) {
        cp_async_wait_group<kGemvStages - 1>();
        __syncwarp();  // every lane's pieces of this stage have landed
        uint8_t* stage = stages + (i % kGemvStages) * p.stage_bytes;
        const int sl = t.c * 32 + ll;
        const int64_t o = t.g * p.u + rl;
        const int nsl = min(p.ls, p.n_slices - t.c * 32);  // slices of this chunk
        if (rl < p.u && o < p.n_out && ll < nsl) {
            const uint8_t* us = gemv_unit_start<kDtype>(p, t);
            const int64_t off = rl * p.w_row_bytes + (int64_t)ll * SB + (int64_t)(reinterpret_cast<uintptr_t>(us) & 15);
            const int delta = (int)(off & 15);
            const uint8_t* base = stage + (off - delta);
            const uint8_t* xs = ax + sl * kGemvXSlice;
            const uint8_t* ms = am + sl * kGemvMSlice;
            const int nbs = min(kIntSliceBlocks, p.nb - sl * kIntSliceBlocks);
            float acc[kR];
#pragma unroll
            for (int r = 0; r < kR; ++r) acc[r] = 0.0f;
            if constexpr (kDtype == STRATA_Q6_K) {
                gemv_blocks<kDtype, kR, 0, 0, true>(base, delta, xs, ms, p.xrow, p.mrow, nbs, nr, acc);
            } else {
                switch (delta) {
                case 0: gemv_slice_at<kDtype, kR, 0>(base, delta, xs, ms, p.xrow, p.mrow, nbs, nr, acc); break;
                case 4: gemv_slice_at<kDtype, kR, 4>(base, delta, xs, ms, p.xrow, p.mrow, nbs, nr, acc); break;
                case 8: gemv_slice_at<kDtype, kR, 8>(base, delta, xs, ms, p.xrow, p.mrow, nbs, nr, acc); break;
                case 12: gemv_slice_at<kDtype, kR, 12>(base, delta, xs, ms, p.xrow, p.mrow, nbs, nr, acc); break;
                default: gemv_slice_at<kDtype, kR, -1>(base, delta, xs, ms, p.xrow, p.mrow, nbs, nr, acc); break;
                }
            }
#pragma unroll
            for (int r = 0; r < kR; ++r) part[r * 32 + lane] = acc[r];
        }
        __syncwarp();  // partials written; the stage is free again
        if (nx.g < p.n_groups) gemv_stage_unit<kDtype>(p, stage, nx, lane);
        cp_async_commit_group();
        nx.next(p, stride);
        // Fold: lane e = (output e / kR, row e % kR) of the unit (and e + 32, ... where a unit has more than
        // 32 of them: chunked rows have u = 1, so a running total only ever lives in the first pass) adds
        // the unit's slice partials of its element in slice order.
        for (int e = lane; e < p.u * kR; e += 32) {
            const int fo = e / kR, fr = e % kR;
            const int64_t fout = t.g * p.u + fo;
            if (fr < nr && fout < p.n_out) {
                const float* pp = part + fr * 32 + fo * p.ls;  // this element's nsl slice partials, in order
                int s = 0;
                if ((p.ls & 3) == 0) {  // 16-byte aligned: four partials a load, still added one by one
                    for (; s + 4 <= nsl; s += 4) {
                        const float4 v = *reinterpret_cast<const float4*>(pp + s);
                        total = s == 0 && t.c == 0 ? v.x : __fadd_rn(total, v.x);
                        total = __fadd_rn(__fadd_rn(__fadd_rn(total, v.y), v.z), v.w);
                    }
                }
                for (; s < nsl; ++s) total = s == 0 && t.c == 0 ? pp[0] : __fadd_rn(total, pp[s]);
                if (t.c == p.chunks - 1) {
                    if (p.prologue == STRATA_PROLOGUE_RMSNORM) total = __fmul_rn(total, rms[fr]);
                    if (p.bias) total = __fadd_rn(total, __ldg(p.bias + fout));
                    float* yp = p.y + fr * p.y_stride + fout;
                    *yp = p.accumulate ? __fadd_rn(*yp, total) : total;
                }
            }
        }
        t.next(p, stride);
    }
    cp_async_wait_group<0>();  // no copy outlives the kernel (the trailing groups are empty)
}

}  // namespace

namespace {

constexpr int kGemvMaxDevices = 64;
constexpr int kGemvAuto = -1;
// STRATA_INT_GEMV unset or "auto": 2 to 8 rows of Q4_0 / Q8_0 on matrices of k >= 2048 and n_out >=
// 2048. On the H200 (2026-12-02, 8B Q4_0) it beat the other kernels at 4 rows (4 sequences 787 -> 929
// and 750 -> 853 tok/s in two runs), lost at the 135M model's k = 576 (4 sequences 2,601 -> 1,437),
// and at one row the final version lost to the dot kernel (8B tg128 373 against 382 tok/s), so one
// row stays on the dot kernel unless STRATA_INT_GEMV asks for it.
constexpr int kGemvAutoMinK = 2048, kGemvAutoMinOut = 2048;

// STRATA_INT_GEMV: "auto" (or unset, empty), or strictly "0" to "8".
int gemv_env_rows() {
    const char* env = std::getenv("STRATA_INT_GEMV");  // read per call: tests switch it within a process
    if (!env || !*env || std::strcmp(env, "auto") == 0) return kGemvAuto;
    if (env[0] >= '0' && env[0] <= '0' + kGemvMaxRows && env[1] == '\0') return env[0] - '0';
    fail(STRATA_ERR_INVALID_ARGUMENT, std::string("STRATA_INT_GEMV=") + env +
                                          ": expected auto (the default), 0 (off) or 1 to 8 (the memory-bound "
                                          "kernel for every matmul of 1 to N rows)");
}

// STRATA_INT_GEMV_FUSE, strictly "0" or "1" (unset or empty: 0).
bool gemv_env_fuse() {
    return env_switch("STRATA_INT_GEMV_FUSE", false,  // read per call, like STRATA_INT_GEMV
                      "0 (the activation pre-pass launch) or 1 (the gemv kernel quantizes its rows itself)");
}

// Whether STRATA_INT_MATMUL names a kernel to force (int_tiles_choice and int_rows_choice validate it).
bool matmul_env_forces() {
    const char* env = std::getenv("STRATA_INT_MATMUL");
    return env && (std::strcmp(env, "legacy") == 0 || std::strncmp(env, "rows", 4) == 0 ||
                   std::strncmp(env, "tiles", 5) == 0);
}

int gemv_slice_bytes(int32_t w_dtype) {
    switch (w_dtype) {
    case STRATA_Q4_0: return kIntSliceBytes<STRATA_Q4_0>;
    case STRATA_Q8_0: return kIntSliceBytes<STRATA_Q8_0>;
    case STRATA_Q4_1: return kIntSliceBytes<STRATA_Q4_1>;
    case STRATA_Q4_K: return kIntSliceBytes<STRATA_Q4_K>;
    case STRATA_Q6_K: return kIntSliceBytes<STRATA_Q6_K>;
    default: return 0;
    }
}

int kr_for_rows(int64_t n_rows) { return n_rows <= 1 ? 1 : (n_rows <= 2 ? 2 : (n_rows <= 4 ? 4 : 8)); }

using GemvKernel = void (*)(GemvParams);

template <int kDtype, bool kFused>
GemvKernel gemv_kernel_rows(int kr) {
    switch (kr) {
    case 1: return int_gemv_kernel<kDtype, 1, kFused>;
    case 2: return int_gemv_kernel<kDtype, 2, kFused>;
    case 4: return int_gemv_kernel<kDtype, 4, kFused>;
    default: return int_gemv_kernel<kDtype, 8, kFused>;
    }
}

template <int kDtype>
GemvKernel gemv_kernel_fuse(int kr, bool fused) {
    return fused ? gemv_kernel_rows<kDtype, true>(kr) : gemv_kernel_rows<kDtype, false>(kr);
}

// The weight types this kernel implements. Another block type joins with its IntW
// specialization (and int_kblock for super-blocks), a case here and in gemv_slice_bytes.
GemvKernel gemv_kernel_for(int32_t w_dtype, int kr, bool fused) {
    switch (w_dtype) {
    case STRATA_Q4_0: return gemv_kernel_fuse<STRATA_Q4_0>(kr, fused);
    case STRATA_Q8_0: return gemv_kernel_fuse<STRATA_Q8_0>(kr, fused);
    case STRATA_Q4_1: return gemv_kernel_fuse<STRATA_Q4_1>(kr, fused);
    case STRATA_Q4_K: return gemv_kernel_fuse<STRATA_Q4_K>(kr, fused);
    case STRATA_Q6_K: return gemv_kernel_fuse<STRATA_Q6_K>(kr, fused);
    default: return nullptr;
    }
}

struct GemvDevice {
    int sms = 0, smem_cta = 0, smem_sm = 0;
};

// The SM count and shared-memory limits of `dev`, and (once) the opt-in to the largest dynamic
// shared memory for every instance of the kernel.
GemvDevice gemv_device(int dev) {
    static std::once_flag once[kGemvMaxDevices];
    static GemvDevice info[kGemvMaxDevices];
    std::call_once(once[dev], [dev] {
        cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;  // host queries, not stream work
        (void)cudaThreadExchangeStreamCaptureMode(&mode);
        GemvDevice d;
        bool ok = cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess &&
                  cudaDeviceGetAttribute(&d.smem_cta, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) == cudaSuccess &&
                  cudaDeviceGetAttribute(&d.smem_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev) == cudaSuccess;
        const int32_t dts[5] = {STRATA_Q4_0, STRATA_Q8_0, STRATA_Q4_1, STRATA_Q4_K, STRATA_Q6_K};
        for (int32_t dt : dts)
            for (int kr : {1, 2, 4, 8})
                for (bool fused : {false, true})
                    if (ok)
                        ok = cudaFuncSetAttribute((const void*)gemv_kernel_for(dt, kr, fused),
                                                  cudaFuncAttributeMaxDynamicSharedMemorySize, d.smem_cta) == cudaSuccess;
        (void)cudaThreadExchangeStreamCaptureMode(&mode);
        if (!ok) {
            (void)cudaGetLastError();
            d = GemvDevice{};
        }
        info[dev] = d;
    });
    if (info[dev].sms <= 0) fail(STRATA_ERR_DEVICE, "cuda matmul: cannot read the device limits for the gemv kernel");
    return info[dev];
}

// CTAs of `fn` (warps x 32 threads, smem bytes) that fit on one SM at once, registers included: the
// runtime's answer, cached per (device, kernel, warps, smem) since the launcher runs per matmul; INT32_MAX (no
// limit beyond gemv_shape's) where the runtime cannot tell.
int gemv_resident(int dev, GemvKernel fn, int warps, int smem) {
    static std::mutex mu;
    static std::map<std::tuple<int, GemvKernel, int, int>, int> cache;
    std::lock_guard<std::mutex> lock(mu);
    const auto key = std::make_tuple(dev, fn, warps, smem);
    const auto it = cache.find(key);
    if (it != cache.end()) return it->second;
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;  // a host query, not stream work
    (void)cudaThreadExchangeStreamCaptureMode(&mode);
    int n = 0;
    const cudaError_t err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, (const void*)fn, 32 * warps, (size_t)smem);
    (void)cudaThreadExchangeStreamCaptureMode(&mode);
    if (err != cudaSuccess) (void)cudaGetLastError();
    const int r = err == cudaSuccess && n > 0 ? n : INT32_MAX;
    cache.emplace(key, r);
    return r;
}

// The parameters of matmul `a` up to the shape (no device query).
GemvParams gemv_params(const IntTilesArgs& a) {
    GemvParams p{};
    static_cast<TileParams&>(p) = tile_params(a);
    return p;
}

}  // namespace

int int_gemv_choice(int64_t n_rows, int64_t n_out, int64_t k, int32_t w_dtype, int64_t smem_cta) {
    int limit = gemv_env_rows();  // parsed first: a typo is refused whatever the shape
    const bool fused = gemv_env_fuse();
    if (limit == kGemvAuto) {  // the shapes, types and row counts where it measured faster (kGemvAutoMinK)
        limit = k >= kGemvAutoMinK && n_out >= kGemvAutoMinOut && (w_dtype == STRATA_Q4_0 || w_dtype == STRATA_Q8_0)
                    ? kGemvMaxRows
                    : 0;
        if (n_rows < 2) limit = 0;
    }
    if (limit == 0 || n_rows < 1 || n_rows > limit || n_out < 1 || k < 32 || k / 32 > INT32_MAX / 512) return 0;
    const int sb = gemv_slice_bytes(w_dtype);
    if (sb == 0 || matmul_env_forces()) return 0;
    const int kr = kr_for_rows(n_rows);
    GemvParams p{};
    p.n_rows = n_rows;
    p.n_out = n_out;
    p.k = k;
    p.nb = (int)(k / 32);
    p.n_slices = (p.nb + kIntSliceBlocks - 1) / kIntSliceBlocks;
    // Activations of all rows and two stages per warp must fit one CTA's shared memory (k up to
    // ~90k at one row and ~20k at 8 rows on the H200); larger shapes keep the other kernels.
    return gemv_shape(p, kr, sb, 1, smem_cta, smem_cta, fused) ? kr : 0;
}

bool int_gemv_fuse() { return gemv_env_fuse(); }

void launch_int_gemv(const IntTilesArgs& a, int kr, int dev, cudaStream_t stream, const float* x, int64_t x_stride,
                     const float* norm) {
    if (dev < 0 || dev >= kGemvMaxDevices) fail(STRATA_ERR_INTERNAL, "cuda matmul: device index out of range");
    const GemvDevice d = gemv_device(dev);
    GemvParams p = gemv_params(a);
    const bool fused = x != nullptr;
    p.x = x;
    p.x_stride = x_stride;
    p.norm = norm;
    const GemvKernel fn = gemv_kernel_for(a.w_dtype, kr, fused);
    if (!fn) fail(STRATA_ERR_INTERNAL, "cuda matmul: no integer gemv for dtype " + std::to_string(a.w_dtype));
    if (a.n_rows > kr || !gemv_shape(p, kr, gemv_slice_bytes(a.w_dtype), d.sms, d.smem_cta, d.smem_sm, fused))
        fail(STRATA_ERR_INTERNAL, "cuda matmul: integer gemv shape out of range");
    const int smem = (int)gemv_smem(p);
    p.ctas = (int)std::min<int64_t>(p.ctas, (int64_t)gemv_resident(dev, fn, p.warps, smem) * d.sms);
    launch_k(fn, (unsigned)p.ctas, 32 * p.warps, (size_t)smem, stream, p);
    check_launch(fused ? "matmul (integer, gemv, quantizing its rows)" : "matmul (integer, gemv)");
}

}  // namespace cuda
}  // namespace strata

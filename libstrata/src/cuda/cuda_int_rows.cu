// cuda_int_rows.cu — the integer-exact matmul at a few rows (decode of 2 to
// ~32 sequences): int8 tensor-core mma over weights streamed once, computing
// per output element exactly the canonical arithmetic of cuda_int_matmul.cu
// (per block the exact integer product and int_block_fold's float steps,
// blocks ascending inside a slice of 8, slice totals added in slice order,
// the same RMSNORM factor, bias and accumulate).
//
// Why a kernel of its own (docs/cuda_backend.md, "integer matmul"): at 2-16
// rows the weights are read once whatever the row count, so a matmul should
// cost about its one-row time. The older kernels did not get there: the dp4a
// 8-row tiles staged 8 rows of activations per 8 outputs (as many bytes as
// the weights, and shared memory for one CTA of 4 warps per SM) and paid 8
// dp4a per block and row; the int8 mma 8/16-row tiles needed 64-output CTAs
// (64 CTAs for a 4096-output matrix: half the SMs) and the 64-row tile kernel
// computes 64 rows whatever the count.
//
// Shape: a CTA of 8 warps owns NO = 16·mg outputs (mg = 1, 2 or 4: the least
// work on the busiest SM, rows_pick) x kR = 8·kNT rows, and walks k
// in parts of PS slices with kRowsStages parts in flight (cp.async; weights
// keep their 16-byte phase as in cuda_int_matmul.cu's staging; activations
// and block meta only for the live rows). A warp unit is (16 outputs, one
// slice): per block one A fragment (16 outputs x 32 weights) feeds kNT mma
// m16n8k32, so the weights come from shared memory once per block whatever
// the rows, and the 8 warps' units span mg output groups x PS slices, so a
// 4096-output matrix still gives every SM a CTA. Each unit's per-slice
// partials go through shared memory and are added in slice order by one
// thread per element (in registers across the parts).
//
// The 16-warp variant (STRATA_INT_ROWS_WARPS=16; docs/cuda_backend.md):
// one CTA of 512 threads per SM, always the longest parts that fit, and at
// 16 and 32 rows two warps per (16 outputs, slice) unit, each with half of
// its n-tiles (the A fragment read twice, the accumulators halved), so the
// SM has twice the warps on the same outputs where 8 warps were one CTA per
// SM with a unit each (ncu: latency-bound, no eligible warp half the time).
//
// Bytes per CTA and part (Q4_0, NO = 32, PS = 8, 4 live rows: down and q/o,
// one CTA per SM): 37 KB of weights from DRAM, 10 KB of activations + meta
// from L2; 3 parts of shared memory keep two in flight, ~74 KB per SM (an
// SM's share of 4.27 TB/s is ~32 GB/s; Little's law at ~1 µs latency:
// ~32 KB). Where an SM gets several CTAs the parts shrink so two fit. Per
// block and warp: 2 scale loads, 2 (Q8_0: 4) quant words, kNT x (2
// activation words, 1 mma, 2 meta loads, 4 folds of 3 float operations):
// one mma per 16 outputs x 8 rows x 32 values instead of 8 dp4a and an
// integer conversion per output and row.
//
// The integer I comes out of the mma as the float bits of 1.5·2^23 + I
// (the accumulator starts at those bits; |I| < 2^20), so one exact
// subtraction gives (float)I: the same value int_block_fold converts.
// Checked bit for bit against the host reference and the older kernels by
// libstrata/cuda_emu/test_int_rows.cpp, and on the device by
// tests/kernels/test_int_rows.py.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "cuda_int_act.cuh"
#include "cuda_int_blocks.cuh"
#include "cuda_int_mma.cuh"
#include "cuda_int_rows.cuh"
#include "core/dtype.h"
#include "core/env_switch.h"
#include "cuda_kernels.cuh"
#include "cuda_mma.cuh"
#include "cuda_pdl.cuh"

namespace strata {
namespace cuda {
namespace {

// Warps per CTA: 8 (two CTAs per SM where shared memory allows) or 16 (one CTA per SM, the 16 warps on
// the same outputs; STRATA_INT_ROWS_WARPS=16). Which one never changes a bit.
constexpr int kRowsWarps8 = 8, kRowsWarps16 = 16;
#ifndef STRATA_INT_ROWS_STAGES
#define STRATA_INT_ROWS_STAGES 3  // parts in shared memory at once (no stage count changes a bit)
#endif
constexpr int kRowsStages = STRATA_INT_ROWS_STAGES;
static_assert(kRowsStages >= 2, "the pipeline needs two stages");
constexpr uint32_t kRowsMagic = 0x4B400000u;  // 1.5·2^23: the mma's starting accumulator
constexpr float kRowsMagicF = 12582912.0f;

// Its own parameter struct, filled in launch_int_rows, rather than cuda_int_tiles.cuh's TileParams / tile_params()
// that the tile, wgmma and gemv kernels share: built on TileParams this kernel's register allocation moved
// (ptxas, 114-128 registers per variant), and its speed was timed on the H200 in this form. Share it once a
// device can re-time the change.
struct RowsParams {
    const int8_t* xq;
    const uint2* meta;
    const float* ssq;
    int64_t n_rows, k, n_out, w_row_bytes;
    int nb, nbp, n_slices;
    const uint8_t* w;
    const uint8_t* w_end;
    const float* bias;
    float* y;
    int64_t y_stride;  // elements between y rows (>= n_out)
    int accumulate, prologue;
    float eps;
    // The shape (rows_layout): mg groups of 16 outputs, ps slices per part, row strides of a
    // stage's weights / activations / meta, its bytes, where the partials and RMSNORM factors live.
    int mg, ps, n_parts, wstride, xstride, mstride, stage_bytes, part_off, rsq_off, n_row_tiles, n_tiles;
    // 1: the first tile's weights of parts [0, kRowsStages - 1) are requested before pdl_wait
    // (early_rows_weights; STRATA_INT_EARLY_STAGES); 0: every copy after it. 2: the emulator's negative
    // control (test_int_rows.cpp early): the tiles take those weights as requested, but none were.
    int early;
};

// 32 bits from a 2-byte aligned shared-memory address: the two aligned words around it, shifted.
// The aligned address is q minus an offset (not an integer round trip), so the compiler keeps
// the shared address space: LDS, not generic loads (the first H200 version had 44 generic loads).
__device__ __forceinline__ uint32_t rows_lds32(const uint8_t* q) {
    const int off = (int)(reinterpret_cast<uintptr_t>(q) & 2);
    const uint32_t* w = reinterpret_cast<const uint32_t*>(q - off);
    return __funnelshift_r(w[0], w[1], (uint32_t)off * 8);
}

// Four nibbles (0..15, one per byte) as the signed bytes q − 8 (exact): Q4_0's I straight from the mma.
__device__ __forceinline__ uint32_t rows_nib_minus8(uint32_t x) {
    return ((x | 0x80808080u) - 0x08080808u) ^ 0x80808080u;
}

// d = A·B + 1.5·2^23 as int32 bits over one 16x8x32 tile (A s8, or u8 for Q4_1's nibbles).
#ifdef STRATA_CUDA_EMU
template <bool kUnsignedA>
inline void rows_mma(int (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    mma_i8_16832<kUnsignedA>(d, a, b0, b1);
    for (int e = 0; e < 4; ++e) d[e] = (int)kRowsMagic + d[e];
}
#else
template <bool kUnsignedA>
__device__ __forceinline__ void rows_mma(int (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    if constexpr (kUnsignedA) {
        asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%10,%10,%10,%10};\n"
            : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(kRowsMagic));
    } else {
        asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%10,%10,%10,%10};\n"
            : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(kRowsMagic));
    }
}
#endif

// Stages part `part` of the tile into `slot`: weight rows [o0, o0 + no) (16-byte pieces from the
// aligned address at or below each row's first byte of the part, so byte s lands at offset (s & 15)
// of the row's window; nothing at or past w_end is read), then the int8 activations and block meta
// of the live rows [r0, r0 + nr) (16-byte aligned in the pre-pass scratch). The tile's other rows
// are not staged: an mma column depends on its own row only, and those columns are dropped.
// The weights and the activations are two functions so that a CTA's first weights can be requested
// before pdl_wait() (early_rows_weights); the commit after the activations covers both.
template <int kDtype, int kWarps>
__device__ __forceinline__ void rows_stage_weights(const RowsParams& p, uint8_t* slot, int part, int64_t o0, int no) {
    constexpr int B = IntW<kDtype>::kBytes;
    const int64_t b0 = (int64_t)part * p.ps * kIntSliceBlocks;
    const int nblk = (int)min((int64_t)p.ps * kIntSliceBlocks, p.nb - b0);
    const int len = nblk * B;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    // A warp per row (no division per piece: the pieces of a part are many, the rows few).
    for (int row = warp; row < no; row += kWarps) {
        const uint8_t* s = p.w + (o0 + row) * p.w_row_bytes + b0 * B;
        const uint8_t* a = s - (reinterpret_cast<uintptr_t>(s) & 15);
        const int np = (int)((s + len - a + 15) >> 4);
        for (int pc = lane; pc < np; pc += 32) {
            const uint8_t* src = a + 16 * pc;
            const int64_t left = p.w_end - src;
            cp_async16z(slot + row * p.wstride + 16 * pc, src, left >= 16 ? 16 : (left > 0 ? (int)left : 0));
        }
    }
}

template <int kDtype, int kR, int kWarps>
__device__ __forceinline__ void rows_stage_acts(const RowsParams& p, uint8_t* slot, int part, int64_t r0, int nr) {
    const int64_t b0 = (int64_t)part * p.ps * kIntSliceBlocks;
    const int nblk = (int)min((int64_t)p.ps * kIntSliceBlocks, p.nb - b0);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    uint8_t* xs = slot + 16 * p.mg * p.wstride;
    uint8_t* ms = xs + kR * p.xstride;
    const int xp = 2 * nblk, mp = (nblk + 1) / 2;  // 16-byte pieces per row
    for (int r = warp; r < nr; r += kWarps) {
        const int8_t* xg = p.xq + (r0 + r) * p.k + b0 * 32;
        const uint8_t* mg = reinterpret_cast<const uint8_t*>(p.meta + (r0 + r) * p.nbp + b0);
        for (int pc = lane; pc < xp + mp; pc += 32) {
            if (pc < xp) cp_async16z(xs + r * p.xstride + 16 * pc, xg + 16 * pc, 16);
            else cp_async16z(ms + r * p.mstride + 16 * (pc - xp), mg + 16 * (pc - xp), 16);
        }
    }
}

template <int kDtype, int kR, int kWarps>
__device__ __forceinline__ void rows_stage(const RowsParams& p, uint8_t* slot, int part, int64_t o0, int no,
                                           int64_t r0, int nr) {
    rows_stage_weights<kDtype, kWarps>(p, slot, part, o0, no);
    rows_stage_acts<kDtype, kR, kWarps>(p, slot, part, r0, nr);
}

// Before pdl_wait() (cuda_pdl.cuh), where p.early: the weights of parts [0, kRowsStages - 1) of the
// CTA's first tile into the slots the kernel stages them into, so they stream while the previous kernel
// drains. Reads only the weights, which no kernel writes, into this CTA's shared memory; the kernel
// stages those parts' activations after the wait.
template <int kDtype, int kWarps>
__device__ __forceinline__ void early_rows_weights(const RowsParams& p) {
    const int tile = (int)blockIdx.x;
    if (p.early != 1 || tile >= p.n_tiles) return;
    const int64_t o0 = (int64_t)(tile / p.n_row_tiles) * (16 * p.mg);
    const int no = (int)min((int64_t)(16 * p.mg), p.n_out - o0);
    for (int s = 0; s < kRowsStages - 1 && s < p.n_parts; ++s)
        rows_stage_weights<kDtype, kWarps>(p, mma_smem() + s * p.stage_bytes, s, o0, no);
}

// One warp unit: outputs [16·og, 16·og + 16) of the CTA x rows [8·n0, 8·n0 + 8·kNTU) of its kR =
// 8·kNT rows, slice s_l of the part in `st`; the slice's partial sums (blocks folded in order) are
// written to `pp` [NO][kR]. Every element's fold chain is one thread's, whatever kNTU.
template <int kDtype, int kNT, int kNTU, bool kFull>
__device__ __forceinline__ void rows_unit(const RowsParams& p, const uint8_t* st, int og, int s_l, int n0, int nbs,
                                          int64_t o0, int no, float* pp) {
    using W = IntW<kDtype>;
    constexpr int kR = 8 * kNT;
    constexpr int SB = kIntSliceBlocks * W::kBytes;
    constexpr bool kUnsignedA = W::kMin;  // Q4_1's nibbles stay 0..15; Q4_0 enters as q − 8, Q8_0 as is
    const int lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
    const int NO = 16 * p.mg;
    // Rows g and g+8 of the group: window + the row's 16-byte phase (rows past `no` were not staged:
    // their results are dropped).
    const uint8_t* wr[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int ol = og * 16 + g + 8 * h;
        const int ph = ol < no ? (int)(reinterpret_cast<uintptr_t>(p.w + (o0 + ol) * p.w_row_bytes) & 15) : 0;
        wr[h] = st + ol * p.wstride + ph + s_l * SB;
    }
    const uint8_t* xs = st + NO * p.wstride + s_l * kIntSliceBlocks * 32;
    const uint8_t* ms = st + NO * p.wstride + kR * p.xstride + s_l * kIntSliceBlocks * 8;
    xs += 8 * n0 * p.xstride;
    ms += 8 * n0 * p.mstride;
    float acc[kNTU][4];
#pragma unroll
    for (int n = 0; n < kNTU; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[n][e] = 0.0f;
    auto block = [&](const int j) {
        uint32_t a[4];
        float d[2], m[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const uint8_t* blk = wr[h] + j * W::kBytes;
            const uint16_t* hp = reinterpret_cast<const uint16_t*>(blk);
            d[h] = f16_to_f32(hp[0]);
            m[h] = W::kMin ? f16_to_f32(hp[1]) : 0.0f;
            if constexpr (W::kNibbles) {
                const uint32_t q = rows_lds32(blk + W::kQuantOff + 4 * tq);
                const uint32_t lo = q & 0x0F0F0F0Fu, hi = (q >> 4) & 0x0F0F0F0Fu;
                a[h] = W::kOffset8 ? rows_nib_minus8(lo) : lo;
                a[2 + h] = W::kOffset8 ? rows_nib_minus8(hi) : hi;
            } else {
                a[h] = rows_lds32(blk + W::kQuantOff + 4 * tq);
                a[2 + h] = rows_lds32(blk + W::kQuantOff + 16 + 4 * tq);
            }
        }
#pragma unroll
        for (int n = 0; n < kNTU; ++n) {
            // Activation rows 8(n0 + n) + g (the mma's column g): values 4tq.. and 16 + 4tq.. of block j.
            const uint8_t* xr = xs + (8 * n + g) * p.xstride + 32 * j;
            const uint32_t b0 = *reinterpret_cast<const uint32_t*>(xr + 4 * tq);
            const uint32_t b1 = *reinterpret_cast<const uint32_t*>(xr + 16 + 4 * tq);
            int c[4];
            rows_mma<kUnsignedA>(c, a, b0, b1);
            // This lane's elements: outputs g, g+8 x rows 8n + 2tq, 8n + 2tq + 1.
            const uint2 ma = *reinterpret_cast<const uint2*>(ms + (8 * n + 2 * tq) * p.mstride + 8 * j);
            const uint2 mb = *reinterpret_cast<const uint2*>(ms + (8 * n + 2 * tq + 1) * p.mstride + 8 * j);
            const float dx[2] = {__uint_as_float(ma.x), __uint_as_float(mb.x)};
            const int sx[2] = {(int)ma.y, (int)mb.y};
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                // int_block_fold with I exact: acc = fmaf(d·dx, I, acc) (Q4_1: then fmaf(m, dx·sx, acc)).
                const float I = __fsub_rn(__int_as_float(c[e]), kRowsMagicF);
                float v = fmaf(__fmul_rn(d[e >> 1], dx[e & 1]), I, acc[n][e]);
                if constexpr (W::kMin) v = fmaf(m[e >> 1], __fmul_rn(dx[e & 1], (float)sx[e & 1]), v);
                acc[n][e] = v;
            }
        }
    };
    if constexpr (kFull) {
#pragma unroll
        for (int j = 0; j < kIntSliceBlocks; ++j) block(j);
    } else {
        for (int j = 0; j < nbs; ++j) block(j);
    }
#pragma unroll
    for (int n = 0; n < kNTU; ++n) {
        const int ra = 8 * (n0 + n) + 2 * tq, ol0 = og * 16 + g;
        pp[ol0 * kR + ra] = acc[n][0];
        pp[ol0 * kR + ra + 1] = acc[n][1];
        pp[(ol0 + 8) * kR + ra] = acc[n][2];
        pp[(ol0 + 8) * kR + ra + 1] = acc[n][3];
    }
}

// kWarps 8: two CTAs per SM fit by registers (<= 128 each); 16: one CTA of 512 threads (<= 128 each).
template <int kDtype, int kNT, int kWarps>
__global__ void __launch_bounds__(32 * kWarps, kWarps == kRowsWarps16 ? 1 : 2) int_rows_kernel(const RowsParams p) {
    early_rows_weights<kDtype, kWarps>(p);  // weights only, before the wait (p.early)
    pdl_wait();
    pdl_launch_dependents();
    constexpr int kR = 8 * kNT, kThreads = 32 * kWarps;
    // N-tiles (8 rows each) per warp unit: all kNT at 8 warps; at 16 warps half of them (rows_split), so
    // two warps share a (16 outputs, slice) unit's rows and each keeps half the accumulators.
    constexpr int kNTU = kWarps == kRowsWarps16 && kNT > 1 ? kNT / 2 : kNT, kSplit = kNT / kNTU;
    constexpr int kE = 64 * kR / kThreads;  // fold elements per thread at the widest CTA (64 outputs)
    uint8_t* smem = mma_smem();
    float* part = reinterpret_cast<float*>(smem + p.part_off);  // [ps][NO][kR]
    float* rsq = reinterpret_cast<float*>(smem + p.rsq_off);    // [kR]
    const int t = threadIdx.x, warp = t >> 5;
    const int NO = 16 * p.mg, units = p.mg * p.ps * kSplit;
    for (int tile = blockIdx.x; tile < p.n_tiles; tile += gridDim.x) {
        // Row tiles of one output tile are neighbours: their CTAs share its weights in L2.
        const int rt = tile % p.n_row_tiles;
        const int64_t o0 = (int64_t)(tile / p.n_row_tiles) * NO;
        const int no = (int)min((int64_t)NO, p.n_out - o0);
        const int64_t r0 = (int64_t)rt * kR;
        const int nr = (int)min((int64_t)kR, p.n_rows - r0);
        // The first tile's first parts: their weights went before the wait where p.early.
        const bool early = p.early != 0 && tile == (int)blockIdx.x;
#pragma unroll
        for (int s = 0; s < kRowsStages - 1; ++s) {
            if (s < p.n_parts) {
                if (early) rows_stage_acts<kDtype, kR, kWarps>(p, smem + s * p.stage_bytes, s, r0, nr);
                else rows_stage<kDtype, kR, kWarps>(p, smem + s * p.stage_bytes, s, o0, no, r0, nr);
            }
            cp_async_commit_group();
        }
        if (p.prologue == STRATA_PROLOGUE_RMSNORM && t < nr)  // the row's factor, as every kernel computes it
            rsq[t] = int_rms_factor(p.ssq + (r0 + t) * p.n_slices, p.n_slices, p.k, p.eps);
        float tot[kE];
#pragma unroll
        for (int i = 0; i < kE; ++i) tot[i] = 0.0f;
        for (int q = 0; q < p.n_parts; ++q) {
            cp_async_wait_group<kRowsStages - 2>();
            __syncthreads();  // part q is in; every thread is done with part q − 1 (its slot and partials)
            {
                const int qn = q + kRowsStages - 1;
                if (qn < p.n_parts) rows_stage<kDtype, kR, kWarps>(p, smem + (qn % kRowsStages) * p.stage_bytes, qn, o0, no, r0, nr);
                cp_async_commit_group();
            }
            const uint8_t* st = smem + (q % kRowsStages) * p.stage_bytes;
            for (int u = warp; u < units; u += kWarps) {  // warp-uniform
                // Unit u: output group, then its n-tile share (neighbour warps read the same weights), then slice.
                const int og = u % p.mg, n0 = (u / p.mg) % kSplit * kNTU, s_l = u / (p.mg * kSplit), s = q * p.ps + s_l;
                if (s >= p.n_slices) continue;
                const int nbs = (int)min((int64_t)kIntSliceBlocks, p.nb - (int64_t)s * kIntSliceBlocks);
                float* pp = part + s_l * NO * kR;
                if (nbs == kIntSliceBlocks) rows_unit<kDtype, kNT, kNTU, true>(p, st, og, s_l, n0, nbs, o0, no, pp);
                else rows_unit<kDtype, kNT, kNTU, false>(p, st, og, s_l, n0, nbs, o0, no, pp);
            }
            __syncthreads();
            // Slice totals in slice order: element e = (output e / kR, row e % kR).
            const int nsl = min(p.ps, p.n_slices - q * p.ps);
#pragma unroll
            for (int i = 0; i < kE; ++i) {
                const int e = t + kThreads * i;
                if (e < NO * kR && e / kR < no && e % kR < nr) {
                    float v = tot[i];
                    for (int sl = 0; sl < nsl; ++sl) {
                        const float x = part[sl * NO * kR + e];
                        v = (q == 0 && sl == 0) ? x : __fadd_rn(v, x);
                    }
                    tot[i] = v;
                }
            }
        }
#pragma unroll
        for (int i = 0; i < kE; ++i) {
            const int e = t + kThreads * i;
            const int ol = e / kR, rl = e % kR;
            if (e < NO * kR && ol < no && rl < nr) {
                float v = tot[i];
                if (p.prologue == STRATA_PROLOGUE_RMSNORM) v = __fmul_rn(v, rsq[rl]);
                if (p.bias) v = __fadd_rn(v, __ldg(p.bias + o0 + ol));
                float* yp = p.y + (r0 + rl) * p.y_stride + o0 + ol;
                *yp = p.accumulate ? __fadd_rn(*yp, v) : v;
            }
        }
        __syncthreads();  // the next tile restages slot 0 and rewrites rsq
    }
}

// Warp units per (output group, slice) for kr rows and `warps` warps per CTA (int_rows_kernel's kSplit).
inline int rows_split(int kr, int warps) { return warps == kRowsWarps16 && kr > 8 ? 2 : 1; }

// The shared-memory layout for kr rows, mg output groups and `warps` warps per CTA (p.n_slices, p.nb
// set): the most slices per part (two warp units of 8 blocks per warp: 16 / mg at 8 warps, 32 / (mg ·
// split) at 16) whose kRowsStages parts, partials and RMSNORM factors fit in `budget` bytes, halved
// until they do. Returns the bytes (over budget only when one slice per part does not fit).
inline int64_t rows_layout(RowsParams& p, int kr, int mg, int block_bytes, int64_t budget, int warps = kRowsWarps8) {
    const int sb = kIntSliceBlocks * block_bytes;  // a multiple of 16
    int ps = std::max(1, std::min(2 * warps / (mg * rows_split(kr, warps)), p.n_slices));
    int64_t bytes = 0;
    for (;;) {
        int ws = ps * sb + 16;                           // the window of a row's part and its 16-byte phase
        if ((ws / 16) % 2 == 0) ws += 16;                 // an odd number of 16-byte windows: 8 rows, 8 bank groups
        p.mg = mg;
        p.ps = ps;
        p.wstride = ws;
        p.xstride = ps * kIntSliceBlocks * 32 + 16;       // rows 4 banks apart: the 8 rows of an n-tile, 8 bank groups
        p.mstride = ps * kIntSliceBlocks * 8 + 16;        // +16: the 4 row pairs a warp reads, 4 bank groups
        p.stage_bytes = 16 * mg * ws + kr * (p.xstride + p.mstride);
        p.part_off = kRowsStages * p.stage_bytes;
        p.rsq_off = p.part_off + ps * 16 * mg * kr * (int)sizeof(float);
        bytes = p.rsq_off + kr * (int64_t)sizeof(float);
        if (bytes <= budget || ps == 1) break;
        ps = (ps + 1) / 2;
    }
    p.n_parts = (p.n_slices + p.ps - 1) / p.ps;
    return bytes;
}

// Output groups per CTA: the mg (4, 2 or 1) with the least work on the busiest SM (waves of one CTA
// per SM x outputs per CTA: an SM's CTAs share its bandwidth); ties go to the wider CTA (fewer
// activation bytes staged per weight byte). Then the slices per part: where an SM gets several
// CTAs, parts small enough for two at once (16 warps hide each other's barriers and latency), else
// the longest parts (the most bytes in flight). `forced_mg` > 0 fixes the width
// (STRATA_INT_MATMUL=rows:NO). At 16 warps an SM holds one CTA (512 threads of up to 128 registers):
// always the longest parts. Returns mg, or 0 when no layout fits.
inline int rows_pick(RowsParams& p, int kr, int block_bytes, int sms, int64_t smem_optin, int64_t smem_sm,
                     int forced_mg, int warps = kRowsWarps8) {
    const int64_t n_rt = (p.n_rows + kr - 1) / kr;
    const int64_t n_sm = std::max(1, sms);
    int best = 0;
    int64_t best_cost = 0;
    for (int mg = 4; mg >= 1; mg /= 2) {
        if (forced_mg > 0 && mg != forced_mg) continue;
        RowsParams q = p;
        if (rows_layout(q, kr, mg, block_bytes, smem_optin, warps) > smem_optin) continue;
        const int64_t tiles = (p.n_out + 16 * mg - 1) / (16 * mg) * n_rt;
        const int64_t cost = (tiles + n_sm - 1) / n_sm * mg;
        if (best == 0 || cost < best_cost) best = mg, best_cost = cost;
    }
    if (best == 0) return 0;
    const int64_t tiles = (p.n_out + 16 * best - 1) / (16 * best) * n_rt;
    const int64_t per_sm = smem_sm > 0 ? smem_sm : smem_optin;
    const int64_t two = std::min(smem_optin, per_sm / 2 - 1024);  // 1 KB per CTA is the runtime's
    if (warps == kRowsWarps16 || tiles <= n_sm || rows_layout(p, kr, best, block_bytes, two, warps) > two)
        (void)rows_layout(p, kr, best, block_bytes, smem_optin, warps);
    p.n_row_tiles = (int)n_rt;
    p.n_tiles = (int)tiles;
    return best;
}

}  // namespace

namespace {

constexpr int kRowsMaxDevices = 64;
constexpr int64_t kRowsShortK = 1024;  // at most 4 slices: the tile kernel measured ~9 µs there (int_tiles_choice)
constexpr int64_t kRowsMaxAuto = 32;   // auto: 2 to 32 rows (one row tile of 8, 16 or 32)
constexpr int64_t kRowsMaxOut = 4096;  // auto: matrices of at most this many outputs

// STRATA_INT_MATMUL for this kernel: never (norows, legacy, tiles*); forced at every row count (rows,
// rows:NO; mg the forced width, 0 = rows_pick's); else auto's routing. Its A/B switches, each read per
// call and each its own variable (so they combine with STRATA_INT_MATMUL's routings in one run):
// STRATA_INT_ROWS_WARPS (8, the default, or 16: the warps per CTA wherever this kernel runs) and
// STRATA_INT_ROWS_WIDE (0, the default, or 1: auto also gives it matrices of more than kRowsMaxOut outputs).
struct RowsMode {
    bool never = false, forced = false, wide = false;
    int mg = 0, warps = 0;  // warps: 0 = STRATA_INT_ROWS_WARPS unset (launch_int_rows decides)
};

// auto's one wide case (H200, 2026-12-02 pm, bench/gpu_matmul.py, 8B Q4_0 at 16 rows): qkv's 6144
// outputs in 16-warp CTAs took 28.1 us against 55.1 for the 16-row int8 mma tiles, while gate_up
// (28672) and lm_head (49152) got slower (101 / 142 against 90 / 123 us), so only matrices of at most
// 8192 outputs, at the 9-16 rows measured, and with 16 warps unless STRATA_INT_ROWS_WARPS says otherwise.
inline bool rows_auto_wide(int64_t n_rows, int64_t n_out) {
    return n_out > kRowsMaxOut && n_out <= 2 * kRowsMaxOut && n_rows >= 9 && n_rows <= 16;
}

RowsMode rows_mode() {
    RowsMode m;
    static const char* const kWarps[2] = {"8", "16"};
    const int w = env_choice("STRATA_INT_ROWS_WARPS", kWarps, "8 (the default) or 16 (warps per few-row CTA)");
    m.warps = w < 0 ? 0 : (w == 1 ? kRowsWarps16 : kRowsWarps8);
    m.wide = env_switch("STRATA_INT_ROWS_WIDE", false,
                        "0 (the default) or 1 (the few-row kernel also on matrices of more than 4096 outputs)");
    const char* env = std::getenv("STRATA_INT_MATMUL");  // read per call: tests switch it within a process
    if (!env || !*env || std::strcmp(env, "auto") == 0 || std::strncmp(env, "auto:", 5) == 0)
        return m;  // auto:v1 ... auto:vN choose the tile kernel's routing only (int_tiles_choice)
    if (std::strcmp(env, "rows") == 0) m.forced = true;
    else if (std::strcmp(env, "rows:16") == 0) m.forced = true, m.mg = 1;
    else if (std::strcmp(env, "rows:32") == 0) m.forced = true, m.mg = 2;
    else if (std::strcmp(env, "rows:64") == 0) m.forced = true, m.mg = 4;
    else if (std::strcmp(env, "norows") == 0 || std::strcmp(env, "legacy") == 0 || std::strncmp(env, "tiles", 5) == 0)
        m.never = true;
    else  // a typo must not time the wrong kernel (int_tiles_choice, called first, names the choices too)
        fail(STRATA_ERR_INVALID_ARGUMENT,
             std::string("STRATA_INT_MATMUL=") + env +
                 ": expected auto, tiles, auto:v1 ... auto:v10, tiles:v1 ... tiles:v10, rows, rows:16, rows:32, rows:64, norows or legacy");
    return m;
}

int rows_for(int64_t n_rows) { return n_rows <= 8 ? 8 : (n_rows <= 16 ? 16 : 32); }

template <int kDtype, int kNT, int kWarps>
const void* rows_kernel_ptr() {
    return (const void*)int_rows_kernel<kDtype, kNT, kWarps>;
}

struct RowsLimits {
    int sms = 0, smem_optin = 0, smem_sm = 0;
    cudaError_t err = cudaSuccess;
};

// Once per device: the SM count, shared-memory limits and the kernels' dynamic shared memory above 48 KB.
const RowsLimits& rows_init(int dev) {
    static std::once_flag once[kRowsMaxDevices];
    static RowsLimits lim[kRowsMaxDevices];
    std::call_once(once[dev], [dev] {
        RowsLimits& l = lim[dev];
        l.err = cudaDeviceGetAttribute(&l.sms, cudaDevAttrMultiProcessorCount, dev);
        if (l.err == cudaSuccess) l.err = cudaDeviceGetAttribute(&l.smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
        if (l.err == cudaSuccess) l.err = cudaDeviceGetAttribute(&l.smem_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev);
        cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;  // a function attribute, not stream work
        (void)cudaThreadExchangeStreamCaptureMode(&mode);
        const void* kernels[] = {
            rows_kernel_ptr<STRATA_Q4_0, 1, kRowsWarps8>(),  rows_kernel_ptr<STRATA_Q4_0, 2, kRowsWarps8>(),
            rows_kernel_ptr<STRATA_Q4_0, 4, kRowsWarps8>(),  rows_kernel_ptr<STRATA_Q8_0, 1, kRowsWarps8>(),
            rows_kernel_ptr<STRATA_Q8_0, 2, kRowsWarps8>(),  rows_kernel_ptr<STRATA_Q8_0, 4, kRowsWarps8>(),
            rows_kernel_ptr<STRATA_Q4_1, 1, kRowsWarps8>(),  rows_kernel_ptr<STRATA_Q4_1, 2, kRowsWarps8>(),
            rows_kernel_ptr<STRATA_Q4_1, 4, kRowsWarps8>(),  rows_kernel_ptr<STRATA_Q4_0, 1, kRowsWarps16>(),
            rows_kernel_ptr<STRATA_Q4_0, 2, kRowsWarps16>(), rows_kernel_ptr<STRATA_Q4_0, 4, kRowsWarps16>(),
            rows_kernel_ptr<STRATA_Q8_0, 1, kRowsWarps16>(), rows_kernel_ptr<STRATA_Q8_0, 2, kRowsWarps16>(),
            rows_kernel_ptr<STRATA_Q8_0, 4, kRowsWarps16>(), rows_kernel_ptr<STRATA_Q4_1, 1, kRowsWarps16>(),
            rows_kernel_ptr<STRATA_Q4_1, 2, kRowsWarps16>(), rows_kernel_ptr<STRATA_Q4_1, 4, kRowsWarps16>()};
        for (const void* f : kernels)
            if (l.err == cudaSuccess)
                l.err = cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, l.smem_optin);
        (void)cudaThreadExchangeStreamCaptureMode(&mode);
    });
    check(lim[dev].err, "cudaFuncSetAttribute (integer few-row matmul)");
    return lim[dev];
}

template <int kDtype, int kWarps>
void launch_rows_warps(const RowsParams& p, int kr, int smem, cudaStream_t stream) {
    const unsigned grid = (unsigned)p.n_tiles;
    switch (kr) {
    case 8: launch_k(int_rows_kernel<kDtype, 1, kWarps>, grid, 32 * kWarps, smem, stream, p); break;
    case 16: launch_k(int_rows_kernel<kDtype, 2, kWarps>, grid, 32 * kWarps, smem, stream, p); break;
    default: launch_k(int_rows_kernel<kDtype, 4, kWarps>, grid, 32 * kWarps, smem, stream, p); break;
    }
}

template <int kDtype>
void launch_rows_dtype(const RowsParams& p, int kr, int smem, cudaStream_t stream, int warps) {
    if (warps == kRowsWarps16) launch_rows_warps<kDtype, kRowsWarps16>(p, kr, smem, stream);
    else launch_rows_warps<kDtype, kRowsWarps8>(p, kr, smem, stream);
}

}  // namespace

int int_rows_choice(int64_t n_rows, int64_t n_out, int64_t k, int32_t w_dtype) {
    const RowsMode m = rows_mode();
    if (m.never) return 0;
    // The block formats this kernel implements (types added to the integer path later take the others).
    if (w_dtype != STRATA_Q4_0 && w_dtype != STRATA_Q8_0 && w_dtype != STRATA_Q4_1) return 0;
    if (m.forced) return rows_for(n_rows);
    // auto: 2 to 32 rows (the older kernels cost 2-5x the one-row time there at 8B shapes) on matrices
    // of at most 4096 outputs, except at short k, where the tile kernel is already near its one-row
    // time. H200, 8B Q4_0 (docs/cuda_backend.md): this kernel streams ~1.1 TB/s at every shape, so it
    // wins where the older kernels' CTAs are few or heavy (q/o, k/v, down: 1.3-4x at 2-32 rows) and
    // loses on wide matrices, where their int8 mma tiles already stream as fast (qkv 6144, gate_up,
    // lm_head).
    // Wider matrices: 4097-8192 outputs at 9-16 rows (rows_auto_wide, measured), every one with
    // STRATA_INT_ROWS_WIDE=1 (A/B: gate_up and lm_head lost at 16 rows).
    if (n_rows < 2 || n_rows > kRowsMaxAuto || k <= kRowsShortK ||
        (n_out > kRowsMaxOut && !m.wide && !rows_auto_wide(n_rows, n_out)))
        return 0;
    return rows_for(n_rows);
}

void launch_int_rows(const IntTilesArgs& a, int kr, int dev, cudaStream_t stream, bool early_stages) {
    if (dev < 0 || dev >= kRowsMaxDevices) fail(STRATA_ERR_INTERNAL, "cuda matmul: device index out of range");
    const RowsLimits& lim = rows_init(dev);
    RowsParams p{};
    p.xq = a.xq;
    p.meta = a.meta;
    p.ssq = a.ssq;
    p.n_rows = a.n_rows;
    p.k = a.k;
    p.n_out = a.n_out;
    p.w_row_bytes = dtype_row_bytes(a.w_dtype, a.k);
    p.nb = (int)(a.k / 32);
    p.nbp = a.nbp;
    p.n_slices = (p.nb + kIntSliceBlocks - 1) / kIntSliceBlocks;
    p.w = static_cast<const uint8_t*>(a.w);
    p.w_end = p.w + a.n_out * p.w_row_bytes;
    p.bias = a.bias;
    p.y = a.y;
    p.y_stride = a.y_row_stride > 0 ? a.y_row_stride : a.n_out;
    p.accumulate = a.accumulate ? 1 : 0;
    p.prologue = a.prologue;
    p.eps = a.eps;
    const int bb = a.w_dtype == STRATA_Q4_0 ? IntW<STRATA_Q4_0>::kBytes
                 : a.w_dtype == STRATA_Q8_0 ? IntW<STRATA_Q8_0>::kBytes
                                            : IntW<STRATA_Q4_1>::kBytes;
    const int64_t n_rt = (a.n_rows + kr - 1) / kr;
    if (n_rt * ((a.n_out + 15) / 16) > INT32_MAX) fail(STRATA_ERR_INTERNAL, "cuda matmul: integer few-row path has too many tiles");
    const RowsMode m = rows_mode();
    // STRATA_INT_ROWS_WARPS when set; else 16 for auto's wide case (rows_auto_wide), 8 elsewhere.
    const int warps = m.warps ? m.warps
                    : (!m.forced && !m.wide && rows_auto_wide(a.n_rows, a.n_out) ? kRowsWarps16 : kRowsWarps8);
    if (rows_pick(p, kr, bb, lim.sms, lim.smem_optin, lim.smem_sm, m.mg, warps) == 0)
        fail(STRATA_ERR_INTERNAL, "cuda matmul: integer few-row tile exceeds shared memory");
    const int smem = (int)(p.rsq_off + kr * (int)sizeof(float));
    p.early = early_stages ? 1 : 0;
    switch (a.w_dtype) {
    case STRATA_Q4_0: launch_rows_dtype<STRATA_Q4_0>(p, kr, smem, stream, warps); break;
    case STRATA_Q8_0: launch_rows_dtype<STRATA_Q8_0>(p, kr, smem, stream, warps); break;
    case STRATA_Q4_1: launch_rows_dtype<STRATA_Q4_1>(p, kr, smem, stream, warps); break;
    default: fail(STRATA_ERR_INTERNAL, "cuda matmul: no integer few-row path for dtype " + std::to_string(a.w_dtype));
    }
    check_launch("matmul (integer, few rows)");
}

}  // namespace cuda
}  // namespace strata

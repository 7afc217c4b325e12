// cuda_int_mma_tiles.cu — the many-row integer-exact matmul (prompts, wide
// decode batches): large int8 tensor-core tiles that compute, per output
// element, exactly the canonical arithmetic of cuda_int_matmul.cu (per block
// the exact integer product, int_block_fold's float steps, blocks ascending
// inside a slice of 8, slice totals added in slice order, the same epilogue).
//
// Shape: a CTA of W warps owns NO outputs x R rows (8 warps x 64 rows with NO
// = 128, 64 or 32; 16 warps x 128 rows with NO = 128; 8 warps x 16 or 32 rows
// with NO = 128, every warp on all the rows), a warp kWM-major owns
// 16·kMT outputs x 8·kNT rows, so each A fragment (16 outputs x one 32-value
// block) feeds kNT mma and each B fragment kMT. K is walked one slice (8
// blocks) per pipeline stage with cp.async, kStages slices in shared memory
// at once (a depth code picks it per launch: 2; the most that keep 2 CTAs per
// SM; the most that fit one CTA per SM — launches with at most one CTA per SM
// are latency-bound with one slice in flight, so they keep several), handed
// from the staging threads to the reading warps on mbarriers, a full and an
// empty one per slot, instead of a CTA barrier per slice; the
// weights' raw bytes keep their 16-byte phase (as in cuda_int_matmul.cu's
// staging), the int8 activations are read with ldmatrix from rows 17 x 16
// bytes apart (no bank conflicts), and each warp copies the dx (and Q4_1's
// dx·sx) of its rows into a [block][row] table so a lane gets the two it needs
// with one 8-byte load. Where every weight row starts 4-byte aligned (k a
// multiple of 64: every shape of the 8B and 1B models), the block loop is
// unrolled by pairs and reads each quant word at a compile-time offset (the
// per-mma instruction table: docs/cuda_backend.md). None of the shape,
// row-tile, depth or loop choices changes a bit: each lane runs the same
// per-element sequence below (the kOffsetC variants take Q4_0's −8·sx out of
// I in the float subtraction below instead of the nibbles: TileLayout).
//
// Why the bits are the same as the other kernels': the block integer I is
// exact however it is formed. Q4_0's nibbles enter the mma as q − 8 (s8), so
// the mma yields I = Σ(q−8)·xq itself instead of Σq·xq − 8·sx — the same
// integer. The accumulator starts at the bits of 1.5·2^23, so the mma returns
// the float 12582912 + I (|I| < 2^20) and one exact subtraction gives
// (float)I without a slow integer conversion. Then every lane runs, per
// element, fmaf(d·dx, I, acc) (Q4_1: then fmaf(m, dx·sx, acc)) over the blocks
// of a slice in order, and adds the slice totals in order, in registers.
// Checked bit for bit against the host reference and the older kernels by
// libstrata/cuda_emu/test_int_tiles.cpp, and on the device by
// tests/kernels/test_int_tiles.py. Q6_K (two scales per block of 32) runs two
// mmas per block, one per 16-value half, and converts sc0·I0 + sc1·I1 with cvt
// (q6k_tile_block, cuda_int_q6k.cuh): the magic number is exact only below 2^22.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <type_traits>

#include "cuda_int_act.cuh"
#include "cuda_int_blocks.cuh"
#include "cuda_int_kquant.cuh"
#include "cuda_int_mma.cuh"
#include "cuda_int_q6k.cuh"
#include "cuda_int_tiles.cuh"
#include "cuda_int_tiles_route.cuh"
#include "core/dtype.h"
#include "core/env_switch.h"
#include "cuda_kernels.cuh"
#include "cuda_mma.cuh"
#include "cuda_pdl.cuh"

namespace strata {
namespace cuda {
namespace {

// Tuning knobs (scripts/gpu_variants.sh rebuilds this file with -D overrides; no knob changes a bit).
#ifndef STRATA_INT_TILES_STAGES
#define STRATA_INT_TILES_STAGES 2  // depth 0's stages: 2 keep 2 CTAs per SM for the Q4_0 128-output tile
#endif
#ifndef STRATA_INT_TILES_MAX_STAGES
#define STRATA_INT_TILES_MAX_STAGES 6  // deeper pipelines (depth 1 and 2) stop here
#endif
#ifndef STRATA_INT_TILES_UNROLL
#define STRATA_INT_TILES_UNROLL 1  // blocks of a full slice the widest tile may overlap (registers vs latency)
#endif
// STRATA_INT_TILES_MIN_BLOCKS: CTAs per SM the registers must allow at depth 0 and 1 (default: 2
// where the shared memory allows 2, i.e. at most 128 registers per thread; else 1; depth 2: 1).
#ifndef STRATA_INT_TILES_UNROLL_AL
#define STRATA_INT_TILES_UNROLL_AL 0  // block pairs of a full aligned slice unrolled (0: half the blocks of ..._UNROLL's choice)
#endif
#ifndef STRATA_INT_TILES_INTERIOR
#define STRATA_INT_TILES_INTERIOR 1  // interior tiles' whole slices staged without bounds (0: every slice checked)
#endif
#ifndef STRATA_INT_TILES_MBAR
#define STRATA_INT_TILES_MBAR 1  // slices handed over on mbarriers (0: one CTA barrier per slice)
#endif
// mbarrier form: the block pair of an aligned whole slice before which the next slice is staged, for
// the 32-output tiles (_NARROW) and the wider ones (measured: bench/RESULTS.md, 2026-12-04 night).
#ifndef STRATA_INT_TILES_STAGE_AT
#define STRATA_INT_TILES_STAGE_AT 0
#endif
#ifndef STRATA_INT_TILES_STAGE_AT_NARROW
#define STRATA_INT_TILES_STAGE_AT_NARROW 1
#endif
#ifndef STRATA_INT_TILES_MIN_ROWS
#define STRATA_INT_TILES_MIN_ROWS 64
#endif
constexpr int kTileUnroll = STRATA_INT_TILES_UNROLL;
static_assert(STRATA_INT_TILES_STAGES >= 2 && STRATA_INT_TILES_MAX_STAGES >= 2, "the pipeline needs two stages");
static_assert(STRATA_INT_TILES_STAGE_AT >= 0 && 2 * STRATA_INT_TILES_STAGE_AT < 8, "a block pair of the slice");
static_assert(STRATA_INT_TILES_STAGE_AT_NARROW >= 0 && 2 * STRATA_INT_TILES_STAGE_AT_NARROW < 8, "a block pair of the slice");
constexpr int kSmemSM = 228 * 1024, kSmemCTA = 227 * 1024, kSmemRuntime = 1024;  // sm_90: per SM, per CTA, the runtime's per CTA
constexpr uint32_t kMagic = 0x4B400000u;  // 1.5·2^23: the mma's starting accumulator
#ifdef STRATA_CUDA_EMU
inline bool g_emu_ksplit_negative = false;  // test_int_tiles' negative control of the K split (emulator builds)
inline int g_emu_idle_slack = 0;            // ... and of the idle warps: > 0 also idles warps with that many live rows
#endif
constexpr float kMagicF = 12582912.0f;

// The shapes and choice codes: cuda_int_tiles_route.cuh.
using tile_route::kShapes;
using tile_route::kPlain;
using tile_route::kOffsetEnd;
using tile_route::shape_no;
using tile_route::shape_rows;
using tile_route::few_shape;
using tile_route::choice_of;
using tile_route::ksplit_choice;
using tile_route::choice_shape;
using tile_route::tiles_of;
constexpr bool kHasKSplit = STRATA_INT_TILES_MBAR != 0;  // the split needs the mbarrier hand-off
constexpr int kChoices = kOffsetEnd + (kHasKSplit ? 4 : 0);
static_assert(tile_route::kSliceValues == 32 * kIntSliceBlocks, "the routing's slice");

// The shared-memory layout of one tile shape, pipeline depth and inner loop (all offsets 16-byte
// aligned). kDepth 0: STRATA_INT_TILES_STAGES stages; 1: the most (up to STRATA_INT_TILES_MAX_STAGES)
// that keep 2 CTAs per SM; 2: the most that fit one CTA per SM (registers then allow one CTA too).
// kOffsetC: Q4_0's −8·sx in the subtraction that yields I (kOffsetInC below).
// kGroups 2 (the K split, "The K split" in docs/cuda_backend.md): the CTA runs two groups of kWarps
// warps on the same tile, group g on the slices s with s % 2 == g, each with its own stage ring; kThreads
// is one group's threads (the staging's), kCtaThreads the CTA's.
template <int kDtype, int kWM, int kMT, int kNT, int kWarps = 8, int kDepth = 0, bool kOffsetC = false, int kGroups = 1>
struct TileLayout {
    static_assert(kGroups == 1 || (kGroups == 2 && kWarps == 8), "one group, or two of 8 warps on alternate slices");
    static constexpr int kThreads = 32 * kWarps;
    static constexpr int kCtaThreads = kThreads * kGroups;
    static constexpr int kNO = kWM * 16 * kMT;                 // outputs per CTA
    static constexpr int kRW = 8 * kNT;                        // rows per warp
    static constexpr int kRows = (kWarps / kWM) * kRW;         // rows per CTA
    static_assert(kWarps % kWM == 0 && kThreads >= kRows, "warps cover the rows; a thread per row's factor");
    static_assert(kNT % 2 == 0, "B fragments come two n-tiles per ldmatrix");
    static constexpr int kSB = kIntSliceBytes<kDtype>;  // slice bytes of a weight row (Q6_K: 210)
    static constexpr int kWP = kSB / 16 + 1;                    // 16-byte pieces of a row's window
    static constexpr int kWS = 16 * (kWP % 2 ? kWP : kWP + 1);  // odd multiple of 16: 8 rows hit 8 bank groups
    static constexpr int kWSlots = kWP <= 16 ? 16 : 32;         // the staging's pieces per row (a power of 2)
    static_assert(kWP <= 32 && kThreads % kWSlots == 0, "weight staging: pieces per row");
    static constexpr int kXS = 16 * (2 * kIntSliceBlocks + 1);  // an activation row: 256 bytes + 16
    static constexpr int kMS = 8 * kIntSliceBlocks;             // a meta row: 8 uint2
    static constexpr int kXOff = kNO * kWS, kMOff = kXOff + kRows * kXS;
    static constexpr int kStage = kMOff + kRows * kMS;
    static constexpr int kDS = kRW + 4;                        // dx table row (per block): 8 blocks x 4 rows per warp store
    // Q4_0 with kOffsetC: the nibbles enter the mma unsigned (0..15, no q − 8 per word), the mma
    // returns the float 12582912 + Σq·xq, and the exact subtraction that yields I subtracts the
    // row's 12582912 + 8·sx (an integer below 2^24: exact in float) instead of 12582912, so
    // I = Σq·xq − 8·sx exactly: the same I. (Until 2026-12-02 the −8·sx went into the mma's starting
    // accumulator: the same integers, but 4 register moves per mma to assemble that operand.)
    static constexpr bool kOffsetInC = kOffsetC && IntW<kDtype>::kOffset8;
    static constexpr int kTables = IntW<kDtype>::kMin || kOffsetInC ? 2 : 1;  // dx; Q4_1's dx·sx or the subtrahends
    // The K split's exchange: per warp of group 0, kXBufs buffers of its lanes' kMT·kNT·4 slice totals
    // ([element][lane] floats: a warp's stores and loads hit 32 banks), and per warp and buffer a full
    // and an empty mbarrier.
    static constexpr int kXElems = kMT * kNT * 4, kXBufs = 2;
    static constexpr int kXBytes = kGroups > 1 ? kWarps * kXBufs * kXElems * 32 * 4 : 0;
    static constexpr int kXBars = kGroups > 1 ? 2 * kWarps * kXBufs : 0;
    // tables, row factors, the exchange, the mbarriers (2 per stage and group, counted at the most stages)
    static constexpr int kFixed = kGroups * kWarps * kTables * kIntSliceBlocks * kDS * 4 + kRows * 4 + kXBytes + 8 +
                                  8 * kXBars + 16 * kGroups * STRATA_INT_TILES_MAX_STAGES;
    static constexpr int stages_within(int budget) {
        int n = 2;
        while (n < STRATA_INT_TILES_MAX_STAGES && kFixed + kGroups * (n + 1) * kStage <= budget) ++n;
        return n;
    }
    // The K split runs at depth 2 only (one CTA of 2·kWarps warps per SM): its stages are per group.
    static_assert(kGroups == 1 || kDepth == 2, "the K split is a one-CTA-per-SM layout");
    static constexpr int kStages = kDepth == 0 ? STRATA_INT_TILES_STAGES
                                 : stages_within(kDepth == 1 ? kSmemSM / 2 - kSmemRuntime : kSmemCTA);
    static_assert(kStages >= 2, "the pipeline needs two stages");
    static constexpr int kGroupStages = kStages * kStage;  // one group's ring
    static constexpr int kDxOff = kGroups * kGroupStages;
    static constexpr int kRsOff = kDxOff + kGroups * kWarps * kTables * kIntSliceBlocks * kDS * 4;
    static constexpr int kXOffEx = (kRsOff + kRows * 4 + 15) / 16 * 16;  // the exchange buffers
    // full[kGroups·kStages], empty[kGroups·kStages], then the exchange's full[kWarps·kXBufs], empty[...]
    static constexpr int kBarOff = (kXOffEx + kXBytes + 7) / 8 * 8;
    static constexpr int kBytes = kBarOff + 16 * kGroups * kStages + 8 * kXBars;
    static_assert(kBytes <= kSmemCTA, "a tile's shared memory");
#ifdef STRATA_INT_TILES_MIN_BLOCKS
    static constexpr int kMinBlocks = kDepth == 2 || kWarps > 8 ? 1 : STRATA_INT_TILES_MIN_BLOCKS;
#else
    // 2 where an SM's 228 KB hold two CTAs; Q4_1 (not routed yet) and Q4_K (same fold) 1: at 128
    // registers Q4_1's widest tile spilled.
    static constexpr int kMinBlocks =
        kDepth != 2 && kWarps == 8 && !IntW<kDtype>::kMin && 2 * (kBytes + kSmemRuntime) <= kSmemSM ? 2 : 1;
#endif
    // At most 128 registers a thread: two CTAs of 8 warps per SM, or one CTA of 16 warps (the K split).
    static constexpr bool kRegs128 = kMinBlocks > 1 || kCtaThreads > 256;
};

// d = A·B + 1.5·2^23 as int32 bits over one 16x8x32 tile (A s8, or u8 for Q4_1). A pure function
// of its operands (no volatile): the compiler may interleave it with other blocks' loads.
#ifdef STRATA_CUDA_EMU
template <bool kUnsignedA>
inline void mma_magic(int (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    mma_i8_16832<kUnsignedA>(d, a, b0, b1);
    for (int e = 0; e < 4; ++e) d[e] = (int)kMagic + d[e];
}
#else
template <bool kUnsignedA>
__device__ __forceinline__ void mma_magic(int (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    if constexpr (kUnsignedA) {
        asm(
            "mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%10,%10,%10,%10};\n"
            : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(kMagic));
    } else {
        asm(
            "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%10,%10,%10,%10};\n"
            : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(kMagic));
    }
}
#endif

// Stages slice s of the tile into `slot`: weight rows [o0, o0 + no) (16-byte
// pieces from the aligned address at or below each row's first byte; nothing
// at or past w_end is read), the int8 activations and block meta of rows
// [r0, r0 + nr) (zeros for the tile's rows past nr).
// Each thread copies the same piece column of rows kStep apart (the piece
// counts per row rounded up to powers of 2), so its addresses advance by one
// 64-bit stride per piece instead of a division and a row product each: the
// staging was a third of the kernel's instructions (docs/cuda_backend.md).
// `interior`: the tile has all kNO outputs and all kRows rows and is not the matrix's last output tile
// (a row follows its last one, so no window read reaches w_end). Its whole slices take the fast form
// below: the same pieces to the same places, without the per-piece bounds, sizes and zero fills.
// t: the thread's index among the L::kThreads that stage (the CTA's, or its group's under the K split).
template <int kDtype, class L>
__device__ __forceinline__ void stage_slice(const TileParams& p, uint8_t* slot, int s, int64_t o0, int no,
                                            int64_t r0, int nr, bool interior, const int t) {
    constexpr IntBlocksBytes<kDtype> B{};  // n * B: the bytes of n blocks (Q6_K: whole slices of 210)
    const int64_t b0 = (int64_t)s * kIntSliceBlocks;
    const int nblk = (int)min((int64_t)kIntSliceBlocks, p.nb - b0);
    const int len = nblk * B;
    if (interior && nblk == kIntSliceBlocks) {  // uniform
        constexpr int kLen = kIntSliceBlocks * B;
        {  // weights
            constexpr int kS = L::kWSlots, kStep = L::kThreads / kS, kIt = (L::kNO + kStep - 1) / kStep;
            const int pc = t % kS, row0 = t / kS;
            const uint8_t* src = p.w + (o0 + row0) * p.w_row_bytes + b0 * B;
            const int64_t step = (int64_t)kStep * p.w_row_bytes;
            uint8_t* dst = slot + row0 * L::kWS + 16 * pc;
            if (pc < L::kWP) {
#pragma unroll
                for (int i = 0; i < kIt; ++i) {
                    if (L::kNO % kStep == 0 || row0 + i * kStep < L::kNO) {
                        const int phi = (int)(reinterpret_cast<uintptr_t>(src) & 15);
                        if (16 * pc < phi + kLen) cp_async16z(dst, src + (16 * pc - phi), 16);
                    }
                    src += step;
                    dst += kStep * L::kWS;
                }
            }
        }
        {  // activations
            constexpr int kXP = 2 * kIntSliceBlocks, kStep = L::kThreads / kXP, kIt = (L::kRows + kStep - 1) / kStep;
            const int pc = t % kXP, rx0 = t / kXP;
            const int8_t* src = p.xq + (r0 + rx0) * p.k + b0 * 32 + 16 * pc;
            const int64_t step = (int64_t)kStep * p.k;
            uint8_t* dst = slot + L::kXOff + rx0 * L::kXS + 16 * pc;
#pragma unroll
            for (int i = 0; i < kIt; ++i) {
                if (L::kRows % kStep == 0 || rx0 + i * kStep < L::kRows) cp_async16z(dst, src, 16);
                src += step;
                dst += kStep * L::kXS;
            }
        }
        {  // block meta
            constexpr int kMP = kIntSliceBlocks / 2, kStep = L::kThreads / kMP, kIt = (L::kRows + kStep - 1) / kStep;
            const int pc = t % kMP, rm0 = t / kMP;
            const uint2* src = p.meta + (r0 + rm0) * p.nbp + b0 + 2 * pc;
            const int64_t step = (int64_t)kStep * p.nbp;
            uint8_t* dst = slot + L::kMOff + rm0 * L::kMS + 16 * pc;
#pragma unroll
            for (int i = 0; i < kIt; ++i) {
                if (L::kRows % kStep == 0 || rm0 + i * kStep < L::kRows) cp_async16z(dst, src, 16);
                src += step;
                dst += kStep * L::kMS;
            }
        }
        return;
    }
    {  // weights: piece pc of rows row0, row0 + kStep, ...
        constexpr int kS = L::kWSlots, kStep = L::kThreads / kS, kIt = (L::kNO + kStep - 1) / kStep;
        const int pc = t % kS, row0 = t / kS;
        const uint8_t* src = p.w + (o0 + row0) * p.w_row_bytes + b0 * B;  // the row's first byte of the slice
        const int64_t step = (int64_t)kStep * p.w_row_bytes;
        uint8_t* dst = slot + row0 * L::kWS + 16 * pc;
        if (pc < L::kWP) {
#pragma unroll
            for (int i = 0; i < kIt; ++i) {
                if (row0 + i * kStep < no) {
                    const int phi = (int)(reinterpret_cast<uintptr_t>(src) & 15);
                    if (16 * pc < phi + len) {  // pc < the row's piece count ceil((phase + len) / 16)
                        const uint8_t* from = src + (16 * pc - phi);
                        const int64_t left = p.w_end - from;
                        cp_async16z(dst, from, left >= 16 ? 16 : (left > 0 ? (int)left : 0));
                    }
                }
                src += step;
                dst += kStep * L::kWS;
            }
        }
    }
    {  // activations: piece pc (16 bytes, 2 per block) of rows rx0, rx0 + kStep, ...
        constexpr int kXP = 2 * kIntSliceBlocks, kStep = L::kThreads / kXP, kIt = (L::kRows + kStep - 1) / kStep;
        const int pc = t % kXP, rx0 = t / kXP;
        if (pc < 2 * nblk) {  // a partial slice skips the rest
            const int8_t* src = p.xq + (r0 + rx0) * p.k + b0 * 32 + 16 * pc;
            const int64_t step = (int64_t)kStep * p.k;
            uint8_t* dst = slot + L::kXOff + rx0 * L::kXS + 16 * pc;
#pragma unroll
            for (int i = 0; i < kIt; ++i) {
                const int r = rx0 + i * kStep;
                if (r < L::kRows) {
                    const bool live = r < nr;
                    cp_async16z(dst, live ? src : p.xq, live ? 16 : 0);
                }
                src += step;
                dst += kStep * L::kXS;
            }
        }
    }
    {  // block meta: piece pc (2 blocks' {dx, sx}) of rows rm0, rm0 + kStep, ...
        constexpr int kMP = kIntSliceBlocks / 2, kStep = L::kThreads / kMP, kIt = (L::kRows + kStep - 1) / kStep;
        const int pc = t % kMP, rm0 = t / kMP;
        if (pc < (nblk + 1) / 2) {
            const uint2* src = p.meta + (r0 + rm0) * p.nbp + b0 + 2 * pc;
            const int64_t step = (int64_t)kStep * p.nbp;
            uint8_t* dst = slot + L::kMOff + rm0 * L::kMS + 16 * pc;
#pragma unroll
            for (int i = 0; i < kIt; ++i) {
                const int r = rm0 + i * kStep;
                if (r < L::kRows) {
                    const bool live = r < nr;
                    cp_async16z(dst, live ? reinterpret_cast<const void*>(src) : reinterpret_cast<const void*>(p.meta),
                                live ? 16 : 0);
                }
                src += step;
                dst += kStep * L::kMS;
            }
        }
    }
}

template <int kDtype, int kWM, int kMT, int kNT, int kWarps = 8, int kDepth = 0, bool kOffsetC = false, int kGroups = 1>
__global__ void __launch_bounds__(32 * kWarps * kGroups,
                                  (TileLayout<kDtype, kWM, kMT, kNT, kWarps, kDepth, kOffsetC, kGroups>::kMinBlocks))
    int_tiles_kernel(const TileParams p) {
    pdl_wait();  // first: see cuda_pdl.cuh
    pdl_launch_dependents();
    using W = IntW<kDtype>;
    using L = TileLayout<kDtype, kWM, kMT, kNT, kWarps, kDepth, kOffsetC, kGroups>;
    constexpr int kStages = L::kStages;
    constexpr bool kOffC = L::kOffsetInC;
    // Q4_1's nibbles stay 0..15; Q4_0 enters as q − 8 (or 0..15 with kOffC), Q8_0 as is
    constexpr bool kUnsignedA = W::kMin || kOffC;
    constexpr bool kSplit = kGroups > 1;
    static_assert(!kSplit || STRATA_INT_TILES_MBAR, "the K split hands slices over on mbarriers");
    uint8_t* const smem0 = mma_smem();
    // t: the CTA's thread; under the K split, grp is the thread's group, and tg, warp and everything
    // below them count within the group (the two groups' warp w own the same outputs and rows).
    const int t = threadIdx.x, grp = kSplit ? t / L::kThreads : 0, tg = t - grp * L::kThreads;
    const int warp = tg >> 5, lane = t & 31, g = lane >> 2, tq = lane & 3;
    const int wm = warp % kWM, wn = warp / kWM;
    uint8_t* const smem = smem0 + grp * L::kGroupStages;  // this group's stage ring
    float* dxt = reinterpret_cast<float*>(smem0 + L::kDxOff) + (grp * kWarps + warp) * L::kTables * kIntSliceBlocks * L::kDS;
    float* dst = dxt + kIntSliceBlocks * L::kDS;  // Q4_1 only
    float* rsq = reinterpret_cast<float*>(smem0 + L::kRsOff);
    // Every weight row's first byte 4-byte aligned (an aligned base and rows of an even number of Q4_0
    // or Q8_0 blocks, i.e. k a multiple of 64, or any Q4_1 / Q4_K row): the fast block loop (`block`).
    const bool al4 = ((reinterpret_cast<uintptr_t>(p.w) | (uintptr_t)p.w_row_bytes) & 3) == 0;
    // This lane's ldmatrix row: matrix m = lane / 8 is (n-tile m / 2, bytes 16·(m % 2)) of a pair.
    const int x_lane = L::kXOff + (wn * L::kRW + 8 * ((lane >> 3) >> 1) + (lane & 7)) * L::kXS + 16 * ((lane >> 3) & 1);
    // The slices' hand-off on mbarriers (STRATA_INT_TILES_MBAR): full[i] completes when every thread's
    // copies of the slice staged into slot i have landed (kThreads arrivals, cp.async.mbarrier.arrive),
    // empty[i] when every warp has read that slice (kWarps arrivals). A warp waits only for the slice it
    // reads and, before staging into a slot, for that slot's last readers: no CTA barrier per slice, so
    // the warps need not run in step (docs/cuda_backend.md, "The slices' hand-off").
    constexpr bool kMbar = STRATA_INT_TILES_MBAR != 0;
    uint64_t* const bars = reinterpret_cast<uint64_t*>(smem0 + L::kBarOff);
    uint64_t* full = bars + grp * kStages;                 // this group's
    uint64_t* empty = bars + kGroups * kStages + grp * kStages;
    // The K split's exchange (group 1 -> group 0): warp w's buffer b, its full and empty mbarriers.
    float* const xbuf = reinterpret_cast<float*>(smem0 + L::kXOffEx) + warp * L::kXBufs * L::kXElems * 32;
    uint64_t* const xfull = bars + 2 * kGroups * kStages + warp * L::kXBufs;
    uint64_t* const xempty = xfull + kWarps * L::kXBufs;
    if constexpr (kMbar) {
        if (t < kGroups * kStages) {
            mbar_init(bars + t, L::kThreads);
            mbar_init(bars + kGroups * kStages + t, kWarps);
        }
        if (kSplit && t < kWarps * L::kXBufs) {  // one arrival each: lane 0 after its warp's __syncwarp
            mbar_init(bars + 2 * kGroups * kStages + t, 1);
            mbar_init(bars + 2 * kGroups * kStages + kWarps * L::kXBufs + t, 1);
        }
        __syncthreads();
    }
    // The next slot to stage into and to read (the same in every thread), with how many times each
    // has wrapped (the parity of the phase to wait for).
    int pslot = 0, pwrap = 0, cslot = 0, cwrap = 0;
    int xslot = 0, xwrap = 0;  // the K split's next exchange buffer and its wraps (both groups count alike)

    for (int tile = blockIdx.x; tile < p.n_tiles; tile += gridDim.x) {
        // Row tiles of one output tile are neighbours: their CTAs share its weights in L2.
        const int rt = tile % p.n_row_tiles;
        const int64_t o0 = (int64_t)(tile / p.n_row_tiles) * L::kNO;
        const int no = (int)min((int64_t)L::kNO, p.n_out - o0);
        const int64_t r0 = (int64_t)rt * L::kRows;
        const int nr = (int)min((int64_t)L::kRows, p.n_rows - r0);
        const bool interior = STRATA_INT_TILES_INTERIOR && no == L::kNO && nr == L::kRows && o0 + L::kNO < p.n_out;
        // A warp whose rows all lie past the launch's last (the last row tile of a launch that is not a
        // multiple of the tile's rows: e.g. 400 rows on 128-row tiles leave 12 of the last tile's 16 warps
        // with none) computes nothing any store keeps: with p.skip_dead it runs the idle loop below.
#ifdef STRATA_CUDA_EMU
        const bool idle = p.skip_dead && wn * L::kRW >= nr - g_emu_idle_slack;
#else
        const bool idle = p.skip_dead && wn * L::kRW >= nr;
#endif
        // Slice sn into the next slot, once that slot's last slice has been read by every warp.
        auto produce = [&](const int sn) {
            if (pwrap > 0) mbar_wait(empty + pslot, (unsigned)(pwrap - 1) & 1u);
            stage_slice<kDtype, L>(p, smem + pslot * L::kStage, sn, o0, no, r0, nr, interior, tg);
            cp_async_mbar_arrive(full + pslot);
            if (++pslot == kStages) { pslot = 0; ++pwrap; }
        };
        // This group's slices: every kGroups-th from its own (the K split: group g takes s % 2 == g).
#pragma unroll
        for (int i = 0; i < kStages - 1; ++i) {
            const int s = grp + kGroups * i;
            if constexpr (kMbar) {
                if (s < p.n_slices) produce(s);
            } else {
                if (s < p.n_slices) stage_slice<kDtype, L>(p, smem + s * L::kStage, s, o0, no, r0, nr, interior, t);
                cp_async_commit_group();
            }
        }
        if (p.prologue == STRATA_PROLOGUE_RMSNORM && t < nr)  // the row's factor, as every kernel computes it
            rsq[t] = int_rms_factor(p.ssq + (r0 + t) * p.n_slices, p.n_slices, p.k, p.eps);
        if (kMbar && p.prologue == STRATA_PROLOGUE_RMSNORM) __syncthreads();  // rsq, for the epilogue
        float tot[kMT][kNT][4];
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
            for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) tot[mt][nt][e] = 0.0f;

        // Barrier form: slice s sits in slot s % kStages (counted, not divided: kStages need not be a power
        // of 2); slice s + kStages − 1 is staged into the slot before it, slice s − 1's. (The mbarrier form
        // counts slots across tiles: pslot, cslot.)
        int slot = 0;
        if (idle) {
            // The idle loop: no dx table, products, folds or K-split exchange (the partner warp of the other
            // group owns the same rows, so it is idle too), but the warp still stages its share of every
            // slice (at the slice's start), waits for each slice and arrives on its slot like every warp, so
            // the hand-off's counts and phases are the main loop's, and it cannot run more than the pipeline
            // ahead of the others. A separate loop, so the main one below compiles as it did without it.
            for (int s = grp; s < p.n_slices; s += kGroups) {
                const int sn = s + kGroups * (kStages - 1);
                if constexpr (kMbar) {
                    if (sn < p.n_slices) produce(sn);
                    mbar_wait(full + cslot, (unsigned)(cwrap & 1));  // pacing (produce's empty wait paces it too)
                    __syncwarp();
                    if (lane == 0) mbar_arrive(empty + cslot);
                    if (++cslot == kStages) { cslot = 0; ++cwrap; }
                } else {
                    cp_async_wait_group<kStages - 2>();
                    __syncthreads();
                    const int fill = slot == 0 ? kStages - 1 : slot - 1;
                    if (sn < p.n_slices) stage_slice<kDtype, L>(p, smem + fill * L::kStage, sn, o0, no, r0, nr, interior, t);
                    cp_async_commit_group();
                    slot = slot == kStages - 1 ? 0 : slot + 1;
                }
            }
        } else
        for (int s = grp; s < p.n_slices; s += kGroups) {
            const int nbs = (int)min((int64_t)kIntSliceBlocks, p.nb - (int64_t)s * kIntSliceBlocks);
            const int sn = s + kGroups * (kStages - 1);  // the slice (of this group) staged during this one
            // mbarrier form: an aligned whole slice stages the next one before its block pair kStageAt
            // (0: first, as the barrier form does); every other slice first. A warp that is ahead then
            // waits for the slot's last readers mid-slice rather than at its start.
            constexpr int kStageAt = L::kNO == 32 ? STRATA_INT_TILES_STAGE_AT_NARROW : STRATA_INT_TILES_STAGE_AT;
            const bool late = kMbar && kStageAt > 0 && nbs == kIntSliceBlocks && al4;
            const uint8_t* st;
            if constexpr (kMbar) {
                if (!late && sn < p.n_slices) produce(sn);
                mbar_wait(full + cslot, (unsigned)cwrap & 1u);
                st = smem + cslot * L::kStage;
            } else {
                cp_async_wait_group<kStages - 2>();
                __syncthreads();  // slice s is in; every warp is done with slice s − 1's slot and tables
                const int fill = slot == 0 ? kStages - 1 : slot - 1;
                if (sn < p.n_slices) stage_slice<kDtype, L>(p, smem + fill * L::kStage, sn, o0, no, r0, nr, interior, t);
                cp_async_commit_group();
                st = smem + slot * L::kStage;
                slot = slot == kStages - 1 ? 0 : slot + 1;
            }
            // This warp's rows' dx (Q4_1: and dx·sx, the fold's exact product) as [block][row]: a lane per
            // row, its 8 {dx, sx} in 4 loads. A partial slice's entries past nbs are stale and never read.
            for (int rl = lane; rl < L::kRW; rl += 32) {
                const uint4* mr = reinterpret_cast<const uint4*>(st + L::kMOff + (wn * L::kRW + rl) * L::kMS);
#pragma unroll
                for (int jp = 0; jp < kIntSliceBlocks / 2; ++jp) {
                    const uint4 m2 = mr[jp];
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        const int j = 2 * jp + h;
                        const uint32_t mx = h ? m2.z : m2.x, my = h ? m2.w : m2.y;
                        if constexpr (kOffC) {  // {dx, bits of the float 12582912 + 8·sx (|8·sx| < 2^15)}
                            reinterpret_cast<uint2*>(dxt)[j * L::kDS + rl] = make_uint2(mx, kMagic + 8u * my);
                        } else {
                            dxt[j * L::kDS + rl] = __uint_as_float(mx);
                        }
                        if constexpr (W::kMin) dst[j * L::kDS + rl] = __fmul_rn(__uint_as_float(mx), (float)(int)my);
                    }
                }
            }
            __syncwarp();
            // Where rows g and g+8 of each m-tile sit in the slot: window + the row's 16-byte phase
            // (recomputed per slice: fewer registers live across the slice loop).
            int wofs[kMT][2];
#pragma unroll
            for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int ol = wm * 16 * kMT + 16 * mt + g + 8 * h;
                    // the low 4 bits of p.w + (o0 + ol)·w_row_bytes, in 32-bit arithmetic (the same bits)
                    const uint32_t ph = ((uint32_t)reinterpret_cast<uintptr_t>(p.w) +
                                         (uint32_t)(o0 + ol) * (uint32_t)p.w_row_bytes) & 15u;
                    wofs[mt][h] = ol * L::kWS + (ol < no ? (int)ph : 0);
                }
            float acc[kMT][kNT][4];
#pragma unroll
            for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
                for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
                    for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.0f;
            // Block j of the slice for the warp's whole tile (the fold per element: blocks ascending).
            // kAl4 (std::true_type): every weight row's window starts 4-byte aligned (al4 above) and j is a
            // compile-time constant (unrolled), so each quant word is one aligned load or two and a
            // funnel shift with no address arithmetic; std::false_type: any 2-byte phase (lds32_any).
            auto block = [&](const int j, auto kAl4) {
                uint32_t b[kNT][2];
#pragma unroll
                for (int np = 0; np < kNT / 2; ++np) {
                    uint32_t r[4];
                    ldsm_x4(r, st + x_lane + np * 16 * L::kXS + 32 * j);
                    b[2 * np][0] = r[0]; b[2 * np][1] = r[1]; b[2 * np + 1][0] = r[2]; b[2 * np + 1][1] = r[3];
                }
                float dx[kNT][2];
                [[maybe_unused]] float ds[kNT][2];  // Q4_1 only
                float mz[kNT][2];  // subtracted from the mma's result to give I: 12582912 (kOffC: + 8·sx of the row)
#pragma unroll
                for (int nt = 0; nt < kNT; ++nt) {
                    if constexpr (kOffC) {
                        const uint4 v = *reinterpret_cast<const uint4*>(dxt + 2 * (j * L::kDS + 8 * nt + 2 * tq));
                        dx[nt][0] = __uint_as_float(v.x); mz[nt][0] = __uint_as_float(v.y);
                        dx[nt][1] = __uint_as_float(v.z); mz[nt][1] = __uint_as_float(v.w);
                    } else {
                        const float2 v = *reinterpret_cast<const float2*>(dxt + j * L::kDS + 8 * nt + 2 * tq);
                        dx[nt][0] = v.x; dx[nt][1] = v.y;
                        mz[nt][0] = kMagicF; mz[nt][1] = kMagicF;
                    }
                    if constexpr (W::kMin) {
                        const float2 u = *reinterpret_cast<const float2*>(dst + j * L::kDS + 8 * nt + 2 * tq);
                        ds[nt][0] = u.x; ds[nt][1] = u.y;
                    }
                }
                if constexpr (kDtype == STRATA_Q6_K) {  // two mmas per block (cuda_int_q6k.cuh)
                    q6k_tile_block<kMT, kNT>(st, wofs, s, j, tq, b, dx, acc,
                                             [](int (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
                                                 mma_magic<false>(c, a, b0, b1);
#pragma unroll
                                                 for (int e = 0; e < 4; ++e) c[e] -= (int)kMagic;  // exact int32
                                             });
                }
#pragma unroll
                for (int mt = 0; mt < (kDtype == STRATA_Q6_K ? 0 : kMT); ++mt) {  // Q6_K: above
                    uint32_t a[4];
                    float d[2], m[2];
                    if constexpr (kIntSuper<kDtype>) {  // Q4_K: block j from the slices' starts
                        if constexpr (decltype(kAl4)::value)
                            q4k_mma_a(st + wofs[mt][0], st + wofs[mt][1], j, tq,
                                      [](const uint8_t* q) { return *reinterpret_cast<const uint32_t*>(q); }, d, m, a);
                        else
                            q4k_mma_a(st + wofs[mt][0], st + wofs[mt][1], j, tq,
                                      [](const uint8_t* q) { return lds32_any(q); }, d, m, a);
                    } else {
#pragma unroll
                        for (int h = 0; h < 2; ++h) {
                            const uint8_t* blk = st + wofs[mt][h] + j * W::kBytes;
                            const uint16_t* hp = reinterpret_cast<const uint16_t*>(blk);
                            d[h] = f16_to_f32(hp[0]);
                            m[h] = W::kMin ? f16_to_f32(hp[1]) : 0.0f;
                            // the quant bytes' address modulo 4 where the row is 4-byte aligned (a constant)
                            const int ph = ((j & 1) * W::kBytes + W::kQuantOff) & 2;  // kBytes is even
                            auto ld = [&](const uint8_t* q) {
                                if constexpr (decltype(kAl4)::value) return lds32_ph(q, ph);
                                else return lds32_any(q);
                            };
                            if constexpr (W::kNibbles) {
                                const uint32_t q = ld(blk + W::kQuantOff + 4 * tq);
                                const uint32_t lo = q & 0x0F0F0F0Fu, hi = (q >> 4) & 0x0F0F0F0Fu;
                                a[h] = W::kOffset8 && !kOffC ? nib_minus8(lo) : lo;
                                a[2 + h] = W::kOffset8 && !kOffC ? nib_minus8(hi) : hi;
                            } else {
                                a[h] = ld(blk + W::kQuantOff + 4 * tq);
                                a[2 + h] = ld(blk + W::kQuantOff + 16 + 4 * tq);
                            }
                        }
                    }
#pragma unroll
                    for (int nt = 0; nt < kNT; ++nt) {
                        int c[4];
                        mma_magic<kUnsignedA>(c, a, b[nt][0], b[nt][1]);
#pragma unroll
                        for (int e = 0; e < 4; ++e) {
                            // int_block_fold with I exact: acc = fmaf(d·dx, I, acc) (Q4_1: + fmaf(m, dx·sx)).
                            const float I = __fsub_rn(__int_as_float(c[e]), mz[nt][e & 1]);
                            float v = fmaf(__fmul_rn(d[e >> 1], dx[nt][e & 1]), I, acc[mt][nt][e]);
                            if constexpr (W::kMin) v = fmaf(m[e >> 1], ds[nt][e & 1], v);
                            acc[mt][nt][e] = v;
                        }
                    }
                }
            };
            // Narrow tiles unroll the whole slice (registers to spare: the loads of later blocks start
            // early; Q8_0's 64-output tile half of it, to stay within 128 registers without spills);
            // the 128-output tile keeps 128 registers for 2 CTAs per SM. At depth 2 (one CTA of 8 warps per
            // SM, up to 255 registers) the 128-output tile overlaps 2 blocks and Q8_0's 64-output tile all 8;
            // with Q4_0's offset (two more words per n-tile and block) the narrow tiles at 128 registers
            // overlap 4 (8 spilled 20-24 bytes). The aligned loop unrolls half as many pairs (at least 1).
            // The K split's 16 warps have 128 registers, as depth 0's two CTAs per SM: depth 0's unrolls.
            constexpr bool kWideRegs = kDepth == 2 && !kSplit;
            constexpr int kUnroll = kMT > 1 ? (kWideRegs && kWarps == 8 ? 2 : kTileUnroll)
                                  : kWideRegs ? kIntSliceBlocks
                                  : kOffC && L::kRegs128 ? 4
                                  : (W::kNibbles || kNT == 2 ? kIntSliceBlocks : 4);
            constexpr int kUnrollAl = STRATA_INT_TILES_UNROLL_AL > 0 ? STRATA_INT_TILES_UNROLL_AL
                                    : (kUnroll / 2 > 0 ? kUnroll / 2 : 1);
            if (nbs == kIntSliceBlocks && al4) {  // uniform; a whole slice of aligned rows, no bounds checks
#pragma unroll kUnrollAl
                for (int jp = 0; jp < kIntSliceBlocks; jp += 2) {  // pairs: the quant words' phases are j's parity
                    if (late && jp == 2 * kStageAt && sn < p.n_slices) produce(sn);
                    block(jp, std::true_type{});
                    block(jp + 1, std::true_type{});
                }
            } else if (nbs == kIntSliceBlocks) {
#pragma unroll kUnroll
                for (int j = 0; j < kIntSliceBlocks; ++j) block(j, std::false_type{});
            } else {
                for (int j = 0; j < nbs; ++j) block(j, std::false_type{});
            }
            if constexpr (kMbar) {  // this warp is done with the slot (and its tables, rewritten next slice)
                __syncwarp();
                if (lane == 0) mbar_arrive(empty + cslot);
                if (++cslot == kStages) { cslot = 0; ++cwrap; }
            }
            // Negative controls only (never in a shipped build): group 0 adds its slice and group 1's next
            // as one sum, t + (a + x) instead of (t + a) + x — in the emulator when test_int_tiles asks, in a
            // device build with -DSTRATA_INT_TILES_KSPLIT_NEGATIVE (scripts/gpu_variants.sh; docs/cuda_backend.md,
            // "The K split"). Either must change some bit.
#if defined(STRATA_CUDA_EMU)
            const bool wrong_order = g_emu_ksplit_negative;
#elif defined(STRATA_INT_TILES_KSPLIT_NEGATIVE)
            constexpr bool wrong_order = true;
#else
            constexpr bool wrong_order = false;
#endif
            const bool neg_pair = wrong_order && kSplit && s > 0 && s + 1 < p.n_slices;
            if ((!kSplit || grp == 0) && !neg_pair) {  // the slice totals in slice order, as every kernel adds them
#pragma unroll
                for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
                    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
                        for (int e = 0; e < 4; ++e)
                            tot[mt][nt][e] = s == 0 ? acc[mt][nt][e] : __fadd_rn(tot[mt][nt][e], acc[mt][nt][e]);
            }
            if constexpr (kSplit) {
                // The K split: group 1's warp hands its slice's totals (acc) to group 0's warp of the same
                // outputs and rows, which adds them after its own slice s − 1: the same additions in the
                // same order as one group's loop, so the same bits. Two buffers a warp pair, so group 1 may
                // run one slice ahead.
                float* const xb = xbuf + xslot * L::kXElems * 32 + lane;
                if (grp == 0) {
                    if (s + 1 < p.n_slices) {  // group 1 has slice s + 1
                        mbar_wait(xfull + xslot, (unsigned)xwrap & 1u);
#pragma unroll
                        for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
                            for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
                                for (int e = 0; e < 4; ++e) {
                                    const float x = xb[32 * ((mt * kNT + nt) * 4 + e)];
                                    tot[mt][nt][e] = neg_pair ? __fadd_rn(tot[mt][nt][e], __fadd_rn(acc[mt][nt][e], x))
                                                              : __fadd_rn(tot[mt][nt][e], x);
                                }
                        __syncwarp();
                        if (lane == 0) mbar_arrive(xempty + xslot);
                        if (++xslot == L::kXBufs) { xslot = 0; ++xwrap; }
                    }
                } else {
                    if (xwrap > 0) mbar_wait(xempty + xslot, (unsigned)(xwrap - 1) & 1u);
#pragma unroll
                    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
                        for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
                            for (int e = 0; e < 4; ++e) xb[32 * ((mt * kNT + nt) * 4 + e)] = acc[mt][nt][e];
                    __syncwarp();
                    if (lane == 0) mbar_arrive(xfull + xslot);
                    if (++xslot == L::kXBufs) { xslot = 0; ++xwrap; }
                }
            }
        }
        // Epilogue: lane (g, tq) holds outputs g, g+8 of each m-tile x rows 2tq, 2tq+1 of each n-tile
        // (under the K split, group 0's lanes hold the totals).
        if ((!kSplit || grp == 0) && !idle)
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
            for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int ol = wm * 16 * kMT + 16 * mt + g + 8 * (e >> 1);
                    const int rl = wn * L::kRW + 8 * nt + 2 * tq + (e & 1);
                    if (ol < no && rl < nr) {
                        float v = tot[mt][nt][e];
                        if (p.prologue == STRATA_PROLOGUE_RMSNORM) v = __fmul_rn(v, rsq[rl]);
                        if (p.bias) v = __fadd_rn(v, __ldg(p.bias + o0 + ol));
                        float* yp = p.y + (r0 + rl) * p.y_stride + o0 + ol;
                        *yp = p.accumulate ? __fadd_rn(*yp, v) : v;
                    }
                }
        __syncthreads();  // the next tile restages slot 0 and rewrites rsq
    }
}

}  // namespace

namespace {

constexpr int kTilesMaxDevices = 64;

template <int kDtype, int kChoice>
struct Config {
    static constexpr bool kKSplit = kChoice >= kOffsetEnd;
    static constexpr bool kOffsetC = kKSplit ? (kChoice - kOffsetEnd) % 2 == 1 : kChoice >= kPlain;
    static constexpr int kShape = choice_shape(kChoice);
    static constexpr int kCode = kKSplit ? 2 : kOffsetC ? 2 * ((kChoice - kPlain) / kShapes) : kChoice / kShapes;
    static constexpr int kGroups = kKSplit ? 2 : 1;
    static constexpr int kDepth = kShape == 3 && kCode == 1 ? 0 : kCode;
    static constexpr int kWM = kShape == 2 ? 2 : (kShape >= 4 ? 8 : 4), kMT = kShape == 0 || kShape == 3 ? 2 : 1;
    static constexpr int kNT = kShape == 2 || kShape == 4 ? 2 : (kShape == 6 ? 6 : 4);
    static constexpr int kWarps = kShape == 3 ? 16 : 8;
    using L = TileLayout<kDtype, kWM, kMT, kNT, kWarps, kDepth, kOffsetC, kGroups>;
    static constexpr auto kernel = int_tiles_kernel<kDtype, kWM, kMT, kNT, kWarps, kDepth, kOffsetC, kGroups>;
    static_assert(L::kNO == shape_no(kShape) && L::kRows == shape_rows(kShape), "shape table");
};

template <int kDtype, int kC = 0>
void set_smem(cudaError_t& err) {
    if constexpr (kC < kChoices) {
        using C = Config<kDtype, kC>;
        if (err == cudaSuccess) err = cudaFuncSetAttribute((const void*)C::kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::L::kBytes);
        set_smem<kDtype, kC + 1>(err);
    }
}

// Once per device: the kernels' dynamic shared memory above 48 KB.
void tiles_init(int dev) {
    static std::once_flag once[kTilesMaxDevices];
    static cudaError_t result[kTilesMaxDevices];
    std::call_once(once[dev], [dev] {
        cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;  // a function attribute, not stream work
        (void)cudaThreadExchangeStreamCaptureMode(&mode);
        cudaError_t err = cudaSuccess;
        set_smem<STRATA_Q4_0>(err);
        set_smem<STRATA_Q8_0>(err);
        set_smem<STRATA_Q4_1>(err);
        set_smem<STRATA_Q4_K>(err);
        set_smem<STRATA_Q6_K>(err);
        (void)cudaThreadExchangeStreamCaptureMode(&mode);
        result[dev] = err;
    });
    check(result[dev], "cudaFuncSetAttribute (integer tile matmul)");
}

template <int kDtype, int kC = 0>
void launch_choice(const TileParams& p0, int choice, cudaStream_t stream) {
    if constexpr (kC < kChoices) {
        if (choice != kC) return launch_choice<kDtype, kC + 1>(p0, choice, stream);
        using C = Config<kDtype, kC>;
        TileParams p = p0;
        const int64_t n_rt = (p.n_rows + C::L::kRows - 1) / C::L::kRows, n_ot = (p.n_out + C::L::kNO - 1) / C::L::kNO;
        if (n_rt * n_ot > INT32_MAX) fail(STRATA_ERR_INTERNAL, "cuda matmul: integer tile path has too many tiles");
        p.n_row_tiles = (int)n_rt;
        p.n_tiles = (int)(n_rt * n_ot);
        launch_k(C::kernel, (unsigned)p.n_tiles, C::L::kCtaThreads, C::L::kBytes, stream, p);
    } else {
        fail(STRATA_ERR_INTERNAL, "cuda matmul: integer tile choice out of range");
    }
}

// STRATA_INT_TILES_TAIL (strata/env.py; read per call): "0" no split; "N" (1 to 127; unset: 32, the default
// since the H200 A/B of 2026-12-07, bench/RESULTS.md) a tail of at most N rows where int_tiles_tail_pays says
// the split saves tile work; "N:always" at most N rows wherever the tile shape leaves them (the tests' form:
// every split, whether it pays or not).
struct TailSetting {
    int64_t most = tile_route::kTailDefaultRows;
    bool always = false;
};

TailSetting tail_setting() {
    const char* v = std::getenv("STRATA_INT_TILES_TAIL");
    TailSetting t;
    if (v == nullptr || *v == '\0') return t;
    char* end = nullptr;
    errno = 0;
    const long long n = std::strtoll(v, &end, 10);
    const bool digits = end != v && *v >= '0' && *v <= '9';
    t.always = digits && std::strcmp(end, ":always") == 0;
    if (!digits || (*end != '\0' && !t.always) || errno == ERANGE || n < 0 || n > 127 || (t.always && n == 0))
        fail(STRATA_ERR_INVALID_ARGUMENT, std::string("STRATA_INT_TILES_TAIL=") + v +
                                              ": expected a whole number of rows from 0 to 127, or 1 to 127 "
                                              "followed by :always");
    t.most = n;
    return t;
}

// A forced tile configuration "tiles:NOxROWSdD" (D 0, 1, 2), "tiles:NOxROWSdDo" (D 0 or 2, with Q4_0's
// offset out of the nibbles), "tiles:NOx64d2k" / "tiles:NOx64d2ok" (NO 32 or 64: the K split) or
// "tiles:NO" (64 rows, depth 0); else -1.
int parse_forced(const char* env) {
    int no = 0, rows = 64, depth = 0, n = 0;
    const size_t len = std::strlen(env);
    bool offset_c = false, ksplit = false;
    if (!(std::sscanf(env, "tiles:%d%n", &no, &n) == 1 && (size_t)n == len)) {
        if (std::sscanf(env, "tiles:%dx%dd%d%n", &no, &rows, &depth, &n) != 3) return -1;
        const std::string tail(env + n);
        if (tail == "o") offset_c = true;
        else if (tail == "k") ksplit = true;
        else if (tail == "ok") offset_c = ksplit = true;
        else if (!tail.empty()) return -1;
    }
    if (ksplit) return kHasKSplit && (no == 32 || no == 64) && rows == 64 && depth == 2 ? ksplit_choice(offset_c, no == 64 ? 1 : 2) : -1;
    if (depth < 0 || depth > 2 || (offset_c && depth == 1)) return -1;
    for (int c = 0; c < kShapes; ++c)
        if (shape_no(c) == no && shape_rows(c) == rows) return choice_of(c, depth, offset_c);
    return -1;
}

// STRATA_INT_TILES_KSPLIT (strata/env.py; read per call, like STRATA_INT_MATMUL): 1 or unset (the default
// since the H200 A/B of 2026-12-05, bench/RESULTS.md) puts the routed launches below on the K split (the
// same bits); 0: not.
bool ksplit_enabled() {
    return env_switch("STRATA_INT_TILES_KSPLIT", true);
}

// STRATA_INT_TILES_SKIP_DEAD (strata/env.py; read per call): 1 or unset (the default since the H100 A/B
// of 2026-12-06, bench/RESULTS.md: 8B gate_up 709 -> 669 µs and lm_head 1,196 -> 1,049 at 400 rows) lets a
// warp with no row below the launch's last skip its products and folds (int_tiles_kernel, `idle`; the same
// bits); 0 computes them (docs/cuda_backend.md, "Idle warps of a partial row tile").
bool skip_dead_enabled() {
    return env_switch("STRATA_INT_TILES_SKIP_DEAD", true);
}

// What the routing reads from the environment and the build (read, and so checked, on every routed call).
tile_route::Knobs route_knobs() {
    tile_route::Knobs kn;
    kn.tail_most = tail_setting().most;
    kn.ksplit = ksplit_enabled();
    kn.has_ksplit = kHasKSplit;
    kn.min_rows = STRATA_INT_TILES_MIN_ROWS;
    return kn;
}

}  // namespace

int int_tiles_choice(int64_t n_rows, int64_t n_out, int64_t k, int32_t w_dtype, int sms) {
    const char* env = std::getenv("STRATA_INT_MATMUL");  // read per call: tests switch it within a process
    if (env && std::strcmp(env, "legacy") == 0) return -1;
    (void)skip_dead_enabled();  // a bad STRATA_INT_TILES_SKIP_DEAD fails here, before the call's pre-pass
    (void)tail_setting();       // and a bad STRATA_INT_TILES_TAIL
    int routing = 10;  // the default (v6: H200, 2026-12-02: 8B pp512 +6 %, 64 sequences +2 % over v5; v7, v8: bench/RESULTS.md 2026-12-04; v9: 2026-12-05, fourth session, 40 / 48 sequences +4.4 %; v10: 2026-12-07, third session, gate_up and lm_head at some 161-448-row counts -8 to -16 %)
    bool forced = false;
    if (env && std::strncmp(env, "auto:v", 6) == 0 && env[6] >= '1' && env[6] <= '9' && env[7] == 0) {
        routing = env[6] - '0';  // auto's row thresholds, one routing (whole-model A/B: scripts/gpu_ab.sh)
    } else if (env && std::strcmp(env, "auto:v10") == 0) {
        routing = 10;
    } else if (env && (std::strcmp(env, "rows") == 0 || std::strcmp(env, "rows:16") == 0 ||
                       std::strcmp(env, "rows:32") == 0 || std::strcmp(env, "rows:64") == 0)) {
        return -1;  // rows, rows:16/32/64: the few-row kernel (cuda_int_rows.cu) at every row count
    } else if (env && *env && std::strcmp(env, "auto") != 0 && std::strcmp(env, "norows") != 0) {
        forced = true;
        if (std::strcmp(env, "tiles:v1") == 0) routing = 1;
        else if (std::strcmp(env, "tiles:v3") == 0) routing = 3;
        else if (std::strcmp(env, "tiles:v2") == 0) routing = 2;
        else if (std::strcmp(env, "tiles:v4") == 0) routing = 4;
        else if (std::strcmp(env, "tiles:v5") == 0) routing = 5;
        else if (std::strcmp(env, "tiles:v6") == 0) routing = 6;
        else if (std::strcmp(env, "tiles:v7") == 0) routing = 7;
        else if (std::strcmp(env, "tiles:v8") == 0) routing = 8;
        else if (std::strcmp(env, "tiles:v9") == 0) routing = 9;
        else if (std::strcmp(env, "tiles") != 0 && std::strcmp(env, "tiles:v10") != 0) {
            const int c = parse_forced(env);  // one configuration (bench/gpu_matmul.py, tests)
            if (c >= 0) return c;
            // a typo must not time the wrong kernel
            fail(STRATA_ERR_INVALID_ARGUMENT, std::string("STRATA_INT_MATMUL=") + env +
                                                  ": expected auto, tiles, auto:v1 ... auto:v10, tiles:v1 ... tiles:v10, tiles:NO "
                                                  "(128, 64 or 32), tiles:NOxROWSdDEPTH[o] (e.g. tiles:32x64d2, "
                                                  "tiles:128x128d2o, tiles:128x48d0o), tiles:NOx64d2k or tiles:NOx64d2ok "
                                                  "(NO 32 or 64: the K split), rows, rows:16, rows:32, rows:64, "
                                                  "norows or legacy");
        }
    }
    return tile_route::choose(routing, forced, n_rows, n_out, k, w_dtype, sms, route_knobs());
}

int64_t int_tiles_tail(int choice, int64_t n_rows) {
    const int64_t most = tail_setting().most;
    if (choice >= kChoices) return 0;
    const char* env = std::getenv("STRATA_INT_MATMUL");  // a forced configuration runs as forced
    if (env && *env && std::strcmp(env, "auto") != 0 && std::strcmp(env, "norows") != 0 &&
        std::strncmp(env, "auto:v", 6) != 0)
        return 0;
    return tile_route::tail_rows(choice, n_rows, most);
}

bool int_tiles_tail_pays(int choice, int head_choice, int tail_choice, int64_t n_rows, int64_t tail, int64_t n_out,
                         int sms) {
    if (tail_setting().always) return true;
    if (choice >= kChoices || head_choice >= kChoices || tail_choice >= kChoices) return false;
    return tile_route::tail_pays(choice, head_choice, tail_choice, n_rows, tail, n_out, sms);
}

void launch_int_tiles(const IntTilesArgs& a, int choice, int dev, cudaStream_t stream) {
    if (dev < 0 || dev >= kTilesMaxDevices) fail(STRATA_ERR_INTERNAL, "cuda matmul: device index out of range");
    tiles_init(dev);
    TileParams p = tile_params(a);
    p.skip_dead = skip_dead_enabled() ? 1 : 0;
    switch (a.w_dtype) {
    case STRATA_Q4_0: launch_choice<STRATA_Q4_0>(p, choice, stream); break;
    case STRATA_Q8_0: launch_choice<STRATA_Q8_0>(p, choice, stream); break;
    case STRATA_Q4_1: launch_choice<STRATA_Q4_1>(p, choice, stream); break;
    case STRATA_Q4_K: launch_choice<STRATA_Q4_K>(p, choice, stream); break;
    case STRATA_Q6_K: launch_choice<STRATA_Q6_K>(p, choice, stream); break;
    default: fail(STRATA_ERR_INTERNAL, "cuda matmul: no integer tile path for dtype " + std::to_string(a.w_dtype));
    }
    check_launch("matmul (integer tiles)");
}

}  // namespace cuda
}  // namespace strata

// cuda_int_matmul.cu — y = prologue(x)·Wᵀ (+ bias) (+ y) for Q4_0, Q8_0,
// Q4_1, Q4_K and Q6_K weights with integer-exact block products: ONE arithmetic per output
// element whatever the number of rows, the kernel or its tiling.
//
// The canonical arithmetic of output (r, o), a function of k alone
// (docs/cuda_backend.md, "integer matmul"):
//  1. Activations, once per matmul (int_prepass_kernel): per row and block of
//     32 values, x' = the prologue (x; x·g for RMSNORM; (g/(1+expf(−g)))·u
//     for SILU_MUL), a = max|x'| (NaN counts as +inf), dx = a/127,
//     xq = clamp(rint(x'/dx), ±127) (0 when dx is 0 or not finite),
//     sx = Σxq (exact). RMSNORM: ssq_c per chunk c of 1024 values (thread t
//     of 256: fmaf chain over values t, t+256, …; then block_sum), and
//     ssq = ((ssq_0 + ssq_1) + ssq_2) + … .
//  2. Per block: the exact integer product I (cuda_int_blocks.cuh), then
//     int_block_fold: acc = fmaf(d·dx, I, acc) (Q4_1: then fmaf(m, dx·sx, acc)).
//     Q4_K (cuda_int_kquant.cuh): super-block = slice, sub-block j = block j,
//     folded as Q4_1 with d = d_sb·sc_j and m = −(dmin_sb·m_j) (both exact).
//     Q6_K (cuda_int_q6k.cuh): super-block = slice; block j's integer is
//     I = sc0·I0 + sc1·I1, I0/I1 = Σ (q − 32)·xq over its two 16-value halves,
//     sc0/sc1 their int8 scales: exact, |I| < 2^24, so (float)I (cvt.rn) is
//     exact; folded as Q4_0/Q8_0: acc = fmaf(d·dx, (float)I, acc). Q6_K runs
//     only the dp4a kernels here (one row; 8-row tiles for every row count
//     the tile kernel does not take), never int_mma_kernel or the few-row one.
//  3. Slices of 8 blocks: acc starts at 0, blocks in ascending order;
//     total = acc_0, then total = total + acc_s in slice order.
//  4. RMSNORM: total = total · rsqrt(ssq/k + eps); v = total (+ bias);
//     y = accumulate ? y + v : v.
//
// The dot kernel (int_dot_kernel): a CTA owns NO outputs x 8 rows and walks k
// in parts of PS slices; every thread owns one (output, slice) unit of a part
// and runs that slice's blocks in order, one dp4a chain per block and row;
// the slices' partial sums go through shared memory and are added in slice
// order. Each part's weight rows are staged in shared memory with cp.async
// (coalesced 16-byte pieces, the next part in flight while this one is
// computed), keeping their 16-byte alignment so each block's bytes are picked
// out with compile-time shifts. Which thread, CTA or tile computes an element,
// and how many rows the launch has, never changes its operations (checked bit
// for bit by libstrata/cuda_emu/test_int.cpp and tests/kernels/).
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "cuda_int_act.cuh"
#include "cuda_int_blocks.cuh"
#include "cuda_int_gemv.cuh"
#include "cuda_handoff.cuh"
#include "cuda_int_kquant.cuh"
#include "cuda_int_mma.cuh"
#include "cuda_int_q6k.cuh"
#include "cuda_int_rows.cuh"
#include "cuda_int_slice.cuh"
#include "cuda_int_tiles.cuh"
#include "cuda_int_wgmma.cuh"
#include "core/dtype.h"
#include "core/env_switch.h"
#include "cuda_kernels.cuh"
#include "cuda_mma.cuh"
#include "cuda_scratch.cuh"
#include "cuda_pdl.cuh"
#include "cuda_rope_epilogue.cuh"

namespace strata {
namespace cuda {
namespace {

constexpr int kPreThreads = 256;
constexpr int kPreChunkBlocks = 8;  // blocks per pre-pass CTA (one per warp): also RMSNORM's ssq chunks (= slices)
constexpr int kDotThreads = 256;
constexpr int kDotRows = 8;          // rows per tile (one accumulator each per thread)
// The dot kernels quantize their own rows (no pre-pass launch) when that takes a CTA of 256
// threads at most STRATA_INT_FUSE_ROUNDS rounds of 64 blocks of 32 values (rows x k / 2048; an
// environment variable read at each call, strata/env.py): each CTA repeats the work. Default 0,
// never: on the H200 the fused 1-row kernel was slower than the two launches at 8B shapes.
inline int int_fuse_rounds() {
    return (int)env_whole("STRATA_INT_FUSE_ROUNDS", 0, 0, 1 << 30, "a whole number of rounds (0: never)");
}

// STRATA_INT_EARLY_STAGES (read at each call, strata/env.py), strictly "0" or "1" (unset or empty: 0): 1 =
// the dot kernels request the weights of as many parts of their first tile as they have stage buffers
// before pdl_wait (early_dot_weights), not part 0 alone, and the few-row kernel those of the parts it
// stages ahead (early_rows_weights, cuda_int_rows.cu), not none; the same bytes in the same places.
inline bool int_early_stages() { return env_switch("STRATA_INT_EARLY_STAGES", false); }

// The fused dot kernel's CTAs per SM (STRATA_INT_FUSE_CTAS, read at each call; 0, the default: as many as
// fit). Every CTA rounds its rows again, so the rounding's instructions grow with the grid; with 1 or 2
// a CTA rounds once and then walks many tiles (the same bits: which CTA computes a tile changes nothing).
inline int int_fuse_ctas() {
    return (int)env_whole("STRATA_INT_FUSE_CTAS", 0, 0, 64, "a whole number of CTAs per SM (0: as many as fit)");
}

struct PreParams {
    const float* x;
    int64_t x_stride, k;
    int nb, nbp, nchunks;
    int prologue;
    const float* norm;
    int8_t* xq;     // [row][k]
    uint2* meta;    // [row][nbp]: {bits of dx, sx}
    float* ssq;     // [row][nchunks] (RMSNORM)
};

struct IntParams {
    const int8_t* xq;
    const uint2* meta;
    const float* ssq;
    int64_t n_rows, k, n_out, w_row_bytes;
    int nb, nbp, n_slices;  // blocks, meta row stride (even), slices
    const uint8_t* w;
    const uint8_t* w_end;
    const float* bias;
    float* y;
    int64_t y_stride;  // elements between y rows (>= n_out)
    int accumulate, prologue;
    float eps;
    int no, ps, n_parts, wstride, xbytes, mbytes, stage_bytes, n_row_tiles, n_tiles, threads;
    // The dot kernel's stage buffers (dot_layout): 1 (one part), 2 (the next part in flight while one
    // is computed) or 3 (two parts in flight: the local emission's 32-output CTAs, one per SM, which
    // otherwise have half the bytes in flight of two 16-output CTAs). 0: 2 where n_parts > 1.
    int nbuf;
    // The dot kernels' weights staged before pdl_wait (early_dot_weights): 0 or 1 = part 0 of the CTA's
    // first tile; N > 1 = its parts [0, N), at most one a stage buffer (dot_early_parts;
    // STRATA_INT_EARLY_STAGES).
    int early_parts;
    // The fused dot kernel (no pre-pass): it quantizes its rows of x itself into shared memory at
    // act_off (act_rows rows: int8 values at row stride xbytes, meta at mbytes, then RMSNORM's ssq
    // per chunk and the per-block sums of squares it is folded from).
    const float* x;
    int64_t x_stride;
    const float* norm;
    int act_off, act_rows;
    int rsq_off;  // the dot kernel's RMSNORM factors (kR floats) after the slice partials
    // strata_matmul_prefetch's hint (pf_lines 0: none): 128-byte lines from pf, asked of L2 by the
    // grid's last pf_ctas CTAs once their work is done (prefetch_tail).
    const uint8_t* pf;
    int64_t pf_lines;
    int pf_ctas;
    // The activation hand-off's emission (cuda_handoff.cuh; one-row dot kernel only): emit_pro >= 0
    // rounds y's row into the next call's blocks (emit_k values; SILU_MUL: y holds [gate | up] of
    // emit_k each), chunk by chunk, in the epilogue of the CTA that completes the chunk (emit_cnt:
    // arrivals per chunk). emit_off: 64 bytes of shared memory for the protocol's flags and RMSNORM's
    // block sums. -1 (none) unless set: a zero-initialized IntParams must not emit.
    int emit_pro = -1;
    const float* emit_norm;
    int64_t emit_k;
    int emit_off;
    int8_t* emit_xq;
    uint2* emit_meta;
    float* emit_ssq;
    int* emit_cnt;
    // The local emission (emit_blocks): the CTA's outputs are whole blocks of the next call's row
    // (no a multiple of 32, no <= threads), so each fold thread rounds its own value with its warp:
    // no counter, no fence, no CTA barrier. emit_ssq then holds RMSNORM's per-block sums of
    // squares ([nb]), which the consumer folds into chunks itself (ssq_blocks).
    int emit_local = 0;
    // The local emission of SILU_MUL's input (pair_half = emit_k > 0; emit_local set): y's row is
    // [gate | up] of pair_half values each, and a CTA of 64 outputs takes gate outputs [o0 / 2,
    // o0 / 2 + 32) as its local rows 0-31 and the up outputs pair_half + the same as rows 32-63
    // (out_row), so one CTA holds both halves of its 32 elements of the next call's row. Which CTA
    // computes an output never changes its arithmetic. 0: local row i is output o0 + i.
    int64_t pair_half = 0;
    // ssq holds per-block sums of squares ([row][nb]) instead of per-chunk ones: the consumer of a
    // local emission folds them (int_rms_factor_blocks_warp: int_rms_factor_blocks' additions, in order).
    int ssq_blocks = 0;
    // strata_matmul_rope_kv_store in the one-row dot kernel's epilogue (int_dot_rope_kernel,
    // cuda_rope_epilogue.cuh): y's row is [q | k | v] of rope.qkv (= y).
    RopeKvStoreArgs rope{};
};

// The dot kernel's stage buffers (IntParams::nbuf; 0 = the layout before it existed: 2 where several parts).
__host__ __device__ __forceinline__ int dot_nbuf(const IntParams& p) {
    return p.nbuf > 0 ? p.nbuf : (p.n_parts > 1 ? 2 : 1);
}

// The parts of a CTA's first tile whose weights the dot kernels stage before pdl_wait, each into its
// own stage buffer (part j into buffer j, where the part loop puts it too): 1 to min(buffers, parts).
// Q6_K: part 0 alone, whatever early_parts says. Its one-row shapes take all of k in one part (dot_shape),
// so there is nothing more to move, and the form that could move more cost its one-row kernel 34
// registers (80 -> 114: three CTAs per SM -> two).
template <int kDtype>
__host__ __device__ __forceinline__ int dot_early_parts(const IntParams& p) {
    if constexpr (kDtype == STRATA_Q6_K) return 1;
    return max(1, min(p.early_parts, min(dot_nbuf(p), p.n_parts)));
}

// ---------------------------------------------------------------- activation quantization

// The per-element steps (int_act_*) live in cuda_int_act.cuh, shared with the in-kernel quantizers.

template <int kPro>
__global__ void __launch_bounds__(kPreThreads) int_prepass_kernel(const PreParams p) {
    pdl_wait();  // first: see cuda_pdl.cuh
    pdl_launch_dependents();
    const int64_t row = blockIdx.x;
    const int c = blockIdx.y;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const float* xr = p.x + row * p.x_stride;
    const int b0 = c * kPreChunkBlocks;
    const int nbc = min(p.nb - b0, kPreChunkBlocks);
    if (warp < nbc) {  // whole warps: block b0 + warp
        const int b = b0 + warp;
        const int64_t e = (int64_t)32 * b + lane;
        const float v = int_act_value<kPro>(xr[e], int_act_aux<kPro>(xr, p.norm, p.k), e);
        uint2 m;
        p.xq[row * p.k + e] = (int8_t)int_act_round_warp(v, m);
        if (lane == 0) p.meta[row * p.nbp + b] = m;
    }
    if (kPro == STRATA_PROLOGUE_RMSNORM) {  // ssq of this chunk's 256 values: one square per thread, block_sum
        __shared__ float red[kPreThreads / 32];
        const int64_t e = (int64_t)32 * b0 + threadIdx.x;
        const float xv = e < (int64_t)32 * (b0 + nbc) ? xr[e] : 0.0f;
        const float ss = block_sum<kPreThreads / 32>(fmaf(xv, xv, 0.0f), red);
        if (threadIdx.x == 0) p.ssq[row * p.nchunks + c] = ss;
    }
}

// ---------------------------------------------------------------- dot kernel

__device__ __forceinline__ int addr_delta16(const void* p) { return (int)(reinterpret_cast<uintptr_t>(p) & 15); }

// The output (= weight row) of local row i of the tile starting at o0 (IntParams::pair_half). Q6_K
// never pairs (launch_int_matmul): its one-row kernel keeps the registers it had without the mapping.
template <int kDtype>
__device__ __forceinline__ int64_t out_row(const IntParams& p, int64_t o0, int i) {
    if constexpr (kDtype == STRATA_Q6_K) return o0 + i;
    return p.pair_half == 0 ? o0 + i : (o0 >> 1) + (i < 32 ? i : p.pair_half + (i - 32));
}

// Stages part `part` into `stage`: weight rows [o0, o0 + no) (out_row) at row stride
// p.wstride (16-byte pieces from the aligned address at or below each row's
// first byte, so byte s lands at offset (s & 15) of its row's window; nothing
// at or past w_end is read), then the int8 activations and the block meta of
// rows [r0, r0 + nr) (both 16-byte aligned in the scratch). Weights and
// activations are separate functions so that a CTA's first weights can be
// issued before pdl_wait() (early_weights); one commit covers both.
//
// A warp stages whole rows, its lanes consecutive pieces: the row's window is worked out once per
// row (warp-uniform) and a piece costs an add and a cp.async. (Spreading row x piece over the CTA's
// threads cost an integer division per piece: ~66 instructions a piece, twice the one-row dot
// kernel's arithmetic, in a kernel the profile found issue-bound; docs/cuda_backend.md.)
template <int kDtype>
__device__ __forceinline__ void stage_weights(const IntParams& p, uint8_t* stage, int part, int64_t o0, int no) {
    constexpr int SB = kIntSliceBytes<kDtype>;  // 8 blocks' bytes (Q6_K: whole slices only, 210)
    const int64_t b0 = (int64_t)part * p.ps * kIntSliceBlocks;
    const int nblk = (int)min((int64_t)p.ps * kIntSliceBlocks, p.nb - b0);
    const int len = nblk * SB / kIntSliceBlocks;
    const int nw = p.threads >> 5, lane = threadIdx.x & 31;
    for (int row = threadIdx.x >> 5; row < no; row += nw) {
        const uint8_t* s = p.w + out_row<kDtype>(p, o0, row) * p.w_row_bytes + b0 * SB / kIntSliceBlocks;
        const uint8_t* a = s - addr_delta16(s);
        const int np = (int)((s + len - a + 15) >> 4);
        uint8_t* dst = stage + row * p.wstride;
        if (a + 16 * (int64_t)np <= p.w_end) {  // the common case: every piece whole
#pragma unroll 2
            for (int pc = lane; pc < np; pc += 32) cp_async16z(dst + 16 * pc, a + 16 * pc, 16);
        } else {
            for (int pc = lane; pc < np; pc += 32) {
                const uint8_t* src = a + 16 * pc;
                const int64_t left = p.w_end - src;
                cp_async16z(dst + 16 * pc, src, left >= 16 ? 16 : (left > 0 ? (int)left : 0));
            }
        }
    }
}

// The activations of rows [r0, r0 + nr): per row 2 pieces a block of int8 values, then the meta;
// (row, piece) advances by the thread count without a division.
template <int kR>
__device__ __forceinline__ void stage_acts(const IntParams& p, uint8_t* stage, int part, int64_t r0, int nr) {
    const int64_t b0 = (int64_t)part * p.ps * kIntSliceBlocks;
    const int nblk = (int)min((int64_t)p.ps * kIntSliceBlocks, p.nb - b0);
    uint8_t* xs = stage + p.no * p.wstride;
    const int xp = 2 * nblk, mp = (nblk + 1) / 2, per = xp + mp;  // 16-byte pieces per row
    int r = 0, pc = threadIdx.x;
    while (pc >= per && r < nr) pc -= per, ++r;
    while (r < nr) {
        if (pc < xp)
            cp_async16z(xs + r * p.xbytes + 16 * pc, p.xq + (r0 + r) * p.k + b0 * 32 + 16 * pc, 16);
        else
            cp_async16z(xs + kR * p.xbytes + r * p.mbytes + 16 * (pc - xp),
                        reinterpret_cast<const uint8_t*>(p.meta + (r0 + r) * p.nbp + b0) + 16 * (pc - xp), 16);
        pc += p.threads;
        while (pc >= per && r < nr) pc -= per, ++r;
    }
}

template <int kDtype, int kR, bool kFused = false>
__device__ __forceinline__ void stage_part(const IntParams& p, uint8_t* stage, int part, int64_t o0, int no,
                                           int64_t r0, int nr) {
    stage_weights<kDtype>(p, stage, part, o0, no);
    if (!kFused) stage_acts<kR>(p, stage, part, r0, nr);  // kFused: the activations already sit in shared memory
}

// Before pdl_wait() (cuda_pdl.cuh): the weights of part 0 of the CTA's first tile (tile_no outputs
// a tile) into stage 0, so they stream in while the previous kernel drains. Reads only the weights,
// which no kernel writes, and writes only this CTA's shared memory; the kernel stages that tile's
// activations after the wait, and the one commit after them covers both.
template <int kDtype>
__device__ __forceinline__ void early_weights(const IntParams& p, int tile_no) {
    const int tile = (int)blockIdx.x;
    if (tile >= p.n_tiles) return;
    const int64_t o0 = (int64_t)(tile / p.n_row_tiles) * tile_no;
    stage_weights<kDtype>(p, mma_smem(), 0, o0, (int)min((int64_t)tile_no, p.n_out - o0));
}

// The dot kernels' form (int_dot_tiles knows which parts came before the wait): the weights of parts
// [0, dot_early_parts) of the first tile, part j into stage buffer j. Weights only, as above: staging
// more of them before the wait moves where a byte is requested, never which byte lands where.
template <int kDtype>
__device__ __forceinline__ void early_dot_weights(const IntParams& p) {
    const int tile = (int)blockIdx.x;
    if (tile >= p.n_tiles) return;
    const int64_t o0 = (int64_t)(tile / p.n_row_tiles) * p.no;
    const int no = (int)min((int64_t)p.no, p.n_out - o0), ne = dot_early_parts<kDtype>(p);
    for (int j = 0; j < ne; ++j) stage_weights<kDtype>(p, mma_smem() + j * p.stage_bytes, j, o0, no);
}

// Block j of the slice for every row of the tile: xs/ms point at the slice's
// staged activations and meta of row 0 (rows p.xbytes / p.mbytes apart).
template <int kDtype, int kR>
__device__ __forceinline__ void block_rows(const IntParams& p, const IntBlock<kDtype>& wb, const uint8_t* xs,
                                           const uint8_t* ms, int j, int nr, float (&acc)[kR]) {
#pragma unroll
    for (int r = 0; r < kR; ++r) {
        if (kR == 1 || r < nr) {
            const uint4* xp = reinterpret_cast<const uint4*>(xs + r * p.xbytes + 32 * j);
            const uint4 xa = xp[0], xb = xp[1];
            const uint2 m = *reinterpret_cast<const uint2*>(ms + r * p.mbytes + 8 * j);
            const int dot = int_block_dot<kDtype>(wb, xa, xb);
            acc[r] = int_block_fold<kDtype>(acc[r], wb.d, wb.m, dot, __uint_as_float(m.x), (int)m.y);
        }
    }
}

// The blocks of one slice in order (kFull: all 8, no bounds checks).
template <int kDtype, int kR, int kC, int kJ, bool kFull>
__device__ __forceinline__ void slice_blocks(const IntParams& p, const uint8_t* base, const uint8_t* xs,
                                             const uint8_t* ms, int nbs, int nr, float (&acc)[kR]) {
    if constexpr (kJ < kIntSliceBlocks) {
        if (kFull || kJ < nbs) {
            const IntBlock<kDtype> wb = load_block<kDtype, kC, kJ>(base);
            block_rows<kDtype, kR>(p, wb, xs, ms, kJ, nr, acc);
        }
        slice_blocks<kDtype, kR, kC, kJ + 1, kFull>(p, base, xs, ms, nbs, nr, acc);
    }
}

template <int kDtype, int kR, int kC>
__device__ __forceinline__ void slice_at(const IntParams& p, const uint8_t* base, const uint8_t* xs,
                                         const uint8_t* ms, int nbs, int nr, float (&acc)[kR]) {
    if (nbs == kIntSliceBlocks) slice_blocks<kDtype, kR, kC, 0, true>(p, base, xs, ms, nbs, nr, acc);
    else slice_blocks<kDtype, kR, kC, 0, false>(p, base, xs, ms, nbs, nr, acc);
}

// A slice from any 2-byte aligned start (rows whose alignment differs from
// the common case go through the same integers and the same fold).
template <int kDtype, int kR>
__device__ __forceinline__ void slice_any(const IntParams& p, const uint8_t* sp, const uint8_t* xs,
                                          const uint8_t* ms, int nbs, int nr, float (&acc)[kR]) {
    for (int j = 0; j < nbs; ++j) {
        IntBlock<kDtype> wb;
        if constexpr (kIntSuper<kDtype>) wb = int_kblock<kDtype, 2>(sp, j);  // Q4_K: from the slice's start
        else wb = int_block_any<kDtype>(sp + j * IntW<kDtype>::kBytes);
        block_rows<kDtype, kR>(p, wb, xs, ms, j, nr, acc);
    }
}

// A Q6_K slice (one super-block, always 8 blocks) from its 2-byte aligned start: its 16-byte phase
// changes from slice to slice (210 bytes), so its words come through Q6Src (cuda_int_q6k.cuh).
template <int kR>
__device__ __forceinline__ void slice_q6k(const IntParams& p, const uint8_t* sb, const uint8_t* xs,
                                          const uint8_t* ms, int nr, float (&acc)[kR]) {
    const Q6Src src(sb);
#pragma unroll
    for (int j = 0; j < kIntSliceBlocks; ++j) {
        const IntBlock<STRATA_Q6_K> wb = int_block_q6k(src, j);
        block_rows<STRATA_Q6_K, kR>(p, wb, xs, ms, j, nr, acc);
    }
}

// The fused kernel's pre-pass: rows [r0, r0 + nr) of x quantized into shared
// memory (int_quant_rows, cuda_int_act.cuh: the pre-pass's bits) at act: int8
// values at row stride xbytes, meta at mbytes, then RMSNORM's ssq per chunk and
// the per-block sums of squares it is folded from.
struct DotActLayout {
    uint8_t* act;
    int rows, xbytes, mbytes, n_slices, nb;
    __device__ __forceinline__ int8_t* xq(int r, int e) const { return reinterpret_cast<int8_t*>(act + r * xbytes + e); }
    __device__ __forceinline__ uint2* meta(int r, int b) const {
        return reinterpret_cast<uint2*>(act + rows * xbytes + r * mbytes) + b;
    }
    __device__ __forceinline__ float* ssq(int r) const {
        return reinterpret_cast<float*>(act + rows * (xbytes + mbytes)) + r * n_slices;
    }
    __device__ __forceinline__ float* wsq(int r) const {
        return reinterpret_cast<float*>(act + rows * (xbytes + mbytes)) + rows * n_slices + r * nb;
    }
};

template <int kPro>
__device__ __forceinline__ void fused_quant_rows(const IntParams& p, uint8_t* act, int64_t r0, int nr) {
    const IntActSrc src{p.x, p.x_stride, p.k, p.norm, p.nb, p.n_slices, p.threads};
    int_quant_rows<kPro>(src, DotActLayout{act, p.act_rows, p.xbytes, p.mbytes, p.n_slices, p.nb}, r0, nr);
}

__device__ __forceinline__ void fused_quant(const IntParams& p, uint8_t* act, int64_t r0, int nr) {
    switch (p.prologue) {
    case STRATA_PROLOGUE_RMSNORM: fused_quant_rows<STRATA_PROLOGUE_RMSNORM>(p, act, r0, nr); break;
    case STRATA_PROLOGUE_SILU_MUL: fused_quant_rows<STRATA_PROLOGUE_SILU_MUL>(p, act, r0, nr); break;
    default: fused_quant_rows<STRATA_PROLOGUE_NONE>(p, act, r0, nr); break;
    }
}

// strata_matmul_prefetch's hint, at the end of the kernel: the grid's last pf_ctas CTAs (the last to
// start, so about the last to finish) ask L2 for the lines of the next matmul's weights, which then
// stream while the kernels between the two matmuls (activation pre-pass, rope and attention, ...) wait
// on their inputs instead of leaving DRAM idle. Nothing is read into registers and the kernel does not
// wait for the lines: no result depends on it (docs/cuda_backend.md, "L2 prefetch").
__device__ __forceinline__ void prefetch_tail(const IntParams& p) {
    const int first = (int)gridDim.x - p.pf_ctas;
    if ((int)blockIdx.x < first) return;
    const int64_t step = (int64_t)p.pf_ctas * blockDim.x;
    for (int64_t i = (int64_t)((int)blockIdx.x - first) * blockDim.x + threadIdx.x; i < p.pf_lines; i += step)
        prefetch_l2(p.pf + 128 * i);
}

// The hand-off emission's layout of one chunk c (blocks 8c.., one row): the pre-pass's global blocks
// at the chunk's offsets, the block sums of squares in shared memory.
struct EmitChunkLayout {
    int8_t* xq_c;
    uint2* meta_c;
    float* ssq_c;
    float* wsq_s;
    __device__ __forceinline__ int8_t* xq(int, int e) const { return xq_c + e; }
    __device__ __forceinline__ uint2* meta(int, int b) const { return meta_c + b; }
    __device__ __forceinline__ float* ssq(int) const { return ssq_c; }
    __device__ __forceinline__ float* wsq(int) const { return wsq_s; }
};

// Chunk c of the next call's row (values [256c, 256c + 256) of emit_k) from y, now complete in
// memory: int_quant_rows over that window alone gives the pre-pass CTA (row 0, chunk c) bits (its
// per-element steps; ssq: the chunk's 8 block sums in order, +0 past the end). Read through L2.
template <int kPro>
__device__ __forceinline__ void emit_chunk(const IntParams& p, int c, float* wsq) {
    const int64_t e0 = (int64_t)c * 256;
    const int nb = (int)min((int64_t)8, p.emit_k / 32 - 8 * (int64_t)c);
    const IntActSrc src{p.y + e0, p.emit_k, p.emit_k, kPro == STRATA_PROLOGUE_RMSNORM ? p.emit_norm + e0 : nullptr,
                        nb, 1, p.threads};
    const EmitChunkLayout lay{p.emit_xq + e0, p.emit_meta + 8 * (int64_t)c, p.emit_ssq + c, wsq};
    int_quant_rows<kPro, EmitChunkLayout, true>(src, lay, 0, 1);
}

// After a one-row tile's y stores (outputs [o0, o0 + no)): count them into each chunk of the next
// call's row they belong to (SILU_MUL: output o < emit_k is gate value o, else up value o - emit_k);
// the CTA whose count completes a chunk (256 values, or 512 with SILU_MUL's two halves; fewer at the
// end) rounds it and resets its counter. The last-block protocol with one fencing thread: the CTA
// barrier orders every thread's y store before thread 0's release fence, thread 0 counts with one
// relaxed atomic per chunk, and where its CTA completes a chunk its acquire fence, then the barrier,
// order the other CTAs' stores before every thread's reads (the pattern of a cooperative grid
// barrier). Ends with a barrier.
__device__ __forceinline__ void emit_tile(const IntParams& p, int64_t o0, int no) {
    int* flags = reinterpret_cast<int*>(mma_smem() + p.emit_off);      // [0, 4): chunks to round, [4]: count
    float* wsq = reinterpret_cast<float*>(mma_smem() + p.emit_off + 32);  // 8 block sums (RMSNORM)
    __syncthreads();
    if (threadIdx.x == 0) {
        gpu_fence_acq_rel();  // release: this CTA's y stores before its counts
        const int64_t kh = p.emit_k;
        const int mult = p.emit_pro == STRATA_PROLOGUE_SILU_MUL ? 2 : 1;
        int n = 0;
        for (int64_t o = o0; o < o0 + no;) {
            const int64_t half = o < kh ? 0 : kh, c = (o - half) / 256;
            const int64_t end = min(o0 + no, half + min((c + 1) * 256, kh));
            const int add = (int)(end - o), target = (int)(min((c + 1) * 256, kh) - c * 256) * mult;
            if (atomicAdd(p.emit_cnt + c, add) + add == target && n < 4) flags[n++] = (int)c;
            o = end;
        }
        if (n > 0) gpu_fence_acq_rel();  // acquire: the other CTAs' stores before this CTA's reads
        flags[4] = n;
    }
    __syncthreads();
    const int n = flags[4];
    for (int i = 0; i < n; ++i) {
        const int c = flags[i];
        switch (p.emit_pro) {
        case STRATA_PROLOGUE_RMSNORM: emit_chunk<STRATA_PROLOGUE_RMSNORM>(p, c, wsq); break;
        case STRATA_PROLOGUE_SILU_MUL: emit_chunk<STRATA_PROLOGUE_SILU_MUL>(p, c, wsq); break;
        default: emit_chunk<STRATA_PROLOGUE_NONE>(p, c, wsq); break;
        }
        if (threadIdx.x == 0) p.emit_cnt[c] = 0;
        __syncthreads();
    }
}

// The local emission: output o0 + t of this one-row tile, held by fold thread t (t < no, whole warps:
// no is a multiple of 32), is element o0 + t of the next call's row, and warp w's 32 values are
// that row's block (o0 / 32 + w). Each warp runs the pre-pass kernel's per-block steps on them
// exactly (int_prepass_kernel: the same per-element function and int_act_round_warp; for
// RMSNORM the block's sum of squares is warp_sum of fmaf(x, x, 0), the value the pre-pass folds
// into its chunk sum), so the blocks are the pre-pass's bits; RMSNORM's chunk sums are left to the
// consumer (ssq_blocks). `g`: the norm weight of element o0 + t, loaded when the tile started.
__device__ __forceinline__ void emit_blocks(const IntParams& p, int64_t e, float xv, float g) {
    const float v = p.emit_pro == STRATA_PROLOGUE_RMSNORM ? __fmul_rn(xv, g) : xv;  // int_act_value's step
    uint2 m;
    p.emit_xq[e] = (int8_t)int_act_round_warp(v, m);
    const bool lead = (threadIdx.x & 31) == 0;
    if (lead) p.emit_meta[e >> 5] = m;
    if (p.emit_pro == STRATA_PROLOGUE_RMSNORM) {
        const float w = warp_sum(fmaf(xv, xv, 0.0f));
        if (lead) p.emit_ssq[e >> 5] = w;
    }
}

// The local emission of SILU_MUL's input (IntParams::pair_half): fold thread t < 32 holds gate output
// o0 / 2 + t and thread 32 + t the up output of the same element, so the up values go through shared
// memory (`xch`: the slice partials, free once every thread is past the fold) and warp 0 forms
// int_act_value<SILU_MUL>'s silu(gate) * up, then rounds the block as the pre-pass does
// (int_act_round_warp): the pre-pass's bits for element block o0 / 64 of the next call's row.
// Called by every thread of the CTA (two barriers).
__device__ __forceinline__ void emit_pair(const IntParams& p, int64_t o0, float yv, float* xch) {
    const int t = threadIdx.x;
    __syncthreads();  // every thread is past the fold's reads of the partials
    if (t >= 32 && t < 64) xch[t - 32] = yv;
    __syncthreads();
    if (t < 32) {
        const float v = int_act_value<STRATA_PROLOGUE_SILU_MUL>(yv, xch, t);  // silu(gate) * up, aux[t] = up
        const int64_t e = (o0 >> 1) + t;
        uint2 m;
        p.emit_xq[e] = (int8_t)int_act_round_warp(v, m);
        if (t == 0) p.emit_meta[e >> 5] = m;
    }
}

// The one-row and 8-row dot kernel's tiles, after its wait (int_dot_kernel, int_dot_rope_kernel).
// kFused: no pre-pass; the CTA quantizes its tile's rows itself (fused_quant) while the first
// part's weights are in flight, once per row tile it meets. kRope (one row, no kFused): the rope
// and KV store epilogue (cuda_rope_epilogue.cuh). kL2 (the one-row chain kernel): what other CTAs wrote
// earlier in the same kernel (RMSNORM's block sums, the y an accumulating call adds to) is read
// through L2, since L1 is not coherent within a kernel; the values read are the same.
template <int kDtype, int kR, bool kFused, bool kRope, bool kL2 = false>
__device__ __forceinline__ void int_dot_tiles(const IntParams& p) {
    static_assert(!kRope || (kR == 1 && !kFused), "the rope epilogue is for the one-row kernel");
    constexpr int SB = kIntSliceBytes<kDtype>;  // a multiple of 16 (Q6_K: 210, read through Q6Src)
    static_assert(SB % 16 == 0 || kDtype == STRATA_Q6_K, "a slice must span whole 16-byte windows");
    uint8_t* smem = mma_smem();
    const int nbuf = dot_nbuf(p), ahead = nbuf == 3 ? 2 : 1;  // stage buffers; parts staged ahead
    float* part = reinterpret_cast<float*>(smem + nbuf * p.stage_bytes);  // [ps][no][kR]
    const int t = threadIdx.x;
    const int o_l = t % p.no, s_l = t / p.no;  // this thread's unit in every part
    const int fo = t / kR, fr = t % kR;        // this thread's element in the fold
    uint8_t* act = smem + p.act_off;           // kFused: this CTA's quantized rows
    float* rsq = reinterpret_cast<float*>(smem + p.rsq_off);  // RMSNORM's factor per row of the tile
    int act_rt = -1;                           // kFused: the row tile they belong to
    // Tiles in row-tile-major order: the CTAs of one output tile run together and share its weights in L2.
    for (int tile = blockIdx.x; tile < p.n_tiles; tile += gridDim.x) {
        const int rt = tile % p.n_row_tiles;
        const int64_t o0 = (int64_t)(tile / p.n_row_tiles) * p.no;
        const int no = (int)min((int64_t)p.no, p.n_out - o0);
        const int64_t r0 = (int64_t)rt * kR;
        const int nr = (int)min((int64_t)kR, p.n_rows - r0);
        float total = 0.0f;
        // The first tile's first `early` parts had their weights staged before the wait (early_dot_weights):
        // those parts stage their activations alone (part 0 always did; parts 1 and 2 where
        // STRATA_INT_EARLY_STAGES asked for them).
        const int early = tile == (int)blockIdx.x ? dot_early_parts<kDtype>(p) : 0;
        if (tile != (int)blockIdx.x) stage_part<kDtype, kR, kFused>(p, smem, 0, o0, no, r0, nr);
        else if (!kFused) stage_acts<kR>(p, smem, 0, r0, nr);  // the first tile: weights went before the wait
        cp_async_commit_group();
        if (ahead == 2 && p.n_parts > 1) {  // three buffers: part 1 in flight beside part 0 (uniform)
            if (kDtype == STRATA_Q6_K || early < 2) stage_part<kDtype, kR, kFused>(p, smem + p.stage_bytes, 1, o0, no, r0, nr);
            else if (!kFused) stage_acts<kR>(p, smem + p.stage_bytes, 1, r0, nr);
            cp_async_commit_group();
        }
        if (kFused && rt != act_rt) {  // CTA-uniform; the previous tile ended with a barrier
            fused_quant(p, act, r0, nr);
            act_rt = rt;
            if (p.prologue == STRATA_PROLOGUE_RMSNORM) __syncthreads();  // its ssq pass ends without one
        }
        // RMSNORM's factor per row of the tile, now, while the weights stream (its loads would
        // otherwise start only in the epilogue); the part loop's barriers publish it.
        // A local hand-off's per-block sums (one row): warp 0 folds them with its loads in one round trip
        // (every thread waits for the factor at the part loop's first barrier, and one thread's 16 chunks
        // of 8 loads would each be a round trip there).
        if (p.prologue == STRATA_PROLOGUE_RMSNORM && kR == 1 && !kFused && p.ssq_blocks) {
            if (t < 32) {
                const float f = int_rms_factor_blocks_warp<kL2>(p.ssq + r0 * p.nb, p.nb, p.k, p.eps);
                if (t == 0) rsq[0] = f;
            }
        } else if (p.prologue == STRATA_PROLOGUE_RMSNORM && t < nr) {
            const float* sq = kFused ? reinterpret_cast<const float*>(act + p.act_rows * (p.xbytes + p.mbytes)) +
                                           t * p.n_slices
                                     : p.ssq + (r0 + t) * p.n_slices;
            rsq[t] = int_rms_factor<kL2>(sq, p.n_slices, p.k, p.eps);
        }
        // The local emission's norm weight for this thread's output, loaded now for the same reason.
        float emit_g = 0.0f;
        if (kR == 1 && p.emit_local && p.emit_pro == STRATA_PROLOGUE_RMSNORM && t < no) emit_g = __ldg(p.emit_norm + o0 + t);
        // The rope epilogue's angle and cache address for this thread's output, for the same reason;
        // kept in shared memory (its own slot: no barrier), since held in registers across the weight
        // loop they spilled at the 64-register cap.
        if constexpr (kRope)
            if (t < no) rope_epi_slots<kDotThreads>()[t] = rope_epi_prepare(p.rope, o0 + t);
        for (int q = 0; q < p.n_parts; ++q) {
            // Part q + ahead into the buffer part q - 1 left (every thread is past it: the barrier
            // after its compute), then wait until part q's group is done, `newer` groups after it.
            if (q + ahead < p.n_parts) {
                uint8_t* st = smem + ((q + ahead) % nbuf) * p.stage_bytes;
                if (kDtype == STRATA_Q6_K || q + ahead >= early) stage_part<kDtype, kR, kFused>(p, st, q + ahead, o0, no, r0, nr);
                else if (!kFused) stage_acts<kR>(p, st, q + ahead, r0, nr);
                cp_async_commit_group();
            }
            const int newer = min(ahead, p.n_parts - 1 - q);
            if (newer >= 2) cp_async_wait_group<2>();
            else if (newer == 1) cp_async_wait_group<1>();
            else cp_async_wait_group<0>();
            __syncthreads();
            const int s = q * p.ps + s_l;
            if (s_l < p.ps && s < p.n_slices && o_l < no) {
                const int nbs = (int)min((int64_t)kIntSliceBlocks, p.nb - (int64_t)s * kIntSliceBlocks);
                const uint8_t* g = p.w + out_row<kDtype>(p, o0, o_l) * p.w_row_bytes + (int64_t)q * p.ps * SB;  // the part's first byte
                const int delta = addr_delta16(g);
                const uint8_t* st = smem + (q % nbuf) * p.stage_bytes;
                const uint8_t* base = st + o_l * p.wstride + s_l * SB;  // 16-byte aligned
                const uint8_t* xs = kFused ? act + s * kIntSliceBlocks * 32
                                           : st + p.no * p.wstride + s_l * kIntSliceBlocks * 32;
                const uint8_t* ms = kFused ? act + p.act_rows * p.xbytes + s * kIntSliceBlocks * 8
                                           : st + p.no * p.wstride + kR * p.xbytes + s_l * kIntSliceBlocks * 8;
                float acc[kR];
#pragma unroll
                for (int r = 0; r < kR; ++r) acc[r] = 0.0f;
                if constexpr (kDtype == STRATA_Q6_K) slice_q6k<kR>(p, base + delta, xs, ms, nr, acc);
                else switch (delta) {
                case 0: slice_at<kDtype, kR, 0>(p, base, xs, ms, nbs, nr, acc); break;
                case 4: slice_at<kDtype, kR, 4>(p, base, xs, ms, nbs, nr, acc); break;
                case 8: slice_at<kDtype, kR, 8>(p, base, xs, ms, nbs, nr, acc); break;
                case 12: slice_at<kDtype, kR, 12>(p, base, xs, ms, nbs, nr, acc); break;
                default: slice_any<kDtype, kR>(p, base + delta, xs, ms, nbs, nr, acc); break;
                }
                float* pp = part + (s_l * p.no + o_l) * kR;
#pragma unroll
                for (int r = 0; r < kR; ++r)
                    if (r < nr) pp[r] = acc[r];
            }
            __syncthreads();
            if (fo < no && fr < nr) {
                const int nsl = min(p.ps, p.n_slices - q * p.ps);
                for (int sl = 0; sl < nsl; ++sl) {
                    const float v = part[(sl * p.no + fo) * kR + fr];
                    total = (q == 0 && sl == 0) ? v : __fadd_rn(total, v);
                }
            }
        }
        if constexpr (kRope) {
            // Whole warps of the outputs' threads exchange pair neighbours (lane ^ 1), then each
            // rotates and stores its own (no emission: launch_int_matmul never asks both).
            const bool mine = t < no;
            float yv = 0.0f;
            float* yp = p.y + o0 + t;
            if (mine) {
                if (p.prologue == STRATA_PROLOGUE_RMSNORM) total = __fmul_rn(total, rsq[0]);
                if (p.bias) total = __fadd_rn(total, __ldg(p.bias + o0 + t));
                yv = p.accumulate ? __fadd_rn(*yp, total) : total;
            }
            if ((t & ~31) < no) {
                const float other = __shfl_xor_sync(0xffffffffu, yv, 1);
                if (mine) *yp = rope_epi_apply(rope_epi_slots<kDotThreads>()[t], yv, other);
            }
        } else {
            float yv = 0.0f;
            if (fo < no && fr < nr) {
                const int64_t row = r0 + fr, o = kR == 1 ? out_row<kDtype>(p, o0, fo) : o0 + fo;
                if (p.prologue == STRATA_PROLOGUE_RMSNORM) total = __fmul_rn(total, rsq[fr]);
                if (p.bias) total = __fadd_rn(total, __ldg(p.bias + o));
                float* yp = p.y + row * p.y_stride + o;
                if constexpr (kL2) yv = p.accumulate ? __fadd_rn(__ldcg(yp), total) : total;
                else yv = p.accumulate ? __fadd_rn(*yp, total) : total;
                *yp = yv;
                if (kR == 1 && p.emit_local && p.pair_half == 0) emit_blocks(p, o, yv, emit_g);  // whole warps (no % 32 == 0)
            }
            if constexpr (kR == 1 && kDtype != STRATA_Q6_K)
                if (p.pair_half > 0) emit_pair(p, o0, yv, part);  // every thread: CTA barriers
        }
        if constexpr (kR == 1)
            if (p.emit_pro >= 0 && !p.emit_local) emit_tile(p, o0, no);  // ends with a barrier
        __syncthreads();  // the next tile restages buffer 0, rewrites `part` (and may requantize)
    }
    if (p.pf_lines > 0) prefetch_tail(p);
}

template <int kDtype, int kR, bool kFused>
__global__ void __launch_bounds__(kDotThreads) int_dot_kernel(const IntParams p) {
    early_dot_weights<kDtype>(p);  // weights only, before the wait
    pdl_wait();
    pdl_launch_dependents();
    int_dot_tiles<kDtype, kR, kFused, false>(p);
}

// strata_matmul_rope_kv_store's one-row kernel: a kernel of its own so that the others keep their
// registers (the epilogue's sincosf and pow took the one-row kernel from 63 to 128 registers, halving
// its CTAs per SM), capped at 64 (4 CTAs of 256 threads per SM, as the plain one-row kernel).
constexpr int kRopeEpiSmem = kDotThreads * (int)sizeof(RopeEpi);  // its static shared memory (rope_epi_slots)
template <int kDtype>
__global__ void __launch_bounds__(kDotThreads, 4) int_dot_rope_kernel(const IntParams p) {
    early_dot_weights<kDtype>(p);  // weights only, before the wait
    pdl_wait();
    pdl_launch_dependents();
    int_dot_tiles<kDtype, 1, false, true>(p);
}

// ---------------------------------------------------------------- the one-row chain kernel

// strata_matmul_chain_begin / _end (cuda_kernels.cuh DotChain): up to kDotChainMax one-row dot calls,
// each reading the blocks the one before it emitted locally (o -> gate_up -> down of a decoder layer, and
// the next layer's qkv under STRATA_MATMUL_CHAIN=2),
// in ONE kernel: a grid barrier between them instead of a kernel boundary. Each call runs
// int_dot_tiles exactly as its own launch would (which CTA holds a tile never changes an output's
// arithmetic), with its reads of the earlier calls' writes through L2 (kL2). A later call's first-tile
// weights are staged before the barrier, as early_weights stages them before pdl_wait: weights are
// never written. The grid is capped at what fits on the GPU at once, so every CTA reaches every
// barrier: the next kernel is let in (pdl_launch_dependents) only once every CTA of this one has
// started, and CTAs waiting for the previous kernel's SMs get them when it ends.
//
// A held call whose emission is not made in its own epilogue (the 8B's gate_up and down, the 1B's down:
// launch_matmul's pre-pass launch) takes the pre-pass as a phase of the chain instead: pre[i] (nchunks
// > 0) runs after call i, behind a barrier of its own, with the pre-pass kernel's per-element steps
// and sums in its order (chain_prepass), its reads of call i's y through L2.
struct ChainParams {
    IntParams p[kDotChainMax];
    PreParams pre[kDotChainMax];  // nchunks 0: none after that call
    int n;
    int red_off;        // the pre-pass phases' 8 warp sums: dynamic shared memory past every call's layout
    unsigned* barrier;  // [0]: arrivals (back to 0 at every crossing), [1]: the crossing's generation
};
static_assert(sizeof(ChainParams) <= 4096, "a kernel's parameters: 4 KB on every toolkit this builds with");

__device__ __forceinline__ unsigned ld_acquire_gpu(const unsigned* p) {
#if defined(__CUDA_ARCH__)
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
#else
    return __atomic_load_n(p, __ATOMIC_ACQUIRE);
#endif
}

// Every CTA of the grid arrives before any leaves; the CTA's writes before it are visible to every
// CTA's reads after it (the fences around thread 0's arrival; L2 reads, kL2). The last arrival resets
// the count and bumps the generation the others wait on, so the words need no reset between crossings,
// calls or graph replays.
__device__ __forceinline__ void chain_barrier(unsigned* b) {
    __syncthreads();  // the CTA's writes before thread 0's fence
    if (threadIdx.x == 0) {
        const unsigned gen = ld_acquire_gpu(b + 1);  // cannot move before this CTA arrives
        __threadfence();
        if (atomicAdd(b, 1u) == gridDim.x - 1) {
            atomicAdd(b, 0u - gridDim.x);  // every CTA has arrived: back to 0 for the next crossing
            __threadfence();
            atomicAdd(b + 1, 1u);
        } else {
            while (ld_acquire_gpu(b + 1) == gen) {
            }
        }
        __threadfence();
    }
    __syncthreads();
}

// The pre-pass of one row (int_prepass_kernel's CTA of chunk c, for every chunk) as a phase of the chain:
// the CTAs take the chunks in turn, a CTA's warps the chunk's 8 blocks in turn (a block's values and its
// rounding are one warp's, as there); RMSNORM's chunk sum is block_sum's: each block's warp_sum of the
// squares, then the 8 added in order from shared memory (`red`). x was written earlier in this kernel by
// other CTAs: read through L2.
template <int kPro>
__device__ __forceinline__ void chain_prepass_pro(const PreParams& p, float* red) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = (int)(blockDim.x >> 5);
    const float* xr = p.x;
    for (int c = blockIdx.x; c < p.nchunks; c += gridDim.x) {
        const int b0 = c * kPreChunkBlocks;
        const int nbc = min(p.nb - b0, kPreChunkBlocks);
        for (int w = warp; w < kPreChunkBlocks; w += nw) {
            if (w < nbc) {
                const int b = b0 + w;
                const int64_t e = (int64_t)32 * b + lane;
                const float v = int_act_value<kPro, true>(__ldcg(xr + e), int_act_aux<kPro>(xr, p.norm, p.k), e);
                uint2 m;
                p.xq[e] = (int8_t)int_act_round_warp(v, m);
                if (lane == 0) p.meta[b] = m;
            }
            if (kPro == STRATA_PROLOGUE_RMSNORM) {
                const int64_t e = (int64_t)32 * (b0 + w) + lane;
                const float xv = w < nbc ? __ldcg(xr + e) : 0.0f;
                const float ss = warp_sum(fmaf(xv, xv, 0.0f));
                if (lane == 0) red[w] = ss;
            }
        }
        if (kPro == STRATA_PROLOGUE_RMSNORM) {
            __syncthreads();
            if (threadIdx.x == 0) {
                float ss = red[0];
#pragma unroll
                for (int w = 1; w < kPreChunkBlocks; ++w) ss = __fadd_rn(ss, red[w]);
                p.ssq[c] = ss;
            }
            __syncthreads();  // red is free for the next chunk
        }
    }
}

__device__ __forceinline__ void chain_prepass(const PreParams& p, int red_off) {
    float* red = reinterpret_cast<float*>(mma_smem() + red_off);
    if (p.prologue == STRATA_PROLOGUE_RMSNORM) chain_prepass_pro<STRATA_PROLOGUE_RMSNORM>(p, red);
    else if (p.prologue == STRATA_PROLOGUE_SILU_MUL) chain_prepass_pro<STRATA_PROLOGUE_SILU_MUL>(p, red);
    else chain_prepass_pro<STRATA_PROLOGUE_NONE>(p, red);
}

// Call I of the chain: the barrier after call I - 1 (and the pre-pass phase after it, if any, behind a
// barrier of its own), with call I's first weights staged before them; then its tiles. (Call 0's
// weights are staged before the kernel's pdl_wait.)
template <int kDtype, int I>
__device__ __forceinline__ void chain_call(const ChainParams& c) {
    if (c.n <= I) return;
    if constexpr (I > 0) {
        early_dot_weights<kDtype>(c.p[I]);
        if (c.pre[I - 1].nchunks > 0) {
            chain_barrier(c.barrier);
            chain_prepass(c.pre[I - 1], c.red_off);
        }
        chain_barrier(c.barrier);
    }
    int_dot_tiles<kDtype, 1, false, false, true>(c.p[I]);
}

__device__ __forceinline__ void chain_tail(const ChainParams& c, const PreParams& last) {
    if (last.nchunks > 0) {
        chain_barrier(c.barrier);
        chain_prepass(last, c.red_off);
    }
}

template <int kDtype>
__global__ void __launch_bounds__(kDotThreads, 4) int_dot_chain_kernel(const ChainParams c) {
    early_dot_weights<kDtype>(c.p[0]);  // weights only, before the wait
    pdl_wait();
    pdl_launch_dependents();
    static_assert(kDotChainMax == 4, "the calls below are unrolled (constant indices keep p in the parameter space)");
    chain_call<kDtype, 0>(c);
    chain_call<kDtype, 1>(c);
    chain_call<kDtype, 2>(c);
    chain_call<kDtype, 3>(c);
    // The last call's pre-pass phase, if any (constant indices again).
    if (c.n == 2) chain_tail(c, c.pre[1]);
    else if (c.n == 3) chain_tail(c, c.pre[2]);
    else if (c.n == 4) chain_tail(c, c.pre[3]);
}

// ---------------------------------------------------------------- mma kernel (2 rows and more)

constexpr int kMmaNO = 64;  // outputs per CTA: 4 groups of 16 (the mma's rows)
constexpr int kMmaThreads = 256, kMmaWarps = kMmaThreads / 32;

// 32 bits from a 2-byte aligned shared-memory address.
__device__ __forceinline__ uint32_t ld32_2(const uint8_t* q) {
    const uint16_t* h = reinterpret_cast<const uint16_t*>(q);
    return (uint32_t)h[0] | ((uint32_t)h[1] << 16);
}

// The same per-element arithmetic as int_dot_kernel with the integer block
// products from int8 tensor-core mma: a warp owns a unit (16 outputs, slice)
// of a part for all kR = 8·kNT rows of the tile; lane (g, t) folds the four
// elements of each n-tile it holds (outputs g and g+8, rows 2t and 2t+1)
// block by block with int_block_fold, exactly as a dp4a thread does.
template <int kDtype, int kNT>
__global__ void __launch_bounds__(kMmaThreads) int_mma_kernel(const IntParams p) {
    early_weights<kDtype>(p, kMmaNO);  // weights only, before the wait
    pdl_wait();
    pdl_launch_dependents();
    using W = IntW<kDtype>;
    constexpr int kR = 8 * kNT;
    constexpr int SB = kIntSliceBlocks * W::kBytes;
    uint8_t* smem = mma_smem();
    float* part = reinterpret_cast<float*>(smem + (p.n_parts > 1 ? 2 : 1) * p.stage_bytes);  // [ps][NO][kR]
    float* tot = part + p.ps * kMmaNO * kR;                                                    // [NO][kR]
    const int t = threadIdx.x, warp = t >> 5, lane = t & 31, g = lane >> 2, tq = lane & 3;
    float* rsq = tot + kMmaNO * kR;  // [kR]: RMSNORM's factor per row of the tile
    for (int tile = blockIdx.x; tile < p.n_tiles; tile += gridDim.x) {
        const int rt = tile % p.n_row_tiles;
        const int64_t o0 = (int64_t)(tile / p.n_row_tiles) * kMmaNO;
        const int no = (int)min((int64_t)kMmaNO, p.n_out - o0);
        const int64_t r0 = (int64_t)rt * kR;
        const int nr = (int)min((int64_t)kR, p.n_rows - r0);
        if (tile != (int)blockIdx.x) stage_part<kDtype, kR>(p, smem, 0, o0, no, r0, nr);
        else stage_acts<kR>(p, smem, 0, r0, nr);  // the first tile: weights went before the wait
        cp_async_commit_group();
        // RMSNORM's factor per row, while the weights stream (int_dot_kernel says why).
        if (p.prologue == STRATA_PROLOGUE_RMSNORM && t < nr) rsq[t] = int_rms_factor(p.ssq + (r0 + t) * p.n_slices, p.n_slices, p.k, p.eps);
        for (int q = 0; q < p.n_parts; ++q) {
            if (q + 1 < p.n_parts) {
                stage_part<kDtype, kR>(p, smem + ((q + 1) & 1) * p.stage_bytes, q + 1, o0, no, r0, nr);
                cp_async_commit_group();
                cp_async_wait_group<1>();
            } else {
                cp_async_wait_group<0>();
            }
            __syncthreads();
            const uint8_t* st = smem + (q & 1) * p.stage_bytes;
            for (int u = warp; u < (kMmaNO / 16) * p.ps; u += kMmaWarps) {  // warp-uniform
                const int og = u & 3, s_l = u >> 2, s = q * p.ps + s_l;
                if (s >= p.n_slices) continue;
                const int nbs = (int)min((int64_t)kIntSliceBlocks, p.nb - (int64_t)s * kIntSliceBlocks);
                // Rows g and g+8 of the group (rows past `no` were not staged: their results are dropped).
                const int ol0 = og * 16 + g, ol1 = ol0 + 8;
                const int64_t pbeg = (int64_t)q * p.ps * SB;
                const uint8_t* w0 = st + ol0 * p.wstride + addr_delta16(p.w + (o0 + ol0) * p.w_row_bytes + pbeg) + s_l * SB;
                const uint8_t* w1 = st + ol1 * p.wstride + addr_delta16(p.w + (o0 + ol1) * p.w_row_bytes + pbeg) + s_l * SB;
                const uint8_t* xs = st + kMmaNO * p.wstride + s_l * kIntSliceBlocks * 32;
                const uint8_t* ms = st + kMmaNO * p.wstride + kR * p.xbytes + s_l * kIntSliceBlocks * 8;
                float acc[kNT][4];
#pragma unroll
                for (int n = 0; n < kNT; ++n)
#pragma unroll
                    for (int e = 0; e < 4; ++e) acc[n][e] = 0.0f;
                for (int j = 0; j < nbs; ++j) {
                    const uint8_t* b0p = w0 + j * W::kBytes;
                    const uint8_t* b1p = w1 + j * W::kBytes;
                    const uint16_t* h0 = reinterpret_cast<const uint16_t*>(b0p);
                    const uint16_t* h1 = reinterpret_cast<const uint16_t*>(b1p);
                    float d0, d1, m0, m1;
                    uint32_t a[4];
                    if constexpr (kIntSuper<kDtype>) {  // Q4_K: block j from the slices' starts
                        float dd[2], mm[2];
                        q4k_mma_a(w0, w1, j, tq, [](const uint8_t* q) { return ld32_2(q); }, dd, mm, a);
                        d0 = dd[0]; d1 = dd[1]; m0 = mm[0]; m1 = mm[1];
                    } else {
                        d0 = f16_to_f32(h0[0]); d1 = f16_to_f32(h1[0]);
                        m0 = W::kMin ? f16_to_f32(h0[1]) : 0.0f; m1 = W::kMin ? f16_to_f32(h1[1]) : 0.0f;
                        if constexpr (W::kNibbles) {
                            const uint32_t q0 = ld32_2(b0p + W::kQuantOff + 4 * tq), q1 = ld32_2(b1p + W::kQuantOff + 4 * tq);
                            a[0] = q0 & 0x0F0F0F0Fu;
                            a[1] = q1 & 0x0F0F0F0Fu;
                            a[2] = (q0 >> 4) & 0x0F0F0F0Fu;
                            a[3] = (q1 >> 4) & 0x0F0F0F0Fu;
                        } else {
                            a[0] = ld32_2(b0p + W::kQuantOff + 4 * tq);
                            a[1] = ld32_2(b1p + W::kQuantOff + 4 * tq);
                            a[2] = ld32_2(b0p + W::kQuantOff + 16 + 4 * tq);
                            a[3] = ld32_2(b1p + W::kQuantOff + 16 + 4 * tq);
                        }
                    }
#pragma unroll
                    for (int n = 0; n < kNT; ++n) {
                        const uint8_t* xr = xs + (8 * n + g) * p.xbytes + 32 * j;
                        const uint32_t xb0 = *reinterpret_cast<const uint32_t*>(xr + 4 * tq);
                        const uint32_t xb1 = *reinterpret_cast<const uint32_t*>(xr + 16 + 4 * tq);
                        int c[4];
                        mma_i8_16832<W::kNibbles>(c, a, xb0, xb1);
                        const uint2 ma = *reinterpret_cast<const uint2*>(ms + (8 * n + 2 * tq) * p.mbytes + 8 * j);
                        const uint2 mb = *reinterpret_cast<const uint2*>(ms + (8 * n + 2 * tq + 1) * p.mbytes + 8 * j);
                        const float dxa = __uint_as_float(ma.x), dxb = __uint_as_float(mb.x);
                        acc[n][0] = int_block_fold<kDtype>(acc[n][0], d0, m0, c[0], dxa, (int)ma.y);
                        acc[n][1] = int_block_fold<kDtype>(acc[n][1], d0, m0, c[1], dxb, (int)mb.y);
                        acc[n][2] = int_block_fold<kDtype>(acc[n][2], d1, m1, c[2], dxa, (int)ma.y);
                        acc[n][3] = int_block_fold<kDtype>(acc[n][3], d1, m1, c[3], dxb, (int)mb.y);
                    }
                }
                float* pp = part + s_l * kMmaNO * kR;
#pragma unroll
                for (int n = 0; n < kNT; ++n) {
                    const int ra = 8 * n + 2 * tq;
                    pp[ol0 * kR + ra] = acc[n][0];
                    pp[ol0 * kR + ra + 1] = acc[n][1];
                    pp[ol1 * kR + ra] = acc[n][2];
                    pp[ol1 * kR + ra + 1] = acc[n][3];
                }
            }
            __syncthreads();
            const int nsl = min(p.ps, p.n_slices - q * p.ps);
            for (int e = t; e < kMmaNO * kR; e += kMmaThreads) {
                if (e / kR < no && e % kR < nr) {
                    float v = q == 0 ? part[e] : __fadd_rn(tot[e], part[e]);
                    for (int sl = 1; sl < nsl; ++sl) v = __fadd_rn(v, part[sl * kMmaNO * kR + e]);
                    tot[e] = v;
                }
            }
        }
        for (int e = t; e < kMmaNO * kR; e += kMmaThreads) {
            const int fo = e / kR, fr = e % kR;
            if (fo < no && fr < nr) {
                const int64_t row = r0 + fr, o = o0 + fo;
                float total = tot[e];
                if (p.prologue == STRATA_PROLOGUE_RMSNORM) total = __fmul_rn(total, rsq[fr]);
                if (p.bias) total = __fadd_rn(total, __ldg(p.bias + o));
                float* yp = p.y + row * p.y_stride + o;
                *yp = p.accumulate ? __fadd_rn(*yp, total) : total;
            }
        }
        __syncthreads();  // the next tile restages buffer 0 and rewrites `part` and `tot`
    }
}

// The mma kernel's shape: 64 outputs, parts of 2 slices (4 x 2 warp units).
inline void mma_shape(IntParams& p, int slice_bytes, int kr) {
    p.no = kMmaNO;
    p.ps = min(p.n_slices, 2);
    p.threads = kMmaThreads;
    p.n_parts = (p.n_slices + p.ps - 1) / p.ps;
    int ws = p.ps * slice_bytes + 16;
    ws = (ws + 15) / 16 * 16;
    if ((ws / 16) % 2 == 0) ws += 16;
    p.wstride = ws;
    p.xbytes = p.ps * kIntSliceBlocks * 32 + 16;  // rows 4 banks apart: the 8 rows of an n-tile read 8 bank groups
    p.mbytes = p.ps * kIntSliceBlocks * 8;
    p.stage_bytes = kMmaNO * ws + kr * (p.xbytes + p.mbytes);
}

inline int mma_smem_bytes(const IntParams& p, int kr) {  // stages, partials, totals, RMSNORM factors
    return (p.n_parts > 1 ? 2 : 1) * p.stage_bytes + ((p.ps + 1) * kMmaNO + 1) * kr * (int)sizeof(float);
}

// The CTA shape for kR rows per tile: NO outputs (8, 16 or 32 when there are
// enough CTAs, fewer for small matrices), PS slices per part (NO·PS <= 256
// threads; 16 at most with 8 rows, for shared memory), the part's weight rows
// at a stride that is an odd number of 16-byte windows (the 8 threads of a
// quarter warp read 8 different rows: no bank conflicts).
//
// One row (kR = 1) since 2026-12-02 evening (H200, bench/gpu_matmul.py at one row, bench/RESULTS.md):
//   - small matrices with k >= 2048 (8 slices and more) keep CTAs of at least 8 outputs: halving NO
//     down to 2 so that there are 2 CTAs per SM made 32-thread CTAs (8B k/v 6.9 us against 4.8 with
//     8 outputs, 1B q/o 6.0 against 4.6, 1B down 9.8 against 7.7; 1B tg128 1,226 -> 1,308 tok/s). At
//     shorter k (the 135M's 576 and 1,536) the many small CTAs stay: there the floor cost 3.5 % of a
//     decode step (135M tg128 794 -> 766);
//   - 4.5-bit types (Q4_0, Q4_K: 144-byte slices) at long k (more than 16 slices) with at least a
//     CTA per SM at 16 outputs: 16 outputs x 16 slices per part (256 threads, all CTAs resident at
//     once) instead of 8 x 32 (two waves): 8B down 17.6 -> 16.2 us (Q4_K 18.2 -> 16.7; Q6_K lost
//     there, 29.7 against 25.1 us for the rule below);
//   - a shape whose two stages leave an SM room for one CTA only (Q6_K's 210-byte slices at
//     k = 14,336: 128 KB) takes all of k in one part with fewer outputs per CTA where that fits
//     twice (Q6_K 8B down 31.6 -> 25.1 us).
// STRATA_INT_DOT_SHAPE=legacy restores the earlier choice; =NO:PS (an A/B switch read at each call)
// forces one: NO outputs per CTA (1-64) and PS slices per part (1-64), NO·PS <= 256. None changes a
// bit (each output still adds its slices' sums in slice order), only how many CTAs there are, how
// many bytes each has in flight and how many parts it waits for.
struct DotShapeOverride {
    int no = 0, ps = 0;
    bool legacy = false;
};

DotShapeOverride dot_shape_override() {
    DotShapeOverride o;
    const char* env = std::getenv("STRATA_INT_DOT_SHAPE");
    if (!env || !*env || std::strcmp(env, "auto") == 0) return o;
    if (std::strcmp(env, "legacy") == 0) {
        o.legacy = true;
        return o;
    }
    char* end = nullptr;
    const long no = std::strtol(env, &end, 10);
    long ps = 0;
    bool ok = end != env && *end == ':';
    if (ok) {
        const char* s = end + 1;
        ps = std::strtol(s, &end, 10);
        ok = end != s && *end == '\0';
    }
    if (!ok || no < 1 || no > 64 || ps < 1 || ps > 64 || no * ps > kDotThreads)
        fail(STRATA_ERR_INVALID_ARGUMENT, std::string("STRATA_INT_DOT_SHAPE=") + env +
                                              ": expected auto, legacy or NO:PS (outputs per CTA 1-64, slices "
                                              "per part 1-64, NO x PS <= 256), e.g. 8:16");
    o.no = (int)no;
    o.ps = (int)ps;
    return o;
}

// Where the RMSNORM factors start: after the stages and the slice partials ([ps][no][kR] floats).
inline int dot_rsq_off(const IntParams& p, int kr) {
    return dot_nbuf(p) * p.stage_bytes + (p.ps * p.no * kr * (int)sizeof(float) + 15) / 16 * 16;
}

// The rest of the layout from p.no and p.ps.
inline void dot_layout(IntParams& p, int slice_bytes, int kr, int nbuf = 2) {
    const int no = p.no;
    p.threads = 32 * ((max(no * p.ps, kr * no) + 31) / 32);  // one unit per thread; the fold has no x kr elements
    p.n_parts = (p.n_slices + p.ps - 1) / p.ps;
    p.nbuf = min(p.n_parts, nbuf);
    int ws = p.ps * slice_bytes + 16;
    ws = (ws + 15) / 16 * 16;
    if ((ws / 16) % 2 == 0) ws += 16;
    p.wstride = ws;
    p.xbytes = p.ps * kIntSliceBlocks * 32;
    p.mbytes = p.ps * kIntSliceBlocks * 8;
    p.stage_bytes = no * ws + kr * (p.xbytes + p.mbytes);
    p.rsq_off = dot_rsq_off(p, kr);
}

inline int dot_smem(const IntParams& p, int kr) {  // stages, slice partials, RMSNORM factors
    return p.rsq_off + kr * (int)sizeof(float);
}

inline void dot_shape(IntParams& p, int slice_bytes, int sms, int smem_sm, int kr) {
    const DotShapeOverride ov = kr == 1 ? dot_shape_override() : DotShapeOverride{};
    const bool lean = kr == 1 && !ov.legacy;  // the one-row choice above
    int no = p.n_slices <= 8 ? 32 : (p.n_slices <= 16 ? 16 : 8);
    while (no > (lean && p.n_slices >= 8 ? 8 : 2) && (p.n_out + no - 1) / no < 2 * sms) no /= 2;
    if (ov.no > 0) no = ov.no;
    p.no = no;
    p.ps = min(min(p.n_slices, kDotThreads / no), kr > 1 ? 16 : 32);
    if (lean && ov.no == 0 && slice_bytes <= 144 && p.n_slices > 16 && (p.n_out + 15) / 16 >= sms) p.no = 16, p.ps = 16;
    if (ov.ps > 0) p.ps = min(p.n_slices, ov.ps);
    dot_layout(p, slice_bytes, kr);
    constexpr int kRuntimeSmem = 1024;  // the runtime's shared memory per CTA
    if (lean && ov.no == 0 && smem_sm > 0 && p.n_parts > 1 && 2 * (dot_smem(p, kr) + kRuntimeSmem) > smem_sm &&
        p.n_slices <= 64) {
        IntParams q = p;
        q.no = min(p.no, kDotThreads / p.n_slices);
        q.ps = p.n_slices;
        if (q.no >= 1) {
            dot_layout(q, slice_bytes, kr);
            if (2 * (dot_smem(q, kr) + kRuntimeSmem) <= smem_sm) p = q;
        }
    }
}

// The local hand-off emission's one-row shape, after dot_shape: CTAs of whole blocks of outputs (32, 8
// slices a part, unless dot_shape's NO already is a multiple of 32 within the threads) and three
// stage buffers.
inline void dot_local_shape(IntParams& p, int slice_bytes) {
    if (p.no % 32 != 0 || p.no > p.threads) {
        p.no = 32;
        p.ps = min(p.n_slices, kDotThreads / 32);
    }
    dot_layout(p, slice_bytes, 1, 3);
}

// The local SILU_MUL emission's shape (IntParams::pair_half): CTAs of 64 outputs (32 gate, 32 up), up
// to 4 slices a part (256 threads), two stage buffers.
inline void dot_pair_shape(IntParams& p, int slice_bytes) {
    p.no = 64;
    p.ps = min(p.n_slices, kDotThreads / 64);
    dot_layout(p, slice_bytes, 1);
}

// The fused dot kernel's shape, after dot_shape: the same CTA, units and fold; only weights are
// staged, and the quantized rows (all of k) follow the slice partials.
inline void dot_fuse(IntParams& p, int kr) {
    p.threads = kDotThreads;  // the extra threads (small tiles) share the quantization and the staging
    p.act_rows = (int)min((int64_t)kr, p.n_rows);
    p.xbytes = (int)p.k;  // a multiple of 32
    p.mbytes = p.nbp * 8;
    p.stage_bytes = p.no * p.wstride;
    p.rsq_off = dot_rsq_off(p, kr);
    p.act_off = p.rsq_off + (kr * (int)sizeof(float) + 15) / 16 * 16;
}

inline int64_t dot_fused_smem(const IntParams& p) {
    const int64_t per_row = (int64_t)p.xbytes + p.mbytes +
                            (p.prologue == STRATA_PROLOGUE_RMSNORM ? 4 * ((int64_t)p.n_slices + p.nb) : 0);
    return p.act_off + p.act_rows * per_row;
}

// The fused kernel's grid: no more CTAs than fit on the GPU at once (each CTA quantizes its rows
// once, then walks several tiles), a multiple of the row tiles so each CTA keeps one row tile.
inline int64_t dot_fused_grid(const IntParams& p, int64_t resident) {
    const int64_t rt = p.n_row_tiles;
    if (resident <= 0 || resident >= p.n_tiles) return p.n_tiles;
    return max(rt, resident / rt * rt);
}

}  // namespace

// The types routed here (Q4_K: k is a whole number of super-blocks, so every slice is one). Q4_1 —
// the default model's type — joined them on 2026-12-04: its int8 activations move that model's
// logits by up to ~1 (a NumPy estimate, bench/RESULTS.md), as llama.cpp's q8_1 activations do;
// tests/test_backend_agreement.py's allowance for that is measured, like the Gemma test's.
// STRATA_INT_Q4_1=0 (read at each call) keeps Q4_1 on the f16 tensor-core path, the route before
// that (an A/B switch).
bool int_matmul_supports(int32_t w_dtype) {
    if (w_dtype == STRATA_Q4_1) {
        return env_switch("STRATA_INT_Q4_1", true, "1 (the default: the integer path) or 0 (the f16 path)");
    }
    return w_dtype == STRATA_Q4_0 || w_dtype == STRATA_Q8_0 || w_dtype == STRATA_Q4_K || w_dtype == STRATA_Q6_K;
}

namespace {

constexpr int kMaxDevices = 64;

struct IntLimits {
    int sms = 0, smem_optin = 0, smem_sm = 0;
    int chain_smem = 0;  // the dynamic shared memory every chain kernel can take (the opt-in less its static)
};

IntLimits int_limits(int dev) {
    static IntLimits cache[kMaxDevices];
    static std::mutex mu;
    std::lock_guard<std::mutex> lock(mu);
    IntLimits& d = cache[dev];
    if (d.sms == 0) {
        check(cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, dev), "cudaDeviceGetAttribute");
        check(cudaDeviceGetAttribute(&d.smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev),
              "cudaDeviceGetAttribute");
        check(cudaDeviceGetAttribute(&d.smem_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev),
              "cudaDeviceGetAttribute");
        cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;  // a function attribute, not stream work
        (void)cudaThreadExchangeStreamCaptureMode(&mode);
        const void* kernels[] = {
            (const void*)int_dot_kernel<STRATA_Q4_0, 1, false>, (const void*)int_dot_kernel<STRATA_Q4_0, kDotRows, false>,
            (const void*)int_dot_kernel<STRATA_Q8_0, 1, false>, (const void*)int_dot_kernel<STRATA_Q8_0, kDotRows, false>,
            (const void*)int_dot_kernel<STRATA_Q4_1, 1, false>, (const void*)int_dot_kernel<STRATA_Q4_1, kDotRows, false>,
            (const void*)int_dot_kernel<STRATA_Q4_0, 1, true>, (const void*)int_dot_kernel<STRATA_Q4_0, kDotRows, true>,
            (const void*)int_dot_kernel<STRATA_Q8_0, 1, true>, (const void*)int_dot_kernel<STRATA_Q8_0, kDotRows, true>,
            (const void*)int_dot_kernel<STRATA_Q4_1, 1, true>, (const void*)int_dot_kernel<STRATA_Q4_1, kDotRows, true>,
            (const void*)int_mma_kernel<STRATA_Q4_0, 1>, (const void*)int_mma_kernel<STRATA_Q4_0, 2>,
            (const void*)int_mma_kernel<STRATA_Q8_0, 1>, (const void*)int_mma_kernel<STRATA_Q8_0, 2>,
            (const void*)int_mma_kernel<STRATA_Q4_1, 1>, (const void*)int_mma_kernel<STRATA_Q4_1, 2>,
            (const void*)int_dot_kernel<STRATA_Q4_K, 1, false>, (const void*)int_dot_kernel<STRATA_Q4_K, kDotRows, false>,
            (const void*)int_dot_kernel<STRATA_Q4_K, 1, true>, (const void*)int_dot_kernel<STRATA_Q4_K, kDotRows, true>,
            (const void*)int_mma_kernel<STRATA_Q4_K, 1>, (const void*)int_mma_kernel<STRATA_Q4_K, 2>,
            (const void*)int_dot_kernel<STRATA_Q6_K, 1, false>, (const void*)int_dot_kernel<STRATA_Q6_K, kDotRows, false>,
            (const void*)int_dot_kernel<STRATA_Q6_K, 1, true>, (const void*)int_dot_kernel<STRATA_Q6_K, kDotRows, true>,
            (const void*)int_dot_rope_kernel<STRATA_Q4_0>, (const void*)int_dot_rope_kernel<STRATA_Q8_0>,
            (const void*)int_dot_rope_kernel<STRATA_Q4_1>, (const void*)int_dot_rope_kernel<STRATA_Q4_K>,
            (const void*)int_dot_rope_kernel<STRATA_Q6_K>};
        const void* chain_kernels[] = {
            (const void*)int_dot_chain_kernel<STRATA_Q4_0>, (const void*)int_dot_chain_kernel<STRATA_Q8_0>,
            (const void*)int_dot_chain_kernel<STRATA_Q4_1>, (const void*)int_dot_chain_kernel<STRATA_Q4_K>,
            (const void*)int_dot_chain_kernel<STRATA_Q6_K>};
        cudaError_t err = cudaSuccess;
        // Each kernel's limit is what its static shared memory leaves (the rope kernel's epilogue slots);
        // returns that limit.
        const auto raise = [&](const void* f) {
            cudaFuncAttributes fa{};
            if (err == cudaSuccess) err = cudaFuncGetAttributes(&fa, f);
            const int left = d.smem_optin - (int)fa.sharedSizeBytes;
            if (err == cudaSuccess) err = cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, left);
            return left;
        };
        for (const void* f : kernels) raise(f);
        d.chain_smem = d.smem_optin;
        for (const void* f : chain_kernels) d.chain_smem = std::min(d.chain_smem, raise(f));
        (void)cudaThreadExchangeStreamCaptureMode(&mode);
        if (err != cudaSuccess) d.sms = 0;
        check(err, "cudaFuncSetAttribute (integer matmul)");
    }
    return d;
}

using IntKernel = void (*)(IntParams);

IntKernel dot_kernel_for(int32_t w_dtype, int kr, bool fused, bool rope = false) {
    if (rope) {  // kr 1, not fused (launch_int_matmul's rope_here)
        switch (w_dtype) {
        case STRATA_Q4_0: return int_dot_rope_kernel<STRATA_Q4_0>;
        case STRATA_Q8_0: return int_dot_rope_kernel<STRATA_Q8_0>;
        case STRATA_Q4_1: return int_dot_rope_kernel<STRATA_Q4_1>;
        case STRATA_Q4_K: return int_dot_rope_kernel<STRATA_Q4_K>;
        case STRATA_Q6_K: return int_dot_rope_kernel<STRATA_Q6_K>;
        default: return nullptr;
        }
    }
    switch (w_dtype) {
    case STRATA_Q4_0:
        return kr == 1 ? (fused ? int_dot_kernel<STRATA_Q4_0, 1, true> : int_dot_kernel<STRATA_Q4_0, 1, false>)
                       : (fused ? int_dot_kernel<STRATA_Q4_0, kDotRows, true> : int_dot_kernel<STRATA_Q4_0, kDotRows, false>);
    case STRATA_Q8_0:
        return kr == 1 ? (fused ? int_dot_kernel<STRATA_Q8_0, 1, true> : int_dot_kernel<STRATA_Q8_0, 1, false>)
                       : (fused ? int_dot_kernel<STRATA_Q8_0, kDotRows, true> : int_dot_kernel<STRATA_Q8_0, kDotRows, false>);
    case STRATA_Q4_1:
        return kr == 1 ? (fused ? int_dot_kernel<STRATA_Q4_1, 1, true> : int_dot_kernel<STRATA_Q4_1, 1, false>)
                       : (fused ? int_dot_kernel<STRATA_Q4_1, kDotRows, true> : int_dot_kernel<STRATA_Q4_1, kDotRows, false>);
    case STRATA_Q4_K:
        return kr == 1 ? (fused ? int_dot_kernel<STRATA_Q4_K, 1, true> : int_dot_kernel<STRATA_Q4_K, 1, false>)
                       : (fused ? int_dot_kernel<STRATA_Q4_K, kDotRows, true> : int_dot_kernel<STRATA_Q4_K, kDotRows, false>);
    case STRATA_Q6_K:
        return kr == 1 ? (fused ? int_dot_kernel<STRATA_Q6_K, 1, true> : int_dot_kernel<STRATA_Q6_K, 1, false>)
                       : (fused ? int_dot_kernel<STRATA_Q6_K, kDotRows, true> : int_dot_kernel<STRATA_Q6_K, kDotRows, false>);
    default: return nullptr;
    }
}

// CTAs of `fn` that fit on one SM at once (0 when unknown: the grid is then one CTA per tile).
template <typename Kernel>
int resident_ctas(Kernel fn, int threads, int smem) {
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;  // a host query, not stream work
    (void)cudaThreadExchangeStreamCaptureMode(&mode);
    int n = 0;
    const cudaError_t err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, (const void*)fn, threads, (size_t)smem);
    (void)cudaThreadExchangeStreamCaptureMode(&mode);
    if (err != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n;
}

}  // namespace

namespace {

// The activation pre-pass (step 1) of n_rows rows of x into `v` (the pre-pass layout for n_rows x k):
// its parameters, and its launch.
PreParams prepass_params(const float* x, int64_t x_stride, int64_t k, int32_t prologue, const float* norm,
                         const HandoffView& v) {
    const int64_t nb = k / 32;
    PreParams pp;
    pp.x = x;
    pp.x_stride = x_stride;
    pp.k = k;
    pp.nb = (int)nb;
    pp.nbp = (int)((nb + 1) / 2 * 2);
    pp.nchunks = (int)((nb + kPreChunkBlocks - 1) / kPreChunkBlocks);
    pp.prologue = prologue;
    pp.norm = norm;
    pp.xq = v.xq;
    pp.meta = v.meta;
    pp.ssq = v.ssq;
    return pp;
}

void launch_prepass_params(const PreParams& pp, int64_t n_rows, cudaStream_t stream) {
    const dim3 pgrid((unsigned)n_rows, (unsigned)pp.nchunks);
    switch (pp.prologue) {
    case STRATA_PROLOGUE_RMSNORM:
        launch_k(int_prepass_kernel<STRATA_PROLOGUE_RMSNORM>, pgrid, kPreThreads, 0, stream, pp);
        break;
    case STRATA_PROLOGUE_SILU_MUL:
        launch_k(int_prepass_kernel<STRATA_PROLOGUE_SILU_MUL>, pgrid, kPreThreads, 0, stream, pp);
        break;
    default: launch_k(int_prepass_kernel<STRATA_PROLOGUE_NONE>, pgrid, kPreThreads, 0, stream, pp); break;
    }
    check_launch("matmul (integer activation pre-pass)");
}

void launch_prepass(const float* x, int64_t x_stride, int64_t n_rows, int64_t k, int32_t prologue, const float* norm,
                    const HandoffView& v, cudaStream_t stream) {
    launch_prepass_params(prepass_params(x, x_stride, k, prologue, norm, v), n_rows, stream);
}

}  // namespace

// STRATA_HANDOFF (strata/env.py): how an emission asked for is made. Unset, empty or "local" = the
// one-row dot kernel rounds whole blocks of its own outputs (emit_blocks) where it can (RMSNORM and
// no prologue), a pre-pass launch after the kernel elsewhere (SILU_MUL's halves live in other CTAs);
// "1" = the one-row dot kernel's counted emission (emit_tile: the CTA completing each chunk rounds
// it); "prepass" (or "off", which also keeps the decoder from asking) = always the pre-pass launch.
// All give the same bits. Read at each call; anything else is an error naming the choices.
HandoffMode handoff_mode() {
    const char* v = std::getenv("STRATA_HANDOFF");
    if (v == nullptr || *v == '\0' || std::strcmp(v, "local") == 0) return HandoffMode::kLocal;
    if (std::strcmp(v, "1") == 0) return HandoffMode::kCounted;
    if (std::strcmp(v, "prepass") == 0 || std::strcmp(v, "off") == 0) return HandoffMode::kPrepass;
    fail(STRATA_ERR_INVALID_ARGUMENT,
         std::string("STRATA_HANDOFF=") + v + ": expected local (the default where the decoder asks for a "
                                              "hand-off), 1, prepass or off");
}

// STRATA_HANDOFF_LOCAL_PARTS (strata/env.py): the most parts of 8 slices a local emission's matmul may
// have (its k up to 2,048 x this); longer ones emit by a pre-pass launch. Read at each call.
int handoff_local_parts() {
    return (int)env_whole("STRATA_HANDOFF_LOCAL_PARTS", kHandoffLocalParts, 0, 1000000,
                          "a whole number of parts (0: never emit locally)");
}

// STRATA_HANDOFF_PAIR (strata/env.py): whether SILU_MUL's input may be emitted locally (dot_pair_shape);
// 0 = the pre-pass launch after gate_up, as before. Same bits either way; read at each call.
bool handoff_pair_enabled() {
    return env_switch("STRATA_HANDOFF_PAIR", true, "1 (the default) or 0");
}

namespace {
bool dot_chain_hold_prepass(DotChain& ch, const MatmulArgs& a, const PreParams& pp);
}  // namespace

void launch_handoff_prepass(const MatmulArgs& a, const HandoffView& v, cudaStream_t stream, DotChain* chain) {
    const PreParams pp = prepass_params(a.y, a.n_out, a.emit_k, a.emit_prologue, a.emit_norm, v);
    if (chain != nullptr) {
        if (dot_chain_hold_prepass(*chain, a, pp)) return;
        dot_chain_flush(*chain, stream);
    }
    launch_prepass_params(pp, a.n_rows, stream);
}

void launch_prepass_rows(const float* x, int64_t n_rows, int64_t k, const HandoffView& v, cudaStream_t stream) {
    launch_prepass(x, k, n_rows, k, STRATA_PROLOGUE_NONE, nullptr, v, stream);
}

namespace {

// Whether the one-row dot kernel's epilogue can take strata_matmul_rope_kv_store's rope and store
// (cuda_rope_epilogue.cuh) for a launch of `p`'s shape. The API guarantees that y is r's whole
// [q | k | v] rows and the head dims match the slot set; this adds one row, ADJACENT pairs of an even
// rot_dim that rope_kv_store takes, an F16 pool, CTAs of an even number of outputs, and
// STRATA_MATMUL_ROPE=1 (read at each call; unset or 0 = the separate launch, same bits: on the H200
// the one kernel measured no faster, docs/cuda_backend.md).
bool rope_epilogue_covers(const MatmulArgs& a, const RopeKvStoreArgs& r, const IntParams& p) {
    if (!env_switch("STRATA_MATMUL_ROPE", false, "0 (the default: the separate rope_kv_store launch) or 1")) return false;
    const int hd = r.slots.head_dim;
    if (a.n_rows != 1 || hd % 2 != 0 || p.no % 2 != 0 || p.threads % 32 != 0) return false;
    if (r.slots.kv_dtype != STRATA_KV_F16 || r.slots.kv == nullptr) return false;
    for (const strata_rope_params* q : {&r.q_params, &r.k_params})
        if (q->mode != STRATA_ROPE_ADJACENT || q->rot_dim < 2 || q->rot_dim % 2 != 0 || q->rot_dim > hd ||
            q->rot_dim / 2 > kRopeMaxHalf)
            return false;
    return true;
}

}  // namespace

// The calls a chain holds (cuda_kernels.cuh): their parameters, each one's shared memory, and the two
// barrier words of the chain kernel (their own scratch, zeroed once; the barrier leaves them so).
struct DotChain {
    ChainParams c{};  // c.n calls held, each with the parameters of its own launch
    int dtype = -1;
    int smem[kDotChainMax] = {};
    Scratch barrier;
};

DotChain* dot_chain_new() { return new DotChain(); }
void dot_chain_delete(DotChain* c) noexcept { delete c; }

namespace {

template <int kDtype>
void launch_chain_kernel(const ChainParams& c, int threads, int smem, cudaStream_t stream) {
    int dev = 0;
    check(cudaGetDevice(&dev), "cudaGetDevice");
    const IntLimits lim = int_limits(dev);
    const int per_sm = resident_ctas(int_dot_chain_kernel<kDtype>, threads, smem);
    if (per_sm < 1)  // 0: the runtime could not tell, or nothing fits; a chain must know (its CTAs all wait on each other)
        fail(STRATA_ERR_INTERNAL, "cuda matmul chain: the occupancy of the chain kernel is unknown or zero");
    int64_t tiles = 0;
    for (int i = 0; i < c.n; ++i) tiles = std::max<int64_t>(tiles, c.p[i].n_tiles);
    // Every CTA must be resident at once to cross the barriers: at most what fits, the tile loops take the rest.
    const int64_t grid = std::min<int64_t>(tiles, (int64_t)per_sm * lim.sms);
    launch_k(int_dot_chain_kernel<kDtype>, (unsigned)grid, threads, smem, stream, c);
    check_launch("matmul chain (integer)");
}

// Holds a one-row dot call (launch_int_matmul's parameters `p`, shared memory `smem`) in the chain,
// first launching what is held where it cannot join them (another dtype, or a full chain). False: the
// chain cannot take such a call at all (its dtype has no chain kernel, or its shared memory is more than the
// chain kernel's static shared memory leaves).
bool dot_chain_hold(DotChain& ch, int32_t dtype, const IntParams& p, int smem, cudaStream_t stream) {
    if (dtype != STRATA_Q4_0 && dtype != STRATA_Q8_0 && dtype != STRATA_Q4_1 && dtype != STRATA_Q4_K &&
        dtype != STRATA_Q6_K)
        return false;
    int dev = 0;
    check(cudaGetDevice(&dev), "cudaGetDevice");
    if (smem > int_limits(dev).chain_smem) return false;  // its own kernel, launched by the caller
    if (ch.c.n > 0 && (ch.c.n == kDotChainMax || ch.dtype != dtype)) dot_chain_flush(ch, stream);
    if (ch.c.n == 0) ch.dtype = dtype;
    ch.smem[ch.c.n] = smem;
    ch.c.pre[ch.c.n] = PreParams{};  // nchunks 0: no pre-pass phase after it (yet)
    ch.c.p[ch.c.n++] = p;
    return true;
}

// The shared memory of the chain kernel for what `ch` holds: every call's layout, then (where a
// pre-pass phase runs) its 8 warp sums at *red_off.
int chain_smem(const DotChain& ch, int n, int* red_off) {
    int smem = 0;
    bool pre = false;
    for (int i = 0; i < n; ++i) smem = std::max(smem, ch.smem[i]), pre = pre || ch.c.pre[i].nchunks > 0;
    *red_off = (smem + 15) / 16 * 16;
    return pre ? *red_off + kPreChunkBlocks * (int)sizeof(float) : smem;
}

// Holds the pre-pass of `a`'s emission as a phase after `a` when `a` is the call held last (no launch
// has flushed the chain since it was held: the same y, and no pre-pass after it yet) and the phase's
// sums fit in shared memory. False: the caller launches it (after what is held).
bool dot_chain_hold_prepass(DotChain& ch, const MatmulArgs& a, const PreParams& pp) {
    const int n = ch.c.n;
    if (n == 0 || a.n_rows != 1 || ch.c.p[n - 1].y != a.y || ch.c.pre[n - 1].nchunks != 0 || pp.nchunks <= 0)
        return false;
    int dev = 0;
    check(cudaGetDevice(&dev), "cudaGetDevice");
    ch.c.pre[n - 1] = pp;
    int red_off = 0;
    if (chain_smem(ch, n, &red_off) > int_limits(dev).chain_smem) {
        ch.c.pre[n - 1] = PreParams{};
        return false;
    }
    return true;
}

}  // namespace

void dot_chain_flush(DotChain& ch, cudaStream_t stream) {
    const int n = ch.c.n;
    if (n == 0) return;
    ch.c.n = 0;  // a failed launch below leaves nothing held
    if (n == 1) {  // one call: its own kernel, exactly as launch_int_matmul launches it (and its pre-pass)
        const IntParams& p = ch.c.p[0];
        launch_k(dot_kernel_for(ch.dtype, 1, false), (unsigned)p.n_tiles, p.threads, ch.smem[0], stream, p);
        check_launch("matmul (integer)");
        if (ch.c.pre[0].nchunks > 0) launch_prepass_params(ch.c.pre[0], 1, stream);
        return;
    }
    // One CTA size for all: the largest call's. A call's threads past its own count have no unit of its
    // parts (s_l >= ps) and no output to fold, and its staging strides by the count it is given, so its
    // outputs are computed as in its own launch (the fused dot kernel's CTAs run so too: dot_fuse).
    ChainParams c = ch.c;
    c.n = n;
    int threads = 0;
    for (int i = 0; i < n; ++i) threads = std::max(threads, c.p[i].threads);
    for (int i = 0; i < n; ++i) c.p[i].threads = threads;
    const int smem = chain_smem(ch, n, &c.red_off);
    c.barrier = static_cast<unsigned*>(ch.barrier.get_zeroed(256, 2 * sizeof(unsigned), stream));
    switch (ch.dtype) {
    case STRATA_Q4_0: launch_chain_kernel<STRATA_Q4_0>(c, threads, smem, stream); break;
    case STRATA_Q8_0: launch_chain_kernel<STRATA_Q8_0>(c, threads, smem, stream); break;
    case STRATA_Q4_1: launch_chain_kernel<STRATA_Q4_1>(c, threads, smem, stream); break;
    case STRATA_Q4_K: launch_chain_kernel<STRATA_Q4_K>(c, threads, smem, stream); break;
    case STRATA_Q6_K: launch_chain_kernel<STRATA_Q6_K>(c, threads, smem, stream); break;
    default: fail(STRATA_ERR_INTERNAL, "cuda matmul chain: no chain kernel for dtype " + std::to_string(ch.dtype));
    }
}

bool launch_int_matmul(const MatmulArgs& a, cudaStream_t stream, Scratch& scratch, const HandoffView* use,
                       HandoffView* emit, int* emit_cnt, const RopeKvStoreArgs* rope, bool* rope_done,
                       DotChain* chain) {
    if (rope_done != nullptr) *rope_done = false;
    if (a.n_rows <= 0 || a.n_out <= 0) return false;
    // Before any launch of a call that is not held: the calls a chain holds run first (stream order).
    const auto flush = [&] {
        if (chain != nullptr) dot_chain_flush(*chain, stream);
    };
    int dev = 0;
    check(cudaGetDevice(&dev), "cudaGetDevice");
    if (dev < 0 || dev >= kMaxDevices) fail(STRATA_ERR_INTERNAL, "cuda matmul: device index out of range");
    const IntLimits lim = int_limits(dev);

    const int64_t k = a.k, nb = k / 32, nbp = (nb + 1) / 2 * 2;
    const int nchunks = (int)((nb + kPreChunkBlocks - 1) / kPreChunkBlocks);  // = slices
    if (a.n_rows > INT32_MAX || nb > INT32_MAX / 32)
        fail(STRATA_ERR_INTERNAL, "cuda matmul: integer path shape out of range");
    const int64_t x_stride = a.x_row_stride > 0 ? a.x_row_stride : (a.prologue == STRATA_PROLOGUE_SILU_MUL ? 2 * k : k);

    // Many rows: the large-tile kernel (cuda_int_mma_tiles.cu) after the pre-pass, the same bits as
    // the kernels below.
    int tiles = int_tiles_choice(a.n_rows, a.n_out, k, a.w_dtype, lim.sms);
    // A few rows (decode of 2 to ~32 sequences): the few-row tensor-core kernel (cuda_int_rows.cu) after
    // the pre-pass, the same bits again; where it applies it comes before the tiles (unless the one-launch
    // dot kernel below applies: an explicit STRATA_INT_FUSE_ROUNDS).
    int rows_kr = int_rows_choice(a.n_rows, a.n_out, k, a.w_dtype);
    if (rows_kr > 0) tiles = -1;
    // 1 to STRATA_INT_GEMV rows: the memory-bound kernel (cuda_int_gemv.cu) after the pre-pass, the same
    // bits again; it comes before the few-row and tile kernels (not before an explicit STRATA_INT_FUSE_ROUNDS
    // that applies, nor a kernel forced by STRATA_INT_MATMUL).
    int gemv_kr = int_gemv_choice(a.n_rows, a.n_out, k, a.w_dtype, lim.smem_optin);
    if (gemv_kr > 0) tiles = -1, rows_kr = 0;
    // STRATA_INT_WGMMA (off by default): Q4_0 / Q8_0 / Q4_1 / Q4_K matmuls of at least its rows (whose tiles fill the GPU) on
    // the warpgroup MMA kernel (cuda_int_wgmma.cu) after the pre-pass, the same bits again; it comes before every other
    // kernel but an explicit STRATA_INT_FUSE_ROUNDS that applies.
    const int wgmma = int_wgmma_choice(a.n_rows, a.n_out, a.w_dtype, dev, lim.sms);
    if (wgmma >= 0) tiles = -1, rows_kr = 0, gemv_kr = 0;

    IntParams p{};
    p.n_rows = a.n_rows;
    p.k = k;
    p.n_out = a.n_out;
    p.w_row_bytes = dtype_row_bytes(a.w_dtype, k);
    p.nb = (int)nb;
    p.nbp = (int)nbp;
    p.n_slices = nchunks;
    p.w = static_cast<const uint8_t*>(a.w);
    p.w_end = p.w + a.n_out * p.w_row_bytes;
    p.bias = a.bias;
    p.y = a.y;
    p.y_stride = a.y_row_stride > 0 ? a.y_row_stride : a.n_out;
    p.accumulate = a.accumulate ? 1 : 0;
    p.prologue = a.prologue;
    p.eps = a.eps;
    p.x = a.x;
    p.x_stride = x_stride;
    p.norm = a.norm_weight;
    const int sb = a.w_dtype == STRATA_Q4_0 ? kIntSliceBytes<STRATA_Q4_0>
                 : a.w_dtype == STRATA_Q8_0 ? kIntSliceBytes<STRATA_Q8_0>
                 : a.w_dtype == STRATA_Q4_K ? kIntSliceBytes<STRATA_Q4_K>
                 : a.w_dtype == STRATA_Q6_K ? kIntSliceBytes<STRATA_Q6_K>
                                            : kIntSliceBytes<STRATA_Q4_1>;
    // Which kernel never changes a bit (each runs the canonical per-element sequence). One row: dp4a
    // with one accumulator; more rows: the int8 tensor-core kernel (64 outputs x 8 or 16 rows) when its
    // tiles fill the GPU, else dp4a tiles of 8 rows (small matrices: more, smaller CTAs).
    const int64_t mt8 = (a.n_out + kMmaNO - 1) / kMmaNO * ((a.n_rows + 7) / 8);
    const int64_t mt16 = (a.n_out + kMmaNO - 1) / kMmaNO * ((a.n_rows + 15) / 16);
    // Q6_K has no int8 mma kernel here (its two half scales per block: the tile kernel's two mmas per
    // block); its rows the tiles do not take go through the dp4a kernels, the same bits.
    const bool q6k = a.w_dtype == STRATA_Q6_K;
    const int kind = a.n_rows == 1 ? 0 : (!q6k && a.n_rows > 8 && mt16 >= lim.sms ? 3 : (!q6k && mt8 >= lim.sms ? 2 : 1));
    const int kr = kind == 0 ? 1 : (kind == 3 ? 16 : 8);
    if (kind >= 2) mma_shape(p, sb, kr);
    else dot_shape(p, sb, lim.sms, lim.smem_sm, kr);
    const HandoffMode hmode = emit != nullptr ? handoff_mode() : HandoffMode::kPrepass;
    // The local emission (emit_blocks): one row, a y row that is the next call's whole x row, a prologue
    // without SILU_MUL's two halves, and CTAs of whole blocks: 32 outputs, 8 slices a part, three stage
    // buffers (one CTA per SM would otherwise have half the bytes in flight of the two 16-output CTAs
    // it replaces), at most STRATA_HANDOFF_LOCAL_PARTS parts.
    bool emit_local = false;
    if (hmode == HandoffMode::kLocal && kind == 0 && a.n_rows == 1 && a.emit_k == a.n_out &&
        a.emit_prologue != STRATA_PROLOGUE_SILU_MUL && gemv_kr <= 0 && rows_kr <= 0 && tiles < 0 && wgmma < 0) {
        IntParams q = p;
        dot_local_shape(q, sb);
        if (q.n_parts <= handoff_local_parts() && dot_smem(q, kr) <= lim.smem_optin) p = q, emit_local = true;
    }
    // SILU_MUL's input (y = [gate | up] of the next k each): CTAs that hold both halves of their 32
    // elements (dot_pair_shape, emit_pair), within the same parts limit.
    if (hmode == HandoffMode::kLocal && kind == 0 && a.n_rows == 1 && a.emit_prologue == STRATA_PROLOGUE_SILU_MUL &&
        a.n_out == 2 * a.emit_k && a.emit_k % 32 == 0 && (a.y_row_stride == 0 || a.y_row_stride == a.n_out) &&
        a.w_dtype != STRATA_Q6_K && gemv_kr <= 0 && rows_kr <= 0 && tiles < 0 && wgmma < 0 && handoff_pair_enabled()) {
        IntParams q = p;
        dot_pair_shape(q, sb);
        // At most STRATA_HANDOFF_LOCAL_PARTS parts of this shape's 4 slices (k up to 2,048 by default): on the
        // H200 the 8B's gate_up (k 4,096) ran 13 % slower a step in these CTAs (bench/RESULTS.md, 2026-12-03 night).
        if (q.n_parts <= handoff_local_parts() && dot_smem(q, kr) <= lim.smem_optin) {
            p = q;
            p.pair_half = a.emit_k;
            emit_local = true;
        }
    }
    const int64_t n_rt = (a.n_rows + kr - 1) / kr, n_ot = (a.n_out + p.no - 1) / p.no;
    if (n_rt * n_ot > INT32_MAX) fail(STRATA_ERR_INTERNAL, "cuda matmul: integer path has too many tiles");
    p.n_row_tiles = (int)n_rt;
    p.n_tiles = (int)(n_rt * n_ot);
    // The dot kernels quantize their rows themselves (one launch, no pre-pass) when that is short
    // (STRATA_INT_FUSE_ROUNDS) and the rows fit in shared memory without costing the SM its second CTA (by
    // shared memory; 1 KB per CTA is the runtime's); the same bits either way.
    bool fused = false;
    const int64_t rounds = (std::min<int64_t>(kr, a.n_rows) * nb + 63) / 64;
    if (tiles < 0 && kind <= 1 && rounds <= int_fuse_rounds()) {  // before wgmma too (its comment above)
        IntParams f = p;
        dot_fuse(f, kr);
        const int64_t fs = dot_fused_smem(f), us = dot_smem(p, kr);
        const int64_t per_sm = lim.smem_sm > 0 ? lim.smem_sm : lim.smem_optin;
        if (fs <= lim.smem_optin && per_sm / (fs + 1024) >= std::min<int64_t>(2, per_sm / (us + 1024))) {
            p = f;
            fused = true;
        }
    }
    if (!fused && gemv_kr > 0 && int_gemv_fuse()) {  // the gemv kernel quantizes its rows itself: one launch
        flush();
        launch_int_gemv(IntTilesArgs{nullptr, nullptr, nullptr, a.n_rows, k, a.n_out, (int)nbp, a.w_dtype, a.w, a.bias,
                                     a.y, a.accumulate, a.prologue, a.eps, a.y_row_stride},
                        gemv_kr, dev, stream, a.x, x_stride, a.norm_weight);
        return false;
    }
    // A local emission's per-block sums of squares are read by the one-row dot kernel alone; any other
    // route runs its own pre-pass from x (the same bits, one launch more).
    if (use != nullptr && use->ssq_blocks && (fused || kind != 0 || gemv_kr > 0 || tiles >= 0 || rows_kr > 0 || wgmma >= 0))
        use = nullptr;
    if (!fused) {
        // The activations: prepared by the previous call (the hand-off), or the pre-pass into the scratch
        // (xq [n_rows][k] int8, meta [n_rows][nbp] uint2, ssq [n_rows][nchunks] float).
        HandoffView v;
        if (use != nullptr) {
            v = *use;
        } else {
            const PrepassLayout lay(a.n_rows, k);
            v = lay.at(scratch.get(lay.bytes));
            flush();
            launch_prepass(a.x, x_stride, a.n_rows, k, a.prologue, a.norm_weight, v, stream);
        }
        if (gemv_kr > 0) {
            flush();
            launch_int_gemv(IntTilesArgs{v.xq, v.meta, v.ssq, a.n_rows, k, a.n_out, (int)nbp, a.w_dtype, a.w,
                                         a.bias, a.y, a.accumulate, a.prologue, a.eps, a.y_row_stride},
                            gemv_kr, dev, stream);
            return false;
        }
        if (wgmma >= 0) {
            flush();
            launch_int_wgmma(IntTilesArgs{v.xq, v.meta, v.ssq, a.n_rows, k, a.n_out, (int)nbp, a.w_dtype, a.w,
                                          a.bias, a.y, a.accumulate, a.prologue, a.eps, a.y_row_stride},
                             wgmma, dev, stream);
            return false;
        }
        if (tiles >= 0) {
            flush();
            // The tail split (int_tiles_tail): the whole row tiles here, then the last rows on the route
            // their own count takes, reading the same prepared blocks from their row on (the same bits).
            // The split is taken where it pays (int_tiles_tail_pays: the head's and the tail's tiles against
            // the whole call's, the tail's route as its own call would choose it).
            int64_t tail = v.ssq_blocks ? 0 : int_tiles_tail(tiles, a.n_rows);
            int head_choice = tail > 0 ? int_tiles_choice(a.n_rows - tail, a.n_out, k, a.w_dtype, lim.sms) : tiles;
            if (tail > 0) {
                const bool off_tiles = int_gemv_choice(tail, a.n_out, k, a.w_dtype, lim.smem_optin) > 0 ||
                                       int_rows_choice(tail, a.n_out, k, a.w_dtype) > 0 ||
                                       int_wgmma_choice(tail, a.n_out, a.w_dtype, dev, lim.sms) >= 0;
                const int tail_choice = off_tiles ? -1 : int_tiles_choice(tail, a.n_out, k, a.w_dtype, lim.sms);
                if (!int_tiles_tail_pays(tiles, head_choice >= 0 ? head_choice : tiles, tail_choice, a.n_rows, tail,
                                         a.n_out, lim.sms))
                    tail = 0, head_choice = tiles;
            }
            const int64_t head = a.n_rows - tail;
            launch_int_tiles(IntTilesArgs{v.xq, v.meta, v.ssq, head, k, a.n_out, (int)nbp, a.w_dtype, a.w, a.bias,
                                          a.y, a.accumulate, a.prologue, a.eps, a.y_row_stride},
                             head_choice >= 0 ? head_choice : tiles, dev, stream);
            if (tail > 0) {
                MatmulArgs t = a;
                t.n_rows = tail;
                t.x = a.x != nullptr ? a.x + head * x_stride : nullptr;
                t.x_row_stride = x_stride;
                t.y = a.y + head * p.y_stride;
                t.emit_prologue = -1;
                t.use_handoff = false;
                t.prefetch = nullptr;  // a hint for the call as a whole: not repeated by its tail
                t.prefetch_bytes = 0;
                const HandoffView tv{v.xq + head * k, v.meta + head * nbp, v.ssq + head * nchunks, false};
                launch_int_matmul(t, stream, scratch, &tv, nullptr, nullptr, nullptr, nullptr, nullptr);
            }
            return false;
        }
        if (rows_kr > 0) {
            flush();
            launch_int_rows(IntTilesArgs{v.xq, v.meta, v.ssq, a.n_rows, k, a.n_out, (int)nbp, a.w_dtype, a.w,
                                         a.bias, a.y, a.accumulate, a.prologue, a.eps, a.y_row_stride},
                            rows_kr, dev, stream, int_early_stages());
            return false;
        }
        p.xq = v.xq;
        p.meta = v.meta;
        p.ssq = v.ssq;
        p.ssq_blocks = v.ssq_blocks ? 1 : 0;
    }
    // The hand-off's emission in the one-row dot kernel's epilogue (emit_tile); every other route
    // leaves it to launch_matmul's pre-pass launch after this kernel.
    p.emit_pro = -1;
    const bool emit_here = emit_local || (hmode == HandoffMode::kCounted && emit_cnt != nullptr && kind == 0 &&
                                          a.n_rows == 1 && (a.emit_k / 32 + 7) / 8 <= kHandoffMaxChunks);
    if (emit_here) {
        p.emit_pro = a.emit_prologue;
        p.emit_norm = a.emit_norm;
        p.emit_k = a.emit_k;
        p.emit_xq = emit->xq;
        p.emit_meta = emit->meta;
        p.emit_ssq = emit->ssq;
        p.emit_cnt = emit_cnt;
        p.emit_local = emit_local ? 1 : 0;
        emit->ssq_blocks = emit_local;
    }
    int64_t smem64 = kind >= 2 ? mma_smem_bytes(p, kr) : (fused ? dot_fused_smem(p) : dot_smem(p, kr));
    if (emit_here && !emit_local) {  // the protocol's flags and block sums after everything else
        p.emit_off = (int)((smem64 + 15) / 16 * 16);
        smem64 = p.emit_off + 64;
    }
    if (smem64 > lim.smem_optin) fail(STRATA_ERR_INTERNAL, "cuda matmul: integer path tile exceeds shared memory");
    const int smem = (int)smem64;
    const int th = p.threads;
    if (kind <= 1) {
        const bool rope_here = rope != nullptr && kind == 0 && !fused && !emit_here && rope_epilogue_covers(a, *rope, p) &&
                               smem + kRopeEpiSmem <= lim.smem_optin;
        if (rope_here) {
            p.rope = *rope;
            if (rope_done != nullptr) *rope_done = true;
        }
        const IntKernel fn = dot_kernel_for(a.w_dtype, kr, fused, rope_here);
        if (!fn) fail(STRATA_ERR_INTERNAL, "cuda matmul: no integer path for dtype " + std::to_string(a.w_dtype));
        int64_t grid = p.n_tiles;
        if (fused) {
            int per_sm = resident_ctas(fn, th, smem);
            if (const int cap = int_fuse_ctas(); cap > 0 && (per_sm <= 0 || cap < per_sm)) per_sm = cap;
            grid = dot_fused_grid(p, (int64_t)per_sm * lim.sms);
        }
        // STRATA_INT_EARLY_STAGES: every stage buffer's part of the first tile requested before the wait.
        p.early_parts = int_early_stages() ? dot_nbuf(p) : 1;
        if (a.prefetch != nullptr && a.prefetch_bytes > 0) {  // whole 128-byte lines, within the allocation
            const uintptr_t lo = reinterpret_cast<uintptr_t>(a.prefetch) & ~uintptr_t(127);
            const uintptr_t hi = reinterpret_cast<uintptr_t>(a.prefetch) + a.prefetch_bytes;
            p.pf = reinterpret_cast<const uint8_t*>(lo);
            p.pf_lines = (int64_t)((hi - lo + 127) / 128);
            p.pf_ctas = (int)std::min<int64_t>(grid, lim.sms);
        }
        // Held in the chain: a one-row dot call with nothing else in its kernel, reading the previous call's
        // blocks or its own pre-pass's (launched above, after what was held: scratch buffers live as long
        // as the context), emitting locally or not here: a pre-pass emission follows it in the chain as a
        // phase (launch_handoff_prepass). The counted emission (STRATA_HANDOFF=1) is not held.
        if (chain != nullptr && kind == 0 && !fused && rope == nullptr && p.pf_lines == 0 &&
            (!emit_here || emit_local) && dot_chain_hold(*chain, a.w_dtype, p, smem, stream))
            return emit_here;
        flush();
        launch_k(fn, (unsigned)grid, th, smem, stream, p);
        check_launch(fused ? "matmul (integer, fused activations)" : "matmul (integer)");
        return emit_here;
    }
    flush();
    const unsigned grid = (unsigned)p.n_tiles;
    switch (a.w_dtype * 4 + kind) {
    case STRATA_Q4_0 * 4 + 2: launch_k(int_mma_kernel<STRATA_Q4_0, 1>, grid, th, smem, stream, p); break;
    case STRATA_Q4_0 * 4 + 3: launch_k(int_mma_kernel<STRATA_Q4_0, 2>, grid, th, smem, stream, p); break;
    case STRATA_Q8_0 * 4 + 2: launch_k(int_mma_kernel<STRATA_Q8_0, 1>, grid, th, smem, stream, p); break;
    case STRATA_Q8_0 * 4 + 3: launch_k(int_mma_kernel<STRATA_Q8_0, 2>, grid, th, smem, stream, p); break;
    case STRATA_Q4_1 * 4 + 2: launch_k(int_mma_kernel<STRATA_Q4_1, 1>, grid, th, smem, stream, p); break;
    case STRATA_Q4_1 * 4 + 3: launch_k(int_mma_kernel<STRATA_Q4_1, 2>, grid, th, smem, stream, p); break;
    case STRATA_Q4_K * 4 + 2: launch_k(int_mma_kernel<STRATA_Q4_K, 1>, grid, th, smem, stream, p); break;
    case STRATA_Q4_K * 4 + 3: launch_k(int_mma_kernel<STRATA_Q4_K, 2>, grid, th, smem, stream, p); break;
    default: fail(STRATA_ERR_INTERNAL, "cuda matmul: no integer path for dtype " + std::to_string(a.w_dtype));
    }
    check_launch("matmul (integer)");
    return false;
}

}  // namespace cuda
}  // namespace strata

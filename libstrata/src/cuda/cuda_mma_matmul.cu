// cuda_mma_matmul.cu — y = prologue(x)·Wᵀ (+ bias) (+ y) on tensor cores for
// F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K and Q6_K weights, from 1 row to thousands,
// with ONE arithmetic per output element whatever the number of rows.
//
// The canonical arithmetic of output (r, o) (docs/cuda_backend.md):
//   blocks b of 32 values (the last zero-padded for plain types), slices of
//   16 blocks (a function of k only);
//   per block: x̂, inv, Sx from cuda_mma_act.cuh; A, ws, wm from
//     cuda_mma_weights.cuh; P = mma(A1, B1, mma(A0, B0, 0))
//     (Q6_K: P_h = mma(A_h, B_h, 0) per half, each with its own scale);
//     acc = fmaf(ws·inv, P, acc) (F16/BF16: fmaf(inv, P, acc));
//     Q4_1/Q4_K: acc = fmaf(wm, Sx, acc);
//   per slice: acc starts at 0, blocks in ascending order;
//   total = acc_0, then total = total + acc_s in slice order;
//   RMSNORM: total = total · rsqrt(ssq/k + eps) (ssq: per-block sums of
//     squares, added in block order within a slice, slices in order);
//   v = total (+ bias); y = accumulate ? y + v : v.
//
// Two kernels compute exactly that sequence of mma/fmaf/add per element:
//   decode (n_rows <= 16): a CTA owns 16·MT outputs x 8 rows; its warps take
//     slices w, w+WK, ... and stream their weights through private cp.async
//     rings (8-block chunks, 3 stages; or 4-block chunks, 2 stages, 2 CTAs per
//     SM for large matrices); each slice's acc goes to shared memory and the
//     slices are added in order at the end;
//   wide: a CTA owns 128 outputs x 16, 32 or 64 rows; all warps stream one
//     chunk (2 or 4 blocks, or a K-quant super-block) at a time through a shared ring,
//     convert the next chunk's activations while the tensor cores work on the
//     current one, and fold acc into total at every slice end.
// Which kernel, tile or warp handles an element never changes its operations,
// so a row's result is bit-identical for any n_rows (tests/kernels/
// test_matmul_ex.py, libstrata/cuda_emu/test_mma.cpp).
//
// Shared memory is dynamic (the kernels' limit is raised to the device's
// opt-in maximum once per device, outside any capture); nothing is allocated.
#include <atomic>
#include <mutex>
#include <type_traits>

#include "cuda_kernels.cuh"
#include "cuda_mma_act.cuh"
#include "cuda_mma_weights.cuh"
#include "cuda_quant.cuh"
#include "cuda_pdl.cuh"

namespace strata {
namespace cuda {
namespace {

constexpr int kSliceBlocks = 16;  // blocks per slice: the reduction's fixed structure
constexpr int kDecRows = 8;       // rows per decode tile (one n-tile)

// The decode kernel's two configurations (chunk blocks, ring depth, CTAs per
// SM): "deep" (8 blocks per chunk, 3 stages: fewest chunk steps, best for
// small matrices and one wave of CTAs) and "wide" occupancy (4 blocks, 2
// stages, 2 CTAs per SM: best for many CTAs and for several rows). K-quant
// chunks are one super-block, so they only have the first.
template <int kDtype>
struct DecCfg {
    using W = MmaW<kDtype>;
    static constexpr bool kK = W::kBlocksPerUnit > 1;
    static constexpr int kXB = kK ? 8 : (W::kPlain ? 4 : 8), kDepth = 3;
    static constexpr bool kHasOcc = !kK;
};
constexpr int kOccXB = 4, kOccDepth = 2;  // the occupancy configuration (not for K-quants)

// Wide kernel, non-K types. The 128x64 tile: 2 blocks per chunk; quantized
// types gain from two CTAs per SM (3 stages), F16/BF16 keep 4 stages. The
// shorter tiles (32 and 16 rows): 4 blocks per chunk, half the chunk steps
// (each step has a fixed cost: ~1.7x faster at 64 rows of the 8B q/o and down).
template <int kDtype>
struct WideCfg {
    static constexpr bool kPlain = MmaW<kDtype>::kPlain;
    static constexpr int kXB = 2, kDepth = kPlain ? 4 : 3, kMinB = kPlain ? 1 : 2;
    static constexpr int kXBShort = 4;
};

struct MmaParams {
    const float* x;
    int64_t x_stride, n_rows, k;
    const uint8_t* w;
    int64_t w_row_bytes, n_out;
    const float* bias;
    const float* norm;
    float eps;
    int prologue;
    float* y;
    int64_t y_stride;  // elements between y rows (>= n_out)
    int accumulate;
    const uint8_t* w_end;  // end of the weight operand (bytes past it are never read)
    const float* x_end;    // end of the x operand
    int nb, n_slices, n_chunks;
    int n_row_tiles, n_tiles;
    int wstride, xstride;      // bytes per staged weight row / activation row
    int stage_bytes, w_part;   // one ring stage: weights [0, w_part), activations, norm weight
    int x_part;
    int w_ldsm;                // plain types with 16-byte aligned rows: A through ldmatrix
    int w_al4;                 // every weight row starts 4-byte aligned
    int warp_bytes;            // decode: one warp's ring + fragments
    int xrows;                 // decode: rows of the fragment and meta arrays (min(n_rows, 8), rounded up to even)
    int part_off, sqpart_off, inv_off;  // decode: per-slice partials, ssq partials, 1/rms
    int xh_off, meta_off;               // wide: fragment and meta double buffers
    int ktab_off;                       // wide: K-quant scale tables (2 x 128 rows x 8 blocks)
};

// ---------------------------------------------------------------- chunks

template <int kDtype, int kXB>
struct Chunk {
    using W = MmaW<kDtype>;
    static_assert(W::kBlocksPerUnit == 1 || kXB == 8, "a K-quant chunk is one super-block");
    // Byte range of chunk q within a weight row.
    __device__ __forceinline__ static int64_t w_begin(const MmaParams& p, int q) {
        return W::kBlocksPerUnit == 1 ? (int64_t)q * kXB * W::kBytes : (int64_t)q * W::kBytes;
    }
    __device__ __forceinline__ static int w_len(const MmaParams& p, int q) {
        if (W::kPlain) return (int)(2 * (min(p.k, (int64_t)32 * (q + 1) * kXB) - (int64_t)32 * q * kXB));
        if (W::kBlocksPerUnit > 1) return W::kBytes;
        return (min(p.nb, (q + 1) * kXB) - q * kXB) * W::kBytes;
    }
    __device__ __forceinline__ static int blocks(const MmaParams& p, int q) { return min(p.nb, (q + 1) * kXB) - q * kXB; }
};

__device__ __forceinline__ int addr_delta(const void* p) { return (int)(reinterpret_cast<uintptr_t>(p) & 15); }

// Copies nrows byte ranges [src0 + r * sstride, + len) into dst + r * dstride
// with cp.async: 16-byte pieces from the 16-byte aligned address at or below
// each range's start (so byte src lands at offset src & 15 of its window),
// nothing at or past `limit` read (zero fill). Threads id, id + nth, ... (nth
// a power of two) take rows in groups of tpr threads, tpr the largest power
// of two with tpr * nrows <= nth; a thread copies every tpr-th piece of a row.
__device__ __forceinline__ void stage_rows(uint8_t* dst, int dstride, const uint8_t* src0, int64_t sstride,
                                           int nrows, int len, const uint8_t* limit, int id, int nth) {
    int tpr = 1;
    while (2 * tpr * nrows <= nth) tpr *= 2;
    const int rstep = nth / tpr, sub = id & (tpr - 1);
    for (int r = id / tpr; r < nrows; r += rstep) {
        const uint8_t* s = src0 + r * sstride;
        const uint8_t* a = s - addr_delta(s);
        const int np = (int)((s + len - a + 15) >> 4);
        uint8_t* d = dst + r * dstride;
        if (a + 16 * np <= limit) {
            for (int pc = sub; pc < np; pc += tpr) cp_async16z(d + 16 * pc, a + 16 * pc, 16);
        } else {
            for (int pc = sub; pc < np; pc += tpr) {
                const int64_t left = limit - (a + 16 * pc);
                cp_async16z(d + 16 * pc, a + 16 * pc, left >= 16 ? 16 : (left > 0 ? (int)left : 0));
            }
        }
    }
}

// Issues the cp.async copies of chunk q — weight rows [o0, o0 + no), activation
// rows [r0, r0 + nr) (and their up halves), the norm weight — into `stage`,
// over threads id, id + nth, ... (nth a power of two).
template <int kDtype, int kXB>
__device__ __forceinline__ void stage_chunk(const MmaParams& p, uint8_t* stage, int q, int64_t o0, int no,
                                            int64_t r0, int nr, int id, int nth) {
    using C = Chunk<kDtype, kXB>;
    stage_rows(stage, p.wstride, p.w + o0 * p.w_row_bytes + C::w_begin(p, q), p.w_row_bytes, no, C::w_len(p, q),
               p.w_end, id, nth);
    const int64_t v0 = (int64_t)32 * q * kXB;
    const int nv = (int)(min(p.k, v0 + 32 * kXB) - v0);
    const uint8_t* xend = reinterpret_cast<const uint8_t*>(p.x_end);
    uint8_t* xs = stage + p.w_part;
    stage_rows(xs, p.xstride, reinterpret_cast<const uint8_t*>(p.x + r0 * p.x_stride + v0), 4 * p.x_stride, nr,
               4 * nv, xend, id, nth);
    if (p.prologue == kProSiluMul)
        stage_rows(xs + nr * p.xstride, p.xstride, reinterpret_cast<const uint8_t*>(p.x + r0 * p.x_stride + p.k + v0),
                   4 * p.x_stride, nr, 4 * nv, xend, id, nth);
    if (p.prologue == kProRmsNorm)
        stage_rows(xs + p.x_part, 0, reinterpret_cast<const uint8_t*>(p.norm + v0), 0, 1, 4 * nv,
                   reinterpret_cast<const uint8_t*>(p.norm + p.k), id, nth);
}

// Converts the activations of chunk q (staged in `stage`) for rows [0, nr):
// tasks (row, block, t) over threads id, id + nth, ... (nth a multiple of 32;
// every lane of a warp runs the same number of iterations).
template <int kDtype, int kXB>
__device__ __forceinline__ void convert_chunk(const MmaParams& p, const uint8_t* stage, int q, int64_t r0, int nr,
                                              int rows_dim, uint4* xh, float* is, float* sx, float* sq, int id,
                                              int nth) {
    using W = MmaW<kDtype>;
    const int nbq = Chunk<kDtype, kXB>::blocks(p, q);
    const int tasks = nr * nbq * 4;
    const int64_t v0 = (int64_t)32 * q * kXB;
    const uint8_t* xs = stage + p.w_part;
    const float* gn = reinterpret_cast<const float*>(xs + p.x_part + addr_delta(p.norm + v0));
    for (int base = 0; base < tasks; base += nth) {
        const int tau = base + id;
        const bool active = tau < tasks;
        const int tt = active ? tau : 0;
        const int row = tt / (nbq * 4), j = (tt >> 2) - row * nbq, t = tt & 3;
        const float* xrow = p.x + (r0 + row) * p.x_stride + v0;
        ActSrc src;
        src.x = reinterpret_cast<const float*>(xs + row * p.xstride + addr_delta(xrow)) + 32 * j;
        src.up = reinterpret_cast<const float*>(xs + (nr + row) * p.xstride + addr_delta(xrow + p.k)) + 32 * j;
        src.g = gn + 32 * j;
        const int valid = W::kPlain ? (int)min((int64_t)32, p.k - v0 - 32 * j) : 32;
        const int m = j * rows_dim + row;
        convert_block<W::kPlain, kDtype == STRATA_BF16, W::kMin>(p.prologue, src, t, valid,
                                                                 addr_delta(src.x) == 0, active, xh + 4 * m + t,
                                                                 is + m, sx + m, sq + m);
    }
}

// ---------------------------------------------------------------- one block

// The canonical block step for one warp: MT m-tiles (weight rows wr[m][0] =
// row g, wr[m][1] = row g + 8 of each, or lane rows for ldmatrix) x NT
// n-tiles (fragment rows 8n + g of xh; meta rows 8n + 2t, +1).
// kOdd: whether D columns 2t + 1 (rows 1, 3, 5, 7 of each n-tile) are needed;
// a decode tile of one row skips their epilogue (it never reaches an output).
template <int kDtype, int MT, int NT, int kP, bool kOdd>
__device__ __forceinline__ void mma_block(const uint8_t* const (&wr)[MT][2], const uint8_t* const (&lr)[MT],
                                          const float2* ktab, bool ldsm, int j, int valid,
                                          const uint4* xh, const float* is, const float* sx, int g, int t,
                                          float (&acc)[MT][NT][4]) {
    using W = MmaW<kDtype>;
    constexpr bool kBf16 = kDtype == STRATA_BF16;
    uint4 b[NT];
    float2 iv[NT], sv[NT];
#pragma unroll
    for (int n = 0; n < NT; ++n) {
        b[n] = xh[4 * (8 * n + g) + t];
        iv[n] = *reinterpret_cast<const float2*>(is + 8 * n + 2 * t);
        if (W::kMin) sv[n] = *reinterpret_cast<const float2*>(sx + 8 * n + 2 * t);
    }
    const float zero[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int m = 0; m < MT; ++m) {
        uint32_t a0[4], a1[4];
        RowFrag f0, f1;
        if (W::kPlain && ldsm && valid == 32) {
            ldsm_x4(a0, lr[m] + 64 * j);
            ldsm_x4(a1, lr[m] + 64 * j + 32);
            f0.ws[0] = f0.ws[1] = f1.ws[0] = f1.ws[1] = 1.0f;
            f0.wm = f1.wm = 0.0f;
        } else {
            if constexpr (W::kPlain) {
                W::template load<kP>(wr[m][0], j, t, f0, valid);
                W::template load<kP>(wr[m][1], j, t, f1, valid);
            } else if constexpr (W::kBlocksPerUnit > 1) {
                // K-quants: scales from the chunk's table (rows 16m + g, + 8).
                W::template quants<kP>(wr[m][0], j, t, f0);
                W::template quants<kP>(wr[m][1], j, t, f1);
                const float2 s0 = ktab[(16 * m + g) * 8 + j], s1 = ktab[(16 * m + g + 8) * 8 + j];
                f0.ws[0] = s0.x; f0.ws[1] = W::kSplit ? s0.y : s0.x; f0.wm = W::kSplit ? 0.0f : s0.y;
                f1.ws[0] = s1.x; f1.ws[1] = W::kSplit ? s1.y : s1.x; f1.wm = W::kSplit ? 0.0f : s1.y;
            } else {
                W::template load<kP>(wr[m][0], j, t, f0);
                W::template load<kP>(wr[m][1], j, t, f1);
            }
            a0[0] = f0.f[0][0]; a0[1] = f1.f[0][0]; a0[2] = f0.f[0][1]; a0[3] = f1.f[0][1];
            a1[0] = f0.f[1][0]; a1[1] = f1.f[1][0]; a1[2] = f0.f[1][1]; a1[3] = f1.f[1][1];
        }
#pragma unroll
        for (int n = 0; n < NT; ++n) {
            const float ivv[2] = {iv[n].x, iv[n].y};
            if (W::kSplit) {
                float p0[4], p1[4];
                mma_16816<kBf16>(p0, a0, b[n].x, b[n].y, zero);
                mma_16816<kBf16>(p1, a1, b[n].z, b[n].w, zero);
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    if ((e & 1) && !kOdd) continue;
                    const RowFrag& f = (e >> 1) ? f1 : f0;
                    acc[m][n][e] = fmaf(__fmul_rn(f.ws[0], ivv[e & 1]), p0[e], acc[m][n][e]);
                    acc[m][n][e] = fmaf(__fmul_rn(f.ws[1], ivv[e & 1]), p1[e], acc[m][n][e]);
                }
            } else {
                float pp[4];
                mma_16816<kBf16>(pp, a0, b[n].x, b[n].y, zero);
                mma_16816<kBf16>(pp, a1, b[n].z, b[n].w, pp);
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    if ((e & 1) && !kOdd) continue;
                    const RowFrag& f = (e >> 1) ? f1 : f0;
                    const float c = W::kPlain ? ivv[e & 1] : __fmul_rn(f.ws[0], ivv[e & 1]);
                    acc[m][n][e] = fmaf(c, pp[e], acc[m][n][e]);
                    if (W::kMin) acc[m][n][e] = fmaf(f.wm, (e & 1) ? sv[n].y : sv[n].x, acc[m][n][e]);
                }
            }
        }
    }
}

// The blocks of one staged chunk, in order, through mma_block. When every
// weight row starts 4-byte aligned (p.w_al4), a block's address mod 4 is known
// at compile time — 0 for even blocks, (block bytes & 2) for odd ones, per
// chunk for Q6_K super-blocks — so its words need one load, not two and a
// funnel shift. kv_left: values of the row from the chunk's first one.
template <int kDtype, int MT, int NT, int kXB, int kPe, int kPo, bool kOdd>
__device__ __forceinline__ void block_loop(const uint8_t* const (&wr)[MT][2], const uint8_t* const (&lr)[MT],
                                           const float2* ktab, bool ldsm, int nbq, int64_t kv_left,
                                           const uint4* xh, const float* is, const float* sx, int rows_dim, int g,
                                           int t, float (&acc)[MT][NT][4]) {
    using W = MmaW<kDtype>;
    // Block j of the chunk; kP: its address mod 4 (even or odd block).
    auto block = [&](auto kP, int j) {
        const int valid = W::kPlain ? (int)min((int64_t)32, kv_left - 32 * j) : 32;
        mma_block<kDtype, MT, NT, decltype(kP)::value, kOdd>(wr, lr, ktab, ldsm, j, valid, xh + j * rows_dim * 4,
                                                             is + j * rows_dim, sx + j * rows_dim, g, t, acc);
    };
    using Even = std::integral_constant<int, kPe>;
    using Odd = std::integral_constant<int, kPo>;
    if (nbq == kXB) {  // a full chunk: unrolled, so the next blocks' loads and mma overlap this one's
#pragma unroll
        for (int j = 0; j < kXB; ++j) {
            if (j & 1) block(Odd{}, j);
            else block(Even{}, j);
        }
        return;
    }
    int j = 0;
    for (; j + 1 < nbq; j += 2) {
        block(Even{}, j);
        block(Odd{}, j + 1);
    }
    if (j < nbq) block(Even{}, j);
}

template <int kDtype, int MT, int NT, int kXB, bool kOdd>
__device__ __forceinline__ void chunk_blocks_odd(const MmaParams& p, int q, const uint8_t* const (&wr)[MT][2],
                                                 const uint8_t* const (&lr)[MT], const float2* ktab, int nbq,
                                                 int64_t kv_left, const uint4* xh, const float* is, const float* sx,
                                                 int rows_dim, int g, int t, float (&acc)[MT][NT][4]) {
    using W = MmaW<kDtype>;
    const bool ldsm = p.w_ldsm != 0;
    if (p.w_al4) {
        if (kDtype == STRATA_Q6_K && (q & 1))
            block_loop<kDtype, MT, NT, kXB, 2, 2, kOdd>(wr, lr, ktab, ldsm, nbq, kv_left, xh, is, sx, rows_dim, g, t, acc);
        else
            block_loop<kDtype, MT, NT, kXB, 0, (kDtype == STRATA_Q6_K ? 0 : (W::kBytes & 2)), kOdd>(
                wr, lr, ktab, ldsm, nbq, kv_left, xh, is, sx, rows_dim, g, t, acc);
    } else {
        block_loop<kDtype, MT, NT, kXB, -1, -1, kOdd>(wr, lr, ktab, ldsm, nbq, kv_left, xh, is, sx, rows_dim, g, t, acc);
    }
}

// odd == false (a decode tile of one row) skips the epilogue of rows 1..7.
template <int kDtype, int MT, int NT, int kXB>
__device__ __forceinline__ void chunk_blocks(const MmaParams& p, int q, const uint8_t* const (&wr)[MT][2],
                                             const uint8_t* const (&lr)[MT], const float2* ktab, bool odd,
                                             int nbq, int64_t kv_left, const uint4* xh, const float* is,
                                             const float* sx, int rows_dim, int g, int t,
                                             float (&acc)[MT][NT][4]) {
    if (odd)
        chunk_blocks_odd<kDtype, MT, NT, kXB, true>(p, q, wr, lr, ktab, nbq, kv_left, xh, is, sx, rows_dim, g, t, acc);
    else
        chunk_blocks_odd<kDtype, MT, NT, kXB, false>(p, q, wr, lr, ktab, nbq, kv_left, xh, is, sx, rows_dim, g, t, acc);
}

// The staged copy of weight row `row` (clamped to the tile) of chunk q.
template <int kDtype, int kXB>
__device__ __forceinline__ const uint8_t* staged_row(const MmaParams& p, const uint8_t* wst, int q, int64_t o0,
                                                     int row, int no) {
    row = row < no ? row : no - 1;
    return wst + row * p.wstride + addr_delta(p.w + (o0 + row) * p.w_row_bytes + Chunk<kDtype, kXB>::w_begin(p, q));
}

// K-quants: the (scale, min) pairs of the 8 blocks of chunk q for weight rows
// [0, rows) of the tile, computed once per chunk by threads id, id + nth, ...
template <int kDtype, int kXB>
__device__ __forceinline__ void scale_table(const MmaParams& p, const uint8_t* wst, int q, int64_t o0, int no,
                                            int rows, float2* tab, int id, int nth) {
    if constexpr (MmaW<kDtype>::kBlocksPerUnit > 1) {
        for (int i = id; i < rows * 8; i += nth)
            tab[i] = MmaW<kDtype>::scales(staged_row<kDtype, kXB>(p, wst, q, o0, i >> 3, no), i & 7);
    }
}

// Weight row pointers of one warp's m-tiles in a staged chunk: rows
// base + 16m + g (+8) for the fragment loaders, and this lane's ldmatrix row.
template <int kDtype, int kXB, int MT>
__device__ __forceinline__ void weight_rows(const MmaParams& p, const uint8_t* wst, int q, int64_t o0, int base,
                                            int no, int lane, const uint8_t* (&wr)[MT][2], const uint8_t* (&lr)[MT]) {
    auto row_ptr = [&](int row) { return staged_row<kDtype, kXB>(p, wst, q, o0, row, no); };
    const int g = lane >> 2;
#pragma unroll
    for (int m = 0; m < MT; ++m) {
        wr[m][0] = row_ptr(base + 16 * m + g);
        wr[m][1] = row_ptr(base + 16 * m + g + 8);
        lr[m] = row_ptr(base + 16 * m + (lane & 7) + 8 * ((lane >> 3) & 1)) + 16 * (lane >> 4);
    }
}

// v = total (· 1/rms) (+ bias); y = accumulate ? y + v : v.
__device__ __forceinline__ void store_output(const MmaParams& p, int64_t r, int64_t o, float total, float rinv) {
    float v = total;
    if (p.prologue == kProRmsNorm) v = __fmul_rn(v, rinv);
    if (p.bias) v = __fadd_rn(v, p.bias[o]);
    float* yp = p.y + r * p.y_stride + o;
    *yp = p.accumulate ? __fadd_rn(*yp, v) : v;
}

__device__ __forceinline__ float inv_rms(const MmaParams& p, float ssq) {
    return rsqrt_rn(__fadd_rn(__fdiv_rn(ssq, (float)p.k), p.eps));
}

// ---------------------------------------------------------------- decode

template <int kDtype, int MT, int kXB, int kDepth, int kMinB>
__global__ void __launch_bounds__(256, kMinB) mma_dec_kernel(const MmaParams p) {
    pdl_wait();  // first: see cuda_pdl.cuh
    pdl_launch_dependents();
    using W = MmaW<kDtype>;
    constexpr int BM = 16 * MT, kCps = kSliceBlocks / kXB;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, wk = blockDim.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    uint8_t* smem = mma_smem();
    uint8_t* ring = smem + warp * p.warp_bytes;
    // Fragments [kXB][xrows][4 lanes] and meta [kXB][xrows]; B loads of rows past
    // n_rows read other bytes of shared memory and only reach those rows' outputs.
    const int xr = p.xrows;
    uint4* xh = reinterpret_cast<uint4*>(ring + kDepth * p.stage_bytes);
    float* is = reinterpret_cast<float*>(xh + kXB * xr * 4);
    float* sx = is + kXB * xr;
    float* sq = sx + kXB * xr;
    float2* ktab = reinterpret_cast<float2*>(sq + kXB * xr);  // K-quants: [BM rows][8 blocks]
    float* part = reinterpret_cast<float*>(smem + p.part_off);      // [n_slices][MT][32 lanes][4]
    float* sqpart = reinterpret_cast<float*>(smem + p.sqpart_off);  // [n_slices][8]
    float* rinv = reinterpret_cast<float*>(smem + p.inv_off);       // [8]

    for (int tile = blockIdx.x; tile < p.n_tiles; tile += gridDim.x) {
        const int rt = tile % p.n_row_tiles, ot = tile / p.n_row_tiles;
        const int64_t o0 = (int64_t)ot * BM, r0 = (int64_t)rt * kDecRows;
        const int no = (int)min((int64_t)BM, p.n_out - o0), nr = (int)min((int64_t)kDecRows, p.n_rows - r0);
        // This warp's chunks: slices warp, warp + wk, ..., each cut into kCps chunks.
        auto item = [&](int i) {
            const int s = warp + wk * (i / kCps);
            const int q = s * kCps + i % kCps;
            return (s < p.n_slices && q < p.n_chunks) ? q : -1;
        };
        for (int i = 0; i < kDepth - 1; ++i) {
            const int q = item(i);
            if (q >= 0) stage_chunk<kDtype, kXB>(p, ring + i * p.stage_bytes, q, o0, no, r0, nr, lane, 32);
            cp_async_commit_group();
        }
        float acc[MT][1][4];
#pragma unroll
        for (int m = 0; m < MT; ++m)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[m][0][e] = 0.0f;
        float ssq = 0.0f;
        for (int i = 0;; ++i) {
            const int q = item(i);
            if (q < 0) break;
            cp_async_wait_group<kDepth - 2>();
            warp_sync();
            const int qn = item(i + kDepth - 1);
            if (qn >= 0)
                stage_chunk<kDtype, kXB>(p, ring + ((i + kDepth - 1) % kDepth) * p.stage_bytes, qn, o0, no, r0, nr,
                                         lane, 32);
            cp_async_commit_group();
            const uint8_t* st = ring + (i % kDepth) * p.stage_bytes;
            scale_table<kDtype, kXB>(p, st, q, o0, no, BM, ktab, lane, 32);
            convert_chunk<kDtype, kXB>(p, st, q, r0, nr, xr, xh, is, sx, sq, lane, 32);
            warp_sync();
            const int nbq = Chunk<kDtype, kXB>::blocks(p, q);
            if (p.prologue == kProRmsNorm && lane < nr)
                for (int j = 0; j < nbq; ++j)
                    ssq = (q % kCps == 0 && j == 0) ? sq[lane] : __fadd_rn(ssq, sq[j * xr + lane]);
            const uint8_t* wr[MT][2];
            const uint8_t* lr[MT];
            weight_rows<kDtype, kXB, MT>(p, st, q, o0, 0, no, lane, wr, lr);
            chunk_blocks<kDtype, MT, 1, kXB>(p, q, wr, lr, ktab, nr > 1, nbq, p.k - (int64_t)32 * q * kXB, xh, is, sx, xr,
                                        g, t, acc);
            if (q % kCps == kCps - 1 || q == p.n_chunks - 1) {
                const int s = q / kCps;
#pragma unroll
                for (int m = 0; m < MT; ++m) {
                    *reinterpret_cast<float4*>(part + ((s * MT + m) * 32 + lane) * 4) =
                        make_float4(acc[m][0][0], acc[m][0][1], acc[m][0][2], acc[m][0][3]);
#pragma unroll
                    for (int e = 0; e < 4; ++e) acc[m][0][e] = 0.0f;
                }
                if (p.prologue == kProRmsNorm && lane < nr) sqpart[s * kDecRows + lane] = ssq;
            }
        }
        cp_async_wait_group<0>();
        __syncthreads();
        if (p.prologue == kProRmsNorm && (int)threadIdx.x < nr) {
            float tot = sqpart[threadIdx.x];
            for (int s = 1; s < p.n_slices; ++s) tot = __fadd_rn(tot, sqpart[s * kDecRows + threadIdx.x]);
            rinv[threadIdx.x] = inv_rms(p, tot);
        }
        __syncthreads();
        for (int e = threadIdx.x; e < BM * nr; e += blockDim.x) {
            const int r = e / BM, o = e - r * BM;
            if (o >= no) continue;
            const int i = o & 15, idx = (((o >> 4) * 32 + (i & 7) * 4 + (r >> 1)) * 4) + 2 * (i >> 3) + (r & 1);
            float total = part[idx];
            for (int s = 1; s < p.n_slices; ++s) total = __fadd_rn(total, part[s * MT * 128 + idx]);
            store_output(p, r0 + r, o0 + o, total, rinv[r]);
        }
        __syncthreads();
    }
}

// ---------------------------------------------------------------- wide

template <int kDtype, int WM, int WN, int MT, int NT, int kXB, int kDepth, int kMinB>
__global__ void __launch_bounds__(WM * WN * 32, kMinB) mma_wide_kernel(const MmaParams p) {
    pdl_wait();  // first: see cuda_pdl.cuh
    pdl_launch_dependents();
    using W = MmaW<kDtype>;
    constexpr int BM = WM * 16 * MT, BN = WN * 8 * NT, NTH = WM * WN * 32, kCps = kSliceBlocks / kXB;
    static_assert(kDepth >= 3, "the loop converts one chunk ahead");
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp / WN, wn = warp % WN, g = lane >> 2, t = lane & 3;
    uint8_t* smem = mma_smem();
    uint4* xh = reinterpret_cast<uint4*>(smem + p.xh_off);    // [2][kXB][BN][4 lanes]
    float* meta = reinterpret_cast<float*>(smem + p.meta_off);  // [2][3][kXB][BN]: inv, Sx, ssq
    float* rinv = meta + 2 * 3 * kXB * BN;                       // [BN]
    float2* ktab = reinterpret_cast<float2*>(smem + p.ktab_off);  // K-quants: [2][BM][8]
    auto xh_buf = [&](int c) { return xh + (c & 1) * kXB * BN * 4; };
    auto meta_buf = [&](int c, int which) { return meta + ((c & 1) * 3 + which) * kXB * BN; };

    for (int tile = blockIdx.x; tile < p.n_tiles; tile += gridDim.x) {
        const int rt = tile % p.n_row_tiles, ot = tile / p.n_row_tiles;
        const int64_t o0 = (int64_t)ot * BM, r0 = (int64_t)rt * BN;
        const int no = (int)min((int64_t)BM, p.n_out - o0), nr = (int)min((int64_t)BN, p.n_rows - r0);
        for (int i = 0; i < kDepth - 1; ++i) {
            if (i < p.n_chunks) stage_chunk<kDtype, kXB>(p, smem + i * p.stage_bytes, i, o0, no, r0, nr, tid, NTH);
            cp_async_commit_group();
        }
        float acc[MT][NT][4], total[MT][NT][4];
#pragma unroll
        for (int m = 0; m < MT; ++m)
#pragma unroll
            for (int n = 0; n < NT; ++n)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[m][n][e] = total[m][n][e] = 0.0f;
        float ssq = 0.0f, ssq_tot = 0.0f;
        cp_async_wait_group<kDepth - 2>();
        __syncthreads();
        convert_chunk<kDtype, kXB>(p, smem, 0, r0, nr, BN, xh_buf(0), meta_buf(0, 0), meta_buf(0, 1), meta_buf(0, 2),
                                   tid, NTH);
        scale_table<kDtype, kXB>(p, smem, 0, o0, no, BM, ktab, tid, NTH);
        for (int c = 0; c < p.n_chunks; ++c) {
            cp_async_wait_group<kDepth - 3>();
            __syncthreads();
            const int cn = c + kDepth - 1;
            if (cn < p.n_chunks)
                stage_chunk<kDtype, kXB>(p, smem + (cn % kDepth) * p.stage_bytes, cn, o0, no, r0, nr, tid, NTH);
            cp_async_commit_group();
            if (c + 1 < p.n_chunks) {
                const uint8_t* stn = smem + ((c + 1) % kDepth) * p.stage_bytes;
                convert_chunk<kDtype, kXB>(p, stn, c + 1, r0, nr, BN, xh_buf(c + 1), meta_buf(c + 1, 0),
                                           meta_buf(c + 1, 1), meta_buf(c + 1, 2), tid, NTH);
                scale_table<kDtype, kXB>(p, stn, c + 1, o0, no, BM, ktab + ((c + 1) & 1) * BM * 8, tid, NTH);
            }
            const int nbq = Chunk<kDtype, kXB>::blocks(p, c);
            if (p.prologue == kProRmsNorm && tid < nr) {
                const float* sq = meta_buf(c, 2);
                for (int j = 0; j < nbq; ++j)
                    ssq = (c % kCps == 0 && j == 0) ? sq[tid] : __fadd_rn(ssq, sq[j * BN + tid]);
            }
            const uint8_t* st = smem + (c % kDepth) * p.stage_bytes;
            const uint8_t* wr[MT][2];
            const uint8_t* lr[MT];
            weight_rows<kDtype, kXB, MT>(p, st, c, o0, wm * 16 * MT, no, lane, wr, lr);
            const uint4* xb = xh_buf(c) + 4 * wn * 8 * NT;
            const float* ib = meta_buf(c, 0) + wn * 8 * NT;
            const float* sb = meta_buf(c, 1) + wn * 8 * NT;
            const float2* kt = ktab + (c & 1) * BM * 8 + wm * 16 * MT * 8;
            chunk_blocks<kDtype, MT, NT, kXB>(p, c, wr, lr, kt, true, nbq, p.k - (int64_t)32 * c * kXB, xb, ib, sb, BN, g,
                                         t, acc);
            if (c % kCps == kCps - 1 || c == p.n_chunks - 1) {
                const bool first = c < kCps;
#pragma unroll
                for (int m = 0; m < MT; ++m)
#pragma unroll
                    for (int n = 0; n < NT; ++n)
#pragma unroll
                        for (int e = 0; e < 4; ++e) {
                            total[m][n][e] = first ? acc[m][n][e] : __fadd_rn(total[m][n][e], acc[m][n][e]);
                            acc[m][n][e] = 0.0f;
                        }
                if (p.prologue == kProRmsNorm && tid < nr) ssq_tot = first ? ssq : __fadd_rn(ssq_tot, ssq);
            }
        }
        cp_async_wait_group<0>();
        if (p.prologue == kProRmsNorm) {
            if (tid < nr) rinv[tid] = inv_rms(p, ssq_tot);
            __syncthreads();
        }
#pragma unroll
        for (int m = 0; m < MT; ++m)
#pragma unroll
            for (int n = 0; n < NT; ++n)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int o = wm * 16 * MT + 16 * m + g + 8 * (e >> 1);
                    const int r = wn * 8 * NT + 8 * n + 2 * t + (e & 1);
                    if (o < no && r < nr) store_output(p, r0 + r, o0 + o, total[m][n][e], rinv[r]);
                }
        __syncthreads();
    }
}

// ---------------------------------------------------------------- host layout

int round16(int v) { return (v + 15) & ~15; }
int pad_stride(int v) { v = round16(v); return v % 128 == 0 ? v + 16 : v; }

template <int kDtype>
int unit_bytes(int xb) {
    using W = MmaW<kDtype>;
    return W::kBlocksPerUnit > 1 ? W::kBytes : xb * W::kBytes;
}

void base_params(const MatmulArgs& a, MmaParams& p) {
    p.x = a.x;
    p.k = a.k;
    p.x_stride = a.x_row_stride > 0 ? a.x_row_stride : (a.prologue == kProSiluMul ? 2 * a.k : a.k);
    p.n_rows = a.n_rows;
    p.w = static_cast<const uint8_t*>(a.w);
    p.w_row_bytes = row_bytes(a.w_dtype, a.k);
    p.n_out = a.n_out;
    p.bias = a.bias;
    p.norm = a.norm_weight;
    p.eps = a.eps;
    p.prologue = a.prologue;
    p.y = a.y;
    p.y_stride = a.y_row_stride > 0 ? a.y_row_stride : a.n_out;
    p.accumulate = a.accumulate ? 1 : 0;
    p.w_end = p.w + p.n_out * p.w_row_bytes;
    p.x_end = p.x + (p.n_rows - 1) * p.x_stride + (a.prologue == kProSiluMul ? 2 * a.k : a.k);
    p.nb = (int)((a.k + 31) / 32);
    p.n_slices = (p.nb + kSliceBlocks - 1) / kSliceBlocks;
    p.w_ldsm = (reinterpret_cast<uintptr_t>(a.w) % 16 == 0 && p.w_row_bytes % 16 == 0) ? 1 : 0;
    p.w_al4 = (reinterpret_cast<uintptr_t>(a.w) % 4 == 0 && p.w_row_bytes % 4 == 0) ? 1 : 0;
}

// Ring stage: weights of `bm` rows, activations of `nr` rows (x2 for
// SILU_MUL), the norm weight.
void stage_layout(MmaParams& p, int unit, int xb, int bm, int nr) {
    p.wstride = pad_stride(unit + 16);
    p.xstride = pad_stride(xb * 128 + 16);
    p.w_part = bm * p.wstride;
    p.x_part = (p.prologue == kProSiluMul ? 2 * nr : nr) * p.xstride;
    p.stage_bytes = p.w_part + p.x_part + (p.prologue == kProRmsNorm ? p.xstride : 0);
}

// Decode layout: per-warp rings and fragments, then the per-slice partials.
// Picks the number of warps (at most 8, at most one per slice) that fits
// `smem_limit`; false if none does.
bool dec_layout(MmaParams& p, int unit, int mt, int xb, int depth, bool ktab, int smem_limit, int* wk_out,
                int* smem_out) {
    // Even, so each block's meta row [xrows] keeps the float2 reads 8-byte aligned.
    p.xrows = (int)(p.n_rows < kDecRows ? p.n_rows : kDecRows);
    p.xrows += p.xrows & 1;
    stage_layout(p, unit, xb, 16 * mt, p.xrows);
    p.warp_bytes = round16(depth * p.stage_bytes + xb * p.xrows * 64 + 3 * xb * p.xrows * 4 +
                           (ktab ? 16 * mt * 8 * 8 : 0));
    const int tail = p.n_slices * mt * 512 + p.n_slices * kDecRows * 4 + kDecRows * 4;
    // Up to 8 warps, at most one per slice; a count that divides the slices
    // evenly (28 slices: 7 warps of 4) when there is one from 8 down to 5.
    int wk = p.n_slices < 8 ? p.n_slices : 8;
    for (int c = wk; c >= 5 && p.n_slices > 8; --c)
        if (p.n_slices % c == 0) { wk = c; break; }
    while (wk > 1 && wk * p.warp_bytes + tail > smem_limit) --wk;
    if (wk * p.warp_bytes + tail > smem_limit) return false;
    p.part_off = wk * p.warp_bytes;
    p.sqpart_off = p.part_off + p.n_slices * mt * 512;
    p.inv_off = p.sqpart_off + p.n_slices * kDecRows * 4;
    *wk_out = wk;
    *smem_out = p.inv_off + kDecRows * 4;
    return true;
}

// Wide layout: the ring, then fragment and meta double buffers and 1/rms.
bool wide_layout(MmaParams& p, int unit, int bm, int bn, int xb, int depth, bool ktab, int smem_limit,
                 int* smem_out) {
    stage_layout(p, unit, xb, bm, (int)(p.n_rows < bn ? p.n_rows : bn));
    p.xh_off = depth * p.stage_bytes;
    p.meta_off = p.xh_off + 2 * xb * bn * 64;
    p.ktab_off = round16(p.meta_off + (2 * 3 * xb * bn + bn) * 4);
    *smem_out = p.ktab_off + (ktab ? 2 * bm * 8 * 8 : 0);
    return *smem_out <= smem_limit;
}

}  // namespace

// ---------------------------------------------------------------- launch

namespace {

constexpr int kMaxDevices = 64;

struct DeviceLimits {
    int sms = 0;
    int smem_optin = 0;
};

DeviceLimits device_limits(int dev) {
    static DeviceLimits cache[kMaxDevices];
    static std::mutex mu;
    std::lock_guard<std::mutex> lock(mu);
    DeviceLimits& d = cache[dev];
    if (d.sms == 0) {
        check(cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, dev), "cudaDeviceGetAttribute");
        check(cudaDeviceGetAttribute(&d.smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev),
              "cudaDeviceGetAttribute");
    }
    return d;
}

// Every kernel configuration launch_typed can launch for a dtype (keep the two
// in step): the decode kernel with 16 and 32 outputs per CTA, and the wide
// kernel's tiles.
template <int kDtype>
cudaError_t allow_dtype(int bytes) {
    using D = DecCfg<kDtype>;
    using Wd = WideCfg<kDtype>;
    cudaError_t err = cudaSuccess;
    auto set = [&](const void* kernel) {
        if (err == cudaSuccess) err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    };
    set((const void*)mma_dec_kernel<kDtype, 1, D::kXB, D::kDepth, 1>);
    set((const void*)mma_dec_kernel<kDtype, 2, D::kXB, D::kDepth, 1>);
    if constexpr (D::kHasOcc) {
        set((const void*)mma_dec_kernel<kDtype, 1, kOccXB, kOccDepth, 2>);
        set((const void*)mma_dec_kernel<kDtype, 2, kOccXB, kOccDepth, 2>);
    }
    if constexpr (D::kK) {
        set((const void*)mma_wide_kernel<kDtype, 8, 1, 1, 2, 8, 3, 1>);
    } else {
        set((const void*)mma_wide_kernel<kDtype, 4, 2, 2, 4, Wd::kXB, Wd::kDepth, Wd::kMinB>);
        set((const void*)mma_wide_kernel<kDtype, 4, 2, 2, 2, Wd::kXBShort, 4, 1>);
        set((const void*)mma_wide_kernel<kDtype, 8, 1, 1, 2, Wd::kXBShort, 4, 1>);
        set((const void*)mma_wide_kernel<kDtype, 8, 1, 1, 2, Wd::kXB, 3, 1>);
    }
    return err;
}

// Raises every tensor-core matmul kernel's dynamic shared-memory limit to the
// device maximum, once per device, on the first call (normally an eager one;
// relaxed capture mode makes it safe while recording too).
void allow_smem(int dev, int bytes) {
    static std::atomic<uint64_t> done{0};
    static std::mutex mu;
    if (done.load() >> dev & 1u) return;
    std::lock_guard<std::mutex> lock(mu);
    if (done.load() >> dev & 1u) return;
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    (void)cudaThreadExchangeStreamCaptureMode(&mode);
    cudaError_t err = allow_dtype<STRATA_F16>(bytes);
    if (err == cudaSuccess) err = allow_dtype<STRATA_BF16>(bytes);
    if (err == cudaSuccess) err = allow_dtype<STRATA_Q8_0>(bytes);
    if (err == cudaSuccess) err = allow_dtype<STRATA_Q4_0>(bytes);
    if (err == cudaSuccess) err = allow_dtype<STRATA_Q4_1>(bytes);
    if (err == cudaSuccess) err = allow_dtype<STRATA_Q4_K>(bytes);
    if (err == cudaSuccess) err = allow_dtype<STRATA_Q6_K>(bytes);
    (void)cudaThreadExchangeStreamCaptureMode(&mode);
    check(err, "cudaFuncSetAttribute(matmul shared memory)");
    done.fetch_or(uint64_t(1) << dev);
}

template <int kDtype, int MT, int kXB, int kDepth, int kMinB>
bool launch_dec(MmaParams p, const DeviceLimits& lim, cudaStream_t stream) {
    constexpr int BM = 16 * MT;
    p.n_chunks = (p.nb + kXB - 1) / kXB;
    p.n_row_tiles = (int)((p.n_rows + kDecRows - 1) / kDecRows);
    const int64_t n_ot = (p.n_out + BM - 1) / BM;
    if (n_ot * p.n_row_tiles > INT32_MAX) return false;
    p.n_tiles = (int)(n_ot * p.n_row_tiles);
    int wk = 0, smem = 0;
    if (!dec_layout(p, unit_bytes<kDtype>(kXB), MT, kXB, kDepth, MmaW<kDtype>::kBlocksPerUnit > 1, lim.smem_optin,
                    &wk, &smem))
        return false;
    constexpr auto kernel = mma_dec_kernel<kDtype, MT, kXB, kDepth, kMinB>;
    launch_k(kernel, p.n_tiles, 32 * wk, smem, stream, p);
    check_launch("matmul (tensor cores, decode)");
    return true;
}

template <int kDtype, int WM, int WN, int MT, int NT, int kXB, int kDepth, int kMinB>
bool launch_wide(MmaParams p, const DeviceLimits& lim, cudaStream_t stream) {
    constexpr int BM = WM * 16 * MT, BN = WN * 8 * NT;
    p.n_chunks = (p.nb + kXB - 1) / kXB;
    const int64_t n_rt = (p.n_rows + BN - 1) / BN, n_ot = (p.n_out + BM - 1) / BM;
    if (n_rt * n_ot > INT32_MAX) return false;
    p.n_row_tiles = (int)n_rt;
    p.n_tiles = (int)(n_rt * n_ot);
    int smem = 0;
    if (!wide_layout(p, unit_bytes<kDtype>(kXB), BM, BN, kXB, kDepth, MmaW<kDtype>::kBlocksPerUnit > 1,
                     lim.smem_optin, &smem))
        return false;
    constexpr auto kernel = mma_wide_kernel<kDtype, WM, WN, MT, NT, kXB, kDepth, kMinB>;
    launch_k(kernel, p.n_tiles, WM * WN * 32, smem, stream, p);
    check_launch("matmul (tensor cores)");
    return true;
}

// Rows up to which the decode kernel is used: beyond them the wide kernel's
// 128-output tiles amortize activation conversion better. (Which kernel runs
// never changes a result: both compute the canonical sequence.)
constexpr int64_t kDecMaxRows = 16;

// Whether the decode kernel's occupancy configuration beats the deep one
// (measured on the H200, bench/gpu_matmul.py, RESULTS.md): only for large k
// (8B/1B shapes; the 135M model's matrices are latency-bound and want the
// fewest chunk steps); at several rows when k is large or the 32-output tiles
// fill most SMs; at one row only when they fill the SMs (Q4 types: more than
// one wave of them).
bool dec_occupancy(int64_t n_rows, int64_t n_out, int64_t k, int sms, bool plain, bool q4) {
    if (k < 2048) return false;
    const int64_t tiles32 = (n_out + 31) / 32;
    if (n_rows > 1) return plain ? k > 4096 : (k >= 4096 || 10 * tiles32 > 6 * sms);
    return q4 ? tiles32 > sms : 10 * tiles32 >= 9 * sms;
}

template <int kDtype>
void launch_typed(const MmaParams& p, cudaStream_t stream) {
    using D = DecCfg<kDtype>;
    using Wd = WideCfg<kDtype>;
    int dev = 0;
    check(cudaGetDevice(&dev), "cudaGetDevice");
    if (dev < 0 || dev >= kMaxDevices) fail(STRATA_ERR_INTERNAL, "cuda matmul: device index out of range");
    const DeviceLimits lim = device_limits(dev);
    allow_smem(dev, lim.smem_optin);
    if (p.n_rows <= kDecMaxRows) {
        const int64_t tiles32 = (p.n_out + 31) / 32 * ((p.n_rows + kDecRows - 1) / kDecRows);
        // 32 outputs per CTA spends ~20 % fewer instructions per weight byte than
        // 16 (the activations are staged and converted once for twice the
        // outputs); worth a few idle SMs (4096 outputs: 128 CTAs on 132 SMs).
        const bool mt2 = 10 * tiles32 >= 9 * lim.sms;
        bool ok = false;
        if constexpr (D::kHasOcc) {
            if (dec_occupancy(p.n_rows, p.n_out, p.k, lim.sms, MmaW<kDtype>::kPlain,
                              kDtype == STRATA_Q4_0 || kDtype == STRATA_Q4_1))
                ok = mt2 ? launch_dec<kDtype, 2, kOccXB, kOccDepth, 2>(p, lim, stream)
                         : launch_dec<kDtype, 1, kOccXB, kOccDepth, 2>(p, lim, stream);
        }
        if (!ok)
            ok = mt2 ? launch_dec<kDtype, 2, D::kXB, D::kDepth, 1>(p, lim, stream)
                     : launch_dec<kDtype, 1, D::kXB, D::kDepth, 1>(p, lim, stream);
        if (ok) return;
    }
    if constexpr (D::kK) {
        if (launch_wide<kDtype, 8, 1, 1, 2, 8, 3, 1>(p, lim, stream)) return;
    } else {
        // The tallest row tile (least weight dequantization per mma) that still
        // gives every multiprocessor a CTA.
        const int64_t n_ot = (p.n_out + 127) / 128;
        auto ctas = [&](int64_t bn) { return n_ot * ((p.n_rows + bn - 1) / bn); };
        if (ctas(64) >= lim.sms && launch_wide<kDtype, 4, 2, 2, 4, Wd::kXB, Wd::kDepth, Wd::kMinB>(p, lim, stream))
            return;
        if (ctas(32) >= lim.sms && launch_wide<kDtype, 4, 2, 2, 2, Wd::kXBShort, 4, 1>(p, lim, stream)) return;
        if (launch_wide<kDtype, 8, 1, 1, 2, Wd::kXBShort, 4, 1>(p, lim, stream)) return;
        if (launch_wide<kDtype, 8, 1, 1, 2, Wd::kXB, 3, 1>(p, lim, stream)) return;
    }
    fail(STRATA_ERR_INTERNAL, "cuda matmul: no tensor-core configuration fits this device's shared memory");
}

}  // namespace

bool mma_matmul_supports(int32_t w_dtype) {
    switch (w_dtype) {
    case STRATA_F16: case STRATA_BF16: case STRATA_Q8_0: case STRATA_Q4_0: case STRATA_Q4_1: case STRATA_Q4_K:
    case STRATA_Q6_K: return true;
    default: return false;
    }
}

void launch_mma_matmul(const MatmulArgs& a, cudaStream_t stream) {
    if (a.n_rows <= 0 || a.n_out <= 0) return;
    MmaParams p{};
    base_params(a, p);
    switch (a.w_dtype) {
    case STRATA_F16: launch_typed<STRATA_F16>(p, stream); break;
    case STRATA_BF16: launch_typed<STRATA_BF16>(p, stream); break;
    case STRATA_Q8_0: launch_typed<STRATA_Q8_0>(p, stream); break;
    case STRATA_Q4_0: launch_typed<STRATA_Q4_0>(p, stream); break;
    case STRATA_Q4_1: launch_typed<STRATA_Q4_1>(p, stream); break;
    case STRATA_Q4_K: launch_typed<STRATA_Q4_K>(p, stream); break;
    case STRATA_Q6_K: launch_typed<STRATA_Q6_K>(p, stream); break;
    default: fail(STRATA_ERR_INTERNAL, "cuda matmul: no tensor-core path for dtype " + std::to_string(a.w_dtype));
    }
}

}  // namespace cuda
}  // namespace strata

// cuda_int_tiles.cuh — the entry of the many-row integer tensor-core kernel
// (cuda_int_mma_tiles.cu): what launch_int_matmul (cuda_int_matmul.cu) hands
// it after the activation pre-pass, and the choice of whether it runs.
#pragma once

#include "core/dtype.h"
#include "cuda_common.cuh"

namespace strata {
namespace cuda {

// One integer matmul after the pre-pass: int8 activations xq [row][k], block
// meta [row][nbp] ({bits of dx, sx}), RMSNORM ssq chunks [row][n_slices].
struct IntTilesArgs {
    const int8_t* xq;
    const uint2* meta;
    const float* ssq;
    int64_t n_rows, k, n_out;
    int nbp;
    int32_t w_dtype;  // STRATA_Q4_0, STRATA_Q8_0, STRATA_Q4_1, STRATA_Q4_K or STRATA_Q6_K
    const void* w;
    const float* bias;
    float* y;
    bool accumulate;
    int prologue;
    float eps;
    int64_t y_row_stride = 0;  // elements between y rows (0: n_out)
};

// What the many-row kernels (the tile kernel, cuda_int_mma_tiles.cu; the wgmma kernel, cuda_int_wgmma.cu)
// read: IntTilesArgs with the derived sizes (n_row_tiles and n_tiles are the launcher's, per tile shape).
struct TileParams {
    const int8_t* xq;
    const uint2* meta;
    const float* ssq;
    int64_t n_rows, k, n_out, w_row_bytes;
    int nb, nbp, n_slices, n_row_tiles, n_tiles;
    const uint8_t* w;
    const uint8_t* w_end;
    const float* bias;
    float* y;
    int64_t y_stride;  // elements between y rows (>= n_out)
    int accumulate, prologue;
    float eps;
    // The tile kernel only: a warp none of whose rows is below n_rows skips its products and folds (it
    // still stages, waits and arrives, so the hand-off protocol is unchanged); the same bits.
    // STRATA_INT_TILES_SKIP_DEAD, read per call in launch_int_tiles (cuda_int_mma_tiles.cu).
    int skip_dead;
};

inline TileParams tile_params(const IntTilesArgs& a) {
    TileParams p{};
    p.xq = a.xq;
    p.meta = a.meta;
    p.ssq = a.ssq;
    p.n_rows = a.n_rows;
    p.k = a.k;
    p.n_out = a.n_out;
    p.w_row_bytes = dtype_row_bytes(a.w_dtype, a.k);
    p.nb = (int)(a.k / 32);
    p.nbp = a.nbp;
    p.n_slices = (p.nb + 7) / 8;  // slices of kIntSliceBlocks (cuda_int_blocks.cuh) blocks
    p.w = static_cast<const uint8_t*>(a.w);
    p.w_end = p.w + a.n_out * p.w_row_bytes;
    p.bias = a.bias;
    p.y = a.y;
    p.y_stride = a.y_row_stride > 0 ? a.y_row_stride : a.n_out;
    p.accumulate = a.accumulate ? 1 : 0;
    p.prologue = a.prologue;
    p.eps = a.eps;
    return p;
}

// The tile configuration the many-row kernel would use for this matmul (a
// choice code of cuda_int_mma_tiles.cu), or -1 where the older kernels run.
// STRATA_INT_MATMUL (read per call): unset or auto: routing v10 from 17 rows
// (K-quants from 9 on some matrices), 9-32 rows where the 16- and 32-row
// tiles fill the GPU (33-48 rows where the 48-row tiles do), fewer where the
// older kernels would use dp4a tiles, and from 2 rows when k is at most 1024;
// auto:v1 ... auto:v10: the same with that routing; tiles, tiles:v1 ...
// tiles:v10: that routing (tiles: v10) at every row count;
// tiles:128, tiles:64, tiles:32 and tiles:NOxROWSdD[o] one configuration;
// legacy never the tile kernel. No choice changes a bit (the bit-identity
// tests and bench/gpu_matmul.py compare them).
int int_tiles_choice(int64_t n_rows, int64_t n_out, int64_t k, int32_t w_dtype, int sms);

// The tail split (STRATA_INT_TILES_TAIL, read per call; 32 by default, 0 = off): how many of a routed call's
// last rows launch_int_matmul may give their own route instead of `choice`'s last row tile, where they are at
// most the variable's value and fewer than the tile's rows: a partial row tile costs most of a full one (the
// tile kernel is issue-bound; its idle warps only skip their folds), while a few rows on their own route cost
// a gemv or few-row launch. 0: no split (also for a configuration forced by STRATA_INT_MATMUL). Rows are
// independent and every route has the same bits, so no result changes.
int64_t int_tiles_tail(int choice, int64_t n_rows);

// Whether that split pays (always, under "N:always"): the head's tiles (head_choice) plus the tail's
// (tail_choice; -1 where the tail leaves the tile kernel) put at least 15 % less work on the busiest SM than
// `choice`'s tiles for all n_rows, and a tail off the tiles has at most kGemvMaxRows rows (cuda_int_tiles_route.cuh). On an
// H100 (bench/RESULTS.md, 2026-12-07) the unconditional split paid on the 8B's gate_up and lm_head and lost
// on o, k/v and down at 387-400 rows, where the whole tiles already make one wave or less; on an H200 the
// rule took every gain of that table and none of its losses (the same day's second session).
bool int_tiles_tail_pays(int choice, int head_choice, int tail_choice, int64_t n_rows, int64_t tail, int64_t n_out,
                         int sms);

void launch_int_tiles(const IntTilesArgs& a, int choice, int dev, cudaStream_t stream);

}  // namespace cuda
}  // namespace strata

// cuda_int_rows.cuh — the entry of the few-row integer tensor-core kernel
// (cuda_int_rows.cu: decode of 2 to ~32 sequences): whether it runs for a
// matmul, and its launch after launch_int_matmul's activation pre-pass
// (cuda_int_matmul.cu), with the pre-pass outputs of cuda_int_tiles.cuh.
#pragma once

#include "cuda_common.cuh"
#include "cuda_int_tiles.cuh"

namespace strata {
namespace cuda {

// Rows per CTA the few-row kernel would use for this matmul (8, 16 or 32),
// or 0 where the other kernels run (where it answers, it comes before the
// tile kernel; an explicit STRATA_INT_FUSE_ROUNDS that applies still keeps
// the one-launch dot kernel). STRATA_INT_MATMUL (read per call):
// unset/auto: 2 to 32 rows at k > 1024 (short k keeps the tile kernel) on
// matrices of at most 4096 outputs (wider ones: the older kernels, as fast);
// rows: every row count (rows:16, rows:32, rows:64 also fix the outputs per
// CTA); norows: auto's routing without this kernel (the routing before it);
// legacy and tiles*: never; other weight types than Q4_0, Q8_0 and Q4_1:
// never. Other values are refused (int_tiles_choice names the choices).
// auto also takes matrices of 4097-8192 outputs at 9-16 rows (in CTAs of 16
// warps); STRATA_INT_ROWS_WIDE=1 (A/B) every wider one, STRATA_INT_ROWS_WARPS
// = 8 or 16 (A/B) fixes the warps per CTA (launch_int_rows). Both read per
// call, strictly.
int int_rows_choice(int64_t n_rows, int64_t n_out, int64_t k, int32_t w_dtype);

// Runs y = the canonical integer matmul of `a` with `kr` rows per CTA
// (int_rows_choice's answer), the same bits as every other integer kernel.
// `early_stages` (STRATA_INT_EARLY_STAGES, read by the caller): each CTA requests
// the weights of its first tile's first parts before pdl_wait (early_rows_weights).
void launch_int_rows(const IntTilesArgs& a, int kr, int dev, cudaStream_t stream, bool early_stages = false);

}  // namespace cuda
}  // namespace strata

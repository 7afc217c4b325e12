// cuda_int_gemv.cuh — the entry of the memory-bound integer matmul for 1 to
// 8 rows (cuda_int_gemv.cu: one-sequence and small-batch decode): whether it
// runs for a matmul, and its launch after launch_int_matmul's activation
// pre-pass (cuda_int_matmul.cu), with the pre-pass outputs of
// cuda_int_tiles.cuh.
#pragma once

#include "cuda_common.cuh"
#include "cuda_int_tiles.cuh"
#include "cuda_int_tiles_route.cuh"

namespace strata {
namespace cuda {

// kGemvMaxRows (cuda_int_tiles_route.cuh): the largest STRATA_INT_GEMV value, the kernel's widest row template.

// Rows per thread the kernel would use for this matmul (1, 2, 4 or 8: the
// least template holding n_rows), or 0 where the other kernels run.
// STRATA_INT_GEMV (read per call, strata/env.py): auto (unset, empty: the
// default) = 1..8 rows of Q4_0 / Q8_0 on matrices of k >= 2048 and n_out >=
// 2048 (where it measured faster on the H200), 0 = never (the routing before
// this kernel), N in 1..8 = every matmul of 1..N rows on a routed weight type
// (Q4_0, Q8_0, Q4_1, Q4_K, Q6_K). Other values are refused with
// STRATA_ERR_INVALID_ARGUMENT. An explicit STRATA_INT_MATMUL that forces
// a kernel (legacy, rows*, tiles*) keeps that kernel; shapes whose activations
// and weight stages do not fit in `smem_cta` bytes of shared memory (the
// device's per-CTA opt-in limit) keep the older kernels too.
int int_gemv_choice(int64_t n_rows, int64_t n_out, int64_t k, int32_t w_dtype, int64_t smem_cta);

// STRATA_INT_GEMV_FUSE (read per call, strata/env.py): 1 = the gemv kernel
// quantizes its rows of x itself (no pre-pass launch), 0 or unset = after the
// pre-pass. Other values are refused with STRATA_ERR_INVALID_ARGUMENT.
bool int_gemv_fuse();

// Runs y = the canonical integer matmul of `a` with `kr` rows per thread
// (int_gemv_choice's answer): the same bits as every other integer kernel.
// With x (int_gemv_fuse()): no pre-pass ran; a.xq / a.meta / a.ssq are unused
// and each CTA quantizes rows of x (x_stride floats apart; `norm`: RMSNORM's
// weights) with the pre-pass's bits.
void launch_int_gemv(const IntTilesArgs& a, int kr, int dev, cudaStream_t stream, const float* x = nullptr,
                     int64_t x_stride = 0, const float* norm = nullptr);

}  // namespace cuda
}  // namespace strata

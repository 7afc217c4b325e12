// cuda_int_wgmma.cuh — the entry of the integer wgmma matmul (cuda_int_wgmma.cu):
// whether it runs for a matmul, and its launch after the activation pre-pass.
#pragma once

#include "cuda_int_tiles.cuh"  // IntTilesArgs: the pre-pass's blocks and the matmul's operands

namespace strata {
namespace cuda {

// The wgmma kernel's configuration for this matmul (0: two D banks, one CTA per SM; 1: one bank,
// CTAs of 128 registers a thread), or -1 where the other kernels run. STRATA_INT_WGMMA (read per
// call): unset or 0 never (the default until the H200 has timed it); N (1 to 1,000,000) Q4_0 / Q8_0 /
// Q4_1 / Q4_K matmuls of at least N rows whose 128-output x 64-row tiles give every SM a CTA; all: every
// such matmul (the bit-identity tests). STRATA_INT_WGMMA_BANKS 2 (default) or 1 picks the
// configuration. STRATA_INT_MATMUL=legacy wins (the tests' reference). Needs an sm_90 device (the
// kernel is built for sm_90a only): another device with the switch on is an error, not a fallback.
int int_wgmma_choice(int64_t n_rows, int64_t n_out, int32_t w_dtype, int dev, int sms);

void launch_int_wgmma(const IntTilesArgs& a, int choice, int dev, cudaStream_t stream);

}  // namespace cuda
}  // namespace strata

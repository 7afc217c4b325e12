// cuda_int_slice.cuh — one weight block of a slice read from shared memory at a
// compile-time byte phase: the extraction the dot kernel (cuda_int_matmul.cu)
// and the gemv kernel (cuda_int_gemv.cu) share. Both stage weight bytes with
// the 16-byte alignment they have in global memory, so a slice whose first
// byte sits at byte kC (0, 4, 8 or 12) of a 16-byte window has every block's
// bytes at offsets known at compile time.
#pragma once

#include "cuda_int_blocks.cuh"
#include "cuda_int_kquant.cuh"

namespace strata {
namespace cuda {

// Block kJ of a slice whose first byte is at byte kC of the 16-byte aligned
// `base` (shared memory): only the windows holding its bytes are loaded.
template <int kDtype, int kC, int kJ>
__device__ __forceinline__ IntBlock<kDtype> load_block(const uint8_t* base) {
    if constexpr (kIntSuper<kDtype>) {  // Q4_K: from the slice's first byte
        return int_kblock<kDtype, kKqAlign<kC>>(base + kC, kJ);
    } else {
        constexpr int B = kC + kJ * IntW<kDtype>::kBytes;
        constexpr int W0 = B / 16, W1 = (B + IntW<kDtype>::kBytes - 1) / 16, NW = W1 - W0 + 1;
        uint32_t w[4 * NW];
        const uint4* wp = reinterpret_cast<const uint4*>(base) + W0;
#pragma unroll
        for (int i = 0; i < NW; ++i) {
            const uint4 v = wp[i];
            w[4 * i] = v.x; w[4 * i + 1] = v.y; w[4 * i + 2] = v.z; w[4 * i + 3] = v.w;
        }
        return int_block<kDtype, B - 16 * W0, 0>(w);
    }
}

}  // namespace cuda
}  // namespace strata

// cuda_common.cuh — what every file of the CUDA backend shares.
//
// Host side: turning CUDA status codes into strata::Error (STRATA_ERR_DEVICE
// with "<what> failed: <cudaGetErrorString>"), so no CUDA failure is ever
// silent. Device side: small exact helpers — f16/bf16 decoding, loads from
// addresses that are only 2-byte aligned (GGUF blocks of 18, 34 or 210 bytes),
// and the fixed-order warp/block reductions every batch-invariant kernel
// uses. Nothing here depends on a batch size: that is the point.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "core/backend.h"
#include "core/errors.h"

namespace strata {
namespace cuda {

// ------------------------------------------------------------------ host

// Throws STRATA_ERR_DEVICE when `err` is not cudaSuccess. The non-sticky
// error state is cleared first, so the next call starts clean.
inline void check(cudaError_t err, const char* what) {
    if (err != cudaSuccess) {
        (void)cudaGetLastError();
        throw Error(STRATA_ERR_DEVICE, std::string(what) + " failed: " + cudaGetErrorString(err));
    }
}

// Call right after every kernel launch: reports a bad launch configuration or
// an earlier asynchronous fault without waiting for the stream.
inline void check_launch(const char* kernel) {
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess)
        throw Error(STRATA_ERR_DEVICE, std::string(kernel) + " launch failed: " + cudaGetErrorString(err));
}

inline unsigned int ceil_div_u(int64_t a, int64_t b) { return (unsigned int)((a + b - 1) / b); }

// ------------------------------------------------------------------ device

constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ float f16_to_f32(uint16_t bits) { return __half2float(__ushort_as_half(bits)); }
__device__ __forceinline__ float bf16_to_f32(uint16_t bits) { return __uint_as_float((uint32_t)bits << 16); }

// Read-only loads. `p` must be aligned to the loaded size.
__device__ __forceinline__ uint8_t ld_u8(const uint8_t* p) { return __ldg(p); }
__device__ __forceinline__ uint16_t ld_u16(const uint8_t* p) {
    return __ldg(reinterpret_cast<const unsigned short*>(p));
}

// Eight bytes starting at a 2-byte aligned address, byte i in bits 8*(i%4) of
// .x (i < 4) or .y. Uses the widest load the address allows; the bytes (and so
// every result computed from them) are the same on every path.
__device__ __forceinline__ uint2 ld_8bytes(const uint8_t* p) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    uint2 r;
    if ((a & 7) == 0) {
        r = __ldg(reinterpret_cast<const uint2*>(p));
    } else if ((a & 3) == 0) {
        r.x = __ldg(reinterpret_cast<const unsigned int*>(p));
        r.y = __ldg(reinterpret_cast<const unsigned int*>(p + 4));
    } else {
        r.x = (uint32_t)ld_u16(p) | ((uint32_t)ld_u16(p + 2) << 16);
        r.y = (uint32_t)ld_u16(p + 4) | ((uint32_t)ld_u16(p + 6) << 16);
    }
    return r;
}

// Byte i (0..7, a compile-time constant after unrolling) of an ld_8bytes result.
__device__ __forceinline__ uint32_t byte_of(uint2 v, int i) {
    return ((i < 4 ? v.x : v.y) >> (8 * (i & 3))) & 0xffu;
}

// Sum over the 32 lanes by an xor butterfly (offsets 16, 8, 4, 2, 1). Every
// lane ends with the same bits: at each step both partners add the same two
// partial sums, and float addition is commutative. All 32 lanes must call it.
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v = __fadd_rn(v, __shfl_xor_sync(kFullMask, v, off));
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, off));
    return v;
}

// warp_max / warp_sum of N values at once, N a power of two up to 32: every value
// gets exactly the butterfly's operations (offsets 16, 8, 4, 2, 1, each `op(own, partner)`), so the same
// bits. The first log2(N) levels scatter the values: at offset `off` a lane keeps half of the values it
// holds (the upper half where `lane & off`) and sends its partner the other half, which the partner
// keeps; the partner's partial of a kept value is the butterfly's partner partial, because both lanes
// agree on every higher lane bit. Then one value per lane takes the remaining levels, every lane of a
// group of 32 / N ends with the same bits (the butterfly's property), and lane v·32/N hands value v to
// all. N − 1 + 5 − log2(N) + N shuffles instead of 5·N (10 instead of 20 for 4), and
// no branch around them (the attention kernels' per-vector softmax).
template <int N, class Op>
__device__ __forceinline__ void warp_allreduce(float (&x)[N], int lane, Op op) {
    static_assert(N >= 1 && N <= 32 && (N & (N - 1)) == 0, "a power of two up to 32");
    constexpr int kLevels = N >= 32 ? 5 : N >= 16 ? 4 : N >= 8 ? 3 : N >= 4 ? 2 : N >= 2 ? 1 : 0;
    float y[N];
#pragma unroll
    for (int i = 0; i < N; ++i) y[i] = x[i];
#pragma unroll
    for (int lvl = 0; lvl < kLevels; ++lvl) {
        const int off = 16 >> lvl, keep_n = N >> (lvl + 1);
        const bool upper = (lane & off) != 0;
#pragma unroll
        for (int j = 0; j < keep_n; ++j) {
            const float send = upper ? y[j] : y[j + keep_n];
            const float keep = upper ? y[j + keep_n] : y[j];
            y[j] = op(keep, __shfl_xor_sync(kFullMask, send, off));
        }
    }
#pragma unroll
    for (int off = 16 >> kLevels; off > 0; off >>= 1) y[0] = op(y[0], __shfl_xor_sync(kFullMask, y[0], off));
#pragma unroll
    for (int v = 0; v < N; ++v) x[v] = __shfl_sync(kFullMask, y[0], v << (5 - kLevels));
}

// Sum over a block of kWarps * 32 threads in a fixed order: each warp's
// butterfly, then warp totals added in warp order by every thread (so all
// threads return the same value). `scratch` holds kWarps floats; the call
// begins and ends with a barrier so it may be reused right away.
template <int kWarps>
__device__ __forceinline__ float block_sum(float v, float* scratch) {
    v = warp_sum(v);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
    __syncthreads();
    float s = scratch[0];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) s = __fadd_rn(s, scratch[w]);
    __syncthreads();
    return s;
}

}  // namespace cuda
}  // namespace strata

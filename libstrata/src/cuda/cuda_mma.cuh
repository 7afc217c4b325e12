// cuda_mma.cuh — the device primitives of the tensor-core matmul: mma.sync
// m16n8k16 (f16 and bf16 inputs, f32 accumulators), ldmatrix, cp.async with
// zero fill, mbarriers, dynamic shared memory, f16x2 arithmetic and byte permutes.
//
// Why a header of its own: each primitive is one PTX instruction whose result
// is fully determined by its inputs (no rounding choice is left to the
// compiler), and the host emulator (libstrata/cuda_emu/mma_emu.h) substitutes
// a model of exactly these functions when STRATA_CUDA_EMU is defined, so the
// kernels built on them can be run and compared bit for bit on a machine
// without a GPU. Fragment layouts are the PTX ISA's (mma.m16n8k16, .f16/.bf16):
// lane = 4·g + t; A regs {(g, 2t..2t+1), (g+8, 2t..), (g, 2t+8..), (g+8, 2t+8..)};
// B regs {(k 2t..2t+1, n g), (k 2t+8.., n g)}; C/D {(g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1)}.
#pragma once

#include "cuda_common.cuh"

#ifdef STRATA_CUDA_EMU
#include "mma_emu.h"
#else
#include <cuda_bf16.h>

namespace strata {
namespace cuda {

// d = A·B + c over one 16x8x16 tile; kBf16 selects bf16 inputs (else f16).
template <bool kBf16>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1,
                                          const float (&c)[4]) {
    if constexpr (kBf16) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%10,%11,%12,%13};\n"
            : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(c[0]), "f"(c[1]), "f"(c[2]),
              "f"(c[3]));
    } else {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%10,%11,%12,%13};\n"
            : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(c[0]), "f"(c[1]), "f"(c[2]),
              "f"(c[3]));
    }
}

// Four 8x8 b16 matrices from shared memory: lanes 8m..8m+7 give the row
// addresses (16-byte aligned) of matrix m; r[m] = this lane's word of it.
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void* row) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
}

// 16 bytes global -> shared (both 16-byte aligned); only the first src_bytes
// (0..16) are read, the rest of the 16 are zero-filled.
__device__ __forceinline__ void cp_async16z(void* smem, const void* gmem, int src_bytes) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(src_bytes) : "memory");
}

// 8 bytes global -> shared (both 8-byte aligned); only the first src_bytes (0..8) are read.
__device__ __forceinline__ void cp_async8z(void* smem, const void* gmem, int src_bytes) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(s), "l"(gmem), "r"(src_bytes) : "memory");
}

// 4 bytes global -> shared (both 4-byte aligned).
__device__ __forceinline__ void cp_async4z(void* smem, const void* gmem, int src_bytes) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(s), "l"(gmem), "r"(src_bytes) : "memory");
}

// A hint: bring the 128-byte line holding gmem into L2 (nothing returns to the SM, the kernel does
// not wait for it). L2 is the GPU's point of coherence, so a line prefetched while another kernel
// writes it is never stale: safe anywhere, it changes only when bytes arrive.
__device__ __forceinline__ void prefetch_l2(const void* gmem) { asm volatile("prefetch.global.L2 [%0];\n" ::"l"(gmem)); }

// A GPU-scope acquire-release fence (fence.acq_rel.gpu): the release and the acquire half of a
// last-arrival protocol, run by one thread after a CTA barrier around a relaxed atomic (the CTA
// barrier orders the other threads' stores before it). __threadfence() is the sequentially
// consistent fence.sc.gpu (MEMBAR.SC.GPU in SASS), more than the protocol needs.
__device__ __forceinline__ void gpu_fence_acq_rel() { asm volatile("fence.acq_rel.gpu;\n" ::: "memory"); }

__device__ __forceinline__ void cp_async_commit_group() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

// Waits until at most N of this thread's committed groups are in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait_group() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// mbarriers in shared memory (sm_90): a phase completes when `count` arrivals have come; waiting
// names the parity of the phase waited for (the k-th completion, 0-based, has parity k & 1), which
// is unambiguous while no waiter falls two phases behind. Arrivals release and waits acquire at CTA
// scope, so a warp's shared-memory reads before its arrival are done before a waiter's later writes.
__device__ __forceinline__ void mbar_init(uint64_t* bar, unsigned count) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(bar);
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(s), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(bar);
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(s) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, unsigned parity) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(bar);
    unsigned done = 0;
    do {
        asm volatile("{\n.reg .pred ok;\nmbarrier.try_wait.parity.shared::cta.b64 ok, [%1], %2;\nselp.u32 %0, 1, 0, ok;\n}\n"
                     : "=r"(done) : "r"(s), "r"(parity) : "memory");
    } while (!done);
}
// One arrival on bar once every cp.async this thread issued before it has landed (noinc: the
// arrival counts against the count given at init).
__device__ __forceinline__ void cp_async_mbar_arrive(uint64_t* bar) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(bar);
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(s) : "memory");
}

__device__ __forceinline__ uint8_t* mma_smem() {
    extern __shared__ __align__(128) uint8_t strata_mma_smem[];
    return strata_mma_smem;
}

__device__ __forceinline__ void warp_sync() { __syncwarp(); }

// f16x2 arithmetic on register bits (round to nearest even; exact in every use here).
__device__ __forceinline__ uint32_t hadd2(uint32_t a, uint32_t b) {
    uint32_t d;
    asm("add.rn.f16x2 %0, %1, %2;\n" : "=r"(d) : "r"(a), "r"(b));
    return d;
}
__device__ __forceinline__ uint32_t hfma2(uint32_t a, uint32_t b, uint32_t c) {
    uint32_t d;
    asm("fma.rn.f16x2 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}

// (a & b) | c in one LOP3 (b and c in registers, so two constants fit).
__device__ __forceinline__ uint32_t and_or(uint32_t a, uint32_t b, uint32_t c) {
    uint32_t d;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}

// Bytes of {b, a} selected by the nibbles of `sel` (PTX prmt / __byte_perm).
__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) { return __byte_perm(a, b, sel); }

// (hi:lo) >> shift, shift in 0..31.
__device__ __forceinline__ uint32_t funnel_r(uint32_t lo, uint32_t hi, uint32_t shift) {
    return __funnelshift_r(lo, hi, shift);
}

// Round two floats to f16 (bf16) and pack them, `lo` in bits 0..15.
__device__ __forceinline__ uint32_t pack_f16(float lo, float hi) {
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
}
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
}

// exp(x) and x/y through the special-function unit: deterministic on a given
// GPU, about 2 ulp; used only where the result is rounded to f16 next.
__device__ __forceinline__ float fast_exp(float x) { return __expf(x); }
__device__ __forceinline__ float fast_div(float x, float y) { return __fdividef(x, y); }

// Exact conversions (the values converted here are integers below 2^31) and a
// correctly rounded reciprocal square root.
__device__ __forceinline__ float i2f_rn(int v) { return __int2float_rn(v); }
__device__ __forceinline__ int f2i_rz(float v) { return __float2int_rz(v); }
__device__ __forceinline__ float rsqrt_rn(float v) { return __frsqrt_rn(v); }
__device__ __forceinline__ float f16_bits_to_f32(uint32_t bits16) { return __half2float(__ushort_as_half((unsigned short)bits16)); }

}  // namespace cuda
}  // namespace strata
#endif

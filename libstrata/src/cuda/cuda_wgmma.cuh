// cuda_wgmma.cuh — the Hopper warpgroup MMA (wgmma, sm_90a) primitives of the
// integer wgmma matmul (cuda_int_wgmma.cu): int8 x int8 -> s32 over a 64 x 64 x 32
// tile per warpgroup (4 warps, 128 threads), A (64 weight rows x 32 values) in
// registers and B (64 activation rows x 32 values) in shared memory.
//
// Layouts (PTX ISA, "Asynchronous Warpgroup Level Matrix" — register fragments and
// the shared-memory matrix layout):
// - A in registers: warp w of the warpgroup holds rows 16w..16w+15 as mma.sync's
//   m16n8k32 A fragment (g = lane / 4, t = lane % 4): a[0] row g, values 4t..4t+3;
//   a[1] row g+8, the same values; a[2] row g, values 16+4t..; a[3] row g+8, those.
// - B in shared memory, K-major, no swizzle: core matrices of 8 rows x 16 bytes (a
//   row's 16 consecutive values, rows 16 bytes apart); the two 16-value halves of a
//   row are LBO bytes apart and consecutive groups of 8 rows SBO bytes apart. This
//   file's tiles use LBO = 128 (the halves' core matrices side by side) and SBO = 256:
//   value v of row n sits at (n / 8)·256 + (v / 16)·128 + (n % 8)·16 + v % 16.
// - D (s32, 32 registers a thread): d[4i + e] is row 16w + g + 8·(e / 2), column
//   8i + 2t + (e % 2) — mma.sync's m16n8 D fragment for each of the 8 column groups.
// The instruction is asynchronous: a thread may read D (or reuse B's shared memory)
// only after wgmma_wait; wgmma_fence_operand tells the compiler where the registers
// change. Shared memory written by the generic proxy (stores, cp.async) must be made
// visible to the async proxy wgmma reads through (fence_proxy_async) before the
// barrier that publishes it.
//
// Under STRATA_CUDA_EMU, libstrata/cuda_emu/wgmma_emu.h models exactly these
// functions (the descriptor decoded per the layout above; D written only at the wait;
// B's bytes compared between the issue and the wait).
#pragma once

#include "cuda_common.cuh"
#include "cuda_mma.cuh"  // under the emulator: the shared buffer wgmma_emu.h reads B from

#ifdef STRATA_CUDA_EMU
#include "wgmma_emu.h"
#else

namespace strata {
namespace cuda {

// The shared-memory descriptor of a K-major, unswizzled B tile at `smem` (16-byte aligned):
// start address, leading (LBO) and stride (SBO) byte offsets, each encoded as (x & 0x3FFFF) >> 4.
__device__ __forceinline__ uint64_t wgmma_desc(const void* smem, uint32_t lbo, uint32_t sbo) {
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(smem);
    return (uint64_t)((a & 0x3FFFFu) >> 4) | (uint64_t)((lbo & 0x3FFFFu) >> 4) << 16 |
           (uint64_t)((sbo & 0x3FFFFu) >> 4) << 32;
}

// Orders this thread's earlier generic-proxy writes to shared memory (stores, landed cp.async)
// before later async-proxy reads (wgmma's B), once a barrier publishes them.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// Before the first wgmma, and whenever registers it reads (A, D) were written since the last one.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// Waits until at most N of this warpgroup's committed groups are pending.
template <int N>
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// The compiler must not move reads or writes of these registers across this point (the wgmma
// writes them asynchronously, which the compiler cannot see).
__device__ __forceinline__ void wgmma_fence_operand(int (&d)[32]) {
#pragma unroll
    for (int i = 0; i < 32; ++i) asm volatile("" : "+r"(d[i])::"memory");
}

// d = A·B (exact s32; the previous d is not read: scale-d 0), A signed bytes in registers, B signed
// bytes at descriptor b.
__device__ __forceinline__ void wgmma_s8_64x64x32(int (&d)[32], const uint32_t (&a)[4], uint64_t b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k32.s32.s8.s8 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
        "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, "
        "{%32,%33,%34,%35}, %36, p;\n}\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]),
          "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]),
          "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]),
          "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"(0)
        : "memory");
}

}  // namespace cuda
}  // namespace strata

#endif

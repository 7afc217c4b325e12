// cuda_int_mma.cuh — the int8 tensor-core product of the integer matmul
// (cuda_int_matmul.cu): mma.sync m16n8k32 with s32 accumulation, A unsigned
// (Q4 nibbles, 0..15) or signed (Q8_0 quants) bytes, B signed int8
// activations. Integer products and sums are exact, so the result is the
// same however the hardware adds them: it is the same integer a dp4a chain
// computes for the same block.
//
// Fragments (PTX ISA, mma.m16n8k32 with 8-bit types), g = lane / 4, t = lane % 4:
//   a[0]: row g,   values 4t..4t+3      a[1]: row g+8, values 4t..4t+3
//   a[2]: row g,   values 16+4t..       a[3]: row g+8, values 16+4t..
//   b0:   column g, values 4t..4t+3     b1:   column g, values 16+4t..
//   d[0], d[1]: row g, columns 2t, 2t+1;  d[2], d[3]: row g+8, same columns.
// Under STRATA_CUDA_EMU a host model exchanges the fragments across the warp
// and sums the exact products.
#pragma once

#include "cuda_common.cuh"
#include "cuda_mma.cuh"  // under the emulator: its warp barrier

namespace strata {
namespace cuda {

#ifdef STRATA_CUDA_EMU
inline uint32_t g_emu_ia[64][32][4], g_emu_ib[64][32][2];

template <bool kUnsignedA>
inline void mma_i8_16832(int (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int i = 0; i < 4; ++i) g_emu_ia[warp][lane][i] = a[i];
    g_emu_ib[warp][lane][0] = b0;
    g_emu_ib[warp][lane][1] = b1;
    emu_warp_bar();
    auto A = [&](int row, int k) {
        const uint32_t reg = g_emu_ia[warp][(row & 7) * 4 + (k & 15) / 4][(row >= 8 ? 1 : 0) + (k >= 16 ? 2 : 0)];
        const uint32_t byte = (reg >> (8 * (k & 3))) & 0xffu;
        return kUnsignedA ? (int)byte : (int)(int8_t)byte;
    };
    auto B = [&](int k, int col) {
        const uint32_t reg = g_emu_ib[warp][col * 4 + (k & 15) / 4][k >= 16 ? 1 : 0];
        return (int)(int8_t)((reg >> (8 * (k & 3))) & 0xffu);
    };
    const int g = (int)lane >> 2, t = (int)lane & 3;
    int out[4];
    for (int e = 0; e < 4; ++e) {
        const int row = g + 8 * (e >> 1), col = 2 * t + (e & 1);
        int s = 0;
        for (int k = 0; k < 32; ++k) s += A(row, k) * B(k, col);
        out[e] = s;
    }
    emu_warp_bar();
    for (int e = 0; e < 4; ++e) d[e] = out[e];
}
#else
// d = A·B (exact int32) over one 16x8x32 tile.
template <bool kUnsignedA>
__device__ __forceinline__ void mma_i8_16832(int (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    if constexpr (kUnsignedA) {
        asm volatile(
            "mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%10,%10,%10,%10};\n"
            : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(0));
    } else {
        asm volatile(
            "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%10,%10,%10,%10};\n"
            : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(0));
    }
}
#endif

}  // namespace cuda
}  // namespace strata

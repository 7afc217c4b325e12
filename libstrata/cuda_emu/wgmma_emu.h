// wgmma_emu.h — host models of the primitives in libstrata/src/cuda/cuda_wgmma.cuh,
// included by it when STRATA_CUDA_EMU is defined (after emu.h and mma_emu.h).
//
// - wgmma_desc: the device's encoding (start, LBO and SBO as (x & 0x3FFFF) >> 4), with
//   the start taken relative to mma_smem()'s buffer (the emulated shared window).
// - wgmma_s8_64x64x32: warpgroup-collective like the instruction (all 128 threads must
//   call it with the same descriptor): the A fragments are exchanged through
//   per-warpgroup arrays, B is read from shared memory through the descriptor as the
//   PTX ISA defines the K-major unswizzled layout (value v of row n at start +
//   (n / 8)·SBO + (v / 16)·LBO + (n % 8)·16 + v % 16), and each thread's 32 exact sums
//   are computed at issue — but written into d only when a wgmma_wait retires their
//   group, so a kernel that reads D before waiting sees its old values (as it could on
//   the device). B's bytes are read again at the wait: a kernel that overwrites them
//   between the issue and the wait (which the device would read late) aborts the run.
// - commit / wait: groups of this thread's issued operations, oldest first.
// - fence_proxy_async, wgmma_fence, wgmma_fence_operand: ordering only, nothing to model.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace strata {
namespace cuda {

inline uint64_t wgmma_desc(const void* smem, uint32_t lbo, uint32_t sbo) {
    const intptr_t off = static_cast<const uint8_t*>(smem) - g_emu_smem;
    if (off < 0 || off >= (intptr_t)sizeof(g_emu_smem) || off % 16 != 0) {
        fprintf(stderr, "wgmma descriptor: %p is not a 16-byte aligned address of the shared buffer\n", smem);
        abort();
    }
    return (uint64_t)(((uint32_t)off & 0x3FFFFu) >> 4) | (uint64_t)((lbo & 0x3FFFFu) >> 4) << 16 |
           (uint64_t)((sbo & 0x3FFFFu) >> 4) << 32;
}

inline void fence_proxy_async() {}
inline void wgmma_fence() {}
inline void wgmma_fence_operand(int (&)[32]) {}

struct EmuWgmmaOp {
    int* d;
    int vals[32];
    uint64_t desc;
    std::vector<int8_t> b;  // B as read at issue, [n][v]
};
inline thread_local std::vector<EmuWgmmaOp> t_emu_wg_open;
inline thread_local std::vector<std::vector<EmuWgmmaOp>> t_emu_wg_groups;
inline uint32_t g_emu_wga[8][128][4];
inline uint64_t g_emu_wgd[8][128];

// B (64 rows x 32 values) as the descriptor addresses it.
inline std::vector<int8_t> emu_wgmma_b(uint64_t desc) {
    const size_t start = (size_t)(desc & 0x3FFFu) << 4, lbo = (size_t)((desc >> 16) & 0x3FFFu) << 4,
                 sbo = (size_t)((desc >> 32) & 0x3FFFu) << 4;
    std::vector<int8_t> b(64 * 32);
    for (int n = 0; n < 64; ++n)
        for (int v = 0; v < 32; ++v) {
            const size_t at = start + (size_t)(n / 8) * sbo + (size_t)(v / 16) * lbo + (size_t)(n % 8) * 16 + v % 16;
            if (at >= sizeof(g_emu_smem)) { fprintf(stderr, "wgmma B read past the shared buffer\n"); abort(); }
            b[n * 32 + v] = (int8_t)g_emu_smem[at];
        }
    return b;
}

inline void wgmma_s8_64x64x32(int (&d)[32], const uint32_t (&a)[4], uint64_t desc) {
    const unsigned tid = threadIdx.x, wg = tid / 128, w = (tid % 128) / 32, lane = tid & 31;
    if (wg >= t_block->wg_bars.size()) { fprintf(stderr, "wgmma outside a whole warpgroup\n"); abort(); }
    for (int i = 0; i < 4; ++i) g_emu_wga[wg][tid % 128][i] = a[i];
    g_emu_wgd[wg][tid % 128] = desc;
    t_block->wg_bars[wg]->arrive_and_wait();
    for (int i = 0; i < 128; ++i)
        if (g_emu_wgd[wg][i] != desc) { fprintf(stderr, "wgmma: the warpgroup's descriptors differ\n"); abort(); }
    // A(m, v): warp m / 16's lane ((m % 8)·4 + (v % 16) / 4), register (m % 16 >= 8) + 2·(v >= 16), byte v % 4.
    auto A = [&](int m, int v) {
        const int r = m % 16;
        const uint32_t reg = g_emu_wga[wg][(m / 16) * 32 + (r % 8) * 4 + (v % 16) / 4][(r >= 8 ? 1 : 0) + (v >= 16 ? 2 : 0)];
        return (int)(int8_t)((reg >> (8 * (v % 4))) & 0xffu);
    };
    EmuWgmmaOp op{&d[0], {}, desc, emu_wgmma_b(desc)};
    const int g = (int)lane >> 2, t = (int)lane & 3;
    for (int i = 0; i < 8; ++i)
        for (int e = 0; e < 4; ++e) {
            const int m = 16 * (int)w + g + 8 * (e >> 1), n = 8 * i + 2 * t + (e & 1);
            int s = 0;
            for (int v = 0; v < 32; ++v) s += A(m, v) * op.b[n * 32 + v];
            op.vals[4 * i + e] = s;
        }
    t_block->wg_bars[wg]->arrive_and_wait();  // no thread rewrites its posted fragment before all have read it
    t_emu_wg_open.push_back(std::move(op));
}

inline void wgmma_commit() {
    t_emu_wg_groups.push_back(std::move(t_emu_wg_open));
    t_emu_wg_open.clear();
}

template <int N>
inline void wgmma_wait() {
    while (t_emu_wg_groups.size() > (size_t)N) {
        for (auto& op : t_emu_wg_groups.front()) {
            if (emu_wgmma_b(op.desc) != op.b) {
                fprintf(stderr, "wgmma: B's shared memory changed between the issue and the wait\n");
                abort();
            }
            std::memcpy(op.d, op.vals, sizeof(op.vals));
        }
        t_emu_wg_groups.erase(t_emu_wg_groups.begin());
    }
}

// Operations not yet waited for when a kernel thread ends (a kernel bug): reported by the test harness.
inline size_t emu_pending_wgmma() {
    size_t n = t_emu_wg_open.size();
    for (auto& g : t_emu_wg_groups) n += g.size();
    return n;
}

}  // namespace cuda
}  // namespace strata

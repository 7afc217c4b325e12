// emu.h — a host emulation of the CUDA execution model, so the CUDA kernels'
// logic can be checked on a machine without a GPU.
//
// One OS thread per CUDA thread; __syncthreads is a std::barrier over the
// block; __shfl_xor_sync is a per-warp barrier plus an exchange array (so it
// is exactly as synchronous as on the device); __shared__ becomes a static
// (one block runs at a time); __ldg aborts on a misaligned address. Math uses
// host libm, so results match the GPU's only to rounding: this checks
// indexing, control flow, barriers and batch invariance, not device numerics.
#pragma once
#include <algorithm>
#include <atomic>
#include <barrier>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>
#include <cstdio>
#include <cstdlib>
#include "cluster_check.h"
#define __device__
#define __host__
#define __global__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(...)
struct uint2 { unsigned int x, y; };
struct uint4 { unsigned int x, y, z, w; };
struct float2 { float x, y; };
struct float4 { float x, y, z, w; };
inline float2 make_float2(float a, float b) { return {a, b}; }
inline uint2 make_uint2(unsigned a, unsigned b) { return {a, b}; }
// Integer intrinsics of the integer matmul (cuda_int_blocks.cuh), as the PTX manual defines them.
inline int __dp4a(int a, int b, int c) {
    for (int i = 0; i < 4; ++i) c += (int)(int8_t)(a >> (8 * i)) * (int)(int8_t)(b >> (8 * i));
    return c;
}
inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned sh) {
    return (unsigned)((((uint64_t)hi << 32) | lo) >> (sh & 31));
}
// cvt.rni.s32.f32: round to nearest even, NaN -> 0, saturating.
inline int __float2int_rn(float x) {
    if (x != x) return 0;
    if (x >= 2147483647.0f) return INT_MAX;
    if (x <= -2147483648.0f) return INT_MIN;
    return (int)std::nearbyint(x);
}
inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
inline void sincosf(float x, float* s, float* c) { *s = std::sin(x); *c = std::cos(x); }
typedef void* cudaStream_t;
template <class T> inline T __ldg(const T* p) {
    size_t al = sizeof(T) >= 16 ? 16 : sizeof(T);
    if (reinterpret_cast<uintptr_t>(p) % al != 0) { fprintf(stderr, "misaligned __ldg of %zu bytes at %p\n", sizeof(T), (const void*)p); abort(); }
    T v; std::memcpy(&v, p, sizeof(T)); return v; }
inline float __fmul_rn(float a, float b) { volatile float r = a * b; return r; }
inline float __fadd_rn(float a, float b) { volatile float r = a + b; return r; }
inline float __fsub_rn(float a, float b) { volatile float r = a - b; return r; }
inline float __fdiv_rn(float a, float b) { volatile float r = a / b; return r; }
inline float __fsqrt_rn(float a) { return std::sqrt(a); }
inline float __frsqrt_rn(float a) { return (float)(1.0 / std::sqrt((double)a)); }
inline float __uint_as_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
inline uint32_t __float_as_uint(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float __int_as_float(int32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
struct __half { uint16_t b; };
struct __half2 { __half x, y; };
inline __half __ushort_as_half(uint16_t b) { return {b}; }
inline float __half2float(__half h) { _Float16 f; std::memcpy(&f, &h.b, 2); return (float)f; }
inline __half __float2half_rn(float x) { _Float16 f = (_Float16)x; __half h; std::memcpy(&h.b, &f, 2); return h; }
inline float2 __half22float2(__half2 h) { return {__half2float(h.x), __half2float(h.y)}; }
template <class T> inline T min(T a, T b) { return a < b ? a : b; }
template <class T> inline T max(T a, T b) { return a > b ? a : b; }

struct Dim { unsigned x = 0, y = 0, z = 0; };
inline thread_local Dim threadIdx, blockIdx;
inline Dim blockDim, gridDim;
// Per-block state, reached through thread-local pointers so that the blocks of
// one cluster can run at the same time (each with its own barriers, shuffle
// exchange and dynamic shared memory).
struct EmuBlock {
    std::unique_ptr<std::barrier<>> bar;
    std::vector<std::unique_ptr<std::barrier<>>> warp_bars;
    std::vector<std::unique_ptr<std::barrier<>>> wg_bars;  // per warpgroup of 128 threads (wgmma_emu.h)
    uint64_t xchg[64][32];
    std::vector<unsigned char> smem;
};
inline thread_local EmuBlock* t_block = nullptr;
inline thread_local std::barrier<EmuClusterCompletion>* t_cluster_bar = nullptr;
inline thread_local EmuClusterCheck* t_cluster_check = nullptr;  // cluster_check.h: the barrier forms' check
inline thread_local EmuReadLog* t_read_log = nullptr;             // this thread's remote reads
inline thread_local std::vector<EmuBlock*>* t_cluster = nullptr;
inline thread_local int t_cluster_rank = 0;
inline void __syncthreads() { t_block->bar->arrive_and_wait(); }
inline void __syncwarp(unsigned = 0xffffffffu) { t_block->warp_bars[threadIdx.x >> 5]->arrive_and_wait(); }
template <class T> inline T __shfl_xor_sync(unsigned, T v, int off) {
    const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    uint64_t bits = 0; std::memcpy(&bits, &v, sizeof(T));
    t_block->xchg[warp][lane] = bits;
    t_block->warp_bars[warp]->arrive_and_wait();
    uint64_t o = t_block->xchg[warp][lane ^ off];
    t_block->warp_bars[warp]->arrive_and_wait();
    T r; std::memcpy(&r, &o, sizeof(T)); return r;
}
// The value of lane src (of the full warp).
template <class T> inline T __shfl_sync(unsigned, T v, int src) {
    const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    uint64_t bits = 0; std::memcpy(&bits, &v, sizeof(T));
    t_block->xchg[warp][lane] = bits;
    t_block->warp_bars[warp]->arrive_and_wait();
    uint64_t o = t_block->xchg[warp][src & 31];
    t_block->warp_bars[warp]->arrive_and_wait();
    T r; std::memcpy(&r, &o, sizeof(T)); return r;
}
// The value of lane (this lane - off), or this lane's own below lane off.
template <class T> inline T __shfl_up_sync(unsigned, T v, int off) {
    const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    uint64_t bits = 0; std::memcpy(&bits, &v, sizeof(T));
    t_block->xchg[warp][lane] = bits;
    t_block->warp_bars[warp]->arrive_and_wait();
    uint64_t o = lane >= (unsigned)off ? t_block->xchg[warp][lane - off] : bits;
    t_block->warp_bars[warp]->arrive_and_wait();
    T r; std::memcpy(&r, &o, sizeof(T)); return r;
}
// The lanes of the (full) warp whose value equals this lane's.
inline unsigned __match_any_sync(unsigned, unsigned v) {
    const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    t_block->xchg[warp][lane] = v;
    t_block->warp_bars[warp]->arrive_and_wait();
    unsigned m = 0;
    for (unsigned l = 0; l < 32; ++l)
        if ((unsigned)t_block->xchg[warp][l] == v) m |= 1u << l;
    t_block->warp_bars[warp]->arrive_and_wait();
    return m;
}
// The lanes of the (full) warp whose predicate is nonzero.
inline unsigned __ballot_sync(unsigned, int pred) {
    const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    t_block->xchg[warp][lane] = pred != 0;
    t_block->warp_bars[warp]->arrive_and_wait();
    unsigned m = 0;
    for (unsigned l = 0; l < 32; ++l)
        if (t_block->xchg[warp][l]) m |= 1u << l;
    t_block->warp_bars[warp]->arrive_and_wait();
    return m;
}
inline int __ffs(unsigned x) { return x ? __builtin_ctz(x) + 1 : 0; }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int atomicAdd(int* p, int v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
inline unsigned atomicAdd(unsigned* p, unsigned v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
inline unsigned atomicMax(unsigned* p, unsigned v) { unsigned o = __atomic_load_n(p, __ATOMIC_SEQ_CST); while (o < v && !__atomic_compare_exchange_n(p, &o, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {} return o; }
inline int atomicMin(int* p, int v) { int o = __atomic_load_n(p, __ATOMIC_SEQ_CST); while (o > v && !__atomic_compare_exchange_n(p, &o, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {} return o; }
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
template <class T> inline T __ldcg(const T* p) { return *p; }
// Runs kernel() for every block of a gx x gy grid, `cluster` consecutive blocks
// (along x) at a time and concurrently, each with `block` threads and
// `smem_bytes` of dynamic shared memory (filled with 0xFF bytes: NaN floats).
inline void run_grid_ex(unsigned gx, unsigned gy, unsigned block, unsigned cluster, size_t smem_bytes,
                        const std::function<void()>& kernel) {
    if (cluster == 0 || gx % cluster != 0) { fprintf(stderr, "bad cluster\n"); abort(); }
    gridDim = {gx, gy, 1}; blockDim = {block, 1, 1};
    for (unsigned by = 0; by < gy; ++by) for (unsigned c0 = 0; c0 < gx; c0 += cluster) {
        std::vector<std::unique_ptr<EmuBlock>> blocks;
        std::vector<EmuBlock*> ptrs;
        for (unsigned b = 0; b < cluster; ++b) {
            auto eb = std::make_unique<EmuBlock>();
            eb->bar = std::make_unique<std::barrier<>>((std::ptrdiff_t)block);
            for (unsigned w = 0; w < (block + 31) / 32; ++w) eb->warp_bars.push_back(std::make_unique<std::barrier<>>(32));
            for (unsigned w = 0; w < block / 128; ++w) eb->wg_bars.push_back(std::make_unique<std::barrier<>>(128));
            eb->smem.assign(smem_bytes + 16, 0xFF);
            ptrs.push_back(eb.get());
            blocks.push_back(std::move(eb));
        }
        const size_t n_threads = (size_t)block * cluster;
        EmuClusterCheck check(n_threads);
        std::barrier<EmuClusterCompletion> cbar((std::ptrdiff_t)n_threads, EmuClusterCompletion{&check, n_threads});
        std::vector<std::thread> ts;
        for (unsigned b = 0; b < cluster; ++b) for (unsigned t = 0; t < block; ++t)
            ts.emplace_back([&, b, t] {
                threadIdx = {t, 0, 0}; blockIdx = {c0 + b, by, 0};
                t_block = ptrs[b]; t_cluster_bar = &cbar; t_cluster = &ptrs; t_cluster_rank = (int)b;
                t_cluster_check = &check; t_read_log = &check.logs[(size_t)b * block + t];
                kernel();
            });
        for (auto& th : ts) th.join();
        check.finish(n_threads);
    }
}
inline void run_grid(unsigned gx, unsigned gy, unsigned block, const std::function<void()>& kernel) {
    run_grid_ex(gx, gy, block, 1, 0, kernel);
}

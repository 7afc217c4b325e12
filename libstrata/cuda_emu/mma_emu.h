// mma_emu.h — host models of the primitives in libstrata/src/cuda_mma.cuh,
// included by it when STRATA_CUDA_EMU is defined (after emu.h).
//
// - mma_16816: warp-collective like the real instruction (all 32 lanes must
//   call it): fragments are exchanged through per-warp arrays, then each lane
//   computes its four D elements as d = c, d += a[k]·b[k] for k = 0..15 in
//   order, in float (each product is exact). The device's tensor cores add
//   in their own (unknown) way, so only the kernels' logic is checked — but a
//   model whose sum depends on the k order makes two code paths that feed the
//   same k values in different orders give different bits, as they would on
//   the device.
// - ldmatrix x4: warp-collective, lanes 8m..8m+7 supply matrix m's rows.
// - cp.async: deferred. The source bytes are read at issue time and written
//   to shared memory only when a wait_group retires their group, so a kernel
//   that reads shared memory before waiting sees stale bytes (as it could on
//   the device) instead of passing by luck. cp.async.mbarrier.arrive lands
//   the thread's copies, then arrives.
// - mbarriers: a counted phase per barrier address; a wait blocks until the
//   phase of the given parity completes (so a missing wait reads stale or
//   half-written slots, and a missing arrival hangs).
// - dynamic shared memory: one static buffer (blocks run one at a time).
#pragma once
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

namespace strata {
namespace cuda {

inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return {a, b, c, d}; }
inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }

inline void emu_warp_bar() { (void)__shfl_xor_sync(0xffffffffu, 0u, 0); }
inline void warp_sync() { emu_warp_bar(); }

inline float emu_f16(uint32_t bits) {
    _Float16 h; uint16_t b = (uint16_t)bits; std::memcpy(&h, &b, 2); return (float)h;
}
inline uint32_t emu_f16_bits(double v) {
    _Float16 h = (_Float16)v; uint16_t b; std::memcpy(&b, &h, 2); return b;
}
inline float emu_bf16(uint32_t bits) { return __uint_as_float((bits & 0xffffu) << 16); }
inline uint32_t emu_bf16_bits(float v) {
    uint32_t u = __float_as_uint(v);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (u >> 16) | 0x40u;  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return u >> 16;
}

inline uint32_t g_emu_a[64][32][4], g_emu_b[64][32][2];
inline const void* g_emu_rows[64][32];

template <bool kBf16>
inline void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1, const float (&c)[4]) {
    const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int i = 0; i < 4; ++i) g_emu_a[warp][lane][i] = a[i];
    g_emu_b[warp][lane][0] = b0;
    g_emu_b[warp][lane][1] = b1;
    emu_warp_bar();
    auto val = [](uint32_t reg, int half) {
        const uint32_t bits = half ? reg >> 16 : reg & 0xffffu;
        return kBf16 ? emu_bf16(bits) : emu_f16(bits);
    };
    auto A = [&](int row, int k) {
        const int l = (row & 7) * 4 + (k & 7) / 2, r = (row >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0);
        return val(g_emu_a[warp][l][r], k & 1);
    };
    auto B = [&](int k, int col) {
        const int l = col * 4 + (k & 7) / 2, r = k >= 8 ? 1 : 0;
        return val(g_emu_b[warp][l][r], k & 1);
    };
    const int g = (int)lane >> 2, t = (int)lane & 3;
    float out[4];
    for (int e = 0; e < 4; ++e) {
        const int row = g + 8 * (e >> 1), col = 2 * t + (e & 1);
        float acc = c[e];
        for (int k = 0; k < 16; ++k) acc = __fadd_rn(acc, A(row, k) * B(k, col));
        out[e] = acc;
    }
    emu_warp_bar();
    for (int e = 0; e < 4; ++e) d[e] = out[e];
}

inline void ldsm_x4(uint32_t (&r)[4], const void* row) {
    const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (reinterpret_cast<uintptr_t>(row) % 16 != 0) { fprintf(stderr, "misaligned ldmatrix row\n"); abort(); }
    g_emu_rows[warp][lane] = row;
    emu_warp_bar();
    for (int m = 0; m < 4; ++m) {
        const uint8_t* p = static_cast<const uint8_t*>(g_emu_rows[warp][8 * m + lane / 4]);
        std::memcpy(&r[m], p + 4 * (lane % 4), 4);
    }
    emu_warp_bar();
}

struct EmuCopy { void* dst; std::vector<uint8_t> bytes; };
inline thread_local std::vector<std::vector<EmuCopy>> t_emu_groups;  // committed groups, oldest first
inline thread_local std::vector<EmuCopy> t_emu_open;                 // issued since the last commit

inline void emu_cp_async(void* smem, const void* gmem, int size, int src_bytes) {
    if ((reinterpret_cast<uintptr_t>(smem) | reinterpret_cast<uintptr_t>(gmem)) % size != 0) {
        fprintf(stderr, "misaligned cp.async of %d bytes\n", size); abort();
    }
    if (src_bytes < 0 || src_bytes > size) { fprintf(stderr, "bad cp.async src size %d\n", src_bytes); abort(); }
    EmuCopy c{smem, std::vector<uint8_t>(size, 0)};
    if (src_bytes > 0) std::memcpy(c.bytes.data(), gmem, src_bytes);
    t_emu_open.push_back(std::move(c));
}
inline void cp_async16z(void* smem, const void* gmem, int src_bytes) { emu_cp_async(smem, gmem, 16, src_bytes); }
// A cache hint: no value to model. Tests may name the range every hinted address must fall in
// (test_kernels decode: the KV pool, for the attention kernel's hints made before its wait); the
// calls and the ones outside it are counted.
inline std::atomic<const char*> emu_prefetch_lo{nullptr}, emu_prefetch_hi{nullptr};
inline std::atomic<long> emu_prefetch_calls{0}, emu_prefetch_outside{0};
inline void prefetch_l2(const void* p) {
    emu_prefetch_calls++;
    const char* c = static_cast<const char*>(p);
    const char* lo = emu_prefetch_lo.load();
    if (lo != nullptr && (c < lo || c >= emu_prefetch_hi.load())) emu_prefetch_outside++;
}
inline void gpu_fence_acq_rel() { std::atomic_thread_fence(std::memory_order_acq_rel); }
inline void cp_async4z(void* smem, const void* gmem, int src_bytes) { emu_cp_async(smem, gmem, 4, src_bytes); }
inline void cp_async8z(void* smem, const void* gmem, int src_bytes) { emu_cp_async(smem, gmem, 8, src_bytes); }
inline void cp_async_commit_group() { t_emu_groups.push_back(std::move(t_emu_open)); t_emu_open.clear(); }
template <int N> inline void cp_async_wait_group() {
    while (t_emu_groups.size() > (size_t)N) {
        for (auto& c : t_emu_groups.front()) std::memcpy(c.dst, c.bytes.data(), c.bytes.size());
        t_emu_groups.erase(t_emu_groups.begin());
    }
}
// Copies still pending when a kernel thread ends (a kernel bug): reported by the test harness.
inline size_t emu_pending_copies() {
    size_t n = t_emu_open.size();
    for (auto& g : t_emu_groups) n += g.size();
    return n;
}

// mbarriers: a side table keyed by the barrier's shared-memory address (init resets it; one block
// runs at a time). A wait blocks the OS thread until the phase of the given parity has completed.
struct EmuMbar { unsigned count, pending; uint64_t phase; };
inline std::mutex g_emu_mbar_mu;
inline std::condition_variable g_emu_mbar_cv;
inline std::map<const void*, EmuMbar> g_emu_mbars;
inline EmuMbar& emu_mbar(const void* bar) {
    auto it = g_emu_mbars.find(bar);
    if (it == g_emu_mbars.end()) { fprintf(stderr, "mbarrier used before its init\n"); abort(); }
    return it->second;
}
inline void mbar_init(uint64_t* bar, unsigned count) {
    if (reinterpret_cast<uintptr_t>(bar) % 8 != 0 || count == 0) { fprintf(stderr, "bad mbarrier init\n"); abort(); }
    std::lock_guard<std::mutex> lk(g_emu_mbar_mu);
    g_emu_mbars[bar] = EmuMbar{count, count, 0};
}
inline void mbar_arrive(uint64_t* bar) {
    std::lock_guard<std::mutex> lk(g_emu_mbar_mu);
    EmuMbar& b = emu_mbar(bar);
    if (--b.pending == 0) { ++b.phase; b.pending = b.count; g_emu_mbar_cv.notify_all(); }
}
inline void mbar_wait(uint64_t* bar, unsigned parity) {
    std::unique_lock<std::mutex> lk(g_emu_mbar_mu);
    g_emu_mbar_cv.wait(lk, [&] { return (emu_mbar(bar).phase & 1u) != (parity & 1u); });
}
// This thread's copies land (oldest first), then it arrives: what the device's arrival waits for.
inline void cp_async_mbar_arrive(uint64_t* bar) {
    cp_async_commit_group();
    cp_async_wait_group<0>();
    mbar_arrive(bar);
}

alignas(128) inline uint8_t g_emu_smem[256 * 1024];
// Blocks run one at a time share g_emu_smem; blocks run at the same time with their own dynamic shared
// memory (run_grid_ex's smem_bytes: the matmul chain kernel's grid, every CTA at once) use theirs.
inline uint8_t* mma_smem() {
    if (t_block != nullptr && t_block->smem.size() > 16) {
        uint8_t* p = t_block->smem.data();
        return p + (16 - reinterpret_cast<uintptr_t>(p) % 16) % 16;
    }
    return g_emu_smem;
}

inline uint32_t hadd2(uint32_t a, uint32_t b) {
    return emu_f16_bits((double)emu_f16(a) + emu_f16(b)) | emu_f16_bits((double)emu_f16(a >> 16) + emu_f16(b >> 16)) << 16;
}
inline uint32_t hfma2(uint32_t a, uint32_t b, uint32_t c) {
    auto one = [](uint32_t x, uint32_t y, uint32_t z) { return emu_f16_bits((double)emu_f16(x) * emu_f16(y) + emu_f16(z)); };
    return one(a, b, c) | one(a >> 16, b >> 16, c >> 16) << 16;
}
inline uint32_t and_or(uint32_t a, uint32_t b, uint32_t c) { return (a & b) | c; }
inline uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
    const uint64_t v = (uint64_t)b << 32 | a;
    uint32_t r = 0;
    for (int i = 0; i < 4; ++i) r |= (uint32_t)((v >> (8 * ((sel >> (4 * i)) & 7))) & 0xff) << (8 * i);
    return r;
}
inline uint32_t funnel_r(uint32_t lo, uint32_t hi, uint32_t shift) {
    return (uint32_t)((((uint64_t)hi << 32) | lo) >> (shift & 31));
}
inline uint32_t pack_f16(float lo, float hi) { return emu_f16_bits(lo) | emu_f16_bits(hi) << 16; }
inline uint32_t pack_bf16(float lo, float hi) { return emu_bf16_bits(lo) | emu_bf16_bits(hi) << 16; }
inline float fast_exp(float x) { return std::exp(x); }
inline float fast_div(float x, float y) { return x / y; }
inline float i2f_rn(int v) { return (float)v; }
inline int f2i_rz(float v) { return (int)v; }
inline float rsqrt_rn(float v) { return (float)(1.0 / std::sqrt((double)v)); }
inline float f16_bits_to_f32(uint32_t bits16) { return emu_f16(bits16); }

}  // namespace cuda
}  // namespace strata

// cuda_int_gemv.cu — the integer-exact matmul at 1 to 8 rows (decode), built
// to stream the weights at memory speed, computing per output element exactly
// the canonical arithmetic of cuda_int_matmul.cu (per block the exact integer
// product and int_block_fold's float steps, blocks ascending inside a slice of
// 8, slice totals added in slice order, the same RMSNORM factor, bias and
// accumulate).
//
// Why a kernel of its own (docs/cuda_backend.md, "integer matmul"): the dot
// kernel's one-row path stages weights through shared memory with cp.async,
// re-reads them with alignment shifts and folds through shared memory per part;
// on the H200 it issued ~157 thread instructions per Q4_0 block and stayed
// issue-bound at 37-55 % of DRAM bandwidth. Here nothing but the slice partials
// touches shared memory:
//  - a thread owns (output, slice) units: it reads its slice's weight blocks
//    straight from global memory (16-byte loads where rows are 16-byte aligned,
//    a full slice's windows all issued before its first block so ~144 bytes per
//    thread are in flight; 4- or 2-byte loads otherwise: one alignment per
//    launch, so no divergence),
//    decodes each block once with the cuda_int_blocks.cuh / cuda_int_kquant.cuh /
//    cuda_int_q6k.cuh helpers (Q6_K's 210-byte slices: 2-byte phases, Q6Src) and runs the block's dp4a chain for each of its kR rows;
//  - a CTA owns NO outputs (32, 16, 8 or 4) x all slices; thread t takes output
//    t % NO and slices t / NO, t / NO + SL, ... (SL = slice lanes), so a warp's
//    lanes are NO consecutive outputs at 32 / NO slices: the activation loads
//    (int8 values and block meta from the pre-pass, through L1) are the same
//    address for NO lanes (a broadcast), and every weight byte is read once;
//  - every slice's partial (one float per row) goes to shared memory
//    [slice][output][row]; after one barrier, one thread per (output, row) adds
//    them in slice order, then RMSNORM's factor, bias, accumulate;
//  - before pdl_wait() each thread asks L2 for the lines of its first slice
//    (early_gemv_prefetch: weights only, which no kernel writes), so the first
//    wave's weights stream while the previous kernel drains.
// Which thread computes an element and how many rows the launch has never
// change its operations (checked bit for bit by
// libstrata/cuda_emu/test_int_gemv.cpp and tests/kernels/test_int_gemv.py).
//
// Per Q4_0 block and row the inner loop is ~1.2 weight loads (a slice is 9
// windows of 16 bytes), the scale conversion, 4 word shifts and 8 nibble masks
// (once for all rows), then per row 2 activation loads + 1 meta load, 8 dp4a
// and the fold's 4 operations.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "cuda_int_blocks.cuh"
#include "cuda_int_gemv.cuh"
#include "cuda_int_kquant.cuh"
#include "cuda_int_q6k.cuh"
#include "core/dtype.h"
#include "cuda_kernels.cuh"
#include "cuda_mma.cuh"
#include "cuda_pdl.cuh"

namespace strata {
namespace cuda {
namespace {

constexpr int kGemvThreads = 256;
constexpr int kGemvSmem = 48 * 1024;  // slice partials per CTA at most (no opt-in attribute needed)

struct GemvParams {
    const int8_t* xq;   // [row][k]
    const uint2* meta;  // [row][nbp]: {bits of dx, sx}
    const float* ssq;   // [row][n_slices] (RMSNORM)
    int64_t n_rows, k, n_out, w_row_bytes;
    int nb, nbp, n_slices;
    const uint8_t* w;
    const float* bias;
    float* y;
    int accumulate, prologue;
    float eps;
    int no, sl, threads, n_tiles;  // outputs per CTA, slice lanes, threads per CTA, CTAs
};

// Shared memory of the slice partials: [n_slices][no][kr] floats.
inline int64_t gemv_smem(int64_t n_slices, int no, int kr) { return n_slices * no * kr * (int64_t)sizeof(float); }

// The CTA shape for kr rows per thread on `sms` SMs: 32 outputs per CTA, halved
// (to 4 at least) while that gives fewer than two CTAs per SM or more than
// kGemvSmem of partials; slice lanes so that a CTA has at most kGemvThreads
// threads and no more lanes than slices. False where 4 outputs do not fit.
inline bool gemv_shape(GemvParams& p, int kr, int sms) {
    int no = 32;
    while (no > 4 && (p.n_out + no - 1) / no < 2 * (int64_t)sms) no /= 2;
    while (no > 4 && gemv_smem(p.n_slices, no, kr) > kGemvSmem) no /= 2;
    if (gemv_smem(p.n_slices, no, kr) > kGemvSmem) return false;
    p.no = no;
    p.sl = std::min(p.n_slices, kGemvThreads / no);
    p.threads = 32 * ((no * p.sl + 31) / 32);
    p.n_tiles = (int)std::min<int64_t>((p.n_out + no - 1) / no, INT32_MAX);
    return true;
}

// Block kJ (compile-time) of the slice starting at sp (global memory): kA is
// the alignment every slice start of the launch has (16: 16-byte windows,
// fetched once each after the compiler merges the repeats of neighbouring
// blocks; 4: words; 2: halves). The same bytes, so the same IntBlock, whatever kA.
template <int kDtype, int kA, int kJ>
__device__ __forceinline__ IntBlock<kDtype> gemv_block(const uint8_t* sp) {
    if constexpr (kDtype == STRATA_Q6_K) {  // 210-byte slices: any 2-byte phase, through Q6Src's aligned words
        return int_block_q6k(Q6Src(sp), kJ);
    } else if constexpr (kIntSuper<kDtype>) {  // Q4_K: from the slice's (= super-block's) first byte
        return int_kblock<kDtype, kA>(sp, kJ);
    } else {
        constexpr int Bt = IntW<kDtype>::kBytes, B = kJ * Bt;
        if constexpr (kA == 16) {
            constexpr int W0 = B / 16, NW = (B + Bt - 1) / 16 - W0 + 1;
            uint32_t w[4 * NW];
            const uint4* wp = reinterpret_cast<const uint4*>(sp) + W0;
#pragma unroll
            for (int i = 0; i < NW; ++i) {
                const uint4 v = __ldg(wp + i);
                w[4 * i] = v.x; w[4 * i + 1] = v.y; w[4 * i + 2] = v.z; w[4 * i + 3] = v.w;
            }
            return int_block<kDtype, B - 16 * W0, 0>(w);
        } else if constexpr (kA == 4) {
            constexpr int W0 = B / 4, NW = (B + Bt - 1) / 4 - W0 + 1;
            uint32_t w[NW];
            const uint32_t* wp = reinterpret_cast<const uint32_t*>(sp) + W0;
#pragma unroll
            for (int i = 0; i < NW; ++i) w[i] = __ldg(wp + i);
            return int_block<kDtype, B - 4 * W0, 0>(w);
        } else {
            return int_block_any<kDtype>(sp + B);
        }
    }
}

// Block kJ's dp4a chain and int_block_fold for each of the kR rows: xs / ms are
// the slice's activations and meta of row 0 (rows p.k bytes / p.nbp entries apart).
template <int kDtype, int kR, int kJ>
__device__ __forceinline__ void gemv_rows(const GemvParams& p, const IntBlock<kDtype>& wb, const int8_t* xs,
                                          const uint2* ms, int nr, float (&acc)[kR]) {
#pragma unroll
    for (int r = 0; r < kR; ++r) {
        if (kR == 1 || r < nr) {
            const uint4* xp = reinterpret_cast<const uint4*>(xs + r * p.k + 32 * kJ);
            const uint4 xa = __ldg(xp), xb = __ldg(xp + 1);
            const uint2 m = __ldg(ms + r * p.nbp + kJ);
            const int dot = int_block_dot<kDtype>(wb, xa, xb);
            acc[r] = int_block_fold<kDtype>(acc[r], wb.d, wb.m, dot, __uint_as_float(m.x), (int)m.y);
        }
    }
}

// Blocks kJ.. of one slice in order, each loaded on its own (kFull: all 8, no bounds checks).
template <int kDtype, int kR, int kA, int kJ, bool kFull>
__device__ __forceinline__ void gemv_blocks(const GemvParams& p, const uint8_t* sp, const int8_t* xs, const uint2* ms,
                                            int nbs, int nr, float (&acc)[kR]) {
    if constexpr (kJ < kIntSliceBlocks) {
        if (kFull || kJ < nbs) gemv_rows<kDtype, kR, kJ>(p, gemv_block<kDtype, kA, kJ>(sp), xs, ms, nr, acc);
        gemv_blocks<kDtype, kR, kA, kJ + 1, kFull>(p, sp, xs, ms, nbs, nr, acc);
    }
}

// Blocks kJ.. of a full slice whose 16-byte windows are already in registers (w).
template <int kDtype, int kR, int kJ, int N>
__device__ __forceinline__ void gemv_blocks_regs(const GemvParams& p, const uint32_t (&w)[N], const int8_t* xs,
                                                 const uint2* ms, int nr, float (&acc)[kR]) {
    if constexpr (kJ < kIntSliceBlocks) {
        IntBlock<kDtype> wb;
        if constexpr (kIntSuper<kDtype>) wb = int_kblock<kDtype, 16>(reinterpret_cast<const uint8_t*>(w), kJ);
        else wb = int_block<kDtype, 0, kJ>(w);
        gemv_rows<kDtype, kR, kJ>(p, wb, xs, ms, nr, acc);
        gemv_blocks_regs<kDtype, kR, kJ + 1>(p, w, xs, ms, nr, acc);
    }
}

// A full slice on the 16-byte path: all its windows are loaded first (9 for Q4_0 / Q4_K, 17 for
// Q8_0), so a thread has its whole slice in flight at once rather than a window or two per block.
template <int kDtype, int kR>
__device__ __forceinline__ void gemv_slice_regs(const GemvParams& p, const uint8_t* sp, const int8_t* xs,
                                                const uint2* ms, int nr, float (&acc)[kR]) {
    constexpr int NW = kIntSliceBytes<kDtype> / 16;
    alignas(16) uint32_t w[4 * NW];
    const uint4* wp = reinterpret_cast<const uint4*>(sp);
#pragma unroll
    for (int i = 0; i < NW; ++i) {
        const uint4 v = __ldg(wp + i);
        w[4 * i] = v.x; w[4 * i + 1] = v.y; w[4 * i + 2] = v.z; w[4 * i + 3] = v.w;
    }
    gemv_blocks_regs<kDtype, kR, 0>(p, w, xs, ms, nr, acc);
}

// Before pdl_wait() (cuda_pdl.cuh): an L2 prefetch of the lines of this thread's
// first slice. Reads only the weights (which no kernel writes) and writes nothing.
template <int kDtype>
__device__ __forceinline__ void early_gemv_prefetch(const GemvParams& p) {
#if defined(__CUDA_ARCH__)
    constexpr int SB = kIntSliceBytes<kDtype>;
    const int o_l = (int)threadIdx.x % p.no, sl = (int)threadIdx.x / p.no;
    const int64_t o = (int64_t)blockIdx.x * p.no + o_l;
    if (sl >= p.sl || o >= p.n_out) return;
    const int nbs = min(kIntSliceBlocks, p.nb - sl * kIntSliceBlocks);
    const uintptr_t a = reinterpret_cast<uintptr_t>(p.w + o * p.w_row_bytes + (int64_t)sl * SB);
    for (uintptr_t l = a & ~(uintptr_t)127; l < a + (uintptr_t)(nbs * SB / kIntSliceBlocks); l += 128)
        asm volatile("prefetch.global.L2 [%0];" ::"l"(l));
#endif
}

template <int kDtype, int kR, int kA>
__global__ void __launch_bounds__(kGemvThreads) int_gemv_kernel(const GemvParams p) {
    early_gemv_prefetch<kDtype>(p);  // weights only, before the wait
    pdl_wait();
    pdl_launch_dependents();
    constexpr int SB = kIntSliceBytes<kDtype>;  // bytes per slice, a multiple of 16 (Q6_K: 210, any phase)
    static_assert(SB % 16 == 0 || kDtype == STRATA_Q6_K, "a slice must span whole 16-byte windows");
    float* part = reinterpret_cast<float*>(mma_smem());  // [n_slices][no][kR]
    const int t = threadIdx.x;
    const int o_l = t % p.no, sl = t / p.no;
    const int64_t o0 = (int64_t)blockIdx.x * p.no;
    const int no = (int)min((int64_t)p.no, p.n_out - o0);
    const int nr = (int)min((int64_t)kR, p.n_rows);
    if (sl < p.sl && o_l < no) {
        const uint8_t* row = p.w + (o0 + o_l) * p.w_row_bytes;
        for (int s = sl; s < p.n_slices; s += p.sl) {
            const int nbs = min(kIntSliceBlocks, p.nb - s * kIntSliceBlocks);
            const uint8_t* sp = row + (int64_t)s * SB;
            const int8_t* xs = p.xq + (int64_t)s * kIntSliceBlocks * 32;
            const uint2* ms = p.meta + s * kIntSliceBlocks;
            float acc[kR];
#pragma unroll
            for (int r = 0; r < kR; ++r) acc[r] = 0.0f;
            if constexpr (kA == 16 && kDtype != STRATA_Q6_K) {
                if (nbs == kIntSliceBlocks) gemv_slice_regs<kDtype, kR>(p, sp, xs, ms, nr, acc);
                else gemv_blocks<kDtype, kR, kA, 0, false>(p, sp, xs, ms, nbs, nr, acc);
            } else if (nbs == kIntSliceBlocks) gemv_blocks<kDtype, kR, kA, 0, true>(p, sp, xs, ms, nbs, nr, acc);
            else gemv_blocks<kDtype, kR, kA, 0, false>(p, sp, xs, ms, nbs, nr, acc);
            float* pp = part + ((int64_t)s * p.no + o_l) * kR;
#pragma unroll
            for (int r = 0; r < kR; ++r)
                if (r < nr) pp[r] = acc[r];
        }
    }
    __syncthreads();
    for (int e = t; e < no * nr; e += (int)blockDim.x) {
        const int fo = e / nr, fr = e - fo * nr;
        float total = part[fo * kR + fr];
        for (int s = 1; s < p.n_slices; ++s) total = __fadd_rn(total, part[(s * p.no + fo) * kR + fr]);
        const int64_t row = fr, o = o0 + fo;
        if (p.prologue == STRATA_PROLOGUE_RMSNORM) {
            const float* sq = p.ssq + row * p.n_slices;
            float ss = sq[0];
            for (int c = 1; c < p.n_slices; ++c) ss = __fadd_rn(ss, sq[c]);
            total = __fmul_rn(total, __frsqrt_rn(__fadd_rn(__fdiv_rn(ss, (float)p.k), p.eps)));
        }
        if (p.bias) total = __fadd_rn(total, __ldg(p.bias + o));
        float* yp = p.y + row * p.n_out + o;
        *yp = p.accumulate ? __fadd_rn(*yp, total) : total;
    }
}

// The alignment every slice start of the launch has: 16 where the weights and
// their rows are 16-byte aligned (slices span whole windows), else 4 or 2.
inline int gemv_align(const uint8_t* w, int64_t row_bytes) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(w);
    if (a % 16 == 0 && row_bytes % 16 == 0) return 16;
    if (a % 4 == 0 && row_bytes % 4 == 0) return 4;
    return 2;
}

}  // namespace

namespace {

constexpr int kGemvMaxDevices = 64;
// STRATA_INT_GEMV unset: off. On the H200 (2026-12-02, bench/RESULTS.md) the kernel lost to the
// dot kernel at 8B (tg128 274 against 383 tok/s) and at 1B (1,113 against 1,229); it stays for A/B.
constexpr int kGemvDefaultRows = 0;

// STRATA_INT_GEMV, strictly "0" to "8" (unset or empty: the default).
int gemv_env_rows() {
    const char* env = std::getenv("STRATA_INT_GEMV");  // read per call: tests switch it within a process
    if (!env || !*env) return kGemvDefaultRows;
    if (env[0] >= '0' && env[0] <= '0' + kGemvMaxRows && env[1] == '\0') return env[0] - '0';
    fail(STRATA_ERR_INVALID_ARGUMENT, std::string("STRATA_INT_GEMV=") + env +
                                          ": expected 0 (off) or 1 to 8 (the memory-bound kernel for matmuls of "
                                          "1 to N rows)");
}

// Whether STRATA_INT_MATMUL names a kernel to force (int_tiles_choice and int_rows_choice validate it).
bool matmul_env_forces() {
    const char* env = std::getenv("STRATA_INT_MATMUL");
    return env && (std::strcmp(env, "legacy") == 0 || std::strncmp(env, "rows", 4) == 0 ||
                   std::strncmp(env, "tiles", 5) == 0);
}

int gemv_sms(int dev) {
    static std::once_flag once[kGemvMaxDevices];
    static int sms[kGemvMaxDevices];
    std::call_once(once[dev], [dev] {
        cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;  // a host query, not stream work
        (void)cudaThreadExchangeStreamCaptureMode(&mode);
        if (cudaDeviceGetAttribute(&sms[dev], cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
            (void)cudaGetLastError();
            sms[dev] = 0;
        }
        (void)cudaThreadExchangeStreamCaptureMode(&mode);
    });
    if (sms[dev] <= 0) fail(STRATA_ERR_DEVICE, "cuda matmul: cannot read the SM count");
    return sms[dev];
}

using GemvKernel = void (*)(GemvParams);

template <int kDtype, int kR>
GemvKernel gemv_kernel_align(int align) {
    if constexpr (kDtype == STRATA_Q6_K) return int_gemv_kernel<kDtype, kR, 2>;  // one path for every phase
    else return align == 16 ? int_gemv_kernel<kDtype, kR, 16>
                       : (align == 4 ? int_gemv_kernel<kDtype, kR, 4> : int_gemv_kernel<kDtype, kR, 2>);
}

template <int kDtype>
GemvKernel gemv_kernel_rows(int kr, int align) {
    switch (kr) {
    case 1: return gemv_kernel_align<kDtype, 1>(align);
    case 2: return gemv_kernel_align<kDtype, 2>(align);
    case 4: return gemv_kernel_align<kDtype, 4>(align);
    default: return gemv_kernel_align<kDtype, 8>(align);
    }
}

// The weight types this kernel implements. Another block type joins with its IntW
// specialization (and int_kblock for super-blocks), a case here and one in int_gemv_choice.
GemvKernel gemv_kernel_for(int32_t w_dtype, int kr, int align) {
    switch (w_dtype) {
    case STRATA_Q4_0: return gemv_kernel_rows<STRATA_Q4_0>(kr, align);
    case STRATA_Q8_0: return gemv_kernel_rows<STRATA_Q8_0>(kr, align);
    case STRATA_Q4_1: return gemv_kernel_rows<STRATA_Q4_1>(kr, align);
    case STRATA_Q4_K: return gemv_kernel_rows<STRATA_Q4_K>(kr, align);
    case STRATA_Q6_K: return gemv_kernel_rows<STRATA_Q6_K>(kr, 2);  // Q6Src reads any 2-byte phase
    default: return nullptr;
    }
}

}  // namespace

int int_gemv_choice(int64_t n_rows, int64_t n_out, int64_t k, int32_t w_dtype) {
    const int limit = gemv_env_rows();  // parsed first: a typo is refused whatever the shape
    if (limit == 0 || n_rows < 1 || n_rows > limit || n_out < 1 || k < 32) return 0;
    if (w_dtype != STRATA_Q4_0 && w_dtype != STRATA_Q8_0 && w_dtype != STRATA_Q4_1 && w_dtype != STRATA_Q4_K &&
        w_dtype != STRATA_Q6_K)
        return 0;
    if (matmul_env_forces()) return 0;
    const int kr = n_rows <= 1 ? 1 : (n_rows <= 2 ? 2 : (n_rows <= 4 ? 4 : 8));
    if (gemv_smem((k / 32 + kIntSliceBlocks - 1) / kIntSliceBlocks, 4, kr) > kGemvSmem) return 0;
    return kr;
}

void launch_int_gemv(const IntTilesArgs& a, int kr, int dev, cudaStream_t stream) {
    if (dev < 0 || dev >= kGemvMaxDevices) fail(STRATA_ERR_INTERNAL, "cuda matmul: device index out of range");
    GemvParams p{};
    p.xq = a.xq;
    p.meta = a.meta;
    p.ssq = a.ssq;
    p.n_rows = a.n_rows;
    p.k = a.k;
    p.n_out = a.n_out;
    p.w_row_bytes = dtype_row_bytes(a.w_dtype, a.k);
    p.nb = (int)(a.k / 32);
    p.nbp = a.nbp;
    p.n_slices = (p.nb + kIntSliceBlocks - 1) / kIntSliceBlocks;
    p.w = static_cast<const uint8_t*>(a.w);
    p.bias = a.bias;
    p.y = a.y;
    p.accumulate = a.accumulate ? 1 : 0;
    p.prologue = a.prologue;
    p.eps = a.eps;
    if (a.n_rows > kr || !gemv_shape(p, kr, gemv_sms(dev)))
        fail(STRATA_ERR_INTERNAL, "cuda matmul: integer gemv shape out of range");
    if ((a.n_out + p.no - 1) / p.no > INT32_MAX) fail(STRATA_ERR_INTERNAL, "cuda matmul: integer gemv has too many CTAs");
    const GemvKernel fn = gemv_kernel_for(a.w_dtype, kr, gemv_align(p.w, p.w_row_bytes));
    if (!fn) fail(STRATA_ERR_INTERNAL, "cuda matmul: no integer gemv for dtype " + std::to_string(a.w_dtype));
    launch_k(fn, (unsigned)p.n_tiles, p.threads, (size_t)gemv_smem(p.n_slices, p.no, kr), stream, p);
    check_launch("matmul (integer, gemv)");
}

}  // namespace cuda
}  // namespace strata

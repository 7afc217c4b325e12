// cuda_int_wgmma.cu — the many-row integer-exact matmul on Hopper's warpgroup MMA
// (wgmma, sm_90a): the same per-element arithmetic as every integer kernel
// (cuda_int_matmul.cu; docs/cuda_backend.md, "Kernels": the canonical arithmetic), with the
// block products on the asynchronous tensor-core instruction instead of mma.sync.
//
// Why: the tile kernel (cuda_int_mma_tiles.cu) is issue-bound at 512 rows (ncu,
// bench/RESULTS.md 2026-12-04 evening: 24.8 warp instructions per m16n8k32 mma, of
// which the float fold of each block, 12, is the part no kernel can drop). Here the
// activations (B) go from the pre-pass's scratch to shared memory with cp.async in the
// layout wgmma reads (no ldmatrix, no per-warp B fragments), one instruction per
// warpgroup computes 64 outputs x 64 rows x 32 values, and the next block's product runs while
// the lanes fold the last one (two D banks). The fold is what is left per block.
// Measured on the H200 (bench/RESULTS.md, 2026-12-05 third session): exact, but slower than
// the tile kernel at every shape (35.9 warp instructions per 4,096 MACs: the fold as
// estimated plus the per-slice staging, at one CTA per SM), hence off by default.
//
// Shape: a CTA of 2 warpgroups (8 warps) owns 128 outputs x 64 rows; warpgroup h the
// outputs 64h..64h+63, its warp w the 16 at 64h + 16w (A in registers, built per block
// from the staged weight bytes as the tile kernel builds its A fragments: Q4_0's
// nibbles as q − 8, Q8_0's bytes as they are, Q4_1's and Q4_K's nibbles as 0..15,
// the same byte signed or not). K is walked one slice (8 blocks) per
// stage, kStages slices in shared memory, a CTA barrier per slice (cp.async groups).
//
// The bits: per block the wgmma yields the exact integer I (|I| < 2^20); lane (g, t)
// of warp w then runs, for its elements (outputs g, g + 8 of the warp's 16; rows
// 8i + 2t, 8i + 2t + 1), acc = fmaf(d·dx, I, acc) (Q4_1 / Q4_K: then
// acc = fmaf(m, dx·sx, acc)) with I converted exactly (12582912 + I as float bits,
// minus 12582912), blocks ascending inside a slice, the
// slice totals added in slice order, then the epilogue (RMSNORM factor, bias,
// accumulate): the sequence of every other integer kernel. Checked bit for bit by
// libstrata/cuda_emu/test_int_wgmma.cpp (the emulator's wgmma model, wgmma_emu.h) and
// on the device by tests/kernels/test_int_wgmma.py.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "cuda_int_act.cuh"
#include "cuda_int_blocks.cuh"
#include "cuda_int_kquant.cuh"
#include "cuda_int_q6k.cuh"  // kIntSliceBytes
#include "cuda_int_wgmma.cuh"
#include "core/dtype.h"
#include "cuda_kernels.cuh"
#include "cuda_mma.cuh"
#include "cuda_pdl.cuh"
#include "cuda_wgmma.cuh"

namespace strata {
namespace cuda {
namespace {

constexpr uint32_t kWgMagic = 0x4B400000u;  // 1.5·2^23: 12582912 + I as float bits, for |I| < 2^22
constexpr float kWgMagicF = 12582912.0f;
constexpr int kWgSmemSM = 228 * 1024, kWgSmemCTA = 227 * 1024, kWgSmemRuntime = 1024;  // sm_90
static_assert(kIntSliceBlocks == 8, "tile_params (cuda_int_tiles.cuh) counts slices of 8 blocks");
// The layouts as read from the PTX ISA (cuda_wgmma.cuh), confirmed by the first device run (the defaults below
// gave the legacy kernels' bits); the knobs build the two likeliest misreadings without editing the kernel
// (scripts/gpu_variants.sh -D builds, docs/gpu.md): the B descriptor's LBO / SBO for this file's staging (the
// K halves' core matrices 128 bytes apart, groups of 8 rows 256), and the A fragment's middle registers (a[1]
// row g + 8 / a[2] values 16..31) swapped.
#ifndef STRATA_WGMMA_LBO
#define STRATA_WGMMA_LBO 128
#endif
#ifndef STRATA_WGMMA_SBO
#define STRATA_WGMMA_SBO 256
#endif
#ifndef STRATA_WGMMA_A_SWAP
#define STRATA_WGMMA_A_SWAP 0
#endif

// The shared-memory layout of one slot (all offsets 16-byte aligned) and the pipeline.
// kBanks 2: two D register banks (the next block's wgmma in flight while the lanes fold the last),
// one CTA per SM (up to 255 registers a thread), as many stages as fit (at most 4);
// kBanks 1: one bank (each block's product waited for before its fold; the other CTA's warpgroups
// fill the gap), 128 registers for two CTAs per SM where the shared memory allows two.
template <int kDtype, int kBanks>
struct WgLayout {
    static constexpr int kThreads = 256, kNO = 128, kRows = 64;
    static constexpr int kSB = kIntSliceBytes<kDtype>;           // a weight row's slice: 144 (Q4_0), 272 (Q8_0)
    static constexpr int kWP = kSB / 16 + 1;                      // 16-byte pieces of a row's window
    static constexpr int kWS = 16 * (kWP % 2 ? kWP : kWP + 1);    // odd multiple of 16: 8 rows hit 8 bank groups
    static constexpr int kWSlots = kWP <= 16 ? 16 : 32;          // staging pieces per row (a power of 2)
    static constexpr int kXBlock = kRows * 32;                   // one block's B tile: 64 rows x 32 bytes
    static constexpr int kXOff = kNO * kWS, kMOff = kXOff + kIntSliceBlocks * kXBlock;
    static constexpr int kStage = kMOff + kIntSliceBlocks * kRows * 8;  // meta: [block][row] {dx, sx}
    static constexpr int kFixed = kRows * 4;                              // the rows' RMSNORM factors
    static constexpr int kMinBlocks = kBanks == 1 && 2 * (kFixed + 2 * kStage + kWgSmemRuntime) <= kWgSmemSM ? 2 : 1;
    static constexpr int stages() {
        int n = 2;
        const int budget = kMinBlocks == 2 ? kWgSmemSM / 2 - kWgSmemRuntime : kWgSmemCTA;
        while (n < 4 && kFixed + (n + 1) * kStage <= budget) ++n;
        return n;
    }
    static constexpr int kStages = stages();
    static constexpr int kRsOff = kStages * kStage;
    static constexpr int kBytes = kRsOff + kFixed;
    static_assert(kBytes <= kWgSmemCTA, "a CTA's shared memory");
    static_assert(kStage % 16 == 0 && kXOff % 16 == 0 && kMOff % 16 == 0, "16-byte aligned regions");
};

// Stages slice s of the tile into `slot`: weight rows [o0, o0 + no) (16-byte pieces from the aligned
// address at or below each row's first byte of the slice, so every block keeps its 16-byte phase;
// nothing at or past w_end is read), the rows' int8 activations in wgmma's B layout (block j's tile
// at kXOff + j·kXBlock; value v of row n at (n / 8)·256 + (v / 16)·128 + (n % 8)·16 + v % 16) and
// their block meta as [block][row] (zeros for rows past nr).
template <int kDtype, class L>
__device__ __forceinline__ void wg_stage(const TileParams& p, uint8_t* slot, int s, int64_t o0, int no, int64_t r0,
                                         int nr, const int t) {
    constexpr int kBlk = IntW<kDtype>::kBytes;
    const int64_t b0 = (int64_t)s * kIntSliceBlocks;
    const int nblk = (int)min((int64_t)kIntSliceBlocks, p.nb - b0);
    const int len = nblk * kBlk;
    {  // weights: piece pc of rows row0, row0 + kStep, ...
        constexpr int kS = L::kWSlots, kStep = L::kThreads / kS, kIt = (L::kNO + kStep - 1) / kStep;
        const int pc = t % kS, row0 = t / kS;
        const uint8_t* src = p.w + (o0 + row0) * p.w_row_bytes + b0 * kBlk;
        const int64_t step = (int64_t)kStep * p.w_row_bytes;
        uint8_t* dst = slot + row0 * L::kWS + 16 * pc;
        if (pc < L::kWP) {
#pragma unroll
            for (int i = 0; i < kIt; ++i) {
                if (row0 + i * kStep < no) {
                    const int phi = (int)(reinterpret_cast<uintptr_t>(src) & 15);
                    if (16 * pc < phi + len) {
                        const uint8_t* from = src + (16 * pc - phi);
                        const int64_t left = p.w_end - from;
                        cp_async16z(dst, from, left >= 16 ? 16 : (left > 0 ? (int)left : 0));
                    }
                }
                src += step;
                dst += kStep * L::kWS;
            }
        }
    }
    // activations: piece q = (row, 16-byte half of a block); consecutive threads take consecutive pieces
    // of a row (coalesced reads of the scratch)
    for (int q = t; q < L::kRows * 2 * kIntSliceBlocks; q += L::kThreads) {
        const int r = q / (2 * kIntSliceBlocks), pc = q % (2 * kIntSliceBlocks), j = pc / 2, c = pc % 2;
        if (j < nblk) {
            uint8_t* dst = slot + L::kXOff + j * L::kXBlock + (r / 8) * 256 + c * 128 + (r % 8) * 16;
            const bool live = r < nr;
            cp_async16z(dst, live ? reinterpret_cast<const void*>(p.xq + (r0 + r) * p.k + (b0 + j) * 32 + 16 * c)
                                  : reinterpret_cast<const void*>(p.xq),
                        live ? 16 : 0);
        }
    }
    // block meta {dx bits, sx} as [block][row]: lane pairs of a fold read rows 2t, 2t + 1 in one 16-byte load
    for (int q = t; q < L::kRows * kIntSliceBlocks; q += L::kThreads) {
        const int j = q / L::kRows, r = q % L::kRows;
        if (j < nblk) {
            const bool live = r < nr;
            cp_async8z(slot + L::kMOff + (j * L::kRows + r) * 8,
                       live ? reinterpret_cast<const void*>(p.meta + (r0 + r) * p.nbp + b0 + j)
                            : reinterpret_cast<const void*>(p.meta),
                       live ? 8 : 0);
        }
    }
}

template <int kDtype, int kBanks>
__global__ void __launch_bounds__(256, (WgLayout<kDtype, kBanks>::kMinBlocks)) int_wgmma_kernel(const TileParams p) {
    pdl_wait();  // first: see cuda_pdl.cuh
    pdl_launch_dependents();
    using W = IntW<kDtype>;
    using L = WgLayout<kDtype, kBanks>;
    static_assert(kDtype == STRATA_Q4_0 || kDtype == STRATA_Q8_0 || kDtype == STRATA_Q4_1 || kDtype == STRATA_Q4_K,
                  "weight bytes the s8 product takes: Q4_0 (q − 8), Q8_0, Q4_1 and Q4_K (q in 0..15)");
    constexpr int kStages = L::kStages;
    uint8_t* const smem = mma_smem();
    float* const rsq = reinterpret_cast<float*>(smem + L::kRsOff);
    const int t = threadIdx.x, wg = t >> 7, warp = (t >> 5) & 3, lane = t & 31, g = lane >> 2, tq = lane & 3;
    const int ow = 64 * wg + 16 * warp;  // this warp's first output of the tile

    for (int tile = blockIdx.x; tile < p.n_tiles; tile += gridDim.x) {
        // Row tiles of one output tile are neighbours: their CTAs share its weights in L2.
        const int rt = tile % p.n_row_tiles;
        const int64_t o0 = (int64_t)(tile / p.n_row_tiles) * L::kNO;
        const int no = (int)min((int64_t)L::kNO, p.n_out - o0);
        const int64_t r0 = (int64_t)rt * L::kRows;
        const int nr = (int)min((int64_t)L::kRows, p.n_rows - r0);
#pragma unroll
        for (int i = 0; i < kStages - 1; ++i) {
            if (i < p.n_slices) wg_stage<kDtype, L>(p, smem + i * L::kStage, i, o0, no, r0, nr, t);
            cp_async_commit_group();
        }
        if (p.prologue == STRATA_PROLOGUE_RMSNORM && t < nr)  // the row's factor, as every kernel computes it
            rsq[t] = int_rms_factor(p.ssq + (r0 + t) * p.n_slices, p.n_slices, p.k, p.eps);
        // Where this lane's weight rows (outputs ow + g, ow + g + 8) sit in a slot: window + the row's
        // 16-byte phase (the same for every slice: a slice is a whole number of 16-byte windows).
        int wofs[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int ol = ow + g + 8 * h;
            const uint32_t ph = ((uint32_t)reinterpret_cast<uintptr_t>(p.w) + (uint32_t)(o0 + ol) * (uint32_t)p.w_row_bytes) & 15u;
            wofs[h] = ol * L::kWS + (ol < no ? (int)ph : 0);
        }
        float tot[8][4];
#pragma unroll
        for (int i = 0; i < 8; ++i)
#pragma unroll
            for (int e = 0; e < 4; ++e) tot[i][e] = 0.0f;
        int dacc[kBanks][32];
        float dw[kBanks][2];  // the weight scales of the block in each bank
        [[maybe_unused]] float mw[kBanks][2];  // Q4_1 / Q4_K: its minimums
        int slot = 0;
        for (int s = 0; s < p.n_slices; ++s) {
            const int nbs = (int)min((int64_t)kIntSliceBlocks, p.nb - (int64_t)s * kIntSliceBlocks);
            cp_async_wait_group<kStages - 2>();
            fence_proxy_async();  // the landed activations, for wgmma's async-proxy reads after the barrier
            __syncthreads();      // slice s is in; every warpgroup is done with slice s − 1's slot
            {
                const int fill = slot == 0 ? kStages - 1 : slot - 1, sn = s + kStages - 1;
                if (sn < p.n_slices) wg_stage<kDtype, L>(p, smem + fill * L::kStage, sn, o0, no, r0, nr, t);
                cp_async_commit_group();
            }
            const uint8_t* const st = smem + slot * L::kStage;
            slot = slot == kStages - 1 ? 0 : slot + 1;
            float acc[8][4];
#pragma unroll
            for (int i = 0; i < 8; ++i)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[i][e] = 0.0f;
            // Block j's product into bank b: this warp's A fragment (rows g, g + 8 of its 16 outputs) from
            // the staged bytes, then the warpgroup's wgmma on the block's B tile.
            auto issue = [&](const int j, const int b) {
                uint32_t a[4];
                if constexpr (kIntSuper<kDtype>) {  // Q4_K: block j from the rows' slice starts
                    q4k_mma_a(st + wofs[0], st + wofs[1], j, tq, [](const uint8_t* q) { return lds32_any(q); }, dw[b],
                              mw[b], a);
                } else {
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        const uint8_t* blk = st + wofs[h] + j * W::kBytes;
                        const uint16_t* hp = reinterpret_cast<const uint16_t*>(blk);
                        dw[b][h] = f16_to_f32(hp[0]);
                        if constexpr (W::kMin) mw[b][h] = f16_to_f32(hp[1]);
                        if constexpr (W::kNibbles) {  // 0..15 (Q4_1) is the same byte signed or not
                            const uint32_t q = lds32_any(blk + W::kQuantOff + 4 * tq);
                            const uint32_t lo = q & 0x0F0F0F0Fu, hi = (q >> 4) & 0x0F0F0F0Fu;
                            a[h] = W::kOffset8 ? nib_minus8(lo) : lo;
                            a[2 + h] = W::kOffset8 ? nib_minus8(hi) : hi;
                        } else {
                            a[h] = lds32_any(blk + W::kQuantOff + 4 * tq);
                            a[2 + h] = lds32_any(blk + W::kQuantOff + 16 + 4 * tq);
                        }
                    }
                }
                if constexpr (STRATA_WGMMA_A_SWAP != 0) {
                    const uint32_t t1 = a[1];
                    a[1] = a[2];
                    a[2] = t1;
                }
                wgmma_fence_operand(dacc[b]);
                wgmma_fence();
                wgmma_s8_64x64x32(dacc[b], a, wgmma_desc(st + L::kXOff + j * L::kXBlock, STRATA_WGMMA_LBO, STRATA_WGMMA_SBO));
                wgmma_commit();
            };
            // Block j's fold from bank b (its product complete): int_block_fold with I exact.
            auto fold = [&](const int j, const int b) {
                wgmma_fence_operand(dacc[b]);
#pragma unroll
                for (int i = 0; i < 8; ++i) {
                    const uint4 m = *reinterpret_cast<const uint4*>(st + L::kMOff + (j * L::kRows + 8 * i + 2 * tq) * 8);
                    const float dx[2] = {__uint_as_float(m.x), __uint_as_float(m.z)};
                    float ds[2];  // Q4_1 / Q4_K: dx·sx, the fold's exact product (sx = Σxq, |sx| < 2^12)
                    if constexpr (W::kMin) {
                        ds[0] = __fmul_rn(dx[0], (float)(int)m.y);
                        ds[1] = __fmul_rn(dx[1], (float)(int)m.w);
                    }
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const float I = __fsub_rn(__int_as_float((int)kWgMagic + dacc[b][4 * i + e]), kWgMagicF);
                        float v = fmaf(__fmul_rn(dw[b][e >> 1], dx[e & 1]), I, acc[i][e]);
                        if constexpr (W::kMin) v = fmaf(mw[b][e >> 1], ds[e & 1], v);
                        acc[i][e] = v;
                    }
                }
            };
            if (kBanks == 2 && nbs == kIntSliceBlocks) {
                // A whole slice, straight-line: block j's product in flight while the lanes fold block j − 1
                // (ptxas keeps the wgmmas asynchronous only where no branch separates an issue from its wait).
                issue(0, 0);
#pragma unroll
                for (int j = 1; j < kIntSliceBlocks; ++j) {
                    issue(j, j & (kBanks - 1));
                    wgmma_wait<1>();
                    fold(j - 1, (j - 1) & (kBanks - 1));
                }
                wgmma_wait<0>();
                fold(kIntSliceBlocks - 1, (kIntSliceBlocks - 1) & (kBanks - 1));
            } else {  // one bank, or a partial slice: each block's product waited for before its fold
                for (int j = 0; j < nbs; ++j) {
                    issue(j, 0);
                    wgmma_wait<0>();
                    fold(j, 0);
                }
            }
#pragma unroll
            for (int i = 0; i < 8; ++i)
#pragma unroll
                for (int e = 0; e < 4; ++e) tot[i][e] = s == 0 ? acc[i][e] : __fadd_rn(tot[i][e], acc[i][e]);
        }
        // Epilogue: lane (g, t) holds outputs g, g + 8 of its warp's 16 x rows 8i + 2t, 8i + 2t + 1 (rsq was
        // written before the first slice's barrier).
#pragma unroll
        for (int i = 0; i < 8; ++i)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int ol = ow + g + 8 * (e >> 1), rl = 8 * i + 2 * tq + (e & 1);
                if (ol < no && rl < nr) {
                    float v = tot[i][e];
                    if (p.prologue == STRATA_PROLOGUE_RMSNORM) v = __fmul_rn(v, rsq[rl]);
                    if (p.bias) v = __fadd_rn(v, __ldg(p.bias + o0 + ol));
                    float* yp = p.y + (r0 + rl) * p.y_stride + o0 + ol;
                    *yp = p.accumulate ? __fadd_rn(*yp, v) : v;
                }
            }
        cp_async_wait_group<0>();  // the empty groups committed past the last slice
        __syncthreads();           // the next tile restages slot 0 and rewrites rsq
    }
}

}  // namespace

namespace {

constexpr int kWgMaxDevices = 64;

template <int kDtype, int kBanks>
struct WgConfig {
    using L = WgLayout<kDtype, kBanks>;
    static constexpr auto kernel = int_wgmma_kernel<kDtype, kBanks>;
};

// Once per device: the kernels' dynamic shared memory above 48 KB, and whether the device is an sm_90
// (the only code the kernels are built for: sm_90a).
struct WgDevice {
    cudaError_t attrs = cudaSuccess;
    bool sm90 = false;
};

const WgDevice& wg_device(int dev) {
    static std::once_flag once[kWgMaxDevices];
    static WgDevice result[kWgMaxDevices];
    std::call_once(once[dev], [dev] {
        cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;  // device and function attributes, not stream work
        (void)cudaThreadExchangeStreamCaptureMode(&mode);
        int major = 0, minor = 0;
        (void)cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
        (void)cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
        result[dev].sm90 = major == 9 && minor == 0;
        cudaError_t err = cudaSuccess;
        auto set = [&](auto kernel, int bytes) {
            if (err == cudaSuccess && result[dev].sm90)
                err = cudaFuncSetAttribute((const void*)kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
        };
        set(WgConfig<STRATA_Q4_0, 2>::kernel, WgConfig<STRATA_Q4_0, 2>::L::kBytes);
        set(WgConfig<STRATA_Q4_0, 1>::kernel, WgConfig<STRATA_Q4_0, 1>::L::kBytes);
        set(WgConfig<STRATA_Q8_0, 2>::kernel, WgConfig<STRATA_Q8_0, 2>::L::kBytes);
        set(WgConfig<STRATA_Q8_0, 1>::kernel, WgConfig<STRATA_Q8_0, 1>::L::kBytes);
        set(WgConfig<STRATA_Q4_1, 2>::kernel, WgConfig<STRATA_Q4_1, 2>::L::kBytes);
        set(WgConfig<STRATA_Q4_1, 1>::kernel, WgConfig<STRATA_Q4_1, 1>::L::kBytes);
        set(WgConfig<STRATA_Q4_K, 2>::kernel, WgConfig<STRATA_Q4_K, 2>::L::kBytes);
        set(WgConfig<STRATA_Q4_K, 1>::kernel, WgConfig<STRATA_Q4_K, 1>::L::kBytes);
        (void)cudaThreadExchangeStreamCaptureMode(&mode);
        result[dev].attrs = err;
    });
    return result[dev];
}

template <int kDtype, int kBanks>
void wg_launch(TileParams p, cudaStream_t stream) {
    using C = WgConfig<kDtype, kBanks>;
    const int64_t n_rt = (p.n_rows + C::L::kRows - 1) / C::L::kRows, n_ot = (p.n_out + C::L::kNO - 1) / C::L::kNO;
    if (n_rt * n_ot > INT32_MAX) fail(STRATA_ERR_INTERNAL, "cuda matmul: the wgmma path has too many tiles");
    p.n_row_tiles = (int)n_rt;
    p.n_tiles = (int)(n_rt * n_ot);
    launch_k(C::kernel, (unsigned)p.n_tiles, C::L::kThreads, C::L::kBytes, stream, p);
}

}  // namespace

int int_wgmma_choice(int64_t n_rows, int64_t n_out, int32_t w_dtype, int dev, int sms) {
    const char* env = std::getenv("STRATA_INT_WGMMA");  // read per call: tests switch it within a process
    if (!env || !*env || std::strcmp(env, "0") == 0) return -1;
    const bool all = std::strcmp(env, "all") == 0;
    long from = 1;
    if (!all) {
        char* end = nullptr;
        from = std::strtol(env, &end, 10);
        if (*end != '\0' || from < 1 || from > 1000000)
            fail(STRATA_ERR_INVALID_ARGUMENT, std::string("STRATA_INT_WGMMA=") + env +
                                                  ": expected 0 (never, the default), N in 1..1000000 (the wgmma kernel "
                                                  "for Q4_0, Q8_0, Q4_1 and Q4_K matmuls of at least N rows whose 128 x 64 "
                                                  "tiles give every SM a CTA) or all (every such matmul)");
    }
    const char* banks = std::getenv("STRATA_INT_WGMMA_BANKS");
    int choice = 0;
    if (banks && *banks && std::strcmp(banks, "2") != 0) {
        if (std::strcmp(banks, "1") != 0)
            fail(STRATA_ERR_INVALID_ARGUMENT, std::string("STRATA_INT_WGMMA_BANKS=") + banks +
                                                  ": expected 2 (the default: two D banks, one CTA per SM) or 1");
        choice = 1;
    }
    const char* mm = std::getenv("STRATA_INT_MATMUL");
    if (mm && std::strcmp(mm, "legacy") == 0) return -1;  // the bit-identity tests' reference
    if (n_rows < from || (w_dtype != STRATA_Q4_0 && w_dtype != STRATA_Q8_0 && w_dtype != STRATA_Q4_1 && w_dtype != STRATA_Q4_K))
        return -1;
    // A launch of fewer CTAs than SMs leaves SMs idle (4,096 outputs at 64 rows: 32 CTAs); the tile kernel's
    // narrow tiles and K split serve those (cuda_int_mma_tiles.cu).
    const int64_t tiles = (n_out + 127) / 128 * ((n_rows + 63) / 64);
    if (!all && tiles < sms) return -1;
    if (dev < 0 || dev >= kWgMaxDevices) fail(STRATA_ERR_INTERNAL, "cuda matmul: device index out of range");
    if (!wg_device(dev).sm90)
        fail(STRATA_ERR_UNSUPPORTED, "STRATA_INT_WGMMA: the wgmma kernel runs on sm_90 devices (H100, H200) only");
    return choice;
}

void launch_int_wgmma(const IntTilesArgs& a, int choice, int dev, cudaStream_t stream) {
    if (dev < 0 || dev >= kWgMaxDevices) fail(STRATA_ERR_INTERNAL, "cuda matmul: device index out of range");
    check(wg_device(dev).attrs, "cudaFuncSetAttribute (integer wgmma matmul)");
    const TileParams p = tile_params(a);
    if (a.w_dtype == STRATA_Q4_0) choice == 1 ? wg_launch<STRATA_Q4_0, 1>(p, stream) : wg_launch<STRATA_Q4_0, 2>(p, stream);
    else if (a.w_dtype == STRATA_Q8_0) choice == 1 ? wg_launch<STRATA_Q8_0, 1>(p, stream) : wg_launch<STRATA_Q8_0, 2>(p, stream);
    else if (a.w_dtype == STRATA_Q4_1) choice == 1 ? wg_launch<STRATA_Q4_1, 1>(p, stream) : wg_launch<STRATA_Q4_1, 2>(p, stream);
    else if (a.w_dtype == STRATA_Q4_K) choice == 1 ? wg_launch<STRATA_Q4_K, 1>(p, stream) : wg_launch<STRATA_Q4_K, 2>(p, stream);
    else fail(STRATA_ERR_INTERNAL, "cuda matmul: no wgmma path for dtype " + std::to_string(a.w_dtype));
    check_launch("matmul (integer wgmma)");
}

}  // namespace cuda
}  // namespace strata

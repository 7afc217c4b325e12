// cuda_int_matmul.cu — y = prologue(x)·Wᵀ (+ bias) (+ y) for Q4_0, Q8_0 and
// Q4_1 weights with integer-exact block products: ONE arithmetic per output
// element whatever the number of rows, the kernel or its tiling.
//
// The canonical arithmetic of output (r, o), a function of k alone
// (docs/cuda_backend.md, "integer matmul"):
//  1. Activations, once per matmul (int_prepass_kernel): per row and block of
//     32 values, x' = the prologue (x; x·g for RMSNORM; (g/(1+expf(−g)))·u
//     for SILU_MUL), a = max|x'| (NaN counts as +inf), dx = a/127,
//     xq = clamp(rint(x'/dx), ±127) (0 when dx is 0 or not finite),
//     sx = Σxq (exact). RMSNORM: ssq_c per chunk c of 1024 values (thread t
//     of 256: fmaf chain over values t, t+256, …; then block_sum), and
//     ssq = ((ssq_0 + ssq_1) + ssq_2) + … .
//  2. Per block: the exact integer product I (cuda_int_blocks.cuh), then
//     int_block_fold: acc = fmaf(d·dx, I, acc) (Q4_1: then fmaf(m, dx·sx, acc)).
//  3. Slices of 8 blocks: acc starts at 0, blocks in ascending order;
//     total = acc_0, then total = total + acc_s in slice order.
//  4. RMSNORM: total = total · rsqrt(ssq/k + eps); v = total (+ bias);
//     y = accumulate ? y + v : v.
//
// The dot kernel (int_dot_kernel): a CTA owns NO outputs x 8 rows and walks k
// in parts of PS slices; every thread owns one (output, slice) unit of a part
// and runs that slice's blocks in order, one dp4a chain per block and row;
// the slices' partial sums go through shared memory and are added in slice
// order. Each part's weight rows are staged in shared memory with cp.async
// (coalesced 16-byte pieces, the next part in flight while this one is
// computed), keeping their 16-byte alignment so each block's bytes are picked
// out with compile-time shifts. Which thread, CTA or tile computes an element,
// and how many rows the launch has, never changes its operations (checked bit
// for bit by libstrata/cuda_emu/test_int.cpp and tests/kernels/).
#include <atomic>
#include <mutex>

#include "cuda_int_blocks.cuh"
#include "dtype.h"
#include "cuda_kernels.cuh"
#include "cuda_mma.cuh"
#include "cuda_scratch.cuh"

namespace strata {
namespace cuda {
namespace {

constexpr int kPreThreads = 256;
constexpr int kPreChunkBlocks = 32;  // blocks per pre-pass CTA (1024 values): also RMSNORM's ssq chunks
constexpr int kDotThreads = 256;
constexpr int kDotRows = 8;          // rows per tile (one accumulator each per thread)

struct PreParams {
    const float* x;
    int64_t x_stride, k;
    int nb, nchunks;
    int prologue;
    const float* norm;
    int8_t* xq;     // [row][k]
    uint2* meta;    // [row][nb]: {bits of dx, sx}
    float* ssq;     // [row][nchunks] (RMSNORM)
};

struct IntParams {
    const int8_t* xq;
    const uint2* meta;
    const float* ssq;
    int64_t n_rows, k, n_out, w_row_bytes;
    int nb, n_slices, nchunks;
    const uint8_t* w;
    const uint8_t* w_end;
    const float* bias;
    float* y;
    int accumulate, prologue;
    float eps;
    int no, ps, n_parts, wstride, buf_bytes, n_row_tiles;
};

// ---------------------------------------------------------------- pre-pass

template <int kPro>
__global__ void __launch_bounds__(kPreThreads) int_prepass_kernel(const PreParams p) {
    const int64_t row = blockIdx.x;
    const int c = blockIdx.y;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const float* xr = p.x + row * p.x_stride;
    const int b0 = c * kPreChunkBlocks;
    const int nbc = min(p.nb - b0, kPreChunkBlocks);
    for (int j = warp; j < nbc; j += kPreThreads / 32) {  // whole warps
        const int b = b0 + j;
        const int64_t e = (int64_t)32 * b + lane;
        float v = xr[e];
        if (kPro == STRATA_PROLOGUE_RMSNORM) v = __fmul_rn(v, __ldg(p.norm + e));
        if (kPro == STRATA_PROLOGUE_SILU_MUL) v = __fmul_rn(__fdiv_rn(v, __fadd_rn(1.0f, expf(-v))), xr[p.k + e]);
        float a = fabsf(v);
        if (!(a <= 3.402823466e38f)) a = __int_as_float(0x7f800000);  // NaN and inf: +inf
        a = warp_max(a);
        const float d = __fdiv_rn(a, 127.0f);
        int q = 0;
        if (d > 0.0f && d <= 3.402823466e38f) q = max(-127, min(127, __float2int_rn(__fdiv_rn(v, d))));
        int s = q;
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(kFullMask, s, off);
        p.xq[row * p.k + e] = (int8_t)q;
        if (lane == 0) p.meta[row * p.nb + b] = make_uint2(__float_as_uint(d), (uint32_t)s);
    }
    if (kPro == STRATA_PROLOGUE_RMSNORM) {
        __shared__ float red[kPreThreads / 32];
        float ss = 0.0f;
        for (int64_t e = (int64_t)32 * b0 + threadIdx.x; e < (int64_t)32 * (b0 + nbc); e += kPreThreads)
            ss = fmaf(xr[e], xr[e], ss);
        ss = block_sum<kPreThreads / 32>(ss, red);
        if (threadIdx.x == 0) p.ssq[row * p.nchunks + c] = ss;
    }
}

// ---------------------------------------------------------------- dot kernel

__device__ __forceinline__ int addr_delta16(const void* p) { return (int)(reinterpret_cast<uintptr_t>(p) & 15); }

// Stages part `part` of weight rows [o0, o0 + no) into `buf` (row stride
// p.wstride): 16-byte pieces from the aligned address at or below each row's
// first byte, so byte s lands at offset (s & 15) of its row's window; nothing
// at or past w_end is read (zero fill).
template <int kDtype>
__device__ __forceinline__ void stage_part(const IntParams& p, uint8_t* buf, int part, int64_t o0, int no) {
    constexpr int B = IntW<kDtype>::kBytes;
    const int64_t b0 = (int64_t)part * p.ps * kIntSliceBlocks;
    const int len = (int)(min((int64_t)p.ps * kIntSliceBlocks, p.nb - b0) * B);
    const int npm = (len + 15) / 16 + 1;  // pieces per row, at most
    for (int idx = threadIdx.x; idx < no * npm; idx += kDotThreads) {
        const int row = idx / npm, pc = idx - row * npm;
        const uint8_t* s = p.w + (o0 + row) * p.w_row_bytes + b0 * B;
        const uint8_t* a = s - addr_delta16(s);
        const int np = (int)((s + len - a + 15) >> 4);
        if (pc < np) {
            const uint8_t* src = a + 16 * pc;
            const int64_t left = p.w_end - src;
            cp_async16z(buf + row * p.wstride + 16 * pc, src, left >= 16 ? 16 : (left > 0 ? (int)left : 0));
        }
    }
}

// Block kJ of a slice whose first byte is at byte kC of the 16-byte aligned
// `base` (shared memory): only the windows holding its bytes are loaded.
template <int kDtype, int kC, int kJ>
__device__ __forceinline__ IntBlock<kDtype> load_block(const uint8_t* base) {
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

// One block's contribution to every row of the tile.
template <int kDtype>
__device__ __forceinline__ void block_rows(const IntParams& p, const IntBlock<kDtype>& wb, int64_t b, int64_t r0,
                                           int nr, float (&acc)[kDotRows]) {
#pragma unroll
    for (int r = 0; r < kDotRows; ++r) {
        if (r < nr) {
            const uint4* xp = reinterpret_cast<const uint4*>(p.xq + (r0 + r) * p.k + 32 * b);
            const uint4 xa = __ldg(xp), xb = __ldg(xp + 1);
            const uint2 m = __ldg(p.meta + (r0 + r) * p.nb + b);
            const int dot = int_block_dot<kDtype>(wb, xa, xb);
            acc[r] = int_block_fold<kDtype>(acc[r], wb.d, wb.m, dot, __uint_as_float(m.x), (int)m.y);
        }
    }
}

template <int kDtype, int kC, int kJ>
__device__ __forceinline__ void slice_blocks(const IntParams& p, const uint8_t* base, int nbs, int64_t b0,
                                             int64_t r0, int nr, float (&acc)[kDotRows]) {
    if constexpr (kJ < kIntSliceBlocks) {
        if (kJ < nbs) {
            const IntBlock<kDtype> wb = load_block<kDtype, kC, kJ>(base);
            block_rows<kDtype>(p, wb, b0 + kJ, r0, nr, acc);
            slice_blocks<kDtype, kC, kJ + 1>(p, base, nbs, b0, r0, nr, acc);
        }
    }
}

// A slice from any 2-byte aligned start (rows whose alignment differs from
// the common case go through the same integers and the same fold).
template <int kDtype>
__device__ __forceinline__ void slice_any(const IntParams& p, const uint8_t* sp, int nbs, int64_t b0, int64_t r0,
                                          int nr, float (&acc)[kDotRows]) {
    for (int j = 0; j < nbs; ++j) {
        const IntBlock<kDtype> wb = int_block_any<kDtype>(sp + j * IntW<kDtype>::kBytes);
        block_rows<kDtype>(p, wb, b0 + j, r0, nr, acc);
    }
}

template <int kDtype>
__global__ void __launch_bounds__(kDotThreads) int_dot_kernel(const IntParams p) {
    constexpr int SB = kIntSliceBlocks * IntW<kDtype>::kBytes;  // a multiple of 16
    static_assert(SB % 16 == 0, "a slice must span whole 16-byte windows");
    uint8_t* smem = mma_smem();
    float* part = reinterpret_cast<float*>(smem + (p.n_parts > 1 ? 2 : 1) * p.buf_bytes);  // [ps][no][8]
    const int t = threadIdx.x;
    const int64_t o0 = (int64_t)blockIdx.x * p.no;
    const int no = (int)min((int64_t)p.no, p.n_out - o0);
    const int o_l = t % p.no, s_l = t / p.no;  // this thread's unit in every part
    const int fo = t >> 3, fr = t & 7;         // this thread's element in the fold
    for (int rt = blockIdx.y; rt < p.n_row_tiles; rt += gridDim.y) {
        const int64_t r0 = (int64_t)rt * kDotRows;
        const int nr = (int)min((int64_t)kDotRows, p.n_rows - r0);
        float total = 0.0f;
        stage_part<kDtype>(p, smem, 0, o0, no);
        cp_async_commit_group();
        for (int q = 0; q < p.n_parts; ++q) {
            if (q + 1 < p.n_parts) {
                stage_part<kDtype>(p, smem + ((q + 1) & 1) * p.buf_bytes, q + 1, o0, no);
                cp_async_commit_group();
                cp_async_wait_group<1>();
            } else {
                cp_async_wait_group<0>();
            }
            __syncthreads();
            const int s = q * p.ps + s_l;
            if (s_l < p.ps && s < p.n_slices && o_l < no) {
                const int64_t b0 = (int64_t)s * kIntSliceBlocks;
                const int nbs = (int)min((int64_t)kIntSliceBlocks, p.nb - b0);
                const uint8_t* g = p.w + (o0 + o_l) * p.w_row_bytes + (int64_t)q * p.ps * SB;  // the part's first byte
                const int delta = addr_delta16(g);
                const uint8_t* base = smem + (q & 1) * p.buf_bytes + o_l * p.wstride + s_l * SB;  // 16-byte aligned
                float acc[kDotRows];
#pragma unroll
                for (int r = 0; r < kDotRows; ++r) acc[r] = 0.0f;
                switch (delta) {
                case 0: slice_blocks<kDtype, 0, 0>(p, base, nbs, b0, r0, nr, acc); break;
                case 4: slice_blocks<kDtype, 4, 0>(p, base, nbs, b0, r0, nr, acc); break;
                case 8: slice_blocks<kDtype, 8, 0>(p, base, nbs, b0, r0, nr, acc); break;
                case 12: slice_blocks<kDtype, 12, 0>(p, base, nbs, b0, r0, nr, acc); break;
                default: slice_any<kDtype>(p, base + delta, nbs, b0, r0, nr, acc); break;
                }
                float* pp = part + (s_l * p.no + o_l) * kDotRows;
#pragma unroll
                for (int r = 0; r < kDotRows; ++r)
                    if (r < nr) pp[r] = acc[r];
            }
            __syncthreads();
            if (fo < no && fr < nr) {
                const int nsl = min(p.ps, p.n_slices - q * p.ps);
                for (int sl = 0; sl < nsl; ++sl) {
                    const float v = part[(sl * p.no + fo) * kDotRows + fr];
                    total = (q == 0 && sl == 0) ? v : __fadd_rn(total, v);
                }
            }
        }
        if (fo < no && fr < nr) {
            const int64_t row = r0 + fr, o = o0 + fo;
            if (p.prologue == STRATA_PROLOGUE_RMSNORM) {
                float ss = p.ssq[row * p.nchunks];
                for (int c = 1; c < p.nchunks; ++c) ss = __fadd_rn(ss, p.ssq[row * p.nchunks + c]);
                total = __fmul_rn(total, __frsqrt_rn(__fadd_rn(__fdiv_rn(ss, (float)p.k), p.eps)));
            }
            if (p.bias) total = __fadd_rn(total, __ldg(p.bias + o));
            float* yp = p.y + row * p.n_out + o;
            *yp = p.accumulate ? __fadd_rn(*yp, total) : total;
        }
        __syncthreads();  // the next row tile restages buffer 0 and rewrites `part`
    }
}

// The CTA shape: NO outputs (8, 16 or 32 when there are enough CTAs, fewer
// for small matrices), PS slices per part (NO·PS <= 256 threads), the part's
// weight rows at a stride that is an odd number of 16-byte windows (the 8
// threads of a quarter warp read 8 different rows: no bank conflicts).
inline void dot_shape(IntParams& p, int block_bytes, int sms) {
    int no = p.n_slices <= 8 ? 32 : (p.n_slices <= 16 ? 16 : 8);
    while (no > 2 && (p.n_out + no - 1) / no < 2 * sms) no /= 2;
    p.no = no;
    p.ps = min(p.n_slices, kDotThreads / no);
    p.n_parts = (p.n_slices + p.ps - 1) / p.ps;
    int ws = p.ps * kIntSliceBlocks * block_bytes + 16;
    ws = (ws + 15) / 16 * 16;
    if ((ws / 16) % 2 == 0) ws += 16;
    p.wstride = ws;
    p.buf_bytes = no * ws;
}

}  // namespace

bool int_matmul_supports(int32_t w_dtype) {
    return w_dtype == STRATA_Q4_0 || w_dtype == STRATA_Q8_0 || w_dtype == STRATA_Q4_1;
}

namespace {

constexpr int kMaxDevices = 64;

struct IntLimits {
    int sms = 0, smem_optin = 0;
};

IntLimits int_limits(int dev) {
    static IntLimits cache[kMaxDevices];
    static std::mutex mu;
    std::lock_guard<std::mutex> lock(mu);
    IntLimits& d = cache[dev];
    if (d.sms == 0) {
        check(cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, dev), "cudaDeviceGetAttribute");
        check(cudaDeviceGetAttribute(&d.smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev),
              "cudaDeviceGetAttribute");
        cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;  // a function attribute, not stream work
        (void)cudaThreadExchangeStreamCaptureMode(&mode);
        cudaError_t err = cudaFuncSetAttribute(int_dot_kernel<STRATA_Q4_0>,
                                               cudaFuncAttributeMaxDynamicSharedMemorySize, d.smem_optin);
        if (err == cudaSuccess)
            err = cudaFuncSetAttribute(int_dot_kernel<STRATA_Q8_0>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       d.smem_optin);
        if (err == cudaSuccess)
            err = cudaFuncSetAttribute(int_dot_kernel<STRATA_Q4_1>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       d.smem_optin);
        (void)cudaThreadExchangeStreamCaptureMode(&mode);
        if (err != cudaSuccess) d.sms = 0;
        check(err, "cudaFuncSetAttribute (integer matmul)");
    }
    return d;
}

}  // namespace

void launch_int_matmul(const MatmulArgs& a, cudaStream_t stream, Scratch& scratch) {
    if (a.n_rows <= 0 || a.n_out <= 0) return;
    int dev = 0;
    check(cudaGetDevice(&dev), "cudaGetDevice");
    if (dev < 0 || dev >= kMaxDevices) fail(STRATA_ERR_INTERNAL, "cuda matmul: device index out of range");
    const IntLimits lim = int_limits(dev);

    const int64_t k = a.k, nb = k / 32;
    const int nchunks = (int)((nb + kPreChunkBlocks - 1) / kPreChunkBlocks);
    if (a.n_rows > INT32_MAX || nb > INT32_MAX / 32)
        fail(STRATA_ERR_INTERNAL, "cuda matmul: integer path shape out of range");
    // Scratch: xq [n_rows][k] int8, meta [n_rows][nb] uint2, ssq [n_rows][nchunks] float.
    const size_t xq_bytes = (size_t)a.n_rows * (size_t)k;
    const size_t meta_off = (xq_bytes + 255) / 256 * 256;
    const size_t meta_bytes = (size_t)a.n_rows * (size_t)nb * sizeof(uint2);
    const size_t ssq_off = meta_off + (meta_bytes + 255) / 256 * 256;
    uint8_t* s = static_cast<uint8_t*>(scratch.get(ssq_off + (size_t)a.n_rows * nchunks * sizeof(float)));

    PreParams pp;
    pp.x = a.x;
    pp.x_stride = a.x_row_stride > 0 ? a.x_row_stride : (a.prologue == STRATA_PROLOGUE_SILU_MUL ? 2 * k : k);
    pp.k = k;
    pp.nb = (int)nb;
    pp.nchunks = nchunks;
    pp.prologue = a.prologue;
    pp.norm = a.norm_weight;
    pp.xq = reinterpret_cast<int8_t*>(s);
    pp.meta = reinterpret_cast<uint2*>(s + meta_off);
    pp.ssq = reinterpret_cast<float*>(s + ssq_off);
    const dim3 pgrid((unsigned)a.n_rows, (unsigned)nchunks);
    switch (a.prologue) {
    case STRATA_PROLOGUE_RMSNORM: int_prepass_kernel<STRATA_PROLOGUE_RMSNORM><<<pgrid, kPreThreads, 0, stream>>>(pp); break;
    case STRATA_PROLOGUE_SILU_MUL:
        int_prepass_kernel<STRATA_PROLOGUE_SILU_MUL><<<pgrid, kPreThreads, 0, stream>>>(pp);
        break;
    default: int_prepass_kernel<STRATA_PROLOGUE_NONE><<<pgrid, kPreThreads, 0, stream>>>(pp); break;
    }
    check_launch("matmul (integer activation pre-pass)");

    IntParams p;
    p.xq = pp.xq;
    p.meta = pp.meta;
    p.ssq = pp.ssq;
    p.n_rows = a.n_rows;
    p.k = k;
    p.n_out = a.n_out;
    p.w_row_bytes = dtype_row_bytes(a.w_dtype, k);
    p.nb = (int)nb;
    p.n_slices = (int)((nb + kIntSliceBlocks - 1) / kIntSliceBlocks);
    p.nchunks = nchunks;
    p.w = static_cast<const uint8_t*>(a.w);
    p.w_end = p.w + a.n_out * p.w_row_bytes;
    p.bias = a.bias;
    p.y = a.y;
    p.accumulate = a.accumulate ? 1 : 0;
    p.prologue = a.prologue;
    p.eps = a.eps;
    const int bb = a.w_dtype == STRATA_Q4_0 ? IntW<STRATA_Q4_0>::kBytes
                 : a.w_dtype == STRATA_Q8_0 ? IntW<STRATA_Q8_0>::kBytes
                                            : IntW<STRATA_Q4_1>::kBytes;
    dot_shape(p, bb, lim.sms);
    const int64_t n_rt = (a.n_rows + kDotRows - 1) / kDotRows;
    p.n_row_tiles = (int)n_rt;
    const int smem = (p.n_parts > 1 ? 2 : 1) * p.buf_bytes + p.ps * p.no * kDotRows * (int)sizeof(float);
    if (smem > lim.smem_optin) fail(STRATA_ERR_INTERNAL, "cuda matmul: integer path tile exceeds shared memory");
    const dim3 grid(ceil_div_u(a.n_out, p.no), (unsigned)(n_rt < 65535 ? n_rt : 65535));
    switch (a.w_dtype) {
    case STRATA_Q4_0: int_dot_kernel<STRATA_Q4_0><<<grid, kDotThreads, smem, stream>>>(p); break;
    case STRATA_Q8_0: int_dot_kernel<STRATA_Q8_0><<<grid, kDotThreads, smem, stream>>>(p); break;
    case STRATA_Q4_1: int_dot_kernel<STRATA_Q4_1><<<grid, kDotThreads, smem, stream>>>(p); break;
    default: fail(STRATA_ERR_INTERNAL, "cuda matmul: no integer path for dtype " + std::to_string(a.w_dtype));
    }
    check_launch("matmul (integer)");
}

}  // namespace cuda
}  // namespace strata

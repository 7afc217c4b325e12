// cuda_sample.cu — argmax on the device (seeded sampling: cuda_sample_cluster.cu).
//
// One 1024-thread block per row: the largest non-NaN logit, lowest index on
// ties (a selection under a total order, exact in any reduction order); a row
// of NaNs gives 0. The pass reads 16-byte vectors, four in flight.
#include <climits>

#include "cuda_async.cuh"
#include "cuda_common.cuh"
#include "cuda_kernels.cuh"
#include "cuda_pdl.cuh"

namespace strata {
namespace cuda {
namespace {

struct Best {
    float v;
    int32_t i;  // INT32_MAX: nothing seen
};

__device__ __forceinline__ Best better(Best a, Best b) { return (b.v > a.v || (b.v == a.v && b.i < a.i)) ? b : a; }

// Scratch of the block reductions of a block of W warps (argmax uses only this).
template <int W>
struct ReduceSharedT {
    float scratch[W];
    Best best[W];
    int counts[W];
};
constexpr int kArgmaxThreads = 1024;  // argmax alone: a wide block keeps more loads in flight per row

template <int W>
__device__ __forceinline__ Best block_argmax(Best x, ReduceSharedT<W>& sm) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        Best o;
        o.v = __shfl_xor_sync(kFullMask, x.v, off);
        o.i = __shfl_xor_sync(kFullMask, x.i, off);
        x = better(x, o);
    }
    __syncthreads();
    if ((threadIdx.x & 31) == 0) sm.best[threadIdx.x >> 5] = x;
    __syncthreads();
    Best r = sm.best[0];
#pragma unroll
    for (int w = 1; w < W; ++w) r = better(r, sm.best[w]);
    __syncthreads();
    return r;
}

template <int W>
__device__ __forceinline__ int block_count(int c, ReduceSharedT<W>& sm) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) c += __shfl_xor_sync(kFullMask, c, off);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) sm.counts[threadIdx.x >> 5] = c;
    __syncthreads();
    int r = 0;
#pragma unroll
    for (int w = 0; w < W; ++w) r += sm.counts[w];
    __syncthreads();
    return r;
}

__device__ __forceinline__ void consider(Best& b, int& ok, float l, int64_t i) {
    if (l == l) {
        b = better(b, Best{l, (int32_t)i});
        ++ok;
    }
}

// The row's argmax over non-NaN logits (i == INT32_MAX when all are NaN), and
// how many logits are not NaN. A selection under a total order, so the visiting
// order (16-byte loads, L in flight, when the row allows) cannot change it.
template <int W, int L>
__device__ __forceinline__ Best row_argmax(const float* lg, int64_t n, ReduceSharedT<W>& sm, int* n_ok) {
    constexpr int T = 32 * W;
    Best b{__int_as_float(0xff800000), INT32_MAX};
    int ok = 0;
    int64_t i = threadIdx.x;
    if (reinterpret_cast<uintptr_t>(lg) % 16 == 0) {
        const int64_t n4 = n / 4;
        const float4* v = reinterpret_cast<const float4*>(lg);
        int64_t q = threadIdx.x;
        for (; q + (L - 1) * T < n4; q += L * T) {
            float4 x[L];
#pragma unroll
            for (int u = 0; u < L; ++u) x[u] = v[q + u * T];
#pragma unroll
            for (int u = 0; u < L; ++u) {
                const int64_t e = 4 * (q + u * T);
                consider(b, ok, x[u].x, e);
                consider(b, ok, x[u].y, e + 1);
                consider(b, ok, x[u].z, e + 2);
                consider(b, ok, x[u].w, e + 3);
            }
        }
        for (; q < n4; q += T) {
            const float4 x = v[q];
            consider(b, ok, x.x, 4 * q);
            consider(b, ok, x.y, 4 * q + 1);
            consider(b, ok, x.z, 4 * q + 2);
            consider(b, ok, x.w, 4 * q + 3);
        }
        i = 4 * n4 + threadIdx.x;
    }
    for (; i < n; i += T) {
        const float l = lg[i];
        consider(b, ok, l, i);
    }
    if (n_ok) *n_ok = block_count(ok, sm);
    return block_argmax(b, sm);
}

__global__ void __launch_bounds__(kArgmaxThreads) argmax_kernel(const ArgmaxArgs a) {
    pdl_wait();  // first: see cuda_pdl.cuh
    pdl_launch_dependents();
    __shared__ ReduceSharedT<kArgmaxThreads / 32> sm;
    for (int64_t r = blockIdx.x; r < a.n_rows; r += gridDim.x) {
        const Best b = row_argmax<kArgmaxThreads / 32, 4>(a.logits + r * a.n_vocab, a.n_vocab, sm, nullptr);
        if (threadIdx.x == 0) a.out_ids[r] = b.i == INT32_MAX ? 0 : b.i;
    }
}

unsigned row_grid(int64_t n_rows) { return (unsigned)(n_rows < (1 << 30) ? n_rows : (1 << 30)); }

}  // namespace

// ------------------------------------------------------------------ host (not in the emulator)

void launch_argmax(const ArgmaxArgs& a, cudaStream_t stream) {
    if (a.n_rows <= 0 || a.n_vocab <= 0) return;
    launch_k(argmax_kernel, row_grid(a.n_rows), kArgmaxThreads, 0, stream, a);
    check_launch("argmax");
}

}  // namespace cuda
}  // namespace strata

// cuda_attention_dense.cu — bidirectional attention within segments (the
// vision encoder's full and windowed attention).
//
// Token t of segment [begin, end) attends to every token of its segment. One
// block per (token, head) runs the shared tile loop of cuda_attention.cuh
// over keys begin, begin + 64, ...: tiles are aligned to the segment start, so
// an image's result does not depend on where its segment sits in the batch or
// on the other segments. Memory is O(tile), never O(segment²). q, k and v are
// F32 rows (any head_dim 1..512, any row stride).
#include "cuda_attention.cuh"
#include "cuda_kernels.cuh"
#include "cuda_pdl.cuh"

namespace strata {
namespace cuda {
namespace {

// A lane holds head dims lane, lane + 32, ... (slot s is dim lane + 32 s).
struct DenseKV {
    const float* k;  // this head's first key row
    const float* v;
    int64_t stride;
    int hd;
    __device__ __forceinline__ static int dim(int lane, int s) { return lane + 32 * s; }
    template <int Q>
    __device__ __forceinline__ void load_k(int64_t cell, int lane, float (&kr)[Q]) const {
        const float* row = k + cell * stride;
#pragma unroll
        for (int s = 0; s < Q; ++s) {
            const int d = lane + 32 * s;
            kr[s] = d < hd ? row[d] : 0.0f;
        }
    }
    __device__ __forceinline__ float load_v(int64_t cell, int d) const { return v[cell * stride + d]; }
};

template <int Q>
__global__ void __launch_bounds__(kAttnThreads) attention_dense_kernel(const DenseAttentionArgs a) {
    pdl_wait();  // first: see cuda_pdl.cuh
    pdl_launch_dependents();
    __shared__ AttnShared sm;
    const int hd = a.head_dim;
    const int64_t total = a.n_tokens * a.n_heads;
    for (int64_t b = blockIdx.x; b < total; b += gridDim.x) {
        const int64_t t = b / a.n_heads;
        const int32_t h = (int32_t)(b % a.n_heads);
        float* out = a.out + t * ((int64_t)a.n_heads * hd) + (int64_t)h * hd;

        // The segment holding t: the last s with segments[s] <= t.
        int64_t lo = 0, hi = a.n_segments - 1;
        while (lo < hi) {
            const int64_t mid = (lo + hi + 1) / 2;
            if ((int64_t)a.segments[mid] <= t) lo = mid; else hi = mid - 1;
        }
        const int64_t begin = max((int64_t)a.segments[lo], (int64_t)0);
        const int64_t end = min((int64_t)a.segments[lo + 1], a.n_tokens);
        if (!(begin <= t && t < end)) {  // malformed segments: never read out of range
            for (int d = threadIdx.x; d < hd; d += kAttnThreads) out[d] = 0.0f;
            continue;
        }
        const int64_t head = (int64_t)h * hd;
        const DenseKV keys{a.k + head, a.v + head, a.row_stride, hd};
        attend<Q>(keys, a.q + t * a.row_stride + head, hd, begin, end, a.scale, out, sm);
        __syncthreads();
    }
}

}  // namespace

void launch_attention_dense(const DenseAttentionArgs& a, cudaStream_t stream) {
    if (a.n_tokens <= 0 || a.n_heads <= 0 || a.n_segments <= 0) return;
    const int hd = a.head_dim;
    if (hd <= 0 || hd > 512)
        fail(STRATA_ERR_INTERNAL, "cuda attention_dense: head_dim " + std::to_string(hd) + " outside 1..512");
    const int64_t items = a.n_tokens * a.n_heads;
    const unsigned grid = (unsigned)(items < (int64_t)(1u << 30) ? items : (1u << 30));
    if (hd <= 64)
        launch_k(attention_dense_kernel<2>, grid, kAttnThreads, 0, stream, a);
    else if (hd <= 128)
        launch_k(attention_dense_kernel<4>, grid, kAttnThreads, 0, stream, a);
    else if (hd <= 256)
        launch_k(attention_dense_kernel<8>, grid, kAttnThreads, 0, stream, a);
    else
        launch_k(attention_dense_kernel<16>, grid, kAttnThreads, 0, stream, a);
    check_launch("attention_dense");
}

}  // namespace cuda
}  // namespace strata

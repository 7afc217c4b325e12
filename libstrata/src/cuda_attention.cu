// cuda_attention.cu — the KV cache: kv_store writes it, attention reads it.
//
// kv_store: K and V rows (F32) are rounded to F16 (round to nearest even) into
// cell `index` of the row's slot, layer `layer`; padding rows are skipped.
// attention: causal grouped-query attention of row r over cells 0..index of
// its slot, one block per (row, query head), key tiles aligned to absolute
// cell indices 0, 64, 128, ... (cuda_attention.cuh). Padding rows get zeros.
// A row's result depends only on its query, its slot's cells 0..index and
// head_dim: never on n_rows, the other rows, or which slot holds it.
#include <cuda_fp16.h>

#include "cuda_attention.cuh"
#include "cuda_kernels.cuh"

namespace strata {
namespace cuda {
namespace {

__device__ __forceinline__ bool row_valid(const SlotsView& s, int32_t slot, int32_t index) {
    return slot >= 0 && slot < s.n_slots && index >= 0 && index < s.n_ctx;
}

// First element of cache row 0 of (slot, layer, K|V, kv head): the layout of SlotsView::kv_index.
__device__ __forceinline__ size_t kv_plane(const SlotsView& s, int32_t slot, int32_t layer, int which, int32_t head) {
    const size_t plane = (size_t)s.n_kv_heads * s.n_ctx * s.head_dim;
    return (size_t)slot * ((size_t)s.n_layers * 2 * plane) + ((size_t)layer * 2 + which) * plane +
           (size_t)head * s.n_ctx * s.head_dim;
}

constexpr int kStoreThreads = 256;

__global__ void __launch_bounds__(kStoreThreads) kv_store_kernel(const KvStoreArgs a) {
    const SlotsView& s = a.slots;
    const int hd = s.head_dim;
    const int64_t width = (int64_t)s.n_kv_heads * hd;
    for (int64_t r = blockIdx.x; r < a.n_rows; r += gridDim.x) {
        const int32_t slot = a.rows[2 * r], index = a.rows[2 * r + 1];
        if (!row_valid(s, slot, index) || a.layer < 0 || a.layer >= s.n_layers) continue;
        const float* k = a.k + r * a.k_row_stride;
        const float* v = a.v + r * a.v_row_stride;
        for (int64_t e = threadIdx.x; e < width; e += kStoreThreads) {
            const int32_t h = (int32_t)(e / hd);
            const int d = (int)(e % hd);
            const size_t cell = (size_t)index * hd + d;
            __half* kv = reinterpret_cast<__half*>(s.kv);
            kv[kv_plane(s, slot, a.layer, 0, h) + cell] = __float2half_rn(k[e]);
            kv[kv_plane(s, slot, a.layer, 1, h) + cell] = __float2half_rn(v[e]);
        }
    }
}

// A lane holds head-dim pairs (2p, 2p+1) for p = lane, lane + 32, ...: slot s
// of a lane is dim 2 * (lane + 32 * (s / 2)) + s % 2. head_dim is even.
struct CacheKV {
    const __half* k;
    const __half* v;
    int hd;
    __device__ __forceinline__ static int dim(int lane, int s) { return 2 * (lane + 32 * (s >> 1)) + (s & 1); }
    template <int Q>
    __device__ __forceinline__ void load_k(int64_t cell, int lane, float (&kr)[Q]) const {
        const __half* row = k + cell * hd;
#pragma unroll
        for (int m = 0; m < Q / 2; ++m) {
            const int d = 2 * (lane + 32 * m);
            float2 f = make_float2(0.0f, 0.0f);
            if (d < hd) f = __half22float2(*reinterpret_cast<const __half2*>(row + d));
            kr[2 * m] = f.x;
            kr[2 * m + 1] = f.y;
        }
    }
    __device__ __forceinline__ float load_v(int64_t cell, int d) const { return __half2float(v[cell * hd + d]); }
};

template <int Q>
__global__ void __launch_bounds__(kAttnThreads) attention_kernel(const AttentionArgs a) {
    __shared__ AttnShared sm;
    const SlotsView& s = a.slots;
    const int hd = s.head_dim;
    const int64_t total = a.n_rows * a.n_heads;
    const int32_t group = a.n_heads / s.n_kv_heads;
    for (int64_t b = blockIdx.x; b < total; b += gridDim.x) {
        const int64_t row = b / a.n_heads;
        const int32_t h = (int32_t)(b % a.n_heads);
        const int32_t slot = a.rows[2 * row], index = a.rows[2 * row + 1];
        float* out = a.out + row * ((int64_t)a.n_heads * hd) + (int64_t)h * hd;
        const int32_t kvh = group > 0 ? h / group : -1;
        if (!row_valid(s, slot, index) || kvh < 0 || kvh >= s.n_kv_heads || a.layer < 0 || a.layer >= s.n_layers) {
            for (int d = threadIdx.x; d < hd; d += kAttnThreads) out[d] = 0.0f;
            continue;
        }
        const __half* kv = reinterpret_cast<const __half*>(s.kv);
        const CacheKV keys{kv + kv_plane(s, slot, a.layer, 0, kvh), kv + kv_plane(s, slot, a.layer, 1, kvh), hd};
        attend<Q>(keys, a.q + row * a.q_row_stride + (int64_t)h * hd, hd, 0, (int64_t)index + 1, a.scale, out, sm);
        __syncthreads();
    }
}

constexpr unsigned kMaxGrid = 1u << 30;

unsigned grid_for(int64_t items) { return (unsigned)(items < (int64_t)kMaxGrid ? items : kMaxGrid); }

}  // namespace

void launch_kv_store(const KvStoreArgs& a, cudaStream_t stream) {
    if (a.n_rows <= 0 || a.slots.n_kv_heads <= 0 || a.slots.head_dim <= 0) return;
    kv_store_kernel<<<grid_for(a.n_rows < 65535 ? a.n_rows : 65535), kStoreThreads, 0, stream>>>(a);
    check_launch("kv_store");
}

void launch_attention(const AttentionArgs& a, cudaStream_t stream) {
    if (a.n_rows <= 0 || a.n_heads <= 0) return;
    const int hd = a.slots.head_dim;
    if (hd <= 0 || hd % 2 != 0 || hd > 512)
        fail(STRATA_ERR_INTERNAL, "cuda attention: head_dim " + std::to_string(hd) + " outside 2..512 or odd");
    if (reinterpret_cast<uintptr_t>(a.slots.kv) % 4 != 0)
        fail(STRATA_ERR_INTERNAL, "cuda attention: KV cache base is not 4-byte aligned");
    const unsigned grid = grid_for(a.n_rows * a.n_heads);
    if (hd <= 64)
        attention_kernel<2><<<grid, kAttnThreads, 0, stream>>>(a);
    else if (hd <= 128)
        attention_kernel<4><<<grid, kAttnThreads, 0, stream>>>(a);
    else if (hd <= 256)
        attention_kernel<8><<<grid, kAttnThreads, 0, stream>>>(a);
    else
        attention_kernel<16><<<grid, kAttnThreads, 0, stream>>>(a);
    check_launch("attention");
}

}  // namespace cuda
}  // namespace strata

// cuda_kv_store.cu — writes to the KV cache: kv_store, and the fused
// rope_kv_store that a decoder layer runs right after its qkv projection.
//
// kv_store: K and V rows (F32) are rounded to F16 (round to nearest even) into
// cell `index` of the row's slot, layer `layer`, in the pool page its page
// table maps; padding rows and cells of unmapped pages are skipped. In an int8
// pool each (K|V, head) row is quantized with its own scale (store_row_int8).
// One 128-thread block per row; a thread converts two adjacent values (one
// 4-byte store), with 8-byte loads when the rows allow.
//
// rope_kv_store: each row holds [q | k | v] (n_heads, n_kv_heads, n_kv_heads
// heads of head_dim). One 256-thread block per row rotates q and k in place
// with exactly the arithmetic of strata_rope (cuda_rope.cuh: same inverse
// frequencies, cos/sin and rotation), then stores the rotated k and v as
// kv_store does (__float2half_rn of the same float values). The result is
// bit-identical to rope(q); rope(k); kv_store(k, v) on this backend, in one
// launch instead of three. Nothing is reduced, so both are batch-invariant.
#include <cuda_fp16.h>

#include "cuda_common.cuh"
#include "cuda_kernels.cuh"
#include "cuda_rope.cuh"
#include "cuda_pdl.cuh"

namespace strata {
namespace cuda {
namespace {

// The pool page of (slot, cell), or -1 when unmapped (backend.h SlotsView::pages).
__device__ __forceinline__ int32_t kv_page(const SlotsView& s, int32_t slot, int32_t cell) {
    const int32_t p = s.pages[(size_t)slot * s.slot_pages + cell / kPageCells];
    return p >= 0 && p < s.n_pages ? p : -1;
}

// A row is stored when it names a real cell of a mapped page (unmapped cells are skipped).
__device__ __forceinline__ bool kv_row_valid(const SlotsView& s, int32_t layer, int32_t slot, int32_t index) {
    return slot >= 0 && slot < s.n_slots && index >= 0 && index < s.n_ctx && layer >= 0 && layer < s.n_layers &&
           kv_page(s, slot, index) >= 0;
}

// Element 0 of (slot, layer, K|V, head 0) at cell `index`, in its page; heads follow at kPageCells * head_dim.
__device__ __forceinline__ __half* kv_cell(const SlotsView& s, int32_t slot, int32_t layer, int which, int32_t index) {
    const size_t plane = (size_t)s.n_kv_heads * kPageCells * s.head_dim;
    return reinterpret_cast<__half*>(s.kv) + (size_t)kv_page(s, slot, index) * ((size_t)s.n_layers * 2 * plane) +
           ((size_t)layer * 2 + which) * plane + (size_t)(index % kPageCells) * s.head_dim;
}

// int8 pools (strata.h STRATA_KV_INT8): thread t quantizes whole (K|V, head) rows t, t + nthreads, ...
// with the rule of the CPU backend, in the same float32 operations (amax, scale = amax / 127,
// q = rint(x / scale) clamped to +-127), so both backends store the same bytes for the same row.
__device__ __forceinline__ void store_row_int8(const SlotsView& s, int32_t layer, int32_t slot, int32_t index,
                                               const float* k, const float* v, int nthreads) {
    const int hd = s.head_dim;
    const size_t plane = (size_t)s.n_kv_heads * kPageCells * hd;
    const size_t base = (size_t)kv_page(s, slot, index) * ((size_t)s.n_layers * 2 * plane) +
                        (size_t)layer * 2 * plane + (size_t)(index % kPageCells) * hd;
    for (int hw = threadIdx.x; hw < 2 * s.n_kv_heads; hw += nthreads) {
        const int which = hw / s.n_kv_heads, h = hw - which * s.n_kv_heads;
        const float* x = (which ? v : k) + (size_t)h * hd;
        const size_t at = base + which * plane + (size_t)h * kPageCells * hd;
        float amax = 0.0f;
        for (int i = 0; i < hd; ++i) amax = fmaxf(amax, fabsf(x[i]));
        const float sc = __fdiv_rn(amax, 127.0f);
        s.kv_scale[at / hd] = sc;
        for (int i = 0; i < hd; ++i) {
            const float r = sc > 0.0f ? rintf(__fdiv_rn(x[i], sc)) : 0.0f;
            s.kv8[at + i] = (int8_t)fminf(127.0f, fmaxf(-127.0f, r));
        }
    }
}

// Stores one row's K and V (F32, width n_kv_heads * head_dim) into its cell.
// Values 2i, 2i+1 go together (head_dim is even, so a pair never straddles heads).
template <bool VEC>
__device__ __forceinline__ void store_row(const SlotsView& s, int32_t layer, int32_t slot, int32_t index,
                                          const float* k, const float* v, int nthreads) {
    if (s.kv_dtype == STRATA_KV_INT8) {
        store_row_int8(s, layer, slot, index, k, v, nthreads);
        return;
    }
    const int hd = s.head_dim;
    const int64_t head_stride = (int64_t)kPageCells * hd;
    const int64_t pairs = (int64_t)s.n_kv_heads * hd / 2;
    __half* kc = kv_cell(s, slot, layer, 0, index);
    __half* vc = kv_cell(s, slot, layer, 1, index);
    for (int64_t i = threadIdx.x; i < pairs; i += nthreads) {
        const int64_t e = 2 * i;
        const int64_t h = e / hd, d = e - h * hd;
        float2 kf, vf;
        if (VEC) {
            kf = *reinterpret_cast<const float2*>(k + e);
            vf = *reinterpret_cast<const float2*>(v + e);
        } else {
            kf = make_float2(k[e], k[e + 1]);
            vf = make_float2(v[e], v[e + 1]);
        }
        __half2 kh, vh;
        kh.x = __float2half_rn(kf.x);
        kh.y = __float2half_rn(kf.y);
        vh.x = __float2half_rn(vf.x);
        vh.y = __float2half_rn(vf.y);
        *reinterpret_cast<__half2*>(kc + h * head_stride + d) = kh;
        *reinterpret_cast<__half2*>(vc + h * head_stride + d) = vh;
    }
}

constexpr int kStoreThreads = 128;
constexpr unsigned kMaxRowBlocks = 65535;

template <bool VEC>
__global__ void __launch_bounds__(kStoreThreads) kv_store_kernel(const KvStoreArgs a) {
    pdl_wait();  // first: see cuda_pdl.cuh
    pdl_launch_dependents();
    for (int64_t r = blockIdx.x; r < a.n_rows; r += gridDim.x) {
        const int32_t slot = a.rows[2 * r], index = a.rows[2 * r + 1];
        if (!kv_row_valid(a.slots, a.layer, slot, index)) continue;
        store_row<VEC>(a.slots, a.layer, slot, index, a.k + r * a.k_row_stride, a.v + r * a.v_row_stride,
                       kStoreThreads);
    }
}

constexpr int kFusedThreads = 256;

// VEC: the k and v parts of every row are 8-byte aligned.
template <bool VEC>
__global__ void __launch_bounds__(kFusedThreads) rope_kv_store_kernel(const RopeKvStoreArgs a) {
    pdl_wait();  // first: see cuda_pdl.cuh
    pdl_launch_dependents();
    __shared__ float inv_q[kRopeMaxHalf], cos_q[kRopeMaxHalf], sin_q[kRopeMaxHalf];
    __shared__ float inv_k[kRopeMaxHalf], cos_k[kRopeMaxHalf], sin_k[kRopeMaxHalf];
    const strata_rope_params& pq = a.q_params;
    const strata_rope_params& pk = a.k_params;
    const int half_q = pq.rot_dim / 2, half_k = pk.rot_dim / 2;
    const int64_t q_width = (int64_t)pq.n_heads * pq.head_dim;
    const int64_t k_width = (int64_t)pk.n_heads * pk.head_dim;
    for (int j = threadIdx.x; j < half_q; j += kFusedThreads) inv_q[j] = rope_inverse_frequency(pq, j, a.freq_factors);
    for (int j = threadIdx.x; j < half_k; j += kFusedThreads) inv_k[j] = rope_inverse_frequency(pk, j, a.freq_factors);
    for (int64_t r = blockIdx.x; r < a.n_rows; r += gridDim.x) {
        const int32_t slot = a.rows[2 * r], index = a.rows[2 * r + 1];
        // Padding for rope (no table cell) and for the store (no cache cell) as the separate calls
        // decide it; both are uniform across the block.
        const int32_t* cell = rope_table_cell(a.slots, slot, index);
        const bool store = kv_row_valid(a.slots, a.layer, slot, index);
        float* q = a.qkv + r * a.row_stride;
        float* k = q + q_width;
        if (cell != nullptr) {
            __syncthreads();  // inv_* written; cos/sin of the previous row no longer read
            for (int j = threadIdx.x; j < half_q; j += kFusedThreads)
                rope_cos_sin(pq, j, inv_q[j], cell, &cos_q[j], &sin_q[j]);
            for (int j = threadIdx.x; j < half_k; j += kFusedThreads)
                rope_cos_sin(pk, j, inv_k[j], cell, &cos_k[j], &sin_k[j]);
            __syncthreads();
            const int64_t q_pairs = (int64_t)pq.n_heads * half_q, k_pairs = (int64_t)pk.n_heads * half_k;
            for (int64_t i = threadIdx.x; i < q_pairs + k_pairs; i += kFusedThreads) {
                if (i < q_pairs) rope_rotate_pair(pq, q, i, cos_q, sin_q);
                else rope_rotate_pair(pk, k, i - q_pairs, cos_k, sin_k);
            }
        }
        if (!store) continue;
        __syncthreads();  // rotated k (global memory) visible to the whole block
        store_row<VEC>(a.slots, a.layer, slot, index, k, k + k_width, kFusedThreads);
    }
}

unsigned row_grid(int64_t n_rows) { return (unsigned)(n_rows < (int64_t)kMaxRowBlocks ? n_rows : kMaxRowBlocks); }

}  // namespace

void launch_kv_store(const KvStoreArgs& a, cudaStream_t stream) {
    if (a.n_rows <= 0 || a.slots.n_kv_heads <= 0 || a.slots.head_dim <= 0) return;
    const bool vec = ((reinterpret_cast<uintptr_t>(a.k) | reinterpret_cast<uintptr_t>(a.v)) % 8) == 0 &&
                     a.k_row_stride % 2 == 0 && a.v_row_stride % 2 == 0;
    if (vec) launch_k(kv_store_kernel<true>, row_grid(a.n_rows), kStoreThreads, 0, stream, a);
    else launch_k(kv_store_kernel<false>, row_grid(a.n_rows), kStoreThreads, 0, stream, a);
    check_launch("kv_store");
}

void launch_rope_kv_store(const RopeKvStoreArgs& a, cudaStream_t stream) {
    if (a.n_rows <= 0) return;
    for (const strata_rope_params* p : {&a.q_params, &a.k_params})
        if (p->rot_dim < 2 || p->rot_dim / 2 > kRopeMaxHalf || p->rot_dim > p->head_dim)
            fail(STRATA_ERR_INTERNAL, "cuda rope_kv_store: rot_dim " + std::to_string(p->rot_dim) + " unsupported");
    const int64_t q_width = (int64_t)a.q_params.n_heads * a.q_params.head_dim;
    const bool vec = reinterpret_cast<uintptr_t>(a.qkv) % 8 == 0 && a.row_stride % 2 == 0 && q_width % 2 == 0;
    if (vec) launch_k(rope_kv_store_kernel<true>, row_grid(a.n_rows), kFusedThreads, 0, stream, a);
    else launch_k(rope_kv_store_kernel<false>, row_grid(a.n_rows), kFusedThreads, 0, stream, a);
    check_launch("rope_kv_store");
}

}  // namespace cuda
}  // namespace strata

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
// heads of head_dim). A warp per head rotates q and k in place (and stores its
// KV head), decode-sized launches spreading a row over several blocks,
// with exactly the arithmetic of strata_rope (cuda_rope.cuh: same inverse
// frequencies, cos/sin and rotation), then stores the rotated k and v as
// kv_store does (__float2half_rn of the same float values). The result is
// bit-identical to rope(q); rope(k); kv_store(k, v) on this backend, in one
// launch instead of three. Nothing is reduced, so both are batch-invariant.
#include <cuda_fp16.h>

#include "cuda_common.cuh"
#include "cuda_kernels.cuh"
#include "cuda_kv_layout.cuh"
#include "cuda_rope.cuh"
#include "cuda_pdl.cuh"

namespace strata {
namespace cuda {
namespace {

// kv_row_valid (whether a row is stored): cuda_kv_layout.cuh.

// Element 0 of (slot, layer, K|V, head 0) at cell `index`, in its page; heads follow at kPageCells * head_dim.
// Only for mapped cells (kv_row_valid): kv_row's layout.
__device__ __forceinline__ __half* kv_cell(const SlotsView& s, int32_t slot, int32_t layer, int which, int32_t index) {
    return reinterpret_cast<__half*>(s.kv) + kv_row(s, slot, layer, which, 0, index);
}

// int8 pools (strata.h STRATA_KV_INT8): thread t quantizes whole (K|V, head) rows t, t + nthreads, ...
// with the rule of the CPU backend, in the same float32 operations (amax, scale = amax / 127,
// q = rint(x / scale) clamped to +-127), so both backends store the same bytes for the same row.
__device__ __forceinline__ void store_row_int8(const SlotsView& s, int32_t layer, int32_t slot, int32_t index,
                                               const float* k, const float* v, int nthreads) {
    const int hd = s.head_dim;
    const size_t plane = (size_t)s.n_kv_heads * kPageCells * hd;
    const size_t base = kv_row(s, slot, layer, 0, 0, index);
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

// rope_kv_store: a warp per head. Units are the q heads (rotated in place) and then the KV heads
// (k rotated in place, then k and v stored by the same warp, so a __syncwarp orders its global
// writes before its reads). A block of kUnitWarps warps serves units y·kUnitWarps + w,
// + gridDim.y·kUnitWarps, ... of its rows; decode-sized launches spread one row's units over
// several blocks (blockIdx.y), so a row is not one block's serial loop. Every block computes the
// inverse frequencies and its rows' cos/sin itself (the same expressions: cuda_rope.cuh), q's and k's
// in parallel, the powers before pdl_wait. Each lane loads all its pairs of a head before rotating
// any, so their latencies overlap.
constexpr int kUnitWarps = 4;
constexpr int kUnitThreads = 32 * kUnitWarps;

// Rotates head `h` of head-major `x` (pairs j = lane, lane + 32, ...; the rotate_pair arithmetic).
__device__ __forceinline__ void rope_rotate_head(const strata_rope_params& p, float* x, int h, const float* cos_s,
                                                 const float* sin_s, int lane) {
    const int half = p.rot_dim >> 1;
    float* head = x + (int64_t)h * p.head_dim;
    const bool adj = p.mode == STRATA_ROPE_ADJACENT;
    for (int j0 = 0; j0 < half; j0 += 32 * 4) {  // four pairs per lane in flight
        float x0[4], x1[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            const int j = j0 + 32 * u + lane;
            if (j < half) {
                x0[u] = head[adj ? 2 * j : j];
                x1[u] = head[adj ? 2 * j + 1 : j + half];
            }
        }
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            const int j = j0 + 32 * u + lane;
            if (j < half) rope_rotate_values(x0[u], x1[u], cos_s[j], sin_s[j], &head[adj ? 2 * j : j],
                                             &head[adj ? 2 * j + 1 : j + half]);
        }
    }
}

// Stores KV head h of a row (k and v: F32 rows of n_kv_heads * head_dim) into its cell: F16 pairs as
// store_row, or the int8 rule of store_row_int8 with the (K|V, head) max taken over the warp (a max
// is exact in any order).
template <bool VEC>
__device__ __forceinline__ void store_head(const SlotsView& s, int32_t layer, int32_t slot, int32_t index, int h,
                                           const float* k, const float* v, int lane) {
    const int hd = s.head_dim;
    if (s.kv_dtype == STRATA_KV_INT8) {
        const size_t plane = (size_t)s.n_kv_heads * kPageCells * hd;
        const size_t base = kv_row(s, slot, layer, 0, 0, index);
        for (int which = 0; which < 2; ++which) {
            const float* x = (which ? v : k) + (size_t)h * hd;
            const size_t at = base + which * plane + (size_t)h * kPageCells * hd;
            float amax = 0.0f;
            for (int i = lane; i < hd; i += 32) amax = fmaxf(amax, fabsf(x[i]));
            amax = warp_max(amax);
            const float sc = __fdiv_rn(amax, 127.0f);
            if (lane == 0) s.kv_scale[at / hd] = sc;
            for (int i = lane; i < hd; i += 32) {
                const float r = sc > 0.0f ? rintf(__fdiv_rn(x[i], sc)) : 0.0f;
                s.kv8[at + i] = (int8_t)fminf(127.0f, fmaxf(-127.0f, r));
            }
        }
        return;
    }
    const int64_t head_stride = (int64_t)kPageCells * hd;
    __half* kc = kv_cell(s, slot, layer, 0, index) + h * head_stride;
    __half* vc = kv_cell(s, slot, layer, 1, index) + h * head_stride;
    const float* kh = k + (int64_t)h * hd;
    const float* vh = v + (int64_t)h * hd;
    for (int d = 2 * lane; d < hd; d += 64) {
        float2 kf, vf;
        if (VEC) {
            kf = *reinterpret_cast<const float2*>(kh + d);
            vf = *reinterpret_cast<const float2*>(vh + d);
        } else {
            kf = make_float2(kh[d], kh[d + 1]);
            vf = make_float2(vh[d], vh[d + 1]);
        }
        __half2 k2, v2;
        k2.x = __float2half_rn(kf.x);
        k2.y = __float2half_rn(kf.y);
        v2.x = __float2half_rn(vf.x);
        v2.y = __float2half_rn(vf.y);
        *reinterpret_cast<__half2*>(kc + d) = k2;
        *reinterpret_cast<__half2*>(vc + d) = v2;
    }
}

// The block's pair list is [q's rot_dim / 2 pairs | k's rot_dim / 2 pairs]: entry i is q's pair i, or k's
// pair i - half_q. Thread t forms the entries t, t + kUnitThreads, ... in parallel (the two parts at
// once, not one after the other).
__device__ __forceinline__ float pair_base(const RopeKvStoreArgs& a, int i) {
    const int half_q = a.q_params.rot_dim / 2;
    return i < half_q ? rope_inverse_base(a.q_params, i) : rope_inverse_base(a.k_params, i - half_q);
}

// Thread t's first two entries' bases (rope_inverse_base: the power evaluated in double, the longest
// part of the angle arithmetic). They read the launch's parameters alone, no memory, so they are formed
// before pdl_wait, while the qkv matmul before this kernel drains (cuda_pdl.cuh, early_*). Entries
// beyond those two (lists longer than 2 x kUnitThreads) are formed after the wait.
struct RopeBases {
    float b0, b1;
};
__device__ __forceinline__ RopeBases early_rope_bases(const RopeKvStoreArgs& a) {
    const int n = a.q_params.rot_dim / 2 + a.k_params.rot_dim / 2;
    const int i = (int)threadIdx.x;
    RopeBases r{0.0f, 0.0f};
    if (i < n) r.b0 = pair_base(a, i);
    if (i + kUnitThreads < n) r.b1 = pair_base(a, i + kUnitThreads);
    return r;
}

// VEC: the k and v parts of every row are 8-byte aligned.
template <bool VEC>
__global__ void __launch_bounds__(kUnitThreads) rope_kv_store_kernel(const RopeKvStoreArgs a) {
    const RopeBases bases = early_rope_bases(a);  // the launch's parameters only, before the wait
    pdl_wait();  // first: see cuda_pdl.cuh
    pdl_launch_dependents();
    // inv_j, then each row's cos / sin, of the pair list (q's entries first, k's from half_q).
    __shared__ float inv[2 * kRopeMaxHalf], cos_s[2 * kRopeMaxHalf], sin_s[2 * kRopeMaxHalf];
    const strata_rope_params& pq = a.q_params;
    const strata_rope_params& pk = a.k_params;
    const int half_q = pq.rot_dim / 2, n_pairs = half_q + pk.rot_dim / 2;
    const int64_t q_width = (int64_t)pq.n_heads * pq.head_dim;
    const int64_t k_width = (int64_t)pk.n_heads * pk.head_dim;
    const int n_units = pq.n_heads + pk.n_heads;
    const int lane = threadIdx.x & 31, u0 = blockIdx.y * kUnitWarps + (threadIdx.x >> 5);
    const int u_step = gridDim.y * kUnitWarps;
    for (int i = threadIdx.x, m = 0; i < n_pairs; i += kUnitThreads, ++m) {
        const float base = m == 0 ? bases.b0 : m == 1 ? bases.b1 : pair_base(a, i);
        inv[i] = rope_apply_factor(base, i < half_q ? i : i - half_q, a.freq_factors);
    }
    for (int64_t r = blockIdx.x; r < a.n_rows; r += gridDim.x) {
        const int32_t slot = a.rows[2 * r], index = a.rows[2 * r + 1];
        // Padding for rope (no table cell) and for the store (no cache cell) as the separate calls
        // decide it; both are uniform across the block.
        const int32_t* cell = rope_table_cell(a.slots, slot, index);
        const bool store = kv_row_valid(a.slots, a.layer, slot, index);
        float* q = a.qkv + r * a.row_stride;
        float* k = q + q_width;
        if (cell != nullptr) {
            __syncthreads();  // inv written; cos/sin of the previous row no longer read
            for (int i = threadIdx.x; i < n_pairs; i += kUnitThreads) {
                if (i < half_q) rope_cos_sin(pq, i, inv[i], cell, &cos_s[i], &sin_s[i]);
                else rope_cos_sin(pk, i - half_q, inv[i], cell, &cos_s[i], &sin_s[i]);
            }
            __syncthreads();
            for (int u = u0; u < n_units; u += u_step) {
                if (u < pq.n_heads) rope_rotate_head(pq, q, u, cos_s, sin_s, lane);
                else rope_rotate_head(pk, k, u - pq.n_heads, cos_s + half_q, sin_s + half_q, lane);
            }
        }
        if (!store) continue;
        __syncwarp();  // this warp's rotated k (global memory) visible to its own lanes
        for (int u = u0; u < n_units; u += u_step)
            if (u >= pq.n_heads) store_head<VEC>(a.slots, a.layer, slot, index, u - pq.n_heads, k, k + k_width, lane);
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
    // Few rows: one block per 4 heads of a row (decode: ~10 blocks instead of one); many rows: a block
    // per row, its warps walking the heads.
    const int units = a.q_params.n_heads + a.k_params.n_heads;
    const unsigned per_row = a.n_rows <= 64 ? (unsigned)((units + kUnitWarps - 1) / kUnitWarps) : 1u;
    const dim3 grid(row_grid(a.n_rows), per_row);
    if (vec) launch_k(rope_kv_store_kernel<true>, grid, kUnitThreads, 0, stream, a);
    else launch_k(rope_kv_store_kernel<false>, grid, kUnitThreads, 0, stream, a);
    check_launch("rope_kv_store");
}

}  // namespace cuda
}  // namespace strata

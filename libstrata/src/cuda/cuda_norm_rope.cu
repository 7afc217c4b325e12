// cuda_norm_rope.cu — per-row transforms: RMSNorm, RoPE, and the decode-time
// position-table update that RoPE reads.
//
// rmsnorm: one 256-thread block per row. Thread t owns the elements
// 4(t + 256k) + i (i = 0..3) and sums their squares with FMAs in that order
// (k, then i ascending); then the fixed block tree of block_sum (xor
// butterfly, then warp totals in warp order). The order depends on dim only;
// 16-byte loads are used when the row and weight addresses allow and load the
// same elements in the same order, so alignment never changes a bit. Rows of
// up to 4096 values stay in registers between the sum and the scaling.
//
// rope: one 256-thread block per row (grid-stride beyond 65535 rows); the
// inverse frequencies are computed once per block, the cos/sin once per row,
// by the arithmetic of cuda_rope.cuh (float32 angles as transformers and the
// CPU backend). Dims past rot_dim are untouched, as are padding rows.
//
// positions_decode: for each non-padding row, every component of its table
// cell becomes index + delta[slot] (recordable, so graphs advance M-RoPE).
#include <cmath>

#include "cuda_common.cuh"
#include "cuda_kernels.cuh"
#include "cuda_rope.cuh"
#include "cuda_pdl.cuh"

namespace strata {
namespace cuda {
namespace {

constexpr int kNormThreads = 256;
constexpr int kNormWarps = kNormThreads / 32;
constexpr int kNormCached = 4;  // float4 chunks per thread kept in registers (dim <= 4096)
constexpr unsigned kMaxRowBlocks = 65535;

unsigned row_grid(int64_t n_rows) { return (unsigned)(n_rows < (int64_t)kMaxRowBlocks ? n_rows : kMaxRowBlocks); }

// Elements 4q .. 4q+3 of a row (zeros past dim); VEC: one 16-byte load.
template <bool VEC>
__device__ __forceinline__ float4 load4(const float* x, int64_t q, int64_t dim) {
    if (VEC) return *reinterpret_cast<const float4*>(x + 4 * q);
    float4 v;
    const int64_t e = 4 * q;
    v.x = e < dim ? x[e] : 0.0f;
    v.y = e + 1 < dim ? x[e + 1] : 0.0f;
    v.z = e + 2 < dim ? x[e + 2] : 0.0f;
    v.w = e + 3 < dim ? x[e + 3] : 0.0f;
    return v;
}

__device__ __forceinline__ float4 scale4(float4 x, float inv, float4 w) {
    return make_float4(__fmul_rn(__fmul_rn(x.x, inv), w.x), __fmul_rn(__fmul_rn(x.y, inv), w.y),
                       __fmul_rn(__fmul_rn(x.z, inv), w.z), __fmul_rn(__fmul_rn(x.w, inv), w.w));
}

template <bool VEC>
__device__ __forceinline__ void store4(float* out, int64_t q, int64_t dim, float4 v) {
    if (VEC) {
        *reinterpret_cast<float4*>(out + 4 * q) = v;
        return;
    }
    const int64_t e = 4 * q;
    if (e < dim) out[e] = v.x;
    if (e + 1 < dim) out[e + 1] = v.y;
    if (e + 2 < dim) out[e + 2] = v.z;
    if (e + 3 < dim) out[e + 3] = v.w;
}

// VEC: x, weight and out rows are 16-byte aligned and dim % 4 == 0.
template <bool VEC>
__global__ void __launch_bounds__(kNormThreads) rmsnorm_kernel(const RmsNormArgs a) {
    pdl_wait();  // first: see cuda_pdl.cuh
    pdl_launch_dependents();
    __shared__ float scratch[kNormWarps];
    const int64_t n4 = (a.dim + 3) / 4;
    for (int64_t r = blockIdx.x; r < a.n_rows; r += gridDim.x) {
        const float* x = a.x + r * a.dim;
        float* out = a.out + r * a.dim;
        float4 cached[kNormCached];
        float ss = 0.0f;
#pragma unroll
        for (int k = 0; k < kNormCached; ++k) {
            const int64_t q = threadIdx.x + (int64_t)k * kNormThreads;
            cached[k] = q < n4 ? load4<VEC>(x, q, a.dim) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
#pragma unroll
        for (int k = 0; k < kNormCached; ++k) {
            const int64_t q = threadIdx.x + (int64_t)k * kNormThreads;
            if (q < n4) {
                ss = fmaf(cached[k].x, cached[k].x, ss);
                ss = fmaf(cached[k].y, cached[k].y, ss);
                ss = fmaf(cached[k].z, cached[k].z, ss);
                ss = fmaf(cached[k].w, cached[k].w, ss);
            }
        }
        for (int64_t q = threadIdx.x + (int64_t)kNormCached * kNormThreads; q < n4; q += kNormThreads) {
            const float4 v = load4<VEC>(x, q, a.dim);
            ss = fmaf(v.x, v.x, ss);
            ss = fmaf(v.y, v.y, ss);
            ss = fmaf(v.z, v.z, ss);
            ss = fmaf(v.w, v.w, ss);
        }
        ss = block_sum<kNormWarps>(ss, scratch);
        const float mean = __fdiv_rn(ss, (float)a.dim);
        const float inv = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean, a.eps)));
        // out may alias x: each element is read and written by the same thread.
#pragma unroll
        for (int k = 0; k < kNormCached; ++k) {
            const int64_t q = threadIdx.x + (int64_t)k * kNormThreads;
            if (q < n4) store4<VEC>(out, q, a.dim, scale4(cached[k], inv, load4<VEC>(a.weight, q, a.dim)));
        }
        for (int64_t q = threadIdx.x + (int64_t)kNormCached * kNormThreads; q < n4; q += kNormThreads)
            store4<VEC>(out, q, a.dim, scale4(load4<VEC>(x, q, a.dim), inv, load4<VEC>(a.weight, q, a.dim)));
    }
}

constexpr int kRopeThreads = 256;

__global__ void __launch_bounds__(kRopeThreads) rope_kernel(const RopeArgs a) {
    pdl_wait();  // first: see cuda_pdl.cuh
    pdl_launch_dependents();
    __shared__ float inv_s[kRopeMaxHalf], cos_s[kRopeMaxHalf], sin_s[kRopeMaxHalf];
    const strata_rope_params& p = a.p;
    const int half = p.rot_dim / 2;
    for (int j = threadIdx.x; j < half; j += kRopeThreads) inv_s[j] = rope_inverse_frequency(p, j, a.freq_factors);
    for (int64_t r = blockIdx.x; r < a.n_rows; r += gridDim.x) {
        const int32_t* cell = rope_table_cell(a.slots, a.rows[2 * r], a.rows[2 * r + 1]);
        if (cell == nullptr) continue;  // uniform across the block
        __syncthreads();                // inv_s written; cos_s/sin_s no longer read for the previous row
        for (int j = threadIdx.x; j < half; j += kRopeThreads) rope_cos_sin(p, j, inv_s[j], cell, &cos_s[j], &sin_s[j]);
        __syncthreads();
        float* x = a.x + r * a.x_row_stride;
        const int64_t pairs = (int64_t)p.n_heads * half;
        for (int64_t i = threadIdx.x; i < pairs; i += kRopeThreads) rope_rotate_pair(p, x, i, cos_s, sin_s);
    }
}

__global__ void positions_decode_kernel(const PositionsDecodeArgs a) {
    pdl_wait();  // first: see cuda_pdl.cuh
    pdl_launch_dependents();
    const int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= a.n_rows) return;
    const int32_t slot = a.rows[2 * r], index = a.rows[2 * r + 1];
    int32_t* cell = const_cast<int32_t*>(rope_table_cell(a.slots, slot, index));
    if (cell == nullptr) return;
    const int32_t pos = (int32_t)((uint32_t)index + (uint32_t)a.slots.delta[slot]);  // wraps, never UB
    cell[0] = pos;
    cell[1] = pos;
    cell[2] = pos;
    cell[3] = pos;
}

}  // namespace

void launch_rmsnorm(const RmsNormArgs& a, cudaStream_t stream) {
    if (a.n_rows <= 0 || a.dim <= 0) return;
    const bool vec = a.dim % 4 == 0 &&
                     ((reinterpret_cast<uintptr_t>(a.x) | reinterpret_cast<uintptr_t>(a.out) |
                       reinterpret_cast<uintptr_t>(a.weight)) % 16) == 0;
    if (vec) launch_k(rmsnorm_kernel<true>, row_grid(a.n_rows), kNormThreads, 0, stream, a);
    else launch_k(rmsnorm_kernel<false>, row_grid(a.n_rows), kNormThreads, 0, stream, a);
    check_launch("rmsnorm");
}

void launch_rope(const RopeArgs& a, cudaStream_t stream) {
    if (a.n_rows <= 0 || a.p.n_heads <= 0 || a.p.rot_dim < 2) return;
    if (a.p.rot_dim / 2 > kRopeMaxHalf || a.p.rot_dim > a.p.head_dim)
        fail(STRATA_ERR_INTERNAL, "cuda rope: rot_dim " + std::to_string(a.p.rot_dim) + " unsupported");
    launch_k(rope_kernel, row_grid(a.n_rows), kRopeThreads, 0, stream, a);
    check_launch("rope");
}

void launch_positions_decode(const PositionsDecodeArgs& a, cudaStream_t stream) {
    if (a.n_rows <= 0) return;
    launch_k(positions_decode_kernel, ceil_div_u(a.n_rows, 128), 128, 0, stream, a);
    check_launch("positions_decode");
}

}  // namespace cuda
}  // namespace strata

// cuda_norm_rope.cu — per-row transforms: RMSNorm, RoPE, and the decode-time
// position-table update that RoPE reads.
//
// rmsnorm: one block per row; each of the 256 threads sums the squares of
// elements t, t+256, ... in order, then the fixed block tree of block_sum.
// The order depends on dim only.
//
// rope: one block per row. Position components come from cell rows[r].index
// of the table region the row's slot reads (table_of). Per frequency pair j
// the angle is float32 as in transformers and the CPU backend —
// inv = 1/base^(2j'/D) [/ freq_factors[j]] with (j', D) = (j, rot_dim), or for
// VISION (j − section start, 2·sections[c]); angle = (pos·freq_scale)·inv —
// then cos/sin (from double) are rounded to float and the pair is
// rotated in float: (x0·c − x1·s, x0·s + x1·c), each product rounded. Pairs
// are (2j, 2j+1) for ADJACENT and (j, j + rot_dim/2) otherwise; dims past
// rot_dim are untouched, as are padding rows. Nothing is reduced.
//
// positions_decode: for each non-padding row, every component of its table
// cell becomes index + delta[slot] (recordable, so graphs advance M-RoPE).
#include <cmath>

#include "cuda_common.cuh"
#include "cuda_kernels.cuh"

namespace strata {
namespace cuda {
namespace {

constexpr int kNormThreads = 256;
constexpr int kNormWarps = kNormThreads / 32;
constexpr unsigned kMaxRowBlocks = 1u << 30;

unsigned row_grid(int64_t n_rows) { return (unsigned)(n_rows < (int64_t)kMaxRowBlocks ? n_rows : kMaxRowBlocks); }

__global__ void __launch_bounds__(kNormThreads) rmsnorm_kernel(const RmsNormArgs a) {
    __shared__ float scratch[kNormWarps];
    for (int64_t r = blockIdx.x; r < a.n_rows; r += gridDim.x) {
        const float* x = a.x + r * a.dim;
        float* out = a.out + r * a.dim;
        float ss = 0.0f;
        for (int64_t i = threadIdx.x; i < a.dim; i += kNormThreads) ss = fmaf(x[i], x[i], ss);
        ss = block_sum<kNormWarps>(ss, scratch);
        const float mean = __fdiv_rn(ss, (float)a.dim);
        const float inv = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean, a.eps)));
        // out may alias x: each element is read and written by the same thread.
        for (int64_t i = threadIdx.x; i < a.dim; i += kNormThreads)
            out[i] = __fmul_rn(__fmul_rn(x[i], inv), a.weight[i]);
    }
}

__device__ __forceinline__ bool row_valid(const SlotsView& s, int32_t slot, int32_t index) {
    return slot >= 0 && slot < s.n_slots && index >= 0 && index < s.n_ctx;
}

// The 4 positions of a row's table cell, or null for a padding row.
__device__ __forceinline__ int32_t* table_cell(const SlotsView& s, int32_t slot, int32_t index) {
    if (!row_valid(s, slot, index)) return nullptr;
    const int32_t t = s.table_of[slot];
    if (t < 0 || t >= s.n_slots) return nullptr;
    return s.table + ((size_t)t * s.n_ctx + index) * 4;
}

constexpr int kRopeThreads = 256;
constexpr int kMaxHalfRot = 512;  // rot_dim <= head_dim <= 1024

__global__ void __launch_bounds__(kRopeThreads) rope_kernel(const RopeArgs a) {
    __shared__ float cos_s[kMaxHalfRot], sin_s[kMaxHalfRot];
    const strata_rope_params& p = a.p;
    const int half = p.rot_dim / 2;
    for (int64_t r = blockIdx.x; r < a.n_rows; r += gridDim.x) {
        const int32_t* cell = table_cell(a.slots, a.rows[2 * r], a.rows[2 * r + 1]);
        if (cell == nullptr) continue;  // uniform across the block

        for (int j = threadIdx.x; j < half; j += kRopeThreads) {
            int c = 0, jj = j;
            double denom = (double)p.rot_dim;  // theta exponent is -2 jj / denom
            if (p.mode == STRATA_ROPE_MROPE || p.mode == STRATA_ROPE_VISION) {
                int start = 0;
                c = -1;
                for (int i = 0; i < 4; ++i) {
                    if (j < start + p.sections[i]) { c = i; break; }
                    start += p.sections[i];
                }
                if (c < 0) {  // sections sum to less than rot_dim / 2 (api.cpp refuses that)
                    c = 3;
                    start -= p.sections[3];
                }
                if (p.mode == STRATA_ROPE_VISION) {
                    jj = j - start;
                    denom = 2.0 * (double)(p.sections[c] > 0 ? p.sections[c] : 1);
                }
            }
            // float32 like transformers and the CPU backend: inv_j = 1 / base^(2jj/D) with the
            // power correctly rounded (via double), angle = (pos * freq_scale) * inv_j in float,
            // then cos/sin of that float angle rounded from double.
            const float expo = __fdiv_rn((float)(2 * jj), (float)denom);
            float inv = __fdiv_rn(1.0f, (float)pow((double)p.theta_base, (double)expo));
            if (a.freq_factors) inv = __fdiv_rn(inv, a.freq_factors[j]);
            const float angle = __fmul_rn(__fmul_rn((float)cell[c], p.freq_scale), inv);
            double sn, cs;
            sincos((double)angle, &sn, &cs);
            cos_s[j] = (float)cs;
            sin_s[j] = (float)sn;
        }
        __syncthreads();

        float* x = a.x + r * a.x_row_stride;
        const int64_t pairs = (int64_t)p.n_heads * half;
        for (int64_t i = threadIdx.x; i < pairs; i += kRopeThreads) {
            const int64_t h = i / half;
            const int j = (int)(i % half);
            float* head = x + h * p.head_dim;
            const int i0 = p.mode == STRATA_ROPE_ADJACENT ? 2 * j : j;
            const int i1 = p.mode == STRATA_ROPE_ADJACENT ? 2 * j + 1 : j + half;
            const float x0 = head[i0], x1 = head[i1], c = cos_s[j], s = sin_s[j];
            head[i0] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
            head[i1] = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
        }
        __syncthreads();  // cos_s/sin_s are rewritten for the next row
    }
}

__global__ void positions_decode_kernel(const PositionsDecodeArgs a) {
    const int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= a.n_rows) return;
    const int32_t slot = a.rows[2 * r], index = a.rows[2 * r + 1];
    int32_t* cell = table_cell(a.slots, slot, index);
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
    rmsnorm_kernel<<<row_grid(a.n_rows), kNormThreads, 0, stream>>>(a);
    check_launch("rmsnorm");
}

void launch_rope(const RopeArgs& a, cudaStream_t stream) {
    if (a.n_rows <= 0 || a.p.n_heads <= 0 || a.p.rot_dim < 2) return;
    if (a.p.rot_dim / 2 > kMaxHalfRot || a.p.rot_dim > a.p.head_dim)
        fail(STRATA_ERR_INTERNAL, "cuda rope: rot_dim " + std::to_string(a.p.rot_dim) + " unsupported");
    rope_kernel<<<row_grid(a.n_rows), kRopeThreads, 0, stream>>>(a);
    check_launch("rope");
}

void launch_positions_decode(const PositionsDecodeArgs& a, cudaStream_t stream) {
    if (a.n_rows <= 0) return;
    positions_decode_kernel<<<ceil_div_u(a.n_rows, 128), 128, 0, stream>>>(a);
    check_launch("positions_decode");
}

}  // namespace cuda
}  // namespace strata

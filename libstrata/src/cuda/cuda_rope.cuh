// cuda_rope.cuh — RoPE angle and rotation arithmetic, shared by strata_rope
// (cuda_norm_rope.cu) and strata_rope_kv_store (cuda_kv_store.cu) so that the
// fused entry point is bit-identical to the separate calls by construction.
//
// Angles are float32, as in transformers and the CPU backend:
//   inv_j = 1 / base^(2j'/D) [/ freq_factors[j]], with (j', D) = (j, rot_dim),
//           or for VISION (j − section start, 2·sections[c]); the power is the
//           float32 power correctly rounded (evaluated in double, once per
//           block, overlapped with the loads of the row metadata);
//   angle = (pos[c] · freq_scale) · inv_j, c = the pair's position component;
//   (cos, sin) = sincosf(angle) (CUDA's accurate float version, ≤ 2 ulp).
// A pair (x0, x1) — (2j, 2j+1) for ADJACENT, (j, j + rot_dim/2) otherwise —
// becomes (x0·c − x1·s, x0·s + x1·c), each product rounded (no FMA).
#pragma once

#include "cuda_common.cuh"

namespace strata {
namespace cuda {

constexpr int kRopeMaxHalf = 512;  // rot_dim <= head_dim <= 1024

// Position component (0..3) of frequency pair j, and its section start.
__device__ __forceinline__ int rope_component(const strata_rope_params& p, int j, int* start_out) {
    if (p.mode != STRATA_ROPE_MROPE && p.mode != STRATA_ROPE_VISION) {
        *start_out = 0;
        return 0;
    }
    int start = 0;
    for (int i = 0; i < 4; ++i) {
        if (j < start + p.sections[i]) {
            *start_out = start;
            return i;
        }
        start += p.sections[i];
    }
    *start_out = start - p.sections[3];  // sections sum to less than rot_dim / 2 (api refuses that)
    return 3;
}

// 1 / base^(2j'/D) of pair j: inv_j before freq_factors. Reads the parameters alone (no memory), so a
// kernel may form it before its pdl_wait (cuda_pdl.cuh).
__device__ __forceinline__ float rope_inverse_base(const strata_rope_params& p, int j) {
    int start = 0;
    const int c = rope_component(p, j, &start);
    int jj = j;
    int denom = p.rot_dim;
    if (p.mode == STRATA_ROPE_VISION) {
        jj = j - start;
        denom = 2 * (p.sections[c] > 0 ? p.sections[c] : 1);
    }
    const float expo = __fdiv_rn((float)(2 * jj), (float)denom);
    return __fdiv_rn(1.0f, (float)pow((double)p.theta_base, (double)expo));
}

// inv_j from its base: divided by freq_factors[j] when there are factors (freq_factors may be null).
__device__ __forceinline__ float rope_apply_factor(float base, int j, const float* freq_factors) {
    return freq_factors ? __fdiv_rn(base, freq_factors[j]) : base;
}

// inv_j of pair j (freq_factors may be null).
__device__ __forceinline__ float rope_inverse_frequency(const strata_rope_params& p, int j, const float* freq_factors) {
    return rope_apply_factor(rope_inverse_base(p, j), j, freq_factors);
}

// cos/sin of pair j at a table cell (4 position components).
__device__ __forceinline__ void rope_cos_sin(const strata_rope_params& p, int j, float inv, const int32_t* cell,
                                             float* cs, float* sn) {
    int start = 0;
    const int c = rope_component(p, j, &start);
    const float angle = __fmul_rn(__fmul_rn((float)cell[c], p.freq_scale), inv);
    sincosf(angle, sn, cs);
}

// The rotation of one pair: (x0·c − x1·s, x0·s + x1·c), each product rounded (no FMA). The one
// expression every rotating kernel uses.
__device__ __forceinline__ void rope_rotate_values(float x0, float x1, float c, float s, float* y0, float* y1) {
    *y0 = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
    *y1 = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
}

// Rotates pair i of head-major x (n_heads x head_dim) in place: pair i is
// head i / half, frequency j = i % half, with cos_s/sin_s indexed by j.
__device__ __forceinline__ void rope_rotate_pair(const strata_rope_params& p, float* x, int64_t i, const float* cos_s,
                                                 const float* sin_s) {
    const int half = p.rot_dim >> 1;
    const int h = (int)(i / half);
    const int j = (int)(i - (int64_t)h * half);
    float* head = x + (int64_t)h * p.head_dim;
    const int i0 = p.mode == STRATA_ROPE_ADJACENT ? 2 * j : j;
    const int i1 = p.mode == STRATA_ROPE_ADJACENT ? 2 * j + 1 : j + half;
    const float x0 = head[i0], x1 = head[i1];
    rope_rotate_values(x0, x1, cos_s[j], sin_s[j], &head[i0], &head[i1]);
}

// The 4 positions of a row's table cell (through table_of, so a debug share is
// honoured), or null for a padding row.
__device__ __forceinline__ const int32_t* rope_table_cell(const SlotsView& s, int32_t slot, int32_t index) {
    if (!(slot >= 0 && slot < s.n_slots && index >= 0 && index < s.n_ctx)) return nullptr;
    const int32_t t = s.table_of[slot];
    if (t < 0 || t >= s.n_slots) return nullptr;
    return s.table + ((size_t)t * s.n_ctx + index) * 4;
}

}  // namespace cuda
}  // namespace strata

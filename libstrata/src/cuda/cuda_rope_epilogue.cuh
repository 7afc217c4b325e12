// cuda_rope_epilogue.cuh — strata_matmul_rope_kv_store in the one-row integer
// dot kernel's epilogue (cuda_int_matmul.cu): the qkv projection's y row is
// rotated and its k and v stored into the KV cache by the threads that write
// it, so a decode step needs no rope_kv_store launch per layer.
//
// The same values as the separate launch (cuda_kv_store.cu), element by
// element: thread t of the fold owns output column o0 + t of the row, so the
// ADJACENT pair (2j, 2j+1) of a head lies in lanes t and t ^ 1 (o0 and every
// head width are even); each lane gets its neighbour's value with one shuffle
// and keeps its half of rope_rotate_values — the one rotation expression —
// with cos/sin from rope_inverse_frequency and rope_cos_sin of the row's table
// cell (cuda_rope.cuh). The rotated k, and v, are stored as F16 round to
// nearest even at kv_row's address, under kv_row_valid: store_head's values
// and rule. A row without a table cell is not rotated and an unmapped cell is
// not stored, as in rope_kv_store. NEOX-style pairs (j, j + rot/2), int8 pools
// (a max over the whole head, across CTAs) and more than one row are left to
// the separate launch (launch_int_matmul decides, rope_epilogue_covers).
#pragma once

#include <cuda_fp16.h>

#include "cuda_common.cuh"
#include "cuda_kv_layout.cuh"
#include "cuda_rope.cuh"

namespace strata {
namespace cuda {

// One output's part, worked out when its tile starts (the table and page loads and the angle then
// overlap the weight stream instead of lengthening the epilogue).
// Plain data (no initializers), so the kernel can keep one per thread in shared memory
// (rope_epi_slots) rather than in registers across its weight loop.
struct RopeEpi {
    float c, s;     // cos / sin of the output's pair
    __half* cache;  // its cache element (k or v of a stored row), else null
    bool rot;       // one half of a rotated pair (q or k within rot_dim, a row with a table cell)
    bool x0;        // the pair's first element (even dimension)
};

// N per-thread RopeEpi slots in the calling kernel's static shared memory (only the rope kernel calls it).
template <int N>
__device__ __forceinline__ RopeEpi* rope_epi_slots() {
    __shared__ RopeEpi slots[N];
    return slots;
}

// Column o of the call's one row (rows[0] = {slot, index}) of [q | k | v].
__device__ __forceinline__ RopeEpi rope_epi_prepare(const RopeKvStoreArgs& R, int64_t o) {
    RopeEpi e{1.0f, 0.0f, nullptr, false, false};
    const int hd = R.q_params.head_dim;
    const int64_t qw = (int64_t)R.q_params.n_heads * hd, kw = (int64_t)R.k_params.n_heads * hd;
    const int32_t slot = R.rows[0], index = R.rows[1];
    const bool is_q = o < qw, is_k = !is_q && o < qw + kw;
    const int64_t oh = is_q ? o : (is_k ? o - qw : o - qw - kw);
    const int h = (int)(oh / hd), d = (int)(oh - (int64_t)h * hd);
    const strata_rope_params& rp = is_q ? R.q_params : R.k_params;
    e.x0 = (d & 1) == 0;
    if ((is_q || is_k) && d < rp.rot_dim) {
        const int j = d >> 1;
        const float inv = rope_inverse_frequency(rp, j, R.freq_factors);
        const int32_t* cell = rope_table_cell(R.slots, slot, index);
        if (cell != nullptr) {
            rope_cos_sin(rp, j, inv, cell, &e.c, &e.s);
            e.rot = true;
        }
    }
    if (!is_q && kv_row_valid(R.slots, R.layer, slot, index))
        e.cache = reinterpret_cast<__half*>(R.slots.kv) + kv_row(R.slots, slot, R.layer, is_k ? 0 : 1, h, index) + d;
    return e;
}

// The output's value after the rope (x: its matmul value, other: its pair neighbour's), stored into
// its cache element where it has one.
__device__ __forceinline__ float rope_epi_apply(const RopeEpi& e, float x, float other) {
    float y = x;
    if (e.rot) {
        float y0, y1;
        if (e.x0) {
            rope_rotate_values(x, other, e.c, e.s, &y0, &y1);
            y = y0;
        } else {
            rope_rotate_values(other, x, e.c, e.s, &y0, &y1);
            y = y1;
        }
    }
    if (e.cache != nullptr) *e.cache = __float2half_rn(y);
    return y;
}

}  // namespace cuda
}  // namespace strata

// cpu_rope.cpp — position-table kernels on the CPU: RoPE, KV cache stores
// and decode position updates.
//
// A row's angles come from its own table cell (through table_of, so the
// debug table share is honoured) and from per-pair inverse frequencies that
// are computed once per call in float32, the way transformers computes them:
// inv_j = 1 / base^(2j / rot_dim) [/ freq_factors[j]], angle = (pos * freq_scale) * inv_j.
#include <algorithm>
#include <cmath>

#include "cpu_kernels.h"
#include "cpu_simd.h"

namespace strata {
namespace cpu {
namespace {

constexpr int kMaxPairs = 512;

// Inverse frequency and position component of each rotated pair.
void pair_frequencies(const RopeArgs& a, float* inv, int* comp) {
    const strata_rope_params& p = a.p;
    const int half = p.rot_dim / 2;
    for (int j = 0; j < half; j++) {
        comp[j] = 0;
        inv[j] = 1.0f / powf(p.theta_base, float(2 * j) / float(p.rot_dim));
    }
    if (p.mode == STRATA_ROPE_MROPE || p.mode == STRATA_ROPE_VISION) {
        int start = 0;
        for (int c = 0; c < 4; c++) {
            for (int i = 0; i < p.sections[c] && start + i < half; i++) {
                comp[start + i] = c;
                if (p.mode == STRATA_ROPE_VISION)
                    inv[start + i] = 1.0f / powf(p.theta_base, float(2 * i) / float(2 * p.sections[c]));
            }
            start += p.sections[c];
        }
    }
    if (a.freq_factors != nullptr)
        for (int j = 0; j < half; j++) inv[j] = inv[j] / a.freq_factors[j];
}

// The table cell a row reads, or nullptr for padding.
const int32_t* row_cell(const SlotsView& s, const int32_t* rows, int64_t r) {
    const int32_t slot = rows[2 * r], index = rows[2 * r + 1];
    if (!s.row_valid(slot, index)) return nullptr;
    const int32_t region = s.table_of[slot];
    if (region < 0 || region >= s.n_slots) return nullptr;
    return s.table + (int64_t(region) * s.n_ctx + index) * 4;
}

void rope_row(const RopeArgs& a, const float* inv, const int* comp, int64_t r) {
    const int32_t* cell = row_cell(a.slots, a.rows, r);
    if (cell == nullptr) return;
    const strata_rope_params& p = a.p;
    const int half = p.rot_dim / 2;
    float cos_j[kMaxPairs], sin_j[kMaxPairs];
    for (int j = 0; j < half; j++) {
        const float angle = (float(cell[comp[j]]) * p.freq_scale) * inv[j];
        cos_j[j] = cosf(angle);
        sin_j[j] = sinf(angle);
    }
    const bool adjacent = p.mode == STRATA_ROPE_ADJACENT;
    for (int h = 0; h < p.n_heads; h++) {
        float* x = a.x + r * a.x_row_stride + int64_t(h) * p.head_dim;
        for (int j = 0; j < half; j++) {
            float* x0 = adjacent ? x + 2 * j : x + j;
            float* x1 = adjacent ? x + 2 * j + 1 : x + j + half;
            const float v0 = *x0, v1 = *x1;
            *x0 = v0 * cos_j[j] - v1 * sin_j[j];
            *x1 = v1 * cos_j[j] + v0 * sin_j[j];
        }
    }
}

}  // namespace

void rope(ThreadPool& pool, const RopeArgs& a) {
    float inv[kMaxPairs];
    int comp[kMaxPairs];
    pair_frequencies(a, inv, comp);
    const int64_t work = a.n_rows * (int64_t(a.p.n_heads) * a.p.rot_dim * 2 + a.p.rot_dim * 20);
    pool.run(std::min(chunks_for(pool, work), a.n_rows), [&](int t, int parts) {
        int64_t begin, end;
        split_range(a.n_rows, t, parts, &begin, &end);
        for (int64_t r = begin; r < end; r++) rope_row(a, inv, comp, r);
    });
}

void kv_store(ThreadPool& pool, const KvStoreArgs& a) {
    const SlotsView& s = a.slots;
    const int64_t width = int64_t(s.n_kv_heads) * s.head_dim;
    pool.run(std::min(chunks_for(pool, a.n_rows * width * 2), a.n_rows), [&](int t, int parts) {
        int64_t begin, end;
        split_range(a.n_rows, t, parts, &begin, &end);
        for (int64_t r = begin; r < end; r++) {
            const int32_t slot = a.rows[2 * r], index = a.rows[2 * r + 1];
            if (!s.row_valid(slot, index) || !s.cell_mapped(slot, index)) continue;  // unmapped: skipped
            for (int which = 0; which < 2; which++) {
                const float* src = (which == 0 ? a.k + r * a.k_row_stride : a.v + r * a.v_row_stride);
                for (int32_t h = 0; h < s.n_kv_heads; h++, src += s.head_dim) {
                    uint16_t* dst = s.kv + s.kv_index(slot, a.layer, which, h, index);
                    int i = 0;
                    for (; i + 8 <= s.head_dim; i += 8)
                        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
                    for (; i < s.head_dim; i++) dst[i] = f32_to_f16(src[i]);
                }
            }
        }
    });
}

void positions_decode(const PositionsDecodeArgs& a) {
    const SlotsView& s = a.slots;
    for (int64_t r = 0; r < a.n_rows; r++) {
        const int32_t slot = a.rows[2 * r], index = a.rows[2 * r + 1];
        if (!s.row_valid(slot, index)) continue;
        const int32_t region = s.table_of[slot];
        if (region < 0 || region >= s.n_slots) continue;
        int32_t* cell = s.table + (int64_t(region) * s.n_ctx + index) * 4;
        const int32_t pos = index + s.delta[slot];
        for (int c = 0; c < 4; c++) cell[c] = pos;
    }
}

}  // namespace cpu
}  // namespace strata

// cpu_attention.cpp — causal GQA attention over a slot's F16 KV cache, and
// bidirectional attention within segments (the vision encoder).
//
// One (row, head) at a time, keys in blocks of 32 aligned to absolute cell
// indices (to the segment start for dense attention), with an online softmax whose
// merge order is fixed by those blocks: a row's output depends only on its
// query and its own keys, never on the batch or the thread split.
//   per block: s_j = scale * (q . k_j); m' = max(m, max_j s_j); c = e^(m - m')
//              l = l*c + sum_j e^(s_j - m');  acc = acc*c + sum_j e^(s_j - m') v_j
//   out = acc / l
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "cpu_kernels.h"
#include "cpu_simd.h"

namespace strata {
namespace cpu {
namespace {

constexpr int kBlock = 32;
constexpr int kMaxHeadDim = 512;

inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const uint16_t* p) { return load_f16x8(p); }
inline float to_f32(float v) { return v; }
inline float to_f32(uint16_t v) { return f16_to_f32(v); }

// q . k over hd values: 8-lane FMAs, the tail zero-padded, fixed lane sum.
template <class T>
float dot(const float* q, const T* k, int hd) {
    __m256 acc = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= hd; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), load8(k + i), acc);
    if (i < hd) {
        alignas(32) float kt[8] = {};
        for (int t = 0; i + t < hd; t++) kt[t] = to_f32(k[i + t]);
        acc = _mm256_fmadd_ps(load_first(q + i, hd - i), _mm256_load_ps(kt), acc);
    }
    return hsum(acc);
}

// acc = acc * c (c == 1 skipped), then acc += p_j * v_j for the block's keys, in order.
template <class T, class KeyRow>
void accumulate_values(float* acc, int hd, float c, const float* p, int n, KeyRow value_row) {
    if (c != 1.0f) {
        const __m256 cv = _mm256_set1_ps(c);
        int i = 0;
        for (; i + 8 <= hd; i += 8) _mm256_storeu_ps(acc + i, _mm256_mul_ps(_mm256_loadu_ps(acc + i), cv));
        for (; i < hd; i++) acc[i] = acc[i] * c;
    }
    for (int j = 0; j < n; j++) {
        const T* v = value_row(j);
        const __m256 pj = _mm256_set1_ps(p[j]);
        int i = 0;
        for (; i + 8 <= hd; i += 8) _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(pj, load8(v + i), _mm256_loadu_ps(acc + i)));
        for (; i < hd; i++) acc[i] = __builtin_fmaf(p[j], to_f32(v[i]), acc[i]);
    }
}

// Attends query q to keys [first, last) given by key_row(c) / value_row(c);
// key blocks start at `first` and then at `first` + multiples of kBlock.
template <class T, class KeyRowFn, class ValueRowFn>
void attend(const float* q, int hd, float scale, int64_t first, int64_t last, KeyRowFn key_row,
            ValueRowFn value_row, float* out) {
    alignas(32) float acc[kMaxHeadDim];
    std::fill(acc, acc + hd, 0.0f);
    alignas(32) float s[kBlock], p[kBlock];
    float m = -INFINITY, l = 0.0f;
    for (int64_t b0 = first; b0 < last; b0 += kBlock) {
        const int n = int(std::min<int64_t>(last - b0, kBlock));
        float bm = -INFINITY;
        for (int j = 0; j < n; j++) {
            s[j] = scale * dot(q, key_row(b0 + j), hd);
            bm = s[j] > bm ? s[j] : bm;
        }
        const float m_new = m > bm ? m : bm;
        if (m_new == -INFINITY) continue;  // every score so far is -inf: weights stay 0
        const float c = m == -INFINITY ? 0.0f : exp1(m - m_new);
        const __m256 mv = _mm256_set1_ps(m_new);
        for (int j = 0; j < n; j += 8) {
            const int w = std::min(8, n - j);
            store_first(p + j, exp256(_mm256_sub_ps(load_first(s + j, w), mv)), w);
        }
        float block_sum = 0.0f;
        for (int j = 0; j < n; j++) block_sum += p[j];
        l = l * c + block_sum;
        accumulate_values<T>(acc, hd, m == -INFINITY ? 1.0f : c, p, n, [&](int j) { return value_row(b0 + j); });
        m = m_new;
    }
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    for (int i = 0; i < hd; i++) out[i] = l > 0.0f ? acc[i] * inv : 0.0f;
}

}  // namespace

void attention(ThreadPool& pool, const AttentionArgs& a) {
    const SlotsView& s = a.slots;
    const int hd = s.head_dim;
    const int group = a.n_heads / s.n_kv_heads;
    const int64_t n_tasks = a.n_rows * a.n_heads;
    int64_t keys = 0;
    for (int64_t r = 0; r < a.n_rows; r++) keys += s.row_valid(a.rows[2 * r], a.rows[2 * r + 1]) ? a.rows[2 * r + 1] + 1 : 0;
    pool.run(std::min(chunks_for(pool, keys * a.n_heads * hd * 4), n_tasks), [&](int t, int parts) {
        for (int64_t task = t; task < n_tasks; task += parts) {  // interleaved: causal rows differ in cost
            const int64_t r = task / a.n_heads;
            const int h = int(task % a.n_heads);
            float* out = a.out + r * int64_t(a.n_heads) * hd + int64_t(h) * hd;
            const int32_t slot = a.rows[2 * r], index = a.rows[2 * r + 1];
            if (!s.row_valid(slot, index)) {
                std::memset(out, 0, size_t(hd) * 4);
                continue;
            }
            const uint16_t* k = s.kv + s.kv_index(slot, a.layer, 0, h / group, 0);
            const uint16_t* v = s.kv + s.kv_index(slot, a.layer, 1, h / group, 0);
            attend<uint16_t>(a.q + r * a.q_row_stride + int64_t(h) * hd, hd, a.scale, 0, int64_t(index) + 1,
                             [&](int64_t c) { return k + c * hd; }, [&](int64_t c) { return v + c * hd; }, out);
        }
    });
}

void attention_dense(ThreadPool& pool, const DenseAttentionArgs& a) {
    // Each token's segment [lo, hi); tokens outside every segment get zeros.
    std::vector<int64_t> lo(size_t(a.n_tokens), 0), hi(size_t(a.n_tokens), 0);
    int64_t work = 0;
    for (int64_t sg = 0; sg < a.n_segments; sg++) {
        const int64_t b = std::clamp<int64_t>(a.segments[sg], 0, a.n_tokens);
        const int64_t e = std::clamp<int64_t>(a.segments[sg + 1], b, a.n_tokens);
        for (int64_t t = b; t < e; t++) lo[t] = b, hi[t] = e;
        work += (e - b) * (e - b);
    }
    const int hd = a.head_dim;
    const int64_t n_tasks = a.n_tokens * a.n_heads;
    pool.run(std::min(chunks_for(pool, work * a.n_heads * hd * 4), n_tasks), [&](int t, int parts) {
        for (int64_t task = t; task < n_tasks; task += parts) {
            const int64_t tok = task / a.n_heads;
            const int h = int(task % a.n_heads);
            const int64_t col = int64_t(h) * hd;
            attend<float>(a.q + tok * a.row_stride + col, hd, a.scale, lo[tok], hi[tok],
                          [&](int64_t c) { return a.k + c * a.row_stride + col; },
                          [&](int64_t c) { return a.v + c * a.row_stride + col; },
                          a.out + tok * int64_t(a.n_heads) * hd + col);
        }
    });
}

}  // namespace cpu
}  // namespace strata

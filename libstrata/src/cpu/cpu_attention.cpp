// cpu_attention.cpp — causal GQA attention over a slot's F16 KV cache (read
// through its page table, backend.h SlotsView), and
// bidirectional attention within segments (the vision encoder).
//
// A task is one (row, KV head): the query heads that share the KV head walk
// the keys together, so each block of K and V rows is converted to float32
// once. Keys come in blocks of 32 aligned to absolute cell indices (to the
// segment start for dense attention), merged by an online softmax in block
// order; each query head's arithmetic is the same whatever the group size, the
// batch or the thread split:
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

// q . k over hd values: 8-lane FMAs, the tail masked, fixed lane sum.
float dot(const float* q, const float* k, int hd) {
    __m256 acc = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= hd; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_loadu_ps(k + i), acc);
    if (i < hd) acc = _mm256_fmadd_ps(load_first(q + i, hd - i), load_first(k + i, hd - i), acc);
    return hsum(acc);
}

// Rows of a block as float32: F16 cache rows are converted into `tmp`; F32
// rows are used where they are.
const float* block_row(const uint16_t* src, int hd, float* tmp) {
    int i = 0;
    for (; i + 8 <= hd; i += 8) _mm256_storeu_ps(tmp + i, load_f16x8(src + i));
    for (; i < hd; i++) tmp[i] = f16_to_f32(src[i]);
    return tmp;
}
const float* block_row(const float* src, int, float*) { return src; }

// acc = acc * c (c == 1 skipped), then acc += p_j * v_j for the block's rows, in order.
void accumulate_values(float* acc, int hd, float c, const float* p, int n, const float* const* v) {
    if (c != 1.0f) {
        const __m256 cv = _mm256_set1_ps(c);
        int i = 0;
        for (; i + 8 <= hd; i += 8) _mm256_storeu_ps(acc + i, _mm256_mul_ps(_mm256_loadu_ps(acc + i), cv));
        for (; i < hd; i++) acc[i] = acc[i] * c;
    }
    for (int j = 0; j < n; j++) {
        const __m256 pj = _mm256_set1_ps(p[j]);
        int i = 0;
        for (; i + 8 <= hd; i += 8)
            _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(pj, _mm256_loadu_ps(v[j] + i), _mm256_loadu_ps(acc + i)));
        for (; i < hd; i++) acc[i] = __builtin_fmaf(p[j], v[j][i], acc[i]);
    }
}

// Per-thread scratch: converted K and V rows of a block, and per-head state.
struct Scratch {
    std::vector<float> k, v, acc, m, l;
    void reserve(int n_q, int hd) {
        k.resize(size_t(kBlock) * hd);
        v.resize(size_t(kBlock) * hd);
        acc.resize(size_t(n_q) * hd);
        m.resize(size_t(n_q));
        l.resize(size_t(n_q));
    }
};

// Query heads q[0..n_q) attend to keys [first, last) of one KV head;
// key_row(c) / value_row(c) give cell c's rows; outputs go to out[h].
template <class T, class KeyRowFn, class ValueRowFn>
void attend(const float* const* q, float* const* out, int n_q, int hd, float scale, int64_t first, int64_t last,
            KeyRowFn key_row, ValueRowFn value_row) {
    thread_local Scratch sc;
    sc.reserve(n_q, hd);
    std::fill(sc.acc.begin(), sc.acc.begin() + size_t(n_q) * hd, 0.0f);
    std::fill(sc.m.begin(), sc.m.begin() + n_q, -INFINITY);
    std::fill(sc.l.begin(), sc.l.begin() + n_q, 0.0f);
    const float* k[kBlock];
    const float* v[kBlock];
    alignas(32) float s[kBlock], p[kBlock];
    for (int64_t b0 = first; b0 < last; b0 += kBlock) {
        const int n = int(std::min<int64_t>(last - b0, kBlock));
        for (int j = 0; j < n; j++) {
            k[j] = block_row(key_row(b0 + j), hd, sc.k.data() + size_t(j) * hd);
            v[j] = block_row(value_row(b0 + j), hd, sc.v.data() + size_t(j) * hd);
        }
        for (int h = 0; h < n_q; h++) {
            float bm = -INFINITY;
            for (int j = 0; j < n; j++) {
                s[j] = scale * dot(q[h], k[j], hd);
                bm = s[j] > bm ? s[j] : bm;
            }
            float& m = sc.m[h];
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
            sc.l[h] = sc.l[h] * c + block_sum;
            accumulate_values(sc.acc.data() + size_t(h) * hd, hd, m == -INFINITY ? 1.0f : c, p, n, v);
            m = m_new;
        }
    }
    for (int h = 0; h < n_q; h++) {
        const float l = sc.l[h], inv = l > 0.0f ? 1.0f / l : 0.0f;
        const float* acc = sc.acc.data() + size_t(h) * hd;
        for (int i = 0; i < hd; i++) out[h][i] = l > 0.0f ? acc[i] * inv : 0.0f;
    }
}

constexpr int kMaxGroup = 64;  // query heads handled together (larger groups are split)

}  // namespace

void attention(ThreadPool& pool, const AttentionArgs& a) {
    const SlotsView& s = a.slots;
    const int hd = s.head_dim;
    const int group = a.n_heads / s.n_kv_heads;
    const int parts_per_kv = (group + kMaxGroup - 1) / kMaxGroup;
    const int64_t n_tasks = a.n_rows * s.n_kv_heads * parts_per_kv;
    int64_t keys = 0;
    for (int64_t r = 0; r < a.n_rows; r++) {
        const int64_t n = s.row_valid(a.rows[2 * r], a.rows[2 * r + 1]) ? a.rows[2 * r + 1] + 1 : 0;
        keys += a.window > 0 ? std::min<int64_t>(n, a.window) : n;
    }
    pool.run(std::min(chunks_for(pool, keys * a.n_heads * hd * 4), n_tasks), [&](int t, int parts) {
        for (int64_t task = t; task < n_tasks; task += parts) {  // interleaved: causal rows differ in cost
            const int64_t r = task / (int64_t(s.n_kv_heads) * parts_per_kv);
            const int kv = int(task / parts_per_kv % s.n_kv_heads);
            const int h0 = kv * group + int(task % parts_per_kv) * kMaxGroup;
            const int n_q = std::min(kMaxGroup, (kv + 1) * group - h0);
            const float* q[kMaxGroup];
            float* out[kMaxGroup];
            for (int i = 0; i < n_q; i++) {
                q[i] = a.q + r * a.q_row_stride + int64_t(h0 + i) * hd;
                out[i] = a.out + r * int64_t(a.n_heads) * hd + int64_t(h0 + i) * hd;
            }
            const int32_t slot = a.rows[2 * r], index = a.rows[2 * r + 1];
            if (!s.row_valid(slot, index)) {
                for (int i = 0; i < n_q; i++) std::memset(out[i], 0, size_t(hd) * 4);
                continue;
            }
            // Cells are read through the slot's page table (an unmapped page reads the zero null page).
            const uint16_t* kv_pool = s.kv;
            // A sliding window starts the key blocks at the row's first visible cell: a function of
            // the row's own index, so the blocks (and the bits) never depend on the batch.
            const int64_t first = a.window > 0 ? std::max<int64_t>(0, int64_t(index) - a.window + 1) : 0;
            attend<uint16_t>(q, out, n_q, hd, a.scale, first, int64_t(index) + 1, [&](int64_t c) { return kv_pool + s.kv_index(slot, a.layer, 0, kv, int32_t(c)); },
                             [&](int64_t c) { return kv_pool + s.kv_index(slot, a.layer, 1, kv, int32_t(c)); });
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
            const int64_t col = int64_t(task % a.n_heads) * hd;
            const float* q = a.q + tok * a.row_stride + col;
            float* out = a.out + tok * int64_t(a.n_heads) * hd + col;
            attend<float>(&q, &out, 1, hd, a.scale, lo[tok], hi[tok],
                          [&](int64_t c) { return a.k + c * a.row_stride + col; },
                          [&](int64_t c) { return a.v + c * a.row_stride + col; });
        }
    });
}

}  // namespace cpu
}  // namespace strata

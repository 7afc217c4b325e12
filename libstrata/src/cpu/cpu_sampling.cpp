// cpu_sampling.cpp — argmax and seeded sampling on the CPU, one row per task.
//
// Sampling follows strata.h: weights w_i = e^((l_i - max l) / T) (NaN logits
// weigh 0); top-k, then top-p, then min-p zero the weights of dropped tokens;
// u = strata_random_uniform(seed, position) picks the first token, in
// ascending id order, whose running weight sum exceeds u * (kept total). Sums
// run in ascending id order (top-p's in descending weight order, where equal
// weights are interchangeable), so a row's draw depends only on its logits
// and parameters.
#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu_kernels.h"
#include "cpu_simd.h"
#include "core/rng.h"

namespace strata {
namespace cpu {
namespace {

// Largest non-NaN logit (-inf if none).
float max_logit(const float* l, int64_t n) {
    __m256 m = _mm256_set1_ps(-INFINITY);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(l + i);
        m = _mm256_max_ps(_mm256_blendv_ps(v, m, _mm256_cmp_ps(v, v, _CMP_UNORD_Q)), m);
    }
    float best = hmax(m);
    for (; i < n; i++) best = l[i] > best ? l[i] : best;
    return best;
}

// The lowest index of the largest non-NaN logit; 0 when every logit is NaN.
int32_t argmax_row(const float* l, int64_t n) {
    const float best = max_logit(l, n);
    for (int64_t i = 0; i < n; i++)
        if (l[i] == best) return int32_t(i);
    return 0;
}

// Zeroes weights outside the top-k logits (ties with the k-th kept).
void apply_top_k(const float* l, int64_t n, int32_t top_k, float* w, std::vector<float>& scratch) {
    scratch.clear();
    for (int64_t i = 0; i < n; i++)
        if (!std::isnan(l[i])) scratch.push_back(l[i]);
    if (top_k >= int64_t(scratch.size())) return;
    std::nth_element(scratch.begin(), scratch.begin() + (top_k - 1), scratch.end(), std::greater<float>());
    const float kth = scratch[size_t(top_k - 1)];
    for (int64_t i = 0; i < n; i++)
        if (!(l[i] >= kth)) w[i] = 0.0f;
}

// Keeps the smallest set of heaviest tokens whose weight reaches top_p of the
// kept total (every token as heavy as the last one needed is kept).
void apply_top_p(int64_t n, float top_p, float* w, std::vector<float>& scratch) {
    float total = 0.0f;
    scratch.clear();
    for (int64_t i = 0; i < n; i++) {
        total += w[i];
        if (w[i] > 0.0f) scratch.push_back(w[i]);
    }
    const float target = top_p * total;
    float threshold = 0.0f;
    // Sort only as many of the heaviest weights as the prefix sum needs.
    for (size_t m = 64;; m *= 4) {
        const size_t count = std::min(m, scratch.size());
        std::partial_sort(scratch.begin(), scratch.begin() + count, scratch.end(), std::greater<float>());
        float cum = 0.0f;
        size_t j = 0;
        for (; j < count; j++) {
            cum += scratch[j];
            if (cum >= target) break;
        }
        if (j < count) {
            threshold = scratch[j];
            break;
        }
        if (count == scratch.size()) return;  // rounding: the whole set is needed
    }
    for (int64_t i = 0; i < n; i++)
        if (w[i] < threshold) w[i] = 0.0f;
}

int32_t sample_row(const float* l, int64_t n, const strata_sampling_params& p, std::vector<float>& w,
                   std::vector<float>& scratch) {
    if (!(p.temperature > 0.0f)) return argmax_row(l, n);
    const float max_l = max_logit(l, n);
    if (max_l == -INFINITY) return argmax_row(l, n);
    w.resize(size_t(n));
    if (max_l == INFINITY) {
        for (int64_t i = 0; i < n; i++) w[i] = l[i] == INFINITY ? 1.0f : 0.0f;
    } else {
        const __m256 mv = _mm256_set1_ps(max_l), tv = _mm256_set1_ps(p.temperature);
        for (int64_t i = 0; i < n; i += 8) {
            const int k = int(std::min<int64_t>(8, n - i));
            const __m256 v = load_first(l + i, k);
            __m256 e = exp256(_mm256_div_ps(_mm256_sub_ps(v, mv), tv));
            e = _mm256_blendv_ps(e, _mm256_setzero_ps(), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
            store_first(w.data() + i, e, k);
        }
    }
    if (p.top_k > 0 && p.top_k < n) apply_top_k(l, n, p.top_k, w.data(), scratch);
    if (p.top_p < 1.0f) apply_top_p(n, p.top_p, w.data(), scratch);
    if (p.min_p > 0.0f)
        for (int64_t i = 0; i < n; i++)
            if (w[i] < p.min_p) w[i] = 0.0f;
    float total = 0.0f;
    for (int64_t i = 0; i < n; i++) total += w[i];
    const float target = random_uniform(p.seed, p.position) * total;
    float running = 0.0f;
    int32_t last = -1;
    for (int64_t i = 0; i < n; i++) {
        if (w[i] <= 0.0f) continue;
        running += w[i];
        last = int32_t(i);
        if (running > target) return last;
    }
    return last >= 0 ? last : argmax_row(l, n);
}

}  // namespace

void argmax(ThreadPool& pool, const ArgmaxArgs& a) {
    pool.run(std::min(chunks_for(pool, a.n_rows * a.n_vocab / 4), a.n_rows), [&](int t, int parts) {
        int64_t begin, end;
        split_range(a.n_rows, t, parts, &begin, &end);
        for (int64_t r = begin; r < end; r++) a.out_ids[r] = argmax_row(a.logits + r * a.n_vocab, a.n_vocab);
    });
}

void sample(ThreadPool& pool, const SampleArgs& a) {
    pool.run(std::min(chunks_for(pool, a.n_rows * a.n_vocab * 8), a.n_rows), [&](int t, int parts) {
        thread_local std::vector<float> w, scratch;
        int64_t begin, end;
        split_range(a.n_rows, t, parts, &begin, &end);
        for (int64_t r = begin; r < end; r++)
            a.out_ids[r] = sample_row(a.logits + r * a.n_vocab, a.n_vocab, a.params[r], w, scratch);
    });
}

}  // namespace cpu
}  // namespace strata

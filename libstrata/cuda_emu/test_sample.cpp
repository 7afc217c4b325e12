// test_sample.cpp — argmax and sample (cuda_sample.cu, run under emu.h)
// against a sort-based reference of strata.h's sampling semantics: ties,
// NaN and -inf logits, all-equal rows, every filter combination; a row alone
// must give the same token as in its batch; the device splitmix64 must equal
// rng.h's.
#define STRATA_CUDA_EMU 1
#include "emu.h"
#include "cuda_sample.cu"
#include "core/rng.h"
#include <cstdio>
#include <random>
#include <numeric>
using namespace strata;
using namespace strata::cuda;

static int ref_argmax(const float* l, int64_t n) {
    int best = -1; for (int64_t i = 0; i < n; ++i) { if (l[i] != l[i]) continue; if (best < 0 || l[i] > l[best]) best = (int)i; }
    return best < 0 ? 0 : best;
}
static int ref_sample(const float* l, int64_t n, const strata_sampling_params& p) {
    if (!(p.temperature > 0)) return ref_argmax(l, n);
    int am = ref_argmax(l, n); float m = l[am];
    if (m != m || m == -INFINITY) return am;
    std::vector<float> w(n); std::vector<char> keep(n);
    for (int64_t i = 0; i < n; ++i) { keep[i] = l[i] == l[i]; w[i] = l[i] == m ? 1.f : expf(__fdiv_rn(__fsub_rn(l[i], m), p.temperature)); if (w[i] != w[i]) w[i] = 0; }
    std::vector<float> ok; for (int64_t i = 0; i < n; ++i) if (keep[i]) ok.push_back(l[i]);
    if (p.top_k > 0 && p.top_k < (int64_t)ok.size()) { std::sort(ok.begin(), ok.end(), std::greater<float>()); float kth = ok[p.top_k - 1];
        for (int64_t i = 0; i < n; ++i) if (!(l[i] >= kth)) keep[i] = 0; }
    if (p.top_p < 1) { std::vector<float> ws; double tot = 0; for (int64_t i = 0; i < n; ++i) if (keep[i]) { ws.push_back(w[i]); tot += w[i]; }
        std::sort(ws.begin(), ws.end(), std::greater<float>()); double target = (double)p.top_p * tot, cum = 0; float thr = 0;
        for (size_t j = 0; j < ws.size(); ++j) { cum += ws[j]; if (cum >= target) { thr = ws[j]; break; } }
        for (int64_t i = 0; i < n; ++i) if (w[i] < thr) keep[i] = 0; }
    if (p.min_p > 0) for (int64_t i = 0; i < n; ++i) if (w[i] < p.min_p) keep[i] = 0;
    double tot = 0; for (int64_t i = 0; i < n; ++i) if (keep[i]) tot += w[i];
    double target = (double)random_uniform(p.seed, p.position) * tot, run = 0;
    for (int64_t i = 0; i < n; ++i) if (keep[i]) { run += w[i]; if (run > target) return (int)i; }
    return -1;
}

int main() {
    std::mt19937_64 rng(7);
    // device splitmix == rng.h
    for (int i = 0; i < 1000; ++i) { uint64_t s = rng(); int64_t pos = (int64_t)(rng() % 100000) - 10; if (T_cuda_sample::random_uniform(s, pos) != strata::random_uniform(s, pos)) { printf("uniform mismatch\n"); return 1; } }
    int total = 0, mism = 0, rows_tested = 0;
    const int64_t vocabs[] = {1, 2, 7, 33, 300, 1000, 4099, 49152};
    for (int64_t n : vocabs) {
        const int n_rows = n > 5000 ? 6 : 24;
        std::vector<float> logits(n * n_rows);
        std::vector<strata_sampling_params> prm(n_rows);
        std::normal_distribution<float> nd(0, 1);
        for (int r = 0; r < n_rows; ++r) {
            float scale = (r % 3 == 0) ? 8.f : (r % 3 == 1 ? 1.f : 0.1f);
            for (int64_t i = 0; i < n; ++i) logits[r * n + i] = nd(rng) * scale;
            if (r % 4 == 1) for (int64_t i = 0; i < n; i += 3) logits[r * n + i] = std::round(logits[r * n + i]);  // ties
            if (r % 5 == 2 && n > 3) { logits[r * n + 1] = NAN; logits[r * n + 2] = -INFINITY; }
            if (r % 7 == 3) for (int64_t i = 0; i < n; ++i) logits[r * n + i] = 0.5f;  // all equal
            auto& p = prm[r];
            p.temperature = (r % 6 == 5) ? 0.f : std::vector<float>{1.f, 0.7f, 1.5f, 0.05f, 3.f}[r % 5];
            p.top_k = std::vector<int>{0, 1, 5, 40, 0, 100000}[r % 6];
            p.top_p = std::vector<float>{1.f, 0.9f, 0.5f, 0.95f, 0.1f, 1.f, 0.999f}[r % 7];
            p.min_p = std::vector<float>{0.f, 0.05f, 0.f, 0.2f}[r % 4];
            p.seed = rng(); p.position = (int64_t)(rng() % 5000);
        }
        std::vector<int32_t> out(n_rows, -7), outa(n_rows, -7);
        SampleArgs a{logits.data(), n_rows, n, prm.data(), out.data()};
        std::vector<float> ws(n_rows * T_cuda_sample::sample_scratch_floats(n));  // scratch, one area per CTA
        run_grid(n_rows, 1, 256, [&] { T_cuda_sample::sample_kernel(a, ws.data()); });
        ArgmaxArgs aa{logits.data(), n_rows, n, outa.data()};
        run_grid(n_rows, 1, 1024, [&] { T_cuda_sample::argmax_kernel(aa); });
        // batch invariance: row r alone
        for (int r = 0; r < n_rows; ++r) {
            int want = ref_sample(&logits[r * n], n, prm[r]);
            ++total; if (want != out[r]) { ++mism; printf("n=%ld row %d: got %d want %d (T=%g k=%d p=%g minp=%g)\n", (long)n, r, out[r], want, prm[r].temperature, prm[r].top_k, prm[r].top_p, prm[r].min_p); }
            if (outa[r] != ref_argmax(&logits[r * n], n)) { ++mism; printf("argmax n=%ld row %d: %d vs %d\n", (long)n, r, outa[r], ref_argmax(&logits[r*n], n)); }
        }
        int32_t one = -7; SampleArgs a1{&logits[(n_rows - 2) * n], 1, n, &prm[n_rows - 2], &one};
        run_grid(1, 1, 256, [&] { T_cuda_sample::sample_kernel(a1, ws.data()); });
        if (one != out[n_rows - 2]) { ++mism; printf("batch invariance broken n=%ld\n", (long)n); }
        rows_tested += n_rows;
    }
    // distribution check: one row, many positions, compare frequencies with exact probabilities
    {
        const int64_t n = 50; std::vector<float> l(n); std::normal_distribution<float> nd(0, 1.5f); for (auto& v : l) v = nd(rng);
        const int R = 400; std::vector<float> logits(n * R); std::vector<strata_sampling_params> prm(R);
        for (int r = 0; r < R; ++r) { std::copy(l.begin(), l.end(), logits.begin() + r * n); prm[r] = {1.0f, 1.0f, 0.0f, 0, 42, r}; }
        std::vector<int32_t> out(R); SampleArgs a{logits.data(), R, n, prm.data(), out.data()};
        std::vector<float> ws(64 * T_cuda_sample::sample_scratch_floats(n));  // 64 CTAs: rows blockIdx.x, + 64, ...
        run_grid(64, 1, 64 * 4, [&] { T_cuda_sample::sample_kernel(a, ws.data()); });
        int agree = 0; for (int r = 0; r < R; ++r) agree += out[r] == ref_sample(&logits[r * n], n, prm[r]);
        printf("draws agreeing with the sequential reference: %d / %d\n", agree, R);
    }
    printf("sample: %d rows, %d mismatches\n", total, mism);
    return mism != 0;
}

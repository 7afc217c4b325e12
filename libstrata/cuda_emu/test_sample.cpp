// test_sample.cpp — argmax (cuda_sample.cu) and the cluster sampler
// (cuda_sample_cluster.cu), run under emu.h, against references:
//  - exact: a sort-based reference of the canonical definition in the
//    sampler's header (integer masses q_i = floor(w_i · 2^40), the top-p
//    threshold from a descending sort, the draw D = floor(u24 · K / 2^24)),
//    which must give the same token on every row, adversarial ones included;
//  - float64: strata.h's rule with float64 sums (what the CPU backend and the
//    Python tests approximate), which random rows must match; adversarial rows
//    that differ are counted (rounding may decide them);
//  - batch invariance: a row alone, among others in another order, in
//    launches of other row counts, and with the wide cluster (twice the
//    CTAs) gives the same token; a negative control
//    (SAMPLE_LEAK makes a row's logits depend on the next row) proves that
//    check can fail;
//  - barrier forms: the same tokens with every cluster barrier full
//    (STRATA_SAMPLE_FENCE=membar) and with the publishing barriers
//    (cluster, the default), and no hazard from cluster_check.h on any run
//    (no remote read left unordered where its word changes or its CTA
//    ends); a negative control (every full barrier made publishing) must
//    make that check count hazards.
// Rows: random logits and settings, and adversarial ones (ties, NaN and ±inf
// logits, all-equal and all-NaN rows, ±0, k = 1 and k >= vocab, top_p = 1,
// tiny and zero top_p, temperature extremes, min-p), over vocabulary sizes
// around the slice and chunk boundaries (8 slices of a multiple of 4 ids,
// 256 threads per slice).
#define STRATA_CUDA_EMU 1
#include "emu.h"
// The launch shape: tokens do not depend on it, and a cluster of 8 x 256
// emulated threads is slow on a small machine, so the default run uses 2 x 64;
// `-DSAMPLE_CTAS=8 -DSAMPLE_THREADS=256` builds the device's shape.
#ifndef SAMPLE_CTAS
#define SAMPLE_CTAS 2
#define SAMPLE_THREADS 64
#endif
static bool g_leak = false;  // the negative control: row r's logits pick up row r + 1's
#define SAMPLE_LEAK(args, row, id, value) \
    ((g_leak && (row) + 1 < (args).n_rows) ? (value) + (args).logits[((row) + 1) * (args).n_vocab + (id)] : (value))
// Rows by the machinery that decided them (the kernel's RouteKind): [0] top-k radix after the
// candidate route gave up, [1] top-k over gathered candidates, [2] top-p over bins, [3] top-p
// radix after a bin list overflowed.
static std::atomic<int> g_routes[4];
#define SAMPLE_ROUTE(kind) (g_routes[(kind)]++)
#include "cuda_sample.cu"
#include "cuda_sample_cluster.cu"
#include "core/rng.h"
#include <cstdio>
#include <random>
#include <numeric>
using namespace strata;
using namespace strata::cuda;
using u64 = unsigned long long;

static int ref_argmax(const float* l, int64_t n) {
    int best = -1; for (int64_t i = 0; i < n; ++i) { if (l[i] != l[i]) continue; if (best < 0 || l[i] > l[best]) best = (int)i; }
    return best < 0 ? 0 : best;
}
static float ref_weight(float l, float m, float T) {
    if (l == m) return 1.f;
    const float w = expf(__fdiv_rn(__fsub_rn(l, m), T));
    return w == w ? std::min(w, 1.f) : 0.f;
}

// The canonical definition, by sorting (see cuda_sample_cluster.cu's header).
static int ref_exact(const float* l, int64_t n, const strata_sampling_params& p) {
    if (!(p.temperature > 0)) return ref_argmax(l, n);
    const int am = ref_argmax(l, n); const float m = l[am];
    if (m != m || m == -INFINITY) return am;
    std::vector<float> ok; for (int64_t i = 0; i < n; ++i) if (l[i] == l[i]) ok.push_back(l[i]);
    float kth = -INFINITY; bool use_k = p.top_k > 0 && p.top_k < (int64_t)ok.size();
    if (use_k) { std::sort(ok.begin(), ok.end(), std::greater<float>()); kth = ok[p.top_k - 1]; }
    std::vector<float> w(n, -1.f);
    for (int64_t i = 0; i < n; ++i) if (l[i] == l[i] && (!use_k || l[i] >= kth)) w[i] = ref_weight(l[i], m, p.temperature);
    auto q = [](float x) { return (u64)std::ldexp((double)x, 40); };  // x in [0, 1]: exact, then truncated
    unsigned __int128 Q = 0; for (float x : w) if (x >= 0) Q += q(x);
    float w_min = 0;
    if (p.top_p < 1) {
        unsigned __int128 target = 1;
        if (p.top_p > 0) {  // ceil(p · Q) exactly: p = fr · 2^e, fr · 2^24 an integer
            int e; const float fr = std::frexp(p.top_p, &e);
            const unsigned __int128 mant = (u64)std::ldexp((double)fr, 24), prod = mant * Q;
            const int sh = 24 - e;  // p · Q = prod / 2^sh
            unsigned __int128 t = sh >= 127 ? (prod != 0) : (prod >> sh) + ((prod & ((((unsigned __int128)1) << sh) - 1)) != 0);
            target = t > 0 ? t : 1;
        }
        std::vector<float> ws; for (float x : w) if (x >= 0) ws.push_back(x);
        std::sort(ws.begin(), ws.end(), std::greater<float>());
        unsigned __int128 cum = 0;
        for (float x : ws) { cum += q(x); if (cum >= target) { w_min = x; break; } }
    }
    if (p.min_p > 0) w_min = std::max(w_min, std::min(p.min_p, 1.f));
    unsigned __int128 K = 0; for (float x : w) if (x >= w_min && x >= 0) K += q(x);
    const u64 u24 = (u64)((double)strata::random_uniform(p.seed, p.position) * 16777216.0);
    const unsigned __int128 D = (u24 * K) >> 24, run0 = 0;
    unsigned __int128 run = run0;
    for (int64_t i = 0; i < n; ++i) if (w[i] >= 0 && w[i] >= w_min) { run += q(w[i]); if (run > D) return (int)i; }
    return -1;
}

// strata.h's rule with float64 sums.
static int ref_f64(const float* l, int64_t n, const strata_sampling_params& p) {
    if (!(p.temperature > 0)) return ref_argmax(l, n);
    int am = ref_argmax(l, n); float m = l[am];
    if (m != m || m == -INFINITY) return am;
    std::vector<float> w(n); std::vector<char> keep(n);
    for (int64_t i = 0; i < n; ++i) { keep[i] = l[i] == l[i]; w[i] = ref_weight(l[i], m, p.temperature); }
    std::vector<float> ok; for (int64_t i = 0; i < n; ++i) if (keep[i]) ok.push_back(l[i]);
    if (p.top_k > 0 && p.top_k < (int64_t)ok.size()) { std::sort(ok.begin(), ok.end(), std::greater<float>()); float kth = ok[p.top_k - 1];
        for (int64_t i = 0; i < n; ++i) if (!(l[i] >= kth)) keep[i] = 0; }
    if (p.top_p < 1) { std::vector<float> ws; double tot = 0; for (int64_t i = 0; i < n; ++i) if (keep[i]) { ws.push_back(w[i]); tot += w[i]; }
        std::sort(ws.begin(), ws.end(), std::greater<float>()); double target = (double)std::max(p.top_p, 0.f) * tot, cum = 0; float thr = 0;
        for (size_t j = 0; j < ws.size(); ++j) { cum += ws[j]; if (cum >= target) { thr = ws[j]; break; } }
        for (int64_t i = 0; i < n; ++i) if (w[i] < thr) keep[i] = 0; }
    if (p.min_p > 0) for (int64_t i = 0; i < n; ++i) if (w[i] < std::min(p.min_p, 1.f)) keep[i] = 0;
    double tot = 0; for (int64_t i = 0; i < n; ++i) if (keep[i]) tot += w[i];
    double target = (double)random_uniform(p.seed, p.position) * tot, run = 0;
    for (int64_t i = 0; i < n; ++i) if (keep[i]) { run += w[i]; if (run > target) return (int)i; }
    return -1;
}

// The cluster sampler over n_rows rows (C CTAs, one cluster, per row; the
// device uses C = kCtas and, for large rows, kCtasWide).
// route: the kernel's SampleRoute (0 bins, 1 legacy, 2 radix, 3 early: the default; the same tokens);
// fence: its SampleFence (0 membar, 1 cluster: the default; the same tokens).
template <int C = T_cuda_sample_cluster::kCtas>
static std::vector<int32_t> run_sample(const float* logits, int n_rows, int64_t n, const strata_sampling_params* prm,
                                       int route = 3, int fence = 1) {
    namespace K = T_cuda_sample_cluster;
    std::vector<int32_t> out(n_rows, -7);
    SampleArgs a{logits, n_rows, n, prm, out.data()};
    const int64_t slice = K::sample_slice(n, C);
    const size_t smem = sizeof(K::ClusterShared) + (size_t)slice * sizeof(float);
    run_grid_ex((unsigned)(n_rows * C), 1, K::kThreads, C, smem, [&] { K::sample_cluster_kernel<C>(a, slice, route, fence); });
    return out;
}

// Rows built to hit the corners of the semantics (case r of n ids).
constexpr int kAdversarial = 50;
static void adversarial_row(int r, int64_t n, std::mt19937_64& rng, float* l, strata_sampling_params& p) {
    std::normal_distribution<float> nd(0, 2);
    for (int64_t i = 0; i < n; ++i) l[i] = nd(rng);
    p = {1.0f, 1.0f, 0.0f, 0, rng(), (int64_t)(rng() % 100000)};
    const int64_t a = (int64_t)(rng() % n), b = (int64_t)(rng() % n);
    switch (r % kAdversarial) {
        case 0: for (int64_t i = 0; i < n; ++i) l[i] = NAN; break;                       // all NaN: 0
        case 1: for (int64_t i = 0; i < n; ++i) l[i] = -INFINITY; break;                  // all -inf: greedy
        case 2: l[a] = INFINITY; l[b] = INFINITY; p.top_p = 0.5f; break;                  // +inf maxima
        case 3: l[a] = INFINITY; l[b] = NAN; p.top_k = 3; break;
        case 4: for (int64_t i = 0; i < n; ++i) l[i] = (i % 3) ? 0.0f : -0.0f; p.top_k = 2; break;  // ±0 ties
        case 5: for (int64_t i = 0; i < n; ++i) l[i] = std::round(l[i]); p.top_k = 1; break;        // k = 1, ties
        case 6: p.top_k = (int32_t)n; p.top_p = 0.9f; break;                              // k = vocab
        case 7: p.top_k = (int32_t)n + 5; p.min_p = 0.1f; break;                          // k > vocab
        case 8: p.top_p = 1e-7f; break;                                                   // tiny top-p
        case 9: p.top_p = 0.0f; break;                                                    // zero top-p
        case 10: p.top_p = -1.0f; p.top_k = 7; break;
        case 11: p.temperature = 1e-6f; p.top_p = 0.9f; break;                            // tiny T
        case 12: p.temperature = 1e30f; p.top_p = 0.5f; break;                            // huge T
        case 13: p.temperature = INFINITY; p.top_k = 4; break;
        case 14: p.temperature = NAN; break;                                              // greedy
        case 15: for (int64_t i = 0; i < n; ++i) l[i] = 3.25f; p.top_p = 0.3f; p.min_p = 0.5f; break;  // all equal
        case 16: p.min_p = 0.999f; break;
        case 17: p.min_p = 2.0f; p.top_p = 0.8f; break;
        case 18: l[a] = 3e38f; l[b] = -3e38f; p.top_p = 0.99f; break;                     // overflowing differences
        case 19: for (int64_t i = 0; i < n; ++i) l[i] = (float)(i % 5); p.top_k = (int32_t)(n / 5 + 1); p.top_p = 0.6f; break;
        case 20: for (int64_t i = 0; i < n; ++i) if (i % 2) l[i] = NAN; p.top_k = 2; p.top_p = 0.95f; break;
        case 21: p.temperature = 0.8f; p.top_k = 40; p.top_p = 0.95f; p.min_p = 0.05f; break;
        case 22: for (int64_t i = 0; i < n; ++i) l[i] *= 20.0f; p.temperature = 0.3f; p.top_p = 0.999f; break;
        case 23: for (int64_t i = 0; i < n; ++i) l[i] = i == a ? 1.0f : -INFINITY; p.top_p = 0.5f; p.top_k = 5; break;
        case 24: p.top_k = 257; p.top_p = 0.9f; break;
        case 25: for (int64_t i = 0; i < n; ++i) l[i] = std::round(l[i] * 0.5f); p.top_k = 256; break;  // many ties at the k-th
        case 26: p.top_p = 1.4e-45f; p.temperature = 0.5f; break;                          // subnormal top-p
        // The bin routes (top-k by logit distance, top-p by weight bins) and their fallbacks:
        case 27: for (int64_t i = 0; i < n; ++i) l[i] = 1.0f + 1e-3f * (float)(i % 7); p.top_p = 0.5f; break;  // flat mass: one bin
        case 28: for (int64_t i = 0; i < n; ++i) l[i] = std::round(l[i] * 2.0f) * 0.5f; p.top_p = 0.7f; break;  // ties at w*
        case 29: p.top_p = 0.99999994f; p.temperature = 0.7f; break;                       // top-p just below 1
        case 30: p.top_p = 1e-3f; p.temperature = 50.0f; break;                            // tiny top-p, spread mass
        case 31: for (int64_t i = 0; i < n; ++i) l[i] = std::round(l[i]); p.top_k = 40; p.top_p = 0.5f; break;  // top-k + top-p, ties
        case 32: p.min_p = 0.3f; p.top_p = 0.9f; break;                                    // min-p above w*
        case 33: p.min_p = 1e-3f; p.top_p = 0.5f; p.temperature = 0.6f; break;             // w* above min-p
        case 34: for (int64_t i = 0; i < n; ++i) { if (i % 2) l[i] = NAN; else if (i % 3 == 0) l[i] = -INFINITY; } p.top_p = 0.8f; break;
        case 35: l[a] = 2000.0f; p.top_k = std::min<int32_t>(40, (int32_t)n); p.top_p = 0.9f; break;  // k-th beyond 2^10 below the max
        case 36: for (int64_t i = 0; i < n; ++i) l[i] = i % 11 == 0 ? l[i] : -INFINITY; p.top_k = 30; p.top_p = 0.95f; break;  // a mask
        case 37: for (int64_t i = 0; i < n; ++i) l[i] *= 50.0f; p.top_p = 0.9999f; break;  // weights over many octaves
        case 38: p.temperature = 0.01f; p.top_p = 0.9f; p.top_k = 100; break;             // most masses 0
        case 39: l[a] = INFINITY; p.top_k = 1; p.top_p = 0.3f; break;
        case 40: p.top_k = 40; p.temperature = 0.8f; break;                                // the benchmark's top-k
        case 41: for (int64_t i = 0; i < n; ++i) l[i] *= 1.5f; p.top_p = 0.95f; p.temperature = 0.8f; break;  // the benchmark's top-p
        case 42: for (int64_t i = 0; i < n; ++i) l[i] = -3.0f - 1e-5f * (float)i; p.top_k = 3; p.top_p = 0.99f; break;  // descending, near ties
        // The early top-k route (the logit's own key, 32 bins per octave of |l| from 2^-9 to 2^11) at its edges:
        case 43: for (int64_t i = 0; i < n; ++i) l[i] *= 1e-3f; p.top_k = 40; p.top_p = 0.9f; break;  // most in the middle bin
        case 44: for (int64_t i = 0; i < n; ++i) l[i] -= 3000.0f; p.top_k = 40; break;  // the k-th not counted: radix
        case 45: for (int64_t i = 0; i < n; ++i) l[i] = 2040.0f + l[i] * 4.0f; p.top_k = 40; p.top_p = 0.9f; break;  // around 2^11
        case 46: for (int64_t i = 0; i < n; ++i) l[i] = std::ldexp((float)(i % 4) - 1.5f, -9); p.top_k = 5; p.top_p = 0.9f; p.min_p = 0.05f; break;
        case 47: p.top_k = 256; p.top_p = 0.95f; p.min_p = 0.02f; p.temperature = 0.8f; break;  // the route's largest k
        // w* in a bin of 600 / 800 tied weights spread over the slices: in the device's shape (8 CTAs) a
        // union of 600 goes beside the words the other CTAs read, 800 (over 640) takes the full barrier first.
        case 48: case 49: {
            const int64_t ties = std::min<int64_t>(r % kAdversarial == 48 ? 600 : 800, n / 2), step = std::max<int64_t>(1, n / std::max<int64_t>(1, ties));
            for (int64_t i = 0; i < n; ++i) l[i] = i % step == 0 && i / step < ties ? 0.0f : -40.0f;
            l[n - 1] = 1.0f; p.top_p = 0.9f; break;
        }
    }
}

int main(int argc, char** argv) {
    // test_sample [--quick] [vocab ...]: the given vocabulary sizes (default below; 49152 takes minutes in the
    // emulator); --quick: 1 random row and 12 adversarial ones (the benchmark's settings, the bin routes'
    // fallbacks), one route, two rows for invariance (for the device's launch shape, where every emulated
    // cluster is 2,048 or 4,096 threads).
    std::vector<int64_t> vocabs = {1, 2, 7, 31, 33, 300, 1000, 2057, 4099, 8193};
    int arg = 1;
    const bool quick = argc > 1 && std::string(argv[1]) == "--quick";
    if (quick) ++arg;
    if (argc > arg) { vocabs.clear(); for (int i = arg; i < argc; ++i) vocabs.push_back(std::atoll(argv[i])); }
    printf("shape: %d CTAs of %d threads per row\n", SAMPLE_CTAS, SAMPLE_THREADS);
    std::mt19937_64 rng(7);
    for (int i = 0; i < 1000; ++i) {  // the device splitmix == rng.h
        uint64_t s = rng(); int64_t pos = (int64_t)(rng() % 100000) - 10;
        if ((float)T_cuda_sample_cluster::random_u24(s, pos) * (1.0f / 16777216.0f) != strata::random_uniform(s, pos)) { printf("uniform mismatch\n"); return 1; }
    }
    {  // lkey (the early top-k route's key) is monotone in the logit, kNoBin only below every counted logit
        std::vector<float> v;
        for (int i = 0; i < 2000000; ++i) { const uint32_t u = (uint32_t)rng(); float f; memcpy(&f, &u, 4); if (f == f) v.push_back(f); }
        for (float f : {0.0f, -0.0f, INFINITY, -INFINITY, 2048.0f, -2048.0f, 0x1p-9f, -0x1p-9f, 2047.99f, -2047.99f}) v.push_back(f);
        std::sort(v.begin(), v.end());
        uint32_t prev = 0; bool counted = false; int bad = 0;
        for (float f : v) {
            const uint32_t k = T_cuda_sample_cluster::lkey(f);
            if (k == T_cuda_sample_cluster::kNoBin) { bad += counted; continue; }
            bad += k > T_cuda_sample_cluster::kTopKey || (counted && k < prev);
            prev = k; counted = true;
        }
        if (bad) { printf("lkey is not monotone: %d\n", bad); return 1; }
    }
    {  // the bin floors the listing passes compare with: lkey_floor(b) is the smallest float of key >= b, and
       // wkey_floor(b) the smallest of wkey b (the float just below each has a smaller key or none)
        namespace K = T_cuda_sample_cluster;
        auto bits = [](float f) { uint32_t u; memcpy(&u, &f, 4); return u; };
        auto down = [&](float f) {  // the next float below f (f != +0)
            const uint32_t u = bits(f), d = (u & 0x80000000u) ? u + 1 : u - 1;
            float g; memcpy(&g, &d, 4); return g;
        };
        int bad = 0;
        for (uint32_t b = 0; b <= K::kTopKey; ++b) {
            const float f = K::lkey_floor(b), g = down(f);
            const uint32_t kf = K::lkey(f), kg = K::lkey(g);
            bad += kf == K::kNoBin || kf < b || !(f == f);
            bad += kg != K::kNoBin && kg >= b;
            const float w = K::wkey_floor(b), v = down(w);
            bad += K::wkey(w) != b || !(w >= K::kMinMassWeight) || !(w <= 1.0f);
            bad += b == 0 ? !(v < K::kMinMassWeight) : K::wkey(v) != b - 1;
        }
        bad += !(K::wkey_floor(K::kTopKey + 1) > 1.0f);
        if (bad) { printf("bin floors wrong: %d\n", bad); return 1; }
    }
    int rows = 0, exact_miss = 0, f64_rand = 0, f64_rand_miss = 0, f64_adv_miss = 0, argmax_miss = 0;
    int inv_rows = 0, inv_miss = 0, leak_rows = 0, leak_differs = 0, route_rows = 0, route_miss = 0;
    int fence_rows = 0, fence_miss = 0;
    long relaxed_hazards = 0, relaxed_runs = 0;
    for (int64_t n : vocabs) {
        std::vector<int> cases;  // adversarial cases, in order
        for (int c = 0; c < kAdversarial; ++c)
            if (!quick || c == 2 || c == 21 || c == 27 || c == 31 || c == 32 || c == 35 || c == 40 || c == 41 || c == 44 || c == 47 || c == 48 || c == 49) cases.push_back(c);
        const int n_rand = quick ? 1 : n > 5000 ? 6 : 14, n_adv = (int)cases.size(), n_rows = n_rand + n_adv;
        std::vector<float> logits(n * n_rows);
        std::vector<strata_sampling_params> prm(n_rows);
        std::normal_distribution<float> nd(0, 1);
        for (int r = 0; r < n_rand; ++r) {
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
        for (int r = n_rand; r < n_rows; ++r) adversarial_row(cases[r - n_rand], n, rng, &logits[r * n], prm[r]);
        const std::vector<int32_t> out = run_sample(logits.data(), n_rows, n, prm.data());
        // The other routes (STRATA_SAMPLE_ROUTE=bins, legacy, radix) must draw the same tokens.
        for (int route = 0; route <= (quick ? 0 : 2); ++route) {
            const std::vector<int32_t> other = run_sample(logits.data(), n_rows, n, prm.data(), route);
            for (int r = 0; r < n_rows; ++r) {
                ++route_rows;
                if (other[r] != out[r]) { ++route_miss; printf("n=%ld row %d: route %d drew %d, the early route %d\n", (long)n, r, route, other[r], out[r]); }
            }
        }
        // Every cluster barrier full (STRATA_SAMPLE_FENCE=membar) must draw the same tokens.
        for (int route = 3; route >= (quick ? 3 : 0); --route) {
            const std::vector<int32_t> other = run_sample(logits.data(), n_rows, n, prm.data(), route, 0);
            for (int r = 0; r < n_rows; ++r) {
                ++fence_rows;
                if (other[r] != out[r]) { ++fence_miss; printf("n=%ld row %d: route %d with full barriers drew %d, %d with publishing ones\n", (long)n, r, route, other[r], out[r]); }
            }
        }
        // Negative control of cluster_check.h: with every full barrier made publishing, the remote
        // reads the full ones close (the gathered lists over the histograms, the CTAs' exits) must
        // show up as hazards. The tokens are not checked (the host orders every access anyway).
        {
            const long before = emu_cluster_hazards.load();
            emu_relax_full_barriers = true;
            (void)run_sample(logits.data(), n_rows, n, prm.data());
            emu_relax_full_barriers = false;
            relaxed_hazards += emu_cluster_hazards.load() - before;
            ++relaxed_runs;
            emu_cluster_hazards = before;
        }
        std::vector<int32_t> outa(n_rows, -7);
        ArgmaxArgs aa{logits.data(), n_rows, n, outa.data()};
        run_grid(4, 1, 1024, [&] { T_cuda_sample::argmax_kernel(aa); });
        for (int r = 0; r < n_rows; ++r) {
            const float* l = &logits[r * n];
            ++rows;
            const int want = ref_exact(l, n, prm[r]);
            if (want != out[r]) { ++exact_miss; printf("n=%ld row %d: got %d, exact reference %d (T=%g k=%d p=%g minp=%g)\n", (long)n, r, out[r], want, prm[r].temperature, prm[r].top_k, prm[r].top_p, prm[r].min_p); }
            const int f = ref_f64(l, n, prm[r]);
            if (r < n_rand) { ++f64_rand; if (f != out[r]) { ++f64_rand_miss; printf("n=%ld row %d: got %d, float64 reference %d\n", (long)n, r, out[r], f); } }
            else if (f != out[r] && f >= 0) { ++f64_adv_miss; printf("adversarial n=%ld case %d: got %d, float64 reference %d\n", (long)n, cases[r - n_rand], out[r], f); }
            if (outa[r] != ref_argmax(l, n)) { ++argmax_miss; printf("argmax n=%ld row %d: %d vs %d\n", (long)n, r, outa[r], ref_argmax(l, n)); }
        }
        // Batch invariance: rows alone, and a few rows in reverse order (another row count, other neighbours).
        const std::vector<int> pick = quick ? std::vector<int>{0, n_rows - 1} : std::vector<int>{0, n_rand - 1, n_rand + 2, n_rand + 21, n_rows - 1};
        for (int r : pick) {
            const std::vector<int32_t> one = run_sample(&logits[r * n], 1, n, &prm[r]);
            ++inv_rows; if (one[0] != out[r]) { ++inv_miss; printf("batch invariance broken: n=%ld row %d alone %d, in the batch %d\n", (long)n, r, one[0], out[r]); }
        }
        // The wide cluster (twice the CTAs, other slice and chunk bounds) and a cluster of an odd size (3:
        // the device picks 5 to 8 CTAs a row by the row count) must give the same tokens.
        {
            std::vector<float> sub; std::vector<strata_sampling_params> subp;
            for (int r : pick) { sub.insert(sub.end(), logits.begin() + r * n, logits.begin() + (r + 1) * n); subp.push_back(prm[r]); }
            const std::vector<int32_t> wide = run_sample<T_cuda_sample_cluster::kCtasWide>(sub.data(), (int)pick.size(), n, subp.data());
            const std::vector<int32_t> odd = run_sample<3>(sub.data(), (int)pick.size(), n, subp.data());
            for (size_t j = 0; j < pick.size(); ++j) {
                inv_rows += 2;
                if (wide[j] != out[pick[j]]) { ++inv_miss; printf("cluster size changed a token: n=%ld row %d: %d vs %d\n", (long)n, pick[j], wide[j], out[pick[j]]); }
                if (odd[j] != out[pick[j]]) { ++inv_miss; printf("3-CTA clusters changed a token: n=%ld row %d: %d vs %d\n", (long)n, pick[j], odd[j], out[pick[j]]); }
            }
        }
        std::vector<float> sub; std::vector<strata_sampling_params> subp;
        for (int j = (int)pick.size() - 1; j >= 0; --j) {
            sub.insert(sub.end(), logits.begin() + pick[j] * n, logits.begin() + (pick[j] + 1) * n); subp.push_back(prm[pick[j]]);
        }
        const std::vector<int32_t> rev = run_sample(sub.data(), (int)pick.size(), n, subp.data());
        for (size_t j = 0; j < pick.size(); ++j) {
            ++inv_rows; const int r = pick[pick.size() - 1 - j];
            if (rev[j] != out[r]) { ++inv_miss; printf("batch invariance broken: n=%ld row %d among %zu rows %d, in the batch %d\n", (long)n, r, pick.size(), rev[j], out[r]); }
        }
        // Negative control: with a leak between rows, the same comparison must see differences.
        if (n >= 33) {
            g_leak = true;
            const int n_leak = quick ? 4 : n_rand;  // quick: the random row and the first adversarial ones
            const std::vector<int32_t> leaky = run_sample(logits.data(), n_leak, n, prm.data());
            g_leak = false;
            for (int r = 0; r + 1 < n_leak; ++r) { ++leak_rows; leak_differs += leaky[r] != out[r]; }
        }
        printf("n=%ld done\n", (long)n); fflush(stdout);
    }
    printf("sample: %d rows, %d off the exact reference; float64 reference: %d of %d random rows differ, %d adversarial rows differ; "
           "argmax: %d wrong; batch invariance: %d of %d draws differ; negative control (rows leaking into each other): %d of %d draws differ\n",
           rows, exact_miss, f64_rand_miss, f64_rand, f64_adv_miss, argmax_miss, inv_miss, inv_rows, leak_differs, leak_rows);
    printf("routes: %d of %d draws differ between the early route and the bin, legacy and radix routes\n", route_miss, route_rows);
    const long hazards = emu_cluster_hazards.load();
    printf("barrier forms: %d of %d draws differ between full (membar) and publishing (cluster) barriers; "
           "cluster barrier hazards: %ld; negative control (every full barrier publishing): %ld hazards in %ld runs\n",
           fence_miss, fence_rows, hazards, relaxed_hazards, relaxed_runs);
    const bool blind = relaxed_runs > 0 && relaxed_hazards == 0;
    if (blind) printf("negative control failed: the barrier check saw no hazard with every barrier publishing\n");
    printf("top-k rows (k <= threads per CTA, bin and legacy routes): %d gathered, %d radix after the candidate route gave up; "
           "top-p rows (bin route): %d over bins, %d radix after a list overflowed\n",
           g_routes[1].load(), g_routes[0].load(), g_routes[2].load(), g_routes[3].load());
    const bool blunt = leak_rows > 0 && leak_differs == 0;
    if (blunt) printf("negative control failed: the invariance comparison saw no leak\n");
    const bool unused_route = g_routes[1] == 0 || g_routes[2] == 0;  // the candidate routes must have run
    if (unused_route) printf("a candidate route never ran\n");
    return exact_miss != 0 || f64_rand_miss != 0 || argmax_miss != 0 || inv_miss != 0 || route_miss != 0 || blunt ||
           unused_route || fence_miss != 0 || hazards != 0 || blind;
}

// cuda_sample_cluster.cu — seeded sampling on the device: one thread-block
// cluster of 8 or 16 CTAs per row, every mass an exact integer.
//
// The contract (strata.h; docs/cuda_backend.md, "sample"), with m = the
// largest non-NaN logit and T > 0:
//   w_i = 1 if l_i == m else min(1, expf((l_i − m) / T))  (division rounded
//         once; NaN → 0); NaN logits are never kept;
//   q_i = floor(w_i · 2^40), the token's integer mass (w_i in [0, 1], so a
//         row of fewer than 2^24 ids sums to less than 2^64: exact in any
//         order, which is what makes this canonical definition independent of
//         the launch shape);
//   top-k: keep l_i >= the k-th largest non-NaN logit (ties kept);
//   top-p: keep w_i >= w*, the largest weight value whose mass
//          S(w*) = Σ q_i over kept w_i >= w* reaches ceil(top_p · Q) (at least
//          1), Q the mass top-k kept; top_p <= 0 keeps the ties of the max;
//   min-p: keep w_i >= min(min_p, 1);
//   draw:  u = strata_random_uniform(seed, position) = u24 · 2^-24,
//          D = floor(u24 · K / 2^24) with K the kept mass; the token is the
//          first kept id (ascending) whose running mass exceeds D.
// T <= 0 (or NaN) is greedy: the argmax (lowest id of the largest non-NaN
// logit, 0 for a row of NaNs); so is a row whose largest logit is −inf.
// A token lighter than 2^-40 of the max has mass 0 and is never drawn (it
// would be drawn with probability below 2^-40 / K anyway).
//
// Why it is fast and still exact. Masses are integers, so every sum, prefix
// and histogram may be formed in any order: a row is split into C
// contiguous slices (one per CTA of a cluster, held in shared memory), CTAs
// publish per-slice results in their shared memory and read the others'
// through distributed shared memory (cluster_map), and all of them compute
// the same cluster-wide values. The k-th largest logit and w* are both "the
// largest key whose mass at or above it reaches a target" (count for top-k,
// q for top-p). The bin routes (topk_bins, topp_bins) find the one bin of a
// monotone key that holds it with one histogram pass and a two-level pick,
// list that bin's few elements and select among them exactly (the early
// route, the default, keys top-k's bins on the logit itself, so pass 1 builds
// that histogram and the first cluster barrier publishes it); where a list
// overflows, a radix select over order-preserving keys, 8-bit digits, with
// per-CTA histograms (warp-aggregated shared atomics) summed across the
// cluster, one cluster barrier per digit (double-buffered histograms). The
// draw needs each CTA's kept mass and, in the CTA that holds D, each thread's
// chunk mass, an exclusive scan and one short sequential walk. Nothing
// depends on the number of rows, the grid or the SM count: a row's token is a
// function of its logits and parameters only.
#include <climits>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <type_traits>
#include <utility>
#include <vector>

#include "cuda_async.cuh"
#include "cuda_common.cuh"
#include "cuda_kernels.cuh"
#include "cuda_scratch.cuh"
#include "cuda_pdl.cuh"

// Test hook of the host emulator (libstrata/cuda_emu/test_sample.cpp): it can
// make a logit depend on another row, to prove its invariance check fails then.
#ifndef SAMPLE_LEAK
#define SAMPLE_LEAK(args, row, id, value) (value)
#endif
// Test hook: counts which top-k route a row took (1 gathered, 0 radix).
#ifndef SAMPLE_ROUTE
#define SAMPLE_ROUTE(gathered)
#endif
// Bench hook: bench/gpu_sample_alone.cu's phase timeline (one CTA's clock at
// numbered points of the row, SAMPLE_PHASES builds); nothing elsewhere.
#ifndef SAMPLE_PHASE
#define SAMPLE_PHASE(n)
#endif

namespace strata {
namespace cuda {
namespace {

using u64 = unsigned long long;

// The launch shape. Tokens do not depend on it (integer masses), so the host
// emulator may run a smaller one (SAMPLE_CTAS, SAMPLE_THREADS) much faster.
#ifndef SAMPLE_CTAS
#define SAMPLE_CTAS 8
#define SAMPLE_THREADS 256
#endif
// CTAs per row (one cluster): kCtas (8, the portable cluster size), fewer
// (down to kCtasFewest) when more rows than fit at once at kCtas would
// otherwise run in a second wave (launch_sample), or
// kCtasWide for rows of more than kWideFrom ids where the device can schedule
// it (less shared memory per CTA, so more such rows fit at once).
constexpr int kCtas = SAMPLE_CTAS, kCtasWide = 2 * SAMPLE_CTAS, kCtasFewest = SAMPLE_CTAS > 3 ? SAMPLE_CTAS - 3 : 1;
constexpr int64_t kWideFrom = 65536;
constexpr int kCandCap = 128;     // top-k candidates a CTA may publish (the gathered route)
constexpr int kGatherCap = 1536;  // candidates of a whole cluster (the gathered route)
constexpr int kThreads = SAMPLE_THREADS;  // threads per CTA
constexpr int kWarps = kThreads / 32;
constexpr int kBins = 256;        // radix digits of 8 bits
constexpr int kBinsPer = kBins / kThreads;  // bins per thread in the digit search (1 on the device)
static_assert(kBins % kThreads == 0, "each thread takes whole bins");
constexpr uint32_t kNoBin = 0xffffffffu;
// The bin routes (bin_select): 41 coarse bins of 32 fine bins each over a key
// that orders like the selected quantity (the weight for top-p, the logit for
// top-k), 1,281 of them used; see wkey and dkey.
constexpr int kFinePer = 32, kCoarse = 41, kFine = kCoarse * kFinePer;
constexpr uint32_t kTopKey = 1280;  // the largest key: w = 1, or a logit within 2^-10 of the max
constexpr int kPool = kGatherCap;  // u64 words (kGatherCap floats and as many ids): the gathered list, or the fine and coarse histograms
static_assert(kFine + kCoarse <= kPool, "both histograms fit the pool");
// Which top-k / top-p machinery a launch uses (STRATA_SAMPLE_ROUTE; same tokens):
// the bin routes, the routes before them (top-k over thread-maxima candidates,
// top-p by radix), or radix selects only.
// kRouteEarly is kRouteBins with top-k's histogram keyed on the logit itself
// (lkey) and built in pass 1, one cluster barrier and one pass fewer.
enum SampleRoute : int { kRouteBins = 0, kRouteLegacy = 1, kRouteRadix = 2, kRouteEarly = 3 };
// The form of the cluster barriers that only publish this CTA's new shared
// words (publish_barrier; STRATA_SAMPLE_FENCE; same tokens): the full barrier
// (release arrive: MEMBAR.ALL.GPU), or cluster_sync_publish (a release fence
// restricted to the CTA's own shared memory: MEMBAR.ALL.CTA).
enum SampleFence : int { kFenceMembar = 0, kFenceCluster = 1 };
// SAMPLE_ROUTE kinds (test counts): which machinery decided a row.
enum RouteKind : int { kTopkRadixAfterOverflow = 0, kTopkGathered = 1, kToppBins = 2, kToppRadixAfterOverflow = 3 };
constexpr float kMassScale = 1099511627776.0f;  // 2^40
constexpr int64_t kMaxVocab = (int64_t)1 << 24;  // masses below 2^64

struct Best {
    float v;
    int32_t i;  // INT32_MAX: nothing seen
};

__device__ __forceinline__ Best better(Best a, Best b) { return (b.v > a.v || (b.v == a.v && b.i < a.i)) ? b : a; }

// The head of a CTA's dynamic shared memory; its slice of the row follows.
struct alignas(16) ClusterShared {
    u64 chunk[kThreads];   // each thread's mass over its chunk (the draw); before that, tmax()
    u64 stage[kWarps][32]; // a warp's masses while each bin's leader lane adds them; bin_select's sums
    u64 wtot[kWarps];      // block scan: warp totals
    Best wbest[kWarps];
    int wcount[kWarps];
    // Published to the cluster: each written once per row.
    Best best;
    int n_ok;
    u64 mass_w, mass_d, mass_r;  // this CTA's mass: all kept weights, w >= min-p, w >= w_min (radix top-p)
    u64 above_own;               // the bin top-p route: this CTA's mass in the bins above the boundary bin
    // Broadcast within the CTA.
    u64 above;
    uint32_t digit;
    uint32_t sel_bin;  // bin_select: the chosen coarse, then fine bin, and the mass above it
    u64 sel_above;
    u64 cta_kept[32];  // the bin top-p route: each CTA's mass at w >= w*
    // The gathered routes (topk_gathered, topk_bins, topp_bins).
    float bound, kth;
    int n_cand;            // published: this CTA's candidate count
    int gcount[32];        // the cluster's candidate counts
    uint32_t wstar;
    int32_t token;
    float cand_v[kCandCap];  // published: this CTA's candidates and their ids
    int32_t cand_i[kCandCap];
    // The whole cluster's candidates (gv: logits, then weights; gi: ids) once
    // gathered (gather_lists may put them elsewhere in the pool, beside the
    // histogram words other CTAs read); before that, the bin routes'
    // histograms of this CTA (published).
    u64 pool[kPool];
    __device__ __forceinline__ float* gv() { return reinterpret_cast<float*>(pool); }
    __device__ __forceinline__ int32_t* gi() { return reinterpret_cast<int32_t*>(pool) + kGatherCap; }
    __device__ __forceinline__ u64* fine() { return pool; }
    __device__ __forceinline__ u64* coarse() { return pool + kFine; }
    // The radix select's digit histograms (double-buffered; read by the whole
    // cluster) share the pool: cluster_select zeroes its first buffer on entry,
    // and a cluster barrier separates every other use of the pool from its
    // remote reads (see its callers). Kept out of the head so that a 152k row's
    // 16 CTAs fit four to an SM (docs/cuda_backend.md, "sample").
    __device__ __forceinline__ u64* hist(int parity) { return pool + (parity & 1) * kBins; }
    // Each thread's largest logit in pass 1 (−inf: none), for the legacy top-k
    // bound; read before the weights pass first writes chunk.
    __device__ __forceinline__ float* tmax() { return reinterpret_cast<float*>(chunk); }
};
static_assert(2 * kBins <= kPool, "the digit histograms fit the pool");

__device__ __forceinline__ u64 mass_of(float w) { return (u64)(w * kMassScale); }  // w in [0, 1]

// A cluster barrier after which other CTAs read words this CTA wrote to its
// own shared memory, at a point where no remote read this CTA made since its
// last full barrier touches a word that is written again (or freed) before
// the next full barrier (cluster_sync_publish's condition; the callers say
// why it holds; the emulator's cluster_check.h checks it on every row).
// Every other cluster barrier of the kernel is a full one.
__device__ __forceinline__ void publish_barrier(int fence) {
    if (fence == kFenceCluster)
        cluster_sync_publish();
    else
        cluster_sync();
}

// Order-preserving key of a non-NaN float (−0 and +0 share a key).
__device__ __forceinline__ uint32_t order_key(float f) {
    uint32_t b = __float_as_uint(f);
    if (b == 0x80000000u) b = 0;
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
__device__ __forceinline__ float key_value(uint32_t k) {
    return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

// By selects, no branch: better() keeps b for a NaN l (both its compares are false).
__device__ __forceinline__ void consider(Best& b, int& ok, float l, int64_t i) {
    b = better(b, Best{l, (int32_t)i});
    ok += l == l;
}

struct RowRule {
    float m, T;
    bool use_k;
    float thr_l;  // top-k logit threshold
    // w_i for a token top-k keeps, −1 for one it drops or a NaN logit.
    // Selects, not branches: the weights pass runs it on every logit of the
    // row, and as early returns it compiled to ~54 instructions a logit, a
    // third of them branch and reconvergence bookkeeping (ncu, 2026-12-06:
    // bench/RESULTS.md). Every lane computes
    // expf; the selects give the same value as the early-return form for
    // every input (a dropped or NaN logit −1, the max 1, NaN from inf/inf 0).
    // kMayCut = false: the caller knows use_k is false (the weights pass's
    // usual case), and the top-k compares drop out of the loop.
    template <bool kMayCut = true>
    __device__ __forceinline__ float kept_weight(float l) const {
        const bool drop = !(l == l) || (kMayCut && use_k && !(l >= thr_l));
        float w = expf(__fdiv_rn(__fsub_rn(l, m), T));
        w = w == w ? fminf(w, 1.0f) : 0.0f;  // NaN only from inf/inf
        w = l == m ? 1.0f : w;
        return drop ? -1.0f : w;
    }
};

// ceil(p · q) for 0 < p < 1 (p = mant · 2^-s exactly), at least 1; 1 for p <= 0.
__device__ __forceinline__ u64 top_p_target(float p, u64 q) {
    if (!(p > 0.0f)) return 1;
    const uint32_t bits = __float_as_uint(p), e = (bits >> 23) & 0xffu;
    const uint32_t mant = e ? ((bits & 0x7fffffu) | 0x800000u) : (bits & 0x7fffffu);
    const int s = 150 - (int)(e ? e : 1);  // >= 24 for p < 1
    const unsigned __int128 prod = (unsigned __int128)mant * q;
    u64 t;
    if (s >= 128) {
        t = prod != 0 ? 1 : 0;
    } else {
        const unsigned __int128 one = 1;
        t = (u64)(prod >> s) + (((prod & ((one << s) - one)) != 0) ? 1 : 0);
    }
    return t > 0 ? t : 1;
}

__device__ __forceinline__ uint64_t splitmix64(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// strata_random_uniform's 24 bits (rng.h): u = u24 · 2^-24.
__device__ __forceinline__ uint32_t random_u24(uint64_t seed, int64_t position) {
    return (uint32_t)(splitmix64(seed ^ splitmix64((uint64_t)position)) >> 40);
}

#include "cuda_sample_select.cuh"  // the select routines (inside this namespace: they use ClusterShared)

// The draw inside the CTA whose slice holds D (t: D less the kept mass of the
// slices before it): each thread's chunk mass over w >= w_min (sm.chunk where
// chunk_holds: w_min is 0, or topp_bins formed it), a block scan, and the one
// thread whose chunk holds t walks it to the first kept id whose running mass
// exceeds t.
__device__ __forceinline__ void draw_in_slice(ClusterShared& sm, const float* s, int len, int ch, int64_t s0,
                                              float w_min, bool chunk_holds, u64 t, int32_t* out) {
    const int tid = threadIdx.x;
    u64 mine = sm.chunk[tid];
    if (!chunk_holds) {
        mine = 0;
        for (int j = 0; j < ch; ++j) {
            const int e = tid * ch + j;
            if (e < len) {
                const float w = s[e];
                if (w >= w_min) mine += mass_of(w);
            }
        }
    }
    u64 unused = 0;
    const u64 incl = block_scan(mine, sm, &unused);
    u64 run = incl - mine;
    if (run <= t && t < incl) {  // exactly one thread
        for (int j = 0; j < ch; ++j) {
            const int e = tid * ch + j;
            const float w = e < len ? s[e] : -1.0f;
            if (!(w >= w_min)) continue;
            run += mass_of(w);
            if (run > t) {
                *out = (int32_t)(s0 + e);
                break;
            }
        }
    }
}

// Pass 1 for one thread: copies its share of the slice (16-byte loads when
// the row allows) into shared memory, with its argmax and non-NaN count;
// kHist also counts each logit in the CTA's fine histogram by lkey.
template <bool kHist>
__device__ __forceinline__ void load_slice(ClusterShared& sm, const SampleArgs& a, const float* g, float* s, int len,
                                           int64_t row, int64_t s0, Best& b, int& ok) {
    const int tid = threadIdx.x;
    auto take = [&](float l, int64_t id) {
        consider(b, ok, l, id);
        if (kHist) {
            const uint32_t key = lkey(l);  // kNoBin for l <= -2^11 (not counted)
            count_add(sm.fine(), l == l ? key : kNoBin);
        }
    };
    int i = tid;
    if (reinterpret_cast<uintptr_t>(g) % 16 == 0) {
        const int n4 = len / 4;
        const float4* v = reinterpret_cast<const float4*>(g);
        float4* s4 = reinterpret_cast<float4*>(s);
        int q = tid;
        for (; q + 3 * kThreads < n4; q += 4 * kThreads) {
            float4 x[4];
#pragma unroll
            for (int u = 0; u < 4; ++u) x[u] = v[q + u * kThreads];
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                const int e = 4 * (q + u * kThreads);
                x[u].x = SAMPLE_LEAK(a, row, s0 + e, x[u].x);
                x[u].y = SAMPLE_LEAK(a, row, s0 + e + 1, x[u].y);
                x[u].z = SAMPLE_LEAK(a, row, s0 + e + 2, x[u].z);
                x[u].w = SAMPLE_LEAK(a, row, s0 + e + 3, x[u].w);
                s4[q + u * kThreads] = x[u];
                take(x[u].x, s0 + e);
                take(x[u].y, s0 + e + 1);
                take(x[u].z, s0 + e + 2);
                take(x[u].w, s0 + e + 3);
            }
        }
        for (; q < n4; q += kThreads) {
            float4 x = v[q];
            const int e = 4 * q;
            x.x = SAMPLE_LEAK(a, row, s0 + e, x.x);
            x.y = SAMPLE_LEAK(a, row, s0 + e + 1, x.y);
            x.z = SAMPLE_LEAK(a, row, s0 + e + 2, x.z);
            x.w = SAMPLE_LEAK(a, row, s0 + e + 3, x.w);
            s4[q] = x;
            take(x.x, s0 + e);
            take(x.y, s0 + e + 1);
            take(x.z, s0 + e + 2);
            take(x.w, s0 + e + 3);
        }
        i = 4 * n4 + tid;
    }
    for (; i < len; i += kThreads) {
        const float l = SAMPLE_LEAK(a, row, s0 + i, g[i]);
        s[i] = l;
        take(l, s0 + i);
    }
}

// The weights pass over one thread's n ids of the slice: each weight in place;
// without kHist its mass into the thread's sum (mine), with kHist (top-p rows)
// into the split mass histogram instead (the CTA's sum then comes from the
// histogram: fold_coarse_masses); with kMinP also the masses at or above mp
// (mine_p). kCut: use_k may drop tokens (the top-k fallback). Each case its
// own loop: the common ones (no min-p, no top-k cut) carry none of the others'
// compares, selects or 64-bit adds.
template <bool kHist, bool kMinP, bool kCut>
__device__ __forceinline__ void weights_pass(const RowRule& rule, float* w_of, int n, float mp, u64* fine, u64& mine,
                                             u64& mine_p) {
    for (int j = 0; j < n; ++j) {
        const float w = rule.kept_weight<kCut>(w_of[j]);
        w_of[j] = w;
        if (kHist) mass_hist_add(fine, w);  // split form: fold_coarse_masses
        if (!kHist || kMinP) {
            const u64 q = mass_of(fmaxf(w, 0.0f));
            if (!kHist) mine += q;
            if (kMinP) mine_p += w >= mp ? q : 0;
        }
    }
}

// weights_pass with its cases picked at run time (each uniform over the CTA).
__device__ __forceinline__ void weights_pass_for(bool hist, const RowRule& rule, float* w_of, int n, float mp,
                                                 u64* fine, u64& mine, u64& mine_p) {
    const bool minp = mp > 0.0f, cut = rule.use_k;
    if (hist) {
        if (cut) weights_pass<true, true, true>(rule, w_of, n, mp, fine, mine, mine_p);
        else if (minp) weights_pass<true, true, false>(rule, w_of, n, mp, fine, mine, mine_p);
        else weights_pass<true, false, false>(rule, w_of, n, mp, fine, mine, mine_p);
    } else {
        if (cut) weights_pass<false, true, true>(rule, w_of, n, mp, fine, mine, mine_p);
        else if (minp) weights_pass<false, true, false>(rule, w_of, n, mp, fine, mine, mine_p);
        else weights_pass<false, false, false>(rule, w_of, n, mp, fine, mine, mine_p);
    }
}

// Ids per CTA slice: a multiple of 4 (16-byte loads when the row allows).
__host__ __device__ __forceinline__ int64_t sample_slice(int64_t n, int c) { return ((n + c - 1) / c + 3) / 4 * 4; }

// Grid: C CTAs (one cluster) per row. Dynamic shared memory:
// ClusterShared, then `slice` floats.
template <int C>
__global__ void __launch_bounds__(kThreads, 4) sample_cluster_kernel(const SampleArgs a, int64_t slice, int route,
                                                                       int fence) {
    pdl_wait();  // first: see cuda_pdl.cuh
    pdl_launch_dependents();
    SAMPLE_PHASE(0);
    ClusterShared& sm = *dynamic_smem<ClusterShared>();
    float* const s = reinterpret_cast<float*>(&sm + 1);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int rank = (int)(blockIdx.x % C);  // the CTA's rank in its (1-D) cluster
    const int64_t row = blockIdx.x / C, n = a.n_vocab;
    const int64_t s0 = (int64_t)rank * slice < n ? (int64_t)rank * slice : n;
    const int len = (int)((s0 + slice < n ? s0 + slice : n) - s0);
    const int ch = ((len + kThreads - 1) / kThreads) | 1;  // odd: a warp's chunk starts hit 32 banks
    const float* const g = a.logits + row * n + s0;
    const strata_sampling_params prm = a.params[row];

    // The early route builds top-k's logit histogram in pass 1 (lkey needs no
    // max), so the first cluster barrier publishes it with the maxima.
    const bool early_k = route == kRouteEarly && prm.temperature > 0.0f && prm.top_k > 0 && prm.top_k <= kThreads;
    if (early_k) {
        for (int d = tid; d < kFine; d += kThreads) sm.fine()[d] = 0;
        __syncthreads();
    }
    // Pass 1: the slice into shared memory; its argmax and non-NaN count.
    Best b{__int_as_float(0xff800000), INT32_MAX};
    int ok = 0;
    if (early_k)
        load_slice<true>(sm, a, g, s, len, row, s0, b, ok);
    else
        load_slice<false>(sm, a, g, s, len, row, s0, b, ok);
    sm.tmax()[tid] = b.v;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        Best o;
        o.v = __shfl_xor_sync(kFullMask, b.v, off);
        o.i = __shfl_xor_sync(kFullMask, b.i, off);
        b = better(b, o);
        ok += __shfl_xor_sync(kFullMask, ok, off);
    }
    if (lane == 0) {
        sm.wbest[warp] = b;
        sm.wcount[warp] = ok;
    }
    __syncthreads();
    if (tid == 0) {
        Best cb = sm.wbest[0];
        int cn = sm.wcount[0];
        for (int w = 1; w < kWarps; ++w) {
            cb = better(cb, sm.wbest[w]);
            cn += sm.wcount[w];
        }
        sm.best = cb;
        sm.n_ok = cn;
    }
    if (early_k) fold_coarse(sm);  // after the barrier above: the fine histogram is complete
    SAMPLE_PHASE(1);
    // Publishes best and n_ok (and the early route's histograms); no remote read came before it.
    publish_barrier(fence);
    Best best{__int_as_float(0xff800000), INT32_MAX};
    int64_t n_ok = 0;
    for (int c = 0; c < C; ++c) {  // a selection under a total order and an integer sum: any order
        best = better(best, cluster_map(&sm.best, c)[0]);  // a word at a time: the emulator logs each read
        n_ok += cluster_map(&sm.n_ok, c)[0];
    }
    SAMPLE_PHASE(2);
    // Greedy for T <= 0 (or NaN) and for rows without a finite-or-+inf maximum.
    // Every branch below is uniform over the cluster (all CTAs computed the same values).
    if (best.i == INT32_MAX || best.v == __int_as_float(0xff800000) || !(prm.temperature > 0.0f)) {
        if (rank == 0 && tid == 0) a.out_ids[row] = best.i == INT32_MAX ? 0 : best.i;
        cluster_sync();  // no CTA leaves while another reads its shared memory
        return;
    }
    int ph = 0;
    RowRule rule;
    rule.m = best.v;
    rule.T = prm.temperature;
    rule.use_k = prm.top_k > 0 && (int64_t)prm.top_k < n_ok;
    rule.thr_l = 0.0f;
    if (rule.use_k && prm.top_k <= kThreads && route != kRouteRadix &&
        (route == kRouteLegacy  ? topk_gathered<C>(sm, s, len, ch, s0, row, rank, prm, rule, a.out_ids, fence)
         : route == kRouteEarly ? topk_early<C>(sm, s, len, ch, s0, row, rank, prm, rule, a.out_ids, fence)
                                : topk_bins<C>(sm, s, len, ch, s0, row, rank, prm, rule, a.out_ids, fence)))
        return;
    if (rule.use_k) {
        const uint32_t key = cluster_select<C, true>(sm, s, len, ch, (u64)prm.top_k, ph,
                                                  [](float l, uint32_t* k, u64* m) {
                                                      *k = order_key(l);
                                                      *m = 1;
                                                      return l == l;
                                                  });
        rule.thr_l = key_value(key);
        cluster_sync();  // the last digit's remote reads of the pool are done before the top-p histogram reuses it
    }

    // The weights, in place; each thread's chunk mass; the CTA's mass over all
    // kept weights and over w >= min-p; for the bin top-p route, the CTA's
    // histogram of masses by wkey.
    const bool bins_p = (route == kRouteBins || route == kRouteEarly) && prm.top_p < 1.0f;
    const float mp = prm.min_p > 0.0f ? fminf(prm.min_p, 1.0f) : 0.0f;
    u64* const fine = sm.fine();
    if (bins_p) {  // no CTA reads this CTA's pool any more (a cluster barrier passed since)
        for (int d = tid; d < kFine; d += kThreads) fine[d] = 0;
        __syncthreads();
    }
    u64 mine = 0, mine_p = 0;
    // This thread's ids of the slice: whole chunks but the last (no bound
    // check per id), and the masses by selects (a dropped token's w = −1
    // has mass 0 and is below min-p): ~9 % faster for T and min-p rows.
    // Top-p rows (bins_p, uniform over the cluster) add every weight to the
    // mass histogram instead of the thread's sum, by mass_hist_add: no branch
    // either (massless weights go to spare words), so they take the selects
    // form as well.
    const int own_n = len - tid * ch < ch ? (len - tid * ch > 0 ? len - tid * ch : 0) : ch;
    float* const chunk_w = s + tid * ch;
    weights_pass_for(bins_p, rule, chunk_w, own_n, mp, fine, mine, mine_p);
    u64 cta_mass = 0;
    if (mp > 0.0f) {  // its barriers also complete the histogram
        (void)block_scan(mine_p, sm, &cta_mass);
        if (tid == 0) sm.mass_d = cta_mass;
    }
    if (bins_p) {
        // No chunk masses: a top-p row's draw reads sm.chunk only once
        // topp_bins rewrote it (chunk_kept), and recounts otherwise (w_min > 0).
        // The CTA's mass is its histogram's (every weight's q went to one
        // bin or, q = 0, to a spare word): the same integer as the sum of the q.
        if (!(mp > 0.0f)) __syncthreads();  // the histogram complete
        const u64 part = fold_coarse_masses(sm);  // the split histogram back to u64 masses, then folded
        if ((tid & 31) == 0) sm.wtot[tid >> 5] = part;  // block_scan's last barrier closed its reads of wtot
        __syncthreads();
        if (tid == 0) {
            u64 t = 0;
            for (int w = 0; w < kWarps; ++w) t += sm.wtot[w];
            sm.mass_w = t;
        }
    } else {
        sm.chunk[tid] = mine;
        (void)block_scan(mine, sm, &cta_mass);
        if (tid == 0) sm.mass_w = cta_mass;
    }
    SAMPLE_PHASE(8);
    // Publishes mass_w, mass_d and the top-p histograms. The remote reads since
    // the last full barrier (best and n_ok above, each written once per row)
    // touch no word written again; the next full barrier (topp_bins' gather,
    // the radix digits or the exit) comes before any CTA leaves.
    publish_barrier(fence);
    SAMPLE_PHASE(9);
    u64 total = 0;  // Q: the cluster's kept mass
    for (int c = 0; c < C; ++c) total += cluster_map(&sm.mass_w, c)[0];

    // w_min, and where each CTA's kept mass at w >= w_min comes from.
    enum { kMassAll, kMassMinP, kMassBins, kMassRecount } from = kMassAll;
    float w_min = 0.0f;
    if (prm.top_p < 1.0f) {
        const u64 target = top_p_target(prm.top_p, total);
        if (bins_p && topp_bins<C>(sm, s, len, ch, s0, rank, target, fence, route == kRouteEarly, &w_min)) {
            from = kMassBins;
        } else {
            const uint32_t key = cluster_select<C, false>(sm, s, len, ch, target, ph,
                                                       [](float w, uint32_t* k, u64* m) {
                                                           *k = __float_as_uint(w);
                                                           *m = w >= 0.0f ? mass_of(w) : 0;
                                                           return *m != 0;  // massless weights change no sum
                                                       });
            w_min = __uint_as_float(key);
            from = kMassRecount;
        }
    }
    if (mp > w_min) {  // w_min = max(w*, min(min_p, 1))
        w_min = mp;
        from = kMassMinP;
    }
    if (from == kMassRecount) {  // the kept masses again, over w >= w*
        u64 r = 0;
        for (int j = 0; j < ch; ++j) {
            const int e = tid * ch + j;
            if (e < len) {
                const float w = s[e];
                if (w >= w_min) r += mass_of(w);
            }
        }
        (void)block_scan(r, sm, &cta_mass);
        if (tid == 0) sm.mass_r = cta_mass;
        cluster_sync();
    }
    const u64* const published = from == kMassMinP ? &sm.mass_d : from == kMassRecount ? &sm.mass_r : &sm.mass_w;
    u64 before = 0, own = 0;
    total = 0;
    for (int c = 0; c < C; ++c) {
        const u64 m = from == kMassBins ? sm.cta_kept[c] : cluster_map(published, c)[0];
        total += m;
        if (c < rank) before += m;
        if (c == rank) own = m;
    }
    // The draw: D = floor(u24 · total / 2^24) < total (total >= 2^40: the max weight is always kept).
    const u64 target = (u64)(((unsigned __int128)random_u24(prm.seed, prm.position) * total) >> 24);
    SAMPLE_PHASE(10);
    cluster_arrive();  // every remote read is done: a CTA may leave once all have arrived
    if (before <= target && target < before + own)  // CTA-uniform
        draw_in_slice(sm, s, len, ch, s0, w_min,
                      w_min == 0.0f || (from == kMassBins && route == kRouteEarly),  // sm.chunk is the kept mass
                      target - before, &a.out_ids[row]);
    SAMPLE_PHASE(11);
    cluster_wait();
}

}  // namespace

// ------------------------------------------------------------------ host (not in the emulator)

namespace {

// Calls f(std::integral_constant<int, c>{}) for a cluster size c in
// kCtasFewest .. kCtas (the kernels launch_sample may pick for a row of at
// most kWideFrom ids) and returns what it returns.
template <class F>
auto with_ctas(int c, F f) {
    static_assert(kCtas - kCtasFewest == 3, "one case a size");
    switch (c) {
        case kCtas - 1: return f(std::integral_constant<int, kCtas - 1>{});
        case kCtas - 2: return f(std::integral_constant<int, kCtas - 2>{});
        case kCtas - 3: return f(std::integral_constant<int, kCtas - 3>{});
        default: return f(std::integral_constant<int, kCtas>{});
    }
}

// Per device, once: raises every kernel's dynamic shared memory limit to the
// opt-in maximum (returned) and allows the wide kernel's non-portable cluster
// size (*wide_ok: whether the device accepted it). Function attributes, not
// stream work: relaxed capture mode around them keeps a first call during
// graph recording harmless (as in cuda_attention.cu).
int64_t sample_cluster_setup(bool* wide_ok) {
    constexpr int kMaxDevices = 64;
    static std::mutex mu;
    static int limit[kMaxDevices] = {};
    static bool wide[kMaxDevices] = {};
    int dev = 0;
    check(cudaGetDevice(&dev), "cudaGetDevice");
    std::lock_guard<std::mutex> lock(mu);
    if (dev >= 0 && dev < kMaxDevices && limit[dev] > 0) {
        *wide_ok = wide[dev];
        return limit[dev];
    }
    int optin = 0;
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    (void)cudaThreadExchangeStreamCaptureMode(&mode);
    cudaError_t err = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    if (err == cudaSuccess)
        err = cudaFuncSetAttribute(sample_cluster_kernel<kCtas>, cudaFuncAttributeMaxDynamicSharedMemorySize, optin);
    if (err == cudaSuccess)
        err = cudaFuncSetAttribute(sample_cluster_kernel<kCtasWide>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   optin);
    for (int c = kCtas - 1; c >= kCtasFewest && err == cudaSuccess; --c)
        err = with_ctas(c, [&](auto k) {
            return cudaFuncSetAttribute(sample_cluster_kernel<decltype(k)::value>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, optin);
        });
    bool w = false;
    if (err == cudaSuccess) {
        w = cudaFuncSetAttribute(sample_cluster_kernel<kCtasWide>, cudaFuncAttributeNonPortableClusterSizeAllowed,
                                 1) == cudaSuccess;
        (void)cudaGetLastError();  // a refusal only means 8-CTA clusters
    }
    (void)cudaThreadExchangeStreamCaptureMode(&mode);
    check(err, "cudaFuncSetAttribute (sample shared memory)");
    if (dev >= 0 && dev < kMaxDevices) {
        limit[dev] = optin;
        wide[dev] = w;
    }
    *wide_ok = w;
    return optin;
}

template <int C>
cudaLaunchConfig_t sample_config(const SampleArgs& a, cudaStream_t stream, size_t smem, cudaLaunchAttribute* attr) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)(a.n_rows * C));
    cfg.blockDim = dim3(kThreads);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = C;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;  // the cluster shape; launch_c adds PDL
    return cfg;
}

// How many C-CTA clusters with `smem` bytes per CTA can be resident on the
// device at once (0: none; asked once per device, C and size and kept; a
// host query, not stream work).
template <int C>
int resident_clusters(size_t smem) {
    static std::mutex mu;
    static std::vector<std::pair<std::pair<int, size_t>, int>> known;  // (device, smem) -> clusters
    int dev = 0;
    check(cudaGetDevice(&dev), "cudaGetDevice");
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& k : known)
        if (k.first.first == dev && k.first.second == smem) return k.second;
    SampleArgs probe{};
    probe.n_rows = 1;
    cudaLaunchAttribute attr[2];
    cudaLaunchConfig_t cfg = sample_config<C>(probe, nullptr, smem, attr);
    int clusters = 0;
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;  // harmless during graph recording
    (void)cudaThreadExchangeStreamCaptureMode(&mode);
    if (cudaOccupancyMaxActiveClusters(&clusters, sample_cluster_kernel<C>, &cfg) != cudaSuccess) clusters = 0;
    (void)cudaGetLastError();
    (void)cudaThreadExchangeStreamCaptureMode(&mode);
    known.push_back({{dev, smem}, clusters});
    return clusters;
}

template <int C>
void launch_c(const SampleArgs& a, cudaStream_t stream, int64_t slice, size_t smem, int route, int fence) {
    cudaLaunchAttribute attr[2];
    cudaLaunchConfig_t cfg = sample_config<C>(a, stream, smem, attr);
    cfg.numAttrs = pdl_add_attr(attr, 1);  // programmatic launch: cuda_pdl.cuh
    check(cudaLaunchKernelEx(&cfg, sample_cluster_kernel<C>, a, slice, route, fence), "sample launch");
}

// STRATA_SAMPLE_ROUTE: "early" (or unset, empty), "bins", "legacy" or
// "radix"; the same tokens for each (strata/env.py).
int sample_env_route() {
    const char* env = std::getenv("STRATA_SAMPLE_ROUTE");  // read per call: tests switch it within a process
    if (!env || !*env || std::strcmp(env, "early") == 0) return kRouteEarly;
    if (std::strcmp(env, "bins") == 0) return kRouteBins;
    if (std::strcmp(env, "legacy") == 0) return kRouteLegacy;
    if (std::strcmp(env, "radix") == 0) return kRouteRadix;
    fail(STRATA_ERR_INVALID_ARGUMENT, std::string("STRATA_SAMPLE_ROUTE=") + env +
                                          ": expected early (the default: the bin routes, top-k's histogram "
                                          "built in the load pass), bins (top-k's histogram in a pass of its "
                                          "own), legacy (top-k over thread-maxima candidates, radix top-p) or "
                                          "radix (radix selects only)");
}

// STRATA_SAMPLE_FENCE: "cluster" (or unset, empty) or "membar"; the same
// tokens for each (strata/env.py).
int sample_env_fence() {
    const char* env = std::getenv("STRATA_SAMPLE_FENCE");  // read per call: tests switch it within a process
    if (!env || !*env || std::strcmp(env, "cluster") == 0) return kFenceCluster;
    if (std::strcmp(env, "membar") == 0) return kFenceMembar;
    fail(STRATA_ERR_INVALID_ARGUMENT, std::string("STRATA_SAMPLE_FENCE=") + env +
                                          ": expected cluster (the default: the barriers that only publish "
                                          "shared memory fence it alone) or membar (every cluster barrier a "
                                          "full release, MEMBAR.ALL.GPU)");
}

// Ids a CTA holds, and its dynamic shared memory, at C CTAs a row.
int64_t slice_at(const SampleArgs& a, int c) { return sample_slice(a.n_vocab, c); }
size_t smem_at(const SampleArgs& a, int c) { return sizeof(ClusterShared) + (size_t)slice_at(a, c) * sizeof(float); }

// The CTAs a row (the cluster size) launch_sample uses for these rows. Tokens
// do not depend on it (the file comment): it is the faster one. Rows of more
// than kWideFrom ids take kCtasWide where the device schedules it. Others
// take the size in kCtasFewest .. kCtas with the fewest waves (rows over the
// clusters resident at once), the largest among equals: on an H100 62
// clusters of 8 fit at once (the register file holds 4 CTAs an SM, and a
// cluster stays within a GPC), so 64 rows ran two more in a second wave and
// took a third longer than 60 (top-p 31 → 42 µs), while 7-CTA clusters hold
// 69 rows (bench/RESULTS.md, 2026-12-06 fourth session).
#define STRATA_SAMPLE_CTAS_CHOICE 1  // bench/gpu_sample_alone.cu prints the choice where this is defined
int sample_ctas(const SampleArgs& a) {
    bool wide_ok = false;
    const int64_t limit = sample_cluster_setup(&wide_ok);
    auto fits = [&](int c) { return (int64_t)smem_at(a, c) <= limit && slice_at(a, c) <= kMaxSplitSlice; };
    if (a.n_vocab > kWideFrom && wide_ok && fits(kCtasWide) && resident_clusters<kCtasWide>(smem_at(a, kCtasWide)) >= 1)
        return kCtasWide;
    if (!fits(kCtas))  // the split mass histogram's bound too (mass_hist_add)
        fail(STRATA_ERR_INVALID_ARGUMENT, "sample: n_vocab " + std::to_string(a.n_vocab) +
                                              " does not fit the sampler's shared memory (" + std::to_string(kCtas) +
                                              " slices)");
    if (a.n_vocab > kWideFrom) return kCtas;
    int best = kCtas;
    int64_t best_waves = INT64_MAX;
    for (int c = kCtas; c >= kCtasFewest; --c) {
        if (!fits(c)) continue;
        const int64_t at_once =
            with_ctas(c, [&](auto k) { return (int64_t)resident_clusters<decltype(k)::value>(smem_at(a, c)); });
        const int64_t waves = at_once >= 1 ? (a.n_rows + at_once - 1) / at_once : INT64_MAX;
        if (waves < best_waves) {
            best_waves = waves;
            best = c;
        }
    }
    return best;
}

}  // namespace

void launch_sample(const SampleArgs& a, cudaStream_t stream, Scratch& scratch) {
    (void)scratch;  // the sampler keeps everything in shared memory
    if (a.n_rows <= 0 || a.n_vocab <= 0) return;
    if (a.n_vocab >= kMaxVocab)
        fail(STRATA_ERR_INVALID_ARGUMENT, "sample: n_vocab " + std::to_string(a.n_vocab) + " must be below 2^24");
    if (a.n_rows > (int64_t)INT_MAX / kCtasWide)
        fail(STRATA_ERR_INVALID_ARGUMENT, "sample: n_rows " + std::to_string(a.n_rows) + " too large for one launch");
    const int route = sample_env_route();
    const int fence = sample_env_fence();
    const int c = sample_ctas(a);
    if (c == kCtasWide)
        launch_c<kCtasWide>(a, stream, slice_at(a, c), smem_at(a, c), route, fence);
    else
        with_ctas(c, [&](auto k) { launch_c<decltype(k)::value>(a, stream, slice_at(a, c), smem_at(a, c), route, fence); });
    check_launch("sample");
}

}  // namespace cuda
}  // namespace strata

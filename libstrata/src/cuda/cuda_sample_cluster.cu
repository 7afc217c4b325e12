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
//   top-k: keep l_i >= the k-th largest non-NaN logit (ties kept; for
//          k <= kThreads found over candidates gathered from the cluster,
//          topk_gathered);
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
// q for top-p): a radix select over order-preserving keys, 8-bit digits, with
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
// CTAs per row (one cluster): kCtas (8, the portable cluster size), or
// kCtasWide for rows of more than kWideFrom ids where the device can schedule
// it (less shared memory per CTA, so 64 rows of 152k ids fit one wave).
constexpr int kCtas = SAMPLE_CTAS, kCtasWide = 2 * SAMPLE_CTAS;
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
enum SampleRoute : int { kRouteBins = 0, kRouteLegacy = 1, kRouteRadix = 2 };
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
    u64 hist[2][kBins];    // this CTA's digit histogram; read by the whole cluster, double-buffered
    u64 chunk[kThreads];   // each thread's mass over its chunk (the draw)
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
    float tmax[kThreads];  // each thread's largest logit in pass 1 (−inf: none)
    float bound, kth;
    int n_cand;            // published: this CTA's candidate count
    int gcount[32];        // the cluster's candidate counts
    uint32_t wstar;
    int32_t token;
    float cand_v[kCandCap];  // published: this CTA's candidates and their ids
    int32_t cand_i[kCandCap];
    // The whole cluster's candidates (gv: logits, then weights; gi: ids) once
    // gathered; before that, the bin routes' histograms of this CTA (published).
    u64 pool[kPool];
    __device__ __forceinline__ float* gv() { return reinterpret_cast<float*>(pool); }
    __device__ __forceinline__ int32_t* gi() { return reinterpret_cast<int32_t*>(pool) + kGatherCap; }
    __device__ __forceinline__ u64* fine() { return pool; }
    __device__ __forceinline__ u64* coarse() { return pool + kFine; }
};

__device__ __forceinline__ u64 mass_of(float w) { return (u64)(w * kMassScale); }  // w in [0, 1]

// Order-preserving key of a non-NaN float (−0 and +0 share a key).
__device__ __forceinline__ uint32_t order_key(float f) {
    uint32_t b = __float_as_uint(f);
    if (b == 0x80000000u) b = 0;
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
__device__ __forceinline__ float key_value(uint32_t k) {
    return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

__device__ __forceinline__ void consider(Best& b, int& ok, float l, int64_t i) {
    if (l == l) {
        b = better(b, Best{l, (int32_t)i});
        ++ok;
    }
}

// Inclusive scan of one u64 per thread over the CTA (integers: exact); *total
// gets the CTA's sum. Every thread calls it.
__device__ __forceinline__ u64 block_scan(u64 v, ClusterShared& sm, u64* total) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
        const u64 o = __shfl_up_sync(kFullMask, v, off);
        if (lane >= off) v += o;
    }
    if (lane == 31) sm.wtot[warp] = v;
    __syncthreads();
    u64 base = 0, tot = 0;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
        const u64 t = sm.wtot[w];
        if (w < warp) base += t;
        tot += t;
    }
    __syncthreads();  // wtot is rewritten by the next scan
    *total = tot;
    return base + v;
}

// *p += v in shared memory by two native 32-bit atomics instead of a 64-bit
// compare-and-swap loop: the low word's carry goes into the high word, so *p
// ends exact whatever the order.
__device__ __forceinline__ void atomic_add_u64(u64* p, u64 v) {
    unsigned* const w32 = reinterpret_cast<unsigned*>(p);  // little-endian: low word first
    const unsigned lo = (unsigned)v, old = atomicAdd(&w32[0], lo);
    const unsigned carry = (unsigned)(old + lo < old);
    if ((v >> 32) != 0u || carry != 0u) atomicAdd(&w32[1], (unsigned)(v >> 32) + carry);
}

// Adds mass m to h[bin] (kNoBin: nothing); every lane of the warp calls it.
// Lanes with the same bin add once, through their lowest lane (the logits of
// a row share their leading digits: per-lane atomics would serialize).
template <bool kCount>
__device__ __forceinline__ void hist_add(u64* h, uint32_t bin, u64 m, u64* stage) {
    if (__ballot_sync(kFullMask, bin != kNoBin) == 0u) return;  // warp-uniform
    const unsigned peers = __match_any_sync(kFullMask, bin);
    const int lane = threadIdx.x & 31;
    if (!kCount) {
        stage[lane] = m;
        __syncwarp();
    }
    if (bin != kNoBin && lane == __ffs(peers) - 1) {
        u64 sum = 0;
        if (kCount) {
            sum = (u64)__popc(peers);
        } else {
            for (unsigned p = peers; p != 0u; p &= p - 1u) sum += stage[__ffs(p) - 1];
        }
        atomic_add_u64(&h[bin], sum);
    }
    if (!kCount) __syncwarp();  // stage is rewritten by the next call
}

// ---- The bin routes: one histogram pass, then a select among few listed elements.
//
// A key that orders like the selected quantity (ties allowed: x1 >= x2 gives
// key(x1) >= key(x2)) splits the row into bins; each CTA adds its elements'
// masses (top-p) or counts (top-k) to its fine histogram, one cluster barrier
// publishes it, bin_select finds the one bin holding the wanted element and
// every CTA lists its elements of that bin; the exact select then runs on
// the listed few with the mass above the bin known. The same integers as the
// radix select, so the same token; one histogram pass and two cluster
// barriers instead of four digit passes and four barriers.

constexpr float kMinMassWeight = 0x1p-40f;  // mass_of(w) > 0 exactly when w >= 2^-40

// The key of a weight with a mass (2^-40 <= w <= 1): its float bits' top 14,
// i.e. 32 bins per octave, 0 at 2^-40 up to kTopKey at w = 1.
__device__ __forceinline__ uint32_t wkey(float w) { return (__float_as_uint(w) >> 18) - (0x2b800000u >> 18); }

// The key of a non-NaN logit l of a row whose largest is mx: by the distance
// d = mx − l (rounded once, so monotone in l), 64 bins per octave from 2^-10
// to 2^10, kTopKey for d < 2^-10 and for l = mx (also when mx is +inf);
// kNoBin (not counted) for d >= 2^10, inf included.
__device__ __forceinline__ uint32_t dkey(float l, float mx) {
    if (l == mx) return kTopKey;
    const float d = __fsub_rn(mx, l);  // > 0
    if (!(d < 1024.0f)) return kNoBin;
    const uint32_t b = __float_as_uint(d);
    return b < 0x3a800000u ? kTopKey : kTopKey - ((b >> 17) - (0x3a800000u >> 17));
}

// A thread's pending histogram add: consecutive adds to one bin merge (a row
// of equal weights costs one atomic per thread, not one per element).
struct BinRun {
    uint32_t key = kNoBin;
    u64 m = 0;
    __device__ __forceinline__ void flush(u64* fine) {
        if (key != kNoBin) atomic_add_u64(&fine[key], m);
        key = kNoBin;
    }
    __device__ __forceinline__ void add(u64* fine, uint32_t k, u64 q) {
        if (k != key) {
            flush(fine);
            key = k;
            m = 0;
        }
        m += q;
    }
};

// This CTA's coarse bins: each the sum of its 32 fine bins (once the fine
// histogram is complete; published by the next cluster barrier).
__device__ __forceinline__ void fold_coarse(ClusterShared& sm) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int cb = warp; cb < kCoarse; cb += kWarps) {
        u64 v = sm.fine()[cb * kFinePer + lane];
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(kFullMask, v, off);
        if (lane == 0) sm.coarse()[cb] = v;
    }
}

// Warp 0 only. Lane l holds the mass of bin (top − l); finds the bin whose
// mass above it (bins nearer the top, plus `base`) is below target while the
// mass at or above it reaches it, and writes it and that mass to sel_bin /
// sel_above (at most one lane qualifies: the running mass rises with l).
__device__ __forceinline__ void warp_pick_bin(ClusterShared& sm, u64 v, int top, u64 base, u64 target) {
    const int lane = threadIdx.x & 31;
    u64 incl = v;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
        const u64 o = __shfl_up_sync(kFullMask, incl, off);
        if (lane >= off) incl += o;
    }
    const u64 over = base + (incl - v);
    if (over < target && target <= over + v) {
        sm.sel_bin = (uint32_t)(top - lane);
        sm.sel_above = over;
    }
}

// The fine bin *b whose cluster-wide mass above it (larger keys) is below
// target while the mass at or above it reaches it, and that mass above
// (*above): every CTA's coarse bins summed (kCoarse · C remote words), the
// coarse bin picked, then its 32 fine bins summed (32 · C) and one picked.
// Needs the histograms published (a cluster barrier) and no barrier itself.
// Returns false (cluster-uniform) when the histograms hold less than target.
template <int C>
__device__ bool bin_select(ClusterShared& sm, u64 target, uint32_t* b, u64* above) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    u64* const tot = &sm.stage[0][0];  // the cluster's coarse bins, then each warp's share of the fine ones
    static_assert(kThreads >= 64, "tot holds 64 coarse bins");
    for (int t = tid; t < 64; t += kThreads) {
        u64 v = 0;
        if (t < kCoarse)
            for (int c = 0; c < C; ++c) v += cluster_map(sm.coarse() + t, c)[0];
        tot[t] = v;
    }
    if (tid == 0) sm.sel_bin = kNoBin;
    __syncthreads();
    if (warp == 0) {  // two coarse bins a lane: 63 − 2l and 62 − 2l, summed, then each tried
        const int hi = 63 - 2 * lane;
        const u64 a = tot[hi], z = tot[hi - 1];
        u64 incl = a + z;
#pragma unroll
        for (int off = 1; off < 32; off <<= 1) {
            const u64 o = __shfl_up_sync(kFullMask, incl, off);
            if (lane >= off) incl += o;
        }
        const u64 over = incl - a - z;
        if (over < target && target <= over + a) {
            sm.sel_bin = (uint32_t)hi;
            sm.sel_above = over;
        }
        if (over + a < target && target <= over + a + z) {
            sm.sel_bin = (uint32_t)(hi - 1);
            sm.sel_above = over + a;
        }
    }
    __syncthreads();
    const uint32_t cb = sm.sel_bin;
    const u64 cover = sm.sel_above;
    __syncthreads();  // sel_bin, sel_above and tot are rewritten below
    if (cb == kNoBin) return false;
    u64 part = 0;
    for (int c = warp; c < C; c += kWarps) part += cluster_map(sm.fine() + cb * kFinePer + lane, c)[0];
    sm.stage[warp][lane] = part;
    __syncthreads();
    if (warp == 0) {
        const int f = kFinePer - 1 - lane;
        u64 v = 0;
        for (int w = 0; w < kWarps; ++w) v += sm.stage[w][f];
        warp_pick_bin(sm, v, (int)cb * kFinePer + kFinePer - 1, cover, target);
    }
    __syncthreads();
    *b = sm.sel_bin;
    *above = sm.sel_above;
    return true;
}

// The largest 32-bit key K whose mass (Σ over the row's elements with key >= K)
// reaches `target`, over the whole cluster. key_of(x, &key, &mass) says
// whether slice element x counts. Requires target <= the row's total mass
// (then exactly one digit qualifies in every pass). ph: the running
// histogram-buffer parity of the row (one cluster barrier per digit).
template <int C, bool kCount, class KeyOf>
__device__ __forceinline__ uint32_t cluster_select(ClusterShared& sm, const float* s, int len, int ch, u64 target,
                                                   int& ph, KeyOf key_of) {
    const int tid = threadIdx.x, warp = tid >> 5;
    uint32_t prefix = 0, mask = 0;
    u64 above = 0;  // mass of the keys above the current range
    for (int shift = 24; shift >= 0; shift -= 8) {
        u64* h = sm.hist[ph & 1];
        for (int j = 0; j < ch; ++j) {  // the same trip count in every lane
            const int i = tid * ch + j;
            uint32_t bin = kNoBin, key = 0;
            u64 m = 0;
            if (i < len && key_of(s[i], &key, &m) && (key & mask) == prefix) bin = (key >> shift) & 0xffu;
            hist_add<kCount>(h, bin, m, sm.stage[warp]);
        }
        cluster_sync();  // every CTA's histogram is complete
        // Thread t takes bins t·kBinsPer, ...: their cluster-wide masses, then
        // the prefix over all bins (integers, exact) and the digit.
        u64 hd[kBinsPer], mine = 0;
#pragma unroll
        for (int k = 0; k < kBinsPer; ++k) {
            const int d = tid * kBinsPer + k;
            hd[k] = 0;
            for (int c = 0; c < C; ++c) hd[k] += cluster_map(&sm.hist[ph & 1][d], c)[0];
            sm.hist[(ph + 1) & 1][d] = 0;  // last read remotely before the barrier above
            mine += hd[k];
        }
        ++ph;
        u64 tot = 0;
        u64 pre = block_scan(mine, sm, &tot) - mine;  // mass of the bins below this thread's
#pragma unroll
        for (int k = 0; k < kBinsPer; ++k) {
            const int d = tid * kBinsPer + k;
            pre += hd[k];
            const u64 at_or_above = above + (tot - pre + hd[k]), over = above + (tot - pre);
            if ((d == 0 || at_or_above >= target) && over < target) {  // exactly one bin qualifies
                sm.digit = (uint32_t)d;
                sm.above = over;
            }
        }
        __syncthreads();
        prefix |= sm.digit << shift;
        mask |= 0xffu << shift;
        above = sm.above;
        // sm.digit and sm.above are rewritten only after the next cluster barrier.
    }
    return prefix;
}

struct RowRule {
    float m, T;
    bool use_k;
    float thr_l;  // top-k logit threshold
    // w_i for a token top-k keeps, −1 for one it drops or a NaN logit.
    __device__ __forceinline__ float kept_weight(float l) const {
        if (!(l == l) || (use_k && !(l >= thr_l))) return -1.0f;
        if (l == m) return 1.0f;
        const float w = expf(__fdiv_rn(__fsub_rn(l, m), T));
        return w == w ? fminf(w, 1.0f) : 0.0f;  // NaN only from inf/inf
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

// Lists the elements of this CTA's slice that pick(x, &value) selects (value:
// what the list keeps, e.g. the weight) with their ids in cand_v / cand_i, and
// their count in n_cand (which may exceed kCandCap: the excess is dropped and
// gather_lists sees the overflow). Remote CTAs read the lists only after the
// next cluster barrier.
template <class Pick>
__device__ __forceinline__ void list_candidates(ClusterShared& sm, const float* s, int len, int ch, int64_t s0,
                                                Pick pick) {
    const int tid = threadIdx.x, lane = tid & 31;
    if (tid == 0) sm.n_cand = 0;
    __syncthreads();
    for (int j = 0; j < ch; ++j) {  // the same trip count in every lane
        const int e = tid * ch + j;
        float v = 0.0f;
        const bool is = e < len && pick(s[e], &v);
        const unsigned mask = __ballot_sync(kFullMask, is);
        if (mask == 0u) continue;  // warp-uniform
        int first = lane == __ffs(mask) - 1 ? atomicAdd(&sm.n_cand, __popc(mask)) : 0;
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) first += __shfl_xor_sync(kFullMask, first, off);  // to every lane
        const int at = first + __popc(mask & ((1u << lane) - 1u));
        if (is && at < kCandCap) {
            sm.cand_v[at] = v;
            sm.cand_i[at] = (int32_t)(s0 + e);
        }
    }
}

// After every CTA's list_candidates: one cluster barrier, then every CTA
// copies the union of the lists (in CTA order) into gv / gi (over the pool:
// every remote read of this CTA's histograms came before the barrier).
// Returns the number of candidates, or -1 (cluster-uniform: every CTA reads
// the same counts) when a list or the union overflows; nothing is copied then.
template <int C>
__device__ int gather_lists(ClusterShared& sm) {
    const int tid = threadIdx.x;
    cluster_sync();  // every CTA's list and count
    if (tid < C) sm.gcount[tid] = cluster_map(&sm.n_cand, tid)[0];
    __syncthreads();
    int m = 0;
    bool fits = true;
    for (int c = 0; c < C; ++c) {
        fits = fits && sm.gcount[c] <= kCandCap;
        m += sm.gcount[c];
    }
    if (!fits || m > kGatherCap) return -1;
    float* const gv = sm.gv();
    int32_t* const gi = sm.gi();
    for (int e = tid; e < m; e += kThreads) {
        int c = 0, idx = e;
        while (idx >= sm.gcount[c]) idx -= sm.gcount[c++];
        gv[e] = cluster_map(&sm.cand_v[idx], c)[0];
        gi[e] = cluster_map(&sm.cand_i[idx], c)[0];
    }
    __syncthreads();
    return m;
}

// Top-k's finish on m gathered logits that hold every logit >= the row's k-th
// largest (so a candidate's rank among them is its rank in the row): the k-th
// largest by ranking, the kept weights and masses, w* as the largest kept
// weight whose S(w) reaches the target, min-p, and the draw as the lowest kept
// id whose running mass (ids at or below it) exceeds D. The same integers as
// the radix route, so the same token. Opens the exit barrier at once (no
// remote read follows) and closes it at the end.
__device__ void topk_finish(ClusterShared& sm, int m, int64_t row, int rank, const strata_sampling_params& prm,
                            const RowRule& rule0, int32_t* out) {
    const int tid = threadIdx.x;
    const int k = prm.top_k;
    float* const gv = sm.gv();
    const int32_t* const gi = sm.gi();
    cluster_arrive();  // every remote read is done; no CTA leaves before all have arrived (cluster_wait)
    for (int j = tid; j < m; j += kThreads) {
        const float v = gv[j];
        int gt = 0, ge = 0;
        for (int i = 0; i < m; ++i) {
            const float o = gv[i];
            gt += o > v;
            ge += o >= v;
        }
        if (gt < k && k <= ge) sm.kth = v;  // the writers' values compare equal
    }
    __syncthreads();
    RowRule rule = rule0;
    rule.thr_l = sm.kth;
    u64 q = 0;
    for (int j = tid; j < m; j += kThreads) {
        const float w = rule.kept_weight(gv[j]);
        gv[j] = w;
        if (w >= 0.0f) q += mass_of(w);
    }
    u64 total = 0;
    (void)block_scan(q, sm, &total);  // its barriers also publish the weights
    float w_min = 0.0f;
    if (prm.top_p < 1.0f) {
        const u64 target = top_p_target(prm.top_p, total);
        if (tid == 0) sm.wstar = 0;
        __syncthreads();
        for (int j = tid; j < m; j += kThreads) {
            const float v = gv[j];
            if (!(v >= 0.0f) || mass_of(v) == 0) continue;
            u64 at_or_above = 0;
            for (int i = 0; i < m; ++i) {
                const float o = gv[i];
                if (o >= v) at_or_above += mass_of(o);
            }
            if (at_or_above >= target) atomicMax(&sm.wstar, __float_as_uint(v));  // w >= 0: bits order as values
        }
        __syncthreads();
        w_min = __uint_as_float(sm.wstar);
    }
    if (prm.min_p > 0.0f) w_min = fmaxf(w_min, fminf(prm.min_p, 1.0f));
    q = 0;
    for (int j = tid; j < m; j += kThreads) {
        const float w = gv[j];
        if (w >= w_min && w >= 0.0f) q += mass_of(w);
    }
    (void)block_scan(q, sm, &total);
    const u64 target = (u64)(((unsigned __int128)random_u24(prm.seed, prm.position) * total) >> 24);
    if (tid == 0) sm.token = INT32_MAX;
    __syncthreads();
    for (int j = tid; j < m; j += kThreads) {
        const float v = gv[j];
        if (!(v >= w_min && v >= 0.0f)) continue;
        const int32_t id = gi[j];
        u64 run = 0;
        for (int i = 0; i < m; ++i) {
            const float o = gv[i];
            if (o >= w_min && o >= 0.0f && gi[i] <= id) run += mass_of(o);
        }
        if (run > target) atomicMin(&sm.token, id);
    }
    __syncthreads();
    if (rank == 0 && tid == 0) {
        out[row] = sm.token;
        SAMPLE_ROUTE(kTopkGathered);
    }
    cluster_wait();
}

// The top-k route before the bin route (STRATA_SAMPLE_ROUTE=legacy), for
// k <= kThreads. A bound per CTA: the k-th largest of its threads' pass-1
// maxima (at least k of its logits are >= it, so its k-th largest logit, which
// is at most the row's, is >= it); each CTA lists its logits >= its bound;
// the union of the lists holds every logit >= the row's k-th largest
// (topk_finish). Returns false (cluster-uniform) when a list overflows; the
// caller then takes the radix route.
template <int C>
__device__ bool topk_gathered(ClusterShared& sm, const float* s, int len, int ch, int64_t s0, int64_t row, int rank,
                              const strata_sampling_params& prm, const RowRule& rule0, int32_t* out) {
    const int tid = threadIdx.x;
    const int k = prm.top_k;
    {
        const float v = sm.tmax[tid];
        int gt = 0, ge = 0;
        for (int t = 0; t < kThreads; ++t) {
            const float o = sm.tmax[t];
            gt += o > v;
            ge += o >= v;
        }
        if (gt < k && k <= ge) sm.bound = v;  // the writers' values compare equal
    }
    __syncthreads();
    const float bound = sm.bound;
    list_candidates(sm, s, len, ch, s0, [bound](float l, float* v) {
        *v = l;
        return l >= bound;  // false for NaN
    });
    const int m = gather_lists<C>(sm);
    if (m < 0) {
        if (rank == 0 && tid == 0) SAMPLE_ROUTE(kTopkRadixAfterOverflow);
        return false;
    }
    topk_finish(sm, m, row, rank, prm, rule0, out);
    return true;
}

// The top-k route (k <= kThreads): each CTA counts its logits by dkey in its
// fine histogram; bin_select finds the bin of the k-th largest logit; every
// CTA lists its logits in that bin or above (fewer than k above it, plus the
// bin's own: a handful where logits are spread); topk_finish on their union.
// Three cluster barriers and the exit barrier. Returns false (cluster-uniform)
// when the k-th largest lies 2^10 or farther below the max (not counted) or a
// list overflows (ties, masked rows); the caller then takes the radix route.
template <int C>
__device__ bool topk_bins(ClusterShared& sm, const float* s, int len, int ch, int64_t s0, int64_t row, int rank,
                          const strata_sampling_params& prm, const RowRule& rule, int32_t* out) {
    const int tid = threadIdx.x;
    u64* const fine = sm.fine();
    for (int d = tid; d < kFine; d += kThreads) fine[d] = 0;
    __syncthreads();
    const float mx = rule.m;
    BinRun run;
    for (int j = 0; j < ch; ++j) {
        const int e = tid * ch + j;
        const float l = e < len ? s[e] : __int_as_float(0x7fc00000);
        const uint32_t key = l == l ? dkey(l, mx) : kNoBin;
        if (key != kNoBin) run.add(fine, key, 1);
    }
    run.flush(fine);
    __syncthreads();
    fold_coarse(sm);
    cluster_sync();  // every CTA's histograms
    uint32_t b = 0;
    u64 above = 0;
    if (!bin_select<C>(sm, (u64)prm.top_k, &b, &above)) {
        if (rank == 0 && tid == 0) SAMPLE_ROUTE(kTopkRadixAfterOverflow);
        return false;
    }
    list_candidates(sm, s, len, ch, s0, [mx, b](float l, float* v) {
        *v = l;
        if (!(l == l)) return false;
        const uint32_t key = dkey(l, mx);
        return key != kNoBin && key >= b;
    });
    const int m = gather_lists<C>(sm);
    if (m < 0) {
        if (rank == 0 && tid == 0) SAMPLE_ROUTE(kTopkRadixAfterOverflow);
        return false;
    }
    topk_finish(sm, m, row, rank, prm, rule, out);
    return true;
}

// The top-p route (STRATA_SAMPLE_ROUTE unset): the weights pass filled each
// CTA's fine histogram of masses by wkey and one cluster barrier published
// them. w* lies in the bin bin_select finds for the target (the mass above
// that bin is below the target, with it at or above), so every CTA lists its
// weights in that bin (a handful unless weights tie or crowd) and publishes
// its mass above the bin; over the union, w* is the largest listed weight
// whose S(w) = (mass above the bin) + (listed masses >= w) reaches the
// target: the radix select's w*. Each CTA's kept mass at w >= w* follows
// (cta_kept). One cluster barrier; the caller's exit barrier must follow the
// remote reads here. Returns false (cluster-uniform) when a list overflows.
template <int C>
__device__ bool topp_bins(ClusterShared& sm, const float* s, int len, int ch, int64_t s0, int rank, u64 target,
                          float* w_star) {
    const int tid = threadIdx.x;
    uint32_t b = 0;
    u64 above = 0;
    (void)bin_select<C>(sm, target, &b, &above);  // target <= the kept mass: always found
    list_candidates(sm, s, len, ch, s0, [b](float w, float* v) {
        *v = w;
        return w >= kMinMassWeight && wkey(w) == b;  // false for dropped tokens (w = −1)
    });
    u64 mine = 0, own = 0;
    for (int f = (int)b + 1 + tid; f < kFine; f += kThreads) mine += sm.fine()[f];
    (void)block_scan(mine, sm, &own);
    if (tid == 0) {
        sm.above_own = own;
        sm.wstar = 0;
    }
    const int m = gather_lists<C>(sm);
    if (m < 0) {
        if (rank == 0 && tid == 0) SAMPLE_ROUTE(kToppRadixAfterOverflow);
        return false;
    }
    const float* const gv = sm.gv();
    for (int j = tid; j < m; j += kThreads) {
        const float v = gv[j];
        u64 at_or_above = above;
        for (int i = 0; i < m; ++i) {
            const float o = gv[i];
            if (o >= v) at_or_above += mass_of(o);
        }
        if (at_or_above >= target) atomicMax(&sm.wstar, __float_as_uint(v));  // w > 0: bits order as values
    }
    __syncthreads();
    const float ws = __uint_as_float(sm.wstar);
    if (tid < C) {  // CTA tid's kept mass: its bins above the boundary bin and its listed weights >= w*
        int off = 0;
        for (int c = 0; c < tid; ++c) off += sm.gcount[c];
        u64 kept = cluster_map(&sm.above_own, tid)[0];
        for (int i = off; i < off + sm.gcount[tid]; ++i)
            if (gv[i] >= ws) kept += mass_of(gv[i]);
        sm.cta_kept[tid] = kept;
    }
    __syncthreads();
    *w_star = ws;
    if (rank == 0 && tid == 0) SAMPLE_ROUTE(kToppBins);
    return true;
}

// The draw inside the CTA whose slice holds D (t: D less the kept mass of the
// slices before it): each thread's chunk mass over w >= w_min (sm.chunk when
// w_min is 0), a block scan, and the one thread whose chunk holds t walks it
// to the first kept id whose running mass exceeds t.
__device__ __forceinline__ void draw_in_slice(ClusterShared& sm, const float* s, int len, int ch, int64_t s0,
                                              float w_min, u64 t, int32_t* out) {
    const int tid = threadIdx.x;
    u64 mine = sm.chunk[tid];
    if (w_min > 0.0f) {
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

// Ids per CTA slice: a multiple of 4 (16-byte loads when the row allows).
__host__ __device__ __forceinline__ int64_t sample_slice(int64_t n, int c) { return ((n + c - 1) / c + 3) / 4 * 4; }

// Grid: C CTAs (one cluster) per row. Dynamic shared memory:
// ClusterShared, then `slice` floats.
template <int C>
__global__ void __launch_bounds__(kThreads, 4) sample_cluster_kernel(const SampleArgs a, int64_t slice, int route) {
    pdl_wait();  // first: see cuda_pdl.cuh
    pdl_launch_dependents();
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
    for (int d = tid; d < 2 * kBins; d += kThreads) sm.hist[d / kBins][d % kBins] = 0;

    // Pass 1: the slice into shared memory; its argmax and non-NaN count.
    Best b{__int_as_float(0xff800000), INT32_MAX};
    int ok = 0, i = tid;
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
                consider(b, ok, x[u].x, s0 + e);
                consider(b, ok, x[u].y, s0 + e + 1);
                consider(b, ok, x[u].z, s0 + e + 2);
                consider(b, ok, x[u].w, s0 + e + 3);
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
            consider(b, ok, x.x, s0 + e);
            consider(b, ok, x.y, s0 + e + 1);
            consider(b, ok, x.z, s0 + e + 2);
            consider(b, ok, x.w, s0 + e + 3);
        }
        i = 4 * n4 + tid;
    }
    for (; i < len; i += kThreads) {
        const float l = SAMPLE_LEAK(a, row, s0 + i, g[i]);
        s[i] = l;
        consider(b, ok, l, s0 + i);
    }
    sm.tmax[tid] = b.v;
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
    cluster_sync();  // the slices, best and n_ok of every CTA
    Best best{__int_as_float(0xff800000), INT32_MAX};
    int64_t n_ok = 0;
    for (int c = 0; c < C; ++c) {  // a selection under a total order and an integer sum: any order
        const ClusterShared* o = cluster_map(&sm, c);
        best = better(best, o->best);
        n_ok += o->n_ok;
    }
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
        (route == kRouteLegacy ? topk_gathered<C>(sm, s, len, ch, s0, row, rank, prm, rule, a.out_ids)
                               : topk_bins<C>(sm, s, len, ch, s0, row, rank, prm, rule, a.out_ids)))
        return;
    if (rule.use_k) {
        const uint32_t key = cluster_select<C, true>(sm, s, len, ch, (u64)prm.top_k, ph,
                                                  [](float l, uint32_t* k, u64* m) {
                                                      *k = order_key(l);
                                                      *m = 1;
                                                      return l == l;
                                                  });
        rule.thr_l = key_value(key);
    }

    // The weights, in place; each thread's chunk mass; the CTA's mass over all
    // kept weights and over w >= min-p; for the bin top-p route, the CTA's
    // histogram of masses by wkey.
    const bool bins_p = route == kRouteBins && prm.top_p < 1.0f;
    const float mp = prm.min_p > 0.0f ? fminf(prm.min_p, 1.0f) : 0.0f;
    u64* const fine = sm.fine();
    if (bins_p) {  // no CTA reads this CTA's pool any more (a cluster barrier passed since)
        for (int d = tid; d < kFine; d += kThreads) fine[d] = 0;
        __syncthreads();
    }
    u64 mine = 0, mine_p = 0;
    BinRun run;
    for (int j = 0; j < ch; ++j) {
        const int e = tid * ch + j;
        if (e < len) {
            const float w = rule.kept_weight(s[e]);
            s[e] = w;
            if (w >= 0.0f) {
                const u64 q = mass_of(w);
                mine += q;
                if (w >= mp) mine_p += q;
                if (bins_p && w >= kMinMassWeight) run.add(fine, wkey(w), q);
            }
        }
    }
    if (bins_p) run.flush(fine);
    sm.chunk[tid] = mine;
    u64 cta_mass = 0;
    (void)block_scan(mine, sm, &cta_mass);  // its barriers also complete the histogram
    if (tid == 0) sm.mass_w = cta_mass;
    if (mp > 0.0f) {
        (void)block_scan(mine_p, sm, &cta_mass);
        if (tid == 0) sm.mass_d = cta_mass;
    }
    if (bins_p) fold_coarse(sm);
    cluster_sync();
    u64 total = 0;  // Q: the cluster's kept mass
    for (int c = 0; c < C; ++c) total += cluster_map(&sm.mass_w, c)[0];

    // w_min, and where each CTA's kept mass at w >= w_min comes from.
    enum { kMassAll, kMassMinP, kMassBins, kMassRecount } from = kMassAll;
    float w_min = 0.0f;
    if (prm.top_p < 1.0f) {
        const u64 target = top_p_target(prm.top_p, total);
        if (bins_p && topp_bins<C>(sm, s, len, ch, s0, rank, target, &w_min)) {
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
    cluster_arrive();  // every remote read is done: a CTA may leave once all have arrived
    if (before <= target && target < before + own)  // CTA-uniform
        draw_in_slice(sm, s, len, ch, s0, w_min, target - before, &a.out_ids[row]);
    cluster_wait();
}

}  // namespace

// ------------------------------------------------------------------ host (not in the emulator)

namespace {

// Per device, once: raises both kernels' dynamic shared memory limit to the
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

// Whether a 16-CTA cluster with `smem` bytes per CTA can be resident on the
// device (asked once per device and size; a host query, not stream work).
bool wide_fits(size_t smem) {
    static std::mutex mu;
    static int known_dev = -1;
    static size_t known_smem = 0;
    static bool known = false;
    int dev = 0;
    check(cudaGetDevice(&dev), "cudaGetDevice");
    std::lock_guard<std::mutex> lock(mu);
    if (dev == known_dev && smem == known_smem) return known;
    SampleArgs probe{};
    probe.n_rows = 1;
    cudaLaunchAttribute attr[2];
    cudaLaunchConfig_t cfg = sample_config<kCtasWide>(probe, nullptr, smem, attr);
    int clusters = 0;
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;  // harmless during graph recording
    (void)cudaThreadExchangeStreamCaptureMode(&mode);
    const bool ok = cudaOccupancyMaxActiveClusters(&clusters, sample_cluster_kernel<kCtasWide>, &cfg) == cudaSuccess &&
                    clusters >= 1;
    (void)cudaGetLastError();
    (void)cudaThreadExchangeStreamCaptureMode(&mode);
    known_dev = dev;
    known_smem = smem;
    known = ok;
    return ok;
}

template <int C>
void launch_c(const SampleArgs& a, cudaStream_t stream, int64_t slice, size_t smem, int route) {
    cudaLaunchAttribute attr[2];
    cudaLaunchConfig_t cfg = sample_config<C>(a, stream, smem, attr);
    cfg.numAttrs = pdl_add_attr(attr, 1);  // programmatic launch: cuda_pdl.cuh
    check(cudaLaunchKernelEx(&cfg, sample_cluster_kernel<C>, a, slice, route), "sample launch");
}

// STRATA_SAMPLE_ROUTE: "bins" (or unset, empty), "legacy" or "radix"; the
// same tokens for each (strata/env.py).
int sample_env_route() {
    const char* env = std::getenv("STRATA_SAMPLE_ROUTE");  // read per call: tests switch it within a process
    if (!env || !*env || std::strcmp(env, "bins") == 0) return kRouteBins;
    if (std::strcmp(env, "legacy") == 0) return kRouteLegacy;
    if (std::strcmp(env, "radix") == 0) return kRouteRadix;
    fail(STRATA_ERR_INVALID_ARGUMENT, std::string("STRATA_SAMPLE_ROUTE=") + env +
                                          ": expected bins (the default), legacy (top-k over thread-maxima "
                                          "candidates, radix top-p) or radix (radix selects only)");
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
    bool wide_ok = false;
    const int64_t limit = sample_cluster_setup(&wide_ok);
    // Tokens do not depend on the cluster size (the file comment): pick the faster one.
    if (a.n_vocab > kWideFrom && wide_ok) {
        const int64_t slice = sample_slice(a.n_vocab, kCtasWide);
        const size_t smem = sizeof(ClusterShared) + (size_t)slice * sizeof(float);
        if ((int64_t)smem <= limit && wide_fits(smem)) {
            launch_c<kCtasWide>(a, stream, slice, smem, route);
            check_launch("sample");
            return;
        }
    }
    const int64_t slice = sample_slice(a.n_vocab, kCtas);
    const size_t smem = sizeof(ClusterShared) + (size_t)slice * sizeof(float);
    if ((int64_t)smem > limit)
        fail(STRATA_ERR_INVALID_ARGUMENT, "sample: n_vocab " + std::to_string(a.n_vocab) +
                                              " does not fit the sampler's shared memory (" + std::to_string(kCtas) +
                                              " slices)");
    launch_c<kCtas>(a, stream, slice, smem, route);
    check_launch("sample");
}

}  // namespace cuda
}  // namespace strata

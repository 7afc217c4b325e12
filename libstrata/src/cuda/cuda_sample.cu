// cuda_sample.cu — token selection on the device: argmax and seeded sampling.
//
// One 1024-thread block per row (argmax and sample); every float reduction
// has a fixed shape (sample: owner t, one of threads 0..255, takes elements t,
// t+256, ... or the contiguous chunk t, then a fixed tree; the other threads
// do only order-free work, see kBlock), so a row's token depends only on its
// logits and its parameters. The argmax passes read 16-byte vectors, four in flight.
//
// argmax: the largest non-NaN logit, lowest index on ties (a selection under
// a total order, exact in any reduction order); a row of NaNs gives 0.
//
// sample (strata.h semantics), with m = max logit and T > 0:
//   w_i = 1 if l_i == m else exp((l_i − m) / T)          (NaN logits: never kept)
//   top-k: keep l_i >= the k-th largest logit (ties kept), found exactly:
//          over a short candidate list when a bound allows (top_k_threshold),
//          else by a radix select over order-preserving integer keys
//          (warp-aggregated integer histogram counts);
//   top-p: the smallest weight threshold w* whose kept mass S(w*) reaches
//          top_p · (kept total): a 32-way bucket search over the bits of w,
//          6 passes, per-thread bucket sums in shared memory combined in a
//          fixed order (no float atomics); keep w_i >= w*;
//   min-p: keep w_i >= min_p (the max weight is 1);
//   draw:  u = strata_random_uniform(seed, position), the same splitmix64 on
//          the device; the running sum in ascending id order is defined
//          chunk-wise: thread t sums its contiguous chunk, P = exclusive prefix
//          of chunk sums (sequential), running(i) = P[t] + (chunk sum up to i).
//          It is monotone and ends at total = P[256], so exactly one chunk
//          holds the first i with running(i) > u · total.
// T <= 0 (or NaN) is greedy: the argmax; so is a row whose largest logit is −inf.
//
// Speed without changing a bit: the row lives in shared memory. The first pass
// (argmax and the count of non-NaN logits, 16-byte loads eight in flight)
// copies the logits into the block's dynamic shared memory, up to `cap` ids
// (227 KB a block on sm_90: 49,664 ids, a whole 49k vocabulary); ids beyond it
// stay in global memory (logits, then a global weight row), read the same way
// as before. Every later pass (the radix select, the weight pass, which turns
// each shared logit into its weight w_i in place, −1 for a token top-k drops,
// the top-p passes, the draw) reads shared memory instead of making a
// latency-bound trip to global memory per element. The assignment of elements
// to threads and every float sum's operands and order are exactly those of the
// previous kernel (libstrata/cuda_emu/sample_v1.h, which test_sample.cpp runs
// beside this one): thread t sums elements t, t+256, … ascending; the top-p
// passes after the second read only the weights still in range (a list in
// global scratch, written in order by the second pass); the draw's chunk sums
// add each thread's contiguous chunk in ascending id order, the lanes of a warp
// starting one step apart when the chunk length is even, so that they read 32
// different shared-memory banks (a skew in time, not in order). The radix
// select's digit search is a parallel integer scan (exact) and warps without a
// counted digit skip the match.
#include <climits>
#include <mutex>

#include "cuda_async.cuh"
#include "cuda_common.cuh"
#include "cuda_kernels.cuh"
#include "cuda_scratch.cuh"
#include "cuda_pdl.cuh"

// Hooks for the host emulator, which records each row's intermediate values
// (libstrata/cuda_emu/test_sample.cpp); nothing on the device.
#ifndef SAMPLE_TRACE
#define SAMPLE_TRACE(slot, value)
#define SAMPLE_TRACE_ROW(row)
#endif

namespace strata {
namespace cuda {
namespace {

// A sample block has kBlock threads; the fixed sum orders belong to kThreads
// "owners" (threads 0..255): owner t sums elements t, t+256, ... and the draw's
// chunk t exactly as the 256-thread kernel did (sample_v1.h). The other threads
// share the order-free work: the loads and selections of the first pass, the
// radix histograms, every per-logit weight, and the top-p bucket updates (owner
// t's bucket cells split among its kGroups threads by bucket index).
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kBlock = 1024;
constexpr int kBlockWarps = kBlock / 32;
constexpr int kGroups = kBlock / kThreads;  // threads per owner (owner = tid % kThreads)
constexpr int kBuckets = 32;  // top-p search: buckets per pass (5 bits)
constexpr int kRadix = 256;   // top-k select: 8-bit digits
constexpr int kBatch = 8;         // loads in flight per thread in the passes over the row
constexpr int kCandidates = 4096;  // top-k: the most ids at or above the bound kept in shared memory

struct Best {
    float v;
    int32_t i;  // INT32_MAX: nothing seen
};

__device__ __forceinline__ Best better(Best a, Best b) { return (b.v > a.v || (b.v == a.v && b.i < a.i)) ? b : a; }

// Scratch of the block reductions of a block of W warps (argmax uses only this).
template <int W>
struct ReduceSharedT {
    float scratch[W];
    Best best[W];
    int counts[W];
};
using ReduceShared = ReduceSharedT<kWarps>;
constexpr int kArgmaxThreads = 1024;  // argmax alone: a wide block keeps more loads in flight per row

// The head of a sample block's dynamic shared memory; the shared row follows it.
// The phases that use the union's members are separated by barriers.
struct alignas(16) SampleShared {
    ReduceSharedT<kBlockWarps> red;
    union {
        float bsum[kBuckets][kThreads];  // top-p: per-thread bucket sums (column per thread: no bank conflicts)
        struct {
            float chunk[kThreads];        // draw: chunk sums
            float prefix[kThreads + 1];   // draw: their exclusive prefix
        } d;
        struct {
            int hist[kRadix];
            int scan[kRadix];         // radix select: counts at digits >= d
            float tmax[kBlock];       // each thread's largest logit in the first pass (−inf: none)
            float cand[kCandidates];  // top-k: the logits at or above the bound
        } r;
    } u;
    float bound;
    int n_cand;
    float btot[kBuckets];
    uint32_t lo, hi, digit;
    int kk;
    float above;
    int result;
};

template <int W>
__device__ __forceinline__ Best block_argmax(Best x, ReduceSharedT<W>& sm) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        Best o;
        o.v = __shfl_xor_sync(kFullMask, x.v, off);
        o.i = __shfl_xor_sync(kFullMask, x.i, off);
        x = better(x, o);
    }
    __syncthreads();
    if ((threadIdx.x & 31) == 0) sm.best[threadIdx.x >> 5] = x;
    __syncthreads();
    Best r = sm.best[0];
#pragma unroll
    for (int w = 1; w < W; ++w) r = better(r, sm.best[w]);
    __syncthreads();
    return r;
}

template <int W>
__device__ __forceinline__ int block_count(int c, ReduceSharedT<W>& sm) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) c += __shfl_xor_sync(kFullMask, c, off);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) sm.counts[threadIdx.x >> 5] = c;
    __syncthreads();
    int r = 0;
#pragma unroll
    for (int w = 0; w < W; ++w) r += sm.counts[w];
    __syncthreads();
    return r;
}

__device__ __forceinline__ void consider(Best& b, int& ok, float l, int64_t i) {
    if (l == l) {
        b = better(b, Best{l, (int32_t)i});
        ++ok;
    }
}

// The row's argmax over non-NaN logits (i == INT32_MAX when all are NaN), and
// how many logits are not NaN. A selection under a total order, so the visiting
// order (16-byte loads, L in flight, when the row allows) cannot change it.
// With kStore, it also copies logits [0, cap) to keep (cap a multiple of 4) and
// writes each thread's largest non-NaN logit (−inf if none) to tmax[thread].
template <int W, int L, bool kStore>
__device__ __forceinline__ Best row_argmax(const float* lg, int64_t n, ReduceSharedT<W>& sm, int* n_ok,
                                           float* keep = nullptr, int64_t cap = 0, float* tmax = nullptr) {
    constexpr int T = 32 * W;
    Best b{__int_as_float(0xff800000), INT32_MAX};
    int ok = 0;
    int64_t i = threadIdx.x;
    if (reinterpret_cast<uintptr_t>(lg) % 16 == 0) {
        const int64_t n4 = n / 4, c4 = cap / 4;
        const float4* v = reinterpret_cast<const float4*>(lg);
        float4* k4 = reinterpret_cast<float4*>(keep);
        int64_t q = threadIdx.x;
        for (; q + (L - 1) * T < n4; q += L * T) {
            float4 x[L];
#pragma unroll
            for (int u = 0; u < L; ++u) x[u] = v[q + u * T];
#pragma unroll
            for (int u = 0; u < L; ++u) {
                if (kStore && q + u * T < c4) k4[q + u * T] = x[u];
                const int64_t e = 4 * (q + u * T);
                consider(b, ok, x[u].x, e);
                consider(b, ok, x[u].y, e + 1);
                consider(b, ok, x[u].z, e + 2);
                consider(b, ok, x[u].w, e + 3);
            }
        }
        for (; q < n4; q += T) {
            const float4 x = v[q];
            if (kStore && q < c4) k4[q] = x;
            consider(b, ok, x.x, 4 * q);
            consider(b, ok, x.y, 4 * q + 1);
            consider(b, ok, x.z, 4 * q + 2);
            consider(b, ok, x.w, 4 * q + 3);
        }
        i = 4 * n4 + threadIdx.x;
    }
    for (; i < n; i += T) {
        const float l = lg[i];
        if (kStore && i < cap) keep[i] = l;
        consider(b, ok, l, i);
    }
    if (kStore) tmax[threadIdx.x] = b.v;
    if (n_ok) *n_ok = block_count(ok, sm);
    return block_argmax(b, sm);  // its barriers also publish the copy and tmax
}

// A row of n floats, ids [0, cap) in shared memory and the rest in global
// memory (indexed by id), so that a pass reads each id from where it lives.
struct Row {
    float* s;
    const float* g;
    int64_t cap;
    __device__ __forceinline__ float operator[](int64_t i) const { return i < cap ? s[i] : g[i]; }
};

// Order-preserving key of a non-NaN float (−0 and +0 share a key).
__device__ __forceinline__ uint32_t order_key(float f) {
    uint32_t b = __float_as_uint(f);
    if (b == 0x80000000u) b = 0;
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
__device__ __forceinline__ float key_value(uint32_t k) {
    return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

// The k-th largest non-NaN logit of lg[0, n) (1 <= k <= number of non-NaN logits).
template <class Src>
__device__ __forceinline__ float kth_largest(const Src lg, int64_t n, int k, SampleShared& sm) {
    uint32_t prefix = 0, mask = 0;
    int kk = k;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int d = threadIdx.x; d < kRadix; d += kBlock) sm.u.r.hist[d] = 0;
        __syncthreads();
        // Lanes of a warp with the same digit add once (logits of one row share
        // their leading digits: per-lane atomics would serialize 32-way).
        // Integer counts: exact in any order. Every lane runs every iteration.
        constexpr int kLoads = 4;  // loads in flight per thread
        for (int64_t base = 0; base < n; base += kLoads * kBlock) {
            float lv[kLoads];
#pragma unroll
            for (int u = 0; u < kLoads; ++u) {
                const int64_t i = base + u * kBlock + threadIdx.x;
                lv[u] = i < n ? lg[i] : __int_as_float(0x7fc00000);  // NaN: not counted
            }
#pragma unroll
            for (int u = 0; u < kLoads; ++u) {
                uint32_t digit = 0xffffffffu;  // nothing to count
                const float l = lv[u];
                if (l == l) {
                    const uint32_t key = order_key(l);
                    if ((key & mask) == prefix) digit = (key >> shift) & 0xffu;
                }
                if (__ballot_sync(kFullMask, digit != 0xffffffffu) == 0u) continue;  // warp-uniform
                const unsigned peers = __match_any_sync(kFullMask, digit);
                if (digit != 0xffffffffu && (threadIdx.x & 31) == __ffs(peers) - 1)
                    atomicAdd(&sm.u.r.hist[digit], __popc(peers));
            }
        }
        __syncthreads();
        // The digit: the largest d >= 1 whose count of keys at digits >= d reaches kk, else 0
        // (the counts at digits >= d by an inclusive suffix scan: integers, exact).
        for (int d = threadIdx.x; d < kRadix; d += kBlock) sm.u.r.scan[d] = sm.u.r.hist[d];
        __syncthreads();
        for (int off = 1; off < kRadix; off <<= 1) {
            int v[kRadix / kBlock > 0 ? kRadix / kBlock : 1];
            int j = 0;
            for (int d = threadIdx.x; d < kRadix; d += kBlock, ++j) v[j] = d + off < kRadix ? sm.u.r.scan[d + off] : 0;
            __syncthreads();
            j = 0;
            for (int d = threadIdx.x; d < kRadix; d += kBlock, ++j) sm.u.r.scan[d] += v[j];
            __syncthreads();
        }
        for (int d = threadIdx.x; d < kRadix; d += kBlock) {
            const int at_or_above = sm.u.r.scan[d], above = d + 1 < kRadix ? sm.u.r.scan[d + 1] : 0;
            if ((d == 0 || at_or_above >= kk) && above < kk) {  // exactly one d qualifies
                sm.digit = (uint32_t)d;
                sm.kk = kk - above;
            }
        }
        __syncthreads();
        prefix |= sm.digit << shift;
        mask |= 0xffu << shift;
        kk = sm.kk;
    }
    return key_value(prefix);
}

// A list of logits in shared memory, as a source for kth_largest.
struct List {
    const float* p;
    __device__ __forceinline__ float operator[](int64_t i) const { return p[i]; }
};

// The k-th largest non-NaN logit of the row, exactly as kth_largest over the
// whole row, found over few ids when it can be. Bound: the k-th largest of the
// 256 per-thread maxima of the first pass (k <= 256). At least k logits are
// >= it (each of those k threads holds one), so the k-th largest logit is
// >= the bound and every logit the top k holds is among those >= it: the
// k-th largest of that candidate list is the row's. One pass over the row
// copies the candidates into shared memory (warp-aggregated slots; their order
// does not matter to a selection); up to 256 of them are ranked in one step,
// more by the radix select over the list; if there are more than kCandidates,
// or k > 256, the radix select runs over the whole row instead.
__device__ __forceinline__ float top_k_threshold(const Row lg, int64_t n, int k, SampleShared& sm) {
    const int tid = threadIdx.x, lane = tid & 31;
    if (k > kThreads) return kth_largest(lg, n, k, sm);
    // 256 group maxima: owner t folds the first-pass maxima of threads t, t+256, ...
    // (each is a logit of a distinct id, or −inf; any such bound keeps the result exact).
    float v = 0.0f;
    if (tid < kThreads) {
        v = sm.u.r.tmax[tid];
#pragma unroll
        for (int g = 1; g < kGroups; ++g) v = fmaxf(v, sm.u.r.tmax[tid + g * kThreads]);
        sm.u.r.tmax[tid] = v;  // only owner t reads slots t + g·256
    }
    if (tid == 0) sm.n_cand = 0;
    __syncthreads();
    if (tid < kThreads) {
        int gt = 0, ge = 0;
        for (int t = 0; t < kThreads; ++t) {
            const float o = sm.u.r.tmax[t];
            gt += o > v;
            ge += o >= v;
        }
        if (gt < k && k <= ge) sm.bound = v;  // the writers' values compare equal (−0 and +0 at most): same list
    }
    __syncthreads();
    const float bound = sm.bound;
    for (int64_t base = 0; base < n; base += kBatch * kBlock) {
        float lv[kBatch];
#pragma unroll
        for (int u = 0; u < kBatch; ++u) {
            const int64_t i = base + u * kBlock + tid;
            lv[u] = i < n ? lg[i] : __int_as_float(0x7fc00000);  // NaN: never a candidate
        }
#pragma unroll
        for (int u = 0; u < kBatch; ++u) {
            const bool is = lv[u] >= bound;
            const unsigned mask = __ballot_sync(kFullMask, is);  // warp-uniform
            if (mask == 0u) continue;
            const int leader = __ffs(mask) - 1;
            int first = lane == leader ? atomicAdd(&sm.n_cand, __popc(mask)) : 0;
#pragma unroll
            for (int off = 16; off > 0; off >>= 1) first += __shfl_xor_sync(kFullMask, first, off);  // to every lane
            const int at = first + __popc(mask & ((1u << lane) - 1u));
            if (is && at < kCandidates) sm.u.r.cand[at] = lv[u];
        }
    }
    __syncthreads();
    const int n_cand = sm.n_cand;
    if (n_cand > kCandidates) return kth_largest(lg, n, k, sm);  // block-uniform
    if (n_cand > kThreads) return kth_largest(List{sm.u.r.cand}, n_cand, k, sm);
    // Few candidates: thread t ranks candidate t among them (the value with fewer
    // than k above it and at least k at or above it; a zero as +0, the key the
    // radix select returns for ±0).
    __syncthreads();  // every thread has read sm.bound and sm.n_cand
    if (tid < n_cand) {
        const float c = sm.u.r.cand[tid];
        int above = 0, at_or_above = 0;
        for (int j = 0; j < n_cand; ++j) {
            const float o = sm.u.r.cand[j];
            above += o > c;
            at_or_above += o >= c;
        }
        if (above < k && k <= at_or_above) sm.bound = c == 0.0f ? 0.0f : c;  // the writers' values are equal
    }
    __syncthreads();
    const float kth = sm.bound;
    __syncthreads();  // sm.bound is rewritten by the next row
    return kth;
}

struct RowRule {
    float m, T;
    bool use_k;
    float thr_l;  // top-k logit threshold
    __device__ __forceinline__ bool kept_k(float l) const { return l == l && (!use_k || l >= thr_l); }
    __device__ __forceinline__ float weight(float l) const {
        if (l == m) return 1.0f;
        const float w = expf(__fdiv_rn(__fsub_rn(l, m), T));
        return w == w ? fminf(w, 1.0f) : 0.0f;  // NaN only from inf/inf
    }
    // weight(l) if top-k keeps l, else −1: the same values as a select chain
    // (no branch around the division and expf, so a thread's loads and
    // weights overlap); rows with top-k branch, as most of their ids drop.
    __device__ __forceinline__ float kept_weight(float l) const {
        if (use_k) return kept_k(l) ? weight(l) : -1.0f;
        float w = expf(__fdiv_rn(__fsub_rn(l, m), T));
        w = w == w ? fminf(w, 1.0f) : 0.0f;
        w = l == m ? 1.0f : w;
        return l == l ? w : -1.0f;
    }
};

// Sum over the owners (threads 0..255; the others pass anything) in
// block_sum<kWarps>'s order: each owner warp's butterfly, then the 8 warp
// totals in warp order. Every thread of the block calls it and gets the sum.
__device__ __forceinline__ float owner_sum(float v, float* scratch) {
    v = warp_sum(v);
    __syncthreads();
    if ((threadIdx.x & 31) == 0 && threadIdx.x < kThreads) scratch[threadIdx.x >> 5] = v;
    __syncthreads();
    float s = scratch[0];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) s = __fadd_rn(s, scratch[w]);
    __syncthreads();
    return s;
}

// w_i for tokens top-k keeps, −1 for the others, written over the shared logit
// (ids below lg.cap) or to ws[i]: every thread of the block computes the
// weights of ids tid, tid + 1024, ... (an elementwise function of the logit: the
// same bits whoever computes it). Returns the kept mass when `total`
// (block-uniform): owner t's sum over its elements t, t+256, ... in ascending
// order (a kept weight is in [0, 1], a dropped one −1), then owner_sum.
__device__ __forceinline__ float weights_pass(const Row lg, int64_t n, const RowRule& rule, float* ws, bool total,
                                              SampleShared& sm) {
    // 32-bit ids (a vocabulary is below 2^31 ids), the shared head and the global tail in separate loops.
    const int nv = (int)n, ns = (int)(n < lg.cap ? n : lg.cap);
    float* const s_row = lg.s;
    int i = threadIdx.x;
    for (; i + (kBatch - 1) * kBlock < ns; i += kBatch * kBlock) {
        float lv[kBatch];
#pragma unroll
        for (int u = 0; u < kBatch; ++u) lv[u] = s_row[i + u * kBlock];
#pragma unroll
        for (int u = 0; u < kBatch; ++u) s_row[i + u * kBlock] = rule.kept_weight(lv[u]);
    }
    for (; i < ns; i += kBlock) s_row[i] = rule.kept_weight(s_row[i]);
    const float* const g_row = lg.g;
    for (; i + (kBatch - 1) * kBlock < nv; i += kBatch * kBlock) {
        float lv[kBatch];
#pragma unroll
        for (int u = 0; u < kBatch; ++u) lv[u] = g_row[i + u * kBlock];
#pragma unroll
        for (int u = 0; u < kBatch; ++u) ws[i + u * kBlock] = rule.kept_weight(lv[u]);
    }
    for (; i < nv; i += kBlock) ws[i] = rule.kept_weight(g_row[i]);
    if (!total) return 0.0f;
    __syncthreads();  // the owners read weights other threads wrote (shared and global)
    const Row wr{lg.s, ws, lg.cap};
    float s = 0.0f;
    if (threadIdx.x < kThreads) {
        for (int64_t base = threadIdx.x; base < n; base += kBatch * kThreads) {
            float wv[kBatch];
#pragma unroll
            for (int u = 0; u < kBatch; ++u) {
                const int64_t i = base + u * kThreads;
                wv[u] = i < n ? wr[i] : -1.0f;
            }
#pragma unroll
            for (int u = 0; u < kBatch; ++u)
                if (wv[u] >= 0.0f) s = __fadd_rn(s, wv[u]);
        }
    }
    return owner_sum(s, sm.red.scratch);
}

// The largest weight w* (as float bits in [0, 1]) whose kept mass
// S(w*) = sum of kept w_i >= w* reaches `target`. Invariant: the answer lies in
// [lo, hi] and `above` is the kept mass of weights above hi.
// Passes 0 and 1 read the whole weight row; pass 1 also writes each thread's
// in-range weights, in its order, to cw (thread t's j-th at cw[j·256 + t]); the
// later passes (ranges inside pass 1's) read only that list: the same weights
// in the same order, so the same sums.
// Owner t's cells are split among its kGroups threads (t + g·256 updates the
// buckets b with b % kGroups == g): each reads all of owner t's weights in
// order and adds those of its buckets, so every cell gets the same additions
// in the same order as when one thread did them all, in a quarter of the chain.
__device__ __forceinline__ float top_p_threshold(const Row ws, float* cw, int64_t n, float target,
                                                 SampleShared& sm) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int own = tid % kThreads, grp = tid / kThreads;  // grp: warp-uniform
    uint32_t lo = 0, hi = 0x3f800000u;  // weights lie in [0, 1]
    float above = 0.0f;
    int pass = 0, n_cand = 0;  // the owner's entries in cw (every thread of the group counts them)
    const auto add = [&](float w, int shift) {  // one weight of the owner, in order
        if (!(w >= 0.0f)) return false;  // dropped by top-k
        const uint32_t key = __float_as_uint(w);
        if (key < lo || key > hi) return false;
        const uint32_t b = (key - lo) >> shift;
        if ((int)(b % kGroups) == grp) {
            float& cell = sm.u.bsum[b][own];
            cell = __fadd_rn(cell, w);
        }
        return true;
    };
    while (lo < hi) {
        const uint32_t span = hi - lo;
        int shift = 0;
        while ((span >> shift) >= (uint32_t)kBuckets) ++shift;
        const int nb = (int)(span >> shift) + 1;

#pragma unroll
        for (int b = grp; b < kBuckets; b += kGroups) sm.u.bsum[b][own] = 0.0f;
        if (pass < 2) {
            for (int64_t base = own; base < n; base += kBatch * kThreads) {
                float wv[kBatch];
#pragma unroll
                for (int u = 0; u < kBatch; ++u) {
                    const int64_t i = base + u * kThreads;
                    wv[u] = i < n ? ws[i] : -1.0f;
                }
#pragma unroll
                for (int u = 0; u < kBatch; ++u)
                    if (add(wv[u], shift) && pass == 1) {
                        if (grp == 0) cw[(int64_t)n_cand * kThreads + own] = wv[u];
                        ++n_cand;
                    }
            }
        } else {
            for (int j0 = 0; j0 < n_cand; j0 += kBatch) {
                float wv[kBatch];
#pragma unroll
                for (int u = 0; u < kBatch; ++u) wv[u] = j0 + u < n_cand ? cw[(int64_t)(j0 + u) * kThreads + own] : -1.0f;
#pragma unroll
                for (int u = 0; u < kBatch; ++u) add(wv[u], shift);
            }
        }
        ++pass;
        __syncthreads();
        // Bucket totals: each sums its 256 owner cells in a fixed order (warp w takes buckets w, w + 32, ...).
        for (int b = warp; b < kBuckets; b += kBlockWarps) {
            float v = 0.0f;
#pragma unroll
            for (int j = 0; j < kThreads / 32; ++j) v = __fadd_rn(v, sm.u.bsum[b][lane + 32 * j]);
            v = warp_sum(v);
            if (lane == 0) sm.btot[b] = v;
        }
        __syncthreads();
        if (tid == 0) {
            float suf = 0.0f, above_chosen = 0.0f;
            int chosen = 0;
            for (int b = nb - 1; b >= 0; --b) {
                above_chosen = suf;
                suf = __fadd_rn(suf, sm.btot[b]);
                if (__fadd_rn(above, suf) >= target) {
                    chosen = b;
                    break;
                }
            }
            // Without a hit (rounding only), bucket 0 is kept: above_chosen is then the mass of buckets 1..nb-1.
            const uint32_t new_lo = lo + ((uint32_t)chosen << shift);
            const uint32_t new_hi = new_lo + ((1u << shift) - 1u);
            sm.lo = new_lo;
            sm.hi = new_hi < hi ? new_hi : hi;
            sm.above = __fadd_rn(above, above_chosen);
        }
        __syncthreads();
        lo = sm.lo;
        hi = sm.hi;
        above = sm.above;
        __syncthreads();  // sm.lo/hi/above and bsum are rewritten by the next pass
    }
    return __uint_as_float(lo);
}

__device__ __forceinline__ uint64_t splitmix64(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// strata_random_uniform on the device (rng.h): 24 random bits, exact in float.
__device__ __forceinline__ float random_uniform(uint64_t seed, int64_t position) {
    const uint64_t h = splitmix64(seed ^ splitmix64((uint64_t)position));
    return (float)(h >> 40) * (1.0f / 16777216.0f);
}

// The first kept id whose running weight sum exceeds u · total (see the file comment).
// ws: the row's weights (−1: dropped by top-k); w_min >= 0, so −1 is never counted.
__device__ __forceinline__ int32_t draw(const Row ws, int64_t n, float w_min, float u, SampleShared& sm) {
    const int tid = threadIdx.x;
    const bool owner = tid < kThreads;  // chunk t belongs to owner t; the other threads only meet the barriers
    const int64_t chunk = (n + kThreads - 1) / kThreads;
    const int64_t first = (int64_t)tid * chunk, last = owner ? min(first + chunk, n) : first;
    const int64_t len = last > first ? last - first : 0;
    // Lane l reads its chunk's j-th id at step j + skew·l: with an even chunk
    // length (skew 1) or an odd one (skew 0) the 32 lanes of a step then read
    // 32 different banks. Each thread still adds its chunk in ascending order.
    const int64_t skew = chunk % 2 == 0 ? 1 : 0, lag = skew * (tid & 31);
    float s = 0.0f;
    for (int64_t step = 0; owner && step < chunk + 31 * skew; step += kBatch) {
        float wv[kBatch];
#pragma unroll
        for (int j = 0; j < kBatch; ++j) {
            const int64_t k = step + j - lag;
            wv[j] = k >= 0 && k < len ? ws[first + k] : -1.0f;
        }
#pragma unroll
        for (int j = 0; j < kBatch; ++j)
            if (wv[j] >= w_min) s = __fadd_rn(s, wv[j]);
    }
    if (owner) sm.u.d.chunk[tid] = s;
    if (tid == 0) sm.result = -1;
    __syncthreads();
    if (tid == 0) {  // the same sequential prefix, chunk sums read 16 at a time
        float p = 0.0f;
        sm.u.d.prefix[0] = 0.0f;
        for (int t0 = 0; t0 < kThreads; t0 += 16) {
            float c[16];
#pragma unroll
            for (int j = 0; j < 16; ++j) c[j] = sm.u.d.chunk[t0 + j];
#pragma unroll
            for (int j = 0; j < 16; ++j) {
                p = __fadd_rn(p, c[j]);
                sm.u.d.prefix[t0 + j + 1] = p;
            }
        }
    }
    __syncthreads();
    const float target = __fmul_rn(u, sm.u.d.prefix[kThreads]);
    SAMPLE_TRACE(3, sm.u.d.prefix[kThreads]);
    SAMPLE_TRACE(4, target);
    const float base = owner ? sm.u.d.prefix[tid] : 0.0f;
    if (owner && base <= target && target < sm.u.d.prefix[tid + 1]) {
        float r = 0.0f;
        bool found = false;
        for (int64_t i0 = first; i0 < last && !found; i0 += kBatch) {
            float wv[kBatch];
#pragma unroll
            for (int j = 0; j < kBatch; ++j) wv[j] = i0 + j < last ? ws[i0 + j] : -1.0f;
            for (int j = 0; j < kBatch; ++j) {
                if (!(wv[j] >= w_min)) continue;  // also the padding past `last`
                r = __fadd_rn(r, wv[j]);
                if (__fadd_rn(base, r) > target) {
                    sm.result = (int32_t)(i0 + j);
                    found = true;
                    break;
                }
            }
        }
    }
    __syncthreads();
    const int32_t result = sm.result;
    __syncthreads();
    return result;
}

__global__ void __launch_bounds__(kArgmaxThreads) argmax_kernel(const ArgmaxArgs a) {
    pdl_wait();  // first: see cuda_pdl.cuh
    pdl_launch_dependents();
    __shared__ ReduceSharedT<kArgmaxThreads / 32> sm;
    for (int64_t r = blockIdx.x; r < a.n_rows; r += gridDim.x) {
        const Best b = row_argmax<kArgmaxThreads / 32, 4, false>(a.logits + r * a.n_vocab, a.n_vocab, sm, nullptr);
        if (threadIdx.x == 0) a.out_ids[r] = b.i == INT32_MAX ? 0 : b.i;
    }
}

// Scratch floats per CTA: the weight row (n) and the top-p candidate list (n rounded up to 256).
__host__ __device__ __forceinline__ int64_t sample_scratch_floats(int64_t n) {
    return n + (n + kThreads - 1) / kThreads * kThreads;
}

// ws_all: kSampleBlocks (at most) scratch areas of sample_scratch_floats(n_vocab), one per CTA.
// Dynamic shared memory: SampleShared, then the shared row of `cap` floats
// (cap a multiple of 256; ids >= cap use the global weight row).
__global__ void __launch_bounds__(kBlock) sample_kernel(const SampleArgs a, float* ws_all, int64_t cap) {
    pdl_wait();  // first: see cuda_pdl.cuh
    pdl_launch_dependents();
    SampleShared& sm = *dynamic_smem<SampleShared>();
    float* srow = reinterpret_cast<float*>(&sm + 1);
    float* ws = ws_all + (int64_t)blockIdx.x * sample_scratch_floats(a.n_vocab);  // then the top-p list
    float* cw = ws + a.n_vocab;
    for (int64_t r = blockIdx.x; r < a.n_rows; r += gridDim.x) {
        const float* lg_row = a.logits + r * a.n_vocab;
        const strata_sampling_params prm = a.params[r];
        SAMPLE_TRACE_ROW(r);
        int n_ok = 0;
        const Best best = row_argmax<kBlockWarps, 4, true>(lg_row, a.n_vocab, sm.red, &n_ok, srow, cap, sm.u.r.tmax);
        const Row lg{srow, lg_row, cap};  // the logits, then (after weights_pass) the weights:
        const Row wr{srow, ws, cap};      // the same shared ids, another global row
        int32_t token = best.i == INT32_MAX ? 0 : best.i;

        // Greedy for T <= 0 (or NaN) and for rows without a finite-or-+inf maximum.
        const bool greedy = best.i == INT32_MAX || best.v == __int_as_float(0xff800000) || !(prm.temperature > 0.0f);
        if (!greedy) {  // every branch below is block-uniform
            RowRule rule;
            rule.m = best.v;
            rule.T = prm.temperature;
            rule.use_k = prm.top_k > 0 && prm.top_k < n_ok;
            rule.thr_l = rule.use_k ? top_k_threshold(lg, a.n_vocab, prm.top_k, sm) : 0.0f;
            SAMPLE_TRACE(0, rule.thr_l);

            const bool top_p = prm.top_p < 1.0f;
            const float total = weights_pass(lg, a.n_vocab, rule, ws, top_p, sm);
            SAMPLE_TRACE(1, total);
            float w_min = 0.0f;
            if (top_p) {
                const float target = __fmul_rn(fmaxf(prm.top_p, 0.0f), total);
                w_min = top_p_threshold(wr, cw, a.n_vocab, target, sm);
            }
            if (prm.min_p > 0.0f) w_min = fmaxf(w_min, fminf(prm.min_p, 1.0f));
            SAMPLE_TRACE(2, w_min);

            __syncthreads();  // the draw reads other threads' weights
            const int32_t drawn = draw(wr, a.n_vocab, w_min, random_uniform(prm.seed, prm.position), sm);
            if (drawn >= 0) token = drawn;
        }
        if (threadIdx.x == 0) a.out_ids[r] = token;
        __syncthreads();
    }
}

unsigned row_grid(int64_t n_rows) { return (unsigned)(n_rows < (1 << 30) ? n_rows : (1 << 30)); }

constexpr int64_t kSampleBlocks = 128;  // sample CTAs at most (each keeps one weight row in scratch)

}  // namespace

// ------------------------------------------------------------------ host (not in the emulator)

namespace {

// The largest dynamic shared memory a sample block may use on the current
// device; the first call per device raises the kernel's limit to it. A
// function attribute, not stream work: relaxed capture mode around it (as in
// cuda_attention.cu) keeps a first call during graph recording harmless.
int64_t sample_smem_limit() {
    constexpr int kMaxDevices = 64;
    static std::mutex mu;
    static int limit[kMaxDevices] = {};
    int dev = 0;
    check(cudaGetDevice(&dev), "cudaGetDevice");
    std::lock_guard<std::mutex> lock(mu);
    if (dev >= 0 && dev < kMaxDevices && limit[dev] > 0) return limit[dev];
    int optin = 0;
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    (void)cudaThreadExchangeStreamCaptureMode(&mode);
    cudaError_t err = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    if (err == cudaSuccess) err = cudaFuncSetAttribute(sample_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin);
    (void)cudaThreadExchangeStreamCaptureMode(&mode);
    check(err, "cudaFuncSetAttribute (sample shared memory)");
    if (dev >= 0 && dev < kMaxDevices) limit[dev] = optin;
    return optin;
}

}  // namespace

void launch_argmax(const ArgmaxArgs& a, cudaStream_t stream) {
    if (a.n_rows <= 0 || a.n_vocab <= 0) return;
    launch_k(argmax_kernel, row_grid(a.n_rows), kArgmaxThreads, 0, stream, a);
    check_launch("argmax");
}

void launch_sample(const SampleArgs& a, cudaStream_t stream, Scratch& scratch) {
    if (a.n_rows <= 0 || a.n_vocab <= 0) return;
    const int64_t blocks = a.n_rows < kSampleBlocks ? a.n_rows : kSampleBlocks;
    float* ws = static_cast<float*>(scratch.get((size_t)(blocks * sample_scratch_floats(a.n_vocab)) * sizeof(float)));
    // The shared row: the whole vocabulary when it fits (49,664 ids on sm_90), else its head.
    const int64_t head = (int64_t)sizeof(SampleShared);
    int64_t cap = (sample_smem_limit() - head) / (int64_t)sizeof(float) / kThreads * kThreads;
    const int64_t whole = (a.n_vocab + kThreads - 1) / kThreads * kThreads;
    cap = cap < 0 ? 0 : (cap < whole ? cap : whole);
    const size_t smem = (size_t)(head + cap * (int64_t)sizeof(float));
    launch_k(sample_kernel, (unsigned)blocks, kBlock, smem, stream, a, ws, cap);
    check_launch("sample");
}

}  // namespace cuda
}  // namespace strata

// sample_v1.h — the seeded sampler as it was before the shared-memory row
// (libstrata/src/cuda/cuda_sample.cu at commit 6a7a64e: one 256-thread block
// per row reading the logits and a global weight row pass by pass), kept for
// the emulator only: test_sample.cpp checks that the current kernel draws the
// very same token as this one on every row, with the same intermediate values
// (bit-identical draws, docs/cuda_backend.md); only the SAMPLE_TRACE hooks
// were added. Not built into the library.
#pragma once
#include <climits>

#include "cuda_common.cuh"
#include "cuda_kernels.cuh"
#include "cuda_scratch.cuh"

namespace strata {
namespace cuda {
namespace sample_v1 {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kBuckets = 32;  // top-p search: buckets per pass (5 bits)
constexpr int kRadix = 256;   // top-k select: 8-bit digits

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

struct SampleShared {
    ReduceShared red;
    union {
        float bsum[kBuckets][kThreads];  // top-p: per-thread bucket sums (column per thread: no bank conflicts)
        float chunk[kThreads];           // draw: chunk sums
    } u;
    float prefix[kThreads + 1];
    float btot[kBuckets];
    int hist[kRadix];
    int scan[kRadix];  // radix select: counts at digits >= d
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
// order (16-byte loads, 4 in flight, when the row allows) cannot change it.
template <int W>
__device__ __forceinline__ Best row_argmax(const float* lg, int64_t n, ReduceSharedT<W>& sm, int* n_ok) {
    constexpr int T = 32 * W;
    Best b{__int_as_float(0xff800000), INT32_MAX};
    int ok = 0;
    int64_t i = threadIdx.x;
    if (reinterpret_cast<uintptr_t>(lg) % 16 == 0) {
        const int64_t n4 = n / 4;
        const float4* v = reinterpret_cast<const float4*>(lg);
        int64_t q = threadIdx.x;
        for (; q + 3 * T < n4; q += 4 * T) {
            float4 x[4];
#pragma unroll
            for (int u = 0; u < 4; ++u) x[u] = v[q + u * T];
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                const int64_t e = 4 * (q + u * T);
                consider(b, ok, x[u].x, e);
                consider(b, ok, x[u].y, e + 1);
                consider(b, ok, x[u].z, e + 2);
                consider(b, ok, x[u].w, e + 3);
            }
        }
        for (; q < n4; q += T) {
            const float4 x = v[q];
            consider(b, ok, x.x, 4 * q);
            consider(b, ok, x.y, 4 * q + 1);
            consider(b, ok, x.z, 4 * q + 2);
            consider(b, ok, x.w, 4 * q + 3);
        }
        i = 4 * n4 + threadIdx.x;
    }
    for (; i < n; i += T) consider(b, ok, lg[i], i);
    if (n_ok) *n_ok = block_count(ok, sm);
    return block_argmax(b, sm);
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

// The k-th largest non-NaN logit (1 <= k <= number of non-NaN logits).
__device__ __forceinline__ float kth_largest(const float* lg, int64_t n, int k, SampleShared& sm) {
    uint32_t prefix = 0, mask = 0;
    int kk = k;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int d = threadIdx.x; d < kRadix; d += kThreads) sm.hist[d] = 0;
        __syncthreads();
        // Lanes of a warp with the same digit add once (logits of one row share
        // their leading digits: per-lane atomics would serialize 32-way).
        // Integer counts: exact in any order. Every lane runs every iteration.
        constexpr int kLoads = 4;  // loads in flight per thread
        for (int64_t base = 0; base < n; base += kLoads * kThreads) {
            float lv[kLoads];
#pragma unroll
            for (int u = 0; u < kLoads; ++u) {
                const int64_t i = base + u * kThreads + threadIdx.x;
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
                    atomicAdd(&sm.hist[digit], __popc(peers));
            }
        }
        __syncthreads();
        // The digit: the largest d >= 1 whose count of keys at digits >= d reaches kk, else 0
        // (the counts at digits >= d by an inclusive suffix scan: integers, exact).
        for (int d = threadIdx.x; d < kRadix; d += kThreads) sm.scan[d] = sm.hist[d];
        __syncthreads();
        for (int off = 1; off < kRadix; off <<= 1) {
            int v[kRadix / kThreads > 0 ? kRadix / kThreads : 1];
            int j = 0;
            for (int d = threadIdx.x; d < kRadix; d += kThreads, ++j) v[j] = d + off < kRadix ? sm.scan[d + off] : 0;
            __syncthreads();
            j = 0;
            for (int d = threadIdx.x; d < kRadix; d += kThreads, ++j) sm.scan[d] += v[j];
            __syncthreads();
        }
        for (int d = threadIdx.x; d < kRadix; d += kThreads) {
            const int at_or_above = sm.scan[d], above = d + 1 < kRadix ? sm.scan[d + 1] : 0;
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
};

constexpr int kBatch = 8;  // loads in flight per thread in the weight passes

// ws[i] = w_i for tokens top-k keeps, −1 for the others (thread t writes, and
// later reads in the top-p passes, exactly its elements t, t+256, …). Returns
// the kept mass when `total` (block-uniform): thread t's sum over its elements
// in ascending order, then block_sum.
__device__ __forceinline__ float weights_pass(const float* lg, int64_t n, const RowRule& rule, float* ws, bool total,
                                              SampleShared& sm) {
    float s = 0.0f;
    for (int64_t base = threadIdx.x; base < n; base += kBatch * kThreads) {
        float lv[kBatch];
#pragma unroll
        for (int u = 0; u < kBatch; ++u) {
            const int64_t i = base + u * kThreads;
            lv[u] = i < n ? lg[i] : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < kBatch; ++u) {
            const int64_t i = base + u * kThreads;
            if (i < n) {
                const bool kept = rule.kept_k(lv[u]);
                const float w = kept ? rule.weight(lv[u]) : -1.0f;
                ws[i] = w;
                if (kept) s = __fadd_rn(s, w);
            }
        }
    }
    return total ? block_sum<kWarps>(s, sm.red.scratch) : 0.0f;
}

// The largest weight w* (as float bits in [0, 1]) whose kept mass
// S(w*) = sum of kept w_i >= w* reaches `target`. Invariant: the answer lies in
// [lo, hi] and `above` is the kept mass of weights above hi.
// Passes 0 and 1 read the whole weight row; pass 1 also writes each thread's
// in-range weights, in its order, to cw (thread t's j-th at cw[j·256 + t]); the
// later passes (ranges inside pass 1's) read only that list: the same weights
// in the same order, so the same sums.
__device__ __forceinline__ float top_p_threshold(const float* ws, float* cw, int64_t n, float target,
                                                 SampleShared& sm) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    uint32_t lo = 0, hi = 0x3f800000u;  // weights lie in [0, 1]
    float above = 0.0f;
    int pass = 0, n_cand = 0;  // this thread's entries in cw
    const auto add = [&](float w, int shift) {  // one weight of this thread, in order
        if (!(w >= 0.0f)) return false;  // dropped by top-k
        const uint32_t key = __float_as_uint(w);
        if (key < lo || key > hi) return false;
        float& cell = sm.u.bsum[(key - lo) >> shift][tid];
        cell = __fadd_rn(cell, w);
        return true;
    };
    while (lo < hi) {
        const uint32_t span = hi - lo;
        int shift = 0;
        while ((span >> shift) >= (uint32_t)kBuckets) ++shift;
        const int nb = (int)(span >> shift) + 1;

#pragma unroll
        for (int b = 0; b < kBuckets; ++b) sm.u.bsum[b][tid] = 0.0f;
        if (pass < 2) {
            for (int64_t base = tid; base < n; base += kBatch * kThreads) {
                float wv[kBatch];
#pragma unroll
                for (int u = 0; u < kBatch; ++u) {
                    const int64_t i = base + u * kThreads;
                    wv[u] = i < n ? ws[i] : -1.0f;
                }
#pragma unroll
                for (int u = 0; u < kBatch; ++u)
                    if (add(wv[u], shift) && pass == 1) cw[(int64_t)(n_cand++) * kThreads + tid] = wv[u];
            }
        } else {
            for (int j0 = 0; j0 < n_cand; j0 += kBatch) {
                float wv[kBatch];
#pragma unroll
                for (int u = 0; u < kBatch; ++u) wv[u] = j0 + u < n_cand ? cw[(int64_t)(j0 + u) * kThreads + tid] : -1.0f;
#pragma unroll
                for (int u = 0; u < kBatch; ++u) add(wv[u], shift);
            }
        }
        ++pass;
        __syncthreads();
        // Bucket totals: warp w sums buckets w, w + 8, ... over threads in a fixed order.
        for (int b = warp; b < kBuckets; b += kWarps) {
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
__device__ __forceinline__ int32_t draw(const float* ws, int64_t n, float w_min, float u, SampleShared& sm) {
    const int tid = threadIdx.x;
    const int64_t chunk = (n + kThreads - 1) / kThreads;
    const int64_t first = (int64_t)tid * chunk, last = min(first + chunk, n);
    float s = 0.0f;
    for (int64_t base = first; base < last; base += kBatch) {
        float wv[kBatch];
#pragma unroll
        for (int j = 0; j < kBatch; ++j) wv[j] = base + j < last ? ws[base + j] : -1.0f;
#pragma unroll
        for (int j = 0; j < kBatch; ++j)
            if (wv[j] >= w_min) s = __fadd_rn(s, wv[j]);
    }
    sm.u.chunk[tid] = s;
    if (tid == 0) sm.result = -1;
    __syncthreads();
    if (tid == 0) {  // the same sequential prefix, chunk sums read 16 at a time
        float p = 0.0f;
        sm.prefix[0] = 0.0f;
        for (int t0 = 0; t0 < kThreads; t0 += 16) {
            float c[16];
#pragma unroll
            for (int j = 0; j < 16; ++j) c[j] = sm.u.chunk[t0 + j];
#pragma unroll
            for (int j = 0; j < 16; ++j) {
                p = __fadd_rn(p, c[j]);
                sm.prefix[t0 + j + 1] = p;
            }
        }
    }
    __syncthreads();
    const float target = __fmul_rn(u, sm.prefix[kThreads]);
    SAMPLE_TRACE(3, sm.prefix[kThreads]);
    SAMPLE_TRACE(4, target);
    const float base = sm.prefix[tid];
    if (base <= target && target < sm.prefix[tid + 1]) {
        float r = 0.0f;
        for (int64_t i = first; i < last; ++i) {
            const float w = ws[i];
            if (!(w >= w_min)) continue;
            r = __fadd_rn(r, w);
            if (__fadd_rn(base, r) > target) {
                sm.result = (int32_t)i;
                break;
            }
        }
    }
    __syncthreads();
    const int32_t result = sm.result;
    __syncthreads();
    return result;
}

__global__ void __launch_bounds__(kArgmaxThreads) argmax_kernel(const ArgmaxArgs a) {
    __shared__ ReduceSharedT<kArgmaxThreads / 32> sm;
    for (int64_t r = blockIdx.x; r < a.n_rows; r += gridDim.x) {
        const Best b = row_argmax(a.logits + r * a.n_vocab, a.n_vocab, sm, nullptr);
        if (threadIdx.x == 0) a.out_ids[r] = b.i == INT32_MAX ? 0 : b.i;
    }
}

// Scratch floats per CTA: the weight row (n) and the top-p candidate list (n rounded up to 256).
__host__ __device__ __forceinline__ int64_t sample_scratch_floats(int64_t n) {
    return n + (n + kThreads - 1) / kThreads * kThreads;
}

// ws_all: kSampleBlocks (at most) scratch areas of sample_scratch_floats(n_vocab), one per CTA.
__global__ void __launch_bounds__(kThreads) sample_kernel(const SampleArgs a, float* ws_all) {
    __shared__ SampleShared sm;
    float* ws = ws_all + (int64_t)blockIdx.x * sample_scratch_floats(a.n_vocab);  // then the top-p list
    float* cw = ws + a.n_vocab;
    for (int64_t r = blockIdx.x; r < a.n_rows; r += gridDim.x) {
        const float* lg = a.logits + r * a.n_vocab;
        const strata_sampling_params prm = a.params[r];
        SAMPLE_TRACE_ROW(r);
        int n_ok = 0;
        const Best best = row_argmax(lg, a.n_vocab, sm.red, &n_ok);
        int32_t token = best.i == INT32_MAX ? 0 : best.i;

        // Greedy for T <= 0 (or NaN) and for rows without a finite-or-+inf maximum.
        const bool greedy = best.i == INT32_MAX || best.v == __int_as_float(0xff800000) || !(prm.temperature > 0.0f);
        if (!greedy) {  // every branch below is block-uniform
            RowRule rule;
            rule.m = best.v;
            rule.T = prm.temperature;
            rule.use_k = prm.top_k > 0 && prm.top_k < n_ok;
            rule.thr_l = rule.use_k ? kth_largest(lg, a.n_vocab, prm.top_k, sm) : 0.0f;
            SAMPLE_TRACE(0, rule.thr_l);

            const bool top_p = prm.top_p < 1.0f;
            const float total = weights_pass(lg, a.n_vocab, rule, ws, top_p, sm);
            SAMPLE_TRACE(1, total);
            float w_min = 0.0f;
            if (top_p) {
                const float target = __fmul_rn(fmaxf(prm.top_p, 0.0f), total);
                w_min = top_p_threshold(ws, cw, a.n_vocab, target, sm);
            }
            if (prm.min_p > 0.0f) w_min = fmaxf(w_min, fminf(prm.min_p, 1.0f));
            SAMPLE_TRACE(2, w_min);

            __syncthreads();  // the draw reads other threads' weights
            const int32_t drawn = draw(ws, a.n_vocab, w_min, random_uniform(prm.seed, prm.position), sm);
            if (drawn >= 0) token = drawn;
        }
        if (threadIdx.x == 0) a.out_ids[r] = token;
        __syncthreads();
    }
}

unsigned row_grid(int64_t n_rows) { return (unsigned)(n_rows < (1 << 30) ? n_rows : (1 << 30)); }

constexpr int64_t kSampleBlocks = 128;  // sample CTAs at most (each keeps one weight row in scratch)

}  // namespace sample_v1

}  // namespace cuda
}  // namespace strata

// cuda_sample_select.cuh — the select routines of the cluster sampler
// (cuda_sample_cluster.cu, whose header comment is the contract): the block
// scan, the radix select (cluster_select), the bin routes (bin_select and the
// histograms it reads; topk_bins, topp_bins), the legacy top-k candidates
// (topk_gathered) and the candidate lists every gathered route shares.
//
// A fragment, not a stand-alone header: cuda_sample_cluster.cu includes it
// inside its anonymous namespace, after ClusterShared, RowRule and the launch
// constants it uses (one translation unit; the host emulator's copy of the .cu
// includes the copy of this file the same way).

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

// The key of a non-NaN logit itself (the early top-k route: no max needed, so
// pass 1 can count it): 32 bins per octave of |l| from 2^-9 to 2^11 on each
// side of 0, monotone in l. 640 for |l| < 2^-9 (±0 included), 641 up to
// kTopKey for positive l (l >= 2^11 and +inf in kTopKey), 639 down to 0 for
// negative l down to -2^11; kNoBin (not counted) for l <= -2^11, −inf
// included.
__device__ __forceinline__ uint32_t lkey(float l) {
    constexpr uint32_t kLo = 0x3b000000u, kHi = 0x45000000u;  // 2^-9, 2^11
    // Selects, no branches (pass 1 calls it on every logit; the halves of a
    // warp's logits differ in sign); the same values as the branching form
    // over all 2^32 bit patterns (docs/cuda_backend.md, "sample").
    const uint32_t bits = __float_as_uint(l), mag = bits & 0x7fffffffu;
    const uint32_t j = (mag - kLo) >> 18;  // 0 .. 639 for 2^-9 <= |l| < 2^11
    const uint32_t neg = mag < kHi ? kTopKey / 2 - 1 - j : kNoBin;
    const uint32_t pos = mag < kHi ? kTopKey / 2 + 1 + j : kTopKey;
    const uint32_t k = (bits >> 31) ? neg : pos;
    return mag < kLo ? kTopKey / 2 : k;
}

// The smallest float whose lkey is >= b (b <= kTopKey). lkey is monotone, so
// for a non-NaN logit lkey(l) >= b exactly when l >= lkey_floor(b), and the
// logits lkey does not count (l <= -2^11) lie below every floor: a listing
// pass compares each logit with one float instead of computing its key
// (test_sample checks every floor and the float just below it).
__device__ __forceinline__ float lkey_floor(uint32_t b) {
    constexpr uint32_t kLo = 0x3b000000u, kMid = kTopKey / 2;  // kMid: |l| < 2^-9
    if (b > kMid) return __uint_as_float(kLo + ((b - kMid - 1) << 18));
    if (b == kMid) return __uint_as_float(0x80000000u | (kLo - 1));
    return __uint_as_float(0x80000000u | (kLo + ((kMid - b) << 18) - 1));
}

// The smallest weight whose wkey is b (b <= kTopKey + 1: kTopKey + 1 gives
// 1.03125, above every weight): for w >= 0, wkey(w) == b exactly when
// wkey_floor(b) <= w < wkey_floor(b + 1), and w > the bin exactly when
// w >= wkey_floor(b + 1) (positive floats order as their bits).
__device__ __forceinline__ float wkey_floor(uint32_t b) { return __uint_as_float((b + (0x2b800000u >> 18)) << 18); }

// The spare words are the pool's u64 words after both histograms: a histogram
// add that counts nothing goes to one of them, one a lane (no two lanes of a
// warp collide), and nothing reads them, so the add is not branched around
// (ptxas branched around a guarded one, with BSSY/BSYNC reconvergence, even
// written as a predicated red.shared). Every later use of the pool (lists,
// digit histograms) writes before it reads, after a cluster barrier that
// follows these adds.
constexpr int kSpareWords = kFine + kCoarse;  // u64 words kSpareWords .. + 31 of the pool
static_assert(kSpareWords + 32 <= kPool, "the spare words fit the pool");

// Counts one element in bin `key` of a fine histogram of counts (kNoBin: a
// spare word): one 32-bit shared atomic on the bin's low word, whose result
// nobody waits for (little-endian; a CTA's counts stay below 2^32, so the high
// word stays 0). No merge of consecutive adds (a per-thread run, until
// 2026-12-06): a row's logits rarely repeat a bin from one element to the
// next, and the merge cost a compare and a branch an element; counts are
// integers, so any order of the adds gives the same totals.
__device__ __forceinline__ void count_add(u64* fine, uint32_t key) {
    const uint32_t at = key != kNoBin ? key : (uint32_t)kSpareWords + (threadIdx.x & 31u);
    atomicAdd(reinterpret_cast<unsigned*>(fine + at), 1u);
}

// The top-p mass histogram without carries (the weights pass): each element
// adds its mass q = floor(w · 2^40) to its bin by two 32-bit shared atomics
// whose results nobody waits for, in a split form fold_coarse_masses turns
// back into the bin's u64 mass. Bin b holds weights of one binade, exponent
// e = (b >> 5) − 40 (wkey: the float bits' top 14). For w >= 2^-17 (e >= −17)
// w · 2^40 is an integer, q = mant24(w) << s_b with s_b = e + 17 (mant24 the
// 24-bit significand, hidden bit included); below 2^-17 set s_b = 0. Either
// way r = q >> s_b < 2^24 and q = r << s_b exactly, so the bin's mass is
// (Σ r) << s_b. Σ r is kept in the bin's two 32-bit words: low word
// Σ (r & 0xffff), high word Σ (r >> 16). Neither word can overflow, whatever
// the order: a CTA's slice holds len < 2^16 + 1 ids (launch_sample refuses a
// larger slice; shared memory holds ~58k floats at most anyway), so the low word sums at
// most 65,536 · 65,535 < 2^32 and the high word at most 65,536 · 255 < 2^24.
// The bin's mass is then ((high << 16) + low) << s_b: the same integer as the
// sum of its q in any order (integers, no word wrapped). No merge of runs: an
// add is two instructions and no branch, where a merged 64-bit add waited
// for its low word's old value to carry.
constexpr float kExactMassWeight = 0x1p-17f;  // w >= 2^-17: w · 2^40 is an integer
constexpr int kMaxSplitSlice = 65536;          // the split mass histogram's bound on len (above)
// Any w (−1 for a dropped token, 0 .. 1): a weight without a mass (w < 2^-40)
// adds to a spare word instead, so the weights pass has no branch at all.
// Below 2^-17 the mass q = floor(w · 2^40) < 2^23 is formed in 32 bits (w
// clamped first: the conversion is never out of range, whichever side the
// select takes).
__device__ __forceinline__ void mass_hist_add(u64* fine, float w) {
    const uint32_t bits = __float_as_uint(w);
    const uint32_t q_low = (uint32_t)(fminf(fmaxf(w, 0.0f), kExactMassWeight) * kMassScale);
    const uint32_t r = w >= kExactMassWeight ? ((bits & 0x7fffffu) | 0x800000u) : q_low;  // q >> s_b
    const uint32_t at = w >= kMinMassWeight ? wkey(w) : (uint32_t)kSpareWords + (threadIdx.x & 31u);
    unsigned* const h = reinterpret_cast<unsigned*>(&fine[at]);  // little-endian: low word first
    atomicAdd(&h[0], r & 0xffffu);
    atomicAdd(&h[1], r >> 16);
}

// fold_coarse for the split mass histogram: each fine bin turned back into its
// u64 mass (in place: every CTA then reads true masses), then folded. The
// thread that rewrites a bin is the one that reads it, so no barrier between.
// Returns the mass of the coarse bins this warp folded (the same in every lane).
__device__ __forceinline__ u64 fold_coarse_masses(ClusterShared& sm) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    u64 part = 0;
    for (int cb = warp; cb < kCoarse; cb += kWarps) {
        u64* const f = &sm.fine()[cb * kFinePer + lane];
        const u64 raw = *f;
        const int shift = cb > 23 ? cb - 23 : 0;  // s_b: cb = b >> 5 = e + 40
        u64 v = (((raw >> 32) << 16) + (raw & 0xffffffffull)) << shift;
        *f = v;
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(kFullMask, v, off);
        if (lane == 0) sm.coarse()[cb] = v;
        part += v;
    }
    return part;
}

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
// histogram-buffer parity of the row (one cluster barrier per digit). The
// histograms live in the pool: no other CTA may still read this CTA's pool
// when it is called, and the last digit's remote reads end without a barrier
// (the caller's next cluster barrier must precede any other use of the pool).
template <int C, bool kCount, class KeyOf>
__device__ __forceinline__ uint32_t cluster_select(ClusterShared& sm, const float* s, int len, int ch, u64 target,
                                                   int& ph, KeyOf key_of) {
    const int tid = threadIdx.x, warp = tid >> 5;
    uint32_t prefix = 0, mask = 0;
    u64 above = 0;  // mass of the keys above the current range
    for (int d = tid; d < kBins; d += kThreads) sm.hist(ph)[d] = 0;  // the pool's earlier contents (each digit zeroes the next buffer)
    __syncthreads();
    for (int shift = 24; shift >= 0; shift -= 8) {
        u64* h = sm.hist(ph);
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
            for (int c = 0; c < C; ++c) hd[k] += cluster_map(sm.hist(ph) + d, c)[0];
            sm.hist(ph + 1)[d] = 0;  // last read remotely before the barrier above
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

// The union of the CTAs' lists once gathered: m logits or weights (v) and
// their ids (i), in this CTA's pool.
struct Gathered {
    float* v;
    int32_t* i;
    int m;
};

// The most candidates gathered beside the pool words bin_select read (the
// publishing gather barrier, below): v and i of kSafeGather words each fit
// the larger of the two stretches of fine-histogram words around the 32 fine
// bins of the one coarse bin read (the coarse bins lie above them all).
constexpr int kSafeGather = 640;
static_assert(2 * kFine - 2 * kFinePer >= 2 * (2 * kSafeGather), "the larger stretch holds both arrays");

// After every CTA's list_candidates: one cluster barrier, then every CTA
// copies the union of the lists (in CTA order) into its pool. Returns false
// (cluster-uniform: every CTA reads the same counts) when a list or the
// union overflows; nothing is copied then, and the pool is free for the
// radix select (a full barrier closed the other CTAs' reads of it).
// read_cb: the coarse bin whose 32 fine bins (and the coarse bins) the other
// CTAs read from this pool since the last full barrier (bin_select), or -1
// for none. With fence == kFenceCluster the barrier only publishes the lists
// (cluster_sync_publish), so the union must not overwrite those words before
// a full barrier: up to kSafeGather candidates go into the larger stretch of
// the pool beside them, more into the usual place after a full barrier.
template <int C>
__device__ bool gather_lists(ClusterShared& sm, int fence, int read_cb, Gathered* g) {
    const int tid = threadIdx.x;
    const bool publish = fence == kFenceCluster;
    // Every CTA's list and count. Publishing is enough for them (this CTA's
    // words); the remote reads before it are closed below or stay untouched.
    publish_barrier(fence);
    if (tid < C) sm.gcount[tid] = cluster_map(&sm.n_cand, tid)[0];
    __syncthreads();
    int m = 0;
    bool fits = true;
    for (int c = 0; c < C; ++c) {
        fits = fits && sm.gcount[c] <= kCandCap;
        m += sm.gcount[c];
    }
    if (!fits || m > kGatherCap) {
        if (publish) cluster_sync();  // the caller's radix select reuses the pool
        return false;
    }
    float* gv = sm.gv();
    int32_t* gi = sm.gi();
    if (publish && read_cb >= 0) {
        if (m <= kSafeGather) {  // beside the words read: [lo, lo + 64) and the coarse bins
            uint32_t* const w = reinterpret_cast<uint32_t*>(sm.pool);
            const int lo = 2 * kFinePer * read_cb;  // 32-bit words
            uint32_t* const base = lo >= 2 * kSafeGather ? w : w + lo + 2 * kFinePer;
            gv = reinterpret_cast<float*>(base);
            gi = reinterpret_cast<int32_t*>(base + kSafeGather);
        } else {
            cluster_sync();  // the union reaches the words read: close those reads first
        }
    }
    for (int e = tid; e < m; e += kThreads) {
        int c = 0, idx = e;
        while (idx >= sm.gcount[c]) idx -= sm.gcount[c++];
        gv[e] = cluster_map(&sm.cand_v[idx], c)[0];
        gi[e] = cluster_map(&sm.cand_i[idx], c)[0];
    }
    __syncthreads();
    *g = Gathered{gv, gi, m};
    return true;
}

// The O(m²) loops of topk_finish give each candidate G lanes (a power of two,
// G <= 32, the largest with m · G <= kThreads): lane r of a group takes every
// G-th other candidate from r, and the group sums its integers by shuffles
// (exact in any order). With one lane per candidate, m ≈ 50 left 200 of 256
// threads idle while each of the others walked the whole list three times,
// and the CTA's barrier after each loop waited for that walk (ncu,
// 2026-12-06: bench/RESULTS.md).
__device__ __forceinline__ int finish_group(int m) {
    int g = 1;
    while (g < 32 && 2 * g * m <= kThreads) g *= 2;
    return g;
}

// Runs body(j, r) over rounds in which lane group tid / G takes candidate j
// (j >= m: none this round) as its lane r = tid % G; every lane runs every
// round, so shuffles inside body see whole warps.
template <class Body>
__device__ __forceinline__ void grouped_rounds(int m, int G, Body body) {
    const int tid = threadIdx.x, per_round = kThreads / G;
    for (int base = 0; base < m; base += per_round) body(base + tid / G, tid % G);
}

// The sum of v over a lane group of G (contiguous lanes, G divides 32).
template <class T>
__device__ __forceinline__ T group_sum(T v, int G) {
    for (int off = G / 2; off > 0; off >>= 1) v += __shfl_xor_sync(kFullMask, v, off);
    return v;
}

// Top-k's finish on m gathered logits that hold every logit >= the row's k-th
// largest (so a candidate's rank among them is its rank in the row): the k-th
// largest by ranking, the kept weights and masses, w* as the largest kept
// weight whose S(w) reaches the target, min-p, and the draw as the lowest kept
// id whose running mass (ids at or below it) exceeds D. The same integers as
// the radix route, so the same token. Opens the exit barrier at once (no
// remote read follows; a full barrier: it also closes the reads the
// publishing gather barrier left open) and closes it at the end.
__device__ void topk_finish(ClusterShared& sm, const Gathered& g, int64_t row, int rank,
                            const strata_sampling_params& prm, const RowRule& rule0, int32_t* out) {
    const int tid = threadIdx.x;
    const int k = prm.top_k;
    float* const gv = g.v;
    const int32_t* const gi = g.i;
    const int m = g.m;
    const int G = finish_group(m);
    SAMPLE_PHASE(5);
    cluster_arrive();  // every remote read is done; no CTA leaves before all have arrived (cluster_wait)
    grouped_rounds(m, G, [&](int j, int r) {
        const float v = j < m ? gv[j] : 0.0f;
        int gt = 0, ge = 0;
        if (j < m)
            for (int i = r; i < m; i += G) {
                const float o = gv[i];
                gt += o > v;
                ge += o >= v;
            }
        gt = group_sum(gt, G);
        ge = group_sum(ge, G);
        if (j < m && r == 0 && gt < k && k <= ge) sm.kth = v;  // the writers' values compare equal
    });
    __syncthreads();
    SAMPLE_PHASE(6);
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
        grouped_rounds(m, G, [&](int j, int r) {
            const float v = j < m ? gv[j] : -1.0f;
            const bool live = v >= 0.0f && mass_of(fmaxf(v, 0.0f)) != 0;
            u64 at_or_above = 0;
            if (live)
                for (int i = r; i < m; i += G) {
                    const float o = gv[i];
                    if (o >= v) at_or_above += mass_of(o);
                }
            at_or_above = group_sum(at_or_above, G);
            if (live && r == 0 && at_or_above >= target)
                atomicMax(&sm.wstar, __float_as_uint(v));  // w >= 0: bits order as values
        });
        __syncthreads();
        w_min = __uint_as_float(sm.wstar);
    }
    if (prm.min_p > 0.0f) w_min = fmaxf(w_min, fminf(prm.min_p, 1.0f));
    if (w_min > 0.0f) {  // CTA-uniform; with w_min = 0 the kept set, so its mass, is the one summed above
        q = 0;
        for (int j = tid; j < m; j += kThreads) {
            const float w = gv[j];
            if (w >= w_min && w >= 0.0f) q += mass_of(w);
        }
        (void)block_scan(q, sm, &total);
    }
    const u64 target = (u64)(((unsigned __int128)random_u24(prm.seed, prm.position) * total) >> 24);
    if (tid == 0) sm.token = INT32_MAX;
    __syncthreads();
    grouped_rounds(m, G, [&](int j, int r) {
        const float v = j < m ? gv[j] : -1.0f;
        const bool live = v >= w_min && v >= 0.0f;
        const int32_t id = j < m ? gi[j] : 0;
        u64 run = 0;
        if (live)
            for (int i = r; i < m; i += G) {
                const float o = gv[i];
                if (o >= w_min && o >= 0.0f && gi[i] <= id) run += mass_of(o);
            }
        run = group_sum(run, G);
        if (live && r == 0 && run > target) atomicMin(&sm.token, id);
    });
    __syncthreads();
    if (rank == 0 && tid == 0) {
        out[row] = sm.token;
        SAMPLE_ROUTE(kTopkGathered);
    }
    SAMPLE_PHASE(7);
    cluster_wait();
}

// Both list routes' end: every CTA's list gathered, then topk_finish on their union. Returns false
// (cluster-uniform) when a list overflowed; the caller then takes the radix route.
template <int C>
__device__ bool topk_from_lists(ClusterShared& sm, int64_t row, int rank, const strata_sampling_params& prm,
                                const RowRule& rule, int32_t* out, int fence, int read_cb) {
    Gathered g;
    if (!gather_lists<C>(sm, fence, read_cb, &g)) {
        if (rank == 0 && threadIdx.x == 0) SAMPLE_ROUTE(kTopkRadixAfterOverflow);
        return false;
    }
    topk_finish(sm, g, row, rank, prm, rule, out);
    return true;
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
                              const strata_sampling_params& prm, const RowRule& rule0, int32_t* out, int fence) {
    const int tid = threadIdx.x;
    const int k = prm.top_k;
    {
        const float v = sm.tmax()[tid];
        int gt = 0, ge = 0;
        for (int t = 0; t < kThreads; ++t) {
            const float o = sm.tmax()[t];
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
    return topk_from_lists<C>(sm, row, rank, prm, rule0, out, fence, -1);  // no CTA read this pool
}

// The tail both bin top-k routes share, once every CTA's fine histogram of
// logit counts by key(l) (monotone in l; kNoBin: not counted, only below
// every counted logit) is published: bin_select finds the bin of the k-th
// largest logit, every CTA lists its logits in that bin or above (fewer than
// k above it, plus the bin's own: a handful where logits are spread),
// topk_finish on their union. One cluster barrier and the exit barrier.
// Returns false (cluster-uniform) when the k-th largest is not counted or a
// list overflows (ties, masked rows); the caller then takes the radix route,
// which reuses the pool: a cluster barrier first closes every CTA's reads of it.
template <int C, class Listed>
__device__ bool topk_listed(ClusterShared& sm, const float* s, int len, int ch, int64_t s0, int64_t row, int rank,
                            const strata_sampling_params& prm, const RowRule& rule, int32_t* out, int fence,
                            Listed listed) {
    const int tid = threadIdx.x;
    uint32_t b = 0;
    u64 above = 0;
    if (!bin_select<C>(sm, (u64)prm.top_k, &b, &above)) {
        if (rank == 0 && tid == 0) SAMPLE_ROUTE(kTopkRadixAfterOverflow);
        cluster_sync();  // other CTAs' reads of this pool are done before the radix select reuses it
        return false;
    }
    SAMPLE_PHASE(3);
    const auto in_list = listed(b);  // whether a logit's key is b or above (false for NaN)
    list_candidates(sm, s, len, ch, s0, [in_list](float l, float* v) {
        *v = l;
        return in_list(l);
    });
    SAMPLE_PHASE(4);
    return topk_from_lists<C>(sm, row, rank, prm, rule, out, fence, (int)(b / kFinePer));  // bin_select's reads
}

// The top-k route STRATA_SAMPLE_ROUTE=bins (k <= kThreads): each CTA counts
// its logits by dkey (the distance to the max) in its fine histogram, folds
// it, one cluster barrier publishes it, then topk_listed. Two cluster
// barriers and the exit barrier.
template <int C>
__device__ bool topk_bins(ClusterShared& sm, const float* s, int len, int ch, int64_t s0, int64_t row, int rank,
                          const strata_sampling_params& prm, const RowRule& rule, int32_t* out, int fence) {
    const int tid = threadIdx.x;
    u64* const fine = sm.fine();
    for (int d = tid; d < kFine; d += kThreads) fine[d] = 0;
    __syncthreads();
    const float mx = rule.m;
    for (int j = 0; j < ch; ++j) {
        const int e = tid * ch + j;
        const float l = e < len ? s[e] : __int_as_float(0x7fc00000);
        count_add(fine, l == l ? dkey(l, mx) : kNoBin);
    }
    __syncthreads();
    fold_coarse(sm);
    // Publishes every CTA's histograms; the remote reads before it (best and
    // n_ok, written once per row) touch no word written again.
    publish_barrier(fence);
    return topk_listed<C>(sm, s, len, ch, s0, row, rank, prm, rule, out, fence, [mx](uint32_t b) {
        return [mx, b](float l) {
            if (!(l == l)) return false;
            const uint32_t k = dkey(l, mx);
            return k != kNoBin && k >= b;
        };
    });
}

// The top-p route (STRATA_SAMPLE_ROUTE unset): the weights pass filled each
// CTA's fine histogram of masses by wkey and one cluster barrier published
// them. w* lies in the bin bin_select finds for the target (the mass above
// that bin is below the target, with it at or above), so every CTA lists its
// weights in that bin (a handful unless weights tie or crowd) and publishes
// its mass above the bin; over the union, w* is the largest listed weight
// whose S(w) = (mass above the bin) + (listed masses >= w) reaches the
// target: the radix select's w*. Each CTA's kept mass at w >= w* follows
// (cta_kept). chunk_kept (the early route): the listing pass also sums each
// thread's chunk mass in the bins above w*'s, and the listed weights >= w*
// are added to their chunks, so sm.chunk holds every chunk's kept mass and
// the draw CTA skips its recount pass (the same integers). One cluster barrier; the caller's exit barrier must follow the
// remote reads here. Returns false (cluster-uniform) when a list overflows.
template <int C>
__device__ bool topp_bins(ClusterShared& sm, const float* s, int len, int ch, int64_t s0, int rank, u64 target,
                          int fence, bool chunk_kept, float* w_star) {
    const int tid = threadIdx.x;
    uint32_t b = 0;
    u64 above = 0;
    (void)bin_select<C>(sm, target, &b, &above);  // target <= the kept mass: always found
    SAMPLE_PHASE(12);
    u64 chunk_above = 0;  // chunk_kept: this thread's chunk mass in the bins above b (all >= w*)
    // By the bin's edges (wkey_floor): w in bin b, or above it; a dropped
    // token (w = −1) or a massless weight (below 2^-40 = wkey_floor(0)) is neither.
    const float lo = wkey_floor(b), hi = wkey_floor(b + 1);
    list_candidates(sm, s, len, ch, s0, [lo, hi, chunk_kept, &chunk_above](float w, float* v) {
        *v = w;
        if (chunk_kept && w >= hi) chunk_above += mass_of(w);
        return w >= lo && w < hi;
    });
    u64 mine = 0, own = 0;
    for (int f = (int)b + 1 + tid; f < kFine; f += kThreads) mine += sm.fine()[f];
    (void)block_scan(mine, sm, &own);
    if (tid == 0) {
        sm.above_own = own;
        sm.wstar = 0;
    }
    SAMPLE_PHASE(13);
    Gathered g;
    if (!gather_lists<C>(sm, fence, (int)(b / kFinePer), &g)) {  // the other CTAs read bin_select's words
        if (rank == 0 && tid == 0) SAMPLE_ROUTE(kToppRadixAfterOverflow);
        return false;
    }
    SAMPLE_PHASE(14);
    const float* const gv = g.v;
    const int m = g.m;
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
    if (chunk_kept) sm.chunk[tid] = chunk_above;  // the listed weights >= w* are added below
    if (tid < C) {  // CTA tid's kept mass: its bins above the boundary bin and its listed weights >= w*
        int off = 0;
        for (int c = 0; c < tid; ++c) off += sm.gcount[c];
        u64 kept = cluster_map(&sm.above_own, tid)[0];
        for (int i = off; i < off + sm.gcount[tid]; ++i)
            if (gv[i] >= ws) kept += mass_of(gv[i]);
        sm.cta_kept[tid] = kept;
    }
    __syncthreads();
    if (chunk_kept) {  // each chunk's mass over w >= w*: the draw needs no recount (draw_in_slice)
        for (int i = tid; i < sm.n_cand; i += kThreads) {  // this CTA's own list, complete (no overflow)
            const float v = sm.cand_v[i];
            if (v >= ws) atomic_add_u64(&sm.chunk[(sm.cand_i[i] - s0) / ch], mass_of(v));
        }
        __syncthreads();
    }
    *w_star = ws;
    SAMPLE_PHASE(15);
    if (rank == 0 && tid == 0) SAMPLE_ROUTE(kToppBins);
    return true;
}

// The early top-k route (the default, k <= kThreads): topk_listed on the
// fine histogram of logits by lkey that pass 1 built and the first cluster
// barrier published (no histogram pass and no barrier of its own). One
// cluster barrier and the exit barrier; false (the radix route) also when
// the k-th largest is at or below -2^11 (not counted).
template <int C>
__device__ bool topk_early(ClusterShared& sm, const float* s, int len, int ch, int64_t s0, int64_t row, int rank,
                           const strata_sampling_params& prm, const RowRule& rule, int32_t* out, int fence) {
    // One compare a logit: lkey(l) >= b exactly when l >= lkey_floor(b) (NaN: false).
    return topk_listed<C>(sm, s, len, ch, s0, row, rank, prm, rule, out, fence, [](uint32_t b) {
        const float floor_b = lkey_floor(b);
        return [floor_b](float l) { return l >= floor_b; };
    });
}

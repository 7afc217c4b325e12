// cuda_int_tiles_route.cuh — which configuration of the many-row integer tile kernel
// (cuda_int_mma_tiles.cu) a matmul runs: the shape and choice codes, the routings v1-v10 and the tail
// split's rule. Plain host C++ (no CUDA): cuda_int_mma_tiles.cu reads the environment
// (STRATA_INT_MATMUL, STRATA_INT_TILES_KSPLIT, STRATA_INT_TILES_TAIL) and asks these functions, and
// tests/kernels/test_tile_routing.py compiles them on the CPU (libstrata/cuda_emu/test_tile_route.cpp) to
// check the decisions themselves. No choice changes a bit (docs/cuda_backend.md).
#pragma once

#include <cstdint>

#include "strata.h"

namespace strata {
namespace cuda {

constexpr int kGemvMaxRows = 8;  // the gemv kernel's most rows (cuda_int_gemv.cu's widest row template)

namespace tile_route {

inline constexpr int64_t kSliceValues = 256;  // a slice: 8 blocks of 32 values (kIntSliceBlocks)
inline constexpr int kMinRows = 64;           // below, the older kernels' 8/16-row tiles waste less (STRATA_INT_TILES_MIN_ROWS)
inline constexpr int64_t kShortK = 1024;      // ... except at short k (choose)
inline constexpr int64_t kTailDefaultRows = 32;  // STRATA_INT_TILES_TAIL unset

// What the environment sets (cuda_int_mma_tiles.cu reads it per call).
struct Knobs {
    int64_t tail_most = kTailDefaultRows;  // STRATA_INT_TILES_TAIL's rows (0: no split)
    bool ksplit = true;                    // STRATA_INT_TILES_KSPLIT
    bool has_ksplit = true;                // the build has the K split (STRATA_INT_TILES_MBAR)
    int min_rows = kMinRows;               // STRATA_INT_TILES_MIN_ROWS
};

// A launch choice: shape + kShapes·depth (0-20), or 21 + shape + kShapes·(depth == 2) with Q4_0's offset
// in the float subtraction (21-34). Shapes: 0 = 128 outputs x 64 rows, 1 = 64 x 64, 2 = 32 x 64 (8
// warps), 3 = 128 x 128 (16 warps; its depth 1 is depth 0: one CTA per SM in any case), 4 = 128 x 16
// and 5 = 128 x 32 (8 warps side by side on the outputs, each on all the rows: decode batches of 9 to 32
// rows, where a 64-row tile would multiply zero rows and the 16-row int8 mma kernel of
// cuda_int_matmul.cu ran ~111 instructions per mma: bench/RESULTS.md, 2026-12-04).
// 6 = 128 x 48 (the few-row form with 6 n-tiles a warp: decode batches of 33 to 48 rows on matrices whose
// 128-output tiles fill the GPU, where a 64-row tile would spend a quarter or more of its fold on zero rows;
// routing v9).
// 35-38: the K split at depth 2 (two groups of 8 warps on alternate slices; docs/cuda_backend.md, "The K
// split") of the 32 x 64 shape (35, 36: the launches of one 32-output CTA per SM) and of the 64 x 64 shape
// (37, 38: e.g. the 8B's qkv, 6,144 outputs, at 17-64 rows; routed_choice), each plain and with Q4_0's offset.
inline constexpr int kShapes = 7, kPlain = 3 * kShapes, kOffsetEnd = kPlain + 2 * kShapes;
constexpr int shape_no(int c) { return c == 1 ? 64 : (c == 2 ? 32 : 128); }
constexpr int shape_rows(int c) { return c == 3 ? 128 : (c == 4 ? 16 : (c == 5 ? 32 : (c == 6 ? 48 : 64))); }
// The few-row shape for n rows (9 to 32): the least that holds them.
constexpr int few_shape(int64_t n) { return n <= 16 ? 4 : 5; }
constexpr int choice_of(int shape, int depth, bool offset_c) {
    return offset_c ? kPlain + shape + kShapes * (depth == 2 ? 1 : 0) : shape + kShapes * depth;
}
constexpr int ksplit_choice(bool offset_c, int shape = 2) { return kOffsetEnd + (shape == 1 ? 2 : 0) + (offset_c ? 1 : 0); }
constexpr int choice_shape(int c) { return c >= kOffsetEnd ? (c >= kOffsetEnd + 2 ? 1 : 2) : c % kShapes; }
inline int64_t tiles_of(int shape, int64_t n_rows, int64_t n_out) {
    return (n_out + shape_no(shape) - 1) / shape_no(shape) * ((n_rows + shape_rows(shape) - 1) / shape_rows(shape));
}

// A launch's tile work on its busiest SM for one shape: the tiles an SM runs one after the other (the
// launch's tiles over the SMs, rounded up) times a tile's outputs x rows. The tile kernel is issue-bound and a
// partial tile costs about a whole one (docs/cuda_backend.md, "The tail split"), so this is what its time follows
// among shapes that fill the GPU.
inline int64_t shape_work(int shape, int64_t n_rows, int64_t n_out, int sms) {
    return (tiles_of(shape, n_rows, n_out) + sms - 1) / sms * shape_no(shape) * shape_rows(shape);
}

inline int route(int v, int64_t n_rows, int64_t n_out, int64_t k, int sms, int64_t tail_most);

// Routing v10's estimate of what a call on `shape`'s tiles costs (tail_most: STRATA_INT_TILES_TAIL's rows):
// shape_work of the whole call, or of the tail split launch_int_matmul would then take (tail_rows, tail_pays):
// the head's rows on their own route, plus the tail's tiles. A tail of at most kGemvMaxRows rows leaves the tiles and counts as no tile
// work (as in the rule); one of 9 to 32 rows stays on the tiles where its own route puts it there (the few-row
// shapes where their tiles give every SM a CTA, else from 17 rows the 64-row route on the matrices the few-row
// kernel does not take: more than 4,096 outputs or k of at most 1,024) and otherwise goes to the few-row
// kernel, which the rule refuses. The head's rows are a multiple of the shape's, so the recursion through
// route() ends within two levels.
inline int64_t planned_work(int v, int shape, int64_t n_rows, int64_t n_out, int64_t k, int sms, int64_t tail_most) {
    const int64_t whole = shape_work(shape, n_rows, n_out, sms);
    const int64_t rows = shape_rows(shape), tail = n_rows % rows;
    if (n_rows <= rows || tail == 0 || tail > tail_most) return whole;
    int64_t tail_work = 0;
    if (tail > kGemvMaxRows) {
        const bool few = tiles_of(few_shape(tail), tail, n_out) >= sms;
        if (!few && (tail < 17 || (n_out <= 4096 && k > 1024))) return whole;
        tail_work = shape_work(choice_shape(route(v, tail, n_out, k, sms, tail_most)), tail, n_out, sms);
    }
    const int head = choice_shape(route(v, n_rows - tail, n_out, k, sms, tail_most));
    const int64_t split = shape_work(head, n_rows - tail, n_out, sms) + tail_work;
    return 20 * split <= 17 * whole ? split : whole;
}

// The routings (a STRATA_INT_MATMUL value each; which one never changes a bit). H200, 8B Q4_0,
// bench/gpu_matmul.py --int-kernels legacy tiles:v1 ... tiles:v4 (commit b0b19dc, µs at 64 / 512 rows):
// v1 q/o 43.2 / 149, k/v 42.6 / 67.8, qkv 60.9 / 227, gate_up 143 / 953, down 145 / 515, lm_head 221
// / 1,628; v2's depth 2 took 4 % off q/o, k/v and down at 64 rows, its depth 1 added 7 % to qkv at 64
// and k/v at 512; v3's 128-row tiles took 5-9 % off q/o, gate_up, down and lm_head at 512 and added
// 16 % to qkv (192 tiles: 1.45 waves); every variant ran at 115-133 int8 TFLOP/s.
//  v1: the widest 64-row tile that still gives every SM a CTA (wide tiles reuse each fragment more),
//      2 stages — the kernel as first shipped;
//  v2: v1's shape; launches of at most one CTA per SM take the deepest pipeline that fits (depth 2),
//      those of at most two per SM the deepest that keeps two (depth 1), the rest v1's 2 stages; k of
//      at most 3 slices (the 135M shapes) at most depth 1 (3-4 stages hold all of it);
//  v3: 128-row tiles of 16 warps (half the weight traffic per row of v1's 64-row tiles, 3 stages at
//      one CTA per SM) where they give nearly every SM a CTA; else v2;
//  v4: v2 with the last wave counted: where the 128-output tiles fill the GPU, the 64-row shape whose
//      tiles best fill whole waves of two CTAs per SM, weighed by a guess of each shape's speed per
//      output (128: 1, 64: 0.96, 32: 0.85);
//  v5: the measured best — 128-row tiles at depth 2 where they fill whole waves of one
//      CTA per SM to 90 % (q/o, gate_up, down, lm_head at 512 rows), else v1's shape at depth 2 where
//      the launch has at most one CTA per SM (depth 1 at k of at most 3 slices) and depth 0 otherwise;
//  v6: v5 with Q4_0's −8·sx out of the nibbles (TileLayout::kOffsetInC: 3 fewer integer instructions
//      per mma than v5 in the aligned loop; the default 2026-12-02 to 2026-12-04);
//  v7: v6, and 9 to 32 rows on the few-row shapes (128 x 16, 128 x 32) where their tiles give every
//      SM a CTA (8B gate_up and lm_head; int_tiles_choice lets those row counts in, and 33 to 63 rows
//      where the 128 x 64 tiles give every SM a CTA; the default 2026-12-04);
//  v8: v7, and 17 to 63 rows on every matrix, the K-quants' from 9 rows at k > 8,192 and
//      Q4_K's where the int8 mma 8-row tiles would run (int_tiles_choice lets them in; the few-row kernel
//      keeps Q4_0 / Q8_0 / Q4_1 matrices of at most 4,096 outputs at 17-32 rows): the 64-row route, whose
//      time does not grow with the live rows, where the int8 mma and dp4a tiles' does;
//  v9: v8, and 33 to 48 rows on the 128 x 48 shape where its tiles give every SM a CTA
//      (the 8B's gate_up and lm_head; elsewhere v8's route): a 64-row tile there spends a quarter to a
//      half of its fold and mma on zero rows, and the tile kernel is issue-bound, so its time grows
//      with the rows a tile holds (8B gate_up: 128 x 16 50 µs, 128 x 32 70, 128 x 64 108; H200,
//      bench/RESULTS.md 2026-12-04);
//  v10 (the default): v9, and where v9 takes the 128 x 128 tiles, the 128 x 64 ones instead when they put less work on the
//      busiest SM (shape_work, the 128 x 128 tiles' with the tail split they would take: planned_work): where
//      the rows leave the last 128-row tile half empty, a partial row tile costs about a whole one, which v5's
//      90 % test does not count (H100, 2026-12-07, bench/RESULTS.md, Q4_0: 8B gate_up at 448 rows 689 -> 591 µs,
//      lm_head at 320 rows 847 -> 738, 1B gate_up at 320 rows 162 -> 136). Equal work keeps the 128-row tiles
//      (512 rows). Q4_0 and Q6_K only; the other types keep v9's choices (int_tiles_choice).
inline int route(int v, int64_t n_rows, int64_t n_out, int64_t k, int sms, int64_t tail_most) {
    const bool short_k = k <= 3 * kSliceValues;
    if (v >= 9 && n_rows >= 33 && n_rows <= 48 && tiles_of(6, n_rows, n_out) >= sms) {
        const int64_t per_sm = (tiles_of(6, n_rows, n_out) + sms - 1) / sms;
        return choice_of(6, per_sm > 1 || short_k ? 0 : 2, true);
    }
    if (v >= 7 && n_rows >= 9 && n_rows <= 32 && tiles_of(few_shape(n_rows), n_rows, n_out) >= sms) {
        const int c = few_shape(n_rows);
        const int64_t per_sm = (tiles_of(c, n_rows, n_out) + sms - 1) / sms;
        return choice_of(c, per_sm > 1 || short_k ? 0 : 2, true);
    }
    if (v >= 5 && n_rows >= 128) {
        const int64_t t = tiles_of(3, n_rows, n_out), waves = (t + sms - 1) / sms;
        if (10 * t >= 9 * waves * (int64_t)sms) {
            // v10: the 128 x 64 tiles, whole, against the 128 x 128 ones with the split they would take. Not the
            // 128 x 64 tiles' own split: a tail off the tiles streams the weights once more, which the work does
            // not count, and such plans measured slower (H100, 2026-12-07: 1B gate_up at 200 rows +4 %).
            if (v < 10 || planned_work(v, 3, n_rows, n_out, k, sms, tail_most) <= shape_work(0, n_rows, n_out, sms))
                return choice_of(3, 2, v >= 6);
            // v10: the 128 x 64 tiles (twice the 128-row tiles' count, so more than the SMs), as v9 runs them
            const int64_t per_sm = (tiles_of(0, n_rows, n_out) + sms - 1) / sms;
            return choice_of(0, per_sm > 1 || short_k ? 0 : 2, true);
        }
    }
    if (v == 3 && n_rows >= 128 && 8 * tiles_of(3, n_rows, n_out) >= 7 * (int64_t)sms) return choice_of(3, 2, false);
    int c = 2;
    for (int s = 0; s < 2; ++s)
        if (tiles_of(s, n_rows, n_out) >= sms) {
            c = s;
            break;
        }
    if (v == 4 && c == 0) {
        const double weight[3] = {1.0, 0.96, 0.85};
        const int64_t slots = 2 * (int64_t)sms;
        double best = 0;
        for (int s = 0; s < 3; ++s) {
            const int64_t t = tiles_of(s, n_rows, n_out);
            const double score = weight[s] * (double)t / (double)(((t + slots - 1) / slots) * slots);
            if (score > best + 1e-9) {
                best = score;
                c = s;
            }
        }
    }
    if (v == 1) return c;
    const int64_t per_sm = (tiles_of(c, n_rows, n_out) + sms - 1) / sms;
    if (v >= 5) {
        if (per_sm > 1 || short_k) return choice_of(c, 0, v >= 6);  // the offset variants exist at depth 0 and 2
        return choice_of(c, 2, v >= 6);
    }
    const int depth = per_sm <= 1 ? 2 : (per_sm == 2 ? 1 : 0);
    return choice_of(c, depth == 2 && short_k ? 1 : depth, false);
}

// A routing's choice, with STRATA_INT_TILES_KSPLIT applied (`ksplit`; `has_ksplit`: the build has the split).
// Routings v8 to v10 only; the K split takes (H200, 8B Q4_0 at 40 / 64 rows, bench/RESULTS.md 2026-12-05):
//  - one 32 x 64 CTA per SM at depth 2 (q/o, k/v, down): down 80.6 / 81.5 -> 76.9 / 77.4 µs;
//  - one row tile of 32 x 64 CTAs at depth 0 that would put two on some SMs, where the 64 x 64 tiles give
//    more than half the SMs one CTA and none two (qkv's 6,144 outputs: 192 CTAs of 8 warps -> 96 of 16):
//    qkv 42.7 / 41.5 -> 39.8 / 38.8 µs with the 64 x 64 split forced.
inline int routed_choice(int routing, int64_t n_rows, int64_t n_out, int64_t k, int sms, const Knobs& kn) {
    const int c = route(routing, n_rows, n_out, k, sms, kn.tail_most);
    if (!kn.ksplit || routing < 8 || !kn.has_ksplit) return c;  // v1-v7 keep their choices (old A/Bs reproduce)
    const bool offset_c = c >= kPlain;  // route() gives no split choice, so >= kPlain is the offset form
    if (c == choice_of(2, 2, offset_c)) return ksplit_choice(offset_c);
    const int64_t t64 = tiles_of(1, n_rows, n_out);
    if (c == choice_of(2, 0, offset_c) && n_rows <= 64 && tiles_of(2, n_rows, n_out) > sms && t64 <= sms && 2 * t64 > sms)
        return ksplit_choice(offset_c, 1);
    return c;
}


// The default routing's thresholds and a routing's choice for n_rows x n_out x k of w_dtype on `sms` SMs:
// a choice code, or -1 where the older kernels run. `forced`: a tiles:vN value of STRATA_INT_MATMUL, which
// runs the tile kernel at every row count.
inline int choose(int routing, bool forced, int64_t n_rows, int64_t n_out, int64_t k, int32_t w_dtype, int sms,
                  const Knobs& kn) {
    if (!forced && n_rows < kn.min_rows) {
        // Below 64 rows the tiles won on the H200 (bench/gpu_matmul.py --int-kernels legacy tiles, 8B
        // shapes) only where the older kernels fall back to dp4a 8-row tiles (their int8 mma tiles
        // would not fill the GPU: launch_int_matmul's test): from 16 rows, or from 4 rows on matrices
        // of fewer than 8 outputs per SM, where those dp4a CTAs get 2 outputs each.
        const int64_t mt8 = (n_out + 63) / 64 * ((n_rows + 7) / 8);
        const bool dp4a_tiles = n_rows > 1 && mt8 < sms;
        // Short k (at most 4 slices, e.g. the 135M shapes): the tiles took ~9 µs at 4 and 8 rows where the
        // dp4a 8-row tiles took 24-40 µs from 2 rows on (bench/RESULTS.md, 2026-12-01 night).
        const bool short_k = n_rows > 1 && k <= kShortK;
        // 9 to 32 rows on the few-row shapes (routing v7) where their tiles fill the GPU: the 8B's gate_up
        // and lm_head at 16 rows took 103 and 122 µs in the 16-row int8 mma kernel (bench/RESULTS.md).
        const bool few = routing >= 7 && n_rows >= 9 && n_rows <= 32 &&
                         tiles_of(few_shape(n_rows), n_rows, n_out) >= sms;
        // 33 to 63 rows there: the 64-row tiles, whose time does not grow with the live rows (gate_up 111 µs
        // at 64 rows) where the 16-row int8 mma kernel's does (165 µs at 32 rows already). v8: from 17 rows
        // on every matrix, so a step of 33-63 rows costs at most a 64-row step (H200, 8B at 40-56 rows: q/o
        // 69 -> 27 µs, qkv 69 -> 43, down 183-195 -> 87-92) and qkv's 6,144 outputs at 17-32 rows leave the
        // 16-row int8 mma kernel (69 -> 42 µs); matrices of at most 4,096 outputs keep the few-row kernel
        // there (launch_int_matmul asks it after this; it measured faster at 17-32 rows: bench/RESULTS.md).
        // The K-quants have no few-row kernel: at 9-16 rows v7 left them the int8 mma 8-row tiles (Q4_K where
        // those fill the GPU and the 16-row ones do not) and the dp4a 8-row tiles, which measured slower than
        // the tile route there (H200, 8B at 9 / 12 rows: Q4_K qkv 78 / 76 -> 49 µs, Q4_K down 157 / 173 -> 97,
        // Q6_K down 161 / 178 -> 141) but faster on the other narrow matrices (8B q/o 23 against 29, 1B
        // gate_up 40 against 54, Q6_K qkv 31 against 67): v8 takes the tiles at k beyond 8,192 (the dp4a
        // tiles' time grows fastest with k) and for Q4_K where the int8 mma 8-row tiles would run.
        const int64_t mt16 = (n_out + 63) / 64 * ((n_rows + 15) / 16);
        const bool kquant = w_dtype == STRATA_Q4_K || w_dtype == STRATA_Q6_K;
        const bool kquant_few = routing >= 8 && kquant && n_rows >= 9 && n_rows <= 16 &&
                                (k > 8192 || (w_dtype == STRATA_Q4_K && mt8 >= sms && mt16 < sms));
        const bool mid = (routing >= 8 && (n_rows >= 17 || kquant_few)) ||
                         (routing >= 7 && n_rows >= 33 && tiles_of(0, n_rows, n_out) >= sms);
        if (!few && !mid && !short_k && (!dp4a_tiles || !(n_rows >= 16 || (n_rows >= 4 && n_out < 8 * (int64_t)sms))))
            return -1;
    }
    // v10 for the types it was measured on, Q4_0 and Q6_K (H100, 2026-12-07: 8 to 22 % off wherever it trades
    // the shapes); the others keep v9's shapes: Q4_K's 128 x 64 tiles measured slower than its 128 x 128 ones
    // on the 8B's gate_up and lm_head at 320-448 rows (+3 to +5 %), Q8_0 and Q4_1 were not timed.
    if (routing == 10 && w_dtype != STRATA_Q4_0 && w_dtype != STRATA_Q6_K) routing = 9;
    return routed_choice(routing, n_rows, n_out, k, sms, kn);
}

// The tail split (STRATA_INT_TILES_TAIL): how many of a routed call's last rows may take their own route
// instead of `choice`'s last row tile (at most `most`, fewer than the tile's rows; 0: no split).
inline int64_t tail_rows(int choice, int64_t n_rows, int64_t most) {
    if (most <= 0 || choice < 0) return 0;
    const int64_t rows = shape_rows(choice_shape(choice));
    const int64_t tail = n_rows % rows;
    return n_rows > rows && tail <= most ? tail : 0;
}

// Whether that split pays: the head's tiles (head_choice) plus the tail's (tail_choice; -1 where the tail leaves
// the tile kernel) put at least 15 % less work on the busiest SM than `choice`'s tiles for all n_rows, and a
// tail off the tiles has at most kGemvMaxRows rows. Choice codes must be valid (the caller checks the range).
inline bool tail_pays(int choice, int head_choice, int tail_choice, int64_t n_rows, int64_t tail, int64_t n_out, int sms) {
    if (choice < 0 || head_choice < 0 || sms <= 0) return false;
    // A tail off the tiles streams the weights once more: cheap at the gemv kernel's few rows, not at the
    // few-row kernel's 9-32 (~1.1 TB/s: 8B q/o and down at 96 / 160 rows +3 to +27 %, H100 2026-12-07).
    if (tail_choice < 0 && tail > kGemvMaxRows) return false;
    const int64_t whole = shape_work(choice_shape(choice), n_rows, n_out, sms);
    const int64_t split = shape_work(choice_shape(head_choice), n_rows - tail, n_out, sms) +
                          (tail_choice >= 0 ? shape_work(choice_shape(tail_choice), tail, n_out, sms) : 0);
    return 20 * split <= 17 * whole;  // at least 15 % less (a launch more; the model is coarse)
}

}  // namespace tile_route
}  // namespace cuda
}  // namespace strata

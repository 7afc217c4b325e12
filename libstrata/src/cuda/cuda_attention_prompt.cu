// cuda_attention_prompt.cu — the causal attention kernel for prompt-sized launches (128 rows or
// more, head_dim 64 or 128, F16 or int8 KV pages): the canonical bits of cuda_attention.cu, with
// every staged K/V tile shared by all the query vectors of a block of consecutive rows.
//
// The arithmetic of one query vector is the canonical one that cuda_attention.cu's header comment
// defines (tiles of 32 cells, chunks of 8 tiles, worker w of chunk k taking tiles 8k+w then 8k+w+4
// with an online softmax, the (chunk, worker) fold, out = acc / l); every expression below that
// touches a value is that file's expression, in that order, with the same explicit roundings
// (__fmul_rn, __fadd_rn, fmaf, expf, warp_sum, warp_max). What changes is how the work is spread:
//   - a block serves R consecutive rows of the launch and every query head of one KV head: R·G
//     query vectors (G = n_heads / n_kv_heads), NV of them per warp (vector v: row v / G, head
//     v % G). Its rows must all read one slot (cuda_attention_route.cuh); a block whose rows read
//     several slots (a mixed step's decode rows, the seam of two chunks) returns at once and the
//     decode kernel, launched right after over the whole launch with its usual plan, serves them;
//   - the block walks the tiles in the canonical worker order, chunk by chunk: tiles 8k, 8k+4
//     (worker 0), 8k+1, 8k+5 (worker 1), ..., 8k+3, 8k+7 (worker 3). Each tile is staged ONCE in
//     shared memory for all the block's vectors (cp.async, four stages, one barrier per tile),
//     up to the block's last row: cells past that row are never copied, and a vector masks cells
//     past its own row (score −inf, never in its PV), so NaN there cannot leak in;
//   - a warp keeps, per vector, the row state and ONE worker state in registers: the worker state
//     starts empty at the worker's first tile and is folded into the row state after its second,
//     so the fold is the canonical (chunk, worker) left fold, element by element (m and l are the
//     same for every dim of a vector, so each lane keeps one copy);
//   - scores: lane c scores cell c of every vector of its warp (K row from shared memory, q
//     broadcast from shared memory; inactive vectors' scores are computed and dropped, cheaper
//     than a branch per vector), even and odd dims in two FMA chains, ascending; a worker's two
//     tiles are scored together at its first step (each q load feeds both; scores do not depend
//     on the online state, so their order is free); PV: lane l owns
//     dims HD/32·l .. HD/32·l + HD/32 − 1, cells ascending, p from shared memory (no guard when
//     every vector of the warp takes all 32 cells of the tile);
//   - tiles wholly below a vector's sliding window come, in its worker, before any visible cell
//     and add nothing: skipped, as the other kernels do (no bit changes);
//   - blocks are ordered longest first (the last rows of a chunk see the most cells).
// STRATA_ATTENTION=legacy (every call on the general kernel) and STRATA_ATTENTION=noprompt
// (prompt-sized launches on the general kernel, decode-sized ones on the decode kernel) turn it
// off, for A/B and bit-identity tests.
#include <cuda_fp16.h>

#include <cstdlib>
#include <cstring>
#include <mutex>

#include "cuda_async.cuh"
#include "cuda_attention_route.cuh"
#include "cuda_common.cuh"
#include "cuda_kernels.cuh"
#include "cuda_kv_layout.cuh"
#include "cuda_pdl.cuh"

namespace strata {
namespace cuda {

// The launch plan of one prompt attention call (decided on the host, see launch_attention_prompt).
struct PromptPlan {
    AttentionArgs a;
    int32_t group;         // G: query heads per KV head
    int32_t rows_per_cta;  // R: consecutive rows per block (R·G <= warps · NV)
    int32_t n_blocks;      // ceil(n_rows / R)
    int32_t walk_xor;      // 0. The emulator's negative control (test_attention_prompt.cpp) sets 2: each
                           // chunk's workers then run, and fold, in the order 1, 0, 3, 2 (wrong bits)
};

namespace {

// The canonical geometry (cuda_attention.cu's header comment).
constexpr int kTile = 32;
constexpr int kChunkTiles = 8;
constexpr int kStages = 4;  // staged tiles in flight: a worker's two in use and two ahead
constexpr int kWarps = 8;   // warps per block

// Query vectors per warp (registers: two states of NV x HD/32 floats per lane), and the rows per
// block: as many consecutive rows as the block's kWarps·NV vectors hold with all G query heads.
__host__ __device__ constexpr int vectors_per_warp(int hd) { return hd > 0 ? 4 : 0; }  // 8 at head_dim 64 spilled
__host__ __device__ constexpr int prompt_rows_per_cta(int group, int hd) {
    return group > 0 ? kWarps * vectors_per_warp(hd) / group : 0;
}
constexpr float kNegInf = -__builtin_huge_valf();

static_assert(kPageCells % kTile == 0, "a key tile must not straddle two KV pages (kv_row)");

// One stage: 32 K rows, 32 V rows (F16: HD + 8 halves each, so lane c's 16-byte loads of row c
// hit distinct banks; int8: HD + 16 bytes), then for int8 the 32 K and the 32 V scales.
template <int HD, bool INT8>
struct PromptStage {
    static constexpr int kRowBytes = INT8 ? HD + 16 : 2 * (HD + 8);
    static constexpr int kBytes = 2 * kTile * kRowBytes + (INT8 ? 2 * kTile * 4 : 0);
};

// Shared memory of one block, bytes: the stages, then q [warp][NV][HD] floats, then p [warp][NV][32].
template <int HD, int NW, int NV, bool INT8>
__host__ __device__ constexpr int prompt_smem_bytes() {
    return kStages * PromptStage<HD, INT8>::kBytes + NW * NV * HD * 4 + NW * NV * kTile * 4;
}

// Step n of a block's walk is tile tile_of(n): chunk n / 8, then worker (n % 8) / 2's two tiles.
__device__ __forceinline__ int prompt_tile_of(int n) { return (n >> 3) * kChunkTiles + ((n & 7) >> 1) + 4 * (n & 1); }

__device__ __forceinline__ float prompt_i8(int8_t q, float scale) { return __fmul_rn((float)q, scale); }

template <bool B>
struct PromptFlag {
    static constexpr bool value = B;
};

// HD: head_dim (64 or 128); NW: warps per block; NV: query vectors per warp; INT8: int8 pool.
template <int HD, int NW, int NV, bool INT8>
__global__ void __launch_bounds__(NW * 32, 2) attention_prompt_kernel(const PromptPlan P) {
    pdl_wait();  // first: see cuda_pdl.cuh
    pdl_launch_dependents();
    constexpr int DPL = HD / 32;  // PV: dims per lane
    constexpr int kThreads = NW * 32;
    constexpr int kRow = PromptStage<HD, INT8>::kRowBytes, kStage = PromptStage<HD, INT8>::kBytes;
    static_assert(HD == 64 || HD == 128, "head_dim 64 or 128");

    const AttentionArgs& a = P.a;
    const SlotsView& s = a.slots;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int n_kv = s.n_kv_heads, G = P.group, R = P.rows_per_cta;
    const int kvh = (int)(blockIdx.x % (unsigned)n_kv);
    const int64_t r0 = (int64_t)(P.n_blocks - 1 - (int)(blockIdx.x / (unsigned)n_kv)) * R;  // longest first
    const int nr = (int)min((int64_t)R, a.n_rows - r0);
    if (!prompt_block_single_slot(a, r0, nr)) return;  // the decode kernel serves these rows
    const bool plane_ok = a.layer >= 0 && a.layer < s.n_layers;

    // The block's slot, its last row's cell and (sliding window) its lowest visible cell.
    int slot = -1, max_last = -1, min_first = INT32_MAX;
    for (int i = 0; i < nr; ++i) {
        const int32_t sl = a.rows[2 * (r0 + i)], ix = a.rows[2 * (r0 + i) + 1];
        if (!plane_ok || !attn_row_valid(s, sl, ix)) continue;
        slot = sl;
        max_last = max(max_last, (int)ix);
        min_first = min(min_first, a.window > 0 ? max(0, (int)ix - a.window + 1) : 0);
    }

    unsigned char* smem = dynamic_smem<unsigned char>();
    float* q_s = reinterpret_cast<float*>(smem + kStages * kStage) + warp * NV * HD;
    float* p_s = reinterpret_cast<float*>(smem + kStages * kStage) + NW * NV * HD + warp * NV * kTile;

    // This warp's vectors: vector i is the block's vector warp·NV + i (row r0 + its / G, head
    // kvh·G + its % G) when that is below nr·G; vlast: its row's last cell (-1: none or padding);
    // vfirst: its first visible cell. Its query goes to q_s (zero for padding).
    auto vrow = [&](int i) { return r0 + (warp * NV + i) / G; };
    auto vhead = [&](int i) { return kvh * G + (warp * NV + i) % G; };
    auto vout = [&](int i) { return warp * NV + i < nr * G; };
    int vlast[NV], vfirst[NV];
#pragma unroll
    for (int i = 0; i < NV; ++i) {
        vlast[i] = -1;
        vfirst[i] = 0;
        if (vout(i)) {
            const int32_t sl = a.rows[2 * vrow(i)], ix = a.rows[2 * vrow(i) + 1];
            if (plane_ok && attn_row_valid(s, sl, ix)) {
                vlast[i] = ix;
                vfirst[i] = a.window > 0 ? max(0, (int)ix - a.window + 1) : 0;
            }
        }
    }
    for (int e = lane; e < NV * HD; e += 32) {
        const int i = e / HD, d = e - i * HD;
        const int32_t sl = vout(i) ? a.rows[2 * vrow(i)] : -1, ix = vout(i) ? a.rows[2 * vrow(i) + 1] : -1;
        q_s[e] = plane_ok && attn_row_valid(s, sl, ix) ? a.q[vrow(i) * a.q_row_stride + (int64_t)vhead(i) * HD + d] : 0.0f;
    }
    __syncwarp();

    const int n_tiles = max_last < 0 ? 0 : max_last / kTile + 1;
    const int n_chunks = (n_tiles + kChunkTiles - 1) / kChunkTiles;
    const int chunk0 = max_last < 0 ? 0 : min_first / (kTile * kChunkTiles);  // chunks below the window add nothing
    const int step0 = chunk0 * kChunkTiles, n_steps = max(0, n_chunks - chunk0) * kChunkTiles;
    auto live = [&](int t) { return t < n_tiles && (t + 1) * kTile > min_first; };

    // The whole block stages step i's tile into stage i % kStages (rows up to the block's last cell).
    // The stage holds 2·kTile rows (K rows 0..31, then V rows 0..31) of kPieces 16-byte pieces; thread
    // tid copies pieces tid, tid + kThreads, ...: always piece column tid % kPieces, of the stage rows
    // tid / kPieces + kRowsPerPass·p (p = 0 .. kPer − 1). Fixed per thread, so a step's copy is an add
    // per piece (the general form, with its divisions per piece, was ~140 instructions a piece).
    constexpr int kPieces = (INT8 ? HD : 2 * HD) / 16;     // 16-byte pieces per row
    constexpr int kRowsPerPass = kThreads / kPieces;       // stage rows one pass of the block covers
    constexpr int kPer = 2 * kTile / kRowsPerPass;         // pieces per thread
    static_assert(kThreads % kPieces == 0 && (2 * kTile) % kRowsPerPass == 0, "whole passes of whole rows");
    constexpr int kElemBytes = INT8 ? 1 : 2;
    auto issue = [&](int i) {
        if (i < n_steps) {
            const int t = prompt_tile_of((step0 + i) ^ P.walk_xor);
            if (live(t)) {
                unsigned char* st = smem + (i % kStages) * kStage;
                const int cell0 = t * kTile, count = min(kTile, max_last + 1 - cell0);
                const size_t kb = kv_row(s, slot, a.layer, 0, kvh, cell0);
                const size_t plane = (size_t)s.n_kv_heads * kPageCells * HD;  // K plane to V plane (cuda_kv_layout.cuh)
                const unsigned char* kv_bytes = INT8 ? reinterpret_cast<const unsigned char*>(s.kv8)
                                                     : reinterpret_cast<const unsigned char*>(s.kv);
                const unsigned ctid = threadIdx.x;  // read here, not held across the step (registers)
                const int copy_col = (int)(ctid % kPieces), copy_row0 = (int)(ctid / kPieces);
#pragma unroll
                for (int p = 0; p < kPer; ++p) {
                    const int row = copy_row0 + kRowsPerPass * p, which = row / kTile, c = row % kTile;
                    if (c < count) {
                        const size_t src = kb + (which ? plane : 0) + (size_t)(c * HD);
                        cp_async16(st + row * kRow + 16 * copy_col, kv_bytes + src * kElemBytes + 16 * copy_col);
                    }
                }
                if (INT8 && tid < 2 * kTile && (tid & 31) < count) {
                    float* scales = reinterpret_cast<float*>(st + 2 * kTile * kRow);
                    cp_async4(scales + tid, s.kv_scale + ((tid < kTile ? kb : kb + plane) / HD + (tid & 31)));
                }
            }
        }
        cp_async_commit();
    };

    float rm[NV], rl[NV], racc[NV][DPL];  // row states
    float wm[NV], wl[NV], wacc[NV][DPL];  // the current worker's states
#pragma unroll
    for (int v = 0; v < NV; ++v) {
        rm[v] = wm[v] = kNegInf;
        rl[v] = wl[v] = 0.0f;
#pragma unroll
        for (int j = 0; j < DPL; ++j) racc[v][j] = wacc[v][j] = 0.0f;
    }

    // cnt[v]: the vector's cells in tile t; act[v]: the vector takes the tile; true if any does.
    auto tile_act = [&](int t, int (&cnt)[NV], bool (&act)[NV]) {
        bool any = false;
#pragma unroll
        for (int v = 0; v < NV; ++v) {
            cnt[v] = max(0, min(kTile, vlast[v] + 1 - t * kTile));
            act[v] = cnt[v] > 0 && (t + 1) * kTile > vfirst[v];
            any = any || act[v];
        }
        return live(t) && any;
    };
    // Lane c's K row of a stage, dims d0 .. d0 + 7, as floats (the F16 value or float(q) * scale).
    auto load_k = [&](const unsigned char* st, int d0, float (&k)[8]) {
        const unsigned char* krow_p = st + lane * kRow;
        if (INT8) {
            const float kscale = reinterpret_cast<const float*>(st + 2 * kTile * kRow)[lane];
            const uint2 raw = *reinterpret_cast<const uint2*>(krow_p + d0);
            const int8_t* b = reinterpret_cast<const int8_t*>(&raw);
#pragma unroll
            for (int j = 0; j < 8; ++j) k[j] = prompt_i8(b[j], kscale);
        } else {
            const uint4 raw = *reinterpret_cast<const uint4*>(krow_p + 2 * d0);
            const float2 k01 = half2_bits_to_float2(raw.x), k23 = half2_bits_to_float2(raw.y);
            const float2 k45 = half2_bits_to_float2(raw.z), k67 = half2_bits_to_float2(raw.w);
            k[0] = k01.x, k[1] = k01.y, k[2] = k23.x, k[3] = k23.y;
            k[4] = k45.x, k[5] = k45.y, k[6] = k67.x, k[7] = k67.y;
        }
    };
    // The canonical chains over dims d0 .. d0 + 7: even dims into se, odd dims into so, ascending.
    auto fma8 = [](const float4& qa, const float4& qb, const float (&k)[8], float& se, float& so) {
        se = fmaf(qa.x, k[0], se);
        so = fmaf(qa.y, k[1], so);
        se = fmaf(qa.z, k[2], se);
        so = fmaf(qa.w, k[3], so);
        se = fmaf(qb.x, k[4], se);
        so = fmaf(qb.y, k[5], so);
        se = fmaf(qb.z, k[6], se);
        so = fmaf(qb.w, k[7], so);
    };
    // Raw scores (se + so) · scale of every vector of the warp (active or not: no branch per
    // vector; unused ones are dropped) for the tiles of one stage, or of two stages at once (a
    // worker's two tiles: each q load then feeds both). Lane c takes cell c; rows past the copied
    // ones are stale, and masked in the softmax.
    auto scores = [&](auto two, const unsigned char* st0, const unsigned char* st1, float (&r0)[NV], float (&r1)[NV]) {
        constexpr bool kTwo = decltype(two)::value;
        float se0[NV], so0[NV], se1[NV], so1[NV];
#pragma unroll
        for (int v = 0; v < NV; ++v) se0[v] = so0[v] = se1[v] = so1[v] = 0.0f;
#pragma unroll 2
        for (int d0 = 0; d0 < HD; d0 += 8) {
            float k0[8], k1[8];
            load_k(st0, d0, k0);
            if (kTwo) load_k(st1, d0, k1);
#pragma unroll
            for (int v = 0; v < NV; ++v) {
                const float4 qa = *reinterpret_cast<const float4*>(q_s + v * HD + d0);
                const float4 qb = *reinterpret_cast<const float4*>(q_s + v * HD + d0 + 4);
                fma8(qa, qb, k0, se0[v], so0[v]);
                if (kTwo) fma8(qa, qb, k1, se1[v], so1[v]);
            }
        }
#pragma unroll
        for (int v = 0; v < NV; ++v) {
            r0[v] = __fmul_rn(__fadd_rn(se0[v], so0[v]), a.scale);
            r1[v] = __fmul_rn(__fadd_rn(se1[v], so1[v]), a.scale);
        }
    };

    float raw_next[NV];  // the worker's second tile's raw scores, computed with its first tile's
#pragma unroll
    for (int v = 0; v < NV; ++v) raw_next[v] = 0.0f;

#pragma unroll
    for (int i = 0; i < kStages - 1; ++i) issue(i);
    for (int i = 0; i < n_steps; ++i) {
        // A worker's first step needs both of its tiles in; its second step nothing new.
        if ((i & 1) == 0) cp_async_wait<kStages - 3>();
        else cp_async_wait<kStages - 2>();
        __syncthreads();         // the tiles are in; every warp is done with step i - 1's stage
        issue(i + kStages - 1);  // into step i - 1's stage
        const int n = step0 + i, t = prompt_tile_of(n ^ P.walk_xor);
        const unsigned char* st = smem + (i % kStages) * kStage;
        int cnt[NV];
        bool act[NV];
        const bool on = tile_act(t, cnt, act);
        float raw[NV];
        if ((n & 1) == 0) {  // the worker's first tile: its state starts empty; both tiles' scores
#pragma unroll
            for (int v = 0; v < NV; ++v) {
                wm[v] = kNegInf;
                wl[v] = 0.0f;
#pragma unroll
                for (int j = 0; j < DPL; ++j) wacc[v][j] = 0.0f;
            }
            int cnt1[NV];
            bool act1[NV];
            const bool on1 = tile_act(prompt_tile_of((n + 1) ^ P.walk_xor), cnt1, act1);
            const unsigned char* st1 = smem + ((i + 1) % kStages) * kStage;
            if (on && on1) scores(PromptFlag<true>(), st, st1, raw, raw_next);
            else if (on) scores(PromptFlag<false>(), st, st, raw, raw_next);
            else if (on1) scores(PromptFlag<false>(), st1, st1, raw_next, raw);
        } else {
#pragma unroll
            for (int v = 0; v < NV; ++v) raw[v] = raw_next[v];
        }
        if (on) {
            const int cell0 = t * kTile;
            {
                // Online softmax per vector (the canonical expressions). The warp max and warp sum of
                // the NV vectors run together (warp_allreduce below: each value gets the butterfly's
                // operations in its order, so the same bits as warp_max / warp_sum one by one, in half
                // the shuffles and with no branch around them); an inactive vector contributes −inf
                // scores and zero weights and keeps its state.
                int max_cnt = 0;
                bool full = true;  // every vector takes all 32 cells: the PV step needs no guard
                float sc[NV], red[NV];
#pragma unroll
                for (int v = 0; v < NV; ++v) {
                    const bool seen = act[v] && lane < cnt[v] && cell0 + lane >= vfirst[v];  // causal and in the window
                    sc[v] = seen ? raw[v] : kNegInf;
                    red[v] = sc[v];
                }
                warp_allreduce<NV>(red, lane, [](float x, float y) { return fmaxf(x, y); });
                float m_new[NV], pv[NV];
#pragma unroll
                for (int v = 0; v < NV; ++v) {
                    m_new[v] = fmaxf(wm[v], red[v]);
                    if (m_new[v] == kNegInf) act[v] = false;  // every score so far is -inf: nothing to add
                    pv[v] = act[v] ? expf(__fsub_rn(sc[v], m_new[v])) : 0.0f;
                    red[v] = pv[v];
                }
                warp_allreduce<NV>(red, lane, [](float x, float y) { return __fadd_rn(x, y); });
#pragma unroll
                for (int v = 0; v < NV; ++v) {
                    if (act[v]) {
                        const float alpha = expf(__fsub_rn(wm[v], m_new[v]));
                        wl[v] = __fadd_rn(__fmul_rn(wl[v], alpha), red[v]);
#pragma unroll
                        for (int j = 0; j < DPL; ++j) wacc[v][j] = __fmul_rn(wacc[v][j], alpha);
                        wm[v] = m_new[v];
                        p_s[v * kTile + lane] = pv[v];
                        max_cnt = max(max_cnt, cnt[v]);
                    }
                    // cnt[v] == kTile, written as the comparison itself (an ISETP in the SASS).
                    // Written on cnt, ptxas 13.0 made it a VIMNMX predicate, and the H200 profile
                    // took the unguarded PV form only where a tile held exactly kTile cells: the
                    // guarded one ran 99.6 % of a 512-row prompt's steps (bench/RESULTS.md,
                    // 2026-12-04 evening). Either form gives the same bits.
                    full = full && act[v] && vlast[v] + 1 - t * kTile >= kTile;
                }
                __syncwarp();

                // PV: cells in ascending order; lane owns dims DPL·lane .. DPL·lane + DPL − 1. Four
                // cells at a time: their V values, then per vector their four p (one 16-byte load);
                // rows and p past a vector's cells are stale and never used.
                const unsigned char* vrows = st + kTile * kRow;
                const float* vscales = reinterpret_cast<const float*>(st + 2 * kTile * kRow) + kTile;
                for (int c0 = 0; c0 < max_cnt; c0 += 4) {
                    float vf[4][DPL];
#pragma unroll
                    for (int k = 0; k < 4; ++k) {
                        const int c = c0 + k;
                        if (INT8) {
                            const int8_t* vp = reinterpret_cast<const int8_t*>(vrows + c * kRow) + DPL * lane;
                            const float vscale = vscales[c];
                            if constexpr (DPL == 4) {
                                const uint32_t w = *reinterpret_cast<const uint32_t*>(vp);
#pragma unroll
                                for (int j = 0; j < 4; ++j) vf[k][j] = prompt_i8((int8_t)((w >> (8 * j)) & 0xffu), vscale);
                            } else {
                                const uint32_t w = *reinterpret_cast<const uint16_t*>(vp);
#pragma unroll
                                for (int j = 0; j < 2; ++j) vf[k][j] = prompt_i8((int8_t)((w >> (8 * j)) & 0xffu), vscale);
                            }
                        } else {
                            const unsigned char* vp = vrows + c * kRow + 2 * DPL * lane;
                            if constexpr (DPL == 4) {
                                const uint2 raw = *reinterpret_cast<const uint2*>(vp);
                                const float2 x0 = half2_bits_to_float2(raw.x), x1 = half2_bits_to_float2(raw.y);
                                vf[k][0] = x0.x;
                                vf[k][1] = x0.y;
                                vf[k][2] = x1.x;
                                vf[k][3] = x1.y;
                            } else {
                                const float2 x0 = half2_bits_to_float2(*reinterpret_cast<const uint32_t*>(vp));
                                vf[k][0] = x0.x;
                                vf[k][1] = x0.y;
                            }
                        }
                    }
                    if (full) {
#pragma unroll
                        for (int v = 0; v < NV; ++v) {
                            const float4 p4 = *reinterpret_cast<const float4*>(p_s + v * kTile + c0);
                            const float pk[4] = {p4.x, p4.y, p4.z, p4.w};
#pragma unroll
                            for (int k = 0; k < 4; ++k)
#pragma unroll
                                for (int j = 0; j < DPL; ++j) wacc[v][j] = fmaf(pk[k], vf[k][j], wacc[v][j]);
                        }
                    } else {
#pragma unroll
                        for (int v = 0; v < NV; ++v) {
                            if (act[v] && c0 < cnt[v]) {
                                const float4 p4 = *reinterpret_cast<const float4*>(p_s + v * kTile + c0);
                                const float pk[4] = {p4.x, p4.y, p4.z, p4.w};
#pragma unroll
                                for (int k = 0; k < 4; ++k)
                                    if (c0 + k < cnt[v]) {
#pragma unroll
                                        for (int j = 0; j < DPL; ++j) wacc[v][j] = fmaf(pk[k], vf[k][j], wacc[v][j]);
                                    }
                            }
                        }
                    }
                }
                __syncwarp();  // p_s is rewritten by the next tile
            }
        }
        if (n & 1) {  // the worker's second tile: fold its state into the row state (canonical fold)
#pragma unroll
            for (int v = 0; v < NV; ++v) {
                if (wm[v] == kNegInf) continue;
                if (rm[v] == kNegInf) {
                    rm[v] = wm[v];
                    rl[v] = wl[v];
#pragma unroll
                    for (int j = 0; j < DPL; ++j) racc[v][j] = wacc[v][j];
                } else {
                    const float mn = fmaxf(rm[v], wm[v]);
                    const float al = expf(__fsub_rn(rm[v], mn)), be = expf(__fsub_rn(wm[v], mn));
                    rl[v] = fmaf(wl[v], be, __fmul_rn(rl[v], al));
#pragma unroll
                    for (int j = 0; j < DPL; ++j) racc[v][j] = fmaf(wacc[v][j], be, __fmul_rn(racc[v][j], al));
                    rm[v] = mn;
                }
            }
        }
    }
    cp_async_wait<0>();  // no copy outlives the block

#pragma unroll
    for (int v = 0; v < NV; ++v) {
        if (!vout(v)) continue;
        float* o = a.out + vrow(v) * ((int64_t)a.n_heads * HD) + (int64_t)vhead(v) * HD + DPL * lane;
#pragma unroll
        for (int j = 0; j < DPL; ++j) o[j] = rl[v] > 0.0f ? __fdiv_rn(racc[v][j], rl[v]) : 0.0f;
    }
}

}  // namespace

// ------------------------------------------------------------------ host

bool attention_prompt_off() {
    const AttentionEnv e = attention_env();
    return e == AttentionEnv::kLegacy || e == AttentionEnv::kNoPrompt;
}

namespace {

constexpr int64_t kMinRows = 128;

template <int HD, bool INT8>
void launch_prompt_variant(const PromptPlan& P, unsigned grid, cudaStream_t stream) {
    constexpr int NV = vectors_per_warp(HD);
    auto* fn = attention_prompt_kernel<HD, kWarps, NV, INT8>;
    constexpr int smem = prompt_smem_bytes<HD, kWarps, NV, INT8>();
    // A function attribute, not stream work: set in relaxed capture mode so that a first call made
    // while a graph is being recorded cannot invalidate the recording (as cuda_attention.cu does).
    static std::mutex mu;
    static bool raised[64] = {};
    int dev = 0;
    check(cudaGetDevice(&dev), "cudaGetDevice");
    std::unique_lock<std::mutex> lock(mu);
    if (dev < 0 || dev >= 64 || !raised[dev]) {
        cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
        (void)cudaThreadExchangeStreamCaptureMode(&mode);
        const cudaError_t err = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        (void)cudaThreadExchangeStreamCaptureMode(&mode);
        check(err, "cudaFuncSetAttribute (prompt attention shared memory)");
        if (dev >= 0 && dev < 64) raised[dev] = true;
    }
    lock.unlock();
    launch_k(fn, grid, kWarps * 32, smem, stream, P);
}

}  // namespace

bool launch_attention_prompt(const AttentionArgs& a, cudaStream_t stream, Scratch& scratch) {
    const SlotsView& s = a.slots;
    const int hd = s.head_dim;
    if (attention_prompt_off()) return false;
    // Smaller launches: the decode kernel. From 128 rows a launch is mostly prompt chunks (a mixed
    // step: decode rows, then chunks) or a large decode batch, which the decode kernel would run
    // unsplit anyway (128 rows x 3+ KV heads fill the SMs), so the hand-off costs one early-exit
    // launch; a chunk mid-context read once per block of rows instead of once per row is the gain.
    if (a.n_rows < kMinRows) return false;
    if (hd != 64 && hd != 128) return false;  // other widths (Gemma's 256, odd ones): the general kernel
    const bool int8 = s.kv_dtype == STRATA_KV_INT8;
    const void* base = int8 ? static_cast<const void*>(s.kv8) : static_cast<const void*>(s.kv);
    if (base == nullptr || reinterpret_cast<uintptr_t>(base) % 16 != 0) return false;
    if (int8 && (s.kv_scale == nullptr || reinterpret_cast<uintptr_t>(s.kv_scale) % 4 != 0)) return false;
    if (s.n_kv_heads <= 0 || a.n_heads % s.n_kv_heads != 0) return false;  // the general launcher reports it
    const int group = a.n_heads / s.n_kv_heads;
    const int R = prompt_rows_per_cta(group, hd);
    if (R < 1) return false;  // more query heads per KV head than a block holds: the general kernel

    PromptPlan P{};
    P.a = a;
    P.group = group;
    P.rows_per_cta = R;
    const int64_t blocks = (a.n_rows + R - 1) / R;
    if (blocks * s.n_kv_heads > (int64_t)INT32_MAX) fail(STRATA_ERR_INTERNAL, "cuda attention: too many rows for one launch");
    P.n_blocks = (int32_t)blocks;
    const unsigned grid = (unsigned)(blocks * s.n_kv_heads);
    if (hd == 64) {
        if (int8) launch_prompt_variant<64, true>(P, grid, stream);
        else launch_prompt_variant<64, false>(P, grid, stream);
    } else {
        if (int8) launch_prompt_variant<128, true>(P, grid, stream);
        else launch_prompt_variant<128, false>(P, grid, stream);
    }
    check_launch("attention (prompt)");
    // The rows of blocks that read several slots: the decode kernel, same bits.
    launch_attention_decode_rest(a, R, stream, scratch);
    return true;
}

}  // namespace cuda
}  // namespace strata

// cuda_attention_decode.cu — the lean causal attention kernel for decode-sized
// launches (fewer than 256 rows, head_dim 64 or 128, F16 or int8 KV pages):
// the same bits as cuda_attention.cu's kernel, far fewer instructions.
//
// The arithmetic of one query vector is the canonical one that
// cuda_attention.cu's header comment defines (tiles of 32 cells, chunks of 8
// tiles, worker w of chunk k taking tiles 8k+w then 8k+w+4 with an online
// softmax, the (chunk, worker) fold, out = acc / l); every expression below that
// touches a value is that file's expression, in that order, with the same
// explicit roundings (__fmul_rn, __fadd_rn, fmaf, expf, warp_sum, warp_max).
// What changes is only how the work is spread:
//   - one block of 4 warps serves ONE row and the query heads of one KV head
//     (up to NQ of them); warp w is worker w. There is no pass / shared-row
//     machinery, head_dim is a compile-time constant and nothing is staged:
//     lane c reads its cell's K row straight from the page (16-byte loads, the
//     page looked up once per tile), and in the PV step lane l reads dims
//     HD/32·l .. HD/32·l + HD/32 − 1 of each V row (one 4- or 8-byte load), so
//     shared memory holds only the queries, the probabilities and the worker
//     states (11-41 KB) and several blocks fit on an SM;
//   - a cell past the row's index may be loaded (it lies in the tile's page)
//     but its score is replaced by −inf and its V row is never multiplied in,
//     exactly as in the legacy kernel, so NaN there cannot leak in;
//   - long rows with few (row, KV head) items are split over S blocks without a
//     cluster: block s of an item computes chunks s, s + S, ..., writes each
//     chunk's 4 worker states to global scratch (P.states), and the last block
//     of the item to arrive (an atomic counter per item, reset to 0 by that
//     block so the next call and every graph replay find it zero) folds all of
//     them in the canonical (chunk, worker) order. Blocks with no chunk of
//     their row leave without arriving (the last of min(S, chunks) folds).
//     The plan is fixed at capture from n_ctx; the row's real length decides
//     at run time which blocks work;
//   - with S = 1, or a row of one chunk (at most 256 cells) whatever S, the
//     block folds each chunk's states in shared memory right after the chunk
//     (double-buffered, one barrier per chunk): no global states, fences or
//     arrival.
// The fold of one element is a left fold over the worker states in order; it
// is not associative, which is why the split stores raw worker states instead
// of per-block partial folds.
//
// STRATA_ATTENTION=legacy (read on every call) routes every call to
// cuda_attention.cu's kernel, so both paths can be compared in one process.
#include <cuda_fp16.h>

#include <cstdlib>
#include <cstring>

#include "cuda_attention_route.cuh"
#include "cuda_common.cuh"
#include "cuda_handoff.cuh"
#include "cuda_int_act.cuh"
#include "cuda_kernels.cuh"
#include "cuda_kv_layout.cuh"
#include "cuda_mma.cuh"
#include "cuda_rope.cuh"
#include "cuda_scratch.cuh"
#include "cuda_pdl.cuh"

namespace strata {
namespace cuda {

// The launch plan of one decode attention call (decided on the host, see launch_attention_decode).
struct DecodePlan {
    AttentionArgs a;
    int32_t group;          // G: query heads per KV head
    int32_t heads_per_cta;  // query heads of one KV head handled by a block (<= NQ)
    int32_t n_hgroups;      // ceil(G / heads_per_cta)
    int32_t split;          // S: blocks per (row, KV head, head group) item
    int32_t max_chunks;     // chunks of the longest possible row: ceil(n_ctx / 256)
    float* states;          // S > 1: [item][max_chunks][worker][NQ (2 + HD)] raw worker states
    int32_t* arrivals;      // S > 1: [item] blocks of the item done (zero between calls)
    int32_t* kv_arrivals;   // FUSED: [row][KV head] blocks that loaded their q and k (zero between calls)
    RopeKvStoreArgs rope;   // the fused launch (strata_rope_kv_store_attention) only: a.q is rope.qkv
    int32_t prompt_rows;    // > 0: after the prompt kernel (cuda_attention_prompt.cu) with blocks of
                            // this many rows: rows of its blocks that read one slot are skipped
    // strata_attention_handoff (non-null emit_xq): out's rows also rounded to the o projection's int8
    // blocks, the pre-pass layout (cuda_handoff.cuh): xq [row][n_heads * HD], {dx, sx} [row][emit_nbp].
    int8_t* emit_xq;
    uint2* emit_meta;
    int32_t emit_nbp;
    // STRATA_ATTENTION_EARLY_KV (unfused launches without prompt rows): 1 = each block asks L2 for the K
    // and V rows of its first chunk before pdl_wait (early_kv_prefetch); 0 = not.
    int32_t early_kv;
};

namespace {

// The canonical geometry (cuda_attention.cu's header comment).
constexpr int kTile = 32;
constexpr int kChunkTiles = 8;
constexpr int kWorkers = 4;
constexpr int kThreads = 32 * kWorkers;
constexpr float kNegInf = -__builtin_huge_valf();

static_assert(kPageCells % kTile == 0, "a key tile must not straddle two KV pages (kv_row)");

// Element i of a K or V row as the legacy kernel reads it: the F16 value, or float(q) * scale.
__device__ __forceinline__ float dec_i8(uint32_t word, int byte, float scale) {
    return __fmul_rn((float)(int8_t)((word >> (8 * byte)) & 0xffu), scale);
}

// The narrow instantiation for blocks of heads_per_cta query heads (STRATA_ATTENTION_NARROW): the fewest
// query-vector slots, halving from nq (4 or 8), that still hold the block's heads and give each of the
// fold's 128 threads a whole row-state element (head_dim 128: at least 1 slot; 64: at least 2). Which
// slots a vector takes never changes its arithmetic. Host code (decode_launch), here
// so that the emulator's test_kernels decode, which keeps only this part of the file, calls it too.
int narrow_query_slots(int nq, int heads_per_cta, int hd) {
    const int least = hd == 128 ? 1 : 2;
    while (nq / 2 >= least && nq / 2 >= heads_per_cta) nq /= 2;
    return nq;
}

// The fused launch (FUSED != 0): strata_rope_kv_store followed by this attention, in one kernel,
// for launches whose rows read no cell another row of the launch writes (decode rows of distinct
// slots). Every block of (row r, KV head kvh, head group) first does rope_kv_store's work for what
// it reads, with rope_kv_store's expressions (cuda_rope.cuh, cuda_kv_store.cu store_head):
//   - it rotates its query heads as they are loaded (cos/sin of the row's table cell computed by the
//     block, rope_inverse_frequency / rope_cos_sin) and its KV head's k, and rounds k and v to the
//     cache's form (F16 round to nearest even, or the int8 rule with the warp's exact max) into
//     shared memory; the block (KV head, head group 0, rank 0) stores that cell (values, int8
//     scales) into the page;
//   - the attention then reads cell `index` from that shared copy (the values AS STORED, so the
//     bits are those of reading the cache after the store) and every other cell from the cache;
//   - the rotated q and k go back to the qkv row only once no block still reads the originals:
//     every block of (row, KV head) counts itself in P.kv_arrivals after loading (the atomic's
//     result is awaited only at the block's end), and the last one rotates the KV head's G query
//     heads again from the originals (the same expressions, so the same values) and writes them
//     and its k, then resets the counter to 0 for the next call and every graph replay.
// A row whose cell is not stored (an unmapped page) reads the cache as the separate attention does;
// a row without a table cell is not rotated (strata_rope's padding rule). FUSED == 2 is a deliberately
// wrong variant (the new cell taken before rounding) that only the emulator's negative control runs.
constexpr int kFusedUnroundedForTests = 2;

// strata_attention_handoff: the int8 blocks of this block's output for the o projection, made where
// the values are. A thread's kE output values are consecutive and a block of 32 values is aligned
// within a head (head_dim 64 or 128), so the 32 / kE neighbouring lanes that hold it round it
// together (cuda_int_act.cuh, int_act_round_lanes: the pre-pass's per-element steps), hence
// int_prepass_kernel's bits for prologue NONE. e: the thread's first element in the row; every
// lane runs the shuffles, `store` says whether its values are the block's output (ve < nh).
template <int kE>
__device__ __forceinline__ void emit_out_blocks(const DecodePlan& P, int r, int64_t k_row, int64_t e,
                                                const float (&v)[kE], bool store) {
    int q[kE];
    const uint2 meta = int_act_round_lanes<kE>(v, q);
    if (!store) return;
    int8_t* xq = P.emit_xq + (int64_t)r * k_row + e;
#pragma unroll
    for (int i = 0; i < kE; ++i) xq[i] = (int8_t)q[i];
    if ((threadIdx.x & (32 / kE - 1)) == 0) P.emit_meta[(int64_t)r * P.emit_nbp + (e >> 5)] = meta;
}

// Before pdl_wait() (cuda_pdl.cuh), where P.early_kv: the K and V rows of the block's first chunk asked of
// L2 (prefetch.global.L2: a hint, nothing comes back into registers), so the tiles the block reads first
// after the wait meet L2 instead of DRAM while the kernel before it (rope_kv_store) still runs. The
// addresses come from the row's slot and index (the step's rows table) and the slot's page table,
// which that kernel never writes; kv_row keeps every address inside the pool whatever the values
// (an unmapped page reads the null page), and the cell that kernel is storing may be asked for
// before or after its store: L2 is the point of coherence, so no later load can see a stale value.
// The blocks of one KV head (head groups) take every n_hgroups-th line each, so no line is asked twice.
template <int HD, bool INT8>
__device__ __forceinline__ void early_kv_prefetch(const DecodePlan& P) {
    if (!P.early_kv) return;
    const AttentionArgs& a = P.a;
    const SlotsView& s = a.slots;
    const int S = P.split;
    const int item = (int)(blockIdx.x / (unsigned)S), rank = (int)(blockIdx.x % (unsigned)S);
    const int hg = item % P.n_hgroups, rest = item / P.n_hgroups;
    const int kvh = rest % s.n_kv_heads, r = rest / s.n_kv_heads;
    if (r >= a.n_rows) return;
    const int32_t slot = __ldcg(a.rows + 2 * r), ix = __ldcg(a.rows + 2 * r + 1);
    if (a.layer < 0 || a.layer >= s.n_layers || slot < 0 || slot >= s.n_slots || ix < 0 || ix >= s.n_ctx) return;
    const int first = a.window > 0 ? max(0, (int)ix - a.window + 1) : 0;
    // The block's first chunk (rank), from the window's first tile to the row's last cell.
    const int c_lo = max(rank * kChunkTiles, first / kTile) * kTile, c_hi = min((rank + 1) * kChunkTiles * kTile, (int)ix + 1);
    constexpr int kRowBytes = INT8 ? HD : 2 * HD, kLines = (kRowBytes + 127) / 128;
    const char* base = INT8 ? reinterpret_cast<const char*>(s.kv8) : reinterpret_cast<const char*>(s.kv);
    const int n = (c_hi - c_lo) * 2 * kLines;  // (cell, K or V, line)
    for (int e = (int)threadIdx.x * P.n_hgroups + hg; e < n; e += kThreads * P.n_hgroups) {
        const int line = e % kLines, which = (e / kLines) & 1, cell = c_lo + e / (2 * kLines);
        const size_t at = kv_row(s, slot, a.layer, which, kvh, cell) * (INT8 ? 1 : 2);
        prefetch_l2(base + at + 128 * line);
    }
}

// HD: head_dim (64 or 128); NQ: query vectors per block; INT8: int8 pool (STRATA_KV_INT8); FUSED: above.
template <int HD, int NQ, bool INT8, int FUSED = 0>
__global__ void __launch_bounds__(kThreads, NQ > 4 ? 3 : 4) attention_decode_kernel(const DecodePlan P) {
    early_kv_prefetch<HD, INT8>(P);  // L2 hints only, before the wait (P.early_kv)
    pdl_wait();
    pdl_launch_dependents();
    constexpr int DPL = HD / 32;            // PV: dims per lane (lane l owns DPL·l .. DPL·l + DPL − 1)
    constexpr int kWs = NQ * (2 + HD);      // one worker state: m[NQ], l[NQ], acc[NQ][HD]
    constexpr int kElems = NQ * HD / kThreads;  // row-state elements per thread in the fold (1..8)
    static_assert(HD == 64 || HD == 128, "head_dim 64 or 128");
    static_assert(kElems >= 1 && (kElems == 1 || kElems % 2 == 0), "whole elements per thread, pairs above one");
    __shared__ float4 q4[NQ * HD / 4];
    __shared__ float p_all[kWorkers][NQ][kTile];
    __shared__ float4 ws4[2 * kWorkers * kWs / 4];  // S = 1: [parity][worker][kWs], float2-aligned parts
    __shared__ int last_block;
    // FUSED: cos/sin of the row's cell for q and k, the rotated k head (F32), and cell `index` as the
    // cache holds it after the store (F16 bits or int8 values as 16-byte words, the int8 scales).
    constexpr int kFH = FUSED ? HD / 2 : 1;
    __shared__ float f_cos_q[kFH], f_sin_q[kFH], f_cos_k[kFH], f_sin_k[kFH];
    __shared__ float f_k[FUSED ? HD : 1];
    __shared__ uint4 f_new[FUSED ? 2 * HD * (INT8 ? 1 : 2) / 16 : 1];  // [K | V] rows of the new cell
    __shared__ float f_scale[2];
    const float* q_s = reinterpret_cast<const float*>(q4);
    auto ws = [&](int parity, int w) { return reinterpret_cast<float*>(ws4) + (parity * kWorkers + w) * kWs; };

    const AttentionArgs& a = P.a;
    const SlotsView& s = a.slots;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int S = P.split;
    const int item = (int)(blockIdx.x / (unsigned)S), rank = (int)(blockIdx.x % (unsigned)S);
    const int hg = item % P.n_hgroups, rest = item / P.n_hgroups;
    const int kvh = rest % s.n_kv_heads, r = rest / s.n_kv_heads;
    const int h0 = kvh * P.group + hg * P.heads_per_cta;
    const int nh = min(P.heads_per_cta, P.group - hg * P.heads_per_cta);
    // Served by the prompt kernel: the whole block returns, before any barrier and (split plans)
    // before arriving; every block of the item decides the same.
    if (P.prompt_rows > 0 && prompt_block_single_slot(a, (int64_t)(r / P.prompt_rows) * P.prompt_rows, P.prompt_rows))
        return;
    const int32_t slot = a.rows[2 * r], ix = a.rows[2 * r + 1];
    const bool valid = a.layer >= 0 && a.layer < s.n_layers && nh > 0 && slot >= 0 && slot < s.n_slots && ix >= 0 &&
                       ix < s.n_ctx;
    const int last = valid ? ix : -1;                                        // the row's last cell
    const int first = valid && a.window > 0 ? max(0, (int)ix - a.window + 1) : 0;  // its first visible one
    const int n_tiles = last < 0 ? 0 : last / kTile + 1;
    const int n_chunks = (n_tiles + kChunkTiles - 1) / kChunkTiles;
    // Tiles wholly below the window come, in every worker, before any visible cell and add nothing:
    // skipped, as in the legacy kernel (no bit changes).
    const int t_first = first / kTile;
    const int n_rounds = rank < n_chunks ? (n_chunks - rank + S - 1) / S : 0;
    // The item's working blocks: those with a chunk of the row (block 0 always, to write the output of
    // a row with none). One working block (every row of at most 256 cells, whatever S) folds its chunk
    // in shared memory as an unsplit block does: the same states in the same (chunk, worker) order, so
    // the same bits, without the global states, fences and arrival. Idle blocks leave at once (the
    // fused launch's keep their rope / store work and leave before the arrival); every block of the
    // item reads the same row, so all decide alike.
    const int working = max(1, min(S, n_chunks));
    const bool local_fold = working == 1;
    if (!FUSED && rank >= working) return;

    if (n_rounds > 0 || FUSED) {
        // The block's query vectors (zero past its heads).
        for (int e = tid; e < NQ * HD; e += kThreads) {
            const int v = e / HD, d = e - v * HD;
            reinterpret_cast<float*>(q4)[e] = v < nh ? a.q[(int64_t)r * a.q_row_stride + (int64_t)(h0 + v) * HD + d] : 0.0f;
        }
    }
    // FUSED: whether cell `index` comes from f_new (the row's cell is stored by this launch); the
    // blocks that read this KV head's q and k originals, and this block's place among them.
    bool fused_new = false;
    const int kv_blocks = P.n_hgroups * S;
    int kv_old = 0;
    if constexpr (FUSED != 0) {
        const RopeKvStoreArgs& R = P.rope;
        const strata_rope_params& pq = R.q_params;
        const strata_rope_params& pk = R.k_params;
        const int32_t* cell = rope_table_cell(s, slot, ix);
        fused_new = kv_row_valid(s, a.layer, slot, ix);
        const bool owner = hg == 0 && rank == 0;  // stores the cache cell (once per KV head)
        float* qrow = R.qkv + (int64_t)r * R.row_stride;
        float* krow = qrow + (int64_t)pq.n_heads * HD + (int64_t)kvh * HD;
        const float* vrow = qrow + (int64_t)(pq.n_heads + s.n_kv_heads) * HD + (int64_t)kvh * HD;
        for (int d = tid; d < HD; d += kThreads) f_k[d] = krow[d];
        const int half_q = pq.rot_dim / 2, half_k = pk.rot_dim / 2;
        if (cell != nullptr) {  // q's and k's angles on different threads: one pow + sincosf deep, not two
            for (int e = tid; e < half_q + half_k; e += kThreads) {
                if (e < half_q) {
                    rope_cos_sin(pq, e, rope_inverse_frequency(pq, e, R.freq_factors), cell, &f_cos_q[e], &f_sin_q[e]);
                } else {
                    const int j = e - half_q;
                    rope_cos_sin(pk, j, rope_inverse_frequency(pk, j, R.freq_factors), cell, &f_cos_k[j], &f_sin_k[j]);
                }
            }
        }
        __syncthreads();
        if (cell != nullptr) {  // rotate: pair (vector v, frequency j) of q, then the pairs of k
            const bool adj_q = pq.mode == STRATA_ROPE_ADJACENT, adj_k = pk.mode == STRATA_ROPE_ADJACENT;
            float* qs = reinterpret_cast<float*>(q4);
            for (int e = tid; e < nh * half_q; e += kThreads) {
                const int v = e / half_q, j = e - v * half_q;
                const int i0 = adj_q ? 2 * j : j, i1 = adj_q ? 2 * j + 1 : j + half_q;
                float* x = qs + v * HD;
                rope_rotate_values(x[i0], x[i1], f_cos_q[j], f_sin_q[j], &x[i0], &x[i1]);
            }
            for (int j = tid; j < half_k; j += kThreads) {
                const int i0 = adj_k ? 2 * j : j, i1 = adj_k ? 2 * j + 1 : j + half_k;
                rope_rotate_values(f_k[i0], f_k[i1], f_cos_k[j], f_sin_k[j], &f_k[i0], &f_k[i1]);
            }
        }
        __syncthreads();  // (also: every thread's loads of q and k are done)
        if (tid == 0) kv_old = kv_blocks > 1 ? atomicAdd(&P.kv_arrivals[r * s.n_kv_heads + kvh], 1) : 0;
        if (fused_new) {  // the cell as the store writes it
            if constexpr (INT8) {
                // Warp 0 rounds K, warp 1 V: store_head's rule (an exact max over the warp).
                int8_t* nb = reinterpret_cast<int8_t*>(f_new);
                if (warp < 2) {
                    const float* x = warp == 0 ? f_k : vrow;
                    float amax = 0.0f;
                    for (int i = lane; i < HD; i += 32) amax = fmaxf(amax, fabsf(x[i]));
                    amax = warp_max(amax);
                    const float sc = __fdiv_rn(amax, 127.0f);
                    if (lane == 0) f_scale[warp] = sc;
                    for (int i = lane; i < HD; i += 32) {
                        const float rr = sc > 0.0f ? rintf(__fdiv_rn(x[i], sc)) : 0.0f;
                        const int8_t q8 = (int8_t)fminf(127.0f, fmaxf(-127.0f, rr));
                        nb[warp * HD + i] = q8;
                        if (owner) {
                            const size_t at = kv_row(s, slot, a.layer, warp, kvh, ix);
                            s.kv8[at + i] = q8;
                            if (i == 0) s.kv_scale[at / HD] = sc;
                        }
                    }
                }
            } else {
                __half* nb = reinterpret_cast<__half*>(f_new);
                __half* kc = reinterpret_cast<__half*>(s.kv) + kv_row(s, slot, a.layer, 0, kvh, ix);
                __half* vc = reinterpret_cast<__half*>(s.kv) + kv_row(s, slot, a.layer, 1, kvh, ix);
                for (int d = tid; d < HD; d += kThreads) {
                    const __half kh = __float2half_rn(f_k[d]), vh = __float2half_rn(vrow[d]);
                    nb[d] = kh;
                    nb[HD + d] = vh;
                    if (owner) {
                        kc[d] = kh;
                        vc[d] = vh;
                    }
                }
            }
        }
    }
    __syncthreads();

    // The row-state elements this thread owns: kElems consecutive ones from e0 = kElems·tid, all of
    // vector ve = e0 / HD (dims de .. de + kElems − 1), so one state's part is one vector load.
    const int e0 = kElems * tid, ve = e0 / HD, de = e0 - ve * HD;
    float em[kElems], el[kElems], ea[kElems];
#pragma unroll
    for (int k = 0; k < kElems; ++k) {
        em[k] = kNegInf;
        el[k] = 0.0f;
        ea[k] = 0.0f;
    }
    // Folds one worker state (its m and l for vector ve, its acc at the owned dims) into the owned
    // elements: the legacy fold, element by element.
    auto fold = [&](float mx, float lx, const float (&ax)[kElems]) {
        if (mx == kNegInf) return;
#pragma unroll
        for (int k = 0; k < kElems; ++k) {
            if (em[k] == kNegInf) {
                em[k] = mx;
                el[k] = lx;
                ea[k] = ax[k];
            } else {
                const float mn = fmaxf(em[k], mx);
                const float al = expf(__fsub_rn(em[k], mn)), be = expf(__fsub_rn(mx, mn));
                el[k] = fmaf(lx, be, __fmul_rn(el[k], al));
                ea[k] = fmaf(ax[k], be, __fmul_rn(ea[k], al));
                em[k] = mn;
            }
        }
    };
    // The owned part of state x (layout of ws): plain loads from shared memory, or L2 loads (__ldcg:
    // written by other blocks of this launch) from the global scratch.
    auto load_state = [&](const float* x, bool global, float& mx, float& lx, float (&ax)[kElems]) {
        const float* a0 = x + 2 * NQ + ve * HD + de;
        if (global) {
            mx = __ldcg(x + ve);
            lx = __ldcg(x + NQ + ve);
            if constexpr (kElems == 1) {
                ax[0] = __ldcg(a0);
            } else {
#pragma unroll
                for (int k = 0; k < kElems; k += 2) {
                    const float2 t2 = __ldcg(reinterpret_cast<const float2*>(a0 + k));
                    ax[k] = t2.x;
                    ax[k + 1] = t2.y;
                }
            }
        } else {
            mx = x[ve];
            lx = x[NQ + ve];
            if constexpr (kElems == 1) {
                ax[0] = a0[0];
            } else {
#pragma unroll
                for (int k = 0; k < kElems; k += 2) {
                    const float2 t2 = *reinterpret_cast<const float2*>(a0 + k);
                    ax[k] = t2.x;
                    ax[k + 1] = t2.y;
                }
            }
        }
    };

    const __half* kvh16 = reinterpret_cast<const __half*>(s.kv);
    float m[NQ], l[NQ], acc[NQ][DPL];
    for (int i = 0; i < n_rounds; ++i) {
        const int chunk = rank + i * S;
#pragma unroll
        for (int v = 0; v < NQ; ++v) {
            m[v] = kNegInf;
            l[v] = 0.0f;
#pragma unroll
            for (int j = 0; j < DPL; ++j) acc[v][j] = 0.0f;
        }
        for (int half = 0; half < 2; ++half) {
            const int t = chunk * kChunkTiles + warp + kWorkers * half;
            if (t >= n_tiles || t < t_first) continue;
            const int cell0 = t * kTile;
            const int count = min(kTile, last + 1 - cell0);  // the row's cells in this tile (>= 1)
            const size_t kb = kv_row(s, slot, a.layer, 0, kvh, cell0), vb = kv_row(s, slot, a.layer, 1, kvh, cell0);
            // The tile's V rows asked of L2 now, lane c for cell c, beside the K loads: the PV step
            // loads them eight rows at a time after the softmax, and each of those round trips then
            // meets L2 instead of DRAM (a decode step's other kernels evict the cache). A hint only:
            // no value depends on it.
            if (lane < count) {
                const char* vrow = INT8 ? reinterpret_cast<const char*>(s.kv8 + vb + (size_t)lane * HD)
                                        : reinterpret_cast<const char*>(kvh16 + vb + (size_t)lane * HD);
                prefetch_l2(vrow);
                if (!INT8 && HD * 2 > 128) prefetch_l2(vrow + 128);
            }

            // Scores: lane c takes cell c; even and odd dims in two FMA chains, ascending.
            float se[NQ], so[NQ];
#pragma unroll
            for (int v = 0; v < NQ; ++v) se[v] = so[v] = 0.0f;
            if (INT8) {
                const int8_t* kp = s.kv8 + kb + (size_t)lane * HD;
                const float kscale = __ldg(s.kv_scale + kb / HD + lane);
                const bool mine_new = FUSED && fused_new && cell0 + lane == ix;  // cell `index`: f_new
                const float kscale_used = mine_new ? f_scale[0] : kscale;
#pragma unroll
                for (int d0 = 0; d0 < HD; d0 += 16) {
                    uint4 raw = __ldg(reinterpret_cast<const uint4*>(kp + d0));
                    if (FUSED && mine_new) raw = f_new[d0 / 16];
                    const uint32_t w4[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
                    for (int i2 = 0; i2 < 8; ++i2) {
                        float k0 = dec_i8(w4[i2 >> 1], 2 * (i2 & 1), kscale_used);
                        float k1 = dec_i8(w4[i2 >> 1], 2 * (i2 & 1) + 1, kscale_used);
                        if (FUSED == kFusedUnroundedForTests && mine_new) {
                            k0 = f_k[d0 + 2 * i2];
                            k1 = f_k[d0 + 2 * i2 + 1];
                        }
#pragma unroll
                        for (int v = 0; v < NQ; ++v) {
                            if (v < nh) {
                                const float2 qq = *reinterpret_cast<const float2*>(q_s + v * HD + d0 + 2 * i2);
                                se[v] = fmaf(qq.x, k0, se[v]);
                                so[v] = fmaf(qq.y, k1, so[v]);
                            }
                        }
                    }
                }
            } else {
                const __half* kp = kvh16 + kb + (size_t)lane * HD;
                const bool mine_new = FUSED && fused_new && cell0 + lane == ix;  // cell `index`: f_new
#pragma unroll
                for (int d0 = 0; d0 < HD; d0 += 8) {
                    uint4 raw = __ldg(reinterpret_cast<const uint4*>(kp + d0));
                    if (FUSED && mine_new) raw = f_new[d0 / 8];
                    float2 k01 = half2_bits_to_float2(raw.x), k23 = half2_bits_to_float2(raw.y);
                    float2 k45 = half2_bits_to_float2(raw.z), k67 = half2_bits_to_float2(raw.w);
                    if (FUSED == kFusedUnroundedForTests && mine_new) {
                        k01 = make_float2(f_k[d0], f_k[d0 + 1]);
                        k23 = make_float2(f_k[d0 + 2], f_k[d0 + 3]);
                        k45 = make_float2(f_k[d0 + 4], f_k[d0 + 5]);
                        k67 = make_float2(f_k[d0 + 6], f_k[d0 + 7]);
                    }
#pragma unroll
                    for (int v = 0; v < NQ; ++v) {
                        if (v < nh) {
                            const float4 qa = q4[(v * HD + d0) / 4], qb = q4[(v * HD + d0) / 4 + 1];
                            se[v] = fmaf(qa.x, k01.x, se[v]);
                            so[v] = fmaf(qa.y, k01.y, so[v]);
                            se[v] = fmaf(qa.z, k23.x, se[v]);
                            so[v] = fmaf(qa.w, k23.y, so[v]);
                            se[v] = fmaf(qb.x, k45.x, se[v]);
                            so[v] = fmaf(qb.y, k45.y, so[v]);
                            se[v] = fmaf(qb.z, k67.x, se[v]);
                            so[v] = fmaf(qb.w, k67.y, so[v]);
                        }
                    }
                }
            }

            // V rows c0 .. c0 + 7 at the lane's dims; the first eight are requested before the softmax.
            float vf[8][DPL];
            auto load_v = [&](int c0, float (&dst)[8][DPL]) {
#pragma unroll
                for (int i2 = 0; i2 < 8; ++i2) {
                    const int c = c0 + i2;
                    // FUSED: cell `index` (a warp-uniform test) comes from f_new, the rest from the page.
                    const bool is_new = FUSED && fused_new && cell0 + c == ix;
                    if (INT8) {
                        const int8_t* vp = is_new ? reinterpret_cast<const int8_t*>(f_new) + HD + DPL * lane
                                                  : s.kv8 + vb + (size_t)c * HD + DPL * lane;
                        const float vscale = is_new ? f_scale[1] : __ldg(s.kv_scale + vb / HD + c);
                        const uint32_t word = is_new ? (DPL == 4 ? *reinterpret_cast<const unsigned int*>(vp)
                                                                 : (uint32_t)*reinterpret_cast<const unsigned short*>(vp))
                                              : DPL == 4 ? __ldg(reinterpret_cast<const unsigned int*>(vp))
                                                         : (uint32_t)__ldg(reinterpret_cast<const unsigned short*>(vp));
#pragma unroll
                        for (int j = 0; j < DPL; ++j) dst[i2][j] = dec_i8(word, j, vscale);
                    } else {
                        const __half* vp = is_new ? reinterpret_cast<const __half*>(f_new) + HD + DPL * lane
                                                  : kvh16 + vb + (size_t)c * HD + DPL * lane;
                        if constexpr (DPL == 4) {
                            const uint2 raw = is_new ? *reinterpret_cast<const uint2*>(vp)
                                                     : __ldg(reinterpret_cast<const uint2*>(vp));
                            const float2 x0 = half2_bits_to_float2(raw.x), x1 = half2_bits_to_float2(raw.y);
                            dst[i2][0] = x0.x;
                            dst[i2][1] = x0.y;
                            dst[i2][2] = x1.x;
                            dst[i2][3] = x1.y;
                        } else {
                            const float2 x0 = half2_bits_to_float2(
                                is_new ? *reinterpret_cast<const unsigned int*>(vp)
                                       : __ldg(reinterpret_cast<const unsigned int*>(vp)));
                            dst[i2][0] = x0.x;
                            dst[i2][1] = x0.y;
                        }
                    }
                }
            };
            load_v(0, vf);

            // Online softmax per vector (the legacy expressions); on[v]: the vector takes this tile's cells.
            // F16 pools: the warp max and warp sum of the NQ vectors run together (warp_allreduce,
            // cuda_common.cuh: the butterfly's operations per value, so the same bits, with no branch
            // around the shuffles); vectors past nh contribute −inf scores and zero weights and are not
            // updated. Int8 pools keep one vector at a time: with their dequantization state the
            // batched form spilled (16-76 bytes, nvcc 13.0).
            bool on[NQ];
            const bool seen = lane < count && cell0 + lane >= first;  // causal and in the window
            if constexpr (!INT8) {
                float sc[NQ], red[NQ], m_new[NQ], pv[NQ];
#pragma unroll
                for (int v = 0; v < NQ; ++v) {
                    sc[v] = v < nh && seen ? __fmul_rn(__fadd_rn(se[v], so[v]), a.scale) : kNegInf;
                    red[v] = sc[v];
                }
                warp_allreduce<NQ>(red, lane, [](float x, float y) { return fmaxf(x, y); });
#pragma unroll
                for (int v = 0; v < NQ; ++v) {
                    m_new[v] = fmaxf(m[v], red[v]);
                    on[v] = v < nh && m_new[v] != kNegInf;  // else every score so far is -inf: nothing to add
                    pv[v] = on[v] ? expf(__fsub_rn(sc[v], m_new[v])) : 0.0f;
                    red[v] = pv[v];
                }
                warp_allreduce<NQ>(red, lane, [](float x, float y) { return __fadd_rn(x, y); });
#pragma unroll
                for (int v = 0; v < NQ; ++v) {
                    if (on[v]) {
                        const float alpha = expf(__fsub_rn(m[v], m_new[v]));
                        l[v] = __fadd_rn(__fmul_rn(l[v], alpha), red[v]);
#pragma unroll
                        for (int j = 0; j < DPL; ++j) acc[v][j] = __fmul_rn(acc[v][j], alpha);
                        m[v] = m_new[v];
                        p_all[warp][v][lane] = pv[v];
                    }
                }
            } else {
#pragma unroll
                for (int v = 0; v < NQ; ++v) {
                    on[v] = false;
                    if (v < nh) {
                        const float sc = seen ? __fmul_rn(__fadd_rn(se[v], so[v]), a.scale) : kNegInf;
                        const float m_new = fmaxf(m[v], warp_max(sc));
                        if (m_new != kNegInf) {  // else every score so far is -inf: nothing to add
                            on[v] = true;
                            const float alpha = expf(__fsub_rn(m[v], m_new));
                            const float p = expf(__fsub_rn(sc, m_new));
                            l[v] = __fadd_rn(__fmul_rn(l[v], alpha), warp_sum(p));
#pragma unroll
                            for (int j = 0; j < DPL; ++j) acc[v][j] = __fmul_rn(acc[v][j], alpha);
                            m[v] = m_new;
                            p_all[warp][v][lane] = p;
                        }
                    }
                }
            }
            __syncwarp();

            // PV: cells in ascending order (the legacy order), eight V rows loaded ahead (rows past
            // `count` lie in the tile's page and are loaded but never used).
            for (int c0 = 0; c0 < count; c0 += 8) {
                if (c0 > 0) load_v(c0, vf);
#pragma unroll
                for (int i2 = 0; i2 < 8; ++i2) {
                    const int c = c0 + i2;
                    if (c < count) {
#pragma unroll
                        for (int v = 0; v < NQ; ++v) {
                            if (on[v]) {
                                const float p = p_all[warp][v][c];
#pragma unroll
                                for (int j = 0; j < DPL; ++j) acc[v][j] = fmaf(p, vf[i2][j], acc[v][j]);
                            }
                        }
                    }
                }
            }
            __syncwarp();  // p_all is rewritten by the next tile
        }

        // The chunk's worker state: to shared memory (one working block) or to the item's global scratch.
        float* mine = local_fold ? ws(i & 1, warp)
                             : P.states + (((size_t)item * P.max_chunks + chunk) * kWorkers + warp) * kWs;
#pragma unroll
        for (int v = 0; v < NQ; ++v) {
            if (lane == 0) {
                mine[v] = m[v];
                mine[NQ + v] = l[v];
            }
#pragma unroll
            for (int j = 0; j < DPL; ++j) mine[2 * NQ + v * HD + DPL * lane + j] = acc[v][j];
        }
        if (local_fold) {
            __syncthreads();
#pragma unroll
            for (int w = 0; w < kWorkers; ++w) {
                float mx, lx, ax[kElems];
                load_state(ws(i & 1, w), false, mx, lx, ax);
                fold(mx, lx, ax);
            }
        }
    }

    if constexpr (FUSED != 0) {
        // The last block of (row, KV head) to have loaded writes back the rotated q heads and k.
        if (tid == 0) last_block = kv_old == kv_blocks - 1;
        __syncthreads();
        if (last_block) {
            const RopeKvStoreArgs& R = P.rope;
            const strata_rope_params& pq = R.q_params;
            const int32_t* cell = rope_table_cell(s, slot, ix);
            if (cell != nullptr) {
                float* qrow = R.qkv + (int64_t)r * R.row_stride;
                float* krow = qrow + (int64_t)pq.n_heads * HD + (int64_t)kvh * HD;
                const int half_q = pq.rot_dim / 2, half_k = R.k_params.rot_dim / 2;
                const bool adj_q = pq.mode == STRATA_ROPE_ADJACENT, adj_k = R.k_params.mode == STRATA_ROPE_ADJACENT;
                for (int e = tid; e < P.group * half_q; e += kThreads) {
                    const int v = e / half_q, j = e - v * half_q;
                    const int i0 = adj_q ? 2 * j : j, i1 = adj_q ? 2 * j + 1 : j + half_q;
                    float* x = qrow + (int64_t)(kvh * P.group + v) * HD;
                    rope_rotate_values(x[i0], x[i1], f_cos_q[j], f_sin_q[j], &x[i0], &x[i1]);
                }
                for (int j = tid; j < half_k; j += kThreads) {
                    const int i0 = adj_k ? 2 * j : j, i1 = adj_k ? 2 * j + 1 : j + half_k;
                    krow[i0] = f_k[i0];
                    krow[i1] = f_k[i1];
                }
            }
            if (tid == 0 && kv_blocks > 1) P.kv_arrivals[r * s.n_kv_heads + kvh] = 0;  // all have arrived
        }
        __syncthreads();  // last_block is reused below
    }

    if (rank >= working) return;  // an idle block of the fused launch, its rope / store work done
    if (!local_fold) {
        // Arrive; the item's last working block folds every chunk's worker states in order.
        __threadfence();
        __syncthreads();
        if (tid == 0) last_block = atomicAdd(&P.arrivals[item], 1) == working - 1;
        __syncthreads();
        if (!last_block) return;
        __threadfence();
        // Eight states' loads in flight at a time (the fold itself is a short dependent chain).
        const float* base = P.states + (size_t)item * P.max_chunks * kWorkers * kWs;
        const int nx = n_chunks * kWorkers;
        for (int x0 = 0; x0 < nx; x0 += 8) {
            float mx[8], lx[8], ax[8][kElems];
#pragma unroll
            for (int j = 0; j < 8; ++j)
                if (x0 + j < nx) load_state(base + (size_t)(x0 + j) * kWs, true, mx[j], lx[j], ax[j]);
#pragma unroll
            for (int j = 0; j < 8; ++j)
                if (x0 + j < nx) fold(mx[j], lx[j], ax[j]);
        }
        if (tid == 0) P.arrivals[item] = 0;  // every block of the item has arrived: ready for the next call
    }

    float ov[kElems];
#pragma unroll
    for (int k = 0; k < kElems; ++k) ov[k] = el[k] > 0.0f ? __fdiv_rn(ea[k], el[k]) : 0.0f;
    const int64_t k_row = (int64_t)a.n_heads * HD, eo = (int64_t)(h0 + ve) * HD + de;
    if (ve < nh) {
        float* o = a.out + (int64_t)r * k_row + eo;
#pragma unroll
        for (int k = 0; k < kElems; ++k) o[k] = ov[k];
    }
    if (P.emit_xq != nullptr) emit_out_blocks<kElems>(P, r, k_row, eo, ov, ve < nh);  // every thread: shuffles
}

}  // namespace

// ------------------------------------------------------------------ host

bool attention_legacy_selected() { return attention_env() == AttentionEnv::kLegacy; }

namespace {

// STRATA_ATTENTION=wide: every block takes all the query heads of its KV head (up to NQ), the plan
// before query heads were spread over blocks for launches with few items; for A/B, same bits.
bool attention_wide_selected() { return attention_env() == AttentionEnv::kWide; }

// STRATA_ATTENTION_NARROW (strata/env.py; read at each call): 1 = blocks of one or two query heads run
// the kernel instantiated for that many (decode_launch's kq); 0 = the 4- or 8-slot kernel whatever the
// block holds, as before (for A/B). The same bits either way.
constexpr bool kNarrowDefault = true;  // unset: on since the H100 A/B (bench/RESULTS.md, 2026-12-07 fifth session)
bool narrow_attention_enabled() {
    return env_switch("STRATA_ATTENTION_NARROW", kNarrowDefault,
                      "0 (the 4- or 8-slot kernel for every block) or 1 (slots for the block's heads)");
}

// STRATA_ATTENTION_EARLY_KV (strata/env.py; read at each call): 1 = unfused launches without prompt rows ask
// L2 for each block's first chunk of K and V rows before the wait (early_kv_prefetch); 0 (default until
// timed on a device) = not. A hint: the same bits either way.
bool early_kv_enabled() { return env_switch("STRATA_ATTENTION_EARLY_KV", false); }

}  // namespace

namespace {

constexpr int kMaxSplit = 16;
constexpr size_t kMaxStateBytes = (size_t)128 << 20;  // beyond it a call runs unsplit (still exact)
constexpr size_t kCounterBytes = (size_t)64 << 10;     // arrival counters: up to 16384 split items
// The scratch's zeroed prefix (the same size on every call, cuda_scratch.cuh): the split items'
// counters, then the fused launch's (row, KV head) counters (up to 16384).
constexpr size_t kZeroBytes = 2 * kCounterBytes;

int decode_sm_count() {
    int dev = 0, n = 0;
    check(cudaGetDevice(&dev), "cudaGetDevice");
    check(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev), "cudaDeviceGetAttribute");
    return n > 0 ? n : 1;
}

template <int HD, int NQ>
void launch_variant(const DecodePlan& P, bool int8, bool fused, unsigned grid, cudaStream_t stream) {
    if (fused) {
        if (int8) launch_k(attention_decode_kernel<HD, NQ, true, 1>, grid, kThreads, 0, stream, P);
        else launch_k(attention_decode_kernel<HD, NQ, false, 1>, grid, kThreads, 0, stream, P);
    } else {
        if (int8) launch_k(attention_decode_kernel<HD, NQ, true>, grid, kThreads, 0, stream, P);
        else launch_k(attention_decode_kernel<HD, NQ, false>, grid, kThreads, 0, stream, P);
    }
}

// Plans and launches the decode kernel; `rope` non-null: the fused launch. prompt_rows > 0: the
// rows the prompt kernel left (launch_attention_decode_rest); split plans work as usual: every block
// of a skipped item returns before arriving, so its counter stays zero. False when the call is not
// decode-sized (nothing launched).
bool decode_launch(const AttentionArgs& a, const RopeKvStoreArgs* rope, cudaStream_t stream, Scratch& scratch,
                   int32_t prompt_rows, const HandoffView* emit = nullptr) {
    const SlotsView& s = a.slots;
    const int hd = s.head_dim;
    if (prompt_rows <= 0 && attention_legacy_selected()) return false;
    if (hd != 64 && hd != 128) return false;  // other widths (Gemma's 256, odd ones): the legacy kernel
    // Prompt-sized launches: the prompt kernel (cuda_attention_prompt.cu) or the legacy kernel.
    if (prompt_rows <= 0 && a.n_rows >= 256) return false;
    const bool int8 = s.kv_dtype == STRATA_KV_INT8;
    const void* base = int8 ? static_cast<const void*>(s.kv8) : static_cast<const void*>(s.kv);
    if (base == nullptr || reinterpret_cast<uintptr_t>(base) % 16 != 0) return false;
    if (int8 && (s.kv_scale == nullptr || reinterpret_cast<uintptr_t>(s.kv_scale) % 4 != 0)) return false;
    if (s.n_kv_heads <= 0 || a.n_heads % s.n_kv_heads != 0) return false;  // the legacy launcher reports it

    DecodePlan P{};
    P.a = a;
    if (rope != nullptr) P.rope = *rope;
    P.prompt_rows = prompt_rows;
    P.early_kv = rope == nullptr && prompt_rows <= 0 && early_kv_enabled() ? 1 : 0;
    if (emit != nullptr) {  // every row's output is written by this launch (no prompt rows, not fused)
        const int64_t nb = (int64_t)a.n_heads * hd / 32;
        P.emit_xq = emit->xq;
        P.emit_meta = emit->meta;
        P.emit_nbp = (int32_t)((nb + 1) / 2 * 2);
    }
    P.group = a.n_heads / s.n_kv_heads;
    const int nq = P.group <= 4 ? 4 : 8;
    P.heads_per_cta = P.group < nq ? P.group : nq;
    const int64_t sms = decode_sm_count();
    // Few (row, KV head) items (a decode step of one or a few sequences): spread a KV head's query
    // heads over up to `group` blocks until the items fill the SMs once, so each block's warps run
    // shorter dependent chains; the blocks of one KV head read the same K/V rows (from L2). Which
    // block computes a query vector never changes its arithmetic.
    // H200 (bench/gpu_kernels.py, 8B): 1 row 8.9 against 11.0 us at context 128, 19.1 against 23.3 at
    // 1,024; 4 rows at 1,024 lost (27.3 against 23.6: the split had fewer blocks per item), so only
    // launches of one or two rows spread.
    if (!attention_wide_selected() && a.n_rows <= 2)
        while (P.heads_per_cta > 1 &&
               a.n_rows * s.n_kv_heads * ((P.group + P.heads_per_cta - 1) / P.heads_per_cta) * 2 <= sms)
            P.heads_per_cta = (P.heads_per_cta + 1) / 2;
    P.n_hgroups = (P.group + P.heads_per_cta - 1) / P.heads_per_cta;
    // The kernel's query-vector slots: with the heads spread one to a block (8B, 1B and 135M at one row)
    // the 4-slot kernel ran three empty vectors' predicated work in every dot, PV step and fold, so
    // narrow_query_slots. (Not the fused launch: its rope and store stages are checked on the 4- and
    // 8-slot kernels only.)
    const int kq = rope == nullptr && narrow_attention_enabled() ? narrow_query_slots(nq, P.heads_per_cta, hd) : nq;
    P.max_chunks = (int32_t)(((int64_t)s.n_ctx + kTile * kChunkTiles - 1) / (kTile * kChunkTiles));
    const int64_t items = a.n_rows * s.n_kv_heads * P.n_hgroups;

    // Split long rows of few items over up to 16 blocks (a few blocks per SM in all).
    const int64_t target = 4 * sms;
    const size_t ws_floats = (size_t)kq * (2 + hd);
    const size_t state_bytes = (size_t)items * P.max_chunks * kWorkers * ws_floats * sizeof(float);
    int split = 1;
    if (state_bytes <= kMaxStateBytes && items <= (int64_t)(kCounterBytes / sizeof(int32_t)))
        while (split < kMaxSplit && items * split * 2 <= target && split * 2 <= P.max_chunks) split *= 2;
    P.split = split;
    if (items * split > (int64_t)INT32_MAX) fail(STRATA_ERR_INTERNAL, "cuda attention: too many rows for one launch");
    if (split > 1 || rope != nullptr) {
        // A fixed counter region at the buffer's start (states never overlap it, whatever the call).
        unsigned char* buf = static_cast<unsigned char*>(
            scratch.get_zeroed(kZeroBytes + (split > 1 ? state_bytes : 0), kZeroBytes, stream));
        P.arrivals = reinterpret_cast<int32_t*>(buf);
        P.kv_arrivals = reinterpret_cast<int32_t*>(buf + kCounterBytes);
        P.states = reinterpret_cast<float*>(buf + kZeroBytes);
    }

    const unsigned grid = (unsigned)(items * split);
    const bool fused = rope != nullptr;
    if (hd == 64) {
        if (kq == 2) launch_variant<64, 2>(P, int8, fused, grid, stream);
        else if (kq == 4) launch_variant<64, 4>(P, int8, fused, grid, stream);
        else launch_variant<64, 8>(P, int8, fused, grid, stream);
    } else {
        if (kq == 1) launch_variant<128, 1>(P, int8, fused, grid, stream);
        else if (kq == 2) launch_variant<128, 2>(P, int8, fused, grid, stream);
        else if (kq == 4) launch_variant<128, 4>(P, int8, fused, grid, stream);
        else launch_variant<128, 8>(P, int8, fused, grid, stream);
    }
    check_launch(fused ? "rope_kv_store + attention (decode, fused)" : "attention (decode)");
    return true;
}

}  // namespace

bool launch_attention_decode(const AttentionArgs& a, cudaStream_t stream, Scratch& scratch, const HandoffView* emit) {
    return decode_launch(a, nullptr, stream, scratch, 0, emit);
}

bool launch_rope_kv_store_attention(const RopeKvStoreArgs& r, const AttentionArgs& a, cudaStream_t stream,
                                    Scratch& scratch) {
    // The fused kernel reads the queries where rope_kv_store rotates them and covers head_dim 64 and
    // 128 with one q and one k rotation of that width (rot_dim <= head_dim: the API checks it).
    const int hd = a.slots.head_dim;
    if (r.n_rows <= 0) return true;
    if (a.q != r.qkv || a.q_row_stride != r.row_stride || a.n_rows != r.n_rows || a.rows != r.rows ||
        a.layer != r.layer || a.n_heads != r.q_params.n_heads || r.k_params.n_heads != a.slots.n_kv_heads ||
        r.q_params.head_dim != hd || r.k_params.head_dim != hd)
        return false;
    if ((int64_t)r.n_rows * a.slots.n_kv_heads > (int64_t)(kCounterBytes / sizeof(int32_t))) return false;
    return decode_launch(a, &r, stream, scratch, 0);
}

void launch_attention_decode_rest(const AttentionArgs& a, int32_t prompt_rows, cudaStream_t stream, Scratch& scratch) {
    if (!decode_launch(a, nullptr, stream, scratch, prompt_rows))
        fail(STRATA_ERR_INTERNAL, "cuda attention: the decode kernel refused the rows the prompt kernel left");
}

}  // namespace cuda
}  // namespace strata

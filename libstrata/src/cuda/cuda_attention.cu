// cuda_attention.cu — causal grouped-query attention over the F16 or int8 KV
// cache (read through the slot's page table, one page lookup per tile; int8
// rows are read as float(q) * scale, stage_tile_int8),
// for decode and prefill rows alike, batch-invariant by construction.
//
// The arithmetic of one query vector (row r, head h; its KV head is
// h / (n_heads / n_kv_heads)) is fixed by the row's own index alone:
//   - keys come in tiles of kTile = 32 cells at absolute cells 32t, and tiles
//     in chunks of kChunkTiles = 8 (256 cells at absolute cells 256k);
//   - within chunk k, worker w (w = 0..3) takes tiles 8k+w and 8k+w+4, in that
//     order, with an online softmax: per tile, s_c = ((q·k_c over even dims) +
//     (q·k_c over odd dims)) · scale, each partial an FMA chain in ascending
//     dim order; m' = max(m, max_c s_c); α = e^(m − m'); p_c = e^(s_c − m');
//     l = l·α + Σ_c p_c (xor butterfly over the 32 cells); acc = acc·α, then
//     acc = fma(p_c, v_c, acc) over the tile's cells in ascending order;
//   - the worker states are folded into the row state in the order (chunk 0,
//     worker 0), (0, 1), (0, 2), (0, 3), (1, 0), ...: with (m, l, acc) and a
//     worker state x: m' = max(m, m_x), α = e^(m − m'), β = e^(m_x − m'),
//     l = fma(l_x, β, l·α), acc = fma(acc_x, β, acc·α); an empty state (no
//     cell, m = −inf) is skipped and the first non-empty one is copied;
//   - out = acc / l (0 for padding rows).
// Cells past the row's index are never used (they are not even copied for the
// row's last tile), so NaN there cannot leak in. With a sliding window
// (AttentionArgs::window > 0) cells below index − window + 1 score −inf: the
// tile order and the fold are unchanged, a function of the row's index alone. Nothing depends on n_rows,
// the other rows, the slot, or on how the work below is spread over the GPU.
//
// Decode-sized calls (fewer than 256 rows, head_dim 64 or 128) run the leaner kernel of
// cuda_attention_decode.cu, which follows this arithmetic expression for expression (unless
// STRATA_ATTENTION=legacy); calls of 128 rows or more with head_dim 64 or 128 first go to the
// kernel of cuda_attention_prompt.cu (which hands the rows of multi-slot blocks to the decode
// kernel), same bits again (unless STRATA_ATTENTION=legacy or noprompt); everything else runs the
// kernel below.
//
// Execution (free to change without changing a bit of the results): a block
// of 4 warps (warp w = worker w) handles up to R rows x Gc query heads of one
// KV head ("vectors", NQ at most). Each warp stages its tiles' K and V rows in
// shared memory with cp.async, two tiles ahead; lane c scores cell c; the
// probabilities go through shared memory to the PV step, where a lane owns
// the head-dim pairs lane, lane + 32, ... After each round of chunks the warps
// write their states to shared memory and every thread folds the elements
// (vector, dim) it owns. Long rows with few (row, KV head) items are split
// over a cluster of S blocks: block s of the cluster computes chunks s, s+S,
// ..., and the fold reads the other blocks' worker states through distributed
// shared memory, in chunk order. R > 1 rows of one block share the staged
// K/V tiles when they all read the same slot (prefill chunks); otherwise the
// block takes its rows one after the other.
#include <cuda_fp16.h>

#include <cstring>
#include <mutex>

#include "cuda_async.cuh"
#include "cuda_common.cuh"
#include "cuda_kernels.cuh"
#include "cuda_kv_layout.cuh"
#include "cuda_pdl.cuh"

namespace strata {
namespace cuda {

// The launch plan of one attention call (decided on the host, see launch_attention).
struct AttnPlan {
    AttentionArgs a;
    int32_t group;          // G: query heads per KV head
    int32_t heads_per_cta;  // Gc: query heads of one KV head handled by a block
    int32_t n_hgroups;      // ceil(G / Gc)
    int32_t rows_per_cta;   // R
    int32_t split;          // S: blocks per (rows, KV head, head group) item = cluster size
    int32_t copy16;         // 1: K/V rows are copied in 16-byte pieces (head_dim % 8 == 0, aligned cache)
};

namespace {

constexpr int kTile = 32;       // cells per tile
constexpr int kChunkTiles = 8;  // tiles per chunk
constexpr int kWorkers = 4;     // workers (warps) per chunk
constexpr int kThreads = 32 * kWorkers;
constexpr int kMaxSplit = 8;    // portable cluster size
constexpr float kNegInf = -__builtin_huge_valf();

// Shared-memory layout (bytes), the same on host and device.
struct AttnLayout {
    int hd8, krow;  // head_dim rounded up to 8; halves per staged K/V row (padded by 8: no bank conflicts)
    int q_off, kv_off, p_off, ws_off, ws_worker, total;
};

__host__ __device__ __forceinline__ AttnLayout attn_layout(int hd, int nq, int stages) {
    AttnLayout L;
    L.hd8 = (hd + 7) & ~7;
    L.krow = L.hd8 + 8;
    L.q_off = 0;                                                        // float [nq][hd8]
    L.kv_off = L.q_off + nq * L.hd8 * 4;                                // half [warp][stage][K|V][32][krow]
    L.p_off = L.kv_off + kWorkers * stages * 2 * kTile * L.krow * 2;    // float [warp][nq][32]
    L.ws_worker = nq * (2 + L.hd8);                                     // floats: m[nq], l[nq], acc[nq][hd8]
    L.ws_off = L.p_off + kWorkers * nq * kTile * 4;                     // float [parity][worker][ws_worker]
    L.total = L.ws_off + 2 * kWorkers * L.ws_worker * 4;
    return L;
}

__device__ __forceinline__ bool row_valid(const SlotsView& s, int32_t slot, int32_t index) {
    return slot >= 0 && slot < s.n_slots && index >= 0 && index < s.n_ctx;
}

static_assert(kPageCells % kTile == 0, "a key tile must not straddle two KV pages (kv_row)");

// One warp's copy of the K and V rows [cell0, cell0 + count) into a stage:
// pieces of 16 bytes (or 4 when head_dim % 8 != 0), lane l taking pieces
// l, l + 32, ... of K's rows, then the same of V's; (row, piece) advance
// without a division per piece.
__device__ __forceinline__ void stage_tile(const __half* kbase, const __half* vbase, int hd, int krow, bool copy16,
                                           int64_t cell0, int count, __half* ks, __half* vs, int lane) {
    const int width = copy16 ? 8 : 2;  // halves per piece
    const int per_row = hd / width;
    const int step_c = 32 / per_row, step_j = 32 - step_c * per_row;
    const int c0 = lane / per_row, j0 = lane - c0 * per_row;
#pragma unroll
    for (int which = 0; which < 2; ++which) {
        const __half* src = (which ? vbase : kbase) + cell0 * hd;
        __half* dst = which ? vs : ks;
        for (int c = c0, j = j0; c < count;) {
            if (copy16) cp_async16(dst + c * krow + 8 * j, src + (int64_t)c * hd + 8 * j);
            else cp_async4(dst + c * krow + 2 * j, src + (int64_t)c * hd + 2 * j);
            c += step_c;
            j += step_j;
            if (j >= per_row) {
                j -= per_row;
                ++c;
            }
        }
    }
}

// int8 pools (strata.h STRATA_KV_INT8): one warp's plain copy of a tile into a stage, laid out in the
// stage's bytes as int8 K rows [32][krow], int8 V rows [32][krow], then the 32 K and the 32 V scales
// (float32); 64 krow + 256 bytes, within the 128 krow an F16 stage has. Element i of a row then
// reads as float(q_i) * scale, the value the CPU backend reads, and from there the arithmetic is the
// F16 path's. kbase / vbase: element offsets of the tile's first K / V row (kv_row).
__device__ __forceinline__ void stage_tile_int8(const SlotsView& s, size_t kbase, size_t vbase, int hd, int krow,
                                                int count, unsigned char* stage, int lane) {
    const int half_row = hd / 2;
#pragma unroll
    for (int which = 0; which < 2; ++which) {
        const int8_t* src = s.kv8 + (which ? vbase : kbase);
        int8_t* dst = reinterpret_cast<int8_t*>(stage) + which * kTile * krow;
        for (int e = lane; e < count * half_row; e += 32) {
            const int c = e / half_row, d = 2 * (e - c * half_row);
            *reinterpret_cast<int16_t*>(dst + c * krow + d) = *reinterpret_cast<const int16_t*>(src + (size_t)c * hd + d);
        }
    }
    float* scales = reinterpret_cast<float*>(stage + 2 * kTile * krow);
    if (lane < count) {
        scales[lane] = s.kv_scale[kbase / hd + lane];
        scales[kTile + lane] = s.kv_scale[vbase / hd + lane];
    }
}

__device__ __forceinline__ float2 int8_pair(const int8_t* q, float scale) {
    return make_float2(__fmul_rn((float)q[0], scale), __fmul_rn((float)q[1], scale));
}

template <int PPL, int NQ, int STAGES>
__global__ void __launch_bounds__(kThreads, 1) attention_kernel(const AttnPlan P) {
    pdl_wait();  // first: see cuda_pdl.cuh
    pdl_launch_dependents();
    const AttentionArgs& a = P.a;
    const SlotsView& s = a.slots;
    const int hd = s.head_dim;
    const AttnLayout L = attn_layout(hd, NQ, STAGES);
    const int hd8 = L.hd8, krow = L.krow, half_pairs = hd >> 1;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int S = P.split, rank = (int)(blockIdx.x % (unsigned)S);

    unsigned char* smem = dynamic_smem<unsigned char>();
    float* q_s = reinterpret_cast<float*>(smem + L.q_off);
    __half* kv_s = reinterpret_cast<__half*>(smem + L.kv_off) + (size_t)warp * STAGES * 2 * kTile * krow;
    float* p_s = reinterpret_cast<float*>(smem + L.p_off) + warp * NQ * kTile;
    float* ws = reinterpret_cast<float*>(smem + L.ws_off);

    // Which rows, KV head and query heads this block (and its cluster) serves.
    const int64_t item = blockIdx.x / (unsigned)S;
    const int hg = (int)(item % P.n_hgroups);
    const int64_t rest = item / P.n_hgroups;
    const int kvh = (int)(rest % s.n_kv_heads);
    const int64_t r0 = (rest / s.n_kv_heads) * P.rows_per_cta;
    const int nr = (int)min((int64_t)P.rows_per_cta, a.n_rows - r0);
    const int h0 = kvh * P.group + hg * P.heads_per_cta;
    const int nh = min(P.heads_per_cta, P.group - hg * P.heads_per_cta);
    const bool plane_ok = a.layer >= 0 && a.layer < s.n_layers && kvh < s.n_kv_heads && nh > 0;

    // Rows share staged tiles when every valid one reads the same slot.
    bool shared = true;
    int32_t slot0 = -1;
    for (int i = 0; i < nr; ++i) {
        const int32_t sl = a.rows[2 * (r0 + i)], ix = a.rows[2 * (r0 + i) + 1];
        if (!plane_ok || !row_valid(s, sl, ix)) continue;
        if (slot0 < 0) slot0 = sl;
        else if (sl != slot0) shared = false;
    }
    const int n_pass = shared ? 1 : nr;

    for (int pass = 0; pass < n_pass; ++pass) {
        const int first = shared ? 0 : pass, rows_here = shared ? nr : 1;
        const int nv = rows_here * nh;  // vectors: v -> row first + v / nh, head h0 + v % nh

        // The last cell of each vector's row (-1: padding), and the pass's slot.
        // With a sliding window, also each vector's first visible cell and the pass's lowest one:
        // tiles wholly below it are skipped (for every vector such a tile would come before any
        // visible cell of its worker and add nothing, so skipping it changes no bit).
        int vlast[NQ], vfirst[NQ];
        int max_last = -1, slot = -1, min_first = INT32_MAX;
#pragma unroll
        for (int v = 0; v < NQ; ++v) {
            vlast[v] = -1;
            vfirst[v] = 0;
            if (v < nv) {
                const int64_t r = r0 + first + v / nh;
                const int32_t sl = a.rows[2 * r], ix = a.rows[2 * r + 1];
                if (plane_ok && row_valid(s, sl, ix)) {
                    vlast[v] = ix;
                    vfirst[v] = a.window > 0 ? max(0, (int)ix - a.window + 1) : 0;
                    max_last = max(max_last, (int)ix);
                    min_first = min(min_first, vfirst[v]);
                    slot = sl;
                }
            }
        }
        auto below = [&](int t) { return (t + 1) * kTile <= min_first; };
        const int n_tiles = max_last < 0 ? 0 : max_last / kTile + 1;
        const int n_chunks = (n_tiles + kChunkTiles - 1) / kChunkTiles;
        const int n_rounds = (n_chunks + S - 1) / S;
        const __half* kv = reinterpret_cast<const __half*>(s.kv);
        const bool int8 = s.kv_dtype == STRATA_KV_INT8;

        // Step n of this warp is tile 8 (round·S + rank) + warp + 4 (n % 2), round = n / 2.
        auto tile_of = [&](int n) { return ((n >> 1) * S + rank) * kChunkTiles + warp + kWorkers * (n & 1); };
        auto issue = [&](int n) {
            const int t = tile_of(n);
            if (n < 2 * n_rounds && t < n_tiles && !below(t)) {
                __half* ks = kv_s + (size_t)(n % STAGES) * 2 * kTile * krow;
                const int32_t cell0 = t * kTile;  // the tile's rows, contiguous in one page
                if (int8)
                    stage_tile_int8(s, kv_row(s, slot, a.layer, 0, kvh, cell0), kv_row(s, slot, a.layer, 1, kvh, cell0),
                                    hd, krow, min(kTile, max_last + 1 - t * kTile),
                                    reinterpret_cast<unsigned char*>(ks), lane);
                else
                stage_tile(kv + kv_row(s, slot, a.layer, 0, kvh, cell0), kv + kv_row(s, slot, a.layer, 1, kvh, cell0),
                           hd, krow, P.copy16 != 0, 0,
                           min(kTile, max_last + 1 - t * kTile), ks, ks + kTile * krow, lane);
            }
            cp_async_commit();
        };
#pragma unroll
        for (int n = 0; n < STAGES; ++n) issue(n);

        // Query vectors into shared memory (zero past head_dim).
        for (int e = tid; e < nv * hd8; e += kThreads) {
            const int v = e / hd8, d = e - v * hd8;
            const int64_t r = r0 + first + v / nh;
            const int h = h0 + v % nh;
            q_s[e] = d < hd ? a.q[r * a.q_row_stride + (int64_t)h * hd + d] : 0.0f;
        }

        // The row-state elements this thread owns: e = (k·S + rank)·128 + tid.
        constexpr int kElems = (NQ * 64 * PPL + kThreads - 1) / kThreads;
        float em[kElems], el[kElems], ea[kElems];
        int ev[kElems], ed[kElems];
#pragma unroll
        for (int k = 0; k < kElems; ++k) {
            const int e = (k * S + rank) * kThreads + tid;
            ev[k] = e < nv * hd ? e / hd : -1;
            ed[k] = e < nv * hd ? e - ev[k] * hd : 0;
            em[k] = kNegInf;
            el[k] = 0.0f;
            ea[k] = 0.0f;
        }
        __syncthreads();

        // This warp's state for the current round.
        float m[NQ], l[NQ];
        float2 acc[NQ][PPL];
        auto reset = [&] {
#pragma unroll
            for (int v = 0; v < NQ; ++v) {
                m[v] = kNegInf;
                l[v] = 0.0f;
#pragma unroll
                for (int j = 0; j < PPL; ++j) acc[v][j] = make_float2(0.0f, 0.0f);
            }
        };
        reset();
        int parity = 0;

        for (int n = 0; n < 2 * n_rounds; ++n) {
            cp_async_wait<STAGES - 1>();
            __syncwarp();
            const int t = tile_of(n);
            if (t < n_tiles && !below(t)) {
                const __half* ks = kv_s + (size_t)(n % STAGES) * 2 * kTile * krow;
                const __half* vs = ks + kTile * krow;
                const int cell0 = t * kTile;

                // Scores: lane c takes cell c (stale rows past the copied ones are masked below).
                float se[NQ], so[NQ];
#pragma unroll
                for (int v = 0; v < NQ; ++v) se[v] = so[v] = 0.0f;
                const __half* krow_p = ks + lane * krow;
                const int8_t* k8 = reinterpret_cast<const int8_t*>(ks) + lane * krow;  // int8 stage
                const float* scales8 = reinterpret_cast<const float*>(reinterpret_cast<const unsigned char*>(ks) +
                                                                      2 * kTile * krow);
                const float kscale = int8 ? scales8[lane] : 0.0f;
                for (int d0 = 0; d0 < hd8; d0 += 8) {
                    float2 k01, k23, k45, k67;
                    if (int8) {
                        k01 = int8_pair(k8 + d0, kscale), k23 = int8_pair(k8 + d0 + 2, kscale);
                        k45 = int8_pair(k8 + d0 + 4, kscale), k67 = int8_pair(k8 + d0 + 6, kscale);
                    } else {
                        const uint4 raw = *reinterpret_cast<const uint4*>(krow_p + d0);
                        k01 = half2_bits_to_float2(raw.x), k23 = half2_bits_to_float2(raw.y);
                        k45 = half2_bits_to_float2(raw.z), k67 = half2_bits_to_float2(raw.w);
                    }
                    if (d0 + 8 > hd) {  // head_dim % 8 != 0: the padding holds no data
                        const int left = hd - d0;
                        if (left <= 0) k01 = make_float2(0.0f, 0.0f);
                        if (left <= 2) k23 = make_float2(0.0f, 0.0f);
                        if (left <= 4) k45 = make_float2(0.0f, 0.0f);
                        if (left <= 6) k67 = make_float2(0.0f, 0.0f);
                    }
#pragma unroll
                    for (int v = 0; v < NQ; ++v) {
                        if (v < nv) {
                            const float4 qa = *reinterpret_cast<const float4*>(q_s + v * hd8 + d0);
                            const float4 qb = *reinterpret_cast<const float4*>(q_s + v * hd8 + d0 + 4);
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

                // Online softmax per vector; cnt[v] = the vector's cells in this tile.
                int cnt[NQ];
#pragma unroll
                for (int v = 0; v < NQ; ++v) {
                    cnt[v] = 0;
                    if (v < nv) cnt[v] = max(0, min(kTile, vlast[v] + 1 - cell0));
                    if (cnt[v] > 0) {
                        const bool seen = lane < cnt[v] && cell0 + lane >= vfirst[v];  // causal and in the window
                        const float sc = seen ? __fmul_rn(__fadd_rn(se[v], so[v]), a.scale) : kNegInf;
                        const float m_new = fmaxf(m[v], warp_max(sc));
                        if (m_new == kNegInf) {
                            cnt[v] = 0;  // every score so far is -inf: nothing to add
                        } else {
                            const float alpha = expf(__fsub_rn(m[v], m_new));
                            const float p = expf(__fsub_rn(sc, m_new));
                            l[v] = __fadd_rn(__fmul_rn(l[v], alpha), warp_sum(p));
#pragma unroll
                            for (int j = 0; j < PPL; ++j) {
                                acc[v][j].x = __fmul_rn(acc[v][j].x, alpha);
                                acc[v][j].y = __fmul_rn(acc[v][j].y, alpha);
                            }
                            m[v] = m_new;
                            p_s[v * kTile + lane] = p;
                        }
                    }
                }
                __syncwarp();

                // PV: cells in ascending order; lane owns head-dim pairs lane + 32 j.
                const int n_cells = min(kTile, max_last + 1 - cell0);
                for (int c = 0; c < n_cells; ++c) {
                    float2 vf[PPL];
                    const int8_t* v8 = reinterpret_cast<const int8_t*>(ks) + (kTile + c) * krow;  // int8 stage
                    const float vscale = int8 ? scales8[kTile + c] : 0.0f;
#pragma unroll
                    for (int j = 0; j < PPL; ++j) {
                        const int pj = lane + 32 * j;
                        vf[j] = pj >= half_pairs ? make_float2(0.0f, 0.0f)
                                : int8   ? int8_pair(v8 + 2 * pj, vscale)
                                         : half2_bits_to_float2(*reinterpret_cast<const uint32_t*>(vs + c * krow + 2 * pj));
                    }
#pragma unroll
                    for (int v = 0; v < NQ; ++v) {
                        if (c < cnt[v]) {
                            const float p = p_s[v * kTile + c];
#pragma unroll
                            for (int j = 0; j < PPL; ++j) {
                                acc[v][j].x = fmaf(p, vf[j].x, acc[v][j].x);
                                acc[v][j].y = fmaf(p, vf[j].y, acc[v][j].y);
                            }
                        }
                    }
                }
            }
            __syncwarp();  // the stage and p_s may be overwritten from here on
            issue(n + STAGES);

            if (n & 1) {
                // End of a round: publish this worker's state, then fold the round's states in order.
                float* mine = ws + (size_t)(parity * kWorkers + warp) * L.ws_worker;
#pragma unroll
                for (int v = 0; v < NQ; ++v) {
                    if (v < nv) {
                        if (lane == 0) {
                            mine[v] = m[v];
                            mine[NQ + v] = l[v];
                        }
#pragma unroll
                        for (int j = 0; j < PPL; ++j) {
                            const int pj = lane + 32 * j;
                            if (pj < half_pairs) {
                                mine[2 * NQ + v * hd8 + 2 * pj] = acc[v][j].x;
                                mine[2 * NQ + v * hd8 + 2 * pj + 1] = acc[v][j].y;
                            }
                        }
                    }
                }
                reset();
                if (S > 1) cluster_sync();
                else __syncthreads();

                const int round = n >> 1;
                const float* base = ws + (size_t)parity * kWorkers * L.ws_worker;
                for (int b = 0; b < S && round * S + b < n_chunks; ++b) {
                    const float* src = b == rank ? base : cluster_map(base, b);
                    for (int w = 0; w < kWorkers; ++w) {
                        const float* x = src + w * L.ws_worker;
#pragma unroll
                        for (int k = 0; k < kElems; ++k) {
                            if (ev[k] < 0) continue;
                            const float mx = x[ev[k]];
                            if (mx == kNegInf) continue;
                            const float lx = x[NQ + ev[k]], ax = x[2 * NQ + ev[k] * hd8 + ed[k]];
                            if (em[k] == kNegInf) {
                                em[k] = mx;
                                el[k] = lx;
                                ea[k] = ax;
                            } else {
                                const float mn = fmaxf(em[k], mx);
                                const float al = expf(__fsub_rn(em[k], mn)), be = expf(__fsub_rn(mx, mn));
                                el[k] = fmaf(lx, be, __fmul_rn(el[k], al));
                                ea[k] = fmaf(ax, be, __fmul_rn(ea[k], al));
                                em[k] = mn;
                            }
                        }
                    }
                }
                parity ^= 1;
            }
        }
        // Remote reads of this pass are done before any block exits or reuses its states.
        if (S > 1) cluster_sync();

#pragma unroll
        for (int k = 0; k < kElems; ++k) {
            if (ev[k] < 0) continue;
            const int v = ev[k];
            const int64_t r = r0 + first + v / nh;
            const int h = h0 + v % nh;
            a.out[r * ((int64_t)a.n_heads * hd) + (int64_t)h * hd + ed[k]] =
                el[k] > 0.0f ? __fdiv_rn(ea[k], el[k]) : 0.0f;
        }
        __syncthreads();  // q_s and the worker states are rewritten by the next pass
    }
}

}  // namespace

// ------------------------------------------------------------------ host

namespace {

using Kernel = void (*)(AttnPlan);

struct Variant {
    Kernel fn;
    int ppl, nq, stages;
};

template <int PPL, int NQ, int STAGES>
constexpr Variant variant() {
    return Variant{attention_kernel<PPL, NQ, STAGES>, PPL, NQ, STAGES};
}

// Raises a variant's dynamic shared-memory limit to its largest layout, once
// per device. A function attribute, not stream work; the calling thread is
// switched to relaxed capture mode around it so that a first call made while
// a graph is being recorded cannot invalidate the recording.
void allow_smem(const Variant& k) {
    constexpr int kMaxDevices = 64;
    static std::mutex mu;
    static bool raised[kMaxDevices][6] = {};
    int dev = 0;
    check(cudaGetDevice(&dev), "cudaGetDevice");
    const int slot = k.ppl == 1 ? (k.nq == 4 ? 0 : 1) : k.ppl == 2 ? (k.nq == 4 ? 2 : 3) : k.ppl == 4 ? 4 : 5;
    std::lock_guard<std::mutex> lock(mu);
    if (dev >= 0 && dev < kMaxDevices && raised[dev][slot]) return;
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    (void)cudaThreadExchangeStreamCaptureMode(&mode);
    const cudaError_t err = cudaFuncSetAttribute(k.fn, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                 attn_layout(64 * k.ppl, k.nq, k.stages).total);
    (void)cudaThreadExchangeStreamCaptureMode(&mode);
    check(err, "cudaFuncSetAttribute (attention shared memory)");
    if (dev >= 0 && dev < kMaxDevices) raised[dev][slot] = true;
}

int sm_count() {
    int dev = 0, n = 0;
    check(cudaGetDevice(&dev), "cudaGetDevice");
    check(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev), "cudaDeviceGetAttribute");
    return n > 0 ? n : 1;
}

}  // namespace

bool launch_attention(const AttentionArgs& a, cudaStream_t stream, Scratch& scratch, const HandoffView* emit) {
    if (a.n_rows <= 0 || a.n_heads <= 0) return false;
    if (launch_attention_prompt(a, stream, scratch)) return false;  // 128+ rows: same bits, tiles shared per row block
    if (launch_attention_decode(a, stream, scratch, emit)) return emit != nullptr;  // decode-sized: same bits, leaner
    const SlotsView& s = a.slots;
    const int hd = s.head_dim;
    // Up to 256: a wider head's staged K/V tiles (4 warps x 2 x 32 rows) no longer fit in shared memory.
    if (hd <= 0 || hd % 2 != 0 || hd > 256)
        fail(STRATA_ERR_UNSUPPORTED, "cuda attention: head_dim " + std::to_string(hd) + " outside 2..256 or odd");
    if (reinterpret_cast<uintptr_t>(s.kv) % 4 != 0)
        fail(STRATA_ERR_INTERNAL, "cuda attention: KV cache base is not 4-byte aligned");
    if (s.n_kv_heads <= 0 || a.n_heads % s.n_kv_heads != 0)
        fail(STRATA_ERR_INTERNAL, "cuda attention: n_heads is not a multiple of n_kv_heads");

    // Variant: head-dim pairs per lane, and vectors per block (registers: NQ x 2 PPL accumulators).
    const int ppl = hd <= 64 ? 1 : hd <= 128 ? 2 : 4;
    const int group = a.n_heads / s.n_kv_heads;
    // Rows share staged tiles only in launches big enough to be mostly prompt chunks: a block whose
    // rows read different slots takes them one after the other, which would slow a decode batch.
    const bool prefill = a.n_rows >= 256;
    Variant k{};
    if (ppl == 1) k = (!prefill && group <= 4) ? variant<1, 4, 2>() : variant<1, 16, 2>();
    else if (ppl == 2) k = (!prefill && group <= 4) ? variant<2, 4, 2>() : variant<2, 8, 2>();
    else k = variant<4, 4, 1>();  // head_dim 129..256 (Gemma 3): one stage, so the tiles fit in 227 KB

    AttnPlan P;
    P.a = a;
    P.group = group;
    P.heads_per_cta = group < k.nq ? group : k.nq;
    P.n_hgroups = (group + P.heads_per_cta - 1) / P.heads_per_cta;
    P.rows_per_cta = prefill ? (k.nq / P.heads_per_cta > 0 ? k.nq / P.heads_per_cta : 1) : 1;
    P.copy16 = (hd % 8 == 0 && reinterpret_cast<uintptr_t>(s.kv) % 16 == 0) ? 1 : 0;

    const int64_t items = (a.n_rows + P.rows_per_cta - 1) / P.rows_per_cta * s.n_kv_heads * P.n_hgroups;
    const int64_t max_chunks = ((int64_t)s.n_ctx + kTile * kChunkTiles - 1) / (kTile * kChunkTiles);
    const int64_t target = 2 * (int64_t)sm_count();
    int split = 1;
    while (split < kMaxSplit && items * split * 2 <= target && split * 2 <= max_chunks) split *= 2;
    P.split = split;
    if (items * split > (int64_t)INT32_MAX)
        fail(STRATA_ERR_INTERNAL, "cuda attention: too many rows for one launch");

    const AttnLayout L = attn_layout(hd, k.nq, k.stages);
    allow_smem(k);
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)(items * split));
    cfg.blockDim = dim3(kThreads);
    cfg.dynamicSmemBytes = (size_t)L.total;
    cfg.stream = stream;
    cudaLaunchAttribute attr[2];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = (unsigned)split;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = pdl_add_attr(attr, split > 1 ? 1 : 0);  // programmatic launch: cuda_pdl.cuh
    check(cudaLaunchKernelEx(&cfg, k.fn, P), "attention launch");
    check_launch("attention");
    return false;
}

}  // namespace cuda
}  // namespace strata

// test_int.cpp — the integer-exact matmul (cuda_int_matmul.cu) under the host
// emulator. A plain host implementation of the canonical arithmetic (the
// activation pre-pass, exact integer block products written from the GGUF
// layouts, the fmaf per block, slices of 8 blocks added in order, the RMSNORM
// factor, bias, accumulate) must match the kernels bit for bit for Q4_0, Q8_0,
// Q4_1 and Q4_K, every prologue, 1 to 20 rows, k with partial slices and several
// parts, odd n_out, misaligned weight rows, and every CTA shape the launcher
// can pick (small and large SM counts). Since the reference is a function of
// one row alone, matching it in every configuration is batch invariance. The
// result is also checked against float64 within the int8-activation bound.
// The dot kernel that rounds its own rows (no pre-pass) must match the same
// reference and the two-launch path on the same inputs, 1 to 20 rows.
// Negative controls: the slices folded in another order, and RMSNORM's ssq
// summed in another shape, must change bits.
// Q4_K (super-blocks of 8 blocks: k a multiple of 256) runs the same configurations; Q6_K (210-byte
// super-blocks, two int8 scales per block of 32) too on the dp4a kernels (the only ones it takes
// besides the tiles), with a negative control: its two half scales swapped must change bits.
// The activation hand-off's emission from the one-row dot kernel (counted or local) must equal the
// pre-pass on its y, and a consumer of the local one's per-block sums must give the same bits.
// strata_matmul_rope_kv_store's one-row kernel (int_dot_rope_kernel: rope and the F16 KV store in the
// epilogue) must equal the plain one-row dot kernel followed by rope_kv_store_kernel bit for bit (the
// qkv row, every pool element), with a negative control (another cell's position changes the bits).
// (handoff: the counted and local emissions, the paired SILU_MUL one included.)
// The one-row chain kernel (o -> gate_up -> down in one grid with grid barriers) must equal the three
// one-row kernels run one by one (chain).
// early [smoke]: the dot kernels with every stage buffer's first-tile part staged before the wait (the
// STRATA_INT_EARLY_STAGES launch), the hand-off and chain cases too, and its negative control (smoke:
// RMSNORM only, no chain cases).
// Usage: test_int [quick | smoke | handoff | rope | chain | early [smoke] | fused [DTYPE] | dtype DTYPE] (fused: only the kernel
// that rounds its own rows, optionally one dtype: the strata_dtype value, e.g. 2 for Q4_0, 12 for Q4_K;
// dtype: every configuration of one dtype; rope: the rope epilogue only)
#define STRATA_CUDA_EMU 1
#include "emu.h"
#include "cuda_int_matmul.cu"
#include "cuda_kv_store.cu"  // rope_kv_store_kernel: the rope epilogue's reference

#include <cstdio>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

using namespace strata;
using namespace strata::cuda;
namespace I = strata::cuda::T_cuda_int_matmul;

static std::mt19937_64 rng(7);
static int fails = 0, checks = 0;
#define CHECK(c, ...) do { ++checks; if (!(c)) { ++fails; printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); } } while (0)
static float randn() { static std::normal_distribution<float> nd(0, 1); return nd(rng); }
static uint32_t bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
// Bytes per 32-value block (Q4_K: 144 per super-block of 8 blocks; Q6_K: none, 210 per super-block).
static int bbytes(int dt) { return dt == STRATA_Q4_0 || dt == STRATA_Q4_K ? 18 : dt == STRATA_Q8_0 ? 34 : 20; }
// Bytes of a slice of 8 blocks and of a weight row of k values.
static int slicebytes(int dt) { return dt == STRATA_Q6_K ? 210 : 8 * bbytes(dt); }
static int64_t rowbytes(int dt, int64_t k) { return dt == STRATA_Q6_K ? k / 256 * 210 : k / 32 * bbytes(dt); }
static bool has_min(int dt) { return dt == STRATA_Q4_1 || dt == STRATA_Q4_K; }

static std::vector<uint8_t> random_weights(int dt, int64_t n_out, int64_t k, int pad) {
    const int64_t rb = rowbytes(dt, k);
    std::vector<uint8_t> w(pad + n_out * rb + 64);
    for (auto& b : w) b = rng() & 255;
    auto fixh = [&](uint8_t* p, float v) { uint16_t h = (uint16_t)emu_f16_bits(v); memcpy(p, &h, 2); };
    if (dt == STRATA_Q6_K) {  // d of every super-block; the int8 scales (full range) and quants stay random
        for (int64_t o = 0; o < n_out; ++o)
            for (int64_t sb = 0; sb < k / 256; ++sb) fixh(w.data() + pad + o * rb + sb * 210 + 208, 0.0001f * (1 + (rng() % 100)));
        return w;
    }
    if (dt == STRATA_Q4_K) {  // d and dmin of every super-block; scales, mins and nibbles stay random
        for (int64_t o = 0; o < n_out; ++o)
            for (int64_t sb = 0; sb < k / 256; ++sb) {
                uint8_t* blk = w.data() + pad + o * rb + sb * 144;
                fixh(blk, 0.001f * (1 + (rng() % 100)));
                fixh(blk + 2, 0.002f * (rng() % 50));
            }
        return w;
    }
    for (int64_t o = 0; o < n_out; ++o)
        for (int64_t b = 0; b < k / 32; ++b) {
            uint8_t* blk = w.data() + pad + o * rb + b * bbytes(dt);
            fixh(blk, 0.01f * (1 + (rng() % 100)));
            if (dt == STRATA_Q4_1) fixh(blk + 2, -0.1f * (rng() % 10));
        }
    return w;
}

// Weight value i of block b of a row (dequantized, exact) and its integer quant.
static void ref_block(int dt, const uint8_t* blk, int q[32], float& d, float& m) {
    uint16_t h;
    memcpy(&h, blk, 2); d = emu_f16(h);
    m = 0;
    if (dt == STRATA_Q8_0) { for (int i = 0; i < 32; ++i) q[i] = (int8_t)blk[2 + i]; return; }
    const int off = dt == STRATA_Q4_0 ? 2 : 4;
    if (dt == STRATA_Q4_1) { memcpy(&h, blk + 2, 2); m = emu_f16(h); }
    for (int i = 0; i < 16; ++i) { q[i] = blk[off + i] & 15; q[i + 16] = blk[off + i] >> 4; }
}

// Block b of a weight row (Q4_K: sub-block b % 8 of super-block b / 8, written from the GGUF
// layout: d, dmin, 12 bytes of 6-bit scales/mins, then 128 bytes whose low nibbles are sub-block 2g
// and high nibbles sub-block 2g+1 for bytes 32g..32g+31) as integer quants q with the block's
// scale d and min m: value i = d·q[i] + m (Q4_0: d·(q[i] − 8)). For Q4_K, d = dsb·sc and m =
// −(dminsb·mn), both exact in float32.
// Q6_K (sc: the two half scales): q[i] = the quant − 32 of value i, d the super-block's, from ggml's
// layout — for each half n of 128 values (ql + 64n, qh + 32n, scales + 8n) and l in 0..31, values
// l, l+32, l+64, l+96 of the half are ql[l] low, ql[l+32] low, ql[l] high, ql[l+32] high nibble with
// qh[l] bits 0-1, 2-3, 4-5, 6-7 above them, scaled by scales[l/16 + 0, 2, 4, 6].
static void ref_q6k(const uint8_t* wrow, int64_t b, int q[32], float& d, int sc[2]) {
    const uint8_t* sb = wrow + (b / 8) * 210;
    uint16_t h;
    memcpy(&h, sb + 208, 2); d = emu_f16(h);
    int qa[256], ia[256];
    for (int n = 0; n < 2; ++n) {
        const uint8_t* ql = sb + 64 * n;
        const uint8_t* qh = sb + 128 + 32 * n;
        for (int l = 0; l < 32; ++l) {
            const int v = 128 * n + l, is = 8 * n + l / 16;
            qa[v] = (ql[l] & 15) | ((qh[l] & 3) << 4);                 ia[v] = is;
            qa[v + 32] = (ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4); ia[v + 32] = is + 2;
            qa[v + 64] = (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4);      ia[v + 64] = is + 4;
            qa[v + 96] = (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4); ia[v + 96] = is + 6;
        }
    }
    const int v0 = 32 * (int)(b % 8);
    for (int i = 0; i < 32; ++i) q[i] = qa[v0 + i] - 32;
    if (ia[v0] + 1 != ia[v0 + 16]) { ++fails; printf("FAIL Q6_K reference: the halves' scales are not adjacent\n"); }
    sc[0] = (int8_t)sb[192 + ia[v0]];
    sc[1] = (int8_t)sb[192 + ia[v0 + 16]];
}

static void ref_wblock(int dt, const uint8_t* wrow, int64_t b, int q[32], float& d, float& m) {
    if (dt == STRATA_Q6_K) {  // value i = d·sc[i/16]·q[i]: the scale folded into q (exact integers)
        int sc[2];
        ref_q6k(wrow, b, q, d, sc);
        for (int i = 0; i < 32; ++i) q[i] *= sc[i / 16];
        m = 0;
        return;
    }
    if (dt != STRATA_Q4_K) return ref_block(dt, wrow + b * bbytes(dt), q, d, m);
    const uint8_t* sb = wrow + (b / 8) * 144;
    const int j = (int)(b % 8);
    uint16_t h;
    memcpy(&h, sb, 2); const float dsb = emu_f16(h);
    memcpy(&h, sb + 2, 2); const float dmin = emu_f16(h);
    const uint8_t* sc = sb + 4;
    int s, mn;
    if (j < 4) { s = sc[j] & 63; mn = sc[j + 4] & 63; }
    else { s = (sc[j + 4] & 15) | ((sc[j - 4] >> 6) << 4); mn = (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4); }
    d = (float)((double)dsb * s);     // exact
    m = (float)(-(double)dmin * mn);  // exact
    if ((double)d != (double)dsb * s || (double)m != -(double)dmin * mn) {  // not counted as a check per block
        ++fails;
        printf("FAIL Q4_K block factors not exact\n");
    }
    const uint8_t* qs = sb + 16 + 32 * (j / 2);
    for (int i = 0; i < 32; ++i) q[i] = j % 2 ? qs[i] >> 4 : qs[i] & 15;
}

struct Act { std::vector<int> xq; std::vector<float> dx; std::vector<int> sx; float ssq = 0; };

static float prologue(int pro, const float* xr, const float* g, int64_t k, int64_t e) {
    float v = xr[e];
    if (pro == STRATA_PROLOGUE_RMSNORM) v = __fmul_rn(v, g[e]);
    if (pro == STRATA_PROLOGUE_SILU_MUL) v = __fmul_rn(__fdiv_rn(v, __fadd_rn(1.0f, expf(-v))), xr[k + e]);
    return v;
}

static Act ref_act(int pro, const float* xr, const float* g, int64_t k) {
    const int64_t nb = k / 32;
    Act a;
    a.xq.resize(k); a.dx.resize(nb); a.sx.resize(nb);
    for (int64_t b = 0; b < nb; ++b) {
        float mx = 0, v[32];
        for (int i = 0; i < 32; ++i) {
            v[i] = prologue(pro, xr, g, k, 32 * b + i);
            float av = std::fabs(v[i]);
            if (!(av <= 3.402823466e38f)) av = INFINITY;
            mx = std::max(mx, av);
        }
        const float d = __fdiv_rn(mx, 127.0f);
        int s = 0;
        for (int i = 0; i < 32; ++i) {
            int q = 0;
            if (d > 0 && d <= 3.402823466e38f) q = std::max(-127, std::min(127, (int)std::nearbyint(__fdiv_rn(v[i], d))));
            a.xq[32 * b + i] = q; s += q;
        }
        a.dx[b] = d; a.sx[b] = s;
    }
    // ssq: chunks of 256 values (one slice); in a chunk, one square per thread, warp butterflies, warps in order
    float ssq = 0;
    for (int64_t c0 = 0, ci = 0; c0 < k; c0 += 256, ++ci) {
        float th[256];
        for (int t = 0; t < 256; ++t) th[t] = c0 + t < k ? fmaf(xr[c0 + t], xr[c0 + t], 0.0f) : 0.0f;
        float wsum[8];
        for (int w = 0; w < 8; ++w) {
            float v[32];
            for (int l = 0; l < 32; ++l) v[l] = th[32 * w + l];
            for (int off = 16; off > 0; off >>= 1) {
                float n[32];
                for (int l = 0; l < 32; ++l) n[l] = __fadd_rn(v[l], v[l ^ off]);
                memcpy(v, n, sizeof v);
            }
            wsum[w] = v[0];
        }
        float cs = wsum[0];
        for (int w = 1; w < 8; ++w) cs = __fadd_rn(cs, wsum[w]);
        ssq = ci == 0 ? cs : __fadd_rn(ssq, cs);
    }
    a.ssq = ssq;
    return a;
}

// The canonical output of one row; `swap` folds slices 0 and 1 the other way (negative control);
// `swap_q6k` swaps each Q6_K block's two half scales (negative control).
static float ref_out(int dt, int pro, const Act& a, const uint8_t* wrow, int64_t k, float eps, const float* bias,
                     int64_t o, float yold, bool accumulate, bool swap = false, bool swap_q6k = false) {
    const int64_t nb = k / 32, ns = (nb + 7) / 8;
    std::vector<float> parts(ns);
    for (int64_t s = 0; s < ns; ++s) {
        float acc = 0;
        for (int64_t b = 8 * s; b < std::min(nb, 8 * s + 8); ++b) {
            int q[32]; float d, m;
            int I = 0;
            if (dt == STRATA_Q6_K) {  // I = sc0·I0 + sc1·I1 (|I| < 2^24: (float)I exact)
                int sc[2], h[2] = {0, 0};
                ref_q6k(wrow, b, q, d, sc);
                m = 0;
                for (int i = 0; i < 32; ++i) h[i / 16] += q[i] * a.xq[32 * b + i];
                I = swap_q6k ? sc[1] * h[0] + sc[0] * h[1] : sc[0] * h[0] + sc[1] * h[1];
                if (std::abs(I) >= (1 << 24)) { ++fails; printf("FAIL Q6_K block integer %d not below 2^24\n", I); }
            } else {
                ref_wblock(dt, wrow, b, q, d, m);
                for (int i = 0; i < 32; ++i) I += (q[i] - (dt == STRATA_Q4_0 ? 8 : 0)) * a.xq[32 * b + i];
            }
            acc = fmaf(__fmul_rn(d, a.dx[b]), (float)I, acc);
            if (has_min(dt)) acc = fmaf(m, __fmul_rn(a.dx[b], (float)a.sx[b]), acc);
        }
        parts[s] = acc;
    }
    if (swap && ns >= 3) std::swap(parts[1], parts[2]);
    float total = parts[0];
    for (int64_t s = 1; s < ns; ++s) total = __fadd_rn(total, parts[s]);
    if (pro == STRATA_PROLOGUE_RMSNORM) total = __fmul_rn(total, __frsqrt_rn(__fadd_rn(__fdiv_rn(a.ssq, (float)k), eps)));
    if (bias) total = __fadd_rn(total, bias[o]);
    return accumulate ? __fadd_rn(yold, total) : total;
}

// The y row stride the few-row, tile and gemv harnesses (test_int_rows/tiles/gemv.cpp) give their
// kernels (0: n_out); their one_* functions set it around a case (StrideScope).
static int64_t g_y_stride = 0;
// `early` mode (STRATA_INT_EARLY_STAGES): the dot kernels get every stage buffer's part of their first
// tile before the wait (IntParams::early_parts), as the launcher sets it; the bits must not move.
static bool g_early = false;
static void apply_early(I::IntParams& p) {
    if (g_early) p.early_parts = I::dot_nbuf(p);
}
struct StrideScope {
    explicit StrideScope(int64_t s) { g_y_stride = s; }
    ~StrideScope() { g_y_stride = 0; }
};

// The launcher's steps (launch_int_matmul) on the emulator: pre-pass, then the dot kernel.
// kind: 0 dp4a (1 row: one accumulator, else tiles of 8 rows), 1 mma 8-row tiles, 2 mma 16-row tiles,
// 3 the fused dp4a kernel (no pre-pass: each CTA quantizes its rows; `sms` 1 picks the launcher's
// grid of whole row tiles, else fewer CTAs than that, so a CTA meets several row tiles).
static void run_int(int dt, int pro, const float* x, int64_t x_stride, int64_t n_rows, int64_t k, const uint8_t* w,
                    int64_t n_out, const float* g, float eps, const float* bias, float* y, bool accumulate, int sms,
                    int kind, int64_t y_stride = 0) {
    const int64_t nb = k / 32;
    const int nchunks = (int)((nb + 7) / 8), nbp = (int)((nb + 1) / 2 * 2);
    std::vector<uint8_t> xq(n_rows * k + 16);
    std::vector<uint2> meta(n_rows * nbp + 2);
    std::vector<float> ssq(n_rows * nchunks);
    int8_t* xq16 = reinterpret_cast<int8_t*>(xq.data() + (16 - reinterpret_cast<uintptr_t>(xq.data()) % 16) % 16);
    uint2* meta16 = reinterpret_cast<uintptr_t>(meta.data()) % 16 ? meta.data() + 1 : meta.data();
    I::PreParams pp{x, x_stride, k, (int)nb, nbp, nchunks, pro, g, xq16, meta16, ssq.data()};
    if (kind != 3) run_grid((unsigned)n_rows, (unsigned)nchunks, 256, [&] {
        if (pro == STRATA_PROLOGUE_RMSNORM) I::int_prepass_kernel<STRATA_PROLOGUE_RMSNORM>(pp);
        else if (pro == STRATA_PROLOGUE_SILU_MUL) I::int_prepass_kernel<STRATA_PROLOGUE_SILU_MUL>(pp);
        else I::int_prepass_kernel<STRATA_PROLOGUE_NONE>(pp);
    });
    I::IntParams p{};
    p.xq = xq16; p.meta = meta16; p.ssq = ssq.data();
    p.n_rows = n_rows; p.k = k; p.n_out = n_out; p.w_row_bytes = rowbytes(dt, k);
    p.nb = (int)nb; p.nbp = nbp; p.n_slices = nchunks;
    p.w = w; p.w_end = w + n_out * p.w_row_bytes;
    p.bias = bias; p.y = y; p.y_stride = y_stride > 0 ? y_stride : n_out; p.accumulate = accumulate; p.prologue = pro; p.eps = eps;
    p.x = x; p.x_stride = x_stride; p.norm = g;
    if (kind == 3) p.xq = nullptr, p.meta = nullptr, p.ssq = nullptr;  // the fused kernel must not read them
    const int kr = kind == 2 ? 16 : (kind == 1 || n_rows > 1 ? 8 : 1);
    if (kind == 1 || kind == 2) I::mma_shape(p, slicebytes(dt), kr);
    else I::dot_shape(p, slicebytes(dt), sms, 233472, kr);  // an H200 SM's shared memory
    p.n_row_tiles = (int)((n_rows + kr - 1) / kr);
    p.n_tiles = p.n_row_tiles * (int)((n_out + p.no - 1) / p.no);
    if (kind == 3) I::dot_fuse(p, kr);
    if (kind == 0 || kind == 3) apply_early(p);
    const int smem = kind == 3 ? (int)I::dot_fused_smem(p) : (kind ? I::mma_smem_bytes(p, kr) : I::dot_smem(p, kr));
    CHECK(smem <= (int)sizeof(g_emu_smem), "smem %d", smem);
    memset(g_emu_smem, 0xFF, sizeof(g_emu_smem));
    static int pending = 0;
    auto guard = [&](auto fn) { return [fn] { fn(); if (emu_pending_copies() != 0) pending++; }; };
    unsigned gx = (unsigned)std::max(1, p.n_tiles / 2), gy = 1, nt = (unsigned)p.threads;  // fewer CTAs than tiles: the tile loop runs
    if (kind == 3 && sms == 1) gx = (unsigned)I::dot_fused_grid(p, std::max(1, p.n_tiles / 3));
    auto go = [&](auto dtc) {
        constexpr int D = decltype(dtc)::value;
        if (kind == 3 && kr == 1) run_grid(gx, gy, nt, guard([p] { I::int_dot_kernel<D, 1, true>(p); }));
        else if (kind == 3) run_grid(gx, gy, nt, guard([p] { I::int_dot_kernel<D, 8, true>(p); }));
        else if (kind == 1 || kind == 2) {
            if constexpr (D == STRATA_Q6_K) CHECK(false, "Q6_K has no int_mma_kernel");  // the launcher never routes it there
            else if (kind == 1) run_grid(gx, gy, nt, guard([p] { I::int_mma_kernel<D, 1>(p); }));
            else run_grid(gx, gy, nt, guard([p] { I::int_mma_kernel<D, 2>(p); }));
        }
        else if (kr == 1) run_grid(gx, gy, nt, guard([p] { I::int_dot_kernel<D, 1, false>(p); }));
        else run_grid(gx, gy, nt, guard([p] { I::int_dot_kernel<D, 8, false>(p); }));
    };
    if (dt == STRATA_Q4_0) go(std::integral_constant<int, STRATA_Q4_0>{});
    else if (dt == STRATA_Q8_0) go(std::integral_constant<int, STRATA_Q8_0>{});
    else if (dt == STRATA_Q4_1) go(std::integral_constant<int, STRATA_Q4_1>{});
    else if (dt == STRATA_Q6_K) go(std::integral_constant<int, STRATA_Q6_K>{});
    else go(std::integral_constant<int, STRATA_Q4_K>{});
    CHECK(pending == 0, "cp.async copies left pending");
}

static void one(int dt, int pro, int64_t k, int64_t n_out, int64_t n_rows, int pad, int sms, bool bias_on, bool acc_on,
                int kind) {
    const int64_t in_k = pro == STRATA_PROLOGUE_SILU_MUL ? 2 * k : k;
    const int64_t stride = in_k + (rng() % 3);  // strided rows
    // y rows at a stride of n_out + ygap (a part of a wider row, strata_matmul_ex's y_row_stride): the
    // gap columns must come back untouched, the others as the dense call would write them.
    const int64_t ygap = (n_rows + kind) % 3, ys = n_out + ygap;
    std::vector<float> x(n_rows * stride + 8), g(k), bias(n_out), y(n_rows * ys), y0;
    for (auto& v : x) v = randn();
    if (n_rows > 2) for (int i = 0; i < 32; ++i) x[stride + i] = 0.0f;  // an all-zero block (dx = 0)
    for (auto& v : g) v = 1.0f + 0.1f * randn();
    for (auto& v : bias) v = randn();
    for (auto& v : y) v = randn();
    y0 = y;
    auto w = random_weights(dt, n_out, k, pad);
    const uint8_t* wp = w.data() + pad;
    const float eps = 1e-5f;
    run_int(dt, pro, x.data(), stride, n_rows, k, wp, n_out, g.data(), eps, bias_on ? bias.data() : nullptr, y.data(),
            acc_on, sms, kind, ys);
    int gap_changed = 0;
    for (int64_t r = 0; r < n_rows; ++r)
        for (int64_t c = n_out; c < ys; ++c) gap_changed += bits(y[r * ys + c]) != bits(y0[r * ys + c]);
    CHECK(gap_changed == 0, "kind %d dt %d y stride %ld: %d gap columns written", kind, dt, (long)ys, gap_changed);
    if (kind == 3) {  // fused against the pre-pass and the dot kernel on the same inputs, directly
        std::vector<float> y2 = y0;
        run_int(dt, pro, x.data(), stride, n_rows, k, wp, n_out, g.data(), eps, bias_on ? bias.data() : nullptr,
                y2.data(), acc_on, sms, 0, ys);
        int differ = 0;
        for (size_t i = 0; i < y.size(); ++i) differ += bits(y[i]) != bits(y2[i]);
        CHECK(differ == 0, "fused dt %d pro %d k %ld n_out %ld rows %ld: %d outputs differ from the two-launch path",
              dt, pro, (long)k, (long)n_out, (long)n_rows, differ);
    }
    const int64_t rb = rowbytes(dt, k);
    int bad = 0, far = 0, swapped_same = 0;
    for (int64_t r = 0; r < n_rows; ++r) {
        const float* xr = x.data() + r * stride;
        Act a = ref_act(pro, xr, g.data(), k);
        for (int64_t o = 0; o < n_out; ++o) {
            const float ref = ref_out(dt, pro, a, wp + o * rb, k, eps, bias_on ? bias.data() : nullptr, o,
                                      y0[r * ys + o], acc_on);
            if (bits(ref) != bits(y[r * ys + o])) ++bad;
            if (dt == STRATA_Q6_K &&
                bits(ref_out(dt, pro, a, wp + o * rb, k, eps, bias_on ? bias.data() : nullptr, o, y0[r * ys + o],
                             acc_on, false, true)) == bits(y[r * ys + o]))
                ++swapped_same;
            // float64 with the exact x' (no activation rounding): within Σ_b (dx_b/2)·Σ|w| + float32 accumulation
            double exact = 0, bound = 0, mag = 0;
            for (int64_t b = 0; b < k / 32; ++b) {
                int q[32]; float d, m;
                ref_wblock(dt, wp + o * rb, b, q, d, m);
                double wabs = 0;
                for (int i = 0; i < 32; ++i) {
                    const double wv = (double)d * (q[i] - (dt == STRATA_Q4_0 ? 8 : 0)) + m;
                    const double xv = prologue(pro, xr, g.data(), k, 32 * b + i);
                    exact += wv * xv; wabs += std::fabs(wv); mag += std::fabs(wv * xv);
                }
                bound += 0.5 * a.dx[b] * wabs * (1 + 1e-6);
            }
            double scale = 1;
            if (pro == STRATA_PROLOGUE_RMSNORM) scale = 1.0 / std::sqrt((double)a.ssq / k + eps);
            const double got = (double)y[r * ys + o] - (bias_on ? bias[o] : 0) - (acc_on ? y0[r * ys + o] : 0);
            const double tol = (bound + 1e-5 * (mag + 1)) * scale + 1e-5 * (std::fabs(exact * scale) + 1) * (acc_on || bias_on ? 4 : 1);
            if (std::fabs(got - exact * scale) > tol) ++far;
        }
    }
    CHECK(bad == 0, "kind %d dt %d pro %d k %ld n_out %ld rows %ld pad %d sms %d: %d outputs differ from the canonical bits",
          kind, dt, pro, (long)k, (long)n_out, (long)n_rows, pad, sms, bad);
    // Q6_K's negative control: the reference with each block's half scales swapped must disagree with
    // the kernel on (nearly) every output, so the bit comparison above would catch that mistake.
    if (dt == STRATA_Q6_K)
        CHECK(swapped_same * 10 <= n_rows * n_out, "Q6_K negative control: %d of %ld outputs equal with swapped half scales",
              swapped_same, (long)(n_rows * n_out));
    CHECK(far == 0, "dt %d pro %d k %ld rows %ld: %d outputs outside the int8 bound of float64", dt, pro, (long)k,
          (long)n_rows, far);
}

// The pre-pass kernel of one row (`chunks` CTAs) and the one-row dot kernel on `gx` CTAs, for the
// hand-off cases below.
static void run_prepass1(const I::PreParams& q, int pro, unsigned chunks) {
    run_grid(1, chunks, 256, [&] {
        if (pro == STRATA_PROLOGUE_RMSNORM) I::int_prepass_kernel<STRATA_PROLOGUE_RMSNORM>(q);
        else if (pro == STRATA_PROLOGUE_SILU_MUL) I::int_prepass_kernel<STRATA_PROLOGUE_SILU_MUL>(q);
        else I::int_prepass_kernel<STRATA_PROLOGUE_NONE>(q);
    });
}
static void run_dot1(int dt, unsigned gx, const I::IntParams& q0) {
    I::IntParams q = q0;
    apply_early(q);
    auto go = [&](auto dtc) {
        constexpr int D = decltype(dtc)::value;
        run_grid(gx, 1, (unsigned)q.threads, [q] { I::int_dot_kernel<D, 1, false>(q); });
    };
    if (dt == STRATA_Q4_0) go(std::integral_constant<int, STRATA_Q4_0>{});
    else if (dt == STRATA_Q8_0) go(std::integral_constant<int, STRATA_Q8_0>{});
    else if (dt == STRATA_Q4_1) go(std::integral_constant<int, STRATA_Q4_1>{});
    else if (dt == STRATA_Q6_K) go(std::integral_constant<int, STRATA_Q6_K>{});
    else go(std::integral_constant<int, STRATA_Q4_K>{});
}

// The producing one-row matmul of the hand-off cases: x (in_k floats) through prologue `pro` into
// k-wide blocks already made by the pre-pass (xq16, meta16, ssq), weights w, y of n_out (+= when acc_on).
static I::IntParams producer_params(int dt, int pro, int64_t k, int64_t in_k, int64_t n_out, const float* x,
                                    const float* g, const uint8_t* w, float* y, bool acc_on, int8_t* xq16,
                                    uint2* meta16, float* ssq) {
    const int64_t nb = k / 32;
    I::IntParams p{};
    p.xq = xq16; p.meta = meta16; p.ssq = ssq;
    p.n_rows = 1; p.k = k; p.n_out = n_out; p.w_row_bytes = rowbytes(dt, k);
    p.nb = (int)nb; p.nbp = (int)((nb + 1) / 2 * 2); p.n_slices = (int)((nb + 7) / 8);
    p.w = w; p.w_end = p.w + n_out * p.w_row_bytes;
    p.y = y; p.y_stride = n_out; p.accumulate = acc_on; p.prologue = pro; p.eps = 1e-5f;
    p.x = x; p.x_stride = in_k; p.norm = g;
    return p;
}

// The activation hand-off (cuda_handoff.cuh): a one-row dot kernel that also rounds its y row into
// the next call's blocks (prologue `npro`, next k = kh; y = [gate | up] of kh each for SILU_MUL) in
// the epilogue of the CTA completing each chunk. Its xq, meta and RMSNORM ssq must equal the
// pre-pass kernel's on the finished y bit for bit, and every arrival counter must be back at 0.
// `shape` forces STRATA_INT_DOT_SHAPE (tiles that straddle chunks and SILU_MUL's two halves).
// `stuck`: the negative control, a counter left at 1 by a missed reset: that chunk then never
// completes, and the comparison must catch it.
static void emit_case(int dt, int pro, int npro, int64_t k, int64_t kh, bool acc_on, int sms, const char* shape,
                      bool stuck = false) {
    const int64_t n_out = npro == STRATA_PROLOGUE_SILU_MUL ? 2 * kh : kh, in_k = pro == STRATA_PROLOGUE_SILU_MUL ? 2 * k : k;
    std::vector<float> x(in_k), g(k), g2(kh), y(n_out);
    for (auto& v : x) v = randn();
    for (auto& v : g) v = 1.0f + 0.1f * randn();
    for (auto& v : g2) v = 1.0f + 0.1f * randn();
    for (auto& v : y) v = randn();
    auto w = random_weights(dt, n_out, k, 2);
    const int64_t nb = k / 32, hb = kh / 32, hchunks = (hb + 7) / 8, nbp = (nb + 1) / 2 * 2;
    std::vector<uint8_t> xq(k + 16), exq(kh + 16, 0xAB), rxq(kh + 16, 0xCD);
    std::vector<uint2> meta(nbp + 2), emeta(hb + 2, make_uint2(7, 7)), rmeta(hb + 2, make_uint2(9, 9));
    std::vector<float> ssq((nb + 7) / 8), essq(hchunks, -1.0f), rssq(hchunks, -2.0f);
    std::vector<int> cnt(kHandoffMaxChunks, 0);
    if (stuck) cnt[hchunks - 1] = 1;
    int8_t* xq16 = reinterpret_cast<int8_t*>(xq.data() + (16 - reinterpret_cast<uintptr_t>(xq.data()) % 16) % 16);
    uint2* meta16 = reinterpret_cast<uintptr_t>(meta.data()) % 16 ? meta.data() + 1 : meta.data();
    I::PreParams pp{x.data(), in_k, k, (int)nb, (int)nbp, (int)((nb + 7) / 8), pro, g.data(), xq16, meta16, ssq.data()};
    run_prepass1(pp, pro, (unsigned)pp.nchunks);
    I::IntParams p = producer_params(dt, pro, k, in_k, n_out, x.data(), g.data(), w.data() + 2, y.data(), acc_on,
                                     xq16, meta16, ssq.data());
    if (shape) setenv("STRATA_INT_DOT_SHAPE", shape, 1);
    I::dot_shape(p, slicebytes(dt), sms, 233472, 1);
    if (shape) unsetenv("STRATA_INT_DOT_SHAPE");
    p.n_row_tiles = 1;
    p.n_tiles = (int)((n_out + p.no - 1) / p.no);
    p.emit_pro = npro; p.emit_norm = npro == STRATA_PROLOGUE_RMSNORM ? g2.data() : nullptr; p.emit_k = kh;
    p.emit_xq = reinterpret_cast<int8_t*>(exq.data()); p.emit_meta = emeta.data(); p.emit_ssq = essq.data();
    p.emit_cnt = cnt.data();
    const int smem = I::dot_smem(p, 1);
    p.emit_off = (smem + 15) / 16 * 16;
    CHECK(p.emit_off + 64 <= (int)sizeof(g_emu_smem), "smem %d", p.emit_off + 64);
    memset(g_emu_smem, 0xFF, sizeof(g_emu_smem));
    run_dot1(dt, (unsigned)std::max(1, p.n_tiles / 2), p);  // fewer CTAs than tiles: the tile loop emits too
    // The reference: the pre-pass kernel over the finished y row.
    I::PreParams rp{y.data(), n_out, kh, (int)hb, (int)((hb + 1) / 2 * 2), (int)hchunks, npro, g2.data(),
                    reinterpret_cast<int8_t*>(rxq.data()), rmeta.data(), rssq.data()};
    run_prepass1(rp, npro, (unsigned)hchunks);
    int bad = 0, left = 0;
    for (int64_t e = 0; e < kh; ++e) bad += exq[e] != rxq[e];
    for (int64_t b = 0; b < hb; ++b) bad += emeta[b].x != rmeta[b].x || emeta[b].y != rmeta[b].y;
    if (npro == STRATA_PROLOGUE_RMSNORM)
        for (int64_t c = 0; c < hchunks; ++c) bad += bits(essq[c]) != bits(rssq[c]);
    for (int c : cnt) left += c != 0;
    if (stuck) {
        CHECK(bad > 0, "negative control (a counter left at 1) went unnoticed: dt %d npro %d kh %ld", dt, npro, (long)kh);
        return;
    }
    CHECK(bad == 0 && left == 0, "hand-off dt %d pro %d -> %d k %ld kh %ld no %d ps %d threads %d: %d values differ from "
          "the pre-pass, %d counters left", dt, pro, npro, (long)k, (long)kh, p.no, p.ps, p.threads, bad, left);
}

// The local emission (emit_blocks, STRATA_HANDOFF=local): CTAs of whole blocks (32 outputs, 8 slices a
// part, as the launcher forces them) round their own outputs; xq and meta must equal the pre-pass on
// the finished y, RMSNORM's per-block sums folded in chunks must equal its ssq, and a consumer dot
// kernel reading the emission (ssq_blocks) must give the bits of one reading the pre-pass. Negative
// control (`flat`): the block sums added in one chain instead of by chunks must change some factor.
static int g_flat_differ = 0;
static void emit_local_case(int dt, int pro, int npro, int64_t k, int64_t kh, bool acc_on, int sms) {
    const int64_t n_out = kh, in_k = pro == STRATA_PROLOGUE_SILU_MUL ? 2 * k : k;
    std::vector<float> x(in_k), g(k), g2(kh), y(n_out);
    for (auto& v : x) v = randn();
    for (auto& v : g) v = 1.0f + 0.1f * randn();
    for (auto& v : g2) v = 1.0f + 0.1f * randn();
    for (auto& v : y) v = 3.0f * randn();
    auto w = random_weights(dt, n_out, k, 2);
    const int64_t nb = k / 32, hb = kh / 32, hchunks = (hb + 7) / 8, nbp = (nb + 1) / 2 * 2, hbp = (hb + 1) / 2 * 2;
    auto al16 = [](std::vector<uint8_t>& v) {
        return reinterpret_cast<int8_t*>(v.data() + (16 - reinterpret_cast<uintptr_t>(v.data()) % 16) % 16);
    };
    auto m16 = [](std::vector<uint2>& v) { return reinterpret_cast<uintptr_t>(v.data()) % 16 ? v.data() + 1 : v.data(); };
    std::vector<uint8_t> xq(k + 16), exq(kh + 16, 0xAB), rxq(kh + 16, 0xCD);
    std::vector<uint2> meta(nbp + 2), emeta(hbp + 2, make_uint2(7, 7)), rmeta(hbp + 2, make_uint2(9, 9));
    std::vector<float> ssq((nb + 7) / 8), ewsq(hb, -1.0f), rssq(hchunks, -2.0f);
    int8_t* xq16 = al16(xq);
    uint2* meta16 = m16(meta);
    I::PreParams pp{x.data(), in_k, k, (int)nb, (int)nbp, (int)((nb + 7) / 8), pro, g.data(), xq16, meta16, ssq.data()};
    run_prepass1(pp, pro, (unsigned)pp.nchunks);
    I::IntParams p = producer_params(dt, pro, k, in_k, n_out, x.data(), g.data(), w.data() + 2, y.data(), acc_on,
                                     xq16, meta16, ssq.data());
    I::dot_shape(p, slicebytes(dt), sms, 233472, 1);
    I::dot_local_shape(p, slicebytes(dt));  // the launcher's local shape
    p.n_row_tiles = 1;
    p.n_tiles = (int)((n_out + p.no - 1) / p.no);
    p.emit_pro = npro; p.emit_norm = npro == STRATA_PROLOGUE_RMSNORM ? g2.data() : nullptr; p.emit_k = kh;
    p.emit_xq = reinterpret_cast<int8_t*>(exq.data()); p.emit_meta = emeta.data(); p.emit_ssq = ewsq.data();
    p.emit_local = 1;
    CHECK(I::dot_smem(p, 1) <= (int)sizeof(g_emu_smem), "smem %d", I::dot_smem(p, 1));
    memset(g_emu_smem, 0xFF, sizeof(g_emu_smem));
    run_dot1(dt, (unsigned)std::max(1, p.n_tiles / 2), p);  // fewer CTAs than tiles: the tile loop emits too
    I::PreParams rp{y.data(), n_out, kh, (int)hb, (int)hbp, (int)hchunks, npro, g2.data(),
                    reinterpret_cast<int8_t*>(rxq.data()), rmeta.data(), rssq.data()};
    run_prepass1(rp, npro, (unsigned)hchunks);
    int bad = 0;
    for (int64_t e = 0; e < kh; ++e) bad += exq[e] != rxq[e];
    for (int64_t b = 0; b < hb; ++b) bad += emeta[b].x != rmeta[b].x || emeta[b].y != rmeta[b].y;
    if (npro == STRATA_PROLOGUE_RMSNORM) {
        for (int64_t c = 0; c < hchunks; ++c) {  // the chunk fold int_rms_factor_blocks runs
            float sc = ewsq[8 * c];
            for (int i = 1; i < 8; ++i) sc = __fadd_rn(sc, 8 * c + i < hb ? ewsq[8 * c + i] : 0.0f);
            bad += bits(sc) != bits(rssq[c]);
        }
        bad += bits(int_rms_factor_blocks(ewsq.data(), (int)hb, kh, 1e-5f)) !=
               bits(int_rms_factor(rssq.data(), (int)hchunks, kh, 1e-5f));
        float flat = ewsq[0];
        for (int64_t b = 1; b < hb; ++b) flat = __fadd_rn(flat, ewsq[b]);
        g_flat_differ += bits(__frsqrt_rn(__fadd_rn(__fdiv_rn(flat, (float)kh), 1e-5f))) !=
                         bits(int_rms_factor(rssq.data(), (int)hchunks, kh, 1e-5f));
    }
    // The consumer: a one-row matmul of k = kh reading the emission, against one reading the pre-pass.
    const int64_t n2 = 45;
    auto w2 = random_weights(dt, n2, kh, 0);
    std::vector<uint8_t> axq(kh + 16);
    std::vector<uint2> ameta(hbp + 2);
    int8_t* axq16 = al16(axq);
    uint2* ameta16 = m16(ameta);
    std::vector<float> ya(n2, 0.0f), yb(n2, 0.0f);
    for (int side = 0; side < 2; ++side) {
        memcpy(axq16, side ? rxq.data() : exq.data(), kh);
        for (int64_t b = 0; b < hb; ++b) ameta16[b] = side ? rmeta[b] : emeta[b];
        I::IntParams c{};
        c.xq = axq16; c.meta = ameta16; c.ssq = side ? rssq.data() : ewsq.data(); c.ssq_blocks = side ? 0 : 1;
        c.n_rows = 1; c.k = kh; c.n_out = n2; c.w_row_bytes = rowbytes(dt, kh);
        c.nb = (int)hb; c.nbp = (int)hbp; c.n_slices = (int)hchunks;
        c.w = w2.data(); c.w_end = c.w + n2 * c.w_row_bytes;
        c.y = side ? yb.data() : ya.data(); c.y_stride = n2; c.prologue = npro; c.eps = 1e-5f;
        c.norm = g2.data();
        I::dot_shape(c, slicebytes(dt), sms, 233472, 1);
        c.n_row_tiles = 1;
        c.n_tiles = (int)((n2 + c.no - 1) / c.no);
        memset(g_emu_smem, 0xFF, sizeof(g_emu_smem));
        run_dot1(dt, (unsigned)c.n_tiles, c);
    }
    for (int64_t o = 0; o < n2; ++o) bad += bits(ya[o]) != bits(yb[o]);
    CHECK(bad == 0, "local hand-off dt %d pro %d -> %d k %ld kh %ld no %d ps %d threads %d: %d values differ from the "
          "pre-pass", dt, pro, npro, (long)k, (long)kh, p.no, p.ps, p.threads, bad);
}

// The local emission of SILU_MUL's input (dot_pair_shape, emit_pair): CTAs of 64 outputs holding gate
// outputs [32j, 32j + 32) and the up outputs of the same elements. y must equal the plain kernel's bit for
// bit (which CTA computes an output changes nothing), and xq and meta the pre-pass's on the finished y.
// Negative control: the pre-pass of y with its halves swapped (silu(up) * gate) must differ.
static int g_pair_swapped_differ = 0;
static void emit_pair_case(int dt, int pro, int64_t k, int64_t kh, bool acc_on, int sms) {
    const int64_t n_out = 2 * kh, in_k = pro == STRATA_PROLOGUE_SILU_MUL ? 2 * k : k;
    std::vector<float> x(in_k), g(k), y0(n_out);
    for (auto& v : x) v = randn();
    for (auto& v : g) v = 1.0f + 0.1f * randn();
    for (auto& v : y0) v = 3.0f * randn();
    auto w = random_weights(dt, n_out, k, 2);
    const int64_t nb = k / 32, hb = kh / 32, hbp = (hb + 1) / 2 * 2, nbp = (nb + 1) / 2 * 2;
    auto al16 = [](std::vector<uint8_t>& v) {
        return reinterpret_cast<int8_t*>(v.data() + (16 - reinterpret_cast<uintptr_t>(v.data()) % 16) % 16);
    };
    std::vector<uint8_t> xq(k + 16), exq(kh + 16, 0xAB), rxq(kh + 16, 0xCD);
    std::vector<uint2> meta(nbp + 2), emeta(hbp + 2, make_uint2(7, 7)), rmeta(hbp + 2, make_uint2(9, 9));
    std::vector<float> ssq((nb + 7) / 8);
    int8_t* xq16 = al16(xq);
    uint2* meta16 = reinterpret_cast<uintptr_t>(meta.data()) % 16 ? meta.data() + 1 : meta.data();
    I::PreParams pp{x.data(), in_k, k, (int)nb, (int)nbp, (int)((nb + 7) / 8), pro, g.data(), xq16, meta16, ssq.data()};
    run_prepass1(pp, pro, (unsigned)pp.nchunks);
    // The plain kernel's y, then the pairing kernel's from the same start.
    std::vector<float> yp = y0, y = y0;
    I::IntParams q = producer_params(dt, pro, k, in_k, n_out, x.data(), g.data(), w.data() + 2, yp.data(), acc_on,
                                     xq16, meta16, ssq.data());
    I::dot_shape(q, slicebytes(dt), sms, 233472, 1);
    q.n_row_tiles = 1;
    q.n_tiles = (int)((n_out + q.no - 1) / q.no);
    memset(g_emu_smem, 0xFF, sizeof(g_emu_smem));
    run_dot1(dt, (unsigned)q.n_tiles, q);
    I::IntParams p = producer_params(dt, pro, k, in_k, n_out, x.data(), g.data(), w.data() + 2, y.data(), acc_on,
                                     xq16, meta16, ssq.data());
    I::dot_shape(p, slicebytes(dt), sms, 233472, 1);
    I::dot_pair_shape(p, slicebytes(dt));  // the launcher's pairing shape
    p.pair_half = kh;
    p.n_row_tiles = 1;
    p.n_tiles = (int)(n_out / p.no);
    p.emit_pro = STRATA_PROLOGUE_SILU_MUL; p.emit_k = kh;
    p.emit_xq = reinterpret_cast<int8_t*>(exq.data()); p.emit_meta = emeta.data();
    p.emit_local = 1;
    CHECK(I::dot_smem(p, 1) <= (int)sizeof(g_emu_smem), "smem %d", I::dot_smem(p, 1));
    memset(g_emu_smem, 0xFF, sizeof(g_emu_smem));
    run_dot1(dt, (unsigned)std::max(1, p.n_tiles / 2), p);  // fewer CTAs than tiles: the tile loop emits too
    int bad_y = 0, bad = 0;
    for (int64_t o = 0; o < n_out; ++o) bad_y += bits(y[o]) != bits(yp[o]);
    I::PreParams rp{y.data(), n_out, kh, (int)hb, (int)hbp, (int)((hb + 7) / 8), STRATA_PROLOGUE_SILU_MUL, nullptr,
                    reinterpret_cast<int8_t*>(rxq.data()), rmeta.data(), nullptr};
    run_prepass1(rp, STRATA_PROLOGUE_SILU_MUL, (unsigned)rp.nchunks);
    for (int64_t e = 0; e < kh; ++e) bad += exq[e] != rxq[e];
    for (int64_t b = 0; b < hb; ++b) bad += emeta[b].x != rmeta[b].x || emeta[b].y != rmeta[b].y;
    std::vector<float> sw(n_out);
    for (int64_t e = 0; e < kh; ++e) sw[e] = y[kh + e], sw[kh + e] = y[e];
    rp.x = sw.data();
    run_prepass1(rp, STRATA_PROLOGUE_SILU_MUL, (unsigned)rp.nchunks);
    int swapped = 0;
    for (int64_t e = 0; e < kh; ++e) swapped += exq[e] != rxq[e];
    g_pair_swapped_differ += swapped > 0;
    CHECK(bad_y == 0 && bad == 0, "paired hand-off dt %d pro %d k %ld kh %ld no %d ps %d parts %d: %d y values differ from "
          "the plain kernel's, %d emitted values from the pre-pass", dt, pro, (long)k, (long)kh, p.no, p.ps, p.n_parts,
          bad_y, bad);
}

static void emit_cases(bool quick) {
    const int dts[4] = {STRATA_Q4_0, STRATA_Q8_0, STRATA_Q4_K, STRATA_Q6_K};
    const int64_t khs[5] = {64, 288, 1024, 32 * 8 * 9 + 96, 2048};
    const char* shapes[4] = {nullptr, "24:4", "5:16", "64:2"};
    int n = 0;
    for (int dt : dts)
        for (int npro = 0; npro < 3; ++npro)
            for (int64_t kh : khs) {
                ++n;
                if (quick && n % 3) continue;
                const bool super = dt == STRATA_Q4_K || dt == STRATA_Q6_K;
                const int64_t k = super ? 256 * (1 + n % 3) : 32 * (3 + 8 * (n % 4));
                emit_case(dt, n % 3, npro, k, kh, n % 2 == 0, n % 2 ? 132 : 1, shapes[n % 4]);
            }
    emit_case(STRATA_Q4_0, 0, STRATA_PROLOGUE_RMSNORM, 256, 1024, true, 132, nullptr, true);
    emit_case(STRATA_Q4_0, 1, STRATA_PROLOGUE_SILU_MUL, 256, 288, false, 1, "24:4", true);
    // The local emission: RMSNORM and no prologue (the ones it takes), rows of 1 to 9 chunks (a partial
    // last chunk), k of one part or several.
    // (Q4_K and Q6_K: whole super-blocks, the consumer's k being kh.)
    const int64_t lkhs[4] = {64, 288, 1024 + 96, 2048}, lkhs_k[4] = {256, 768, 1280, 2048};
    int m = 0;
    for (int dt : dts)
        for (int npro : {STRATA_PROLOGUE_RMSNORM, STRATA_PROLOGUE_NONE})
            for (int64_t kh : dt == STRATA_Q4_K || dt == STRATA_Q6_K ? lkhs_k : lkhs) {
                ++m;
                if (quick && m % 3) continue;
                const bool super = dt == STRATA_Q4_K || dt == STRATA_Q6_K;
                // m % 5 == 0: 3-4 parts of 8 slices (the three stage buffers' steady state).
                const int64_t k = super ? 256 * (1 + m % 3 + 17 * (m % 5 == 0)) : 32 * (3 + 8 * (m % 4) + 8 * 20 * (m % 5 == 0));
                emit_local_case(dt, m % 3, npro, k, kh, m % 2 == 0, m % 2 ? 132 : 1);
            }
    CHECK(g_flat_differ > 0, "negative control: block sums added in one chain changed no RMSNORM factor");
    // The paired SILU_MUL emission: one part or several (4 slices a part), a partial last slice.
    int n_pair = 0;
    for (int dt : {STRATA_Q4_0, STRATA_Q8_0, STRATA_Q4_K})
        for (int64_t kh : {64, 288, 1024 + 96}) {
            ++n_pair;
            if (quick && n_pair % 2) continue;
            const bool super = dt == STRATA_Q4_K;
            const int64_t k = super ? 256 * (1 + n_pair % 3 + 4 * (n_pair % 4 == 0)) : 32 * (3 + 8 * (n_pair % 4) + 40 * (n_pair % 3 == 0));
            emit_pair_case(dt, n_pair % 3, k, kh, n_pair % 2 == 0, n_pair % 2 ? 132 : 1);
        }
    CHECK(g_pair_swapped_differ > 0, "negative control: the pre-pass of the swapped halves matched the paired emission");
    printf("hand-off: %d checks, %d failures so far\n", checks, fails);
}

// ---------------------------------------------------------------- the one-row chain kernel

// strata_matmul_chain_begin / _end's kernel (int_dot_chain_kernel): a layer's o (accumulating into x, its
// local RMSNORM emission for gate_up), gate_up (paired CTAs: SILU_MUL's blocks for down) and down
// (accumulating into x, a local RMSNORM emission for the next layer), as ONE grid whose CTAs all run at
// once (one cluster of the whole grid, as the device's co-resident grid) with grid barriers between the
// calls, against the three one-row kernels run one after the other: x, gate_up's y and every emitted
// block, bit for bit; the barrier's arrival word back at 0 and its generation advanced once a crossing.
// `grid` below the largest call's tile count makes CTAs loop over tiles; `n` 2 chains o and gate_up only,
// `n` 4 adds the next layer's qkv (RMSNORM of down's local emission, no emission; STRATA_MATMUL_CHAIN=2).
// `pre`: gate_up and down emit through pre-pass phases of the chain instead (the 8B's shapes: gate_up not
// paired, down in its own CTA shape; qkv then reads per-chunk sums), against the pre-pass kernel after each.
static void chain_case(int dt, int64_t q, int64_t h, int64_t f, unsigned grid, int n, bool pre = false) {
    const int sb = slicebytes(dt);
    auto al16 = [](std::vector<uint8_t>& v) {
        return reinterpret_cast<int8_t*>(v.data() + (16 - reinterpret_cast<uintptr_t>(v.data()) % 16) % 16);
    };
    auto m16 = [](std::vector<uint2>& v) { return reinterpret_cast<uintptr_t>(v.data()) % 16 ? v.data() + 1 : v.data(); };
    std::vector<float> att(q), x0(h), g1(h), g2(h);
    for (auto& v : att) v = randn();
    for (auto& v : x0) v = 2.0f * randn();
    for (auto& v : g1) v = 1.0f + 0.1f * randn();
    for (auto& v : g2) v = 1.0f + 0.1f * randn();
    const int64_t nqkv = h + 2 * (h / 4);  // [q | k | v] with 4 query heads a KV head
    auto wo = random_weights(dt, h, q, 0), wgu = random_weights(dt, 2 * f, h, 0), wd = random_weights(dt, h, f, 0);
    auto wqkv = random_weights(dt, nqkv, h, 0);
    const int64_t qb = q / 32, hb = h / 32, fb = f / 32;
    auto bp = [](int64_t nb) { return (nb + 1) / 2 * 2; };
    // The attention output's blocks (what the chain's first call reads), made once by the pre-pass.
    std::vector<uint8_t> axq(q + 16);
    std::vector<uint2> ameta(bp(qb) + 2);
    std::vector<float> assq((qb + 7) / 8);
    I::PreParams pa{att.data(), q, q, (int)qb, (int)bp(qb), (int)((qb + 7) / 8), STRATA_PROLOGUE_NONE, nullptr,
                    al16(axq), m16(ameta), assq.data()};
    run_prepass1(pa, STRATA_PROLOGUE_NONE, (unsigned)pa.nchunks);
    struct Run {
        std::vector<float> x, gu, s1, s3;
        std::vector<uint8_t> q1, q2, q3;
        std::vector<uint2> m1, m2, m3;
        std::vector<float> qkv;
    };
    auto fresh = [&] {
        Run r{x0, std::vector<float>(2 * f, 0.0f), std::vector<float>(hb, -1.0f), std::vector<float>(hb, -1.0f),
              std::vector<uint8_t>(h + 16, 0xAB), std::vector<uint8_t>(f + 16, 0xAB), std::vector<uint8_t>(h + 16, 0xAB),
              std::vector<uint2>(bp(hb) + 2, make_uint2(7, 7)), std::vector<uint2>(bp(fb) + 2, make_uint2(7, 7)),
              std::vector<uint2>(bp(hb) + 2, make_uint2(7, 7)), std::vector<float>(nqkv, -3.0f)};
        return r;
    };
    // The four calls' parameters on the buffers of `r`, as launch_int_matmul makes them.
    auto params = [&](Run& r, I::IntParams out[4]) {
        I::IntParams& o = out[0];
        o = producer_params(dt, STRATA_PROLOGUE_NONE, q, q, h, nullptr, nullptr, wo.data(), r.x.data(), true,
                            al16(axq), m16(ameta), assq.data());
        I::dot_shape(o, sb, 132, 233472, 1);
        I::dot_local_shape(o, sb);
        o.n_row_tiles = 1; o.n_tiles = (int)((h + o.no - 1) / o.no);
        o.emit_pro = STRATA_PROLOGUE_RMSNORM; o.emit_norm = g1.data(); o.emit_k = h; o.emit_local = 1;
        o.emit_xq = al16(r.q1); o.emit_meta = m16(r.m1); o.emit_ssq = r.s1.data();
        I::IntParams& u = out[1];
        u = producer_params(dt, STRATA_PROLOGUE_RMSNORM, h, h, 2 * f, r.x.data(), g1.data(), wgu.data(), r.gu.data(),
                            false, al16(r.q1), m16(r.m1), r.s1.data());
        u.ssq_blocks = 1;
        I::dot_shape(u, sb, 132, 233472, 1);
        if (!pre) {
            I::dot_pair_shape(u, sb);
            u.pair_half = f;
            u.emit_pro = STRATA_PROLOGUE_SILU_MUL; u.emit_k = f; u.emit_local = 1;
            u.emit_xq = al16(r.q2); u.emit_meta = m16(r.m2);
        }
        u.n_row_tiles = 1; u.n_tiles = (int)((2 * f + u.no - 1) / u.no);
        I::IntParams& d = out[2];
        d = producer_params(dt, STRATA_PROLOGUE_SILU_MUL, f, 2 * f, h, r.gu.data(), nullptr, wd.data(), r.x.data(),
                            true, al16(r.q2), m16(r.m2), nullptr);
        I::dot_shape(d, sb, 132, 233472, 1);
        if (!pre) {
            I::dot_local_shape(d, sb);
            d.emit_pro = STRATA_PROLOGUE_RMSNORM; d.emit_norm = g2.data(); d.emit_k = h; d.emit_local = 1;
            d.emit_xq = al16(r.q3); d.emit_meta = m16(r.m3); d.emit_ssq = r.s3.data();
        }
        d.n_row_tiles = 1; d.n_tiles = (int)((h + d.no - 1) / d.no);
        I::IntParams& v = out[3];
        v = producer_params(dt, STRATA_PROLOGUE_RMSNORM, h, h, nqkv, r.x.data(), g2.data(), wqkv.data(),
                            r.qkv.data(), false, al16(r.q3), m16(r.m3), r.s3.data());
        v.ssq_blocks = pre ? 0 : 1;
        I::dot_shape(v, sb, 132, 233472, 1);
        v.n_row_tiles = 1; v.n_tiles = (int)((nqkv + v.no - 1) / v.no);
    };
    Run ref = fresh(), got = fresh();
    I::IntParams pr[4], pc[4];
    params(ref, pr);
    params(got, pc);
    // `pre`: the pre-pass of gate_up's emission (SILU_MUL) and of down's (RMSNORM, per-chunk sums).
    auto prepass = [&](Run& r, int i) {
        I::PreParams z{};
        if (i == 1)
            z = I::PreParams{r.gu.data(), 2 * f, f, (int)fb, (int)bp(fb), (int)((fb + 7) / 8), STRATA_PROLOGUE_SILU_MUL,
                             nullptr, al16(r.q2), m16(r.m2), nullptr};
        if (i == 2)
            z = I::PreParams{r.x.data(), h, h, (int)hb, (int)bp(hb), (int)((hb + 7) / 8), STRATA_PROLOGUE_RMSNORM,
                             g2.data(), al16(r.q3), m16(r.m3), r.s3.data()};
        return z;
    };
    for (int i = 0; i < n; ++i) {  // one after the other, each its own grid
        memset(g_emu_smem, 0xFF, sizeof(g_emu_smem));
        run_dot1(dt, (unsigned)pr[i].n_tiles, pr[i]);
        const I::PreParams z = prepass(ref, i);
        if (pre && z.nchunks > 0) run_prepass1(z, z.prologue, (unsigned)z.nchunks);
    }
    I::ChainParams c{};
    int smem = 0, threads = 0;
    for (int i = 0; i < n; ++i) smem = std::max(smem, I::dot_smem(pc[i], 1)), threads = std::max(threads, pc[i].threads);
    for (int i = 0; i < n; ++i) c.p[i] = pc[i], c.p[i].threads = threads, apply_early(c.p[i]);  // as dot_chain_flush launches them
    if (pre) {  // as chain_smem lays them out
        for (int i = 0; i < n; ++i) c.pre[i] = prepass(got, i);
        c.red_off = (smem + 15) / 16 * 16;
        smem = c.red_off + 32;
    }
    c.n = n;
    unsigned words[2] = {0, 41};
    c.barrier = words;
    auto go = [&](auto dtc) {
        constexpr int D = decltype(dtc)::value;
        run_grid_ex(grid, 1, (unsigned)threads, grid, (size_t)smem, [c] { I::int_dot_chain_kernel<D>(c); });
    };
    if (dt == STRATA_Q4_0) go(std::integral_constant<int, STRATA_Q4_0>{});
    else if (dt == STRATA_Q8_0) go(std::integral_constant<int, STRATA_Q8_0>{});
    else if (dt == STRATA_Q4_1) go(std::integral_constant<int, STRATA_Q4_1>{});
    else go(std::integral_constant<int, STRATA_Q4_K>{});
    int bad = 0;
    for (int64_t i = 0; i < h; ++i) bad += bits(ref.x[i]) != bits(got.x[i]);
    for (int64_t i = 0; i < 2 * f; ++i) bad += bits(ref.gu[i]) != bits(got.gu[i]);
    for (int64_t i = 0; i < nqkv; ++i) bad += bits(ref.qkv[i]) != bits(got.qkv[i]);
    bad += memcmp(al16(ref.q1), al16(got.q1), h) != 0;
    bad += memcmp(m16(ref.m1), m16(got.m1), hb * sizeof(uint2)) != 0;
    bad += memcmp(ref.s1.data(), got.s1.data(), hb * sizeof(float)) != 0;
    bad += memcmp(al16(ref.q2), al16(got.q2), f) != 0;
    bad += memcmp(m16(ref.m2), m16(got.m2), fb * sizeof(uint2)) != 0;
    bad += memcmp(al16(ref.q3), al16(got.q3), h) != 0;
    bad += memcmp(ref.s3.data(), got.s3.data(), hb * sizeof(float)) != 0;
    const int crossings = n - 1 + (pre ? std::min(n - 1, 2) : 0);  // a pre-pass phase after gate_up and down
    CHECK(bad == 0, "chain dt %d q %ld h %ld f %ld grid %u calls %d%s (threads %d, no %d/%d/%d/%d): %d values differ "
          "from the calls run one by one", dt, (long)q, (long)h, (long)f, grid, n, pre ? " with pre-pass phases" : "",
          threads, pc[0].no, pc[1].no, pc[2].no, pc[3].no, bad);
    CHECK(words[0] == 0 && words[1] == 41u + (unsigned)crossings, "chain barrier words %u %u after %d crossings",
          words[0], words[1], crossings);
}

static void chain_cases() {
    // 135M-like (k 576, ffn 1536: the calls' CTAs of 96, 192 and 192 threads run at 192), 1B-like halves
    // (2,048 / 4,096: two parts and more), a grid smaller than the calls' tiles (CTAs loop), two calls.
    chain_case(STRATA_Q4_0, 576, 576, 1536, 8, 3);
    chain_case(STRATA_Q8_0, 576, 576, 1536, 5, 3);
    chain_case(STRATA_Q4_1, 256, 512, 512, 6, 3);
    chain_case(STRATA_Q4_K, 512, 512, 1024, 3, 3);
    chain_case(STRATA_Q4_0, 2048, 2048, 4096, 4, 3);
    chain_case(STRATA_Q4_0, 576, 576, 1536, 7, 2);
    chain_case(STRATA_Q4_0, 576, 576, 1536, 8, 4);  // with the next layer's qkv (135M-like)
    chain_case(STRATA_Q8_0, 576, 576, 1536, 11, 4);
    chain_case(STRATA_Q4_K, 512, 512, 1024, 3, 4);
    chain_case(STRATA_Q4_0, 2048, 2048, 4096, 5, 4);
    // gate_up's and down's emissions as pre-pass phases (the 8B's route; k 4,096 and 14,336 scaled down)
    chain_case(STRATA_Q4_0, 1024, 1024, 2816, 6, 4, true);
    chain_case(STRATA_Q8_0, 576, 576, 1536, 9, 4, true);
    chain_case(STRATA_Q4_K, 512, 512, 1024, 4, 3, true);   // ends with down's pre-pass phase
    chain_case(STRATA_Q4_1, 256, 512, 512, 7, 2, true);    // o, then gate_up's pre-pass phase last
    printf("chain: %d checks, %d failures so far\n", checks, fails);
}

// ---------------------------------------------------------------- the rope epilogue
// One row of [q | k | v] (n_heads, n_kv, n_kv heads of hd) from x (k values, RMSNORM with a bias) into a
// paged F16 pool at (slot, index): the one-row rope kernel against the dot kernel + rope_kv_store_kernel.
// `shape` forces STRATA_INT_DOT_SHAPE (even NO: the launcher's rope_epilogue_covers); `shift` > 0 runs
// the rope kernel at cell index + shift instead, for the negative control (returns how many of the
// row's values differ from the reference then). slot 1 has no position table (not rotated); `unmapped`:
// the page of the row's cell is unmapped (not stored).
static int rope_case(int dt, int64_t k, int n_heads, int n_kv, int hd, int rot, bool ff_on, int32_t slot,
                     int32_t index, bool unmapped, const char* shape, int sms, int shift = 0) {
    if (shape) setenv("STRATA_INT_DOT_SHAPE", shape, 1);
    else unsetenv("STRATA_INT_DOT_SHAPE");
    const int64_t n_out = (int64_t)(n_heads + 2 * n_kv) * hd;
    SlotsView s; s.n_slots = 3; s.n_layers = 2; s.n_ctx = 300; s.n_kv_heads = n_kv; s.head_dim = hd;
    s.slot_pages = (s.n_ctx + kPageCells - 1) / kPageCells;
    s.n_pages = s.n_slots * s.slot_pages;
    std::vector<uint16_t> kv((s.n_pages + 1) * s.page_elems(), 0x7e00);
    std::vector<int32_t> pages(s.n_pages);
    for (int i = 0; i < s.n_pages; ++i) pages[i] = i;
    for (int i = s.n_pages - 1; i > 0; --i) std::swap(pages[i], pages[rng() % (i + 1)]);
    if (unmapped && slot >= 0) pages[(size_t)slot * s.slot_pages + index / kPageCells] = -1;
    std::vector<int32_t> table(s.n_slots * s.n_ctx * 4), delta(s.n_slots), table_of = {0, -1, 2};
    for (auto& v : table) v = (int32_t)(rng() % 3000);
    s.kv = kv.data(); s.pages = pages.data(); s.table = table.data(); s.delta = delta.data(); s.table_of = table_of.data();
    strata_rope_params pq{}; pq.mode = STRATA_ROPE_ADJACENT; pq.n_heads = n_heads; pq.head_dim = hd; pq.rot_dim = rot;
    pq.theta_base = 10000.f; pq.freq_scale = 1.f;
    strata_rope_params pk = pq; pk.n_heads = n_kv;
    std::vector<float> ff(rot / 2); for (auto& v : ff) v = 1.f + (rng() % 4);
    std::vector<float> x(k), g(k), bias(n_out);
    for (auto& v : x) v = randn();
    for (auto& v : g) v = 1 + 0.1f * randn();
    for (auto& v : bias) v = 0.1f * randn();
    const auto w = random_weights(dt, n_out, k, 0);
    const int64_t nb = k / 32;
    const int nchunks = (int)((nb + 7) / 8), nbp = (int)((nb + 1) / 2 * 2);
    std::vector<uint8_t> xq(k + 16);
    std::vector<uint2> meta(nbp + 2);
    std::vector<float> ssq(nchunks);
    int8_t* xq16 = reinterpret_cast<int8_t*>(xq.data() + (16 - reinterpret_cast<uintptr_t>(xq.data()) % 16) % 16);
    uint2* meta16 = reinterpret_cast<uintptr_t>(meta.data()) % 16 ? meta.data() + 1 : meta.data();
    I::PreParams pp{x.data(), k, k, (int)nb, nbp, nchunks, STRATA_PROLOGUE_RMSNORM, g.data(), xq16, meta16, ssq.data()};
    run_prepass1(pp, STRATA_PROLOGUE_RMSNORM, (unsigned)nchunks);
    std::vector<int32_t> rows = {slot, index}, rows2 = {slot, index + shift};
    const std::vector<uint16_t> kv0 = kv;
    auto params = [&](float* y) {
        I::IntParams p = producer_params(dt, STRATA_PROLOGUE_RMSNORM, k, k, n_out, x.data(), g.data(), w.data(), y,
                                         false, xq16, meta16, ssq.data());
        p.bias = bias.data();
        I::dot_shape(p, slicebytes(dt), sms, 233472, 1);
        p.n_row_tiles = 1;
        p.n_tiles = (int)((n_out + p.no - 1) / p.no);
        CHECK(p.no % 2 == 0, "rope case with an odd CTA width %d", p.no);
        return p;
    };
    // The reference: the plain kernel, then the separate launch (its decode grid).
    std::vector<float> y_ref(n_out, 7.f), y(n_out, 7.f);
    I::IntParams pr = params(y_ref.data());
    CHECK(I::dot_smem(pr, 1) <= (int64_t)sizeof(g_emu_smem), "smem");
    run_dot1(dt, (unsigned)std::max(1, pr.n_tiles / 2), pr);
    RopeKvStoreArgs ra{pq, pk, s, 1, y_ref.data(), n_out, 1, rows.data(), ff_on ? ff.data() : nullptr};
    run_grid(1, (unsigned)((n_heads + n_kv + 3) / 4), 128, [&] { T_cuda_kv_store::rope_kv_store_kernel<true>(ra); });
    const std::vector<uint16_t> kv_ref = kv;
    // The rope kernel from the same start (fewer CTAs than tiles: each prepares every tile it meets).
    kv = kv0;
    I::IntParams pf = params(y.data());
    pf.rope = RopeKvStoreArgs{pq, pk, s, 1, y.data(), n_out, 1, shift ? rows2.data() : rows.data(),
                              ff_on ? ff.data() : nullptr};
    auto go = [&](auto dtc) {
        constexpr int D = decltype(dtc)::value;
        run_grid((unsigned)std::max(1, pf.n_tiles / 2), 1, (unsigned)pf.threads, [pf] { I::int_dot_rope_kernel<D>(pf); });
    };
    if (dt == STRATA_Q4_0) go(std::integral_constant<int, STRATA_Q4_0>{});
    else if (dt == STRATA_Q8_0) go(std::integral_constant<int, STRATA_Q8_0>{});
    else if (dt == STRATA_Q6_K) go(std::integral_constant<int, STRATA_Q6_K>{});
    else go(std::integral_constant<int, STRATA_Q4_K>{});
    unsetenv("STRATA_INT_DOT_SHAPE");
    int differ = 0;
    for (int64_t o = 0; o < n_out; ++o) differ += bits(y[o]) != bits(y_ref[o]);
    if (shift) return differ;
    CHECK(differ == 0, "rope epilogue dt %d k %ld heads %d/%d hd %d rot %d slot %d cell %d shape %s: %d of %ld values differ",
          dt, (long)k, n_heads, n_kv, hd, rot, slot, index, shape ? shape : "auto", differ, (long)n_out);
    CHECK(kv == kv_ref, "rope epilogue dt %d slot %d cell %d shape %s: the pool differs", dt, slot, index,
          shape ? shape : "auto");
    if (!unmapped && slot == 0) CHECK(kv != kv0, "rope epilogue: nothing stored");
    return differ;
}

static void rope_cases() {
    const int dts[4] = {STRATA_Q4_0, STRATA_Q8_0, STRATA_Q4_K, STRATA_Q6_K};
    const char* shapes[4] = {nullptr, "8:2", "2:64", "32:8"};
    int n = 0;
    for (int dt : dts) {
        const bool super = dt == STRATA_Q4_K || dt == STRATA_Q6_K;
        for (int c = 0; c < 4; ++c) {
            ++n;
            const int64_t k = super ? 256 * (1 + c % 2) : 32 * (9 + 8 * c);
            const int hd = c % 2 ? 128 : 64, rot = c == 2 ? hd / 2 : hd;
            const int32_t slot = c == 3 ? 1 : (c == 1 ? 2 : 0), index = c == 0 ? 0 : 31 + 97 * c;
            rope_case(dt, k, 2 + c, 1 + c % 2, hd, rot, c == 1, slot, index, c == 2, shapes[n % 4], n % 2 ? 132 : 1);
        }
    }
    rope_case(STRATA_Q4_0, 512, 4, 2, 64, 64, false, -1, 5, false, nullptr, 132);  // a padding row
    CHECK(rope_case(STRATA_Q4_0, 512, 4, 2, 64, 64, false, 0, 40, false, nullptr, 132, 1) > 0,
          "negative control: another cell's position changed no value of the row");
    printf("rope epilogue: %d checks, %d failures so far\n", checks, fails);
}

// The early stages' negative control: a kernel whose tiles take parts [0, 2) of the first tile as staged
// before the wait while only part 0's weights were (early_weights, the one-part form) must give wrong
// bits: part 1's buffer then holds whatever was there (0xFF, or another CTA's rows).
static void early_negative_control() {
    const int dt = STRATA_Q4_0;
    const int64_t k = 32 * 8 * 40, n_out = 64;  // 5 parts of 8 slices at 32 outputs: two stage buffers
    std::vector<float> x(k), y(n_out, 0.0f), y2(n_out, 0.0f);
    for (auto& v : x) v = randn();
    auto w = random_weights(dt, n_out, k, 0);
    const int64_t nb = k / 32, nbp = (nb + 1) / 2 * 2;
    std::vector<uint8_t> xq(k + 16);
    std::vector<uint2> meta(nbp + 2);
    std::vector<float> ssq((nb + 7) / 8);
    int8_t* xq16 = reinterpret_cast<int8_t*>(xq.data() + (16 - reinterpret_cast<uintptr_t>(xq.data()) % 16) % 16);
    uint2* meta16 = reinterpret_cast<uintptr_t>(meta.data()) % 16 ? meta.data() + 1 : meta.data();
    I::PreParams pp{x.data(), k, k, (int)nb, (int)nbp, (int)((nb + 7) / 8), 0, nullptr, xq16, meta16, ssq.data()};
    run_prepass1(pp, 0, (unsigned)pp.nchunks);
    I::IntParams p = producer_params(dt, 0, k, k, n_out, x.data(), nullptr, w.data(), y.data(), false, xq16, meta16,
                                     ssq.data());
    setenv("STRATA_INT_DOT_SHAPE", "32:8", 1);
    I::dot_shape(p, slicebytes(dt), 1000, 233472, 1);
    unsetenv("STRATA_INT_DOT_SHAPE");
    p.n_row_tiles = 1;
    p.n_tiles = (int)((n_out + p.no - 1) / p.no);
    CHECK(I::dot_nbuf(p) == 2 && p.n_parts == 5, "negative control shape: %d buffers, %d parts", I::dot_nbuf(p), p.n_parts);
    memset(g_emu_smem, 0xFF, sizeof(g_emu_smem));
    run_dot1(STRATA_Q4_0, (unsigned)p.n_tiles, p);  // the real kernel (g_early: both parts early)
    I::IntParams b = p;
    b.y = y2.data();
    b.early_parts = 2;
    memset(g_emu_smem, 0xFF, sizeof(g_emu_smem));
    run_grid((unsigned)b.n_tiles, 1, (unsigned)b.threads, [b] {
        I::early_weights<STRATA_Q4_0>(b, b.no);  // part 0 alone
        pdl_wait();
        I::int_dot_tiles<STRATA_Q4_0, 1, false, false>(b);
    });
    int differ = 0;
    for (int64_t o = 0; o < n_out; ++o) differ += bits(y[o]) != bits(y2[o]);
    CHECK(differ > 0, "early stages negative control: part 1 never staged, yet no output changed");
    printf("early stages negative control: %d of %ld outputs differ\n", differ, (long)n_out);
}

int main(int argc, char** argv) {
    setvbuf(stdout, nullptr, _IOLBF, 0);  // progress and failures as they happen
    if (argc > 1 && std::string(argv[1]) == "early") {  // STRATA_INT_EARLY_STAGES: the dot kernels, hand-off, chain
        g_early = true;
        early_negative_control();
        const bool small = argc > 2 && std::string(argv[2]) == "smoke";  // CI: RMSNORM only, chain cases left out
        for (int dt : {STRATA_Q4_0, STRATA_Q8_0, STRATA_Q4_1, STRATA_Q4_K, STRATA_Q6_K})
            for (int pro = small ? 1 : 0; pro < (small ? 2 : 3); ++pro)
                for (int64_t rows : {1, 3, 9}) {
                    const bool kq = dt == STRATA_Q4_K || dt == STRATA_Q6_K;
                    const int64_t k = kq ? 32 * 8 * 40 : 32 * (8 * 40 + 3);
                    one(dt, pro, k, 19, rows, 2, rows == 3 ? 1 : 1000, rows == 9, pro == 1, 0);
                    if (dt != STRATA_Q6_K || rows == 1)  // the kernel that rounds its own rows: 2 parts at one row
                        one(dt, pro, 32 * 8 * 36, 23, rows, 4, 1000, false, true, 3);
                }
        printf("early: the dot kernels done, %d failures so far\n", fails);
        emit_cases(true);
        if (!small) chain_cases();
        printf("test_int early: %d checks, %d failures\n", checks, fails);
        return fails ? 1 : 0;
    }
    if (argc > 1 && std::string(argv[1]) == "rope") {  // the rope epilogue only
        rope_cases();
        printf("test_int rope: %d checks, %d failures\n", checks, fails);
        return fails ? 1 : 0;
    }
    if (argc > 1 && std::string(argv[1]) == "chain") {  // the one-row chain kernel only
        chain_cases();
        printf("test_int chain: %d checks, %d failures\n", checks, fails);
        return fails ? 1 : 0;
    }
    if (argc > 1 && std::string(argv[1]) == "handoff") {  // the hand-off emission only
        emit_cases(false);
        printf("test_int handoff: %d checks, %d failures\n", checks, fails);
        return fails ? 1 : 0;
    }
    const bool quick = argc > 1 && std::string(argv[1]) == "quick";
    const bool fused_only = argc > 1 && std::string(argv[1]) == "fused";
    if (argc > 1 && std::string(argv[1]) == "smoke") {  // a few configurations of every kernel, fast
        for (int kind = 0; kind < 4; ++kind) {
            one(STRATA_Q4_0, 0, 576, 77, 20, 2, 1000, true, false, kind);
            one(STRATA_Q8_0, 1, 32 * 8 * 5 + 64, 70, 9, 0, 1, false, true, kind);
            one(STRATA_Q4_1, 2, 96, 66, 3, 4, 1, false, false, kind);
            one(STRATA_Q4_K, kind % 3, 512, 70, 11, 2 * kind, kind % 2 ? 1000 : 1, kind == 1, kind == 2, kind);
            if (kind == 0 || kind == 3) one(STRATA_Q6_K, 1 + kind / 3, 768, 37, 10, 2 + kind, kind ? 1000 : 1, true, kind == 3, kind);
        }
        // One row (the decode dot kernel without emission): several parts, a partial slice, odd alignment.
        one(STRATA_Q4_0, 1, 32 * 8 * 40, 19, 1, 2, 1000, false, true, 0);
        one(STRATA_Q8_0, 0, 96, 77, 1, 0, 1, true, false, 0);
        one(STRATA_Q4_K, 2, 512, 77, 1, 4, 1000, false, false, 0);
        one(STRATA_Q6_K, 1, 768, 37, 1, 2, 1, true, true, 0);
        emit_cases(true);
        printf("test_int smoke: %d checks, %d failures\n", checks, fails);
        return fails ? 1 : 0;
    }
    const int only_dt = argc > 2 && std::string(argv[1]) == "dtype" ? std::atoi(argv[2]) : -1;
    const int dts[5] = {STRATA_Q4_0, STRATA_Q8_0, STRATA_Q4_1, STRATA_Q4_K, STRATA_Q6_K};
    // k: 1 partial slice; 18 blocks (2 full + 1 partial slice); 40 slices (several parts); 66 slices at 8 outputs.
    // Q4_K (whole super-blocks): 1 and 2 slices, 40, 66.
    const int64_t ks[4] = {96, 576, 32 * 8 * 40, 32 * (8 * 66 + 3)};
    const int64_t ks_k[4] = {256, 512, 32 * 8 * 40, 32 * 8 * 66};
    int cfg = 0;
    for (int dt : fused_only ? std::vector<int>{} : std::vector<int>(dts, dts + 5))
        for (int pro = 0; pro < 3; ++pro)
            for (int64_t k : dt == STRATA_Q4_K || dt == STRATA_Q6_K ? ks_k : ks) {
                ++cfg;
                if (only_dt >= 0 && dt != only_dt) continue;
                if (quick && cfg % 3) continue;
                const int64_t n_out = k > 4096 ? 19 : 77;  // 77: two mma tiles of 64 outputs, the second partial
                const int64_t rows = (cfg % 4 == 0) ? 20 : (cfg % 4 == 1 ? 1 : (cfg % 4 == 2 ? 3 : 9));
                for (int kind = 0; kind < 4; ++kind) {
                    if ((kind == 1 || kind == 2) && rows == 1 && cfg % 2) continue;
                    if ((kind == 1 || kind == 2) && dt == STRATA_Q6_K) continue;  // no int_mma_kernel for Q6_K  // the tensor-core kernels also take single rows
                    one(dt, pro, k, n_out, kind == 0 || kind == 3 ? rows : rows + 4 * kind, 2 * (int)(cfg % 5),
                        cfg % 2 ? 1000 : 1, cfg % 3 == 0, cfg % 3 == 1, kind);
                }
                printf("config %d (dt %d pro %d k %ld): %d checks, %d failures so far\n", cfg, dt, pro, (long)k,
                       checks, fails);
            }
    // The fused kernel (no pre-pass) at every row count of the dot kernels' routes (1 to 16 rows: one
    // row tile or two), every dtype and prologue, ragged k (partial slices, one or several parts) and
    // n_out, bias and accumulate, odd weight-row alignment, both grid choices.
    {
        const int64_t fks[3] = {64, 32 * (8 * 3 + 5), 32 * 8 * 36};
        const int64_t fks_k[3] = {256, 32 * 8 * 3, 32 * 8 * 36};
        int n = 0;
        const int only = fused_only && argc > 2 ? std::atoi(argv[2]) : only_dt;
        for (int dt : dts)
            for (int pro = 0; pro < 3; ++pro)
                for (int64_t rows = 1; rows <= 16; ++rows) {
                    ++n;
                    if (only >= 0 && dt != only) continue;
                    if (quick && n % 4) continue;
                    const int64_t k = (dt == STRATA_Q4_K || dt == STRATA_Q6_K ? fks_k : fks)[(n + pro) % 3];
                    one(dt, pro, k, 5 + (n * 7) % 41, rows, 2 * (n % 4), n % 2 ? 1000 : 1, n % 3 == 0, n % 5 < 2, 3);
                    if (rows == 16) printf("fused dt %d pro %d: rows 1..16 done, %d failures so far\n", dt, pro, fails);
                }
    }
    // Negative control: a different slice fold order must change some bits.
    {
        const int64_t k = 32 * 8 * 5, n_out = 64;  // 64 outputs: a 3-term sum reordered keeps its bits often
        std::vector<float> x(k);
        for (auto& v : x) v = randn();
        auto w = random_weights(STRATA_Q4_0, n_out, k, 0);
        Act a = ref_act(0, x.data(), nullptr, k);
        int differ = 0;
        for (int64_t o = 0; o < n_out; ++o)
            differ += bits(ref_out(STRATA_Q4_0, 0, a, w.data() + o * (k / 32 * 18), k, 0, nullptr, o, 0, false)) !=
                      bits(ref_out(STRATA_Q4_0, 0, a, w.data() + o * (k / 32 * 18), k, 0, nullptr, o, 0, false, true));
        CHECK(differ > 0, "the negative control (slices folded in another order) changed no bit");
    }
    // Negative control for the fused kernel's ssq: the same squares summed in another shape (one
    // chain per chunk instead of the warp butterflies) must change the bits of some rows.
    {
        const int64_t k = 2048;
        int differ = 0;
        for (int r = 0; r < 16; ++r) {
            std::vector<float> x(k);
            for (auto& v : x) v = randn();
            const Act a = ref_act(0, x.data(), nullptr, k);
            float ssq = 0;
            for (int64_t c0 = 0; c0 < k; c0 += 256) {
                float cs = 0;
                for (int t = 0; t < 256; ++t) cs = __fadd_rn(cs, fmaf(x[c0 + t], x[c0 + t], 0.0f));
                ssq = c0 == 0 ? cs : __fadd_rn(ssq, cs);
            }
            differ += bits(ssq) != bits(a.ssq);
        }
        CHECK(differ > 0, "the negative control (ssq summed in another shape) changed no bit");
    }
    emit_cases(quick);
    rope_cases();
    printf("test_int: %d checks, %d failures\n", checks, fails);
    return fails ? 1 : 0;
}

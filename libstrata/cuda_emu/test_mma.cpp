// test_mma.cpp — the tensor-core matmul (cuda_mma_matmul.cu) under the host
// emulator. A plain host implementation of the canonical arithmetic
// (docs/cuda_backend.md: per-block activation scaling, the slot order, the
// mma chain, fmaf per block, slices in order, the prologues) is written here
// from the GGUF layouts, with the emulator's model of mma.sync; every kernel
// configuration (decode with 16 or 32 outputs per CTA, wide with 16-, 32- or
// 64-row tiles) must give exactly its bits, for every dtype and prologue,
// partial blocks and slices, odd n_out, misaligned x rows and weights, bias
// and accumulate. So decode and prefill paths provably execute the same
// operations per element (on the device the products are the same and the
// tensor cores add identically in both). It also checks the canonical result
// against float64 within the f16-activation bound. F32 weights stay on CUDA
// cores (cuda_matmul.cu): their prologues are checked against float64 and
// batch invariance (rows alone vs in a batch, strided rows).
// Usage: test_mma [quick]
#define STRATA_CUDA_EMU 1
#include "emu.h"
#include "cuda_mma_matmul.cu"
#include "cuda_matmul.cu"

#include <atomic>
#include <cstdio>
#include <random>
#include <vector>

using namespace strata;
using namespace strata::cuda;
namespace M = strata::cuda::T_cuda_mma_matmul;

static std::mt19937_64 rng(11);
static int fails = 0;
#define CHECK(c, ...) do { if (!(c)) { ++fails; printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); } } while (0)
static float randn() { static std::normal_distribution<float> nd(0, 1); return nd(rng); }
static float h2f(const uint8_t* p) { uint16_t b; memcpy(&b, p, 2); return emu_f16(b); }
static uint32_t bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

// ---------------------------------------------------------------- weights

static int64_t rbytes(int dt, int64_t k) { return row_bytes(dt, k); }

static std::vector<uint8_t> random_weights(int dt, int64_t n_out, int64_t k, int pad) {
    const int64_t rb = rbytes(dt, k);
    std::vector<uint8_t> w(pad + n_out * rb + 64);
    for (auto& b : w) b = rng() & 255;
    auto fixh = [&](uint8_t* p, float v) { uint16_t h = (uint16_t)emu_f16_bits(v); memcpy(p, &h, 2); };
    for (int64_t o = 0; o < n_out; ++o) {
        uint8_t* r = w.data() + pad + o * rb;
        switch (dt) {
        case STRATA_F16: for (int64_t i = 0; i < k; ++i) fixh(r + 2 * i, randn()); break;
        case STRATA_BF16: for (int64_t i = 0; i < k; ++i) { uint16_t h = (uint16_t)emu_bf16_bits(randn()); memcpy(r + 2 * i, &h, 2); } break;
        case STRATA_Q8_0: for (int64_t b = 0; b < k / 32; ++b) fixh(r + 34 * b, 0.01f * (1 + (rng() % 100))); break;
        case STRATA_Q4_0: for (int64_t b = 0; b < k / 32; ++b) fixh(r + 18 * b, 0.01f * (1 + (rng() % 100))); break;
        case STRATA_Q4_1: for (int64_t b = 0; b < k / 32; ++b) { fixh(r + 20 * b, 0.01f * (1 + (rng() % 100))); fixh(r + 20 * b + 2, -0.1f * (rng() % 10)); } break;
        case STRATA_Q4_K: for (int64_t b = 0; b < k / 256; ++b) { fixh(r + 144 * b, 0.001f * (1 + rng() % 4)); fixh(r + 144 * b + 2, 0.001f * (1 + rng() % 4)); } break;
        case STRATA_Q6_K: for (int64_t b = 0; b < k / 256; ++b) fixh(r + 210 * b + 208, 0.0005f * (1 + rng() % 4)); break;
        }
    }
    return w;
}

// Block b of a weight row: integer quants (or plain values) q[32], scale per half, min coefficient.
static void ref_block(int dt, const uint8_t* row, int64_t k, int64_t b, float q[32], float ws[2], float& wm) {
    wm = 0.0f;
    ws[0] = ws[1] = 1.0f;
    if (dt == STRATA_F16 || dt == STRATA_BF16) {
        for (int i = 0; i < 32; ++i) {
            const int64_t e = 32 * b + i;
            uint16_t h = 0;
            if (e < k) memcpy(&h, row + 2 * e, 2);
            q[i] = dt == STRATA_F16 ? emu_f16(h) : emu_bf16(h);
        }
    } else if (dt == STRATA_Q4_0 || dt == STRATA_Q4_1) {
        const int bb = dt == STRATA_Q4_0 ? 18 : 20, off = dt == STRATA_Q4_0 ? 2 : 4;
        const uint8_t* blk = row + bb * b;
        for (int i = 0; i < 16; ++i) {
            q[i] = (float)((blk[off + i] & 15) - (dt == STRATA_Q4_0 ? 8 : 0));
            q[i + 16] = (float)((blk[off + i] >> 4) - (dt == STRATA_Q4_0 ? 8 : 0));
        }
        ws[0] = ws[1] = h2f(blk);
        if (dt == STRATA_Q4_1) wm = h2f(blk + 2);
    } else if (dt == STRATA_Q8_0) {
        const uint8_t* blk = row + 34 * b;
        for (int i = 0; i < 32; ++i) q[i] = (float)(int8_t)blk[2 + i];
        ws[0] = ws[1] = h2f(blk);
    } else if (dt == STRATA_Q4_K) {
        const uint8_t* sb = row + 144 * (b / 8);
        const int j = (int)(b % 8);
        const uint8_t* s = sb + 4;
        int sc, m;
        if (j < 4) { sc = s[j] & 63; m = s[j + 4] & 63; }
        else { sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4); m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4); }
        for (int l = 0; l < 32; ++l) q[l] = (float)((sb[16 + 32 * (j / 2) + l] >> (4 * (j & 1))) & 15);
        ws[0] = ws[1] = __fmul_rn(h2f(sb), (float)sc);
        wm = -__fmul_rn(h2f(sb + 2), (float)m);
    } else if (dt == STRATA_Q6_K) {
        const uint8_t* sb = row + 210 * (b / 8);
        const int j = (int)(b % 8), n = j / 4, qq = j % 4;
        for (int l = 0; l < 32; ++l) {
            const int lo = (sb[64 * n + 32 * (qq & 1) + l] >> (4 * (qq >> 1))) & 15;
            const int hi = (sb[128 + 32 * n + l] >> (2 * qq)) & 3;
            q[l] = (float)((lo | (hi << 4)) - 32);
        }
        for (int h = 0; h < 2; ++h) ws[h] = __fmul_rn(h2f(sb + 208), (float)(int8_t)sb[192 + 8 * n + 2 * qq + h]);
    }
}

static bool plain(int dt) { return dt == STRATA_F16 || dt == STRATA_BF16; }
// Value index of mma slot s of half h (the canonical k-order).
static int slot_value(int dt, int h, int s) {
    if (plain(dt)) return 16 * h + s;
    const int t = (s & 7) >> 1, j = s & 1, i = s >> 3;
    return 16 * h + 4 * t + 2 * j + i;
}

// ---------------------------------------------------------------- canonical reference

struct Act { float xh[32]; float inv, sx, ssq; };

// One row's block b after the prologue, scaled and rounded as the spec says.
static Act ref_act(int dt, int pro, const float* xrow, const float* norm, int64_t k, int64_t b) {
    const bool bf = dt == STRATA_BF16, minterm = dt == STRATA_Q4_1 || dt == STRATA_Q4_K;
    float v[4][8], raw[4][8];
    for (int t = 0; t < 4; ++t)
        for (int i = 0; i < 8; ++i) {
            const int off = plain(dt) ? frag_offset<true>(t, i) : frag_offset<false>(t, i);
            const int64_t e = 32 * b + off;
            const bool ok = e < k;
            raw[t][i] = ok ? xrow[e] : 0.0f;
            if (pro == 1) v[t][i] = ok ? __fmul_rn(raw[t][i], norm[e]) : 0.0f;
            else if (pro == 2) {
                const float up = ok ? xrow[k + e] : 0.0f;
                v[t][i] = __fmul_rn(fast_div(raw[t][i], __fadd_rn(1.0f, fast_exp(-raw[t][i]))), up);
            } else v[t][i] = raw[t][i];
        }
    Act a;
    float m = 0.0f;
    for (int t = 0; t < 4; ++t) for (int i = 0; i < 8; ++i) m = fmaxf(m, fabsf(v[t][i]));
    float s = 1.0f;
    a.inv = 1.0f;
    if (!bf) {
        const int e = (int)((bits(m) >> 23) & 255);
        int E = e == 255 ? 0 : e - 127;
        E = E < -126 ? -126 : (E > 126 ? 126 : E);
        s = __uint_as_float((uint32_t)(127 - E) << 23);
        a.inv = __uint_as_float((uint32_t)(127 + E) << 23);
    }
    int isum = 0;
    float qs[4];
    for (int t = 0; t < 4; ++t) {
        float q = 0.0f;
        for (int i = 0; i < 8; ++i) {
            q = fmaf(raw[t][i], raw[t][i], q);
            const int off = plain(dt) ? frag_offset<true>(t, i) : frag_offset<false>(t, i);
            const float sc = __fmul_rn(v[t][i], s);
            const float r = bf ? emu_bf16(emu_bf16_bits(sc)) : emu_f16(emu_f16_bits(sc));
            a.xh[off] = r;
            isum += (int)__fmul_rn(r, 16777216.0f);
        }
        qs[t] = q;
    }
    a.ssq = __fadd_rn(__fadd_rn(qs[0], qs[1]), __fadd_rn(qs[2], qs[3]));
    a.sx = minterm ? __fmul_rn(__fmul_rn((float)isum, 5.9604644775390625e-8f), a.inv) : 0.0f;
    return a;
}

struct Problem {
    int dt, pro;
    int64_t n_rows, k, n_out, x_stride;
    std::vector<float> xs;  // x buffer (with a leading pad)
    int x_pad;
    std::vector<uint8_t> ws;
    int w_pad;
    std::vector<float> norm, bias, y0;
    bool accumulate, use_bias;
    float eps = 1e-5f;
    const float* x() const { return xs.data() + x_pad; }
    const uint8_t* w() const { return ws.data() + w_pad; }
};

static std::vector<float> ref_canonical(const Problem& P) {
    const int dt = P.dt;
    const int64_t nb = (P.k + 31) / 32, rb = rbytes(dt, P.k);
    const bool minterm = dt == STRATA_Q4_1 || dt == STRATA_Q4_K, split = dt == STRATA_Q6_K;
    std::vector<float> y(P.n_rows * P.n_out);
    for (int64_t r = 0; r < P.n_rows; ++r) {
        const float* xr = P.x() + r * P.x_stride;
        std::vector<Act> acts(nb);
        for (int64_t b = 0; b < nb; ++b) acts[b] = ref_act(dt, P.pro, xr, P.norm.data(), P.k, b);
        float ssq = 0.0f;
        for (int64_t s0 = 0; s0 < nb; s0 += 16) {
            float sl = 0.0f;
            for (int64_t b = s0; b < std::min(nb, s0 + 16); ++b) sl = b == s0 ? acts[b].ssq : __fadd_rn(sl, acts[b].ssq);
            ssq = s0 == 0 ? sl : __fadd_rn(ssq, sl);
        }
        const float rinv = rsqrt_rn(__fadd_rn(__fdiv_rn(ssq, (float)P.k), P.eps));
        for (int64_t o = 0; o < P.n_out; ++o) {
            const uint8_t* wrow = P.w() + o * rb;
            float total = 0.0f;
            for (int64_t s0 = 0; s0 < nb; s0 += 16) {
                float acc = 0.0f;
                for (int64_t b = s0; b < std::min(nb, s0 + 16); ++b) {
                    float q[32], wsc[2], wm;
                    ref_block(dt, wrow, P.k, b, q, wsc, wm);
                    const Act& a = acts[b];
                    auto half = [&](int h, float c) {
                        for (int s = 0; s < 16; ++s) { const int vi = slot_value(dt, h, s); c = __fadd_rn(c, q[vi] * a.xh[vi]); }
                        return c;
                    };
                    if (split) {
                        const float p0 = half(0, 0.0f), p1 = half(1, 0.0f);
                        acc = fmaf(__fmul_rn(wsc[0], a.inv), p0, acc);
                        acc = fmaf(__fmul_rn(wsc[1], a.inv), p1, acc);
                    } else {
                        const float pp = half(1, half(0, 0.0f));
                        const float c = plain(dt) ? a.inv : __fmul_rn(wsc[0], a.inv);
                        acc = fmaf(c, pp, acc);
                        if (minterm) acc = fmaf(wm, a.sx, acc);
                    }
                }
                total = s0 == 0 ? acc : __fadd_rn(total, acc);
            }
            float v = total;
            if (P.pro == 1) v = __fmul_rn(v, rinv);
            if (P.use_bias) v = __fadd_rn(v, P.bias[o]);
            const float y0 = P.y0[r * P.n_out + o];
            y[r * P.n_out + o] = P.accumulate ? __fadd_rn(y0, v) : v;
        }
    }
    return y;
}

// float64 result and the activation-rounding bound of each output.
static void ref_f64(const Problem& P, std::vector<double>& want, std::vector<double>& bound) {
    const int64_t nb = (P.k + 31) / 32, rb = rbytes(P.dt, P.k);
    want.assign(P.n_rows * P.n_out, 0.0);
    bound.assign(P.n_rows * P.n_out, 0.0);
    const double u = P.dt == STRATA_BF16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
    for (int64_t r = 0; r < P.n_rows; ++r) {
        const float* xr = P.x() + r * P.x_stride;
        std::vector<double> xp(P.k);
        double ss = 0;
        for (int64_t i = 0; i < P.k; ++i) ss += (double)xr[i] * xr[i];
        const double inv = 1.0 / std::sqrt(ss / P.k + P.eps);
        for (int64_t i = 0; i < P.k; ++i) {
            if (P.pro == 1) xp[i] = (double)xr[i] * inv * P.norm[i];
            else if (P.pro == 2) xp[i] = (double)xr[i] / (1.0 + std::exp(-(double)xr[i])) * xr[P.k + i];
            else xp[i] = xr[i];
        }
        for (int64_t o = 0; o < P.n_out; ++o) {
            double s = 0, mag = 0;
            for (int64_t b = 0; b < nb; ++b) {
                float q[32], wsc[2], wm;
                ref_block(P.dt, P.w() + o * rb, P.k, b, q, wsc, wm);
                for (int i = 0; i < 32 && 32 * b + i < P.k; ++i) {
                    const double wv = (double)wsc[i / 16] * q[i] + wm;
                    s += wv * xp[32 * b + i];
                    mag += std::fabs(wv * xp[32 * b + i]);
                }
            }
            if (P.use_bias) s += P.bias[o];
            if (P.accumulate) s += P.y0[r * P.n_out + o];
            want[r * P.n_out + o] = s;
            bound[r * P.n_out + o] = 2 * u * mag + 1e-6 * (std::fabs(s) + mag) + 1e-30;
        }
    }
}

// ---------------------------------------------------------------- kernels

static std::atomic<int> pending_fail{0};

template <int D>
static std::vector<float> run_kernel(const Problem& P, int cfg) {
    MatmulArgs a;
    a.x = P.x(); a.n_rows = P.n_rows; a.k = P.k; a.w = P.w(); a.w_dtype = D; a.n_out = P.n_out;
    a.bias = P.use_bias ? P.bias.data() : nullptr;
    // y rows n_out + gap apart (strata_matmul_ex's y_row_stride), gap 0..2 by case: the kernel writes the
    // columns of wider rows; the dense values are taken back out below and the gaps must be untouched.
    const int64_t ys = P.n_out + (P.n_rows + cfg) % 3;
    std::vector<float> wide(P.n_rows * ys);
    for (size_t i = 0; i < wide.size(); ++i) wide[i] = -1000.0f - (float)(i % 97);
    for (int64_t r = 0; r < P.n_rows; ++r)
        for (int64_t o = 0; o < P.n_out; ++o) wide[r * ys + o] = P.y0[r * P.n_out + o];
    const std::vector<float> wide0 = wide;
    std::vector<float> y = P.y0;
    a.y = wide.data(); a.accumulate = P.accumulate; a.y_row_stride = ys;
    auto unpack = [&]() {  // before every return: the dense values, and a check of the gap columns
        int gap = 0;
        for (int64_t r = 0; r < P.n_rows; ++r) {
            for (int64_t o = 0; o < P.n_out; ++o) y[r * P.n_out + o] = wide[r * ys + o];
            for (int64_t c = P.n_out; c < ys; ++c) gap += bits(wide[r * ys + c]) != bits(wide0[r * ys + c]);
        }
        CHECK(gap == 0, "y stride %ld: %d gap columns written", (long)ys, gap);
        return y;
    };
    a.prologue = P.pro; a.norm_weight = P.pro == 1 ? P.norm.data() : nullptr; a.eps = P.eps; a.x_row_stride = P.x_stride;
    M::MmaParams p{};
    M::base_params(a, p);
    using W = MmaW<D>;
    constexpr bool kK = W::kBlocksPerUnit > 1;
    using DC = M::DecCfg<D>;
    using WC = M::WideCfg<D>;
    const int limit = 227 * 1024;
    std::memset(g_emu_smem, 0xFF, sizeof g_emu_smem);
    auto guard = [](auto fn) { return [fn] { fn(); if (emu_pending_copies() != 0) pending_fail++; }; };
    // cfg 0/1: decode, deep ring, 16/32 outputs; 5/6: decode, occupancy ring
    // (not for K-quants: they run the deep one again); 2-4: wide, 16/64/32 rows.
    if (cfg <= 1 || cfg >= 5) {
        const bool occ = cfg >= 5 && DC::kHasOcc;
        const int MT = (cfg == 0 || cfg == 5) ? 1 : 2;
        const int XB = occ ? M::kOccXB : DC::kXB, depth = occ ? M::kOccDepth : DC::kDepth;
        p.n_chunks = (p.nb + XB - 1) / XB;
        p.n_row_tiles = (int)((p.n_rows + 7) / 8);
        p.n_tiles = (int)((p.n_out + 16 * MT - 1) / (16 * MT)) * p.n_row_tiles;
        int wk = 0, smem = 0;
        if (!M::dec_layout(p, M::unit_bytes<D>(XB), MT, XB, depth, kK, limit, &wk, &smem)) { printf("dec layout does not fit\n"); ++fails; return unpack(); }
        const unsigned grid = (unsigned)std::min(p.n_tiles, 4);
        if (!occ && MT == 1) run_grid(grid, 1, 32 * wk, guard([p] { M::mma_dec_kernel<D, 1, DC::kXB, DC::kDepth, 1>(p); }));
        else if (!occ) run_grid(grid, 1, 32 * wk, guard([p] { M::mma_dec_kernel<D, 2, DC::kXB, DC::kDepth, 1>(p); }));
        else if constexpr (DC::kHasOcc) {
            if (MT == 1) run_grid(grid, 1, 32 * wk, guard([p] { M::mma_dec_kernel<D, 1, M::kOccXB, M::kOccDepth, 2>(p); }));
            else run_grid(grid, 1, 32 * wk, guard([p] { M::mma_dec_kernel<D, 2, M::kOccXB, M::kOccDepth, 2>(p); }));
        }
    } else {
        const bool large = cfg == 3 && !kK, mid = cfg == 4 && !kK;
        const int XB = kK ? 8 : (large ? WC::kXB : WC::kXBShort);
        const int BM = 128, BN = large ? 64 : (mid ? 32 : 16);
        p.n_chunks = (p.nb + XB - 1) / XB;
        p.n_row_tiles = (int)((p.n_rows + BN - 1) / BN);
        p.n_tiles = (int)((p.n_out + BM - 1) / BM) * p.n_row_tiles;
        int smem = 0;
        const int depth = kK ? 3 : (large ? WC::kDepth : 4);
        if (!M::wide_layout(p, M::unit_bytes<D>(XB), BM, BN, XB, depth, kK, limit, &smem)) { printf("wide layout does not fit\n"); ++fails; return unpack(); }
        const unsigned grid = (unsigned)std::min(p.n_tiles, 3);
        if constexpr (kK) run_grid(grid, 1, 256, guard([p] { M::mma_wide_kernel<D, 8, 1, 1, 2, 8, 3, 1>(p); }));
        else if (large) run_grid(grid, 1, 256, guard([p] { M::mma_wide_kernel<D, 4, 2, 2, 4, WC::kXB, WC::kDepth, WC::kMinB>(p); }));
        else if (mid) run_grid(grid, 1, 256, guard([p] { M::mma_wide_kernel<D, 4, 2, 2, 2, WC::kXBShort, 4, 1>(p); }));
        else run_grid(grid, 1, 256, guard([p] { M::mma_wide_kernel<D, 8, 1, 1, 2, WC::kXBShort, 4, 1>(p); }));
    }
    return unpack();
}

static std::vector<float> run_any(const Problem& P, int cfg) {
    switch (P.dt) {
    case STRATA_F16: return run_kernel<STRATA_F16>(P, cfg);
    case STRATA_BF16: return run_kernel<STRATA_BF16>(P, cfg);
    case STRATA_Q8_0: return run_kernel<STRATA_Q8_0>(P, cfg);
    case STRATA_Q4_0: return run_kernel<STRATA_Q4_0>(P, cfg);
    case STRATA_Q4_1: return run_kernel<STRATA_Q4_1>(P, cfg);
    case STRATA_Q4_K: return run_kernel<STRATA_Q4_K>(P, cfg);
    case STRATA_Q6_K: return run_kernel<STRATA_Q6_K>(P, cfg);
    }
    return {};
}

static Problem make_problem(int dt, int pro, int64_t n_rows, int64_t k, int64_t n_out, int64_t stride_extra, int x_pad,
                            int w_pad, bool acc, bool bias) {
    Problem P;
    P.dt = dt; P.pro = pro; P.n_rows = n_rows; P.k = k; P.n_out = n_out;
    const int64_t width = pro == 2 ? 2 * k : k;
    P.x_stride = width + stride_extra;
    P.x_pad = x_pad;
    P.xs.resize(x_pad + n_rows * P.x_stride + 8);
    for (auto& v : P.xs) v = randn() * 2;
    // a row of zeros, a row with one huge value, a row of tiny values
    if (n_rows > 3) {
        for (int64_t i = 0; i < width; ++i) P.xs[x_pad + 1 * P.x_stride + i] = 0.0f;
        P.xs[x_pad + 2 * P.x_stride + 5] = 3.0e4f;
        for (int64_t i = 0; i < width; ++i) P.xs[x_pad + 3 * P.x_stride + i] *= 1e-30f;
    }
    P.w_pad = w_pad;
    P.ws = random_weights(dt, n_out, k, w_pad);
    P.norm.resize(k); for (auto& v : P.norm) v = 1.0f + 0.1f * randn();
    P.bias.resize(n_out); for (auto& v : P.bias) v = randn();
    P.y0.resize(n_rows * n_out); for (auto& v : P.y0) v = randn();
    P.accumulate = acc; P.use_bias = bias;
    return P;
}

static const char* dt_name(int dt) {
    switch (dt) { case 1: return "F16"; case 30: return "BF16"; case 8: return "Q8_0"; case 2: return "Q4_0"; case 3: return "Q4_1"; case 12: return "Q4_K"; case 14: return "Q6_K"; }
    return "?";
}

// F32 weights with each prologue on the CUDA-core kernel: float64 within the
// float32 bound, and each row alone equal to the batch.
static void test_f32_prologues() {
    for (int pro = 0; pro < 3; ++pro)
        for (int64_t k : {36, 576}) {
            const int64_t n_rows = 11, n_out = 9;
            const int64_t width = pro == 2 ? 2 * k : k, stride = width + 3;
            std::vector<float> x(n_rows * stride + 4), w(n_out * k), norm(k), y(n_rows * n_out), y1(n_out);
            for (auto& v : x) v = randn();
            for (auto& v : w) v = randn();
            for (auto& v : norm) v = 1.0f + 0.1f * randn();
            auto run = [&](const float* xs, int64_t nr, float* out) {
                T_cuda_matmul::MatmulParams p;
                p.x = xs; p.n_rows = nr; p.k = k; p.x_stride = stride; p.prologue = pro; p.norm = norm.data();
                p.eps = 1e-5f; p.w = reinterpret_cast<const uint8_t*>(w.data()); p.w_row_bytes = 4 * k; p.n_out = n_out;
                p.n_units = (k + 7) / 8; p.bias = nullptr; p.y = out; p.y_stride = n_out; p.accumulate = false;
                p.x_vec = false; p.w_vec = false;
                const unsigned gx = (unsigned)((n_out + 3) / 4), gy = (unsigned)((nr + 7) / 8);
                if (pro == 1) run_grid(gx, gy, 128, [&] { T_cuda_matmul::matmul_kernel<STRATA_F32, STRATA_PROLOGUE_RMSNORM>(p); });
                else if (pro == 2) run_grid(gx, gy, 128, [&] { T_cuda_matmul::matmul_kernel<STRATA_F32, STRATA_PROLOGUE_SILU_MUL>(p); });
                else run_grid(gx, gy, 128, [&] { T_cuda_matmul::matmul_kernel<STRATA_F32>(p); });
            };
            run(x.data(), n_rows, y.data());
            for (int64_t r = 0; r < n_rows; ++r) {
                const float* xr = x.data() + r * stride;
                double ss = 0;
                for (int64_t i = 0; i < k; ++i) ss += (double)xr[i] * xr[i];
                const double inv = 1.0 / std::sqrt(ss / k + 1e-5);
                for (int64_t o = 0; o < n_out; ++o) {
                    double s = 0, mag = 0;
                    for (int64_t i = 0; i < k; ++i) {
                        double xp = pro == 1 ? xr[i] * inv * norm[i] : (pro == 2 ? xr[i] / (1 + std::exp(-(double)xr[i])) * xr[k + i] : xr[i]);
                        s += xp * w[o * k + i];
                        mag += std::fabs(xp * w[o * k + i]);
                    }
                    CHECK(std::fabs(y[r * n_out + o] - s) <= 3e-6 * std::sqrt((double)k) * mag + 1e-30,
                          "f32 prologue %d k=%ld r=%ld o=%ld got %g want %g", pro, (long)k, (long)r, (long)o, y[r * n_out + o], s);
                }
            }
            for (int64_t r = 0; r < n_rows; r += 5) {
                run(x.data() + r * stride, 1, y1.data());
                CHECK(memcmp(y1.data(), y.data() + r * n_out, 4 * n_out) == 0, "f32 prologue %d k=%ld row %ld alone differs", pro, (long)k, (long)r);
            }
        }
    printf("f32 prologues done (%d failures)\n", fails);
}

int main(int argc, char** argv) {
    test_f32_prologues();
    const bool quick = argc > 1 && std::string(argv[1]) == "quick";
    struct Case { int dt; std::vector<int64_t> ks; };
    std::vector<Case> cases = {{STRATA_Q4_0, {64, 576}}, {STRATA_Q8_0, {96, 128, 1056}}, {STRATA_Q4_1, {512, 544}},
                               {STRATA_Q4_K, {256, 1280}}, {STRATA_Q6_K, {512}}, {STRATA_F16, {40, 600}},
                               {STRATA_BF16, {1176}}};
    int n = 0;
    for (const Case& c : cases)
        for (int64_t k : c.ks)
            for (int pro = 0; pro < 3; ++pro) {
                if (quick && pro != (int)(k % 3)) continue;
                const int64_t n_rows = 17, n_out = 37;  // decode tiles of 8, 8 and 1 rows
                const int64_t extra = (k + pro) % 2 ? 3 : 0;  // misaligned rows in some cases
                const int w_pad = (k / 32) % 2 ? 2 : 0;
                Problem P = make_problem(c.dt, pro, n_rows, k, n_out, extra, (int)(k % 3), w_pad, pro != 1, pro != 2);
                const std::vector<float> want = ref_canonical(P);
                std::vector<double> f64, bound;
                ref_f64(P, f64, bound);
                int bad64 = 0;
                for (size_t i = 0; i < want.size(); ++i)
                    if (!(std::fabs(want[i] - f64[i]) <= bound[i])) ++bad64;
                CHECK(bad64 == 0, "%s k=%ld pro=%d: canonical result off float64 in %d outputs", dt_name(c.dt), (long)k, pro, bad64);
                for (int cfg = 0; cfg < 7; ++cfg) {
                    const std::vector<float> got = run_any(P, cfg);
                    int diff = 0; size_t first = 0;
                    for (size_t i = 0; i < want.size(); ++i)
                        if (bits(got[i]) != bits(want[i])) { if (!diff) first = i; ++diff; }
                    CHECK(diff == 0, "%s k=%ld pro=%d cfg=%d: %d outputs differ from the canonical bits (first r=%ld o=%ld got %.9g want %.9g)",
                          dt_name(c.dt), (long)k, pro, cfg, diff, (long)(first / n_out), (long)(first % n_out), got[first], want[first]);
                }
                ++n;
                printf("%s k=%ld prologue=%d: ok so far (%d failures)\n", dt_name(c.dt), (long)k, pro, fails);
                fflush(stdout);
            }
    CHECK(pending_fail.load() == 0, "%d kernel threads ended with cp.async copies pending", pending_fail.load());
    printf("mma matmul: %d problems x 5 kernel configurations, %d failures\n", n, fails);
    return fails ? 1 : 0;
}

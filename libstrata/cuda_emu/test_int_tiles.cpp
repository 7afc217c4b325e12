// test_int_tiles.cpp — the many-row integer tile kernel (cuda_int_mma_tiles.cu)
// under the host emulator. Reuses test_int.cpp's host reference of the
// canonical integer-matmul arithmetic (its main renamed away) and requires,
// for Q4_0, Q8_0, Q4_1, Q4_K and Q6_K, every prologue, bias and accumulate, each of the
// tile configurations (128/64/32 outputs x 64 rows, 128 x 128 on 16 warps, 128 x 16 and 128 x 32; the
// pipeline depths 0-2: 2 to 6 slices in flight; Q4_0's offset in the
// float subtraction; rows 4-byte aligned or not; the K split: two groups of 8 warps on alternate
// slices, 32 x 64 and 64 x 64), 1 to 131 rows, k with
// full and partial slices and more slices than stages, n_out not a multiple of
// the tile and misaligned weight rows:
//  - every output bit-identical to the reference and to the older int8
//    tensor-core kernel (int_mma_kernel, 16-row tiles) on the same inputs (Q6_K,
//    which has no such kernel: to the dp4a dot kernel's 8-row tiles);
//  - within the int8-activation bound of a float64 product;
//  - no cp.async copy left pending.
// A negative control (the tile kernel with one block's scale changed) must
// differ, the K split with group 1's totals added in a wrong association must
// change some bit, idling warps that hold live rows (the idle warps of a partial row tile skip their
// work: STRATA_INT_TILES_SKIP_DEAD, on in every run here) must change some bit, and for Q6_K the reference with each block's two half scales swapped
// must disagree with the kernel. Usage: test_int_tiles [smoke|v1|deep [FROM TO]|dtype DTYPE] (default: v1 and deep; dtype: the
// v1 configurations of one strata_dtype value, e.g. 12 for Q4_K)
#define main test_int_main
#include "test_int.cpp"
#undef main
#include "cuda_int_mma_tiles.cu"

namespace TT = strata::cuda::T_cuda_int_mma_tiles;

// The pre-pass as launch_int_matmul runs it (its int8 blocks in 16-byte aligned buffers), and the many-row
// kernels' parameters over them and the matmul's operands (the tile counts are the caller's). Filled in place:
// p points into the vectors.
// STRATA_INT_TILES_SKIP_DEAD as the kernel's parameter: on in every run here (warps of a partial last row
// tile with no live row skip their work), so the checks cover the skipping; the form without it is the
// same code with no warp idle (the device tests compare both).
static bool g_skip_dead = true;

struct Prepared {
    std::vector<uint8_t> xq;
    std::vector<uint2> meta;
    std::vector<float> ssq;
    strata::cuda::TileParams p{};
};

static void prepare(Prepared& pr, int dt, int pro, const float* x, int64_t x_stride, int64_t n_rows, int64_t k,
                    const uint8_t* w, int64_t n_out, const float* g, float eps, const float* bias, float* y,
                    bool accumulate) {
    const int64_t nb = k / 32;
    const int nchunks = (int)((nb + 7) / 8), nbp = (int)((nb + 1) / 2 * 2);
    pr.xq.assign(n_rows * k + 16, 0);
    pr.meta.assign(n_rows * nbp + 2, uint2{});
    pr.ssq.assign(n_rows * nchunks, 0.0f);
    int8_t* xq16 = reinterpret_cast<int8_t*>(pr.xq.data() + (16 - reinterpret_cast<uintptr_t>(pr.xq.data()) % 16) % 16);
    uint2* meta16 = reinterpret_cast<uintptr_t>(pr.meta.data()) % 16 ? pr.meta.data() + 1 : pr.meta.data();
    I::PreParams pp{x, x_stride, k, (int)nb, nbp, nchunks, pro, g, xq16, meta16, pr.ssq.data()};
    run_grid((unsigned)n_rows, (unsigned)nchunks, 256, [&] {
        if (pro == STRATA_PROLOGUE_RMSNORM) I::int_prepass_kernel<STRATA_PROLOGUE_RMSNORM>(pp);
        else if (pro == STRATA_PROLOGUE_SILU_MUL) I::int_prepass_kernel<STRATA_PROLOGUE_SILU_MUL>(pp);
        else I::int_prepass_kernel<STRATA_PROLOGUE_NONE>(pp);
    });
    strata::cuda::TileParams& p = pr.p;
    p.xq = xq16; p.meta = meta16; p.ssq = pr.ssq.data();
    p.n_rows = n_rows; p.k = k; p.n_out = n_out; p.w_row_bytes = rowbytes(dt, k);
    p.nb = (int)nb; p.nbp = nbp; p.n_slices = nchunks;
    p.w = w; p.w_end = w + n_out * p.w_row_bytes;
    p.bias = bias; p.y = y; p.y_stride = g_y_stride > 0 ? g_y_stride : n_out; p.accumulate = accumulate; p.prologue = pro; p.eps = eps;
}

// The pre-pass, then the tile kernel of one configuration.
template <int kDt, int kWM, int kMT, int kNT, int kWarps, int kDepth, bool kOffC, int kGroups = 1>
static void run_tiles_t(int pro, const float* x, int64_t x_stride, int64_t n_rows, int64_t k, const uint8_t* w,
                        int64_t n_out, const float* g, float eps, const float* bias, float* y, bool accumulate) {
    using L = TT::TileLayout<kDt, kWM, kMT, kNT, kWarps, kDepth, kOffC, kGroups>;
    Prepared pr;
    prepare(pr, kDt, pro, x, x_stride, n_rows, k, w, n_out, g, eps, bias, y, accumulate);
    strata::cuda::TileParams p = pr.p;
    p.n_row_tiles = (int)((n_rows + L::kRows - 1) / L::kRows);
    p.n_tiles = p.n_row_tiles * (int)((n_out + L::kNO - 1) / L::kNO);
    p.skip_dead = g_skip_dead ? 1 : 0;
    CHECK(L::kBytes <= (int)sizeof(g_emu_smem), "smem %d", L::kBytes);
    memset(g_emu_smem, 0xFF, sizeof(g_emu_smem));
    static int pending = 0;
    const unsigned gx = (unsigned)std::max(1, p.n_tiles / 2);  // fewer CTAs than tiles: the tile loop runs
    run_grid(gx, 1, L::kCtaThreads, [p] {
        TT::int_tiles_kernel<kDt, kWM, kMT, kNT, kWarps, kDepth, kOffC, kGroups>(p);
        if (emu_pending_copies() != 0) pending++;
    });
    CHECK(pending == 0, "cp.async copies left pending");
}

// `choice` = a launch choice of cuda_int_mma_tiles.cu (TT::choice_of): shape + kShapes·depth, or kPlain +
// shape + kShapes·(depth == 2) with Q4_0's offset in the float subtraction. Shapes 0 = 128 x 64, 1 = 64 x 64,
// 2 = 32 x 64, 3 = 128 x 128 on 16 warps (whose depth 1 is its depth 0), 4 = 128 x 16, 5 = 128 x 32,
// 6 = 128 x 48.
// The K split: TT::ksplit_choice (32 x 64 or 64 x 64 at depth 2, two groups of 8 warps; the 64 x 64 one
// exchanges 16 totals a lane instead of 8).
static constexpr int ch(int shape, int depth, bool offset_c = false) { return TT::choice_of(shape, depth, offset_c); }
static constexpr int ks(bool offset_c = false, int shape = 2) { return TT::ksplit_choice(offset_c, shape); }

template <int kDt, int kDepth, bool kOffC>
static void run_tiles_depth(int shape, int pro, const float* x, int64_t x_stride, int64_t n_rows, int64_t k,
                            const uint8_t* w, int64_t n_out, const float* g, float eps, const float* bias, float* y,
                            bool accumulate) {
    if (shape == 0) run_tiles_t<kDt, 4, 2, 4, 8, kDepth, kOffC>(pro, x, x_stride, n_rows, k, w, n_out, g, eps, bias, y, accumulate);
    else if (shape == 1) run_tiles_t<kDt, 4, 1, 4, 8, kDepth, kOffC>(pro, x, x_stride, n_rows, k, w, n_out, g, eps, bias, y, accumulate);
    else if (shape == 2) run_tiles_t<kDt, 2, 1, 2, 8, kDepth, kOffC>(pro, x, x_stride, n_rows, k, w, n_out, g, eps, bias, y, accumulate);
    else if (shape == 4) run_tiles_t<kDt, 8, 1, 2, 8, kDepth, kOffC>(pro, x, x_stride, n_rows, k, w, n_out, g, eps, bias, y, accumulate);
    else if (shape == 5) run_tiles_t<kDt, 8, 1, 4, 8, kDepth, kOffC>(pro, x, x_stride, n_rows, k, w, n_out, g, eps, bias, y, accumulate);
    else if (shape == 6) run_tiles_t<kDt, 8, 1, 6, 8, kDepth, kOffC>(pro, x, x_stride, n_rows, k, w, n_out, g, eps, bias, y, accumulate);
    else run_tiles_t<kDt, 4, 2, 4, 16, kDepth == 1 ? 0 : kDepth, kOffC>(pro, x, x_stride, n_rows, k, w, n_out, g, eps, bias, y, accumulate);
}

template <int kDt>
static void run_tiles_dt(int choice, int pro, const float* x, int64_t x_stride, int64_t n_rows, int64_t k,
                         const uint8_t* w, int64_t n_out, const float* g, float eps, const float* bias, float* y,
                         bool accumulate) {
    if (choice == ks(true, 1)) return run_tiles_t<kDt, 4, 1, 4, 8, 2, true, 2>(pro, x, x_stride, n_rows, k, w, n_out, g, eps, bias, y, accumulate);
    if (choice == ks(false, 1)) return run_tiles_t<kDt, 4, 1, 4, 8, 2, false, 2>(pro, x, x_stride, n_rows, k, w, n_out, g, eps, bias, y, accumulate);
    if (choice == ks(true)) return run_tiles_t<kDt, 2, 1, 2, 8, 2, true, 2>(pro, x, x_stride, n_rows, k, w, n_out, g, eps, bias, y, accumulate);
    if (choice == ks(false)) return run_tiles_t<kDt, 2, 1, 2, 8, 2, false, 2>(pro, x, x_stride, n_rows, k, w, n_out, g, eps, bias, y, accumulate);
    const int shape = choice % TT::kShapes;
    if (choice >= TT::kPlain) {
        if ((choice - TT::kPlain) / TT::kShapes == 0) run_tiles_depth<kDt, 0, true>(shape, pro, x, x_stride, n_rows, k, w, n_out, g, eps, bias, y, accumulate);
        else run_tiles_depth<kDt, 2, true>(shape, pro, x, x_stride, n_rows, k, w, n_out, g, eps, bias, y, accumulate);
        return;
    }
    const int depth = choice / TT::kShapes;
    if (depth == 0) run_tiles_depth<kDt, 0, false>(shape, pro, x, x_stride, n_rows, k, w, n_out, g, eps, bias, y, accumulate);
    else if (depth == 1) run_tiles_depth<kDt, 1, false>(shape, pro, x, x_stride, n_rows, k, w, n_out, g, eps, bias, y, accumulate);
    else run_tiles_depth<kDt, 2, false>(shape, pro, x, x_stride, n_rows, k, w, n_out, g, eps, bias, y, accumulate);
}

// A kernel that stands in for the tile kernel in one_tiles (test_int_wgmma.cpp runs one_tiles' checks on the
// wgmma kernel: `shape` is then its configuration).
using RunKernel = void (*)(int dt, int shape, int pro, const float* x, int64_t x_stride, int64_t n_rows, int64_t k,
                           const uint8_t* w, int64_t n_out, const float* g, float eps, const float* bias, float* y,
                           bool accumulate);
static RunKernel g_run_instead = nullptr;

static void run_tiles(int dt, int shape, int pro, const float* x, int64_t x_stride, int64_t n_rows, int64_t k,
                      const uint8_t* w, int64_t n_out, const float* g, float eps, const float* bias, float* y,
                      bool accumulate) {
    if (g_run_instead) return g_run_instead(dt, shape, pro, x, x_stride, n_rows, k, w, n_out, g, eps, bias, y, accumulate);
    if (dt == STRATA_Q4_0) run_tiles_dt<STRATA_Q4_0>(shape, pro, x, x_stride, n_rows, k, w, n_out, g, eps, bias, y, accumulate);
    else if (dt == STRATA_Q8_0) run_tiles_dt<STRATA_Q8_0>(shape, pro, x, x_stride, n_rows, k, w, n_out, g, eps, bias, y, accumulate);
    else if (dt == STRATA_Q4_1) run_tiles_dt<STRATA_Q4_1>(shape, pro, x, x_stride, n_rows, k, w, n_out, g, eps, bias, y, accumulate);
    else if (dt == STRATA_Q6_K) run_tiles_dt<STRATA_Q6_K>(shape, pro, x, x_stride, n_rows, k, w, n_out, g, eps, bias, y, accumulate);
    else run_tiles_dt<STRATA_Q4_K>(shape, pro, x, x_stride, n_rows, k, w, n_out, g, eps, bias, y, accumulate);
}

static void one_tiles(int dt, int shape, int pro, int64_t k, int64_t n_out, int64_t n_rows, int pad, bool bias_on,
                      bool acc_on, bool with_old) {
    if (dt == STRATA_Q6_K || dt == STRATA_Q4_K) k = (k + 255) / 256 * 256;  // whole super-blocks (the deep table's 800 / 1568: 4 / 7)
    const int64_t in_k = pro == STRATA_PROLOGUE_SILU_MUL ? 2 * k : k;
    const int64_t stride = in_k + (rng() % 3);
    // y rows n_out + ygap apart (strata_matmul_ex's y_row_stride): the gap columns must stay as they were.
    const int64_t ygap = (n_rows + pad) % 3, ys = n_out + ygap;
    const StrideScope stride_scope(ys);
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
    const float* bp = bias_on ? bias.data() : nullptr;
    run_tiles(dt, shape, pro, x.data(), stride, n_rows, k, wp, n_out, g.data(), eps, bp, y.data(), acc_on);
    int gap_changed = 0;
    for (int64_t r = 0; r < n_rows; ++r)
        for (int64_t c = n_out; c < ys; ++c) gap_changed += bits(y[r * ys + c]) != bits(y0[r * ys + c]);
    CHECK(gap_changed == 0, "one_tiles dt %d y stride %ld: %d gap columns written", dt, (long)ys, gap_changed);
    int bad_old = 0;
    if (with_old) {  // the older int8 tensor-core kernel (Q6_K: the dp4a kernel) on the same inputs
        std::vector<float> yo = y0;
        run_int(dt, pro, x.data(), stride, n_rows, k, wp, n_out, g.data(), eps, bp, yo.data(), acc_on, 1000,
                dt == STRATA_Q6_K ? 0 : 2, ys);
        for (size_t i = 0; i < y.size(); ++i) bad_old += bits(yo[i]) != bits(y[i]);
    }
    const int64_t rb = rowbytes(dt, k);
    int bad = 0, far = 0, swapped_same = 0;
    for (int64_t r = 0; r < n_rows; ++r) {
        const float* xr = x.data() + r * stride;
        Act a = ref_act(pro, xr, g.data(), k);
        for (int64_t o = 0; o < n_out; ++o) {
            const float ref = ref_out(dt, pro, a, wp + o * rb, k, eps, bp, o, y0[r * ys + o], acc_on);
            if (bits(ref) != bits(y[r * ys + o])) ++bad;
            if (dt == STRATA_Q6_K &&
                bits(ref_out(dt, pro, a, wp + o * rb, k, eps, bp, o, y0[r * ys + o], acc_on, false, true)) ==
                    bits(y[r * ys + o]))
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
    CHECK(bad == 0, "tiles shape %d dt %d pro %d k %ld n_out %ld rows %ld pad %d: %d outputs differ from the canonical bits",
          shape, dt, pro, (long)k, (long)n_out, (long)n_rows, pad, bad);
    CHECK(bad_old == 0, "tiles shape %d dt %d pro %d k %ld n_out %ld rows %ld: %d outputs differ from int_mma_kernel",
          shape, dt, pro, (long)k, (long)n_out, (long)n_rows, bad_old);
    if (dt == STRATA_Q6_K)
        CHECK(swapped_same * 10 <= n_rows * n_out, "tiles Q6_K negative control: %d of %ld outputs equal with swapped half scales",
              swapped_same, (long)(n_rows * n_out));
    CHECK(far == 0, "tiles dt %d pro %d k %ld rows %ld: %d outputs outside the int8 bound of float64", dt, pro, (long)k,
          (long)n_rows, far);
}

#ifndef STRATA_TEST_INT_TILES_NO_MAIN  // test_int_wgmma.cpp includes this file for one_tiles
int main(int argc, char** argv) {
    setvbuf(stdout, nullptr, _IOLBF, 0);  // FAIL lines as they happen
    const std::string what = argc > 1 ? argv[1] : "";
    const bool smoke = what == "smoke";
    const int only_dt = argc > 2 && what == "dtype" ? std::atoi(argv[2]) : -1;
    const int dts[5] = {STRATA_Q4_0, STRATA_Q8_0, STRATA_Q4_1, STRATA_Q4_K, STRATA_Q6_K};
    if (smoke) {
        // The few-row shapes (128 x 16, 128 x 32) as the default routing picks them (Q4_0 with the offset,
        // depths 0 and 2) and plain (Q6_K: the lm_head's type), rows that fill one, two and three row tiles
        // (9, 16, 20, 33), a partial output tile, more slices than stages.
        one_tiles(STRATA_Q4_0, ch(4, 0, true), 0, 1600, 150, 16, 0, true, false, true);
        one_tiles(STRATA_Q4_0, ch(5, 2, true), 1, 1056, 150, 20, 2, false, true, true);
        one_tiles(STRATA_Q6_K, ch(4, 0), 2, 768, 131, 9, 4, false, false, true);
        one_tiles(STRATA_Q8_0, ch(5, 0), 2, 576, 140, 33, 0, true, true, true);
        // The 48-row shape (routing v9: 33-48 rows where its tiles fill the GPU): as routed (Q4_0 with the
        // offset at depth 0, an interior tile beside a partial one), 33 rows (15 zero rows in the tile),
        // 49 rows (a second row tile of one row), Q6_K plain at depth 2.
        one_tiles(STRATA_Q4_0, ch(6, 0, true), 0, 1600, 300, 48, 0, true, false, true);
        one_tiles(STRATA_Q4_0, ch(6, 0, true), 1, 576, 150, 33, 2, false, true, true);
        one_tiles(STRATA_Q6_K, ch(6, 2), 2, 768, 131, 49, 4, false, false, true);
        // Interior tiles (all outputs and rows, a tile after them: stage_slice's fast form) beside a
        // partial output tile and a partial slice; Q6_K's 210-byte slices move each row's phase per slice.
        one_tiles(STRATA_Q4_0, ch(0, 0, true), 0, 576, 300, 64, 2, false, false, true);
        one_tiles(STRATA_Q6_K, ch(1, 0), 1, 768, 200, 64, 0, true, false, true);
        // The 128 x 128 tile on 16 warps as the default routing picks it at 128+ rows (Q4_0 with the
        // offset, depth 2): 131 rows, so the second row tile has 3 live rows and 12 idle warps.
        one_tiles(STRATA_Q4_0, ch(3, 2, true), 1, 576, 123, 131, 0, true, false, true);
        // The K split (two groups of 8 warps on alternate slices, group 1's totals handed to group 0):
        // as routed (32 x 64, Q4_0 with the offset; Q6_K plain) and the forced 64 x 64; one slice (group 1
        // idle), 3 and 7 slices (group 0 has the last), 4 (group 1 has the last, partial); 2 and 3 row tiles
        // on half as many CTAs, so the stage rings and the exchange buffers wrap across tiles.
        one_tiles(STRATA_Q4_0, ks(true), 0, 96, 45, 70, 0, true, false, true);
        one_tiles(STRATA_Q4_0, ks(true), 1, 1568, 100, 130, 2, false, true, true);
        one_tiles(STRATA_Q4_0, ks(false), 2, 800, 45, 64, 4, true, true, true);
        one_tiles(STRATA_Q6_K, ks(false), 0, 768, 70, 70, 2, false, false, true);
        one_tiles(STRATA_Q8_0, ks(false, 1), 1, 576, 77, 70, 0, true, false, true);
        for (int shape = 0; shape < 3; ++shape) {
            one_tiles(dts[shape], shape, shape, 576, 77, 70, 2, shape == 1, shape == 2, true);
            one_tiles(STRATA_Q4_K, shape, 2 - shape, 512, 77, 70, 2 * shape, shape == 0, shape == 1, true);
            one_tiles(STRATA_Q6_K, shape, (shape + 1) % 3, 768, 77, 70, 2 + 2 * shape, shape == 1, shape == 0, true);
        }
    }
    if (what == "" || what == "v1" || what == "dtype") {
        // Depth 0, 64-row shapes (the kernel as first shipped).
        // k: one partial slice; 2 full + 1 partial slice (rows of 324/612/360 bytes: every 16-byte phase);
        // 3 full slices. n_out: a partial tile of every shape. Rows: 1, 5, 64 (one full row tile), 70, 130.
        // Q4_K and Q6_K: 1, 2 and 3 whole super-blocks (row phases 0, 2, 4, 6 from the padding; Q6_K's
        // slices also move the phase by 2 bytes each).
        const int64_t ks[3] = {96, 576, 768}, ks_k[3] = {256, 512, 768};
        const int64_t rows[5] = {1, 5, 64, 70, 130};
        int cfg = 0;
        for (int dt : dts)
            for (int shape = 0; shape < 3; ++shape)
                for (int pro = 0; pro < 3; ++pro) {
                    ++cfg;
                    if (only_dt >= 0 && dt != only_dt) continue;
                    const int64_t k = (dt == STRATA_Q4_K || dt == STRATA_Q6_K ? ks_k : ks)[(cfg + pro) % 3];
                    const int64_t n_out = shape == 0 ? 150 : (shape == 1 ? 77 : 45);
                    const int64_t nr = rows[cfg % 5];
                    one_tiles(dt, shape, pro, k, n_out, nr, 2 * (cfg % 4), cfg % 3 == 0, cfg % 3 == 1, cfg % 2 == 0);
                }
    }
    if (what == "" || what == "deep") {
        // The deeper pipelines (depth 1: 3-4 stages; depth 2: up to 6), Q4_0's −8·sx in the float
        // subtraction (depths 0 and 2) and the 128-row tile: the configurations the routings pick, Q4_0
        // first, then Q8_0 and Q4_1 (the layout and the pipeline are dtype-independent code). k of 1568 (6 full slices + one of 1 block: more slices
        // than stages, the slots wrap around) or 800 (fewer slices than stages); one or two tiles
        // (the emulator's cost is per tile and slice).
        struct Deep { int dt, choice; };
        const Deep deep[] = {  // in the order of what the routings use most (the default first)
            {STRATA_Q4_0, ch(3, 2)}, {STRATA_Q4_0, ch(2, 2)}, {STRATA_Q4_0, ch(3, 2, true)}, {STRATA_Q4_0, ch(2, 0, true)},
            {STRATA_Q8_0, ch(3, 2)}, {STRATA_Q4_0, ch(0, 0)}, {STRATA_Q4_0, ch(1, 1)}, {STRATA_Q8_0, ch(2, 2)},
            {STRATA_Q4_0, ch(0, 0, true)}, {STRATA_Q4_1, ch(2, 2)}, {STRATA_Q4_0, ch(0, 2)}, {STRATA_Q4_0, ch(1, 2, true)},
            {STRATA_Q4_0, ch(3, 0)}, {STRATA_Q4_0, ch(2, 1)}, {STRATA_Q8_0, ch(1, 2)}, {STRATA_Q4_1, ch(3, 0)},
            {STRATA_Q6_K, ch(2, 2)}, {STRATA_Q6_K, ch(3, 2)}, {STRATA_Q6_K, ch(0, 0)}, {STRATA_Q6_K, ch(1, 2, true)},
            {STRATA_Q4_0, ch(4, 0, true)}, {STRATA_Q4_0, ch(5, 2, true)}, {STRATA_Q6_K, ch(5, 0)}, {STRATA_Q4_K, ch(4, 2)},
            {STRATA_Q4_0, ks(true)}, {STRATA_Q4_0, ks()}, {STRATA_Q8_0, ks()}, {STRATA_Q4_1, ks()}, {STRATA_Q4_K, ks()},
            {STRATA_Q6_K, ks()}, {STRATA_Q4_0, ks(true, 1)}, {STRATA_Q4_1, ks(false, 1)},
            {STRATA_Q4_0, ch(6, 2, true)}, {STRATA_Q8_0, ch(6, 0)}, {STRATA_Q4_K, ch(6, 1)}, {STRATA_Q4_1, ch(6, 0)}};
        const int n_deep = (int)(sizeof(deep) / sizeof(deep[0]));
        const int from = argc > 2 ? atoi(argv[2]) : 0, to = argc > 3 ? std::min(atoi(argv[3]), n_deep) : n_deep;
        for (int i = from; i < to; ++i) {
            const int c = deep[i].choice, shape = TT::choice_shape(c), pro = i % 3;
            // k 1600 (6 full slices + one of 2 blocks, rows of an even number of blocks) with a base
            // padding of 0 or 4 bytes: every row 4-byte aligned, the kernel's fast block loop.
            const int64_t k = i % 4 == 3 ? 800 : (i % 4 == 2 || i == 8 || i == 12 ? 1600 : 1568);
            const int64_t n_out = shape == 1 ? 61 : (shape == 2 ? 45 : 123);             // one partial tile
            const int64_t nr = shape == 3 ? (i == 0 ? 131 : 70) : shape == 6 ? (i % 2 ? 97 : 40)  // 1 to 3 row tiles
                             : shape >= 4 ? (i % 2 ? 33 : 16)
                             : (i % 2 ? 70 : 9);
            fprintf(stderr, "deep %d/%d: dt %d choice %d pro %d k %ld n_out %ld rows %ld\n", i + 1, n_deep, deep[i].dt, c,
                    pro, (long)k, (long)n_out, (long)nr);
            one_tiles(deep[i].dt, c, pro, k, n_out, nr, 2 * (i % 4), i % 3 == 0, i % 3 == 1, i == 2 || i == 7);
        }
    }
    // Negative control: the same kernel on weights with one block scale changed must change some output.
    {
        const int64_t k = 576, n_out = 40, n_rows = 9;
        std::vector<float> x(n_rows * k), y1(n_rows * n_out, 0.0f), y2(n_rows * n_out, 0.0f);
        for (auto& v : x) v = randn();
        auto w = random_weights(STRATA_Q4_0, n_out, k, 0);
        run_tiles(STRATA_Q4_0, 2, 0, x.data(), k, n_rows, k, w.data(), n_out, nullptr, 0, nullptr, y1.data(), false);
        w[18 * 5] ^= 0x10;  // row 0, block 5: scale bits
        run_tiles(STRATA_Q4_0, 2, 0, x.data(), k, n_rows, k, w.data(), n_out, nullptr, 0, nullptr, y2.data(), false);
        int differ = 0;
        for (size_t i = 0; i < y1.size(); ++i) differ += bits(y1[i]) != bits(y2[i]);
        CHECK(differ > 0, "the negative control (a changed weight scale) changed no bit");
    }
    // Negative control of the idle warps: idling also the warps with up to 8 live rows (32 x 64 at 70 rows:
    // the second row tile's first warp row has 6) must leave some kept output unwritten.
    {
        const int64_t k = 576, n_out = 45, n_rows = 70;
        std::vector<float> x(n_rows * k), y1(n_rows * n_out, 0.0f), y2(n_rows * n_out, 0.0f);
        for (auto& v : x) v = randn();
        auto w = random_weights(STRATA_Q4_0, n_out, k, 0);
        run_tiles(STRATA_Q4_0, ch(2, 2), 0, x.data(), k, n_rows, k, w.data(), n_out, nullptr, 0, nullptr, y1.data(), false);
        TT::g_emu_idle_slack = 8;
        run_tiles(STRATA_Q4_0, ch(2, 2), 0, x.data(), k, n_rows, k, w.data(), n_out, nullptr, 0, nullptr, y2.data(), false);
        TT::g_emu_idle_slack = 0;
        int differ = 0;
        for (size_t i = 0; i < y1.size(); ++i) differ += bits(y1[i]) != bits(y2[i]);
        CHECK(differ > 0, "the negative control (warps with live rows idled) changed no bit");
    }
    // Negative control of the K split: group 0 adding its slice and group 1's next as one sum (t + (a + x)
    // instead of (t + a) + x) must change some bit against the canonical order.
    {
        const int64_t k = 1568, n_out = 45, n_rows = 64;
        std::vector<float> x(n_rows * k), y1(n_rows * n_out, 0.0f), y2(n_rows * n_out, 0.0f);
        for (auto& v : x) v = randn();
        auto w = random_weights(STRATA_Q4_0, n_out, k, 0);
        run_tiles(STRATA_Q4_0, ks(true), 0, x.data(), k, n_rows, k, w.data(), n_out, nullptr, 0, nullptr, y1.data(), false);
        TT::g_emu_ksplit_negative = true;
        run_tiles(STRATA_Q4_0, ks(true), 0, x.data(), k, n_rows, k, w.data(), n_out, nullptr, 0, nullptr, y2.data(), false);
        TT::g_emu_ksplit_negative = false;
        int differ = 0;
        for (size_t i = 0; i < y1.size(); ++i) differ += bits(y1[i]) != bits(y2[i]);
        CHECK(differ > 0, "the K split's negative control (group 1's totals added in another association) changed no bit");
        printf("K split negative control: %d of %zu outputs changed\n", differ, y1.size());
    }
    printf("test_int_tiles: %d checks, %d failures\n", checks, fails);
    return fails ? 1 : 0;
}
#endif

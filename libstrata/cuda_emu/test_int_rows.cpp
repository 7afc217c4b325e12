// test_int_rows.cpp — the few-row integer tensor-core kernel (cuda_int_rows.cu)
// under the host emulator. Reuses test_int.cpp's host reference of the
// canonical integer-matmul arithmetic (its main renamed away) and requires,
// for Q4_0, Q8_0 and Q4_1, every prologue, bias and accumulate, 8/16/32-row
// CTAs, every output-group width (16, 32, 64 outputs), CTAs of 8 and of 16
// warps (the 16-warp kernel: two warps share a unit's rows at 16 and 32
// rows) and parts of 1 to 32 slices (small shared-memory budgets force the
// short parts), 1 to 64 rows
// (one row tile or several), k with full and partial slices and several
// parts, n_out not a multiple of the CTA and misaligned weight rows:
//  - every output bit-identical to the reference, to the older dp4a kernel
//    (int_dot_kernel) on the same inputs, and between 8 and 16 warps;
//  - within the int8-activation bound of a float64 product;
//  - no cp.async copy left pending.
// Also: rows_pick's choices at 8B shapes on 132 SMs (every SM busy) at both
// warp counts, and a negative control (one block's scale changed must change
// some output) at both.
// early [smoke]: the same checks with the first tile's first parts' weights requested before the wait
// (STRATA_INT_EARLY_STAGES), and its negative control (smoke: one prologue per dtype).
// Usage: test_int_rows [smoke | sweep | early [smoke]] (sweep: only the rows 1..64 part)
#define main test_int_main
#include "test_int.cpp"
#undef main
#include "cuda_int_rows.cu"

namespace TR = strata::cuda::T_cuda_int_rows;

template <int kDt, int kNT, int kW>
static void run_rows_t(const TR::RowsParams& p) {
    static int pending = 0;
    pending = 0;
    const unsigned gx = (unsigned)std::max(1, p.n_tiles / 2);  // fewer CTAs than tiles: the tile loop runs
    run_grid(gx, 1, 32 * kW, [p] {
        TR::int_rows_kernel<kDt, kNT, kW>(p);
        if (emu_pending_copies() != 0) pending++;
    });
    CHECK(pending == 0, "cp.async copies left pending");
}

template <int kDt, int kW>
static void run_rows_w(const TR::RowsParams& p, int kr) {
    if (kr == 8) run_rows_t<kDt, 1, kW>(p);
    else if (kr == 16) run_rows_t<kDt, 2, kW>(p);
    else run_rows_t<kDt, 4, kW>(p);
}

template <int kDt>
static void run_rows_dt(const TR::RowsParams& p, int kr, int warps) {
    if (warps == 16) run_rows_w<kDt, 16>(p, kr);
    else run_rows_w<kDt, 8>(p, kr);
}

// The pre-pass (as launch_int_matmul runs it), then the few-row kernel with kr rows per CTA, mg
// output groups (0: rows_pick's choice for `sms` SMs), `budget` bytes of shared memory and `warps`
// warps per CTA.
// RowsParams::early for every run (the `early` mode: 1; its negative control: 2).
static int g_rows_early = 0;

static void run_rows(int dt, int pro, const float* x, int64_t x_stride, int64_t n_rows, int64_t k, const uint8_t* w,
                     int64_t n_out, const float* g, float eps, const float* bias, float* y, bool accumulate, int kr,
                     int mg, int64_t budget, int sms, int warps) {
    const int64_t nb = k / 32;
    const int nchunks = (int)((nb + 7) / 8), nbp = (int)((nb + 1) / 2 * 2);
    std::vector<uint8_t> xq(n_rows * k + 16);
    std::vector<uint2> meta(n_rows * nbp + 2);
    std::vector<float> ssq(n_rows * nchunks);
    int8_t* xq16 = reinterpret_cast<int8_t*>(xq.data() + (16 - reinterpret_cast<uintptr_t>(xq.data()) % 16) % 16);
    uint2* meta16 = reinterpret_cast<uintptr_t>(meta.data()) % 16 ? meta.data() + 1 : meta.data();
    I::PreParams pp{x, x_stride, k, (int)nb, nbp, nchunks, pro, g, xq16, meta16, ssq.data()};
    run_grid((unsigned)n_rows, (unsigned)nchunks, 256, [&] {
        if (pro == STRATA_PROLOGUE_RMSNORM) I::int_prepass_kernel<STRATA_PROLOGUE_RMSNORM>(pp);
        else if (pro == STRATA_PROLOGUE_SILU_MUL) I::int_prepass_kernel<STRATA_PROLOGUE_SILU_MUL>(pp);
        else I::int_prepass_kernel<STRATA_PROLOGUE_NONE>(pp);
    });
    TR::RowsParams p{};
    p.xq = xq16; p.meta = meta16; p.ssq = ssq.data();
    p.n_rows = n_rows; p.k = k; p.n_out = n_out; p.w_row_bytes = nb * bbytes(dt);
    p.nb = (int)nb; p.nbp = nbp; p.n_slices = nchunks;
    p.w = w; p.w_end = w + n_out * p.w_row_bytes;
    p.bias = bias; p.y = y; p.y_stride = g_y_stride > 0 ? g_y_stride : n_out; p.accumulate = accumulate; p.prologue = pro; p.eps = eps;
    const int got = TR::rows_pick(p, kr, bbytes(dt), sms, budget, budget, mg, warps);
    CHECK(got > 0 && (mg == 0 || got == mg), "rows_pick gave %d (asked %d)", got, mg);
    p.early = g_rows_early;
    const int64_t smem = p.rsq_off + kr * 4;
    CHECK(smem <= budget && smem <= (int64_t)sizeof(g_emu_smem), "smem %ld over budget %ld", (long)smem, (long)budget);
    if (got <= 0 || smem > (int64_t)sizeof(g_emu_smem)) return;
    memset(g_emu_smem, 0xFF, sizeof(g_emu_smem));  // unstaged rows and windows hold garbage
    if (dt == STRATA_Q4_0) run_rows_dt<STRATA_Q4_0>(p, kr, warps);
    else if (dt == STRATA_Q8_0) run_rows_dt<STRATA_Q8_0>(p, kr, warps);
    else run_rows_dt<STRATA_Q4_1>(p, kr, warps);
}

static int n_parts_seen[33];

static void one_rows(int dt, int pro, int64_t k, int64_t n_out, int64_t n_rows, int pad, bool bias_on, bool acc_on,
                     int kr, int mg, int64_t budget, bool with_old) {
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
    run_rows(dt, pro, x.data(), stride, n_rows, k, wp, n_out, g.data(), eps, bp, y.data(), acc_on, kr, mg, budget, 132, 8);
    int gap_changed = 0;
    for (int64_t r = 0; r < n_rows; ++r)
        for (int64_t c = n_out; c < ys; ++c) gap_changed += bits(y[r * ys + c]) != bits(y0[r * ys + c]);
    CHECK(gap_changed == 0, "one_rows dt %d y stride %ld: %d gap columns written", dt, (long)ys, gap_changed);
    // The 16-warp kernel on the same inputs: the same bits as the 8-warp one (and so the reference below).
    std::vector<float> y16 = y0;
    run_rows(dt, pro, x.data(), stride, n_rows, k, wp, n_out, g.data(), eps, bp, y16.data(), acc_on, kr, mg, budget, 132, 16);
    int bad_w = 0;
    for (size_t i = 0; i < y.size(); ++i) bad_w += bits(y16[i]) != bits(y[i]);
    for (int warps : {8, 16}) {
        TR::RowsParams q{};
        q.n_rows = n_rows; q.n_out = n_out; q.nb = (int)(k / 32); q.n_slices = (q.nb + 7) / 8;
        TR::rows_pick(q, kr, bbytes(dt), 132, budget, budget, mg, warps);
        n_parts_seen[std::min(q.ps, 32)]++;
    }
    int bad_old = 0;
    if (with_old) {  // the older dp4a kernel (8-row tiles, or one row) on the same inputs
        std::vector<float> yo = y0;
        run_int(dt, pro, x.data(), stride, n_rows, k, wp, n_out, g.data(), eps, bp, yo.data(), acc_on, 1000, 0, ys);
        for (size_t i = 0; i < y.size(); ++i) bad_old += bits(yo[i]) != bits(y[i]);
    }
    const int64_t rb = k / 32 * bbytes(dt);
    int bad = 0, far = 0;
    for (int64_t r = 0; r < n_rows; ++r) {
        const float* xr = x.data() + r * stride;
        Act a = ref_act(pro, xr, g.data(), k);
        for (int64_t o = 0; o < n_out; ++o) {
            const float ref = ref_out(dt, pro, a, wp + o * rb, k, eps, bp, o, y0[r * ys + o], acc_on);
            if (bits(ref) != bits(y[r * ys + o])) ++bad;
            double exact = 0, bound = 0, mag = 0;
            for (int64_t b = 0; b < k / 32; ++b) {
                int q[32]; float d, m;
                ref_block(dt, wp + o * rb + b * bbytes(dt), q, d, m);
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
    CHECK(bad == 0, "rows kr %d mg %d budget %ld dt %d pro %d k %ld n_out %ld rows %ld pad %d: %d outputs differ from the canonical bits",
          kr, mg, (long)budget, dt, pro, (long)k, (long)n_out, (long)n_rows, pad, bad);
    CHECK(bad_w == 0, "rows kr %d mg %d budget %ld dt %d pro %d k %ld n_out %ld rows %ld: %d outputs differ between 8 and 16 warps",
          kr, mg, (long)budget, dt, pro, (long)k, (long)n_out, (long)n_rows, bad_w);
    CHECK(bad_old == 0, "rows kr %d mg %d dt %d pro %d k %ld n_out %ld rows %ld: %d outputs differ from int_dot_kernel",
          kr, mg, dt, pro, (long)k, (long)n_out, (long)n_rows, bad_old);
    CHECK(far == 0, "rows dt %d pro %d k %ld rows %ld: %d outputs outside the int8 bound of float64", dt, pro, (long)k,
          (long)n_rows, far);
}

static int kr_for(int64_t rows) { return rows <= 8 ? 8 : (rows <= 16 ? 16 : 32); }

// STRATA_INT_EARLY_STAGES (RowsParams::early = 1): the first tile's first parts' weights requested before
// the wait must give every bit of the reference, over parts of 1 to several slices, 8/16/32-row CTAs,
// every dtype and prologue; the negative control (early = 2: the tiles take those weights as requested
// though none were) must change outputs.
static void early_cases(bool small) {
    const int64_t big = 227 * 1024;
    const int dts[3] = {STRATA_Q4_0, STRATA_Q8_0, STRATA_Q4_1};
    g_rows_early = 1;
    int cfg = 0;
    for (int dt : dts)
        for (int pro = 0; pro < 3; ++pro) {
            ++cfg;
            if (small && pro != (cfg - 1) / 3) continue;  // smoke: one prologue per dtype
            const int64_t k = cfg % 2 ? 32 * 8 * 10 : 32 * 8 * 5 + 64, nr = cfg % 3 == 0 ? 5 : (cfg % 3 == 1 ? 13 : 31);
            const int mg = 1 << (cfg % 3);
            TR::RowsParams q{};
            q.nb = (int)(k / 32); q.n_slices = (q.nb + 7) / 8;
            const int64_t min_b = TR::rows_layout(q, kr_for(nr), mg, bbytes(dt), 0);  // one slice a part
            one_rows(dt, pro, k, mg == 1 ? 45 : 77, nr, 2 * (cfg % 3), cfg % 2 == 0, pro == 1, kr_for(nr), mg,
                     cfg % 2 ? min_b : big, true);
            printf("early config %d (dt %d pro %d mg %d k %ld rows %ld): %d checks, %d failures so far\n", cfg, dt, pro,
                   mg, (long)k, (long)nr, checks, fails);
        }
    // The negative control: the same inputs with early = 0 and early = 2.
    const int64_t k = 32 * 8 * 10, n_out = 45, nr = 6;
    std::vector<float> x(nr * k), g(k), y0(nr * n_out, 0.0f), y2(nr * n_out, 0.0f);
    for (auto& v : x) v = randn();
    for (auto& v : g) v = 1.0f;
    auto w = random_weights(STRATA_Q4_0, n_out, k, 0);
    TR::RowsParams q{};
    q.nb = (int)(k / 32); q.n_slices = (q.nb + 7) / 8;
    const int64_t min_b = TR::rows_layout(q, 8, 1, bbytes(STRATA_Q4_0), 0);
    const StrideScope stride_scope(n_out);
    g_rows_early = 0;
    run_rows(STRATA_Q4_0, 0, x.data(), k, nr, k, w.data(), n_out, g.data(), 1e-5f, nullptr, y0.data(), false, 8, 1, min_b,
             132, 8);
    g_rows_early = 2;
    run_rows(STRATA_Q4_0, 0, x.data(), k, nr, k, w.data(), n_out, g.data(), 1e-5f, nullptr, y2.data(), false, 8, 1, min_b,
             132, 8);
    g_rows_early = 0;
    int differ = 0;
    for (size_t i = 0; i < y0.size(); ++i) differ += bits(y0[i]) != bits(y2[i]);
    CHECK(differ > 0, "early stages negative control: the tiles skipped weights nobody requested, yet no output changed");
    printf("early stages negative control: %d of %zu outputs differ\n", differ, y0.size());
}

int main(int argc, char** argv) {
    setvbuf(stdout, nullptr, _IOLBF, 0);
    if (argc > 1 && std::string(argv[1]) == "early") {
        early_cases(argc > 2 && std::string(argv[2]) == "smoke");
        printf("test_int_rows early: %d checks, %d failures\n", checks, fails);
        return fails ? 1 : 0;
    }
    const bool smoke = argc > 1 && std::string(argv[1]) == "smoke";
    const bool sweep = argc > 1 && std::string(argv[1]) == "sweep";  // only rows 1..64
    const int dts[3] = {STRATA_Q4_0, STRATA_Q8_0, STRATA_Q4_1};
    const int64_t big = 227 * 1024;  // the H200's per-CTA opt-in shared memory
    if (smoke) {
        one_rows(STRATA_Q4_0, 0, 576, 77, 4, 2, true, false, 8, 2, big, true);
        one_rows(STRATA_Q8_0, 1, 32 * 8 * 5 + 64, 70, 13, 0, false, true, 16, 1, 80 * 1024, true);
        one_rows(STRATA_Q4_1, 2, 96, 66, 33, 4, false, false, 32, 4, big, true);
    } else {
        // Every dtype x prologue x output-group width, with k of one partial slice, 2 full + 1 partial
        // slices (rows of 324/612/360 bytes: every 16-byte phase), 5 full + 1 partial slices and 10
        // slices (several parts, but one at 16-output CTAs with the whole budget); budgets that force
        // parts of 1-2 slices; n_out a partial CTA of every width; rows cycling through 2..45.
        const int64_t ks[4] = {96, 576, 32 * 8 * 5 + 64, 32 * 8 * 10};
        const int64_t rows[12] = {2, 3, 4, 5, 7, 8, 9, 13, 16, 17, 31, 45};
        int cfg = 0;
        for (int dt : sweep ? std::vector<int>{} : std::vector<int>(dts, dts + 3))
            for (int pro = 0; pro < 3; ++pro)
                for (int mg = 1; mg <= 4; mg *= 2) {
                    ++cfg;
                    const int64_t k = ks[(cfg + pro) % 4];
                    const int64_t n_out = mg == 1 ? 45 : (mg == 2 ? 77 : 150);
                    const int64_t nr = rows[cfg % 12];
                    // The budget: all the device has, a quarter of the way down to one slice per part, or exactly that.
                    TR::RowsParams q{};
                    q.nb = (int)(k / 32); q.n_slices = (q.nb + 7) / 8;
                    const int64_t min_b = TR::rows_layout(q, kr_for(nr), mg, bbytes(dt), 0);  // the same at 16 warps
                    const int64_t budget = cfg % 3 == 0 ? big : (cfg % 3 == 1 ? min_b + (big - min_b) / 4 : min_b);
                    one_rows(dt, pro, k, n_out, nr, 2 * (cfg % 4), cfg % 3 == 0, cfg % 3 == 1, kr_for(nr), mg, budget,
                             cfg % 2 == 0);
                    printf("config %d (dt %d pro %d mg %d k %ld rows %ld): %d checks, %d failures so far\n", cfg, dt,
                           pro, mg, (long)k, (long)nr, checks, fails);
                }
        // Rows 1..64 (8/16/32-row CTAs, one row tile or several), a cheap shape, the launcher's width choice;
        // also 8-row CTAs over 20 and 64 rows (3 and 8 row tiles).
        for (int64_t nr = 1; nr <= 64; ++nr)
            one_rows(dts[nr % 3], (int)(nr % 3), nr % 2 ? 96 : 320, 37, nr, 2 * (int)(nr % 3), nr % 4 == 0, nr % 5 == 0,
                     kr_for(nr), 0, big, nr % 8 == 1);
        one_rows(STRATA_Q4_0, 1, 576, 40, 20, 0, false, true, 8, 0, big, true);
        one_rows(STRATA_Q8_0, 0, 320, 33, 64, 2, true, false, 8, 0, big, false);
        printf("rows 1..64 done: %d checks, %d failures so far\n", checks, fails);
    }
    // rows_pick at 8B shapes (Q4_0, 132 SMs, 227 KB): every SM gets a CTA or a whole number of waves.
    {
        struct S { int64_t n_out, k; } shapes[] = {{4096, 4096}, {1024, 4096}, {6144, 4096}, {28672, 4096}, {4096, 14336}, {49152, 4096}};
        for (auto s : shapes)
            for (int kr : {8, 16, 32})
                for (int warps : {8, 16}) {
                    TR::RowsParams q{};
                    q.n_rows = kr; q.n_out = s.n_out; q.nb = (int)(s.k / 32); q.n_slices = (q.nb + 7) / 8;
                    const int mg = TR::rows_pick(q, kr, 18, 132, big, 228 * 1024, 0, warps);
                    const int64_t smem = q.rsq_off + kr * 4;
                    const int units = q.mg * q.ps * TR::rows_split(kr, warps);
                    CHECK(mg > 0 && smem <= big && q.ps >= 1 && q.n_parts * q.ps >= q.n_slices && units <= 2 * warps,
                          "rows_pick n_out %ld k %ld kr %d warps %d: mg %d ps %d smem %ld", (long)s.n_out, (long)s.k, kr,
                          warps, mg, q.ps, (long)smem);
                    printf("rows_pick Q4_0 %ldx%ld kr %d, %d warps: %d outputs per CTA, %d slices per part, %d units, "
                           "%d CTAs, %ld KB\n",
                           (long)s.n_out, (long)s.k, kr, warps, 16 * mg, q.ps, units, q.n_tiles, (long)(smem / 1024));
                }
    }
    // Negative control: the same kernel on weights with one block scale changed must change some output.
    for (int warps : {8, 16}) {
        const int64_t k = 576, n_out = 40, n_rows = 9;
        std::vector<float> x(n_rows * k), y1(n_rows * n_out, 0.0f), y2(n_rows * n_out, 0.0f);
        for (auto& v : x) v = randn();
        auto w = random_weights(STRATA_Q4_0, n_out, k, 0);
        run_rows(STRATA_Q4_0, 0, x.data(), k, n_rows, k, w.data(), n_out, nullptr, 0, nullptr, y1.data(), false, 16, 1, big, 132, warps);
        w[18 * 5] ^= 0x10;  // row 0, block 5: scale bits
        run_rows(STRATA_Q4_0, 0, x.data(), k, n_rows, k, w.data(), n_out, nullptr, 0, nullptr, y2.data(), false, 16, 1, big, 132, warps);
        int differ = 0;
        for (size_t i = 0; i < y1.size(); ++i) differ += bits(y1[i]) != bits(y2[i]);
        CHECK(differ > 0, "the negative control (a changed weight scale, %d warps) changed no bit", warps);
    }
    printf("parts of 1/2/4/8/16/32 slices seen: %d %d %d %d %d %d\n", n_parts_seen[1], n_parts_seen[2], n_parts_seen[4],
           n_parts_seen[8], n_parts_seen[16], n_parts_seen[32]);
    printf("test_int_rows: %d checks, %d failures\n", checks, fails);
    return fails ? 1 : 0;
}

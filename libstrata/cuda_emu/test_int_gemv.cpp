// test_int_gemv.cpp — the memory-bound integer matmul for 1 to 8 rows
// (cuda_int_gemv.cu) under the host emulator. Reuses test_int.cpp's host
// reference of the canonical integer-matmul arithmetic (its main renamed away)
// and requires, for Q4_0, Q8_0, Q4_1, Q4_K and Q6_K, after the pre-pass and with
// the kernel quantizing its rows itself (STRATA_INT_GEMV_FUSE), every prologue, bias and
// accumulate, 1 to 8 rows with each row template that holds them (1, 2, 4, 8),
// aligned and unaligned weight rows (pads of 0, 2, 4, 6 bytes; rows of 324
// bytes at k = 576, whose slices sit at every 16-byte phase), k of 1 slice,
// 2.25 slices (a partial last slice), 5.25, 16 (two rows per warp unit), 32
// and 56 (a row in two chunks), n_out not a multiple of a unit, and persistent
// grids of one SM (many units per warp, both stages cycling) and of 132:
//  - every output bit-identical to the reference, and to the older dp4a
//    kernel (int_dot_kernel) on the same inputs for part of the cases;
//  - gemv_shape's choices at the 8B / 1B / 135M shapes on an H200 (132 SMs,
//    227 KB per CTA, 228 KB per SM) fit and give every SM work.
// Negative controls: the reference with two slices folded in the other order,
// the Q6_K reference with each block's two half scales swapped, and the kernel
// on weights with one block scale changed, must each differ from the kernel's
// output in some bit (so the comparisons can fail).
// Usage: test_int_gemv [smoke]
#define main test_int_main
#include "test_int.cpp"
#undef main
#include "cuda_int_gemv.cu"

namespace TG = strata::cuda::T_cuda_int_gemv;

constexpr int64_t kSmemCta = 227 * 1024, kSmemSm = 228 * 1024;  // the H200's limits

template <int kDt, int kR>
static void run_gemv_r(const TG::GemvParams& p, bool fused) {
    static int pending = 0;
    run_grid((unsigned)p.ctas, 1, 32 * p.warps, [p, fused] {
        if (fused) TG::int_gemv_kernel<kDt, kR, true>(p);
        else TG::int_gemv_kernel<kDt, kR, false>(p);
        if (emu_pending_copies() != 0) pending++;
    });
    CHECK(pending == 0, "cp.async copies left pending");
}

template <int kDt>
static void run_gemv_dt(const TG::GemvParams& p, int kr, bool fused) {
    if (kr == 1) run_gemv_r<kDt, 1>(p, fused);
    else if (kr == 2) run_gemv_r<kDt, 2>(p, fused);
    else if (kr == 4) run_gemv_r<kDt, 4>(p, fused);
    else run_gemv_r<kDt, 8>(p, fused);
}

static int phase_seen[17], multi_unit = 0, chunked = 0;

// The pre-pass (as launch_int_matmul runs it), then the gemv kernel with kr rows per thread and the
// persistent grid gemv_shape picks for `sms` SMs; `fused`: no pre-pass, the kernel quantizes x itself
// (STRATA_INT_GEMV_FUSE=1) and gets no pre-pass buffers.
static void run_gemv(int dt, int pro, const float* x, int64_t x_stride, int64_t n_rows, int64_t k, const uint8_t* w,
                     int64_t n_out, const float* g, float eps, const float* bias, float* y, bool accumulate, int kr,
                     int sms, bool fused = false) {
    const int64_t nb = k / 32;
    const int nchunks = (int)((nb + 7) / 8), nbp = (int)((nb + 1) / 2 * 2);
    std::vector<uint8_t> xq(n_rows * k + 16);
    std::vector<uint2> meta(n_rows * nbp + 2);
    std::vector<float> ssq(n_rows * nchunks);
    int8_t* xq16 = reinterpret_cast<int8_t*>(xq.data() + (16 - reinterpret_cast<uintptr_t>(xq.data()) % 16) % 16);
    uint2* meta16 = reinterpret_cast<uintptr_t>(meta.data()) % 16 ? meta.data() + 1 : meta.data();
    I::PreParams pp{x, x_stride, k, (int)nb, nbp, nchunks, pro, g, xq16, meta16, ssq.data()};
    if (!fused) run_grid((unsigned)n_rows, (unsigned)nchunks, 256, [&] {
        if (pro == STRATA_PROLOGUE_RMSNORM) I::int_prepass_kernel<STRATA_PROLOGUE_RMSNORM>(pp);
        else if (pro == STRATA_PROLOGUE_SILU_MUL) I::int_prepass_kernel<STRATA_PROLOGUE_SILU_MUL>(pp);
        else I::int_prepass_kernel<STRATA_PROLOGUE_NONE>(pp);
    });
    TG::GemvParams p{};
    p.xq = xq16; p.meta = meta16; p.ssq = ssq.data();
    p.n_rows = n_rows; p.k = k; p.n_out = n_out; p.w_row_bytes = rowbytes(dt, k);
    p.nb = (int)nb; p.nbp = nbp; p.n_slices = nchunks;
    p.w = w; p.w_end = w + n_out * p.w_row_bytes;
    p.bias = bias; p.y = y; p.y_stride = g_y_stride > 0 ? g_y_stride : n_out; p.accumulate = accumulate; p.prologue = pro; p.eps = eps;
    if (fused) p.xq = nullptr, p.meta = nullptr, p.ssq = nullptr, p.x = x, p.x_stride = x_stride, p.norm = g;
    const bool ok = TG::gemv_shape(p, kr, slicebytes(dt), sms, kSmemCta, kSmemSm, fused);
    CHECK(ok, "gemv_shape refused k %ld kr %d", (long)k, kr);
    if (!ok) return;
    const int64_t smem = TG::gemv_smem(p);
    CHECK(smem <= kSmemCta && smem <= (int64_t)sizeof(g_emu_smem) && p.ctas >= 1, "shape smem %ld ctas %d", (long)smem,
          p.ctas);
    for (int64_t r = 0; r < std::min<int64_t>(n_out, 64); ++r) phase_seen[(reinterpret_cast<uintptr_t>(w) + r * p.w_row_bytes) % 16]++;
    multi_unit += p.n_groups * p.chunks > (int64_t)p.ctas * p.warps * TG::kGemvStages;  // stages reused
    chunked += p.chunks > 1;
    memset(g_emu_smem, 0xFF, sizeof(g_emu_smem));  // shared memory never written reads as NaN
    if (dt == STRATA_Q4_0) run_gemv_dt<STRATA_Q4_0>(p, kr, fused);
    else if (dt == STRATA_Q8_0) run_gemv_dt<STRATA_Q8_0>(p, kr, fused);
    else if (dt == STRATA_Q4_1) run_gemv_dt<STRATA_Q4_1>(p, kr, fused);
    else if (dt == STRATA_Q4_K) run_gemv_dt<STRATA_Q4_K>(p, kr, fused);
    else run_gemv_dt<STRATA_Q6_K>(p, kr, fused);
}

static int kr_for(int64_t rows) { return rows <= 1 ? 1 : (rows <= 2 ? 2 : (rows <= 4 ? 4 : 8)); }

static void one_gemv(int dt, int pro, int64_t k, int64_t n_out, int64_t n_rows, int pad, bool bias_on, bool acc_on,
                     int kr, int sms, bool with_old) {
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
    run_gemv(dt, pro, x.data(), stride, n_rows, k, wp, n_out, g.data(), eps, bp, y.data(), acc_on, kr, sms);
    int gap_changed = 0;
    for (int64_t r = 0; r < n_rows; ++r)
        for (int64_t c = n_out; c < ys; ++c) gap_changed += bits(y[r * ys + c]) != bits(y0[r * ys + c]);
    CHECK(gap_changed == 0, "one_gemv dt %d y stride %ld: %d gap columns written", dt, (long)ys, gap_changed);
    std::vector<float> yf = y0;  // the same matmul with the kernel quantizing its rows itself
    run_gemv(dt, pro, x.data(), stride, n_rows, k, wp, n_out, g.data(), eps, bp, yf.data(), acc_on, kr, sms, true);
    int bad_fused = 0;
    for (size_t i = 0; i < y.size(); ++i) bad_fused += bits(yf[i]) != bits(y[i]);
    int bad_old = 0;
    if (with_old) {  // the older dp4a kernel (one row, or 8-row tiles) on the same inputs
        std::vector<float> yo = y0;
        run_int(dt, pro, x.data(), stride, n_rows, k, wp, n_out, g.data(), eps, bp, yo.data(), acc_on, 1000, 0, ys);
        for (size_t i = 0; i < y.size(); ++i) bad_old += bits(yo[i]) != bits(y[i]);
    }
    const int64_t rb = rowbytes(dt, k);
    int bad = 0;
    for (int64_t r = 0; r < n_rows; ++r) {
        const Act a = ref_act(pro, x.data() + r * stride, g.data(), k);
        for (int64_t o = 0; o < n_out; ++o) {
            const float ref = ref_out(dt, pro, a, wp + o * rb, k, eps, bp, o, y0[r * ys + o], acc_on);
            if (bits(ref) != bits(y[r * ys + o])) ++bad;
        }
    }
    CHECK(bad == 0, "gemv kr %d sms %d dt %d pro %d k %ld n_out %ld rows %ld pad %d: %d outputs differ from the canonical bits",
          kr, sms, dt, pro, (long)k, (long)n_out, (long)n_rows, pad, bad);
    CHECK(bad_fused == 0, "gemv kr %d sms %d dt %d pro %d k %ld n_out %ld rows %ld: %d outputs differ with the kernel "
          "quantizing its rows itself", kr, sms, dt, pro, (long)k, (long)n_out, (long)n_rows, bad_fused);
    CHECK(bad_old == 0, "gemv kr %d dt %d pro %d k %ld n_out %ld rows %ld: %d outputs differ from int_dot_kernel", kr, dt,
          pro, (long)k, (long)n_out, (long)n_rows, bad_old);
}

int main(int argc, char** argv) {
    setvbuf(stdout, nullptr, _IOLBF, 0);
    const bool smoke = argc > 1 && std::string(argv[1]) == "smoke";
    const int dts[5] = {STRATA_Q4_0, STRATA_Q8_0, STRATA_Q4_1, STRATA_Q4_K, STRATA_Q6_K};
    if (smoke) {
        one_gemv(STRATA_Q4_0, 1, 576, 77, 1, 0, true, false, 1, 132, true);
        one_gemv(STRATA_Q8_0, 2, 32 * 8 * 5 + 64, 70, 5, 2, false, true, 8, 1, true);
        one_gemv(STRATA_Q4_K, 0, 512, 40, 3, 0, true, true, 4, 132, true);
        one_gemv(STRATA_Q6_K, 1, 768, 21, 2, 2, false, false, 2, 132, true);
    }
    {  // one row at the 8B shapes' k (16 slices: two rows a unit; 56: two chunks a row), many units per warp
        one_gemv(STRATA_Q4_0, 1, 4096, 301, 1, 0, false, true, 1, 1, true);
        one_gemv(STRATA_Q8_0, 0, 4096, 77, 1, 0, true, false, 1, 1, true);
        one_gemv(STRATA_Q4_0, 2, 14336, 37, 1, 0, true, true, 1, 1, false);
        one_gemv(STRATA_Q8_0, 2, 14336, 21, 1, 0, false, false, 1, 132, false);
        one_gemv(STRATA_Q4_1, 2, 384, 19, 3, 0, true, true, 4, 132, true);
    }
    if (!smoke) {
        // k: one partial slice (3 blocks); 2 full + 1 partial (k = 576: rows of 324 / 612 / 360 bytes);
        // 5 full + 1 partial; 16 slices (rows 16-byte aligned for every type); one slice (8 blocks);
        // 32 slices. Q4_K / Q6_K: whole super-blocks.
        const int64_t ks[6] = {96, 576, 32 * 8 * 5 + 64, 4096, 256, 8192};
        const int64_t ks_k[6] = {256, 512, 32 * 8 * 5, 4096, 256, 8192};
        int cfg = 0;
        for (int dt : dts)
            for (int pro = 0; pro < 3; ++pro)
                for (int64_t rows = 1; rows <= 8; ++rows) {
                    ++cfg;
                    const int64_t k = (dt == STRATA_Q4_K || dt == STRATA_Q6_K ? ks_k : ks)[(cfg + rows) % 6];
                    const int64_t n_out = k >= 4096 ? 37 : 77;
                    // Row templates: the launcher's (kr_for), and sometimes the next wider one (fewer live rows).
                    const int kr = cfg % 5 == 0 && rows < 8 ? std::min(8, 2 * kr_for(rows)) : kr_for(rows);
                    // Weight alignment: pads 0, 2, 4, 6 bytes (Q6_K: 210-byte slices, every phase in each row).
                    const int pad = 2 * (cfg % 4);
                    one_gemv(dt, pro, k, n_out, rows, pad, cfg % 2 == 0, cfg % 3 == 1, kr, cfg % 2 ? 132 : 1,
                             cfg % 4 == 1);
                    if (rows == 8)
                        printf("dt %d pro %d: rows 1..8 done, %d checks, %d failures so far\n", dt, pro, checks, fails);
                }
        // 56 slices (two chunks a row) for every type, several rows; unaligned rows at 56 slices.
        one_gemv(STRATA_Q4_0, 1, 14336, 9, 3, 0, false, false, 4, 132, false);
        one_gemv(STRATA_Q4_0, 0, 14336, 9, 1, 6, true, false, 1, 1, false);
        one_gemv(STRATA_Q8_0, 2, 14336, 13, 2, 0, true, true, 2, 132, false);
        one_gemv(STRATA_Q4_K, 0, 14336, 11, 7, 0, false, true, 8, 1, true);
        one_gemv(STRATA_Q4_1, 0, 14336, 11, 4, 2, true, false, 4, 132, false);
        one_gemv(STRATA_Q6_K, 2, 14336, 9, 8, 0, true, true, 8, 132, false);
        one_gemv(STRATA_Q6_K, 1, 14336, 9, 1, 4, false, true, 1, 1, false);
    }
    // gemv_shape at the shapes of the 8B (hidden 4096, ffn 14336, vocab 128256), 1B (2048, 8192) and
    // 135M (576, 1536, 49152) models, Q4_0 and Q8_0, on an H200: within its limits, every SM busy where
    // there are at least as many work groups as warps.
    {
        struct S { int64_t n_out, k; } shapes[] = {{6144, 4096}, {4096, 4096}, {28672, 4096}, {4096, 14336},
                                                   {128256, 4096}, {3072, 2048}, {2048, 2048}, {16384, 2048},
                                                   {2048, 8192}, {960, 576}, {576, 576}, {3072, 576}, {576, 1536},
                                                   {49152, 576}};
        for (int dt : {STRATA_Q4_0, STRATA_Q8_0})
            for (auto s : shapes)
                for (int kr : {1, 8}) {
                    TG::GemvParams q{};
                    q.n_rows = kr; q.n_out = s.n_out; q.k = s.k; q.nb = (int)(s.k / 32); q.n_slices = (q.nb + 7) / 8;
                    const bool ok = TG::gemv_shape(q, kr, slicebytes(dt), 132, kSmemCta, kSmemSm, false);
                    const int64_t smem = TG::gemv_smem(q);
                    const int64_t units = q.n_groups * q.chunks;
                    if (!ok) {  // int_gemv_choice then keeps the older kernels (one row always fits)
                        CHECK(kr > 1, "gemv_shape refused dt %d n_out %ld k %ld at one row", dt, (long)s.n_out, (long)s.k);
                        printf("gemv_shape dt %d %ldx%ld kr %d: refused (does not fit)\n", dt, (long)s.n_out, (long)s.k, kr);
                        continue;
                    }
                    CHECK(smem <= kSmemCta && (q.ctas >= 132 || q.n_groups < 132 * q.warps),
                          "gemv_shape dt %d n_out %ld k %ld kr %d: ctas %d", dt, (long)s.n_out, (long)s.k, kr, q.ctas);
                    if (kr == 1 || dt == STRATA_Q4_0)
                        printf("gemv_shape dt %d %ldx%ld kr %d: %d rows a unit, %d chunks, %ld units, %d CTAs x %d warps "
                               "(%.2f groups a warp), %ld B a CTA\n", dt, (long)s.n_out, (long)s.k, kr, q.u, q.chunks,
                               (long)units, q.ctas, q.warps, (double)q.n_groups / (q.ctas * q.warps),
                               (long)smem);
                }
    }
    // Negative controls: (1) the reference with slices 1 and 2 folded the other way must differ from the
    // kernel's output somewhere (the bit comparison sees fold order); (2) one changed block scale must
    // change some output.
    {
        const int64_t k = 32 * 8 * 5, n_out = 64, n_rows = 2;
        std::vector<float> x(n_rows * k), y1(n_rows * n_out, 0.0f), y2(n_rows * n_out, 0.0f);
        for (auto& v : x) v = randn();
        auto w = random_weights(STRATA_Q4_0, n_out, k, 0);
        run_gemv(STRATA_Q4_0, 0, x.data(), k, n_rows, k, w.data(), n_out, nullptr, 0, nullptr, y1.data(), false, 2, 132);
        int same = 0, swapped = 0;
        for (int64_t r = 0; r < n_rows; ++r) {
            const Act a = ref_act(0, x.data() + r * k, nullptr, k);
            for (int64_t o = 0; o < n_out; ++o) {
                const uint8_t* wr = w.data() + o * (k / 32 * 18);
                same += bits(ref_out(STRATA_Q4_0, 0, a, wr, k, 0, nullptr, o, 0, false)) == bits(y1[r * n_out + o]);
                swapped += bits(ref_out(STRATA_Q4_0, 0, a, wr, k, 0, nullptr, o, 0, false, true)) != bits(y1[r * n_out + o]);
            }
        }
        CHECK(same == n_rows * n_out, "negative control setup: %d of %ld outputs match", same, (long)(n_rows * n_out));
        CHECK(swapped > 0, "the negative control (slices folded in another order) changed no bit");
        w[18 * 5] ^= 0x10;  // row 0, block 5: scale bits
        run_gemv(STRATA_Q4_0, 0, x.data(), k, n_rows, k, w.data(), n_out, nullptr, 0, nullptr, y2.data(), false, 2, 132);
        int differ = 0;
        for (size_t i = 0; i < y1.size(); ++i) differ += bits(y1[i]) != bits(y2[i]);
        CHECK(differ > 0, "the negative control (a changed weight scale) changed no bit");
        // Q6_K: the reference with each block's half scales swapped must differ from the kernel.
        auto w6 = random_weights(STRATA_Q6_K, n_out, k, 0);
        run_gemv(STRATA_Q6_K, 0, x.data(), k, n_rows, k, w6.data(), n_out, nullptr, 0, nullptr, y1.data(), false, 2, 132);
        int same6 = 0, swapped6 = 0;
        for (int64_t r = 0; r < n_rows; ++r) {
            const Act a = ref_act(0, x.data() + r * k, nullptr, k);
            for (int64_t o = 0; o < n_out; ++o) {
                const uint8_t* wr = w6.data() + o * rowbytes(STRATA_Q6_K, k);
                same6 += bits(ref_out(STRATA_Q6_K, 0, a, wr, k, 0, nullptr, o, 0, false)) == bits(y1[r * n_out + o]);
                swapped6 += bits(ref_out(STRATA_Q6_K, 0, a, wr, k, 0, nullptr, o, 0, false, false, true)) !=
                            bits(y1[r * n_out + o]);
            }
        }
        CHECK(same6 == n_rows * n_out, "Q6_K negative control setup: %d of %ld outputs match", same6, (long)(n_rows * n_out));
        CHECK(swapped6 > 0, "the negative control (Q6_K half scales swapped) changed no bit");
    }
    printf("weight rows at 16-byte phases 0/2/4/6/8/10/12/14: %d %d %d %d %d %d %d %d; runs with reused stages %d, "
           "chunked rows %d\n", phase_seen[0], phase_seen[2], phase_seen[4], phase_seen[6], phase_seen[8],
           phase_seen[10], phase_seen[12], phase_seen[14], multi_unit, chunked);
    for (int ph = 0; ph < 16; ph += 2) CHECK(phase_seen[ph] > 0, "no weight row at 16-byte phase %d", ph);
    CHECK(multi_unit > 0 && chunked > 0, "the stage reuse or the chunked rows never ran");
    printf("test_int_gemv: %d checks, %d failures\n", checks, fails);
    return fails ? 1 : 0;
}
